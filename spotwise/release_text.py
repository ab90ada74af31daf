"""The words of a `spotwise cancel` of a finished job (:func:`~spotwise.release.sweep_finished`):
what it found with the job's tags and did with each, and where it looked.
"""

from __future__ import annotations

from typing import Any


def _found_text(found: list[dict[str, Any]], where: list[str], others: bool = False) -> str:
    """``found 1 instance still running with its tags: i-1 terminated, billed $0.1234 to
    trial T``, or ``no instance with its tags is left (looked in us-east-1)`` (``others``:
    instances with its tags that are not its were found: ``no instance of it is left``)."""
    if not found:
        what = "of it" if others else "with its tags"
        return f"no instance {what} is left (looked in {', '.join(where)})"
    parts = []
    for f in found:
        if f["outcome"] != "terminated":
            parts.append(f"{f['instance_id']} could not be terminated")
        elif f["trial"] is None:
            parts.append(
                f"{f['instance_id']} terminated (its launch tag "
                f"{f['launch_id'] or '(none)'} names no record of this job: not billed)"
            )
        else:
            parts.append(
                f"{f['instance_id']} terminated, billed ${f['billed_usd']:.4f} to trial "
                f"{f['trial']} (launch {f['launch_id']})"
            )
    n = len(found)
    return f"found {n} instance{'s' if n > 1 else ''} still running with its tags: " + "; ".join(
        parts
    )


def _looked_in(spec: Any, held: list[Any]) -> list[str]:
    """Where :func:`~spotwise.planner.reconcile.reconcile_records` lists each provider: AWS
    in each region (the spec's and the records'; none: the default region), GCP the whole
    project, Azure the resource group."""
    out: list[str] = []
    for q in spec.providers:
        if q.name == "aws":
            regions = set(q.regions) | {h.region for h in held if h.provider == "aws" and h.region}
            out += sorted(regions) or ["the AWS default region"]
        elif q.name == "gcp":
            out.append("every zone of the GCP project")
        elif q.name == "azure":
            out.append("the Azure resource group")
        else:
            out.append(q.name)
    return out
