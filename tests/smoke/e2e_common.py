"""What the GCP, Azure and multi-cloud end-to-end tests share: the job they tune, the in-process
CLI call that must refuse a job its trials cannot report from, and the checks of a finished run
(on one emulator, or on several seen as one through :class:`Emulators`)."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml
from vm_emulator import Machine, VmEmulator

ROOT = Path(__file__).resolve().parents[2]
STEADY = ROOT / "tests" / "orchestrator" / "scripts" / "steady_trial.py"
STEPS = 12
TRIALS = 2


def write_job(
    tmp_path: Path,
    provider: dict[str, Any] | Sequence[dict[str, Any]],
    location: str,
    step_s: float = 0.3,
) -> Path:
    """A small job: TRIALS trials of STEPS steps of the steady trial (``step_s`` a step,
    checkpoints every 2 steps) on ``provider`` (or on several), checkpoints at ``location``."""
    providers = [provider] if isinstance(provider, dict) else list(provider)
    spec = {
        "name": "-".join(p["name"] for p in providers) + "-e2e",
        "command": ["python", str(STEADY)],
        "metric": {"name": "score", "direction": "maximize"},
        "steps": STEPS,
        "trials": TRIALS,
        "parallel": TRIALS,
        "search_space": {"lr": {"type": "real", "low": 0.001, "high": 0.1, "log": True}},
        "providers": providers,
        "checkpoint": {"every": 2, "location": location},
        "env": {"STEADY_TRIAL_STEP_S": str(step_s)},
    }
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def tune_cli_fails(spec: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> str:
    """``spotwise tune SPEC`` in this process (the CLI's own entry point): it must exit != 0
    with one line on stderr, which is returned."""
    from spotwise.cli import app

    argv = ["spotwise", "tune", str(spec), "--db", f"sqlite:///{tmp_path / 'cli.db'}"]
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(sys, "argv", argv)
        with pytest.raises(SystemExit) as exit_info:
            app.main()
    assert exit_info.value.code not in (0, None)
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1, lines
    return lines[0]


def events_of(machine: Machine) -> list[dict[str, Any]]:
    """The events the machine's agent uploaded (its trial's, from the artifacts folder)."""
    art = str(machine.spec["artifacts"]).removeprefix("file://")
    path = Path(art) / f"events-{machine.spec['attempt']}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


class Emulators:
    """Several clouds' emulators seen as one by :func:`check_finished_run`: their machines
    (names must not collide), errors, the one preempted machine and each machine's log."""

    def __init__(self, *emulators: VmEmulator) -> None:
        self.emulators = emulators

    @property
    def machines(self) -> dict[str, Machine]:
        out: dict[str, Machine] = {}
        for e in self.emulators:
            assert not set(out) & set(e.machines), "two clouds booted machines of one name"
            out.update(e.machines)
        return out

    @property
    def errors(self) -> list[str]:
        return [err for e in self.emulators for err in e.errors]

    @property
    def hit(self) -> Machine | None:
        hits = [e.hit for e in self.emulators if e.hit is not None]
        assert len(hits) <= 1, "more than one machine was preempted"
        return hits[0] if hits else None

    def log_of(self, name: str) -> str:
        return "".join(e.log_of(name) for e in self.emulators)


def check_finished_run(
    summary: dict[str, Any],
    emu: VmEmulator | Emulators,
    db: str,
    secret: str,
    ended: tuple[str, ...],
) -> tuple[Machine, Machine]:
    """The job finished; every trial completed exactly once; the preempted trial was launched
    again and resumed from its checkpoint (not step 1); the preempted VM's life ended for one
    of the reasons in ``ended``; the bill is not zero. Returns the preempted machine and the
    one that resumed its trial."""
    from spotwise.store import Store

    assert emu.errors == []
    assert summary["state"] == "succeeded", summary
    assert (summary["trials"], summary["completed"]) == (TRIALS, TRIALS), summary
    assert summary["revocations"] == 1 and summary["migrations"] >= 1, summary
    assert summary["cost_usd"] > 0, summary
    hit = emu.hit
    assert hit is not None, "no trial reached a checkpoint to preempt"
    assert "notice" in emu.log_of(hit.name) and "trial exited with 0" in emu.log_of(hit.name)
    stopped = events_of(hit)
    reasons = [e.get("reason") for e in stopped if e["type"] == "stopping"]
    assert reasons == ["signal"], stopped[-3:]  # the agent's SIGTERM on the notice
    trial = hit.spec["trial_id"]
    again = [
        m
        for m in emu.machines.values()
        if m.spec["trial_id"] == trial and m.spec["attempt"] > hit.spec["attempt"]
    ]
    assert len(again) == 1, f"trial {trial} was launched {len(again)} more times"
    resumed = [e["step"] for e in events_of(again[0]) if e["type"] == "report"]
    saved = max(e["step"] for e in stopped if e["type"] == "checkpoint")
    assert resumed[0] == saved + 1 > 1, (saved, resumed[:3])  # from its checkpoint, not step 1
    assert resumed[-1] == STEPS
    assert len(emu.machines) == TRIALS + 1  # no finished trial was launched again

    with Store.open_existing(db) as store:
        job = summary["job_id"]
        trials = store.list_trials(job)
        rows = store.list_instances(job)
    assert sorted(t.state.value for t in trials) == ["completed"] * TRIALS
    per_trial = sorted(sum(r.trial_id == t.id for r in rows) for t in trials)
    assert per_trial == [1, 2], per_trial
    assert not [r for r in rows if r.state in ("requested", "running")]
    reasons = sorted(str(r.end_reason) for r in rows)
    assert reasons.count("completed") == TRIALS and len(reasons) == TRIALS + 1, reasons
    assert set(reasons) - {"completed"} <= set(ended), reasons
    logs = "".join(emu.log_of(name) for name in emu.machines)
    assert secret not in logs and secret not in json.dumps(summary)
    return hit, again[0]
