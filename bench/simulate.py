"""Benchmark: every policy on the same real traces and curves; writes bench/results/simulate*.json.

Run from the repository root with ../shared/data present:

    python bench/simulate.py            # both benchmarks
    python bench/simulate.py tuning     # only `spotwise simulate`
    python bench/simulate.py deadline   # only `spotwise simulate deadline`

Each result holds the exact command line (run through the real CLI in a subprocess), the
seeds, the start points and every number the docs quote (docs/simulation.md).
"""

from __future__ import annotations

import json
import os
import platform
import shlex
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED = Path("../shared/data")  # as typed from the repository root
RESULTS = ROOT / "bench" / "results"

TRACES = SHARED / "spot/skynomad-v100-2023"
CURVES = SHARED / "curves/lcbench"
CBL = SHARED / "spot/cant-be-late-availability/availability/1-node/aws-02-15-2023"
TUNING = f"simulate --traces {TRACES} --curves {CURVES}"
FIVE = "--policy on-demand,spot-greedy,asha,spottune,spotwise"
DEADLINE = (
    f"simulate deadline --traces {CBL} --job-hours 48 --deadline-hours 52 --restart-hours 0.2"
)

BENCHES = {
    # the acceptance runs
    "tuning": ("simulate.json", f"{TUNING} {FIVE} --json"),
    "deadline": (
        "simulate-deadline.json",
        f"{DEADLINE} --policy on-demand,greedy,uniform-progress,spotwise --starts 300 --json",
    ),
    # robustness: the same job over ten seeds (start points and trial draws)
    "tuning-10": ("simulate-10seeds.json", f"{TUNING} {FIVE} --seeds 10 --json"),
    # ablations: what the revocation forecast is worth (p = 0 everywhere)
    "tuning-no-forecast": (
        "simulate-no-forecast.json",
        f"{TUNING} {FIVE} --revocation-model none --json",
    ),
    "deadline-no-forecast": (
        "simulate-deadline-no-forecast.json",
        f"{DEADLINE} --policy uniform-progress,spotwise --starts 300 "
        "--revocation-model none --json",
    ),
}


def run(name: str) -> dict[str, object]:
    out_name, line = BENCHES[name]
    args = shlex.split(line)
    if not (ROOT / SHARED).resolve().exists():
        sys.exit(f"{(ROOT / SHARED).resolve()} is missing: this benchmark needs ../shared/data")
    cmd = [sys.executable, "-m", "spotwise.cli.app", *args]
    t0 = time.monotonic()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=False)
    wall = time.monotonic() - t0
    if proc.returncode != 0:
        sys.exit(f"{shlex.join(args)} failed ({proc.returncode}):\n{proc.stderr}")
    result = json.loads(proc.stdout)
    result["command"] = "spotwise " + shlex.join(args)
    result["bench"] = {
        "wall_seconds_cli": round(wall, 1),
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / out_name).write_text(json.dumps(result, indent=2) + "\n")
    print(f"{result['command']}\n  → bench/results/{out_name} in {wall:.1f} s")
    for policy, summary in result["policies"].items():  # type: ignore[union-attr]
        flat = {k: v for k, v in summary.items() if not isinstance(v, dict)}
        print(f"  {policy:18s} {json.dumps(flat)}")
    return result


if __name__ == "__main__":
    for name in sys.argv[1:] or list(BENCHES):
        if name not in BENCHES:
            sys.exit(f"unknown benchmark {name!r}; valid: {', '.join(BENCHES)}")
        run(name)
