"""Whether a job's spec holds what looks like a secret (review-at AT3, review-av F4): an ``env``
entry, a ``command`` argument or an AWS ``setup`` line. Not refused (it may be meant), but
:func:`~spotwise.planner.preflight.preflight` warns once per field, naming the field and never the
value: the spec is stored whole in the job's database, and on a cloud it is readable from the
instance's user-data or metadata. Split from :mod:`spotwise.planner.preflight`."""

from __future__ import annotations

import base64
import re

from spotwise.providers.channel import SECRET_ENV
from spotwise.spec import JobSpec

#: ``env`` names that look like a secret (``TOKENIZERS_PARALLELISM`` and ``MAX_TOKENS`` do not)
SECRET_NAME = re.compile(
    r"(?i)secret|passw|credential|api_?key|private_?key|access_?key|(?:^|_)token(?:_|$)"
    r"|(?:^|_)key$"
)
#: names whose value is where a credential is, not the credential (a file, a secret manager's
#: id, name or ARN: ``--secret-id``): not warned about
_A_PATH = re.compile(r"(?i)_(?:file|path|dir|id|name|arn)$|^GOOGLE_APPLICATION_CREDENTIALS$")
#: services whose ``<service>_token``/``_key`` is a credential (``HF_TOKEN``, ``--hub_token``)
_SERVICES = (
    "hf|huggingface|hugging_face|hub|github|gh|gitlab|wandb|openai|anthropic|cohere|slack|kaggle"
)
#: a flag's, ``NAME=``'s or Hydra key's name (snake case) that names a credential (review-av F4):
#: ``token``, a password or secret, an auth/access/.../service's token, an api/private/... key;
#: not ``pad_token``/``eos_token``/``sort_key``/``metric_key``/``key`` (``env``: SECRET_NAME)
_CREDENTIAL_NAME = re.compile(
    r"^token$|(?:^|_)(?:password|passwd|passphrase|secret|apikey)$"
    rf"|(?:^|_)(?:auth|access|bearer|refresh|api|session|security|oauth|sas|bot|{_SERVICES})_token$"
    r"|(?:^|_)(?:api|access|secret|private|auth|signing|encryption|license|subscription"
    rf"|account|storage|master|{_SERVICES})_key$"
)
#: what a value holding a credential looks like (review-at AT3), and how a warning names it;
#: ``Basic`` is :func:`_basic_auth`'s
_SECRET_VALUE = (
    (re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^/?#@\s:]*:[^/?#@\s]+@"), "a URL with a password"),
    (re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[\w-]{20,}@"), "a URL with a token as its user"),
    (
        re.compile(
            r"(?i)[?&](?:x-(?:amz|goog)-(?:signature|credential|security-token)|signature|sig"
            r"|token|access_token|api_?key|key)=[^&#\s]"
        ),
        "a signed URL or a key in a URL's query",
    ),
    (re.compile(r"(?i)\bbearer\s+[\w.~+/=-]{8,}"), "an Authorization header's value"),
    (
        re.compile(  # OpenAI's and Anthropic's keys: sk- and 32+ letters and digits, sk-proj-...
            r"\b(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_\w{20,}|glpat-[\w-]{20,}"
            r"|hf_[A-Za-z0-9]{20,}|sk-(?:[A-Za-z0-9]{32,}|(?:proj|ant|svcacct|admin)-[\w-]{20,})"
            r"|xox[abposr]-[\w-]{10,}|(?:AKIA|ASIA)[0-9A-Z]{16}|AIza[\w-]{35})"
            r"|hooks\.slack\.com/services/"
        ),
        "a token",
    ),
)
#: ``Basic <base64>``, after ``Authorization:`` or not (:func:`_basic_auth`)
_BASIC = re.compile(r"(?i)(authorization\s*:\s*)?\bbasic\s+([A-Za-z0-9+/]+=*)(?![\w+/=.-])")
#: ``NAME=value`` (``export NAME=value``, Hydra's ``+name=value``) and ``--name value``
#: (``--name=value``, Lightning's ``--model.name``) in shell text or a command's arguments; a
#: value taken from elsewhere (``$VAR``, ``$(...)``) is not a secret; the value is looked ahead
#: at, so that one inside it is seen too (a connection string's ``;AccountKey=...``)
_ASSIGNED = re.compile(r"(?:^|[\s;&|(`])(?:export\s+)?[+~]{0,2}([A-Za-z_][\w.-]*)=(?=(\S*))")
_FLAG = re.compile(r"(?<!\S)--?([A-Za-z][\w.-]*)(?:=|\s+)(?=(\S+))")  # --push_to_hub --token
#: no value, or a switch's, is not a secret (``--use_auth_token True``)
_SWITCH = frozenset({"", "true", "false", "yes", "no", "on", "off", "none", "null"})


def secret_env_warnings(spec: JobSpec) -> list[str]:
    """One line per ``env`` entry that looks like a secret (its name matches
    :data:`SECRET_NAME`, unless it names a file or folder, or is a cloud credential variable;
    or its value holds one: :func:`secret_in_text`), and one for a ``command`` or a
    ``setup`` that holds one, naming the field (and the variable or flag) and never the value:
    where it can be read, and what to do instead. Not refused: the user may mean it."""
    cloud = any(p.name != "local" for p in spec.providers)
    where = (
        "readable from the instance's user-data/metadata (by every process on it and anyone "
        "allowed to describe it) and stored in the job's database"
        if cloud
        else "stored in the job's database with the spec"
    )
    instead = (
        "give instances credentials through their identity (instance profile, service "
        "account, managed identity) or fetch the secret from a secret manager in the trial"
        if cloud
        else "export it in the shell that runs spotwise instead: a local trial inherits it"
    )
    found = [
        (f"env.{k}", "looks like a secret" if secret_name(k) else secret_in_text(v))
        for k, v in sorted(spec.env.items())
    ]
    found.append(("command", secret_in_text(" ".join(spec.command))))
    for i, p in enumerate(spec.providers):  # AWS's setup: shell text, often a `git clone URL`
        found.append(
            (f"providers.{i}.options.setup", secret_in_text(str(p.options.get("setup", ""))))
        )
    lines = []
    for field, what in found:
        if what:
            field = field.replace("\r", "\\r").replace("\n", "\\n")  # one line, even for odd keys
            lines.append(f"warning: spec field '{field}' {what}: it is {where}; {instead}")
    return lines


def secret_name(name: str) -> bool:
    """A variable (or flag) name that looks like a secret's, not a file's: :data:`SECRET_NAME`."""
    return bool(SECRET_NAME.search(name) and not _A_PATH.search(name)) or name in SECRET_ENV


def secret_in_text(text: str) -> str:
    """What in ``text`` (a value, shell text, a command's arguments) looks like a secret, as
    the warning says it ("holds a URL with a password"); ``""`` for nothing. A name is read
    by :func:`credential_name`, stricter than an ``env`` name's rule (review-av F4)."""
    for pattern, what in _SECRET_VALUE:
        if pattern.search(text):
            return f"holds {what}"
    if _basic_auth(text):
        return "holds an Authorization header's value"
    for m in _ASSIGNED.finditer(text):
        if credential_name(m[1]) and _literal(m[2]):
            return f"sets {m[1]} to a value written in it"
    for m in _FLAG.finditer(text):
        if credential_name(m[1]) and _literal(m[2]) and not m[2].startswith("-"):
            return f"passes --{m[1].lstrip('-')} a value written in it"
    return ""


def credential_name(name: str) -> bool:
    """Whether a flag's, a variable's or a Hydra key's name (``--hub-token``, ``apiKey``,
    ``db.password``: its last dotted part, in snake case) names a credential itself
    (:data:`_CREDENTIAL_NAME`), or is a cloud credential variable."""
    last = name.rsplit(".", 1)[-1]
    snake = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", last).replace("-", "_").lower()
    return bool(_CREDENTIAL_NAME.search(snake)) or name in SECRET_ENV


def _basic_auth(text: str) -> bool:
    """``Authorization: Basic X``, or ``basic`` followed by base64 (padded to a multiple of
    four) of a printable ``user:password``; not ``--augment basic /data/imagenet/train``."""
    return any(m[1] or _credential_pair(m[2]) for m in _BASIC.finditer(text))


def _credential_pair(encoded: str) -> bool:
    try:  # binascii.Error and UnicodeDecodeError are ValueErrors
        decoded = base64.b64decode(encoded, validate=True).decode() if len(encoded) >= 8 else ""
    except ValueError:
        return False
    user, colon, password = decoded.partition(":")
    return bool(colon and user and password and decoded.isprintable())


def _literal(value: str) -> bool:
    """A value written out, not taken from a variable, a command or a placeholder, nor a
    switch's ``true``/``false``."""
    value = value.strip("'\"")
    return value.lower() not in _SWITCH and not value.startswith(("$", "`", "<", "{"))
