"""Time the revocation models' forecasts (docs/predictors.md, "Speed") into a JSON result.

    python bench/predict_speed.py            # 3 rounds; a minute or two on 2 cores
    (writes bench/results/predict-speed.json)

On the shipped trace (``builtin:skynomad-v100-2023``, 9 zones), in this process: the shipped
LSTM's ``predict_series`` over a week of ticks (3,101 ticks x 9 zones) and ``predict_proba`` at
single ticks, and the same for a logistic regression fitted here. Everything runs on ticks of
the first 70 % of the trace (the logistic model is fitted on the first 50 %): nothing is scored,
and the part `predictor eval` tests on is never read. The LSTM runs on one torch thread, as the
replay's forecast does. The figure to compare is the ratio LSTM / logistic measured in the same
process; the absolute seconds depend on the machine and its load.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
OUT = ROOT / "bench" / "results" / "predict-speed.json"
WEEK = 3101  # ticks of a week at the trace's 195 s


def _median_s(fn: Any, rounds: int) -> float:
    took = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        fn()
        took.append(time.perf_counter() - t0)
    return statistics.median(took)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    import numpy as np
    import torch

    from spotwise.predictors.revocation import get_revocation_model, load_pretrained
    from spotwise.providers.replay import load_market_traces

    torch.set_num_threads(1)
    ts = load_market_traces("builtin:skynomad-v100-2023")
    start = int(ts.n_ticks * 0.7) - WEEK  # the week just before the 70 % mark
    week = np.arange(start, start + WEEK)
    single = [int(t) for t in np.linspace(start, start + WEEK - 1, 5)]
    lstm = load_pretrained()
    logistic = get_revocation_model("logistic")
    t0 = time.perf_counter()
    logistic.fit(ts.slice(0, ts.n_ticks // 2), lstm.horizon_s)
    fit_s = time.perf_counter() - t0
    out: dict[str, Any] = {}
    for name, model in (("lstm", lstm), ("logistic", logistic)):
        model.predict_series(ts, week[:10])  # warm-up: imports, first allocation
        series = _median_s(lambda m=model: m.predict_series(ts, week), args.rounds)
        one = _median_s(lambda m=model: [m.predict_proba(ts, t) for t in single], args.rounds)
        out[name] = {
            "predict_series_week_s": round(series, 4),
            "predict_proba_one_tick_s": round(one / len(single), 5),
        }
    result = {
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": " ".join(["python", "bench/predict_speed.py", *sys.argv[1:]]),
        "machine": f"{platform.machine()}, {os.cpu_count()} cpus, "
        f"python {platform.python_version()}, torch {torch.__version__} (1 thread)",
        "trace": "builtin:skynomad-v100-2023",
        "forecasts_per_series": int(WEEK * len(ts.zones)),
        "rounds": args.rounds,
        "logistic_fit_s": round(fit_s, 2),
        "models": out,
        "baseline": "logistic",
        "lstm_vs_logistic_series": round(
            out["lstm"]["predict_series_week_s"] / out["logistic"]["predict_series_week_s"], 2
        ),
        "lstm_vs_logistic_one_tick": round(
            out["lstm"]["predict_proba_one_tick_s"] / out["logistic"]["predict_proba_one_tick_s"], 2
        ),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
