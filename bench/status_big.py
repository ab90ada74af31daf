"""Time `spotwise status JOB` (text and ``--json``) on a job with 5,000 instance lives.

    python bench/status_big.py       # 5 rounds each; bench/results/status-big.json

The job (500 trials of 10 lives each, a second apart; 5 old lives still held, the rest ended)
is written straight into a SQLite file in a temporary folder. Each round runs the command in
this process (typer's ``CliRunner``, a 160-column console), text and ``--json`` in
alternation: the database read, the rendering and the printing, not the interpreter's start.
The text lists the 50 newest lives and every one still held (55 rows); ``--json`` all 5,000.
The baseline is the read the text made before it read only what it shows: the core call
``jobs.status(JOB)`` reading every life (``read_all_s``), against ``jobs.status(JOB,
newest=50)`` (``read_newest_s``), in alternation too. The ratios to it, measured in the same
process, are the figures to compare; the absolute seconds depend on the machine and its load.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
OUT = ROOT / "bench" / "results" / "status-big.json"
TRIALS, LIVES_EACH = 500, 10
HELD = 5  # the oldest lives of the first trials: still held, so always listed
T0 = 1_790_000_000.0


def build(db: str) -> None:
    """Job ``j-big``: :data:`TRIALS` trials of :data:`LIVES_EACH` lives each."""
    from sqlmodel import Session

    from spotwise.store import InstanceRow, Store

    spec = json.dumps({"name": "big", "providers": [{"name": "aws"}]})
    with Store.open(db) as s:
        s.create_job("big", spec, "job.yaml", "spot-greedy", "maximize", job_id="j-big")
        s.update_job("j-big", state="running", pid=None, cost_usd=12.5, heartbeat_at=T0 + 9e4)
        for n in range(TRIALS):
            s.add_trial("j-big", n, {"lr": 0.1}, trial_id=f"t-{n:04d}")
        rows = []
        for i in range(TRIALS * LIVES_EACH):
            held = i < HELD
            rows.append(
                InstanceRow(
                    id=f"l-{i:05d}",
                    job_id="j-big",
                    trial_id=f"t-{i // LIVES_EACH:04d}",
                    provider="aws",
                    region="us-east-1",
                    zone="us-east-1a",
                    instance_type="p3.2xlarge",
                    market="spot",
                    offer_key="k",
                    price_per_hour=0.9,
                    state="running" if held else "terminated",
                    requested_at=T0 + i,
                    ended_at=None if held else T0 + i + 1,
                    end_reason=None if held else "completed",
                    cost_usd=0.0025,
                )
            )
        with Session(s.engine) as session:
            session.add_all(rows)
            session.commit()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    from rich.console import Console
    from typer.testing import CliRunner

    from spotwise import jobs
    from spotwise.cli import render
    from spotwise.cli.app import app

    render.console = Console(width=160, highlight=False, color_system=None)
    with tempfile.TemporaryDirectory() as tmp:
        db = f"sqlite:///{Path(tmp) / 'state.db'}"
        build(db)

        def run(*extra: str) -> tuple[float, str]:
            t0 = time.perf_counter()
            done = CliRunner().invoke(app, ["status", "j-big", "--db", db, *extra])
            took = time.perf_counter() - t0
            assert done.exit_code == 0, done.output
            return took, done.stdout

        run()  # imports and the schema check, once

        def read(newest: int | None) -> float:
            t0 = time.perf_counter()
            jobs.status("j-big", db=db, newest=newest)
            return time.perf_counter() - t0

        text_s: list[float] = []
        json_s: list[float] = []
        all_s: list[float] = []
        newest_s: list[float] = []
        for _ in range(args.rounds):
            took, text = run()
            text_s.append(took)
            took, out = run("--json")
            json_s.append(took)
            all_s.append(read(None))
            newest_s.append(read(50))
        rows = sum(1 for line in text.splitlines() if line.lstrip().startswith("t-"))
        listed = len(json.loads(out)["instances"])
    result: dict[str, Any] = {
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": f"{platform.machine()}, {os.cpu_count()} cpus, "
        f"python {platform.python_version()}",
        "instance_lives": TRIALS * LIVES_EACH,
        "trials": TRIALS,
        "command": " ".join(["python", "bench/status_big.py", *sys.argv[1:]]),
        "rounds": args.rounds,
        "baseline": "jobs.status(JOB): every life read (the text's read before newest-N)",
        "read_newest_vs_baseline": round(statistics.median(newest_s) / statistics.median(all_s), 3),
        "read_all_s_median": statistics.median(all_s),
        "read_newest_s_median": statistics.median(newest_s),
        "text_s_median": statistics.median(text_s),
        "json_s_median": statistics.median(json_s),
        "text_rows_shown": rows,
        "json_instances": listed,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
