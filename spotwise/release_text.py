"""The words of a `spotwise cancel`: what a finished job's sweep
(:func:`~spotwise.release_sweep.sweep_finished`) found with the job's tags and did with each, and
where it looked; what a release of a dead orchestrator's records did
(:func:`released_text`); the instances left alone (:func:`not_ours_text`).
"""

from __future__ import annotations

from typing import Any

from spotwise.release_reference import _unknown_text


def _found_text(found: list[dict[str, Any]], where: list[str], others: bool = False) -> str:
    """``found 1 instance still running with its tags: i-1 terminated, billed $0.1234 to
    trial T`` (``billed to trial T by another cancel`` where another process billed it first),
    or ``no instance with its tags is left (looked in us-east-1)`` (``others``:
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
        elif f.get("billed_by_another"):  # its record's bill changed since this cancel read it
            parts.append(
                f"{f['instance_id']} terminated, billed to trial {f['trial']} by another cancel "
                f"(or the job's resumed run) (launch {f['launch_id']})"
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


def not_ours_text(lines: list[str]) -> str:
    """``; i-1 carries job J's tags but was not launched by it: left alone (why)``, one part
    per instance :func:`~spotwise.providers.base.launched_by` refused ("" for none): what a
    cancel's message adds for them."""
    return "".join(f"; {line}" for line in lines)


def released_text(job_id: str, released: dict[str, Any]) -> str:
    """``2 tagged instance(s) terminated, 2 instance record(s) closed and billed up to now
    (2 terminated now)``, then which instances stay open and how to retry, and which records
    were billed at an unknown on-demand price."""
    text = (
        f"{len(released['terminated_instances'])} tagged instance(s) terminated, "
        f"{released['closed_records']} instance record(s) closed and billed up to "
        f"{released.get('billed_to', 'now')}"
    )
    how: dict[tuple[int, str], int] = {}
    for r in released["records"]:
        key = {"terminated": (0, "terminated now"), "ended": (1, "already ended")}.get(
            r["outcome"], (2, f"not found in {r['region']}")
        )
        if r["outcome"] != "open":
            how[key] = how.get(key, 0) + 1
    if how:
        text += f" ({', '.join(f'{n} {k}' for (_, k), n in sorted(how.items()))})"
    why = "; ".join(dict.fromkeys(released["errors"]))
    held = released["open_instances"]
    if held:
        text += (
            f"; {len(held)} still open and may still be billed: {', '.join(held)}"
            + (f" ({why})" if why else "")
            + f"; run `spotwise cancel {job_id}` again to retry"
        )
    elif why:
        text += f"; no record of the job was there, but {why}"
    # an ended instance its cloud does not confirm the launch made, billed as the launch's
    text += "".join(f"; {r['note']}" for r in released["records"] if r.get("note"))
    text += not_ours_text(released.get("not_ours", []))  # listed with its tags, not its own
    return text + _unknown_text(released.get("on_demand_unknown", []))
