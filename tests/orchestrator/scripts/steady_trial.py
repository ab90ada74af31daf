"""A tiny trial for the orchestrator tests, written against ``spotwise.sdk`` like a user's script.

metric(step) = 1 - 1 / (step + 1), deterministic, whatever the hyper-parameters; a step takes
``$STEADY_TRIAL_STEP_S`` wall seconds (default 0.25). It checkpoints when
``checkpoint_due`` says so, resumes from the newest checkpoint, and exits 0 after saving once a
stop is requested.
"""

from __future__ import annotations

import os
import time

from spotwise import sdk


def metric(step: int) -> float:
    return 1.0 - 1.0 / (step + 1)


def main() -> None:
    total = sdk.steps()  # first SDK call: installs the SIGTERM handler before anything slow
    step_s = float(os.environ.get("STEADY_TRIAL_STEP_S", "0.25"))
    # torch (the checkpoint serialiser) takes seconds to import on a busy machine: import it
    # now so that the first checkpoint does not stall a step
    import torch  # noqa: F401

    state = sdk.load_checkpoint()
    start = int(state["step"]) if state else 0
    for step in range(start + 1, total + 1):
        time.sleep(step_s)
        sdk.report(step, metric(step))
        due = sdk.checkpoint_due(step)
        stop = sdk.should_stop()  # decided once, before saving: never leave unsaved
        if due or stop:
            sdk.save_checkpoint({"step": step, "metric": metric(step)}, step)
        if stop:
            raise SystemExit(0)
    sdk.done(total)


if __name__ == "__main__":
    main()
