"""Score revocation models on validation folds inside the training period (never the test part).

    python bench/revocation_validation.py                                  # lstm vs logistic
    python bench/revocation_validation.py --lstm '{"members": 8}' --seeds 0,10,20

The acceptance protocol fits on the first 70 % of the SkyNomad V100 trace and scores the last
30 %. Design choices must not be made on that last 30 %, so this script only ever sees the first
70 % (``P``) and scores two chronological folds inside it:

* fold A: fit on the first 80 % of ``P``, score the last 20 % (the weeks just before the test);
* fold B: fit on the first 60 % of ``P``, score the next 20 %.

Each fold is :func:`spotwise.predictors.reveval.evaluate` on a prefix of the trace, so labels and
features follow exactly the rules of the real evaluation. Results go to
``bench/results/revocation-validation.json`` (appended per run, with the options and seeds), so a
change can be judged by its mean AUC gain over logistic regression across folds *and* seeds —
the LSTM's AUC on fold A moves by about ±0.003 with the seed alone.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
SKY = ROOT.parent / "shared" / "data" / "spot" / "skynomad-v100-2023"
OUT = ROOT / "bench" / "results" / "revocation-validation.json"


def folds(path: Path, test_fraction: float = 0.3) -> dict[str, tuple[Any, float]]:
    """{fold name: (trace prefix, fraction scored)} inside the first ``1 - test_fraction``."""
    from spotwise.traces import load_traces

    ts = load_traces(path)
    pre = ts.slice(0, round(ts.n_ticks * (1 - test_fraction)))
    return {"A": (pre, 0.2), "B": (pre.slice(0, round(pre.n_ticks * 0.8)), 0.25)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--traces", type=Path, default=SKY)
    ap.add_argument("--horizon", type=float, default=3600.0, help="seconds")
    ap.add_argument("--lstm", default="{}", help="JSON options for the lstm model")
    ap.add_argument("--seeds", default="0", help="comma-separated LSTM seeds")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    if not args.traces.exists():
        sys.exit(f"{args.traces} is absent: this script needs the shared real data")
    import torch

    from spotwise.predictors.reveval import evaluate

    torch.set_num_threads(1)  # the numbers in docs/predictors.md were taken this way
    lstm_opts = json.loads(args.lstm)
    seeds = [int(s) for s in args.seeds.split(",")]
    result: dict[str, Any] = {
        "generated": datetime.now(UTC).isoformat(timespec="seconds"),
        "traces": str(args.traces),
        "horizon_s": args.horizon,
        "lstm_options": lstm_opts,
        "folds": {},
    }
    gains = []
    for name, (prefix, frac) in folds(args.traces).items():
        t0 = time.perf_counter()
        base = evaluate(prefix, args.horizon, names=("logistic",), test_fraction=frac)
        logistic = base["rows"][0]
        fold: dict[str, Any] = {
            "scored_ticks": base["split"]["test_ticks"],
            "logistic": {"auc": logistic["auc"], "brier": logistic["brier"]},
            "lstm": [],
        }
        for seed in seeds:
            r = evaluate(
                prefix,
                args.horizon,
                names=("lstm",),
                test_fraction=frac,
                options={"lstm": {**lstm_opts, "seed": seed}},
            )["rows"][0]
            fold["lstm"].append({"seed": seed, "auc": r["auc"], "brier": r["brier"]})
            gains.append(r["auc"] - logistic["auc"])
            print(
                f"fold {name} seed {seed}: lstm AUC {r['auc']:.4f} Brier {r['brier']:.4f} | "
                f"logistic AUC {logistic['auc']:.4f} Brier {logistic['brier']:.4f}",
                flush=True,
            )
        fold["seconds"] = round(time.perf_counter() - t0, 1)
        result["folds"][name] = fold
    result["mean_auc_gain_over_logistic"] = sum(gains) / len(gains)
    print(f"mean AUC gain of the lstm over logistic: {result['mean_auc_gain_over_logistic']:+.4f}")
    runs = json.loads(args.out.read_text()) if args.out.is_file() else []
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps([*runs, result], indent=1) + "\n")
    print(f"appended to {args.out}")


if __name__ == "__main__":
    main()
