"""The core calls behind ``spotwise predictor …`` and ``spotwise curve …`` (no printing here)."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from spotwise.errors import NotFoundError, ProviderUnavailable, SpecError, SpotwiseError

if TYPE_CHECKING:
    from spotwise.predictors.revocation import RevocationModel
    from spotwise.traces import TraceSet

SHIPPED_TRACE = Path(__file__).resolve().parent.parent / "data" / "skynomad-v100-2023"


def _load(path: str | Path) -> TraceSet:
    from spotwise.traces import load_traces

    return load_traces(path)


def train_model(
    traces: str | Path,
    horizon_s: float,
    out: str | Path,
    name: str = "lstm",
    until: float = 1.0,
    verbose: bool = False,
) -> dict[str, Any]:
    """Fit ``name`` on the first ``until`` fraction of the ticks of ``traces``; save to ``out``."""
    from spotwise.predictors.revocation import get_revocation_model

    if not 0 < until <= 1:
        raise SpecError(f"--until must be in (0, 1], got {until=}")
    ts = _load(traces)
    stop = max(3, round(ts.n_ticks * until))
    part = ts.slice(0, stop) if stop < ts.n_ticks else ts
    model = get_revocation_model(name, **({"verbose": verbose} if name == "lstm" else {}))
    t0 = time.perf_counter()
    model.fit(part, horizon_s)
    seconds = time.perf_counter() - t0
    model.save(out)
    return {
        "model": name,
        "out": str(out),
        "horizon_s": horizon_s,
        "traces": str(traces),
        "zones": list(ts.zones),
        "train_ticks": [0, stop],
        "n_ticks": ts.n_ticks,
        "fit_seconds": round(seconds, 1),
        "bytes": Path(out).stat().st_size,
    }


def evaluate_path(
    traces: str | Path,
    horizon_s: float,
    model_path: str | Path | None = None,
    names: tuple[str, ...] = ("base-rate", "persistence", "logistic", "lstm"),
    train_on: str | Path | None = None,
    test_fraction: float = 0.3,
) -> dict[str, Any]:
    """Chronological evaluation of ``names`` (and a saved model) on the later part of ``traces``."""
    from spotwise.predictors.reveval import evaluate, evaluate_transfer
    from spotwise.predictors.revocation import load

    ts = _load(traces)
    if train_on is not None:
        return evaluate_transfer(
            _load(train_on), ts, horizon_s, names=names, test_fraction=test_fraction
        )
    model = load(model_path) if model_path is not None else None
    if model is not None and abs(model.horizon_s - horizon_s) > 1e-6:
        raise SpecError(
            f"--model predicts a {model.horizon_s:g} s horizon but --horizon is {horizon_s:g} s",
            hint=f"pass --horizon {model.horizon_s:g}s, or train a model for this horizon",
        )
    return evaluate(ts, horizon_s, names=names, model=model, test_fraction=test_fraction)


def parse_at(at: str | None, ts: TraceSet) -> float:
    """``--at``: ISO time (UTC when naive), or hours after the trace start (``36``, ``36h``)."""
    from spotwise.units import parse_duration

    if at is None or at == "":
        return float(ts.times[-1])
    try:
        dt = datetime.fromisoformat(at)
    except ValueError:
        return float(ts.times[0]) + (
            parse_duration(at if at[-1].isalpha() else at + "h", field="--at")
        )
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    t = dt.timestamp()
    if not ts.times[0] <= t <= ts.times[-1] + ts.gap_seconds:
        start = datetime.fromtimestamp(ts.times[0], UTC).isoformat()
        end = datetime.fromtimestamp(ts.times[-1], UTC).isoformat()
        raise SpecError(f"--at {at} is outside the replayed trace ({start} .. {end})")
    return t


def _model(model_path: str | Path | None) -> RevocationModel:
    from spotwise.predictors.revocation import load, load_pretrained

    return load(model_path) if model_path is not None else load_pretrained()


def forecast(
    provider: str = "local",
    at: str | None = None,
    model_path: str | Path | None = None,
    horizon_s: float | None = None,
) -> dict[str, Any]:
    """Per spot offer of ``provider``: zone, instance type, price, availability, p_revoke."""
    if provider != "local":
        return _cloud_forecast(provider)
    from spotwise.providers.base import Market
    from spotwise.providers.replay import ReplayMarket, load_market_traces

    ts = load_market_traces("builtin:skynomad-v100-2023")
    model = _model(model_path)
    if horizon_s is not None and abs(model.horizon_s - horizon_s) > 1e-6:
        raise SpecError(
            f"the model predicts a {model.horizon_s:g} s horizon, not {horizon_s:g} s",
            hint=f"spotwise predictor train --traces {SHIPPED_TRACE} "
            f"--horizon {horizon_s:g}s --out m.pt",
        )
    t = parse_at(at, ts)
    tick = ts.tick_at(t)
    p = model.predict_proba(ts, tick)
    zi = {z: i for i, z in enumerate(ts.zones)}
    rows = [
        {
            "zone": o.zone,
            "instance_type": o.instance_type,
            "price_per_hour": o.price_per_hour,
            "available": o.available,
            "p_revoke": float(p[zi[o.zone]]),
        }
        for o in ReplayMarket(ts).offers(market=Market.SPOT, at=float(ts.times[tick]))
    ]
    rows.sort(key=lambda r: (r["p_revoke"], r["price_per_hour"]))
    return {
        "provider": "local",
        "at": datetime.fromtimestamp(ts.times[tick], UTC).isoformat(),
        "tick": tick,
        "horizon_s": model.horizon_s,
        "model": model.name,
        "offers": rows,
        "note": "p_revoke = 1 where spot is not obtainable at that time",
    }


def _cloud_forecast(provider: str) -> dict[str, Any]:
    """Clouds: a revocation forecast needs an availability history they do not publish, and at
    least their spot price history; print the offers and prices we can read, risk unknown."""
    from spotwise.providers import registry
    from spotwise.providers.base import Market

    registry.validate_name(provider)
    need = f"{provider}: a revocation forecast needs its spot price and availability history"
    try:
        catalog = registry.cloud_module(provider).open_catalog(
            registry.ProviderConfig(name=provider)
        )
        offers = catalog.offers(market=Market.SPOT)
    except (ImportError, AttributeError) as e:
        raise ProviderUnavailable(f"{need}, and its adapter is not available here ({e})") from None
    except SpotwiseError as e:  # no credentials, no network, missing options: say why
        raise type(e)(f"{need}; reading it failed: {e.message}", hint=e.hint) from None
    rows = [
        {
            "zone": o.zone,
            "instance_type": o.instance_type,
            "price_per_hour": o.price_per_hour,
            "available": o.available,
            "p_revoke": None,
        }
        for o in offers
    ]
    return {
        "provider": provider,
        "at": datetime.now(UTC).isoformat(),
        "model": None,
        "offers": rows,
        "note": f"{provider} publishes spot prices but no availability history, which the "
        "revocation model needs: p_revoke is unknown (prices only). Use --provider local for "
        "the replayed market, or record availability and train with spotwise predictor train.",
    }


def curve_fit(
    path: str | Path,
    curve_id: str,
    metric: str = "value",
    theta: float = 1.0,
    total_steps: int | None = None,
    direction: str | None = None,
) -> dict[str, Any]:
    """EarlyCurve on the first ``theta`` of one curve: the fit, its final, the held-out truth."""
    from spotwise.errors import did_you_mean
    from spotwise.predictors.curves import load_curves, metric_direction
    from spotwise.predictors.earlycurve import fit_curve

    if not 0 < theta <= 1:
        raise SpecError(f"--theta must be in (0, 1], got {theta=}")
    curves = load_curves(path, metric)
    if curve_id not in curves:
        ids = sorted(curves, key=lambda s: (len(s), s))
        raise NotFoundError(
            f"--curve-id {curve_id!r} not in {path}{did_you_mean(curve_id, ids)}; "
            f"{len(ids)} curves, e.g. {', '.join(ids[:5])}"
        )
    c = curves[curve_id]
    total = int(total_steps) if total_steps is not None else int(c.steps[-1])
    n = max(2, int((c.steps <= theta * c.steps[-1] + 1e-9).sum())) if theta < 1 else len(c.steps)
    fit = fit_curve(
        c.steps[:n],
        c.values[:n],
        None if c.lr is None else c.lr[:n],
        total,
        direction=direction or metric_direction(metric),
    )
    truth = float(c.values[-1]) if n < len(c.steps) and int(c.steps[-1]) == total else None
    return {
        "curve_id": curve_id,
        "metric": metric,
        "observed": n,
        "points": len(c.steps),
        "total_steps": total,
        "fit": fit,
        "curve": c,
        "true_final": truth,
    }


def curve_eval(
    path: str | Path,
    metric: str,
    theta: float,
    methods: tuple[str, ...],
    direction: str | None = None,
) -> dict[str, Any]:
    from spotwise.predictors.curves import dataset_direction, evaluate_curves, load_curves

    curves = load_curves(path, metric)
    d = direction or dataset_direction(curves, metric)
    rows = evaluate_curves(curves, theta, methods, direction=d)
    return {"curves": str(path), "metric": metric, "theta": theta, "direction": d, "rows": rows}
