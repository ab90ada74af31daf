"""Benchmark: the README's main job (examples/digits/job.yaml on the replay) under several
policies, repeated; writes bench/results/main-job.json.

Run from the repository root (needs nothing outside it):

    python bench/main_job.py              # 3 runs of each variant
    python bench/main_job.py --runs 5

Each run is the real CLI (`spotwise tune SPEC --json` in a subprocess) on a copy of the example
in a temporary folder, with its own SPOTWISE_HOME and SQLite database, so nothing is written to
the user's. The variants run interleaved (A, B, C, A, B, C, ...) so that a change in the
machine's load falls on each alike. On the replay the market clock runs 300x the wall clock,
so every figure depends on the machine's speed and load (README, "What the main job does"):
compare variants of one run of this script, as ratios to the baseline (spot-greedy), not
across machines.

Per run it records the job's cost and on-demand reference, revocations, migrations, completed
trials, the best metric, wall seconds, and the completed trials whose last life was taken by
the market and billed $0, split by whether the notice came while the trial still worked (AWS
does not bill an instance it takes in its first hour) or after its work ended (the replay must
not let the market take a finished life: review-ab F3).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import closing
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "digits"
RESULTS = ROOT / "bench" / "results"
BASELINE = "spot-greedy"
NOTICE_LEAD_S = 120.0  # AWS's, which the replay plays
VARIANTS: dict[str, tuple[str, dict[str, Any]]] = {  # name: (policy, replay settings changed)
    "spot-greedy": ("spot-greedy", {}),
    "spotwise": ("spotwise", {}),
    "spotwise-no-forecast": ("spotwise", {"forecast": "none"}),
}


def _cli(args: list[str], env: dict[str, str], cwd: Path) -> tuple[int, Any, float]:
    t0 = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "spotwise.cli.app", *args],
        cwd=cwd, env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    wall = time.monotonic() - t0
    try:
        out = json.loads(proc.stdout)
    except json.JSONDecodeError:
        sys.exit(f"spotwise {' '.join(args)} printed no JSON ({proc.returncode}):\n{proc.stderr}")
    return proc.returncode, out, wall


def _free_completed(
    status: dict[str, Any], trials: dict[str, Any], runs: Path, db: Path, speedup: float
) -> tuple[int, int]:
    """Completed trials whose last life ended revoked and billed $0, split by when the market's
    notice was due: while the trial still worked (the market took a working instance, free in
    its first hour as AWS bills it), or after its work ended, at the report of its last step
    (what the replay must not do: review-ab F3). The report's market time is its SDK write
    time mapped through the orchestrator's reading of it (the observation's wall and market
    times); the notice was due ``NOTICE_LEAD_S`` before the deadline its event records."""
    last: dict[str, dict[str, Any]] = {}
    for inst in status["instances"]:  # in launch order
        last[inst["trial"]] = inst
    during = after = 0
    with closing(sqlite3.connect(db)) as con:
        for t in trials["trials"]:
            life = last.get(t["trial"])
            if t["state"] != "completed" or life is None or life["end_reason"] != "revoked":
                continue
            if life["cost_usd"]:
                continue
            tid = t["trial"]
            files = sorted((runs / tid).glob("events-*.jsonl"), key=lambda f: int(f.stem[7:]))
            reports = [
                r
                for r in map(json.loads, files[-1].read_text().splitlines())
                if r.get("type") == "report"
            ]
            wall, market = con.execute(
                "SELECT wall_time, market_time FROM observation WHERE trial_id = ? "
                "ORDER BY step DESC, id DESC LIMIT 1",
                (tid,),
            ).fetchone()
            (detail,) = con.execute(
                "SELECT detail_json FROM event WHERE trial_id = ? AND kind = 'notice' "
                "ORDER BY id DESC LIMIT 1",
                (tid,),
            ).fetchone()
            work_end = market - speedup * (wall - reports[-1]["time"])
            due = json.loads(detail)["deadline"] - NOTICE_LEAD_S
            during, after = (during, after + 1) if work_end < due else (during + 1, after)
    return during, after


def one_run(variant: str, base: Path) -> dict[str, Any]:
    policy, replay = VARIANTS[variant]
    work = Path(tempfile.mkdtemp(prefix=f"main-job-{variant}-", dir=base))
    shutil.copytree(EXAMPLE, work, dirs_exist_ok=True, ignore=shutil.ignore_patterns("checkpoints"))
    spec = yaml.safe_load((EXAMPLE / "job.yaml").read_text())
    spec["providers"][0]["replay"].update(replay)
    (work / "job.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    env = {
        **os.environ,
        "SPOTWISE_HOME": str(work / "home"),
        "SPOTWISE_DB": f"sqlite:///{work / 'home' / 'spotwise.db'}",
    }
    code, out, wall = _cli(["tune", "job.yaml", "--policy", policy, "--json"], env, work)
    if code != 0:
        sys.exit(f"{variant}: tune exited {code}: {json.dumps(out)[:400]}")
    _, status, _ = _cli(["status", out["job_id"], "--json"], env, work)
    _, trials, _ = _cli(["trials", out["job_id"], "--json"], env, work)
    cost, od = out["cost_usd"], out["on_demand_cost_usd"]
    return {
        "variant": variant,
        "cost_usd": cost,
        "on_demand_cost_usd": od,
        "saved_pct": round(100 * (1 - cost / od), 1) if od else None,
        "revocations": out["revocations"],
        "migrations": out["migrations"],
        "completed": out["completed"],
        "best_metric": (out.get("best") or {}).get("metric"),
        "lives": len(status["instances"]),
        **dict(
            zip(
                ("free_completed_noticed_while_working", "free_completed_after_work"),
                _free_completed(
                    status,
                    trials,
                    work / "home" / "runs" / out["job_id"],
                    work / "home" / "spotwise.db",
                    float(spec["providers"][0]["replay"]["speedup"]),
                ),
                strict=True,
            )
        ),
        "wall_seconds": round(wall, 1),
    }


def summarise(runs: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for variant in VARIANTS:
        mine = [r for r in runs if r["variant"] == variant]
        out[variant] = {
            key: round(statistics.median(r[key] for r in mine), 4)
            for key in ("cost_usd", "on_demand_cost_usd", "revocations", "wall_seconds")
        } | {
            key: sum(r[key] for r in mine)
            for key in ("free_completed_noticed_while_working", "free_completed_after_work")
        }
    base = out[BASELINE]["cost_usd"]
    for summary in out.values():
        summary["cost_vs_baseline"] = round(summary["cost_usd"] / base, 3) if base else None
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3, help="runs of each variant (default 3)")
    args = parser.parse_args()
    if args.runs < 1:
        sys.exit("--runs must be 1 or more")
    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="spotwise-bench-") as tmp:
        for i in range(args.runs):
            for variant in VARIANTS:
                r = one_run(variant, Path(tmp))
                runs.append({"run": i, **r})
                print(json.dumps(runs[-1]), flush=True)
    result = {
        "command": f"python bench/main_job.py --runs {args.runs}",
        "spec": "examples/digits/job.yaml",
        "baseline": BASELINE,
        "summary (medians; free_completed_* summed)": summarise(runs),
        "runs": runs,
        "bench": {
            "python": platform.python_version(),
            "machine": platform.machine(),
            "cpus": os.cpu_count(),
            "load_avg_at_end": os.getloadavg()[0],
            "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        },
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "main-job.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result["summary (medians; free_completed_* summed)"], indent=2))


if __name__ == "__main__":
    main()
