"""Cost model (SpotTune, ICDCS 2020, extended): expected dollars per training step of an offer.

* SpotTune: E[sCost] = M · (1 − p) · price, with M seconds per step and p the probability of a
  revocation within the hour (a revoked first hour is refunded on AWS).
* spotwise adds the expected waste: with probability p the instance is revoked; the work since
  the last checkpoint (half an interval on average) and the restart overhead are redone.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class StepCost:
    seconds_per_step: float
    price_per_hour: float
    p_revoke: float = 0.0  # within ``horizon_s``
    horizon_s: float = 3600.0
    refund_first_hour: bool = False  # the provider refunds a revoked first hour (AWS)

    def __post_init__(self) -> None:
        if self.seconds_per_step <= 0:
            raise ValueError(f"seconds_per_step must be > 0, got {self.seconds_per_step=}")
        if not 0.0 <= self.p_revoke <= 1.0:
            raise ValueError(f"p_revoke must be in [0, 1], got {self.p_revoke=}")
        if self.price_per_hour < 0:
            raise ValueError(f"price_per_hour must be >= 0, got {self.price_per_hour=}")

    def price_only(self) -> float:
        """Dollars per step at the list price (what price-only tools minimise)."""
        return self.seconds_per_step * self.price_per_hour / 3600.0

    def spottune(self) -> float:
        """SpotTune's E[sCost] = M · (1 − p) · price (refund of a revoked first hour)."""
        p = self.p_revoke if self.refund_first_hour else 0.0
        return self.price_only() * (1.0 - p)


def on_demand_cost(seconds: float, on_demand_price: float) -> float:
    return seconds * on_demand_price / 3600.0


# ---- spotwise: the expected bill of one instance life under a refund rule ----------------


def hazard(p_revoke: float, horizon_s: float = 3600.0) -> float:
    """Constant revocation rate (per second) that gives probability ``p`` within the horizon."""
    p = min(max(p_revoke, 0.0), 0.999)
    return -math.log1p(-p) / horizon_s if p > 0 else 0.0


def expected_billed_s(lam: float, plan_s: float, refund_s: float) -> float:
    """E[billed seconds] of a life planned to last ``plan_s`` with revocation rate ``lam``.

    A revocation by the provider before ``refund_s`` (AWS: the first hour) is not billed; a
    later one is billed up to the revocation; a life that survives is billed ``plan_s``.
    """
    if plan_s <= 0:
        return 0.0
    if lam <= 1e-12:
        return plan_s
    a = min(refund_s, plan_s)

    def part(x: float) -> float:  # ∫ x λ e^{-λx} dx antiderivative pieces
        return (x + 1.0 / lam) * math.exp(-lam * x)

    revoked_after_refund = part(a) - part(plan_s) if plan_s > a else 0.0
    return revoked_after_refund + plan_s * math.exp(-lam * plan_s)


def expected_loss_s(
    seconds_per_step: float, checkpoint_every: int, checkpoint_s: float, notice_lead_s: float
) -> float:
    """Market seconds of work lost to one revocation (work redone plus the dead notice time).

    A trial checkpoints at step boundaries: on a notice it finishes its step (uniformly far
    from its end) and writes a checkpoint; if that fits in the notice, only the time left in
    the notice is lost; otherwise the work since the last periodic checkpoint is lost too.
    """
    m = seconds_per_step
    fits = min(max((notice_lead_s - checkpoint_s) / m, 0.0), 1.0) if m > 0 else 1.0
    saved_loss = max(notice_lead_s - checkpoint_s - 0.5 * fits * m, 0.0)
    failed_loss = 0.5 * checkpoint_every * m + notice_lead_s
    return fits * saved_loss + (1.0 - fits) * failed_loss


@dataclass(frozen=True)
class LifeCost:
    """Expected dollars and useful seconds of one instance life; ``per_useful_s`` compares them."""

    dollars: float
    useful_s: float

    @property
    def per_useful_s(self) -> float:
        return self.dollars / self.useful_s if self.useful_s > 1e-9 else math.inf


def life_cost(
    *,
    price_per_hour: float,
    p_revoke: float,
    horizon_s: float,
    plan_s: float,
    refund_s: float,
    overhead_s: float,
    loss_s: float,
    checkpoint_overhead: float = 0.0,
) -> LifeCost:
    """Expected bill and useful work of a life of at most ``plan_s`` (overhead included).

    Useful work is the time after the restart overhead that survives, less the expected
    loss at a revocation, less the share spent writing periodic checkpoints.
    """
    lam = hazard(p_revoke, horizon_s)
    billed = expected_billed_s(lam, plan_s, refund_s)
    if lam <= 1e-12:
        alive_after_overhead = max(plan_s - overhead_s, 0.0)
        p_rev = 0.0
    else:
        alive_after_overhead = max(
            (math.exp(-lam * overhead_s) - math.exp(-lam * plan_s)) / lam, 0.0
        )
        p_rev = 1.0 - math.exp(-lam * plan_s)
    useful = max(alive_after_overhead - p_rev * loss_s, 0.0) * (1.0 - checkpoint_overhead)
    return LifeCost(dollars=billed * price_per_hour / 3600.0, useful_s=useful)


def young_daly_every(
    seconds_per_step: float,
    checkpoint_s: float,
    p_revoke: float,
    horizon_s: float,
    notice_lead_s: float,
    max_every: int,
) -> int:
    """Checkpoint interval (steps) minimising checkpoint time plus expected redone work.

    Young/Daly: τ = sqrt(2 C / λ_eff), where λ_eff counts only the revocations whose notice is
    too short for a checkpoint at the next step boundary (the others lose no work).
    """
    m = max(seconds_per_step, 1e-9)
    fits = min(max((notice_lead_s - checkpoint_s) / m, 0.0), 1.0)
    lam_eff = hazard(p_revoke, horizon_s) * (1.0 - fits)
    if lam_eff <= 1e-12 or checkpoint_s <= 0:
        return max_every if checkpoint_s > 0 else 1
    tau = math.sqrt(2.0 * checkpoint_s / lam_eff)
    return int(min(max(round(tau / m), 1), max(max_every, 1)))
