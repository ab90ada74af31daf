"""A replayed zone whose spot price is empty on every row is not offered (Offer.billable), and
a spec that allows only that zone is told why (review-ap AP2: "no offer matches its zones"
while naming the zone as in the trace; before the price filter the run crashed writing a NaN
price)."""

from __future__ import annotations

from pathlib import Path

import yaml
from shared_helpers import tune_refused


def _trace(path: Path) -> None:
    rows = ["timestamp,availability_zone,instance_type,spot_available,spot_price_usd_per_hour,"
            "on_demand_price_usd_per_hour"]  # fmt: skip
    for i in range(40):
        t = f"2023-01-01T{i // 12:02d}:{i % 12 * 5:02d}:00"
        rows += [f"{t},us-east-1a,p3.2xlarge,1,0.9,3.06", f"{t},us-east-1b,p3.2xlarge,1,,3.06"]
    path.write_text("\n".join(rows) + "\n")


def test_a_zone_without_a_price_is_named_as_such(tmp_path: Path) -> None:
    _trace(tmp_path / "t.csv")
    spec = {
        "name": "nanzone",
        "command": ["python", "-c", "pass"],
        "metric": {"name": "acc"},
        "steps": 4,
        "trials": 1,
        "search_space": {"lr": {"type": "real", "low": 0.003, "high": 0.3, "log": True}},
        "providers": [
            {
                "name": "local",
                "zones": ["us-east-1b"],
                "markets": ["spot"],
                "replay": {"trace": str(tmp_path / "t.csv")},
            }
        ],
    }
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    message = tune_refused(tmp_path, path)
    assert message.endswith(
        "the trace has p3.2xlarge in us-east-1a, us-east-1b (us-east-1b: no price in the trace)"
    ), message
