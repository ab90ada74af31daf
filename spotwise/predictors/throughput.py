"""Seconds per training step, per (instance type, trial), learned online from observed steps.

``estimate`` answers, in order:

1. the running mean for (instance type, trial) when that pair has been observed;
2. else, when the trial ran elsewhere, its mean there scaled by the relative speed of the two
   instance types (hardware table below; a type whose hardware is not known counts as as fast
   as the one the trial ran on: its own speed says more than no prior);
3. else the instance type's mean over trials (a trial never seen);
4. else a prior from the hardware alone: ``reference / relative_speed(hardware)``, where the
   reference (seconds per step on one V100) is what the observed types say it is (their means
   times their speeds) once any type with known hardware was observed, ``reference_seconds``
   before.

Relative speed (``RELATIVE_SPEED``): one V100 = 1.0. GPU figures are rough single-GPU training
throughput ratios for mid-sized PyTorch models in FP32/TF32 (vendor peak FP32/tensor numbers and
public MLPerf-style comparisons, rounded): multi-GPU instances count ``gpus × speed × 0.9``
(data-parallel efficiency). CPU-only instance types have no prior: how fast a script runs on
more vCPUs depends on how many threads it uses (a single-threaded one not at all), and a prior
that scaled with vCPUs would send every trial to the biggest box that guess favours and never
try the others; such a type counts as fast as the one a trial was measured on (the planner then
tries the cheapest per hour and measures it). These are priors; one observed step replaces them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol


class Hardware(Protocol):
    """What the speed prior reads: an instance type's catalog entry, or an offer (both carry
    its hardware)."""

    @property
    def vcpus(self) -> int: ...
    @property
    def gpus(self) -> int: ...
    @property
    def gpu_name(self) -> str: ...


RELATIVE_SPEED: dict[str, float] = {
    "K80": 0.25,
    "M60": 0.35,
    "P100": 0.7,
    "T4": 0.45,
    "V100": 1.0,
    "A10G": 1.1,
    "A10": 1.1,
    "L4": 1.0,
    "A100": 2.5,
    "L40S": 2.3,
    "H100": 4.5,
    "H200": 5.0,
}
MULTI_GPU_EFFICIENCY = 0.9
DEFAULT_REFERENCE_SECONDS = 1.0  # seconds per step on one V100 when nothing is known at all


def relative_speed(hardware: Hardware | None) -> float:
    """Speed relative to one V100 (see the module docstring); 1.0 without a prior (no GPU)."""
    if hardware is None:
        return 1.0
    return known_speed(hardware) or 1.0


def known_speed(hardware: Hardware) -> float | None:
    """:func:`relative_speed`, or None when there is no prior: no GPU (a CPU-only type, or an
    offer whose catalog did not say; see the module docstring)."""
    if hardware.gpus > 0:
        name = (hardware.gpu_name or "").upper().replace("NVIDIA", "").replace("TESLA", "").strip()
        per = next(
            (
                s
                for g, s in sorted(RELATIVE_SPEED.items(), key=lambda kv: -len(kv[0]))
                if g.upper() in name
            ),
            1.0,
        )
        return per * (1.0 if hardware.gpus == 1 else hardware.gpus * MULTI_GPU_EFFICIENCY)
    return None


@dataclass
class _Stat:
    n: int = 0
    mean: float = 0.0

    def add(self, x: float) -> None:
        self.n += 1
        self.mean += (x - self.mean) / self.n


class ThroughputModel:
    """Online means of seconds/step, with a hardware prior for offers never tried."""

    def __init__(self, reference_seconds: float = DEFAULT_REFERENCE_SECONDS) -> None:
        if not reference_seconds > 0:
            raise ValueError(f"reference_seconds must be > 0, got {reference_seconds=}")
        self.reference_seconds = reference_seconds
        self._pairs: dict[tuple[str, str], _Stat] = {}
        self._speed: dict[str, float] = {}  # relative speed of instance types seen with hardware
        # indexes of ``_pairs`` (a planner asks for every live trial on every type offered)
        self._types_of: dict[str, list[str]] = {}  # trial → the instance types it was seen on
        self._on_type: dict[str, list[_Stat]] = {}  # instance type → its pairs' stats

    def observe(
        self,
        instance_type: str,
        trial_key: str,
        seconds_per_step: float,
        hardware: Hardware | None = None,
    ) -> None:
        if not seconds_per_step > 0 or seconds_per_step == float("inf"):
            raise ValueError(f"seconds_per_step must be a positive number, got {seconds_per_step=}")
        self._stat(instance_type, trial_key).add(float(seconds_per_step))
        speed = known_speed(hardware) if hardware is not None else None
        if speed is not None:
            self._speed[instance_type] = speed

    def _stat(self, instance_type: str, trial_key: str) -> _Stat:
        s = self._pairs.get((instance_type, trial_key))
        if s is None:
            s = self._pairs[(instance_type, trial_key)] = _Stat()
            self._types_of.setdefault(trial_key, []).append(instance_type)
            self._on_type.setdefault(instance_type, []).append(s)
        return s

    def observed(self, instance_type: str, trial_key: str) -> int:
        s = self._pairs.get((instance_type, trial_key))
        return s.n if s else 0

    def estimate(
        self, instance_type: str, trial_key: str | None, hardware: Hardware | None = None
    ) -> float:
        """Seconds per step of ``trial_key`` on ``instance_type`` (see the module docstring)."""
        speed = known_speed(hardware) if hardware is not None else None
        if speed is None:
            speed = self._speed.get(instance_type)
        if trial_key is not None:
            s = self._pairs.get((instance_type, trial_key))
            if s is not None:
                return s.mean
            # the same trial on other instance types: rescale by relative speed
            others = self._types_of.get(trial_key, [])
            if others:
                est = [self._pairs[(it, trial_key)].mean * self._ratio(it, speed) for it in others]
                return sum(est) / len(est)
        on_type = self._on_type.get(instance_type, [])
        if on_type:
            return sum(st.mean for st in on_type) / len(on_type)
        if speed is None and self._pairs:  # no prior: as fast as what was measured
            return sum(st.mean for st in self._pairs.values()) / len(self._pairs)
        return self.reference() / (speed if speed is not None else 1.0)

    def _ratio(self, seen_on: str, speed: float | None) -> float:
        """How many times slower ``speed`` is than the type ``seen_on``: 1 unless both known."""
        seen = self._speed.get(seen_on)
        return seen / speed if seen is not None and speed is not None else 1.0

    def reference(self) -> float:
        """Seconds per step on one V100: from the observed types of known hardware (their
        means times their speeds), else ``reference_seconds``."""
        known = [
            st.mean * self._speed[it] for (it, _), st in self._pairs.items() if it in self._speed
        ]
        return sum(known) / len(known) if known else self.reference_seconds

    def to_dict(self) -> dict[str, Any]:
        return {
            "reference_seconds": self.reference_seconds,
            "pairs": [
                {"instance_type": it, "trial_key": tk, "n": s.n, "mean": s.mean}
                for (it, tk), s in sorted(self._pairs.items())
            ],
            "speed": dict(sorted(self._speed.items())),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ThroughputModel:
        m = cls(float(d.get("reference_seconds", DEFAULT_REFERENCE_SECONDS)))
        for p in d.get("pairs", []):
            st = m._stat(str(p["instance_type"]), str(p["trial_key"]))
            st.n, st.mean = int(p["n"]), float(p["mean"])
        m._speed = {str(k): float(v) for k, v in d.get("speed", {}).items()}
        return m
