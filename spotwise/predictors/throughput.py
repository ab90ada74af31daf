"""Seconds per training step, per (instance type, trial), learned online from observed steps.

``estimate`` answers, in order:

1. the running mean for (instance type, trial) when that pair has been observed;
2. else, when the trial ran elsewhere, its mean there scaled by the relative speed of the two
   instance types (hardware table below);
3. else the instance type's mean over trials (a trial never seen);
4. else a prior from the hardware alone: ``reference_seconds / relative_speed(hardware)``.

Relative speed (``RELATIVE_SPEED``): one V100 = 1.0. GPU figures are rough single-GPU training
throughput ratios for mid-sized PyTorch models in FP32/TF32 (vendor peak FP32/tensor numbers and
public MLPerf-style comparisons, rounded): multi-GPU instances count ``gpus × speed × 0.9``
(data-parallel efficiency). CPU-only instances: ``0.02 per vCPU`` (a 32-vCPU box ≈ 0.64 V100),
a deliberately modest figure. These are priors; one observed step replaces them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from spotwise.providers.base import InstanceType

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
CPU_SPEED_PER_VCPU = 0.02
MULTI_GPU_EFFICIENCY = 0.9
DEFAULT_REFERENCE_SECONDS = 1.0  # seconds per step on one V100 when nothing is known at all


def relative_speed(hardware: InstanceType | None) -> float:
    """Speed relative to one V100 (see the module docstring); 1.0 when the hardware is unknown."""
    if hardware is None:
        return 1.0
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
    return max(hardware.vcpus, 1) * CPU_SPEED_PER_VCPU


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

    def observe(
        self,
        instance_type: str,
        trial_key: str,
        seconds_per_step: float,
        hardware: InstanceType | None = None,
    ) -> None:
        if not seconds_per_step > 0 or seconds_per_step == float("inf"):
            raise ValueError(f"seconds_per_step must be a positive number, got {seconds_per_step=}")
        self._pairs.setdefault((instance_type, trial_key), _Stat()).add(float(seconds_per_step))
        if hardware is not None:
            self._speed[instance_type] = relative_speed(hardware)

    def observed(self, instance_type: str, trial_key: str) -> int:
        s = self._pairs.get((instance_type, trial_key))
        return s.n if s else 0

    def estimate(
        self, instance_type: str, trial_key: str | None, hardware: InstanceType | None = None
    ) -> float:
        """Seconds per step of ``trial_key`` on ``instance_type`` (see the module docstring)."""
        speed = relative_speed(hardware) if hardware is not None else self._speed.get(instance_type)
        if trial_key is not None:
            s = self._pairs.get((instance_type, trial_key))
            if s is not None:
                return s.mean
            # the same trial on other instance types: rescale by relative speed
            others = [(it, st) for (it, tk), st in self._pairs.items() if tk == trial_key]
            if others and speed is not None:
                est = [st.mean * self._speed.get(it, 1.0) / speed for it, st in others]
                return sum(est) / len(est)
        on_type = [st.mean for (it, _), st in self._pairs.items() if it == instance_type]
        if on_type:
            return sum(on_type) / len(on_type)
        return self.reference_seconds / (speed if speed is not None else 1.0)

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
            m._pairs[(str(p["instance_type"]), str(p["trial_key"]))] = _Stat(
                int(p["n"]), float(p["mean"])
            )
        m._speed = {str(k): float(v) for k, v in d.get("speed", {}).items()}
        return m
