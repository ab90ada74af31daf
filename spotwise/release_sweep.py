"""`spotwise cancel` of a finished job whose records are all closed (:func:`sweep_finished`):
an instance of the job that outlived its records is found on its cloud, terminated and billed
to its launch's record (:func:`_bill_outlived`). Split from :mod:`spotwise.release` so that each
file stays readable.
"""

from __future__ import annotations

from typing import Any

from spotwise import release
from spotwise.errors import ProviderError
from spotwise.providers.base import Market
from spotwise.release import _resumed_since, _rule, _sum_job, _whole_life_cost
from spotwise.release_reference import OnDemandReference, _unknown_text
from spotwise.release_text import _found_text, _looked_in, not_ours_text
from spotwise.store.bills import InstanceBills, own_bill


def sweep_finished(store: Any, job: Any, state: str) -> dict[str, Any]:
    """`spotwise cancel` of a finished job whose store holds no open instance record. An
    instance can outlive its records (a create the cloud took although its call failed, then
    "confirmed" clean by a listing that did not show it yet; a stray the drain's last listing
    could not see): on a cloud, every instance carrying the job's tags is listed, in the spec's
    regions and in every region one of the job's records names, and each that a launch of the
    job made (:func:`~spotwise.providers.base.launched_by`: its ``spotwise:launch`` tag names a
    record of the job and the cloud's own identity of it is that launch) and that still holds
    a resource is terminated. Each is billed as the drain's sweep bills a stray: from its start
    (the provider's launch time) to now (a stopped one: to when it stopped), at its record's
    price, to the record its launch tag names, that record's trial and the job; the seconds
    its record already billed are not billed twice. One that no launch of the job made (a
    copy, tags set by hand, another install's job that drew the same id) is left alone, never
    terminated nor billed, and reported (``not_ours``). The on-demand reference: see
    :func:`_bill_outlived`.

    Returns ``message``, ``terminated_instances``, ``found_instances`` (what was found and done
    with each), ``looked_in`` (``on_demand_unknown``, ``not_ours``: as :func:`_release`); a
    local job: today's ``message`` only, nothing listed. A listing or a terminate that failed
    raises :class:`ProviderError` (after billing what was terminated): something may still be
    billed."""
    from spotwise.planner import reconcile as rec
    from spotwise.providers.base import TAG_LAUNCH
    from spotwise.spec import load_stored_spec
    from spotwise.store.models import TERMINAL_INSTANCE_STATES as shut

    spec = load_stored_spec(job.spec_json)
    if spec.providers[0].name == "local":
        return {"message": f"job already {state}"}
    rows = {r.id: r for r in store.list_instances(job.id)}
    named = {q.name for q in spec.providers}
    # every record, the closed ones too: a launch is recorded with its region before the cloud
    # call, so their regions are everywhere the job can have started something
    held = [
        rec.Held(r.id, r.provider, r.region, r.provider_instance_id, closed=r.state in shut)
        for r in rows.values()
        if r.provider in named
    ]
    res = rec.reconcile_records(spec, job.id, held, _resumed_since(store, job.id, set(rows), job))
    now = release.wall_now()  # the cancel's clock (a test gives its own: review-aj N1)
    found: list[dict[str, Any]] = []
    bills = InstanceBills(store, rows)  # each instance decided on its own (review-al F7)
    billed_trials: dict[str, float] = {}
    od_price = OnDemandReference(store, spec, job)
    for inst in {i.instance_id: i for i in res.listed if i.holds_resource()}.values():
        launch = inst.tags.get(TAG_LAUNCH, "")
        one: dict[str, Any] = {
            "instance_id": inst.instance_id,
            "region": inst.offer.region,
            "launch_id": launch or None,
            "trial": None,
            "outcome": "terminated" if inst.instance_id in res.terminated else "open",
            "billed_usd": 0.0,
            "billed_by_another": False,
        }
        row = rows.get(launch)
        if row is not None and one["outcome"] == "terminated":
            one["trial"] = row.trial_id
            # ``bills``: another instance of the same launch is billed on top of this bill
            usd = _bill_outlived(store, row, inst, now, _rule(spec, row.provider), od_price, bills)
            if usd is None:  # another cancel (or the job's resumed run) billed it first
                one["billed_by_another"], usd = True, 0.0
            one["billed_usd"] = usd
            billed_trials[row.trial_id] = billed_trials.get(row.trial_id, 0.0) + usd
        elif row is not None:
            one["trial"] = row.trial_id
        found.append(one)
    # a trial's cost is its lives' sum, set, not added to (two sweeps at once), in one statement
    for trial_id in [trial_id for trial_id, usd in billed_trials.items() if usd]:
        store.update_trial_cost_to_lives(trial_id)
    if billed_trials:  # the job's cost (and on-demand figure) is its instance records' sum
        _sum_job(store, job.id)
    where = _looked_in(spec, held)
    text = f"job already {state}; " + _found_text(found, where, bool(res.not_ours))
    text += not_ours_text(res.not_ours) + _unknown_text(od_price.unknown)
    now_job = store.get_job(job.id)
    if (now_job.state, now_job.ended_at) != (job.state, job.ended_at):
        text += (
            "; the job was resumed meanwhile: what its resumed run holds was left to it "
            f"(`spotwise cancel {job.id}` stops it)"
        )
    if res.errors:  # never "nothing is left" when a region could not be listed
        why = "; ".join(dict.fromkeys(res.errors))
        done = _found_text(found, where) + "; " if found else ""
        done += "".join(f"{line}; " for line in res.not_ours)
        raise ProviderError(
            f"job already {state}; {done}could not make sure that no instance with its tags "
            f"is left (it may still be billed): {why}",
            hint=f"run `spotwise cancel {job.id}` again to retry",
        )
    return {
        "terminated_instances": [f["instance_id"] for f in found if f["outcome"] == "terminated"],
        "found_instances": found,
        "looked_in": where,
        "message": text,
        **({"on_demand_unknown": od_price.unknown} if od_price.unknown else {}),
        **({"not_ours": res.not_ours} if res.not_ours else {}),
    }


