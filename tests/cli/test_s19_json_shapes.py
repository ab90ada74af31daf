"""docs/json.md lists every key of the `--json` output of `tune`, `status`, `trials`, `report`
and `cancel` (review-af F8): these tests parse its tables and run each command on a real small
replay job, so the document and the code cannot drift apart. Every documented key is there
(``null`` or ``[]`` when it does not apply: no key a script must `.get`), no other key appears,
and each value has a type its row allows. `tune --json`'s dollars are the job's as `status`
gives them, not rounded to 6 places."""

from __future__ import annotations

import json
import os
import re
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

TESTS = str(Path(__file__).resolve().parents[1])
if TESTS not in sys.path:
    sys.path.insert(0, TESTS)
from shared_helpers import REPO, record_launch, run_cli  # noqa: E402 (needs the path above)

from spotwise.cli.app import app  # noqa: E402
from spotwise.store import Store  # noqa: E402

DOC = REPO / "docs" / "json.md"
TINY = REPO / "tests" / "orchestrator" / "scripts" / "tiny_trial.py"
#: docs/json.md's section headings (their first `code`) → the output each describes
SECTIONS = {
    "status --json": "listing",
    "status JOB --json": "status",
    "trials [JOB] --json": "trials",
    "tune --json": "tune",
    "report --json": "report",
    "cancel JOB --json": "cancel",
}
KINDS = re.compile(r"\b(float|int|string|bool|null|list|object|map)\b")


def doc_tables() -> dict[str, dict[str, set[str]]]:
    """Section → key path → the types its row allows."""
    out: dict[str, dict[str, set[str]]] = {}
    section = None
    for line in DOC.read_text().splitlines():
        if line.startswith("## "):
            code = re.search(r"`([^`]+)`", line)
            section = SECTIONS.get(code.group(1)) if code else None
            if section:
                out[section] = {}
        elif section and line.startswith("| `"):
            cells = [c.strip() for c in line.strip("|").split("|")]
            out[section][cells[0].strip("`")] = set(KINDS.findall(cells[1]))
    assert set(out) == set(SECTIONS.values()), f"docs/json.md lacks a section: {set(out)}"
    return out


def walk(
    value: Any, path: str, doc: dict[str, set[str]], seen: dict[str, list[Any]], objs: set[str]
) -> None:
    """Every key path of ``value`` (a map's keys as ``*``) with its values into ``seen``; the
    paths of the objects whose keys were read into ``objs``."""
    if isinstance(value, dict):
        objs.add(path)
        is_map = any(p.startswith(f"{path}.*") for p in doc) if path else False
        for k, v in value.items():
            p = f"{path}.*" if is_map else (f"{path}.{k}" if path else k)
            seen.setdefault(p, []).append(v)
            walk(v, p, doc, seen, objs)
    elif isinstance(value, list):
        for v in value:
            walk(v, f"{path}[]", doc, seen, objs)


def type_ok(v: Any, kinds: set[str]) -> bool:
    if v is None:
        return "null" in kinds
    if isinstance(v, bool):
        return "bool" in kinds
    if isinstance(v, int):
        return bool(kinds & {"int", "float"})  # a float may print as 5 only if it is an int
    if isinstance(v, float):
        return "float" in kinds
    if isinstance(v, str):
        return "string" in kinds
    if isinstance(v, list):
        return "list" in kinds
    return bool(kinds & {"object", "map"})


def check(section: str, out: dict[str, Any]) -> None:
    doc = doc_tables()[section]
    seen: dict[str, list[Any]] = {}
    objs: set[str] = set()
    walk(out, "", doc, seen, objs)
    extra = set(seen) - set(doc)
    assert not extra, f"{section}: keys docs/json.md does not list: {sorted(extra)}"
    missing = {
        p for p in doc if not p.endswith("*") and (p.rsplit(".", 1)[0] if "." in p else "") in objs
    } - set(seen)
    assert not missing, f"{section}: documented keys missing from the output: {sorted(missing)}"
    for p, values in seen.items():
        bad = [v for v in values if not type_ok(v, doc[p])]
        assert not bad, f"{section}: {p} = {bad[0]!r} is not {doc[p]}"


