"""What EC2 offers in a whole region, listed once per process (:class:`RegionListings`, a mixin
of :class:`~spotwise.providers.aws_catalog.AwsCatalog`): every instance type's name, for "did
you mean", and every instance type's hardware, each cached for ``LISTING_TTL_S``.
"""

from __future__ import annotations

import os
import time
from typing import Any

from spotwise.providers import aws
from spotwise.providers.aws_offline import Hardware, hardware_of

LISTING_TTL_S = 3600.0
_FULL_LISTINGS: dict[tuple[str, str, str], tuple[float, dict[str, Hardware]]] = {}
_OFFERED_NAMES: dict[tuple[str, str, str], tuple[float, frozenset[str]]] = {}


class RegionListings:
    profile: str | None

    def _client(self, service: str, region: str) -> Any:
        raise NotImplementedError

    def _hw(self, region: str) -> dict[str, Hardware]:
        raise NotImplementedError

    def _listing_key(self, region: str) -> tuple[str, str, str]:
        return (os.environ.get("AWS_ENDPOINT_URL", ""), self.profile or "", region)

    def _offered_names(self, region: str) -> frozenset[str] | None:
        """The name of every instance type offered in a region (None when EC2 cannot be
        reached), for "did you mean": ``describe_instance_type_offerings`` by region, names
        only (up to 1,000 a page), not the full hardware listing (~9 pages of 100 records).
        A full listing this process already holds answers without a call. Cached for the
        process, as the full listing is."""
        key = self._listing_key(region)
        full = _FULL_LISTINGS.get(key)
        if full is not None and time.monotonic() - full[0] <= LISTING_TTL_S:
            return frozenset(full[1])
        hit = _OFFERED_NAMES.get(key)
        if hit is None or time.monotonic() - hit[0] > LISTING_TTL_S:
            names: set[str] = set()
            try:
                pages = self._client("ec2", region).get_paginator(
                    "describe_instance_type_offerings"
                )
                for page in pages.paginate(
                    LocationType="region", PaginationConfig={"PageSize": 1000}
                ):
                    names.update(o["InstanceType"] for o in page.get("InstanceTypeOfferings", []))
            except Exception as e:
                if not aws.is_sdk_error(e):
                    raise
                return None
            hit = _OFFERED_NAMES[key] = (time.monotonic(), frozenset(names))
        return hit[1]

    def _dit(self, region: str) -> dict[str, Hardware] | None:
        """Every instance type of a region (``describe_instance_types``; None when EC2 cannot
        be reached). Cached for the process: the list changes a few times a year."""
        key = self._listing_key(region)
        hit = _FULL_LISTINGS.get(key)
        if hit is None or time.monotonic() - hit[0] > LISTING_TTL_S:
            out: dict[str, Hardware] = {}
            try:
                pages = self._client("ec2", region).get_paginator("describe_instance_types")
                for page in pages.paginate(PaginationConfig={"PageSize": 100}):
                    for it in page.get("InstanceTypes", []):
                        out[it["InstanceType"]] = hardware_of(it)
            except Exception as e:
                if not aws.is_sdk_error(e):
                    raise
                return None
            hit = _FULL_LISTINGS[key] = (time.monotonic(), out)
        self._hw(region).update(hit[1])
        return hit[1]
