"""Features and labels for revocation prediction from a :class:`TraceSet`, without look-ahead.

Target: for a tick ``t`` at which spot is available in zone ``z``, ``y = 1`` when spot becomes
unavailable in ``z`` at some tick ``t' > t`` with ``times[t'] <= times[t] + H``. Only ticks whose
whole horizon lies inside the trace are labelled.

Every feature of tick ``t`` depends only on ticks ``[t - L, t]`` (``L`` = :func:`lookback_ticks`, a
week plus the sequence length), so computing it on a slice that starts ``L`` ticks earlier gives the
same numbers as on the whole trace; :func:`features_for` relies on that to stay fast.

All features are *zone-agnostic* (no zone identity): a zone's own history, the other zones of the
same instance key ("market" features), price and the clock. A model trained on one set of zones
therefore applies to any other.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

    from spotwise.traces import TraceSet

HOUR = 3600.0
SEQ_FEATURES = (
    "present",
    "avail",
    "revoked",
    "restored",
    "others_avail",
    "region_avail",
    "others_revoked",
    "dlogprice",
    "price_dev",
)
STAT_FEATURES = (
    "log_run_h",
    "log_since_revoke_h",
    "avail_1h",
    "avail_6h",
    "avail_24h",
    "avail_7d",
    "log_rev_6h",
    "log_rev_24h",
    "log_rev_7d",
    "log_hazard_24h",
    "log_hazard_7d",
    "others_avail_1h",
    "others_avail_24h",
    "log_others_rev_1h",
    "others_rev_since_h",
    "price_dev",
    "dprice_1h",
    "dprice_24h",
    "has_price",
    "dow_sin",
    "dow_cos",
)
# Tried and dropped on the validation slice (never the test part): time of day (weak signal,
# memorised by the networks) and the price relative to on-demand (a level that identifies the
# period rather than the risk, and does not transfer across instance types). Day of week stays:
# weekends see about half the weekday revocation rate in the SkyNomad trace.
LAG_FEATURES = ("avail", "others_avail", "region_avail", "dlogprice")
WEEK = 7 * 24 * HOUR


def ticks_for(seconds: float, gap: float) -> int:
    return max(1, round(seconds / gap)) if gap > 0 else 1


def lookback_ticks(gap: float, seq_len: int) -> int:
    return max(ticks_for(WEEK, gap), seq_len) + 1


def zone_parts(name: str, default_key: str) -> tuple[str, str, str]:
    """``us-east-1a`` or ``us-east-1a_v100_1`` → (zone, instance key, region)."""
    zone, _, key = name.partition("_")
    key = key or default_key
    region = zone[:-1] if zone and zone[-1].isalpha() and zone[-2:-1].isdigit() else zone
    return zone, key, region


def _market_weights(zones: list[str], default_key: str) -> tuple[np.ndarray, np.ndarray]:
    """Averaging matrices (Z, Z): other zones of the same key; same key *and* region.

    A zone with no peer averages itself (the feature then carries its own state, in range).
    """
    import numpy as np

    parts = [zone_parts(z, default_key) for z in zones]
    n = len(zones)
    others, region = np.zeros((n, n)), np.zeros((n, n))
    for i, (_, ki, ri) in enumerate(parts):
        for j, (_, kj, rj) in enumerate(parts):
            if i != j and ki == kj:
                others[i, j] = 1.0
                region[i, j] = 1.0 if ri == rj else 0.0
        if others[i].sum() == 0:
            others[i, i] = 1.0
        if region[i].sum() == 0:
            region[i] = others[i]
    return others / others.sum(1, keepdims=True), region / region.sum(1, keepdims=True)


def _wsum(x: np.ndarray, w: int) -> np.ndarray:
    """Sum over the trailing window of ``w`` ticks (truncated at the start), along the last axis."""
    import numpy as np

    c = np.concatenate([np.zeros((*x.shape[:-1], 1)), np.cumsum(x, axis=-1)], axis=-1)
    idx = np.arange(x.shape[-1])
    lo = np.maximum(idx + 1 - w, 0)
    return c[..., idx + 1] - c[..., lo]


def _wmean(x: np.ndarray, w: int) -> np.ndarray:
    import numpy as np

    idx = np.arange(x.shape[-1])
    return _wsum(x, w) / (idx + 1 - np.maximum(idx + 1 - w, 0))


def _since(event: np.ndarray, cap: int) -> np.ndarray:
    """Ticks since the last ``event`` (inclusive of the event tick = 0), capped at ``cap``."""
    import numpy as np

    t = np.arange(event.shape[-1])
    last = np.where(event, t, -(10**9))
    np.maximum.accumulate(last, axis=-1, out=last)
    return np.minimum(t - last, cap)


@dataclass
class Features:
    """Per-tick features of ticks ``start .. stop-1`` of a trace (all arrays float32)."""

    start: int
    seq: np.ndarray  # (Z, S - 1 + n, F_seq): padded history, window of tick i is seq[:, i : i + S]
    stat: np.ndarray  # (Z, n, F_stat)
    seq_len: int

    def windows(self, zi: np.ndarray, ti: np.ndarray) -> np.ndarray:
        """(N, S, F_seq) histories of the samples (zone index, tick index relative to start)."""
        import numpy as np

        offs = np.arange(self.seq_len)
        return self.seq[zi[:, None], ti[:, None] + offs[None, :]]

    def lags(self, zi: np.ndarray, ti: np.ndarray, n_lags: int) -> np.ndarray:
        """(N, n_lags * len(LAG_FEATURES)) lagged values for the logistic baseline."""
        cols = [SEQ_FEATURES.index(f) for f in LAG_FEATURES]
        w = self.windows(zi, ti)[:, -n_lags:, :][:, :, cols]
        return w.reshape(len(zi), -1)


def features_for(ts: TraceSet, start: int, stop: int, seq_len: int) -> Features:
    """Features of ticks ``start .. stop-1``, using history back to ``start - lookback``."""
    import numpy as np

    gap = ts.gap_seconds or (float(np.median(np.diff(ts.times))) if ts.n_ticks > 1 else 1.0)
    big_l = lookback_ticks(gap, seq_len)
    s0 = max(0, start - big_l - seq_len)
    a = ts.available[:, s0:stop].astype(np.float64)
    z, n = a.shape
    prev = np.concatenate([a[:, :1], a[:, :-1]], axis=1)
    revoked = prev * (1 - a)
    restored = (1 - prev) * a
    w_oth, w_reg = _market_weights(ts.zones, ts.instance_type)
    others, region = w_oth @ a, w_reg @ a
    others_rev = w_oth @ revoked

    price = ts.price[:, s0:stop].astype(np.float64)
    has_price = float(np.isfinite(price).all() and (price > 0).all())
    if has_price:
        lp = np.log(price)
        dlp = np.concatenate([np.zeros((z, 1)), np.diff(lp, axis=1)], axis=1)
        price_dev = lp - np.log(_wmean(price, ticks_for(WEEK, gap)))
        d1 = lp - lp[:, np.maximum(np.arange(n) - ticks_for(HOUR, gap), 0)]
        d24 = lp - lp[:, np.maximum(np.arange(n) - ticks_for(24 * HOUR, gap), 0)]
    else:
        dlp = price_dev = d1 = d24 = np.zeros((z, n))

    tph = HOUR / gap  # ticks per hour

    def hours(x: np.ndarray) -> np.ndarray:
        return np.log1p(x / tph)

    run = _since(np.concatenate([np.ones((z, 1), bool), a[:, 1:] != a[:, :-1]], axis=1), big_l)
    since_rev = _since(revoked > 0, big_l)
    oth_since = _since(others_rev > 0, big_l)
    w = {k: ticks_for(k * HOUR, gap) for k in (1, 6, 24, 168)}
    rev = {k: _wsum(revoked, w[k]) for k in (6, 24, 168)}

    def log_hazard(k: int) -> np.ndarray:
        avail_h = _wsum(a, w[k]) / tph
        return np.log((rev[k] + 0.1) / (avail_h + 1.0))

    dow = ((ts.times[s0:stop] / 86400.0 + 3.0) % 7.0) / 7.0 * 2 * math.pi  # 0 = Monday 00:00 UTC
    clock = [np.broadcast_to(fn(dow), (z, n)) for fn in (np.sin, np.cos)]
    stat = np.stack(
        [
            hours(run),
            hours(since_rev),
            _wmean(a, w[1]),
            _wmean(a, w[6]),
            _wmean(a, w[24]),
            _wmean(a, w[168]),
            np.log1p(rev[6]),
            np.log1p(rev[24]),
            np.log1p(rev[168]),
            log_hazard(24),
            log_hazard(168),
            _wmean(others, w[1]),
            _wmean(others, w[24]),
            np.log1p(_wsum(others_rev, w[1])),
            hours(oth_since),
            price_dev,
            d1,
            d24,
            np.full((z, n), has_price),
            *clock,
        ],
        axis=-1,
    )
    seq = np.stack(
        [np.ones((z, n)), a, revoked, restored, others, region, others_rev, dlp * 100, price_dev],
        axis=-1,
    )
    k = start - s0
    seq = seq[:, max(0, k - seq_len + 1) :]
    pad = seq_len - 1 - min(k, seq_len - 1)
    if pad:
        seq = np.concatenate([np.zeros((z, pad, seq.shape[-1])), seq], axis=1)
    return Features(
        start=start,
        seq=seq.astype(np.float32),
        stat=stat[:, k:].astype(np.float32),
        seq_len=seq_len,
    )


def labels(ts: TraceSet, horizon_s: float) -> tuple[np.ndarray, np.ndarray]:
    """``(y, valid)``, (Z, T) bool: revoked within the horizon; tick available and labelled."""
    import numpy as np

    t = ts.times
    end = np.searchsorted(t, t + horizon_s, side="right") - 1  # last tick inside the horizon
    full = t + horizon_s <= t[-1]
    z, n = ts.available.shape
    y = np.zeros((z, n), dtype=bool)
    for i in range(z):
        gone = np.append(np.flatnonzero(~ts.available[i]), n + 1)  # sentinel: never
        y[i] = gone[np.searchsorted(gone, np.arange(n), side="right")] <= end
    return y, ts.available & full[None, :]


@dataclass(frozen=True)
class Split:
    """Chronological split of tick indices: train < val < test; labels never cross a boundary."""

    train: tuple[int, int]
    val: tuple[int, int]
    test: tuple[int, int]

    def to_dict(self) -> dict[str, list[int]]:
        return {"train": list(self.train), "val": list(self.val), "test": list(self.test)}


def chrono_split(
    ts: TraceSet, horizon_s: float, test_fraction: float = 0.3, val_fraction: float = 0.2
) -> Split:
    """Train on the earlier part, validate on the end of it, test on the later part.

    Ticks whose horizon would reach into the next part are dropped from the earlier one (purge),
    so no training label looks at a test tick.
    """
    import numpy as np

    if not 0 < test_fraction < 1:
        raise ValueError(f"test_fraction must be in (0, 1), got {test_fraction=}")
    n = ts.n_ticks
    test0 = round(n * (1 - test_fraction))
    val0 = round(test0 * (1 - val_fraction))

    def purge(stop: int) -> int:
        return (
            int(np.searchsorted(ts.times, ts.times[stop] - horizon_s, side="left"))
            if stop < n
            else n
        )

    return Split(train=(0, purge(val0)), val=(val0, purge(test0)), test=(test0, n))


def samples(
    ts: TraceSet, horizon_s: float, span: tuple[int, int], stride: int = 1
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Labelled samples in ticks ``span``: (zone index, tick index, y)."""
    import numpy as np

    y, valid = labels(ts, horizon_s)
    mask = np.zeros_like(valid)
    mask[:, span[0] : span[1] : stride] = True
    zi, ti = np.nonzero(valid & mask)
    return zi, ti, y[zi, ti]
