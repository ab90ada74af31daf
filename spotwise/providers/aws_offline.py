"""Data behind the AWS catalog that needs no AWS call: the shipped offline on-demand catalog
(ec2instances.info, 2017-11-12, MIT; see ``spotwise/data/ec2-on-demand-2017/SOURCE.md``) and
the parsers of ``describe_instance_types`` and Pricing API answers."""

from __future__ import annotations

import csv
import json
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

OFFLINE_CSV = (
    Path(__file__).resolve().parent.parent
    / "data"
    / "ec2-on-demand-2017"
    / "ec2_on_demand_linux_2017-11-12.csv"
)
OFFLINE_SOURCE = "offline-2017"
API_SOURCE = "pricing-api"
# GPU models of the GPU families in the 2017 catalog (it counts GPUs but does not name them).
OFFLINE_GPU_NAMES = {"p2": "K80", "p3": "V100", "g3": "M60"}


@dataclass(frozen=True)
class Hardware:
    """What an instance type is made of."""

    vcpus: int
    memory_gb: float
    gpus: int
    gpu_name: str
    architecture: str


@cache
def _offline_rows() -> tuple[dict[str, str], ...]:
    with open(OFFLINE_CSV, newline="") as fh:
        return tuple(csv.DictReader(fh))


def offline_regions() -> list[str]:
    return sorted({r["region"] for r in _offline_rows()})


def offline_prices(region: str) -> dict[str, float]:
    """On-demand USD/h of Linux instance types in ``region`` from the 2017 catalog."""
    return {
        r["instance_type"]: float(r["on_demand_usd_per_hour"])
        for r in _offline_rows()
        if r["region"] == region
    }


@cache
def offline_hardware() -> dict[str, Hardware]:
    out: dict[str, Hardware] = {}
    for r in _offline_rows():
        gpus = int(float(r["gpus"] or 0))
        family = r["instance_type"].split(".", 1)[0]
        out[r["instance_type"]] = Hardware(
            vcpus=int(float(r["vcpus"])),
            memory_gb=float(r["memory_gib"]),
            gpus=gpus,
            gpu_name=OFFLINE_GPU_NAMES.get(family, "") if gpus else "",
            architecture="x86_64",
        )
    return out


def parse_price_list(items: Iterable[str | dict[str, Any]]) -> dict[str, float]:
    """Instance type → lowest positive hourly USD price of the Pricing API's ``PriceList``."""
    out: dict[str, float] = {}
    for item in items:
        doc = json.loads(item) if isinstance(item, str) else item
        itype = doc.get("product", {}).get("attributes", {}).get("instanceType")
        if not itype:
            continue
        for term in doc.get("terms", {}).get("OnDemand", {}).values():
            for dim in term.get("priceDimensions", {}).values():
                if str(dim.get("unit", "")).lower() not in ("hrs", "hours"):
                    continue
                try:
                    usd = float(dim.get("pricePerUnit", {}).get("USD", "nan"))
                except ValueError:
                    continue
                if usd > 0 and usd < out.get(itype, float("inf")):
                    out[itype] = usd
    return out


def hardware_of(it: dict[str, Any]) -> Hardware:
    gpus = it.get("GpuInfo", {}).get("Gpus", [])
    archs = it.get("ProcessorInfo", {}).get("SupportedArchitectures", ["x86_64"])
    return Hardware(
        vcpus=int(it.get("VCpuInfo", {}).get("DefaultVCpus", 0)),
        memory_gb=round(float(it.get("MemoryInfo", {}).get("SizeInMiB", 0)) / 1024.0, 3),
        gpus=sum(int(g.get("Count", 0)) for g in gpus),
        gpu_name="+".join(sorted({str(g.get("Name", "")) for g in gpus})) if gpus else "",
        architecture=str(archs[0]) if archs else "x86_64",
    )
