from __future__ import annotations

import pytest

from spotwise.predictors.throughput import ThroughputModel, relative_speed
from spotwise.providers.base import InstanceType


def hw(gpu: str = "", gpus: int = 0, vcpus: int = 8) -> InstanceType:
    return InstanceType("aws", "us-east-1", "x", vcpus=vcpus, memory_gb=32, gpus=gpus, gpu_name=gpu)


def test_prior_from_hardware_orders_gpus() -> None:
    m = ThroughputModel(reference_seconds=2.0)
    v100 = m.estimate("p3.2xlarge", None, hw("V100", 1))
    assert v100 == pytest.approx(2.0)
    assert (
        m.estimate("p4d", None, hw("NVIDIA A100", 1)) < v100 < m.estimate("g4dn", None, hw("T4", 1))
    )
    # no prior for a CPU-only type: its speed depends on the script's threads (not guessed)
    assert m.estimate("c5", None, hw(vcpus=16)) == v100
    assert relative_speed(hw(vcpus=96)) == 1.0
    assert relative_speed(hw("V100", 4)) == pytest.approx(3.6)
    assert relative_speed(None) == 1.0


def test_learned_mean_wins_and_transfers_by_speed() -> None:
    m = ThroughputModel()
    for s in (1.0, 2.0, 3.0):
        m.observe("p3.2xlarge", "t1", s, hardware=hw("V100", 1))
    assert m.estimate("p3.2xlarge", "t1") == pytest.approx(2.0)
    assert m.observed("p3.2xlarge", "t1") == 3
    # same trial on an A100 never tried: scaled by the speed ratio (2.5x faster)
    assert m.estimate("p4d", "t1", hw("A100", 1)) == pytest.approx(0.8)
    # unseen trial on a seen type: that type's mean
    assert m.estimate("p3.2xlarge", "t9") == pytest.approx(2.0)
    with pytest.raises(ValueError, match="seconds_per_step"):
        m.observe("p3.2xlarge", "t1", 0.0)


def test_round_trip() -> None:
    m = ThroughputModel(1.5)
    m.observe("g4dn", "a", 0.5, hardware=hw("T4", 1))
    m2 = ThroughputModel.from_dict(m.to_dict())
    assert m2.to_dict() == m.to_dict()
    assert m2.estimate("g4dn", "a") == 0.5


def test_the_prior_is_anchored_on_what_was_measured_and_unknown_hardware_is_not_guessed() -> None:
    m = ThroughputModel(reference_seconds=1.0)
    m.observe("g4dn", "a", 9.0, hardware=hw("T4", 1))  # 9 s on a T4: 4.05 s on one V100
    assert m.reference() == pytest.approx(9.0 * 0.45)
    # a trial never seen, on a type never seen: the measured reference over its speed
    assert m.estimate("p4d", "b", hw("A100", 1)) == pytest.approx(9.0 * 0.45 / 2.5)
    # the same trial on a type whose hardware nobody knows: its own speed, not a guess
    bare = InstanceType("aws", "us-east-1", "bare", vcpus=0, memory_gb=0)
    assert m.estimate("bare", "a", bare) == 9.0
    assert relative_speed(bare) == 1.0
