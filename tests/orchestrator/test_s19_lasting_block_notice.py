"""review-ai's findings on the lasting-refusal block (3614841):

- F3: a notice on an offer under a lasting block set the block to the notice's deadline, a
  plain assignment where the rebalance path takes the later end: a 300 s block dropped to the
  notice's 120 s (Azure evicts running VMs and refuses new ones at once when the Spot price
  rises above max_price), and the refused request went out again long before its backoff.
- F2: the no-offer warning said "no capacity ... widen the providers' filters" while the offer
  was refused for its price, and the refusal's hint (raise max_price) reached no one: the
  warning now says the last lasting refusal and its hint."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from spotwise.errors import ProviderError
from spotwise.planner.offer_watch import NoOfferWatch
from spotwise.planner.orchestrator import Orchestrator
from spotwise.providers.base import Market, Notice, NoticeKind, Offer

NOW = 1000.0
KEY = "azure:eastus-1:Standard_NC4as_T4_v3:spot"


class _Provisioner:
    def notices(self) -> list[Notice]:
        return [Notice("i-1", NoticeKind.INTERRUPTION, NOW, NOW + 120.0)]

    def describe(self, tags: Any) -> list[Any]:
        raise ProviderError("not read here")


def _orchestrator() -> Any:
    o: Any = Orchestrator.__new__(Orchestrator)  # the pass's state only: no store, no market
    o.job_id, o.read_failing, o.blocked, o.events = "j-1", {}, {}, []
    o._event = lambda kind, now, *a, **k: o.events.append((kind, k))
    o.backend = SimpleNamespace(
        provisioner=_Provisioner(), info={"tick_s": 0.0}, speedup=1.0, now=lambda: NOW
    )
    life = SimpleNamespace(
        offer=SimpleNamespace(key=KEY, zone="eastus-1"),
        notice_deadline=None,
        exited=True,
        rebalanced=False,
    )
    o.lives = {"i-1": (SimpleNamespace(trial_id="t-1"), life)}
    return o


def test_a_notice_does_not_shorten_a_lasting_block_of_its_offer() -> None:
    o = _orchestrator()
    until = o._block_lasting(KEY, NOW)["blocked_until"]  # another trial's launch, refused
    assert until == NOW + 300.0
    o._collect(NOW)
    assert o.blocked[KEY] == until  # before: NOW + 120 (the notice's deadline)


def test_a_notice_still_blocks_its_offer_to_its_deadline() -> None:
    o = _orchestrator()
    o._collect(NOW)
    assert o.blocked[KEY] == NOW + 120.0


def test_the_no_offer_warning_says_the_last_lasting_refusal_and_its_hint() -> None:
    clock = SimpleNamespace(t=0.0)
    watch = NoOfferWatch("j-1", clock=lambda: clock.t)
    offers = [
        Offer("azure", "eastus", "eastus-1", "Standard_NC4as_T4_v3", Market.SPOT, 0.2, 0.5,
              available=False)
    ]  # fmt: skip
    refused = "azure: SpotPriceGreaterThanProvidedMaxPrice; raise providers[].options.max_price"
    assert watch.note(offers, True, refused) is None
    clock.t = 600.0
    said = watch.note(offers, True, refused)
    assert said is not None
    assert said.startswith(
        f"the one matching offer has had no capacity (the last lasting refusal of a launch: "
        f"{refused}) "
        "for 10 min; spotwise keeps polling"
    )
