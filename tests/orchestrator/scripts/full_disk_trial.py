"""A trial (no torch import) that reports metric(step) = step / 100 and saves a small checkpoint
every 2 steps through the SDK's store; while the file ``$FULL_DISK_FLAG`` exists its save at
step 4 or later is refused with ENOSPC (the store's temp file cannot be created), said as the
SDK's ``save_checkpoint`` says it (a ``checkpoint_failed`` event), and the CheckpointError ends
it (exit 1). Each start appends ``<attempt> <resume step>`` to ``$FULL_DISK_LOG``."""

from __future__ import annotations

import errno
import os
from typing import Any

from spotwise import sdk
from spotwise.checkpoint import checkpoint_name, local
from spotwise.sdk_io import emit, say_storage_failed


def _full(*_: Any, **__: Any) -> Any:
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def main() -> None:
    total, store = sdk.steps(), sdk.checkpoint_store()
    start = int(os.environ.get("SPOTWISE_RESUME_STEP") or 0)
    with open(os.environ["FULL_DISK_LOG"], "a") as fh:
        fh.write(f"{sdk.attempt()} {start}\n")
    for step in range(start + 1, total + 1):
        sdk.report(step, step / 100)
        if step % 2:
            continue
        if step >= 4 and os.path.exists(os.environ["FULL_DISK_FLAG"]):
            local.create_temp = _full  # type: ignore[attr-defined]  # the disk is full
        try:
            uri = store.put(checkpoint_name(step), b"x" * step, {"step": step})
        except Exception as e:
            say_storage_failed(e, store.uri, step)
            raise
        emit({"type": "checkpoint", "step": step, "uri": uri})
        if sdk.should_stop():
            raise SystemExit(0)
    sdk.done(total)


if __name__ == "__main__":
    main()
