"""Resuming never silently starts from the wrong point.

A corrupt or unreadable newest checkpoint, one of another trial, or a checkpoint folder that
lost what the orchestrator saw saved: each is a warning line on stderr and an event, the bad
files are kept aside (``*.corrupt`` / ``*.foreign``), and the load falls back to the newest
usable checkpoint. A failure of the machine or the store (out of memory, a device, a read that
failed) is not the file's: it propagates and nothing is set aside. Saving a step older than the
latest (a script that never resumes) is saved and kept, with one warning and one event.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import os
import pickle
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from spotwise import sdk
from spotwise.checkpoint import checkpoint_name, manifest_name
from spotwise.checkpoint.base import UnusableCheckpointError
from spotwise.checkpoint.blobstore import BlobCheckpointStore
from spotwise.errors import CheckpointError, ConfigError, ProviderError
from spotwise.providers.file_blobs import FileBlobs

torch = pytest.importorskip("torch")

UNSAFE_ADVICE = "weights_only` set to `False`"


@pytest.fixture(autouse=True)
def fresh_sdk(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    for name in list(os.environ):
        if name.startswith("SPOTWISE_"):
            monkeypatch.delenv(name)
    monkeypatch.setattr(sdk, "_runtime", sdk._Runtime())
    monkeypatch.chdir(tmp_path)
    previous = signal.getsignal(signal.SIGTERM)
    yield
    signal.signal(signal.SIGTERM, previous)


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> dict[str, Path]:
    paths = {"ckpt": tmp_path / "ckpt" / "trial-3", "events": tmp_path / "events.jsonl"}
    for k, v in {
        "SPOTWISE_JOB_ID": "job-1",
        "SPOTWISE_TRIAL_ID": "trial-3",
        "SPOTWISE_STEPS": "20",
        "SPOTWISE_CHECKPOINT_URI": str(paths["ckpt"]),
        "SPOTWISE_EVENTS_FILE": str(paths["events"]),
    }.items():
        monkeypatch.setenv(k, v)
    return paths


def _events(path: Path, kind: str) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    return [{k: v for k, v in r.items() if k != "time"} for r in rows if r["type"] == kind]


def _save(step: int) -> None:
    sdk.save_checkpoint({"step": step, "w": torch.full((50,), float(step))}, step)


def _forge(folder: Path, step: int, data: bytes, **meta: Any) -> None:
    """Write ``data`` as the checkpoint of ``step`` with a manifest that verifies (what
    review's evil.py does: any bytes, the right size and hash)."""
    name = checkpoint_name(step)
    (folder / name).write_bytes(data)
    manifest = {
        "step": step,
        "file": name,
        "sha256": hashlib.sha256(data).hexdigest(),
        "size": len(data),
        "created_at": time.time(),
        **meta,
    }
    (folder / manifest_name(step)).write_text(json.dumps(manifest))
    (folder / "LATEST").write_text(manifest_name(step) + "\n")


def _torch_bytes(obj: Any) -> bytes:
    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


class Boom:
    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return (print, ("unpickled!",))


# -- 1a: a corrupt newest checkpoint -----------------------------------------------------------
def test_a_corrupt_newest_is_warned_about_recorded_and_kept_aside(
    env: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    _save(5)
    _save(10)
    newest = env["ckpt"] / "ckpt-00000010.pt"
    data = bytearray(newest.read_bytes())
    data[60] ^= 1
    newest.write_bytes(bytes(data))
    sha = hashlib.sha256(bytes(data)).hexdigest()
    recorded = json.loads((env["ckpt"] / "ckpt-00000010.json").read_text())["sha256"]
    capsys.readouterr()

    state = sdk.load_checkpoint()
    assert state is not None and state["step"] == 5
    kept = f"{newest}.corrupt"
    reason = f"checkpoint {newest} is corrupt: sha256 {sha[:12]}…, manifest says {recorded[:12]}…"
    assert capsys.readouterr().err.splitlines() == [
        f"spotwise: warning: {reason}; resuming from step 5 instead; kept as {kept}"
    ]
    assert _events(env["events"], "checkpoint_rejected") == [
        {
            "type": "checkpoint_rejected",
            "step": 10,
            "file": "ckpt-00000010.pt",
            "reason": reason,
            "kept_as": kept,
            "resume_step": 5,
        }
    ]
    assert Path(kept).read_bytes() == bytes(data)  # the evidence, byte for byte
    assert (env["ckpt"] / "LATEST").read_text() == "ckpt-00000005.json\n"

    for step in range(6, 11):  # training goes on; its step-10 save leaves the evidence alone
        if step % 5 == 0:
            _save(step)
    assert Path(kept).read_bytes() == bytes(data)
    assert sorted(os.listdir(env["ckpt"])) == [
        "LATEST",
        "ckpt-00000005.json",
        "ckpt-00000005.pt",
        "ckpt-00000010.json",
        "ckpt-00000010.json.corrupt",
        "ckpt-00000010.pt",
        "ckpt-00000010.pt.corrupt",
    ]
    state = sdk.load_checkpoint()
    assert state is not None and state["step"] == 10
    assert capsys.readouterr().err == ""


# -- 2: what torch.load(weights_only=True) refuses ---------------------------------------------
NOT_TORCH = "is not a file torch.save wrote, or it is damaged"


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        (b"hello world, not a checkpoint\n", NOT_TORCH),  # torch: KeyError: 101
        (b"not a checkpoint\n", NOT_TORCH),  # torch: UnpicklingError with its unsafe advice
        (b"", "is empty"),  # torch: EOFError with no message
        (_torch_bytes({"w": torch.zeros(100)})[:300], NOT_TORCH + " (torch.load: "),  # truncated
        (_torch_bytes([1, 2, 3]), "holds a list, not a dict"),
        (
            _torch_bytes({"x": Boom()}),
            "holds objects that safe loading (weights_only) refuses: print; save only tensors, "
            "numbers, strings and lists/dicts of them",
        ),
        (pickle.dumps({"step": 10}), NOT_TORCH),
    ],
    ids=["text", "text2", "empty", "truncated", "list", "unsafe", "raw-pickle"],
)
def test_an_unloadable_newest_falls_back_with_a_one_line_warning(
    env: dict[str, Path], capsys: pytest.CaptureFixture[str], payload: bytes, reason: str
) -> None:
    _save(5)
    _forge(env["ckpt"], 10, payload, trial_id="trial-3")
    capsys.readouterr()
    state = sdk.load_checkpoint()
    assert state is not None and state["step"] == 5
    err = capsys.readouterr().err
    where = env["ckpt"] / "ckpt-00000010.pt"
    assert len(err.splitlines()) == 1, err
    assert err.startswith(f"spotwise: warning: checkpoint {where} {reason}")
    assert err.endswith(f"; resuming from step 5 instead; kept as {where}.corrupt\n")
    assert UNSAFE_ADVICE not in err and "KeyError" not in err and "Traceback" not in err
    assert (env["ckpt"] / "ckpt-00000010.pt.corrupt").read_bytes() == payload
    (event,) = _events(env["events"], "checkpoint_rejected")
    assert event["step"] == 10 and event["resume_step"] == 5 and reason in event["reason"]


