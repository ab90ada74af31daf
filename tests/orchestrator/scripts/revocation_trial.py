"""``steady_trial.py`` as the revocation tests run it, changed in two ways that only save wall
time, neither in what the orchestrator sees:

* every relaunch (``SPOTWISE_ATTEMPT`` >= 1) steps at ``$RELAUNCH_TRIAL_STEP_S`` wall seconds
  (default 0.02) instead of ``$STEADY_TRIAL_STEP_S``: the first attempt must be slow enough to
  be running when the notice comes, but what the relaunch does after its resume (the same
  metrics, checkpoints and exit) does not depend on its pace, which was most of such a test's
  wall time;
* once stopped (its checkpoint saved and its events fsynced by the SDK) it leaves with
  ``os._exit`` instead of tearing its interpreter down, which with torch loaded takes a wall
  second or more on a busy machine. A notice window replayed at 60x is 2 wall s (AWS: 120 s):
  that second was half of it, and the orchestrator must release the instance within it.
"""

from __future__ import annotations

import os
import runpy
import sys
from pathlib import Path

if os.environ.get("SPOTWISE_ATTEMPT", "0") != "0":
    os.environ["STEADY_TRIAL_STEP_S"] = os.environ.get("RELAUNCH_TRIAL_STEP_S", "0.02")
try:
    runpy.run_path(str(Path(__file__).with_name("steady_trial.py")), run_name="__main__")
except SystemExit as stop:  # steady_trial's exit once stopped: SystemExit(0) after its save
    sys.stdout.flush()
    sys.stderr.flush()
    code = 0 if stop.code is None else stop.code
    os._exit(code if isinstance(code, int) else 1)