def _bill_outlived(
    store: Any,
    row: Any,
    inst: Any,
    now: float,
    rule: Any,
    od_price: OnDemandReference,
    bills: InstanceBills | None = None,
) -> float | None:
    """Bill an instance found after its record ``row`` was closed, terminated now, to that
    record: from its start to now (one stopped: to when it stopped), at the record's price,
    under the provider's billing ``rule``. The record's own instance has had part of that
    billed already (its ``market_seconds``, less those of the parts naming other instances of
    the launch: the whole life is billed again, less that);
    another instance of the same launch (a retried create) is a life of its own. No start
    known: nothing to bill. Only the record's own life gets an on-demand reference
    (``od_price``), for those of the seconds that fall in its useful window (up to its last
    report: an instance outliving a bill that the orchestrator already referenced adds none);
    a failed launch's instance none, as the drain's sweep bills a stray. What is added is a part
    of the record's bill dated as written, naming the instance (:mod:`spotwise.store.bills`),
    written only while the record's bill is still as ``row`` read it *before the instance was
    listed*, and never where a part names the instance already (two cancels, or a cancel and
    the drain's stray sweep, that found the same instance: the second adds nothing, where it
    added a second part, and its trial counted it twice; a record read again after the listing
    held the other's bill already, and was billed twice). A write lost to another process's
    bill of *another* instance of the launch is made again on the record as then read
    (:class:`~spotwise.store.bills.InstanceBills`, review-al F7: the launch's later instances
    were left unbilled). Returns the dollars added (``bills``: the sweep's records, the next
    instance of a launch billed on this one's bill); None: another billed it."""
    bills = bills if bills is not None else InstanceBills(store, {row.id: row})
    own = row.provider_instance_id == inst.instance_id
    start = (row.launched_at if own else None) or inst.launched_at or None
    end = now
    if inst.state.is_terminal() and inst.ended_at is not None:
        end = min(inst.ended_at, now)
    # the record's own life: its bill less the parts of other instances of the launch (a stray
    # billed to it first counted as the own life's: its extra time was under-billed by that)
    life = _OwnLife(row, inst.instance_id) if own else row
    before = life.market_seconds if own else 0.0
    extra_s = max(end - start - before, 0.0) if start is not None else 0.0
    if own:
        usd = _whole_life_cost(life, extra_s, False, rule) - life.cost_usd if extra_s else 0.0
    else:
        usd = rule.charge([(extra_s, row.price_per_hour)], revoked_by_provider=False)
    od = 0.0
    if own and row.state != "failed":
        od = od_price.reference(life, inst, start, extra_s)
    billed = bool(usd or od or extra_s)

    def fields(seen: Any) -> dict[str, Any]:
        """What the bill sets on the record as read (not added to it)."""
        out: dict[str, Any] = {}
        if billed:
            out["ended_at"] = max(seen.ended_at or end, end)
        if seen.launched_at is None and start:
            out["launched_at"] = start
        if not seen.provider_instance_id:
            out["provider_instance_id"] = inst.instance_id
        return out

    add = {"cost_usd": usd, "on_demand_cost_usd": od, "market_seconds": extra_s}
    # a part dated as written, by the cancel's clock once the write holds the lock (counted
    # once: review-af F10; not ``now``, read before the loop: s23, report_I item 3)
    if bills.bill(row.id, inst.instance_id, add, fields, release.wall_now).written is None:
        if row.id in od_price.unknown:  # not billed here: nothing to say of it
            od_price.unknown.remove(row.id)
        return None
    return float(usd)