@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A real replayed job of 2 trials of 3 steps under a $5 cap, run by `spotwise tune
    --json` (a few wall seconds): its summary, and the database."""
    tmp = tmp_path_factory.mktemp("json")
    spec = {
        "name": "tiny",
        "command": ["python", str(TINY)],
        "metric": {"name": "score", "direction": "maximize"},
        "steps": 3,
        "trials": 2,
        "parallel": 2,
        "search_space": {"lr": {"type": "real", "low": 0.001, "high": 0.1, "log": True}},
        "search": {"optimizer": "random"},
        "providers": [{"name": "local", "replay": {"speedup": 600}}],
        "budget": {"max_cost_usd": 5},
    }
    path = tmp / "job.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    db = f"sqlite:///{tmp / 'spotwise.db'}"
    env = {**os.environ, "SPOTWISE_DB": db}
    done = run_cli("tune", str(path), "--json", "--db", db, env=env)
    assert done.returncode == 0, done.stderr
    return {"summary": json.loads(done.stdout), "db": db}


def cli(*args: str) -> dict[str, Any]:
    done = CliRunner().invoke(app, [*args, "--json"])
    assert done.exit_code == 0, done.output
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def test_tune_json_has_every_documented_key(job: dict[str, Any]) -> None:
    out = job["summary"]
    check("tune", out)
    assert (out["error"], out["resumed"], out["leftover_instances"], out["not_ours"]) == (
        None,
        None,
        [],
        [],
    )


def test_status_trials_report_and_cancel_json_have_every_documented_key(
    job: dict[str, Any],
) -> None:
    db, job_id = job["db"], job["summary"]["job_id"]
    listing = cli("status", "--db", db)
    check("listing", listing)
    one = cli("status", job_id, "--db", db)
    check("status", one)
    assert one["orchestrator"] is None  # finished: null, not missing
    assert one["budget"] == {"max_cost_usd": 5.0, "exceeded_usd": None}
    check("trials", cli("trials", "--db", db))
    # `--until now`: the job's bills, written a moment ago (the default window ends 60 s back)
    report = cli("report", "--since", "all", "--until", "now", "--by", "job", "--db", db)
    check("report", report)
    (group,) = report["replay"]["groups"]
    assert (group["budget_usd"], group["exceeded_usd"]) == (5.0, None)
    by_provider = cli("report", "--since", "all", "--until", "now", "--db", db)
    check("report", by_provider)
    assert by_provider["replay"]["groups"][0]["budget_usd"] is None  # no one cap: null
    out = cli("cancel", job_id, "--db", db)
    check("cancel", out)
    assert (out["stopping"], out["not_ours"], out["open_instances"], out["billed_to"]) == (
        False,
        [],
        [],
        None,
    )


def test_a_running_job_and_a_dead_jobs_cancel_have_the_documented_keys(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The other cases: a job still running (its orchestrator gone: `orchestrator`, no cap:
    `budget` null), one life held (`report`'s `held`), and the cancel that closes it."""
    from shared_helpers import local_replay_spec

    from spotwise.planner import reconcile

    db = f"sqlite:///{tmp_path / 'spotwise.db'}"
    now = time.time()
    with Store.open(db) as s:
        j = s.create_job("j", local_replay_spec(), "job.yaml", "spot-greedy", "maximize")
        s.update_job(j.id, state="running", pid=0, started_at=now - 30, heartbeat_at=now - 20)
        t = s.add_trial(j.id, 0, {"lr": 0.01})
        s.update_trial(t.id, state="running")
        record_launch(
            s, j.id, t.id, price_per_hour=0.9, provider="local", id="l-0", state="running",
            launched_at=now - 30, provider_instance_id="local-0",
        )  # fmt: skip
    one = cli("status", j.id, "--db", db)
    check("status", one)
    assert (one["orchestrator"], one["budget"], one["best"]) == ("gone", None, None)
    check("listing", cli("status", "--db", db))
    report = cli("report", "--db", db)
    check("report", report)
    assert report["held"][0]["next"] == f"spotwise cancel {j.id}"
    monkeypatch.setattr(reconcile, "reconcile", lambda spec, job_id: [])  # died with it
    out = cli("cancel", j.id, "--db", db)
    check("cancel", out)
    assert out["closed_records"] == 1 and out["billed_to"] is not None


def test_tunes_dollars_are_the_jobs_as_status_gives_them(job: dict[str, Any]) -> None:
    """review-af F8: `tune --json` rounded its dollars to 6 places, `status` and `report` did
    not: one job, two costs."""
    tuned = job["summary"]
    shown = cli("status", tuned["job_id"], "--db", job["db"])
    assert tuned["cost_usd"] == shown["cost_usd"]
    assert tuned["on_demand_cost_usd"] == shown["on_demand_cost_usd"]
    with Store.open_existing(job["db"]) as s:
        lives = s.list_instances(tuned["job_id"])
    assert tuned["on_demand_cost_usd"] == pytest.approx(sum(r.on_demand_cost_usd for r in lives))
