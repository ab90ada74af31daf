"""``report --json`` with no lives (review-ab F5): ``cost_usd`` and the other money totals summed
an empty list to the int ``0`` where they are floats otherwise, a type change strict parsers
trip on. Every money total is a float now, 0.0 when nothing ended or is held."""

from __future__ import annotations

from spotwise.costs import summarize, tally

MONEY = ("hours", "billed_hours", "cost_usd", "on_demand_cost_usd", "saved_usd")


def test_an_empty_report_has_float_money_totals() -> None:
    out = summarize([], [], {}, by="provider", since=None, now=1_000.0)
    for sec in (out["totals"], out["replay"]["totals"]):
        for key in MONEY:
            assert type(sec[key]) is float and sec[key] == 0.0, key
        assert sec["saved_pct"] is None and sec["lives"] == 0
    for key in ("held_usd_per_hour", "held_simulated_usd_per_hour"):
        assert type(out[key]) is float and out[key] == 0.0, key


def test_an_empty_tally_is_all_floats() -> None:
    got = tally([])
    assert {k: (type(got[k]), got[k]) for k in MONEY} == {k: (float, 0.0) for k in MONEY}
