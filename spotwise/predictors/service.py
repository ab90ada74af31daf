"""The core calls behind ``spotwise predictor …`` (no printing here); ``spotwise curve …`` is
:mod:`spotwise.predictors.curve_service`, the checks of their options :mod:`._argchecks`."""

from __future__ import annotations

import math
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from spotwise.errors import (
    PredictorError,
    ProviderUnavailable,
    SpecError,
    SpotwiseError,
)
from spotwise.predictors._argchecks import (
    check_forecast_horizon,
    check_horizon,
    check_model_horizon,
    check_model_name,
    check_out,
    check_split,
    check_test_fraction,
    fmt,
    trace_span,
)
from spotwise.units import parse_duration

if TYPE_CHECKING:
    from spotwise.predictors.revocation import RevocationModel
    from spotwise.traces import TraceSet

BUILTIN = "builtin:skynomad-v100-2023"  # the shipped trace, as job specs name it
_TRAIN_HINT = f"spotwise predictor train --traces {BUILTIN} --out model.pt"


def resolve_traces(ref: str | Path, field: str = "--traces") -> Path:
    """A ``--traces`` value: ``builtin:NAME`` (resolved like a job spec's ``replay.trace``) or an
    existing file or folder; errors name ``field``."""
    from spotwise.errors import did_you_mean
    from spotwise.providers.replay import BUILTIN_TRACES, resolve_trace

    text = str(ref).strip()
    builtins = [f"builtin:{n}" for n in BUILTIN_TRACES]
    what = (
        "pass a SkyNomad CSV (file or folder), a folder of Can't Be Late JSON files, "
        f"or {' or '.join(builtins)} (the shipped trace)"
    )
    if not text:
        raise SpecError(f"{field} is empty; {what}")
    if text.startswith("builtin:"):
        try:
            return resolve_trace(text)
        except SpecError:
            raise SpecError(
                f"{field} {text}: no such shipped trace{did_you_mean(text, builtins)}; "
                f"valid: {', '.join(builtins)}"
            ) from None
    p = Path(text).expanduser()
    if not p.exists():
        raise SpecError(f"{field} {text}: does not exist; {what}")
    return p


def _load(ref: str | Path, field: str = "--traces") -> TraceSet:
    from spotwise.traces import load_traces

    return load_traces(resolve_traces(ref, field), field=field)


def load_model_file(path: str | Path, field: str = "--model") -> RevocationModel:
    """A saved model named on the command line; every refusal is one line naming ``field``."""
    from spotwise.predictors.revocation import NotAModelFile, load

    p = Path(path).expanduser()
    if not p.exists():
        raise SpecError(f"{field} {path}: does not exist", hint=f"train one: {_TRAIN_HINT}")
    if not p.is_file():  # a folder, or a device such as /dev/null (review-ao M7)
        what = "a folder" if p.is_dir() else "not a regular file"
        raise SpecError(f"{field} {path}: {what}, not a model file", hint=_TRAIN_HINT)
    try:
        return load(p)
    except NotAModelFile as e:
        raise SpecError(
            f"{field} {path}: not a spotwise model file ({e.reason})",
            hint=f"pass a file written by {_TRAIN_HINT}",
        ) from None


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
        raise SpecError(
            f"--until must be in (0, 1], got {until:g} (the first share of the ticks to train "
            "on: 1 = all of them, 0.7 = the eval's training part)"
        )
    check_model_name(name, "--model")
    path = check_out(out)
    ts = _load(traces)
    check_horizon(ts, horizon_s)
    stop = max(3, round(ts.n_ticks * until))
    kept = trace_span(ts, 0, min(stop, ts.n_ticks))
    if kept < horizon_s:
        raise SpecError(
            f"--until {until:g} keeps {fmt(kept)} of the trace, less than the "
            f"--horizon {fmt(horizon_s)}: no tick to learn from; raise --until"
        )
    part = ts.slice(0, stop) if stop < ts.n_ticks else ts
    _check_revocations(part, horizon_s, f"--traces {traces}", until)
    model = get_revocation_model(name, **({"verbose": verbose} if name == "lstm" else {}))
    t0 = time.perf_counter()
    try:
        model.fit(part, horizon_s)
    except ValueError as e:  # e.g. the LSTM's "too few labelled ticks" on a short part
        raise PredictorError(
            f"{name}: {e}", hint="raise --until or pass a shorter --horizon"
        ) from e
    seconds = time.perf_counter() - t0
    try:
        model.save(path)
    except (OSError, RuntimeError):  # torch reports a failed write as a RuntimeError
        raise SpecError(f"--out {out}: could not write the model file there") from None
    return {
        "model": name,
        "out": str(out),
        "horizon_s": horizon_s,
        "traces": str(traces),
        "zones": list(ts.zones),
        "train_ticks": [0, stop],
        "n_ticks": ts.n_ticks,
        "fit_seconds": round(seconds, 1),
        "bytes": path.stat().st_size,
    }