@pytest.mark.parametrize("payload", [b"hello world, not a checkpoint\n", b"not a checkpoint\n"])
def test_an_unloadable_only_checkpoint_is_one_clear_error(
    env: dict[str, Path], payload: bytes
) -> None:
    env["ckpt"].mkdir(parents=True)
    _forge(env["ckpt"], 5, payload)
    with pytest.raises(CheckpointError) as err:
        sdk.load_checkpoint()
    where = env["ckpt"] / "ckpt-00000005.pt"
    assert err.value.message == (
        f"checkpoint {where} {NOT_TORCH}; no older checkpoint in {env['ckpt']} is usable either"
    )
    assert err.value.hint == f"remove {env['ckpt']} to restart the trial from scratch"
    assert (env["ckpt"] / "ckpt-00000005.pt").exists()  # nothing set aside without a fallback
    # what a training script shows: no KeyError, no torch advice to load unsafely
    out = subprocess.run(
        [sys.executable, "-c", "from spotwise import sdk; sdk.load_checkpoint()"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 1
    assert out.stderr.splitlines()[-1] == f"spotwise.errors.CheckpointError: {err.value.message}"
    assert UNSAFE_ADVICE not in out.stderr and "KeyError" not in out.stderr
    assert "During handling" not in out.stderr and "direct cause" not in out.stderr


def test_a_numpy_checkpoint_names_the_refused_type_not_the_unsafe_advice(
    env: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    np = pytest.importorskip("numpy")
    env["ckpt"].mkdir(parents=True)
    _forge(env["ckpt"], 5, _torch_bytes({"a": np.arange(3)}))
    with pytest.raises(CheckpointError) as err:
        sdk.load_checkpoint()
    msg = err.value.message
    assert "holds objects that safe loading (weights_only) refuses: numpy." in msg
    assert "\n" not in msg and UNSAFE_ADVICE not in msg and "add_safe_globals" not in msg
    assert capsys.readouterr().err == ""  # torch's pickle-protocol warning is not shown either


def test_a_checkpoint_for_another_device_is_not_taken_for_a_corrupt_one(
    env: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    _save(5)
    _save(10)

    def cuda_only(*args: Any, **kw: Any) -> Any:
        raise RuntimeError(
            "Attempting to deserialize object on a CUDA device but torch.cuda.is_available() is "
            "False. If you are running on a CPU-only machine, please use torch.load with "
            "map_location=torch.device('cpu') to map your storages to the CPU."
        )

    monkeypatch.setattr(torch, "load", cuda_only)
    with pytest.raises(ConfigError) as err:
        sdk.load_checkpoint(map_location="cuda")
    where = env["ckpt"] / "ckpt-00000010.pt"
    assert err.value.message == (
        f"checkpoint {where} cannot be loaded here: Attempting to deserialize object on a CUDA "
        "device but torch.cuda.is_available() is False"
    )
    assert err.value.hint == "pass map_location to sdk.load_checkpoint (the default is 'cpu')"
    assert not list(env["ckpt"].glob("*.corrupt"))  # a good checkpoint is not set aside


# -- 2b: what is not the file's fault is not set aside -------------------------------------------
def _fail_first_load(monkeypatch: pytest.MonkeyPatch, error: BaseException) -> None:
    real = torch.load
    calls: list[int] = []

    def flaky(*args: Any, **kw: Any) -> Any:
        calls.append(1)
        if len(calls) == 1:
            raise error
        return real(*args, **kw)

    monkeypatch.setattr(torch, "load", flaky)


MEMORY_HINT = (
    "free memory before sdk.load_checkpoint, or load to the CPU (map_location='cpu', the "
    "default) and move the state after; the checkpoint is left as it is"
)
DEVICE_HINT = "pass map_location to sdk.load_checkpoint (the default is 'cpu')"


@pytest.mark.parametrize(
    ("error", "detail", "hint"),
    [
        (
            torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"),
            "CUDA out of memory",
            MEMORY_HINT,
        ),
        (MemoryError(), "out of memory", MEMORY_HINT),
        (
            RuntimeError("CUDA error: out of memory\nCUDA kernel errors might be reported..."),
            "CUDA error: out of memory",
            MEMORY_HINT,
        ),
        (
            RuntimeError("CUDA error: an illegal memory access was encountered\nCompile with..."),
            "CUDA error: an illegal memory access was encountered",
            DEVICE_HINT,
        ),
        (
            RuntimeError(
                "Attempting to deserialize object on CUDA device 3 but "
                "torch.cuda.device_count() is 1. Please use torch.load with ..."
            ),
            "Attempting to deserialize object on CUDA device 3 but torch.cuda.device_count() is 1",
            DEVICE_HINT,
        ),
    ],
    ids=["cuda-oom", "memory", "cuda-error-oom", "cuda-error", "no-such-gpu"],
)
def test_a_machine_failure_while_loading_is_one_line_and_sets_nothing_aside(
    env: dict[str, Path],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    error: BaseException,
    detail: str,
    hint: str,
) -> None:
    _save(5)
    _save(10)
    before = sorted(os.listdir(env["ckpt"]))
    capsys.readouterr()
    _fail_first_load(monkeypatch, error)
    with pytest.raises(ConfigError) as err:
        sdk.load_checkpoint()
    where = env["ckpt"] / "ckpt-00000010.pt"
    assert err.value.message == f"checkpoint {where} cannot be loaded here: {detail}"
    assert err.value.hint == hint
    assert sorted(os.listdir(env["ckpt"])) == before  # nothing renamed
    assert capsys.readouterr().err == ""
    assert _events(env["events"], "checkpoint_rejected") == []
    state = sdk.load_checkpoint()  # the next attempt: the newest checkpoint, unharmed
    assert state is not None and state["step"] == 10


def test_a_bad_map_location_sets_nothing_aside(env: dict[str, Path]) -> None:
    _save(5)
    _save(10)
    before = sorted(os.listdir(env["ckpt"]))
    where = env["ckpt"] / "ckpt-00000010.pt"
    with pytest.raises(ConfigError) as err:
        sdk.load_checkpoint(map_location="tpu-ish")
    assert err.value.message == (
        f"checkpoint {where} cannot be loaded here: don't know how to restore data location of "
        "torch.storage.UntypedStorage (tagged with tpu-ish)"
    )
    with pytest.raises(TypeError, match=r"^map_location must be a device name .*, got int 3$"):
        sdk.load_checkpoint(map_location=3)

    def mine(storage: Any, location: str) -> Any:
        raise KeyError("my own bug")

    with pytest.raises(KeyError, match="my own bug"):  # the caller's own error, as it is
        sdk.load_checkpoint(map_location=mine)
    assert sorted(os.listdir(env["ckpt"])) == before
    state = sdk.load_checkpoint(map_location=lambda storage, location: storage)
    assert state is not None and state["step"] == 10


def test_a_failed_read_from_the_store_sets_nothing_aside(
    env: dict[str, Path], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    fail_next: list[str] = []

    class Throttled(FileBlobs):
        def get(self, name: str, token: str = "") -> tuple[bytes | None, str]:
            if name in fail_next:
                fail_next.remove(name)
                raise ProviderError(
                    f"aws: reading {name} from s3://b/p failed: SlowDown (503): Please reduce "
                    "your request rate"
                )
            return super().get(name, token)

    folder = env["ckpt"].parent / "blobs"
    monkeypatch.setattr(sdk, "checkpoint_store", lambda: BlobCheckpointStore(Throttled(folder)))
    _save(5)
    _save(10)
    before = sorted(os.listdir(folder))
    capsys.readouterr()
    for name in ("ckpt-00000010.pt", "ckpt-00000010.json"):
        fail_next.append(name)
        with pytest.raises(CheckpointError) as err:
            sdk.load_checkpoint()
        assert not isinstance(err.value, UnusableCheckpointError)
        assert err.value.message == (
            f"checkpoint store: aws: reading {name} from s3://b/p failed: SlowDown (503): "
            "Please reduce your request rate"
        )
        assert sorted(os.listdir(folder)) == before  # nothing renamed
    assert capsys.readouterr().err == ""
    state = sdk.load_checkpoint()  # the next attempt: the newest checkpoint, unharmed
    assert state is not None and state["step"] == 10


# -- 4: another trial's checkpoints ------------------------------------------------------------
def test_another_trials_checkpoint_folder_is_refused(
    env: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SPOTWISE_TRIAL_ID", "trial-A")
    _save(5)
    _save(10)
    monkeypatch.setenv("SPOTWISE_TRIAL_ID", "trial-3")
    with pytest.raises(CheckpointError) as err:
        sdk.load_checkpoint()
    where = env["ckpt"] / "ckpt-00000010.pt"
    assert err.value.message == (
        f"checkpoint {where} belongs to trial trial-A of job job-1, not to this trial trial-3; "
        f"no older checkpoint in {env['ckpt']} is usable either"
    )
    monkeypatch.delenv("SPOTWISE_TRIAL_ID")  # run by hand: no trial id to check against
    state = sdk.load_checkpoint()
    assert state is not None and state["step"] == 10


def test_another_trials_newest_checkpoint_is_skipped_and_kept_aside(
    env: dict[str, Path], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _save(5)
    monkeypatch.setenv("SPOTWISE_TRIAL_ID", "trial-A")
    _save(10)
    monkeypatch.setenv("SPOTWISE_TRIAL_ID", "trial-3")
    capsys.readouterr()
    state = sdk.load_checkpoint()
    assert state is not None and state["step"] == 5
    where = env["ckpt"] / "ckpt-00000010.pt"
    assert capsys.readouterr().err.splitlines() == [
        f"spotwise: warning: checkpoint {where} belongs to trial trial-A of job job-1, not to "
        f"this trial trial-3; resuming from step 5 instead; kept as {where}.foreign"
    ]
    assert (env["ckpt"] / "ckpt-00000010.json.foreign").exists()
    _save(6)  # not refused as older than another trial's step 10: that one is aside now


# -- 1b: a checkpoint the orchestrator saw saved is gone -------------------------------------
def test_a_missing_folder_when_a_checkpoint_was_expected_is_warned_about(
    env: dict[str, Path], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("SPOTWISE_RESUME_STEP", "10")
    assert sdk.load_checkpoint() is None  # continues from scratch (see the sdk docs: why)
    assert capsys.readouterr().err.splitlines() == [
        f"spotwise: warning: expected to resume from the checkpoint of step 10 in {env['ckpt']}, "
        "but there is none; training steps 1-10 again"
    ]
    assert _events(env["events"], "resume_behind") == [
        {"type": "resume_behind", "step": 0, "expected": 10, "uri": str(env["ckpt"])}
    ]


def test_an_older_checkpoint_than_expected_is_warned_about(
    env: dict[str, Path], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _save(5)
    monkeypatch.setenv("SPOTWISE_RESUME_STEP", "10")
    capsys.readouterr()
    state = sdk.load_checkpoint()
    assert state is not None and state["step"] == 5
    assert capsys.readouterr().err.splitlines() == [
        f"spotwise: warning: expected to resume from the checkpoint of step 10 in {env['ckpt']}, "
        "but the newest usable one is step 5; training steps 6-10 again"
    ]
    assert [e["step"] for e in _events(env["events"], "resume_behind")] == [5]


@pytest.mark.parametrize("expected", ["0", "5", "3"])
def test_the_expected_checkpoint_or_a_newer_one_is_quiet(
    env: dict[str, Path],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    expected: str,
) -> None:
    _save(5)
    monkeypatch.setenv("SPOTWISE_RESUME_STEP", expected)
    capsys.readouterr()
    state = sdk.load_checkpoint()
    assert state is not None and state["step"] == 5
    assert capsys.readouterr().err == ""
    assert _events(env["events"], "resume_behind") == []


def test_a_fallback_below_the_expected_step_warns_once(
    env: dict[str, Path], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _save(5)
    _forge(env["ckpt"], 10, b"junk")
    monkeypatch.setenv("SPOTWISE_RESUME_STEP", "10")
    capsys.readouterr()
    sdk.load_checkpoint()
    (line,) = capsys.readouterr().err.splitlines()  # the fallback line says it all
    assert "resuming from step 5 instead" in line
    assert _events(env["events"], "resume_behind") == []


def test_a_bad_resume_step_is_a_config_error(
    env: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SPOTWISE_RESUME_STEP", "-1")
    with pytest.raises(ConfigError, match="SPOTWISE_RESUME_STEP must be >= 0, got -1"):
        sdk.load_checkpoint()


# -- 3: a script that never resumes saves older steps than its earlier attempt left --------
def test_saving_an_older_step_keeps_it_and_warns_once(
    env: dict[str, Path], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for step in (5, 10, 15):  # the earlier attempt; retention leaves 10 and 15
        _save(step)
    monkeypatch.setattr(sdk, "_runtime", sdk._Runtime())  # the relaunch: a new process
    capsys.readouterr()
    uri = sdk.save_checkpoint({"step": 5, "w": torch.zeros(3)}, 5)  # retrains from scratch
    assert uri == str(env["ckpt"] / "ckpt-00000005.pt") and Path(uri).exists()
    assert capsys.readouterr().err.splitlines() == [
        f"spotwise: warning: saving step 5 while {env['ckpt']} holds step 15 from an earlier "
        "attempt: this script does not resume from its checkpoints (call sdk.load_checkpoint() "
        "at its start to continue from step 15)"
    ]
    assert _events(env["events"], "checkpoint_behind") == [
        {"type": "checkpoint_behind", "step": 5, "latest": 15, "uri": str(env["ckpt"])}
    ]
    assert (env["ckpt"] / "LATEST").read_text() == "ckpt-00000005.json\n"
    assert sorted(os.listdir(env["ckpt"])) == [
        "LATEST",
        "ckpt-00000005.json",
        "ckpt-00000005.pt",
        "ckpt-00000010.json",
        "ckpt-00000010.pt",
        "ckpt-00000015.json",
        "ckpt-00000015.pt",
    ]
    _save(10)  # still behind: no second warning, no second event
    assert capsys.readouterr().err == ""
    assert len(_events(env["events"], "checkpoint_behind")) == 1
    assert sorted(os.listdir(env["ckpt"]))[1:] == [
        "ckpt-00000010.json",
        "ckpt-00000010.pt",
        "ckpt-00000015.json",
        "ckpt-00000015.pt",
    ]
    state = sdk.load_checkpoint()  # readers go by step: the earlier attempt's 15 is kept
    assert state is not None and state["step"] == 15
    assert [e["step"] for e in _events(env["events"], "checkpoint")] == [5, 10, 15, 5, 10]


def test_going_back_within_one_process_says_so(
    env: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    _save(10)
    capsys.readouterr()
    _save(5)
    assert capsys.readouterr().err.splitlines() == [
        f"spotwise: warning: saving step 5 after this script saved step 10 in {env['ckpt']}: a "
        "relaunch resumes from the highest step (sdk.load_checkpoint() loads step 10)"
    ]
    assert (env["ckpt"] / "ckpt-00000005.pt").exists()


def test_going_back_after_resuming_says_so(
    env: dict[str, Path], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _save(10)
    monkeypatch.setattr(sdk, "_runtime", sdk._Runtime())
    state = sdk.load_checkpoint()
    assert state is not None and state["step"] == 10
    capsys.readouterr()
    _save(5)  # it loaded step 10, then started over anyway
    assert capsys.readouterr().err.splitlines() == [
        f"spotwise: warning: saving step 5 while {env['ckpt']} holds step 10: a relaunch resumes "
        "from the highest step (sdk.load_checkpoint() loads step 10)"
    ]


NO_LOAD = """\
import sys
from spotwise import sdk
for step in range(1, sdk.steps() + 1):
    sdk.report(step, step / 10)
    if sdk.checkpoint_due(step):
        sdk.save_checkpoint({"step": step}, step)
sdk.done(sdk.steps())
print("done", file=sys.stderr)
"""


def test_a_script_that_never_loads_still_finishes_on_a_relaunch(
    env: dict[str, Path], tmp_path: Path
) -> None:
    (tmp_path / "noload.py").write_text(NO_LOAD)
    base = {
        **os.environ,
        "SPOTWISE_STEPS": "12",
        "SPOTWISE_CHECKPOINT_EVERY": "5",
        "PYTHONPATH": os.pathsep.join(sys.path),
    }
    runs = [
        subprocess.run(
            [sys.executable, "noload.py"],
            env={**base, "SPOTWISE_ATTEMPT": str(attempt)},
            capture_output=True,
            text=True,
            timeout=120,
        )
        for attempt in (0, 1)
    ]
    assert [(r.returncode, r.stderr.splitlines()[-1]) for r in runs] == [(0, "done"), (0, "done")]
    assert runs[0].stderr.splitlines() == ["done"]
    assert runs[1].stderr.splitlines() == [
        f"spotwise: warning: saving step 5 while {env['ckpt']} holds step 10 from an earlier "
        "attempt: this script does not resume from its checkpoints (call sdk.load_checkpoint() "
        "at its start to continue from step 10)",
        "done",
    ]
    assert (env["ckpt"] / "LATEST").read_text() == "ckpt-00000010.json\n"
    assert [e["step"] for e in _events(env["events"], "done")] == [12, 12]


# -- 1b end to end: the orchestrator hands the expected step to the relaunched trial ----------
TRAIN_RM = """\
import json, os, shutil, sys
from spotwise import sdk
import torch

state = sdk.load_checkpoint()
start = state["step"] if state else 0
with open(os.environ["REVIEW_LOG"], "a") as fh:
    fh.write(json.dumps({"attempt": sdk.attempt(), "resumed_from": start,
                         "expected": os.environ.get("SPOTWISE_RESUME_STEP")}) + "\\n")
for step in range(start + 1, sdk.steps() + 1):
    sdk.report(step, float(step))
    if sdk.checkpoint_due(step) or sdk.should_stop():
        uri = sdk.save_checkpoint({"step": step, "w": torch.zeros(3)}, step)
        if sdk.attempt() == 0 and step == 4:
            shutil.rmtree(os.path.dirname(uri))  # the folder is lost, then the trial crashes
            sys.exit(3)
sdk.done(sdk.steps())
"""


def _write_trace(path: Path, ticks: int = 900) -> None:
    t0 = datetime(2023, 3, 1, tzinfo=UTC)
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(
            ["timestamp", "availability_zone", "instance_type", "spot_available",
             "spot_price_usd_per_hour", "on_demand_price_usd_per_hour"]
        )  # fmt: skip
        for i in range(ticks):
            stamp = (t0 + timedelta(seconds=30 * i)).strftime("%Y-%m-%d %H:%M:%S")
            w.writerow([stamp, "us-east-1b", "p3.2xlarge", 1, "2.0", "5.0"])


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_a_relaunch_after_the_folder_was_lost_warns_instead_of_silently_restarting(
    tmp_path: Path,
) -> None:
    from spotwise import jobs
    from spotwise.store import Store

    (tmp_path / "train_rm.py").write_text(TRAIN_RM)
    _write_trace(tmp_path / "trace.csv")
    log = tmp_path / "attempts.jsonl"
    spec = {
        "name": "lost-folder",
        "command": ["python", "train_rm.py"],
        "metric": {"name": "m", "direction": "maximize"},
        "steps": 6,
        "trials": 1,
        "parallel": 1,
        "search_space": {"lr": {"type": "real", "low": 0.01, "high": 0.1}},
        "policy": "on-demand",
        "providers": [
            {"name": "local", "replay": {"trace": str(tmp_path / "trace.csv"), "speedup": 30.0}}
        ],
        "checkpoint": {"every": 2, "location": str(tmp_path / "ckpt")},
        "env": {"REVIEW_LOG": str(log), "PYTHONPATH": os.pathsep.join(sys.path)},
    }
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    db = f"sqlite:///{tmp_path / 'spotwise.db'}"
    summary = jobs.tune(path, db=db, run_root=tmp_path / "runs")

    attempts = [json.loads(line) for line in log.read_text().splitlines()]
    assert attempts == [
        {"attempt": 0, "resumed_from": 0, "expected": "0"},
        {"attempt": 1, "resumed_from": 0, "expected": "4"},
    ]
    with Store.open_existing(db) as store:
        launches = store.events(summary["job_id"], kind="launch")
        behind = store.events(summary["job_id"], kind="resume_behind")
    assert [e.detail["resume_step"] for e in launches] == [0, 4]
    # the trial's warning is the job's event too (`spotwise status` and the store show it)
    assert [(e.detail["step"], e.detail["expected"]) for e in behind] == [(0, 4)]
    run_dir = tmp_path / "runs" / summary["job_id"]
    (events_file,) = run_dir.glob("*/events-1.jsonl")
    assert _events(events_file, "resume_behind") == [
        {
            "type": "resume_behind",
            "step": 0,
            "expected": 4,
            "uri": str(tmp_path / "ckpt" / summary["job_id"] / events_file.parent.name),
        }
    ]
    logs = "".join(p.read_text(errors="replace") for p in (run_dir / "logs").glob("*.log"))
    assert "spotwise: warning: expected to resume from the checkpoint of step 4" in logs
    shutil.rmtree(tmp_path / "ckpt", ignore_errors=True)
