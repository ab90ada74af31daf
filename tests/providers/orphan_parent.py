"""An orchestrator stand-in for the cancel-after-a-crash tests (test_local_orphans,
test_s20i_timeout_session): a local provisioner on a one-zone market launches one trial for job
``job_id``, prints its instance id as JSON and waits to be killed.

Run it as ``[sys.executable, "-c", parent_script(job_id), RECORDS_DIR, json.dumps(TRIAL_ARGV)]``.
"""

from __future__ import annotations

_PARENT = """
import json, sys, time
from pathlib import Path
import numpy as np
from spotwise.providers.base import LaunchRequest, Market, our_tags
from spotwise.providers.local import LocalProvisioner
from spotwise.providers.replay import MarketClock, ReplayMarket
from spotwise.traces import TraceSet

t0 = 1_700_000_000.0
traces = TraceSet(["us-east-1a"], t0 + 10.0 * np.arange(40), np.ones((1, 40), dtype=bool),
                  np.ones((1, 40)), instance_type="p3.2xlarge", on_demand_price=5.0,
                  gap_seconds=10.0)
market = ReplayMarket(traces)
prov = LocalProvisioner(market, MarketClock(t0, 1.0), records_dir=Path(sys.argv[1]))
(offer,) = market.offers(at=t0, market=Market.ON_DEMAND)
tags = our_tags(JOB_ID, "trial-1", "tok-1")
inst = prov.launch(LaunchRequest(offer, tuple(json.loads(sys.argv[2])), {}, tags, "tok-1", ""))
print(json.dumps({"instance_id": inst.instance_id}), flush=True)
time.sleep(120)
"""


def parent_script(job_id: str) -> str:
    return _PARENT.replace("JOB_ID", repr(job_id))