def _check_revocations(part: TraceSet, horizon_s: float, where: str, until: float) -> None:
    """Refuse a training part in which spot was never revoked: every model fitted on it says
    p_revoke ~ 0 whatever the zone or the hour (a model that learned nothing)."""
    from spotwise.predictors._revfeatures import labels

    y, valid = labels(part, horizon_s)
    n = int(valid.sum())
    if n and not (y & valid).any():  # no labelled tick at all: the model's own refusal
        longer = "raise --until or train on" if until < 1 else "train on"
        raise SpecError(
            f"{where}: 0 revocations in its {n} labelled zone-ticks (ticks 0..{part.n_ticks}: "
            f"spot, once available, was never gone within {fmt(horizon_s)}): nothing to learn, "
            f"the model would always say p_revoke ~ 0; {longer} a trace with revocations"
        )


def evaluate_path(
    traces: str | Path,
    horizon_s: float,
    model_path: str | Path | None = None,
    names: tuple[str, ...] = ("base-rate", "persistence", "logistic", "lstm"),
    train_on: str | Path | None = None,
    test_fraction: float = 0.3,
) -> dict[str, Any]:
    """Chronological evaluation of ``names`` (and a saved model) on the later part of ``traces``.

    A saved model fitted on ticks of this trace that reach into its test ticks is refused (its
    scores would be in-sample); one whose file does not say what it was fitted on is scored with
    a warning (``warnings``) and ``overlap_checked: false`` on its row."""
    from spotwise.predictors._provenance import check_model_ticks
    from spotwise.predictors._revfeatures import chrono_split
    from spotwise.predictors.reveval import evaluate, evaluate_transfer

    if not names and model_path is None:
        raise SpecError(
            "--models is empty; name one or more of base-rate, persistence, logistic, lstm"
        )
    for name in names:
        check_model_name(name, "--models")
    check_test_fraction(test_fraction)
    if train_on is not None and model_path is not None:
        raise SpecError(
            "--model and --train-on cannot be combined: --train-on fits fresh models on "
            "another trace; drop one of them"
        )
    model = load_model_file(model_path) if model_path is not None else None
    ts = _load(traces)
    if model is not None:  # what can be done instead needs the trace: the ticks it supports
        until = round(1 - test_fraction, 6)
        check_model_horizon(ts, model.horizon_s, horizon_s, str(model_path), str(traces), until)
    check_horizon(ts, horizon_s)
    if train_on is not None:
        source = _load(train_on, "--train-on")
        check_horizon(source, horizon_s, "--train-on trace")
        check_split(ts, horizon_s, test_fraction, need_train=False)
    else:
        check_split(ts, horizon_s, test_fraction)
    info: dict[str, Any] = {}
    warnings: list[str] = []
    if model is not None:  # before fitting anything: a refusal comes at once
        test = chrono_split(ts, horizon_s, test_fraction=test_fraction).test
        info, warnings = check_model_ticks(
            model.trained_on, ts, test, test_fraction, str(model_path)
        )
    try:
        if train_on is not None:
            return evaluate_transfer(
                source, ts, horizon_s, names=names, test_fraction=test_fraction
            )
        res = evaluate(
            ts, horizon_s, names=names, model=model, test_fraction=test_fraction, model_info=info
        )
        return {**res, "warnings": warnings} if warnings else res
    except PredictorError as e:  # a model that cannot be fitted on this part: say what to change
        if e.hint:
            raise
        fix = "--train-on a longer trace" if train_on is not None else "a lower --test-fraction"
        raise PredictorError(e.message, hint=f"try {fix} or a shorter --horizon") from e


def _at_offset(text: str) -> float | None:
    """Seconds after the trace start in an ``--at`` offset: hours (``36``, ``1.5``, ``36h``) or a
    duration (``90m``, ``1d12h``); ``None`` when ``text`` is neither."""

    number = text[:-1] if text[-1:].lower() == "h" else text
    try:
        hours = float(number)
    except ValueError:
        try:
            return parse_duration(text)
        except SpecError:
            return None
    return hours * 3600.0 if math.isfinite(hours) else None


