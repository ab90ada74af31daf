"""Checks a job passes after its market is opened and before anything is recorded or bought.

:func:`~spotwise.planner.backend.open_backend` already refuses what opening the market shows
to be wrong (a missing trace, an unknown replay zone or region, no matching offer, a checkpoint
location a cloud's instances cannot reach). :func:`preflight` adds what a job would otherwise
only find out after :meth:`Store.create_job` — some of it only after instances were bought:

* an option a launch needs (AWS ``image``; :data:`~spotwise.providers.registry.PROVIDER_OPTIONS`);
* a region its cloud does not have (where the catalog or the cloud module can tell:
  ``check_region``);
* an instance type its catalog does not know (where the catalog can tell:
  ``check_instance_type``), in each region the job names;
* a cloud with no offer at all for the job's filters (:func:`check_offers`): real names that
  no price, zone or market matches (a machine type the price catalog has no price for, a zone
  that does not sell the types, ``markets: [spot]`` for a type without a spot price). Such a
  job would be recorded and then poll for ever, buying nothing;
* a checkpoint location the orchestrator cannot write
  (:func:`~spotwise.planner.checkpoint_probe.probe_checkpoint_root`);
* on a cloud, an ``env`` entry named as a cloud credential variable
  (:data:`~spotwise.providers.channel.SECRET_ENV`), which every launch would refuse.

An ``env`` entry, a ``command`` or an AWS ``setup`` that looks like it holds a secret
(:func:`secret_env_warnings`: a secret's name, a URL with a password or a token as its user, a
signed URL, a header's or a well-known token's value, ``NAME=value`` or ``--token value``) is
not refused (it may be meant), but once the job passes, one warning line per field names it,
never the value: the spec is stored whole in the job's database, and on a cloud it is readable
from the instance's user-data or metadata.

Each failure is a one-line :class:`~spotwise.errors.SpecError` (exit 2) naming the spec field,
except a checkpoint location that could not be reached for a reason that passes (a 5xx, a
timeout, throttling: :class:`~spotwise.errors.TransientError`): that is no fault of the spec,
and is raised as the provider's error (exit 1), saying to try again.
"""

from __future__ import annotations

import difflib
import logging
from collections.abc import Mapping, Sequence

from spotwise.errors import NotFoundError, SpecError, SpotwiseError
from spotwise.planner.backend import Backend, provider_config
from spotwise.planner.checkpoint_probe import probe_checkpoint_root
from spotwise.planner.secret_scan import secret_env_warnings as secret_env_warnings
from spotwise.planner.secret_scan import secret_in_text as secret_in_text
from spotwise.providers.base import Catalog, Market
from spotwise.providers.channel import SECRET_ENV
from spotwise.providers.registry import cloud_module, missing_required
from spotwise.spec import JobSpec, ProviderSpec

log = logging.getLogger("spotwise.planner")


def preflight(spec: JobSpec, backend: Backend, checkpoint_root: str, source: str = "") -> None:
    """Refuse the job (SpecError, one line) before it is recorded; see the module docstring.
    ``checkpoint_root`` is the job's own checkpoint folder or URI prefix (under
    ``checkpoint.location``); ``source``, the spec's path, starts each refusal as it starts
    :func:`~spotwise.spec.load_spec`'s (``job.yaml: spec field 'checkpoint.location': ...``;
    review-ak M5)."""
    try:
        _preflight(spec, backend, checkpoint_root)
    except SpecError as e:
        if not source or e.message.startswith(f"{source}: "):
            raise
        raise SpecError(f"{source}: {e.message}", hint=e.hint) from None


def _preflight(spec: JobSpec, backend: Backend, checkpoint_root: str) -> None:
    _credential_env(spec)
    catalogs = _catalogs(backend)
    for i, p in enumerate(spec.providers):
        if p.name == "local":
            continue  # open_backend checked the replayed market's regions, zones and offers
        _required_options(i, p)
        catalog = catalogs.get(p.name)
        _regions(i, p, catalog)
        if catalog is not None:
            _instance_types(i, p, catalog)
    check_offers(spec, backend)
    aws_profile = next(
        (
            q.options["profile"]
            for q in spec.providers
            if q.name == "aws" and q.options.get("profile")
        ),
        None,
    )
    probe_checkpoint_root(checkpoint_root, spec.checkpoint.location, aws_profile=aws_profile)
    for line in secret_env_warnings(spec):
        log.warning("%s", line)


def _credential_env(spec: JobSpec) -> None:
    """A cloud job whose ``env`` names a cloud credential variable: refused now, not by every
    launch after the job is recorded (the provisioners never put one on an instance)."""
    clouds = sorted({p.name for p in spec.providers if p.name != "local"})
    leaked = sorted(k for k in spec.env if k in SECRET_ENV)
    if clouds and leaked:
        raise SpecError(
            f"spec field 'env.{leaked[0]}': a cloud credential is never put on an instance "
            f"(its value is not shown); remove it: {' and '.join(clouds)} instances get "
            "credentials from their own identity (instance profile, service account, managed "
            "identity)"
        )


def _catalogs(backend: Backend) -> dict[str, Catalog]:
    members = getattr(backend.catalog, "members", None)  # a job on several clouds
    if isinstance(members, Mapping):
        return dict(members)
    return {backend.provider: backend.catalog}


def _required_options(i: int, p: ProviderSpec) -> None:
    for name, option in missing_required(p.name, p.options):
        raise SpecError(
            f"spec field 'providers.{i}.options.{name}': required to launch on {p.name}; "
            f"add `{name}: {option.example}` under the {p.name} provider's options"
        )


