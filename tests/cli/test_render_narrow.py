"""Every table stays readable in an 80-column terminal: values a user copies (ids, instance
types, zones, states, dates) are printed whole, nothing is cut with "…", no line runs past 80
columns, and free text (params, reasons) wraps between words, never inside one."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest
from rich.console import Console

from spotwise.cli import cloud as cloud_cli
from spotwise.cli import render

WIDTH = 80


def _render(monkeypatch: pytest.MonkeyPatch, draw: Callable[[], object]) -> str:
    console = Console(width=WIDTH, record=True, color_system=None)
    monkeypatch.setattr(render, "console", console)
    monkeypatch.setattr(cloud_cli, "_console", lambda: console)
    draw()
    return console.export_text()


def _column(lines: list[str], header: str, name: str) -> list[str]:
    """The cells of column ``name`` in the table whose header line starts with ``header``, a
    folded cell joined back (rows end at the caption, which says ``spotwise status``)."""
    head = next(i for i, line in enumerate(lines) if line.split()[:1] == [header])
    titles = lines[head].split()
    start = lines[head].index(name)
    after = titles.index(name) + 1
    stop = lines[head].index(titles[after], start + len(name)) if after < len(titles) else None
    cells: list[str] = []
    for line in lines[head + 2 :]:
        if "spotwise status" in line:
            break
        if line[: len(titles[0])].strip():
            cells.append(line[start:stop].strip())
        else:  # a continuation line: the rest of a folded cell
            cells[-1] += line[start:stop].strip()
    return cells


def _readable(text: str, *whole: str) -> list[str]:
    """Assert the text fits in 80 columns, cuts nothing, and shows each of ``whole`` on one
    line; return its lines."""
    lines = text.splitlines()
    assert "…" not in text, text
    assert max(len(line) for line in lines) <= WIDTH, text
    for value in whole:
        assert any(value in line for line in lines), (value, text)
    return lines


# the digits job as `spotwise status --json` returned it (ids, zones and types verbatim)
JOBS = {
    "jobs": [
        {
            "job_id": "j-fd15c0e2",
            "name": "digits-mlp",
            "state": "succeeded",
            "policy": "spot-greedy",
            "best_metric": 0.9665738161559888,
            "cost_usd": 3.0231755000000007,
            "on_demand_cost_usd": 11.304728173124792,
            "created_at": 1795408362.887747,  # 2026-11-23 04:32:42 UTC
        },
        {
            "job_id": "j-0b7a44e1",
            "name": "digits-mlp-long-running-sweep",
            "state": "cancelled",
            "policy": "spotwise",
            "best_metric": None,
            "cost_usd": 112.5,
            "on_demand_cost_usd": 301.25,
            "created_at": 1795408362.0 - 86400 * 40,
        },
    ]
}


def test_job_list_shows_ids_names_states_and_short_dates(monkeypatch: pytest.MonkeyPatch) -> None:
    text = _render(monkeypatch, lambda: render.print_jobs(JOBS["jobs"]))
    lines = _readable(text, "j-fd15c0e2", "j-0b7a44e1", "digits-mlp", "succeeded", "cancelled")
    row = next(line for line in lines if "j-fd15c0e2" in line)
    assert row.split() == [
        "j-fd15c0e2",
        "digits-mlp",
        "succeeded",
        "spot-greedy",
        "0.9666",
        "3.0232",
        "11-23",
        "04:32",
    ]
    assert next(line for line in lines if "j-0b7a44e1" in line).split()[2:4] == [
        "cancelled",
        "spotwise",
    ]
    # a name too long for the room left folds onto more lines, whole
    assert _column(lines, "job", "name") == ["digits-mlp", "digits-mlp-long-running-sweep"]


STATUS = {
    "job_id": "j-fd15c0e2",
    "name": "digits-mlp",
    "state": "succeeded",
    "policy": "spot-greedy",
    "best": {
        "trial": "t-04b928a1",
        "params": {"dropout": 0.0, "hidden": 128, "lr": 0.3, "weight_decay": 1e-06},
        "metric": 0.9665738161559888,
    },
    "trials": 8,
    "completed": 8,
    "revocations": 5,
    "migrations": 3,
    "early_stopped": 0,
    "cost_usd": 3.0231755,
    "on_demand_cost_usd": 11.3047281,
    "error": None,
    "instances": [
        {
            "launch_id": "928db8fe50cf4f32",
            "trial": "t-45040f1c",
            "zone": "us-west-2c",
            "market": "spot",
            "instance_type": "p3.2xlarge",
            "state": "terminated",
            "end_reason": "completed",
            "cost_usd": 0.393465,
        },
        {
            "launch_id": "cff6ab3636bd461f",
            "trial": "t-a98bddf8",
            "zone": "us-east-1f",
            "market": "spot",
            "instance_type": "p3.2xlarge",
            "state": "revoked",
            "end_reason": "revoked",
            "cost_usd": 0.0,
        },
        {
            "launch_id": "0136efae89504cfd",
            "trial": "t-9e200238",
            "zone": "eastus-1",
            "market": "on-demand",
            "instance_type": "Standard_NC24ads_A100_v4",
            "state": "running",
            "end_reason": None,
            "cost_usd": 12.5,
        },
    ],
}


def test_status_instances_show_trial_type_zone_and_state(monkeypatch: pytest.MonkeyPatch) -> None:
    text = _render(monkeypatch, lambda: render.print_status(STATUS))
    lines = _readable(text, "t-45040f1c", "Standard_NC24ads_A100_v4", "eastus-1")
    header = next(line for line in lines if line.startswith("trial "))
    assert header.split() == ["trial", "type", "zone", "market", "state", "$"]
    rows = {line.split()[0]: line.split() for line in lines if line.startswith("t-")}
    assert rows["t-45040f1c"] == [
        "t-45040f1c",
        "p3.2xlarge",
        "us-west-2c",
        "spot",
        "completed",
        "0.3935",
    ]
    assert rows["t-a98bddf8"][-2:] == ["revoked", "0.0000"]
    assert rows["t-9e200238"] == [
        "t-9e200238",
        "Standard_NC24ads_A100_v4",
        "eastus-1",
        "on-demand",
        "running",
        "12.5000",
    ]
    assert "spotwise status j-fd15c0e2 --json" in text  # where the launch ids are


def test_status_instances_fold_a_type_too_long_for_80_columns_never_crop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    wide = {**STATUS["instances"][2], "zone": "southcentralus-1", "trial": "t-12345678"}
    status = {**STATUS, "instances": [*STATUS["instances"], wide]}
    text = _render(monkeypatch, lambda: render.print_status(status))
    lines = _readable(text, "t-12345678", "on-demand", "12.5000")
    assert _column(lines, "trial", "type")[-1] == "Standard_NC24ads_A100_v4"
    assert _column(lines, "trial", "zone")[-1] == "southcentralus-1"


TRIALS = {
    "job_id": "j-fd15c0e2",
    "trials": [
        {
            "number": n,
            "trial": f"t-{n:08x}",
            "params": {"dropout": 0.424, "hidden": 111, "lr": 0.046, "weight_decay": wd},
            "step": 40,
            "metric": 0.9582,
            "final_metric": 0.9582,
            "state": "stopped_early" if n == 2 else "completed",
            "revocations": n,
            "cost_usd": 0.3335 * (n + 1),
        }
        for n, wd in enumerate((0.0027, 0.00149, 5.45e-06))
    ],
}


def test_trials_params_wrap_between_parameters_never_inside_a_number(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    text = _render(monkeypatch, lambda: render.print_trials(TRIALS))
    _readable(text, "t-00000002", "stopped_early")
    for value in ("weight_decay=0.0027", "weight_decay=0.00149", "weight_decay=5.45e-06"):
        assert re.search(rf"(^|\s){re.escape(value)}(\s|$)", text, re.M), (value, text)
    for line in text.splitlines():  # every parameter on a line is whole: name=number
        for word in line.split():
            if "=" in word:
                assert re.fullmatch(r"[a-z_]+=[-+.\de]+", word), (word, text)


def test_live_table_keeps_params_zones_and_states_whole() -> None:
    snap = {
        "job_id": "j-fd15c0e2",
        "policy": "spot-greedy",
        "market_time": 1677550000.0,
        "cost_usd": 1.25,
        "revocations": 2,
        "trials": [
            {
                "number": 10,
                "trial": "t-0000000a",
                "params": {"lr": 0.0122, "hidden": 31, "weight_decay": 1.11e-05, "dropout": 0.4},
                "step": 100,
                "steps": 100,
                "metric": 0.9192,
                "state": "stopped_early",
                "instance": "us-central1-a/on-demand",
                "cost_usd": 0.38,
            },
            {
                "number": 11,
                "trial": "t-0000000b",
                "params": {"lr": 0.3, "hidden": 128, "weight_decay": 1e-06, "dropout": 0.0},
                "step": 7,
                "steps": 100,
                "metric": None,
                "state": "running",
                "instance": "us-east-1f/spot",
                "cost_usd": 0.0,
            },
        ],
    }
    console = Console(width=WIDTH, record=True, color_system=None)
    console.print(render.live_table(snap, WIDTH))
    text = console.export_text()
    _readable(text, "weight_decay=1.11e-05", "us-central1-a", "on-demand", "stopped_early")
    _readable(text, "us-east-1f", "100/100", "7/100", "dropout=0.4")


def _local_prices(tmp_path: Any) -> dict[str, Any]:
    from spotwise import cloud

    return cloud.prices("local", db=f"sqlite:///{tmp_path / 'state.db'}")


def test_local_prices_show_the_market_time_and_list_unbuyable_offers_last(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    result = _local_prices(tmp_path)
    assert any(not r["available"] for r in result["prices"])  # the trace's last tick has some
    text = _render(monkeypatch, lambda: cloud_cli._print_prices(result))
    lines = _readable(text, "us-east-1a", "p3.2xlarge", "on-demand", "1× V100")
    assert "local prices at market time 2023-04-02 11:54 UTC" in lines[0]
    rows = [line for line in lines if line.startswith("us-")]
    assert len(rows) == len(result["prices"])
    marked = [i for i, line in enumerate(rows) if "spot (none now)" in line]
    assert marked and marked == list(range(len(rows) - len(marked), len(rows)))  # all last
    verb = "offer has" if len(marked) == 1 else "offers have"
    assert f"{len(marked)} spot {verb} no capacity now (listed last)" in text


def test_price_history_fits(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    from spotwise import cloud

    hist = cloud.prices("local", instance_type="p3.2xlarge", history="1h", db="sqlite://")
    text = _render(monkeypatch, lambda: cloud_cli._print_prices(hist))
    lines = _readable(text, "2023-04-02 11:54 UTC", "us-west-2c", "p3.2xlarge")
    assert lines[0].strip().startswith("local spot price history, 2023-04-02 10:54 → 11:54 UTC")
    assert "(source: replay)" in " ".join(lines[:2])  # as --json says it (folded if it must)


def test_aws_catalog_fits_with_every_type_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    """The offline AWS catalog (what `spotwise catalog -p aws` prints without credentials)."""
    from spotwise.providers.aws_offline import offline_hardware, offline_prices

    hw, prices = offline_hardware(), offline_prices("us-east-1")
    rows = [
        {
            "region": "us-east-1",
            "name": name,
            "vcpus": h.vcpus,
            "memory_gb": h.memory_gb,
            "gpus": h.gpus,
            "gpu_name": h.gpu_name,
            "architecture": h.architecture,
            "on_demand_price_per_hour": prices[name],
        }
        for name, h in sorted(hw.items())
        if name in prices
    ]
    rows.append({**rows[0], "name": "Standard_NC24ads_A100_v4", "gpus": 8, "gpu_name": "A100"})
    result = {"provider": "aws", "region": "us-east-1", "instance_types": rows}
    result["on_demand_source"] = "offline-2017"
    text = _render(monkeypatch, lambda: cloud_cli._print_catalog(result))
    lines = _readable(text, "x1e.32xlarge", "p3.16xlarge", "Standard_NC24ads_A100_v4", "8× A100")
    assert "aws us-east-1 (on-demand prices: offline-2017)" in lines[0]
    assert lines[1].split() == [
        "instance",
        "type",
        "vCPUs",
        "GiB",
        "GPUs",
        "arch",
        "on-demand",
        "$/h",
    ]


def test_check_shows_reasons_and_details_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    result = {
        "providers": [
            {
                "provider": "local",
                "usable": True,
                "details": {"trace": "builtin:skynomad-v100-2023"},
                "reason": "replay market over a real spot trace; trials run as local processes",
            },
            {
                "provider": "gcp",
                "usable": False,
                "details": {"chain": "GCE metadata server"},
                "reason": "no Application Default Credentials found; run `gcloud auth "
                "application-default login`, or set GOOGLE_APPLICATION_CREDENTIALS to a "
                "service-account key file",
            },
        ]
    }
    text = _render(monkeypatch, lambda: cloud_cli._print_check(result))
    _readable(
        text,
        "trace=builtin:skynomad-v100-2023",
        "GOOGLE_APPLICATION_CREDENTIALS",
        "chain=GCE metadata server",
    )