def _other_lives(
    row: Any, others: list[Any], carry: float, how: Any
) -> dict[str, dict[str, float]]:
    """The bill of each of ``others`` (instances of ``row``'s launch terminated now, none the
    record's own) from its start to now (one stopped: to when it stopped), at the record's
    price, as the drain bills a stray (no on-demand reference); one a part of the record
    names already (the drain's stray sweep billed it) is not billed again. ``carry``: seconds
    of the record's bill that name no instance beyond its own life's, taken off the first."""
    from spotwise.planner.reconcile_ends import stopped_end
    from spotwise.store.bills import billed_instances

    done, out = billed_instances(row), {}
    for inst in sorted(others, key=lambda i: (i.launched_at, i.instance_id)):
        if inst.instance_id in done or not inst.launched_at > 0:  # no start: nothing to bill
            continue
        stop = stopped_end(inst, row.provider)
        life = max(min(stop.get("ended_at") or how.now, how.now) - inst.launched_at, 0.0)
        seconds, carry = life - min(carry, life), carry - min(carry, life)
        took = bool(stop.get("revoked"))  # a GCE VM preempted with STOP: its rule's refund
        usd = 0.0
        if seconds:
            market = Market.ON_DEMAND if row.market == Market.ON_DEMAND else Market.SPOT
            usd = how.rule.charge(
                [(seconds, row.price_per_hour)], revoked_by_provider=took, market=market
            )
        out[inst.instance_id] = {
            "cost_usd": float(usd),
            "on_demand_cost_usd": 0.0,
            "market_seconds": seconds,
        }
    return out


class _OwnLife:
    """Record ``row`` as the bill of its own instance ``instance_id``'s life: its bill columns
    less the parts naming other instances of its launch (:func:`~spotwise.store.bills.own_bill`),
    every other field the record's."""

    def __init__(self, row: Any, instance_id: str | None) -> None:
        self._row = row
        for k, v in own_bill(row, instance_id).items():
            setattr(self, k, v)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._row, name)