def parse_at(at: str | None, ts: TraceSet) -> float:
    """``--at``: ISO time (UTC when naive), or hours after the trace start (``36``, ``36h``)."""
    if at is None or not at.strip():
        return float(ts.times[-1])
    text = at.strip()
    start, end = float(ts.times[0]), float(ts.times[-1]) + ts.gap_seconds
    first = datetime.fromtimestamp(start, UTC)
    last = datetime.fromtimestamp(end, UTC)
    # rounded down, so that every number of hours it names is accepted (1093.83 h: "1093.8")
    tenths = math.floor((end - start) / 360)
    span = f"{tenths // 10}" if tenths % 10 == 0 else f"{tenths / 10:.1f}"
    hours = f"0 to {span} hours after its start"
    try:
        dt = datetime.fromisoformat(text)
    except ValueError:
        offset = _at_offset(text)
        if offset is None:
            raise SpecError(
                f"--at {at!r}: not a time; use an ISO time such as "
                f"{(first + (last - first) / 2).strftime('%Y-%m-%dT%H:%M')} (UTC if naive) "
                f"or hours after the trace start such as 36, 36h or 1d12h ({hours})"
            ) from None
        t = start + offset
    else:
        if dt.tzinfo is None:
            dt = dt.replace(tzinfo=UTC)
        t = dt.timestamp()
    if not start <= t <= end:
        raise SpecError(
            f"--at {at!r} is outside the replayed trace: "
            f"{first.isoformat()} .. {last.isoformat()}, or {hours}"
        )
    return t


def _model(model_path: str | Path | None) -> RevocationModel:
    from spotwise.predictors.revocation import load_pretrained

    return load_model_file(model_path) if model_path is not None else load_pretrained()


def forecast(
    provider: str = "local",
    at: str | None = None,
    model_path: str | Path | None = None,
    horizon_s: float | str | None = None,
) -> dict[str, Any]:
    """Per spot offer of ``provider``: zone, instance type, price, availability, p_revoke;
    ``horizon_s`` is seconds or ``--horizon`` as typed (a bare number is seconds)."""
    if provider != "local":
        given = [
            flag
            for flag, value in (("--at", at), ("--model", model_path), ("--horizon", horizon_s))
            if value is not None
        ]
        if given:
            from spotwise.providers import registry

            registry.validate_name(provider)  # a misspelt provider is the first thing to fix
            one = len(given) == 1
            raise SpecError(
                f"{', '.join(given)} {'applies' if one else 'apply'} only to --provider local "
                f"(the replayed trace); --provider {provider} lists its current spot prices: "
                f"drop {'it' if one else 'them'}"
            )
        return _cloud_forecast(provider)
    from spotwise.providers.base import Market
    from spotwise.providers.replay import ReplayMarket, load_market_traces

    ts = load_market_traces(BUILTIN)
    model = _model(model_path)
    if horizon_s is not None:
        check_forecast_horizon(ts, model.horizon_s, horizon_s, BUILTIN)
    if model.horizon_s < ts.gap_seconds:
        raise SpecError(
            f"--model {model_path}: its {fmt(model.horizon_s)} horizon is shorter than one tick "
            f"of the replayed trace ({fmt(ts.gap_seconds)}): nothing can be revoked within it",
            hint=f"spotwise predictor train --traces {BUILTIN} --horizon 1h --out model.pt",
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
    except SpecError as e:  # a job-spec option (azure's subscription_id): this reads no spec
        raise _without_spec(provider, e) from None
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
        "tick": None,  # the local forecast's keys, so that one shape reads both
        "horizon_s": None,
        "model": None,
        "offers": rows,
        "note": f"{provider} publishes spot prices but no availability history, which the "
        "revocation model needs: p_revoke is unknown (prices only). Use --provider local for "
        "the replayed market, or record availability and train with spotwise predictor train.",
    }


def _without_spec(provider: str, e: SpecError) -> SpecError:
    """:func:`spotwise.cloud._without_spec` for ``predictor forecast``, which reads no job spec
    either: the environment variable that sets the option, as ``prices`` says it."""
    from spotwise.cloud import _without_spec as reworded

    return reworded(provider, e, "predictor forecast", "reads")
