"""Billing rules per provider, kept as data with their sources.

These rules change over time; each carries the page it was read from. ``charge`` turns the
priced segments of one instance's life into dollars under the rule.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from spotwise.errors import SpecError, did_you_mean
from spotwise.providers.base import Market


@dataclass(frozen=True)
class BillingRule:
    provider: str
    granularity_s: float  # billed per this many seconds (rounded up)
    minimum_s: float  # minimum billed duration per launch
    free_if_revoked_within_s: float  # provider revocation inside this window: no charge
    notice_lead_s: float  # interruption notice before the instance is taken
    source: str

    def __post_init__(self) -> None:
        if self.granularity_s <= 0:
            raise ValueError(f"granularity_s must be > 0, got {self.granularity_s=}")
        if min(self.minimum_s, self.free_if_revoked_within_s, self.notice_lead_s) < 0:
            raise ValueError(f"billing durations must be >= 0 for {self.provider}")

    def charge(
        self,
        segments: Sequence[tuple[float, float]],
        revoked_by_provider: bool,
        *,
        market: Market | None = None,
    ) -> float:
        """Dollars for one instance life given ``(seconds, price_per_hour)`` segments in order.

        Only a spot life the provider revoked is refunded inside ``free_if_revoked_within_s``
        (AWS's first hour, GCP's first minute): an on-demand life is billed whatever ended it
        (a provider state read as a revocation must not make it free). ``market``: the life's
        market; None (a caller that does not say) is taken as spot, as before it was passed."""
        total_s = sum(s for s, _ in segments)
        refundable = revoked_by_provider and market is not Market.ON_DEMAND
        if refundable and total_s < self.free_if_revoked_within_s:
            return 0.0
        billed_s = max(self.minimum_s, _round_up(total_s, self.granularity_s)) if total_s else 0.0
        cost = sum(s * p for s, p in segments) / 3600.0
        if total_s > 0 and billed_s > total_s:  # rounding / minimum at the last segment's price
            cost += (billed_s - total_s) * segments[-1][1] / 3600.0
        return cost


def _round_up(x: float, g: float) -> float:
    n = -(-x // g)
    return n * g


RULES: dict[str, BillingRule] = {
    "aws": BillingRule(
        provider="aws",
        granularity_s=1.0,
        minimum_s=60.0,
        free_if_revoked_within_s=3600.0,
        notice_lead_s=120.0,
        source=(
            "https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/billing-for-interrupted-spot-"
            "instances.html (interrupted by Amazon EC2 in the first hour: no charge; after it: "
            "the seconds used; stopped or terminated by you: the seconds used) and "
            "https://aws.amazon.com/ec2/spot/pricing/ (per-second billing, 60 s minimum). Holds "
            "for Linux and Windows AMIs; AMIs billed by the hour (SUSE, RHEL in the older "
            "table: full hours, an interrupted partial hour free) are not modelled. 2-minute "
            "interruption notice: "
            "https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/spot-instance-termination-notices.html"
        ),
    ),
    "gcp": BillingRule(
        provider="gcp",
        granularity_s=1.0,
        minimum_s=60.0,
        free_if_revoked_within_s=60.0,
        notice_lead_s=30.0,
        source=(
            "https://cloud.google.com/compute/docs/instances/spot (preempted within the first "
            "minute: not billed; 30 s preemption notice; per-second billing, 1 minute minimum)"
        ),
    ),
    "azure": BillingRule(
        provider="azure",
        granularity_s=1.0,
        minimum_s=300.0,
        free_if_revoked_within_s=0.0,
        notice_lead_s=30.0,
        source=(
            "https://learn.microsoft.com/en-us/answers/questions/2259765/clarification-on-"
            "azure-vm-billing-for-short-runtim (accepted answer, quoting Microsoft's notice: a "
            "5-minute minimum for all VMs, Spot included, from 2025-06-01; per second after "
            "it). Microsoft's pages disagree: the older FAQ "
            "https://azure.microsoft.com/resources/knowledge-center/if-my-virtual-machine-ran-"
            "for-6-minutes-and-45/ bills per full minute the VM runs (6 min 45 s: 6 minutes), "
            "no minimum; the higher estimate is kept, so a budget is not under-counted. No "
            "refund on eviction: "
            "https://learn.microsoft.com/azure/virtual-machines/spot-vms. Scheduled Events "
            "Preempt NotBefore >= 30 s: "
            "https://learn.microsoft.com/azure/virtual-machines/linux/scheduled-events"
        ),
    ),
}


def rule_for(provider: str) -> BillingRule:
    """The billing rule of a provider; ``local`` and ``replay`` bill like the cloud they replay."""
    try:
        return RULES[provider]
    except KeyError:
        raise SpecError(
            f"unknown billing provider {provider!r}{did_you_mean(provider, list(RULES))}; "
            f"valid: {', '.join(RULES)}"
        ) from None
