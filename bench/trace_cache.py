"""Time reading the shipped SkyNomad trace strictly against reading it back from the trace cache.

    python bench/trace_cache.py      # 5 rounds each; bench/results/trace-cache.json

Both are timed in this process, in alternation, with a private cache folder (``SPOTWISE_HOME``
set to a temporary folder): "parse" is :func:`spotwise.trace_csv.read_skynomad_grid` (what every
command paid before the cache), "cached" is :func:`spotwise.traces.load_traces` once its entry
exists (the hash of the file and the ``.npz`` load included). The first, cold
``load_traces`` (parse + write the entry) is reported apart. The result is the ratio of the
medians; the absolute seconds depend on the machine.
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
SHIPPED = ROOT / "spotwise" / "data" / "skynomad-v100-2023"
OUT = ROOT / "bench" / "results" / "trace-cache.json"


def _timed(fn: Any) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    import numpy as np

    from spotwise.trace_csv import read_skynomad_grid
    from spotwise.traces import load_traces

    (csv,) = SHIPPED.glob("*.csv.gz")
    with tempfile.TemporaryDirectory() as home:
        os.environ["SPOTWISE_HOME"] = home
        cold = _timed(lambda: load_traces(SHIPPED))
        parse, cached = [], []
        for _ in range(args.rounds):
            parse.append(_timed(lambda: read_skynomad_grid(csv)))
            cached.append(_timed(lambda: load_traces(SHIPPED)))
        a, b = read_skynomad_grid(csv), load_traces(SHIPPED)
        same = a.zones == b.zones and np.array_equal(a.available, b.available)
    result = {
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": f"{platform.machine()}, {os.cpu_count()} cpus, "
        f"python {platform.python_version()}",
        "trace": str(csv.relative_to(ROOT)),
        "rounds": args.rounds,
        "parse_s_median": statistics.median(parse),
        "cached_s_median": statistics.median(cached),
        "cold_load_s": cold,
        "speedup": statistics.median(parse) / statistics.median(cached),
        "same_grid": bool(same),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
