"""A trial with no checkpoints (no torch import): reports metric(step) = step / 100 for steps
1..``$TINY_TRIAL_LAST_STEP`` (default: all of them), then exits 0 — early if told to. Steps
listed in ``$TINY_TRIAL_NAN_STEPS`` (comma-separated) report NaN instead (a diverged loss);
``$TINY_TRIAL_STEP_S`` wall seconds pass before each report (default none)."""

from __future__ import annotations

import os
import time

from spotwise import sdk


def main() -> None:
    total = sdk.steps()
    last = int(os.environ.get("TINY_TRIAL_LAST_STEP", total))
    nan = {int(s) for s in os.environ.get("TINY_TRIAL_NAN_STEPS", "").split(",") if s}
    pause = float(os.environ.get("TINY_TRIAL_STEP_S", "0"))
    for step in range(1, min(last, total) + 1):
        time.sleep(pause)
        sdk.report(step, float("nan") if step in nan else step / 100)
        if sdk.should_stop():
            raise SystemExit(0)
    if last >= total:
        sdk.done(total)


if __name__ == "__main__":
    main()