def _regions(i: int, p: ProviderSpec, catalog: Catalog | None) -> None:
    """The job's catalog checks its regions when it can (GCP, Azure: their prices and API),
    else the cloud module (AWS)."""
    check = getattr(catalog, "check_region", None) or getattr(
        cloud_module(p.name), "check_region", None
    )
    if not callable(check):
        return  # this cloud's regions are known only to its API: offers show what exists
    for j, region in enumerate(p.regions):
        try:
            check(region)
        except NotFoundError as e:
            raise SpecError(f"spec field 'providers.{i}.regions.{j}': {e.message}") from None


def _instance_types(i: int, p: ProviderSpec, catalog: Catalog) -> None:
    check = getattr(catalog, "check_instance_type", None)
    if not callable(check):
        return
    regions: list[str | None] = list(p.regions) or [None]  # None: the catalog's default
    for region in regions:
        for j, name in enumerate(p.instance_types):
            try:
                check(name, region)
            except NotFoundError as e:
                where = f" in {region}" if region else ""
                raise SpecError(
                    f"spec field 'providers.{i}.instance_types.{j}': {e.message}{where}"
                ) from None


def check_offers(spec: JobSpec, backend: Backend) -> None:
    """Refuse a job on a cloud whose filters leave it no offer: the backend's offers are listed
    once (the listing the job's first poll then reuses), each cloud's share on its own so that
    on several clouds the one without offers is named. A :class:`ProviderError` while listing
    (the cloud cannot be reached) propagates as it is. ``local`` is checked by
    :func:`~spotwise.planner.backend.open_backend`."""
    clouds = [(i, p) for i, p in enumerate(spec.providers) if p.name != "local"]
    if not clouds:
        return
    listed = {o.provider for o in backend.list_offers(backend.now())}
    catalogs = _catalogs(backend)
    for i, p in clouds:
        if p.name not in listed:
            raise SpecError(_no_offer(i, p, catalogs.get(p.name)))


_SHOWN = 8  # names listed in a message before "and N more"


def _no_offer(i: int, p: ProviderSpec, catalog: Catalog | None) -> str:
    fields: dict[str, Sequence[str]] = {
        "regions": p.regions,
        "zones": p.zones,
        "instance_types": p.instance_types,
        "markets": p.markets,
    }
    filters = "; ".join(f"{k}: {', '.join(v)}" for k, v in fields.items() if v)
    line = f"spec field 'providers.{i}': no {p.name} offer matches its filters ({filters})"
    nearby = _nearby(p, catalog) if catalog is not None else ""
    return f"{line}; {nearby}" if nearby else line


def _nearby(p: ProviderSpec, catalog: Catalog) -> str:
    """What the cloud does offer for the job's regions and instance types in any zone and
    either market, in a few words; "" when that cannot be found out (the error the caller
    raises says enough without it). On the error path only: the zones are dropped by opening
    the catalog again without them, and each market is listed on its own."""
    types = list(p.instance_types) or None
    regions: list[str | None] = list(p.regions) or [None]
    try:
        relaxed = catalog
        if p.zones:
            anywhere = provider_config(p.model_copy(update={"zones": []}))
            relaxed = cloud_module(p.name).open_catalog(anywhere)
        found = [
            o
            for r in regions
            for m in Market
            for o in relaxed.offers(region=r, instance_types=types, market=m)
        ]
    except SpotwiseError:
        return ""
    if not found:
        return _unoffered(p, catalog, regions)
    usable = [o for o in found if o.market.value in p.markets] or found
    what = f"{p.name} offers {_few(sorted({o.instance_type for o in usable}))}"
    if p.zones:
        where = f" in zones {_few(sorted({o.zone for o in usable}))}"
    else:
        where = f" in {_few(sorted({o.region for o in usable}))}"
    if any(o.market.value in p.markets for o in found):
        return what + where
    return f"{what}{where} only as {' and '.join(sorted({o.market.value for o in found}))}"


def _unoffered(p: ProviderSpec, catalog: Catalog, regions: Sequence[str | None]) -> str:
    """Why no zone or market offers the job's instance types: not sold in the region, or
    sold there without a price (the catalog never offers a wrong price); and, where the
    catalog holds a price table in memory, what it does price there."""
    if not p.instance_types:
        where = _few([r or "its default region" for r in regions])
        return f"{p.name} lists no priced instance type in {where}"
    bits: list[str] = []
    for r in regions:
        where = r or "its default region"
        try:
            known = {t.name: t for t in catalog.instance_types(r)}
        except SpotwiseError:
            return ""  # the refusal stands without the reason
        unsold = [t for t in p.instance_types if t not in known]
        unpriced = [
            t for t in p.instance_types if t in known and known[t].on_demand_price_per_hour is None
        ]
        if unpriced:
            bits.append(f"{p.name} has no price for {_few(unpriced)} in {where}")
        if unsold:
            bits.append(f"{p.name} does not sell {_few(unsold)} in {where}")
    priced = _priced_names(catalog, regions[0]) if len(regions) == 1 else []
    alike = [n for n in priced if n not in p.instance_types]
    if len(alike) > _SHOWN:
        close = {c for t in p.instance_types for c in difflib.get_close_matches(t, alike, n=3)}
        alike = sorted(close)
    if bits and alike:
        bits[-1] += f" (it prices {_few(alike)} there)"
    return "; ".join(bits)


def _priced_names(catalog: Catalog, region: str | None) -> list[str]:
    """The instance types the catalog's in-memory price table (GCP's) prices in ``region``;
    [] for a catalog whose prices come from an API call."""
    for_region = getattr(getattr(catalog, "prices", None), "for_region", None)
    if not callable(for_region):
        return []
    return sorted({row.instance_type for row in for_region(region)})


def _few(names: Sequence[str]) -> str:
    shown = ", ".join(names[:_SHOWN])
    return f"{shown} and {len(names) - _SHOWN} more" if len(names) > _SHOWN else shown
