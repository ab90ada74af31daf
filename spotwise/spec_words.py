"""Pydantic's spec errors said in words, with the value meant (for :func:`spec_yaml.error_line`).

* :func:`literal_words`: a value that is none of a field's choices (``providers[].name: lcoal``,
  ``metric.direction: maximise``): pydantic's "Input should be 'local', 'aws', ..." gave no
  did-you-mean (review-ao M1).
* :func:`pattern_words`: a string that does not match a field's pattern (``name: tiny job``):
  the regex said in words, as the README does (review-ao M2).
* :func:`untagged_words`: a search_space parameter without ``type``: the key written for it
  (``typ: real``) named (review-ao M3).
"""

from __future__ import annotations

import re
from typing import Any

from spotwise.errors import did_you_mean

#: a field's pattern -> (what it takes in words, the characters it refuses)
_PATTERNS = {
    r"^[A-Za-z0-9][A-Za-z0-9_.-]*$": (
        "letters, digits, . _ -, a letter or digit first",
        r"[^A-Za-z0-9_.-]+",
    ),
}


def literal_words(expected: str, value: Any, shown: str) -> tuple[str, str]:
    """(what is wrong, the fix) for ``value`` (written ``shown``) that is none of ``expected``
    (pydantic's ``"'local', 'aws', 'gcp' or 'azure'"``)."""
    choices = re.findall(r"'((?:[^'\\]|\\.)*)'", expected)
    close = did_you_mean(value, choices) if isinstance(value, str) and choices else ""
    return f"unknown value {shown}{close}", f"write one of {expected}"


def pattern_words(pattern: str, value: Any, shown: str, key: str) -> tuple[str, str] | None:
    """(what is wrong, the fix) for a string ``value`` that does not match ``pattern``, with a
    value that does (``tiny job`` -> ``tiny-job``); None for a pattern not known here."""
    if pattern not in _PATTERNS:
        return None
    words, refused = _PATTERNS[pattern]
    msg = f"must be {words}, got {shown}"
    meant = re.sub(refused, "-", str(value)).strip("_.-")  # a letter or digit first and last
    ok = meant and str(value).isascii() and re.match(pattern, meant)  # `é`: no guess
    return msg, (f"e.g. {key}: {meant}" if ok else "")


def untagged_words(value: Any) -> tuple[str | None, str, str]:
    """(the key written for ``type``, or None; what is wrong; the fix) for a search_space
    parameter (the mapping ``value``) that pydantic found no ``type`` in."""
    fix = "real, int or categorical"
    keys = [str(k) for k in value] if isinstance(value, dict) else []
    typo = next((k for k in keys if k != "type" and did_you_mean(k, ["type"])), None)
    if typo is None:
        return None, "has no type", f"add type: {fix}"
    return (
        typo,
        f"unknown field{did_you_mean(typo, ['type'])}",
        f"rename it: 'type' ({fix}) is required",
    )
