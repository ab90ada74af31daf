"""Benchmark the predictors on the real data in ../shared/data; write bench/results/predictors.json.

    python bench/predictors.py            # everything (about 5-10 min on 2 CPU cores)
    python bench/predictors.py --quick    # the two acceptance commands only
    python bench/predictors.py --curves-only  # part 2 only, written into the existing JSON

1. Revocation: ``spotwise predictor eval --traces ../shared/data/spot/skynomad-v100-2023 --json``
   (the acceptance command: all four models fitted on the first 70 % of the ticks, scored on the
   last 30 %), the shipped model scored on the same ticks, other horizons, and transfer
   (SkyNomad ⇄ Can't Be Late 2022-10-26; us-east zones → us-west zones).
2. EarlyCurve: ``spotwise curve eval --curves ../shared/data/curves/lcbench --metric val_accuracy
   --theta 0.3 --json`` (the acceptance command), plus θ ∈ {0.1, 0.2, 0.5} and a loss metric.
3. The shipped model's training time: retrained with the command that built it, to a temp file.

The commands run in-process through the same typer apps the CLI mounts.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
SHARED = ROOT.parent / "shared" / "data"
SKY = "../shared/data/spot/skynomad-v100-2023"
CBL22 = "../shared/data/spot/cant-be-late-availability/availability/1-node/aws-10-26-2022"
LCBENCH = "../shared/data/curves/lcbench"
SHIPPED_TRACE = "spotwise/data/skynomad-v100-2023"
OUT = ROOT / "bench" / "results" / "predictors.json"


def run(app: Any, group: str, argv: list[str]) -> dict[str, Any]:
    """Run ``spotwise <group> <argv…>`` in-process; the parsed JSON, the command and seconds."""
    from typer.testing import CliRunner

    t0 = time.perf_counter()
    res = CliRunner().invoke(app, argv)
    secs = time.perf_counter() - t0
    cmd = " ".join(["spotwise", group, *argv])
    if res.exit_code != 0:
        raise RuntimeError(f"{cmd} failed: {res.exception!r}\n{res.output}")
    print(f"  {cmd}  ({secs:.0f} s)", flush=True)
    return {"command": cmd, "seconds": round(secs, 1), "result": json.loads(res.output)}


def table(rows: list[dict[str, Any]], keys: tuple[str, ...]) -> str:
    out = []
    for r in rows:
        out.append(
            "  ".join(f"{k}={r[k]:.4f}" if isinstance(r[k], float) else f"{k}={r[k]}" for k in keys)
        )
    return "\n".join(out)


def revocation(quick: bool) -> dict[str, Any]:
    from spotwise.cli import predictor
    from spotwise.predictors.revocation import PRETRAINED

    out: dict[str, Any] = {}
    print("revocation", flush=True)
    out["acceptance"] = run(predictor.app, "predictor", ["eval", "--traces", SKY, "--json"])
    if quick:
        return out
    rel = os.path.relpath(PRETRAINED, ROOT)
    out["shipped_model"] = run(
        predictor.app,
        "predictor",
        ["eval", "--traces", SKY, "--model", rel, "--models", "logistic", "--json"],
    )
    out["horizons"] = [
        run(predictor.app, "predictor", ["eval", "--traces", SKY, "--horizon", h, "--json"])
        for h in ("30m", "3h")
    ]
    out["transfer"] = [
        run(predictor.app, "predictor", ["eval", "--traces", CBL22, "--train-on", SKY, "--json"]),
        run(predictor.app, "predictor", ["eval", "--traces", SKY, "--train-on", CBL22, "--json"]),
        run(
            predictor.app, "predictor", ["eval", "--traces", CBL22, "--json"]
        ),  # in-domain reference
    ]
    out["unseen_zones"] = east_to_west()
    return out


def east_to_west() -> dict[str, Any]:
    """Fit on us-east-* (first 70 % of ticks), score on us-west-2* (last 30 %): zones never seen."""
    from spotwise.predictors._revfeatures import chrono_split
    from spotwise.predictors.reveval import evaluate_transfer
    from spotwise.traces import TraceSet, load_traces

    ts = load_traces(ROOT / SKY)

    def zones(prefix: str) -> TraceSet:
        idx = [i for i, z in enumerate(ts.zones) if z.startswith(prefix)]
        return TraceSet(
            [ts.zones[i] for i in idx],
            ts.times,
            ts.available[idx],
            ts.price[idx],
            ts.instance_type,
            ts.on_demand_price,
            ts.gap_seconds,
            ts.source + f" [{prefix}*]",
        )

    test0 = chrono_split(ts, 3600.0).test[0]
    t0 = time.perf_counter()
    res = evaluate_transfer(zones("us-east").slice(0, test0), zones("us-west"), 3600.0)
    print(f"  east→west transfer ({time.perf_counter() - t0:.0f} s)", flush=True)
    return {
        "command": "python bench/predictors.py (east_to_west: evaluate_transfer in-process)",
        "result": res,
    }


def curves(quick: bool) -> dict[str, Any]:
    from spotwise.cli import curve

    print("curves", flush=True)
    base = ["eval", "--curves", LCBENCH, "--metric", "val_accuracy"]
    out: dict[str, Any] = {
        "acceptance": run(curve.app, "curve", [*base, "--theta", "0.3", "--json"])
    }
    if quick:
        return out
    out["thetas"] = [
        run(curve.app, "curve", [*base, "--theta", str(t), "--json"]) for t in (0.1, 0.2, 0.5)
    ]
    out["loss_metric"] = run(
        curve.app,
        "curve",
        ["eval", "--curves", LCBENCH, "--metric", "val_cross_entropy", "--theta", "0.3", "--json"],
    )
    return out


def shipped_training() -> dict[str, Any]:
    """Retrain the shipped model exactly as it was built; time it; compare with the shipped file."""
    import numpy as np

    from spotwise.cli import predictor
    from spotwise.predictors.revocation import PRETRAINED, load
    from spotwise.traces import load_traces

    print("shipped model", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "m.pt"
        r = run(
            predictor.app,
            "predictor",
            ["train", "--traces", SHIPPED_TRACE, "--until", "0.7", "--out", str(path), "--json"],
        )
        ts = load_traces(ROOT / SHIPPED_TRACE)
        ticks = np.arange(ts.n_ticks - 3000, ts.n_ticks)
        diff = np.abs(
            load(path).predict_series(ts, ticks) - load(PRETRAINED).predict_series(ts, ticks)
        )
    r["command"] = r["command"].replace(str(path), os.path.relpath(PRETRAINED, ROOT))
    r["max_abs_diff_vs_shipped"] = float(diff.max())
    r["shipped_bytes"] = PRETRAINED.stat().st_size
    return r


def curves_only(out: Path) -> None:
    """Part 2 alone, at every θ: its rows replace ``curves`` in ``out`` (dated apart)."""
    doc = json.loads(out.read_text()) if out.exists() else {}
    t0 = time.perf_counter()
    doc["curves"] = curves(False)
    doc["curves_generated"] = datetime.now(UTC).isoformat(timespec="seconds")
    doc["curves_seconds"] = round(time.perf_counter() - t0, 1)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=1) + "\n")
    rows = doc["curves"]["acceptance"]["result"]["rows"]
    print(table(rows, ("name", "mae", "top10_recall_at_25", "band_coverage", "fit_ms_per_curve")))
    print(f"wrote {out} (curves) in {doc['curves_seconds']} s")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="only the two acceptance commands")
    ap.add_argument(
        "--curves-only",
        action="store_true",
        help="only part 2 (EarlyCurve on LCBench), replacing `curves` in the existing --out "
        "file and keeping its other parts (no revocation model is fitted or scored)",
    )
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    if not SHARED.is_dir():
        sys.exit(f"{SHARED} is absent: the benchmark needs the shared real data")
    os.chdir(ROOT)  # the commands use paths relative to the repository, as documented
    if args.curves_only:
        curves_only(args.out)
        return
    import torch

    t0 = time.perf_counter()
    doc: dict[str, Any] = {
        "generated": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {
            "cpus": os.cpu_count(),
            "torch_threads": torch.get_num_threads(),
            "python": platform.python_version(),
            "torch": torch.__version__,
            "platform": platform.platform(),
        },
        "protocol": {
            "revocation": "chronological split of each trace: models fit on the first 70 % of "
            "ticks (the LSTM validates on the last 20 % of that), every model scored on the same "
            "(zone, tick) pairs of the last 30 % where spot is available and the whole horizon "
            "lies inside the trace; target = spot becomes unavailable within the horizon",
            "curves": "each curve observed up to step θ·50 (LCBench epochs 1..50), the value at "
            "epoch 50 predicted; MAE, Spearman, recall of the true top 10 % in the predicted top "
            "25 %, band coverage, fit time per curve",
        },
        "revocation": revocation(args.quick),
        "curves": curves(args.quick),
    }
    if not args.quick:
        doc["shipped_training"] = shipped_training()
    doc["total_seconds"] = round(time.perf_counter() - t0, 1)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    acc = doc["revocation"]["acceptance"]["result"]["rows"]
    print(table(acc, ("name", "auc", "brier", "log_loss", "ece", "n_test", "positives")))
    print(
        table(
            doc["curves"]["acceptance"]["result"]["rows"],
            ("name", "mae", "spearman", "top10_recall_at_25", "band_coverage", "fit_ms_per_curve"),
        )
    )
    print(f"wrote {args.out} in {doc['total_seconds']} s")


if __name__ == "__main__":
    main()
