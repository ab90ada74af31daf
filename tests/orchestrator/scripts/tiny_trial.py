"""A trial with no checkpoints (no torch import): reports metric(step) = step / 100 for steps
1..``$TINY_TRIAL_LAST_STEP`` (default: all of them), then exits 0 — early if told to."""

from __future__ import annotations

import os

from spotwise import sdk


def main() -> None:
    total = sdk.steps()
    last = int(os.environ.get("TINY_TRIAL_LAST_STEP", total))
    for step in range(1, min(last, total) + 1):
        sdk.report(step, step / 100)
        if sdk.should_stop():
            raise SystemExit(0)
    if last >= total:
        sdk.done(total)


if __name__ == "__main__":
    main()
