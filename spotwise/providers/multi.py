"""One job on several clouds: a :class:`Provisioner` and a :class:`Catalog` over one member each.

Imports no cloud SDK: the members are the clouds' own adapters (opened by the caller).

:class:`MultiProvisioner` routes each call to the member that owns it:

* ``launch`` goes to the member named by ``request.offer.provider``;
* ``terminate`` goes to the member that owns each id. Ownership is learned only from that
  member's own launches and describes (which only list instances carrying our tags). An id no
  member owns, or one claimed by two members, is refused with a :class:`ProviderError` naming
  it, and *nothing* of that call is terminated: spotwise never terminates what it did not create;
* ``progress`` goes to the owner of the id;
* ``describe`` and ``notices`` merge every member's answer.

A member that fails in ``describe`` or ``notices`` is not skipped quietly (its instances would
look gone and be billed or relaunched wrongly): every member is asked, what the others answer
is still learned, then one :class:`ProviderError` names each member that failed, as a single
provider's error would. Notices the healthy members returned in that call are kept and
returned by the next ``notices`` call (a provider hands a notice out once).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from spotwise.errors import NotFoundError, ProviderError
from spotwise.providers.base import (
    Catalog,
    Instance,
    InstanceType,
    LaunchRequest,
    Market,
    Notice,
    Offer,
    PricePoint,
    Provisioner,
)


def _fail(errors: list[str], what: str) -> ProviderError:
    return ProviderError(f"{what} failed on {len(errors)} provider(s): " + "; ".join(errors))


class MultiProvisioner:
    """Launch, watch and terminate a job's instances on several clouds (module docstring)."""

    def __init__(self, members: Mapping[str, Provisioner]) -> None:
        if not members:
            raise ValueError("MultiProvisioner needs at least one member")
        self.members: dict[str, Provisioner] = dict(members)
        self.name = "+".join(self.members)
        self.owner: dict[str, str] = {}  # instance id → member name
        self.ambiguous: set[str] = set()  # ids two members claimed: never terminated
        self._pending: list[Notice] = []  # notices held back by a failed call

    def _own(self, instance_id: str, member: str) -> None:
        known = self.owner.setdefault(instance_id, member)
        if known != member:
            self.ambiguous.add(instance_id)

    def _member(self, provider: str) -> Provisioner:
        try:
            return self.members[provider]
        except KeyError:
            raise ProviderError(
                f"{self.name}: no provider {provider!r} in this job; "
                f"it names {', '.join(self.members)}"
            ) from None

    def owner_of(self, instance_id: str) -> str | None:
        """The member that launched or lists ``instance_id`` (None: unknown or ambiguous)."""
        if instance_id in self.ambiguous:
            return None
        return self.owner.get(instance_id)

    # ---- the Provisioner protocol ---------------------------------------------------------
    def launch(self, request: LaunchRequest) -> Instance:
        name = request.offer.provider
        inst = self._member(name).launch(request)
        self._own(inst.instance_id, name)
        return inst

    def describe(self, tags: Mapping[str, str] | None = None) -> list[Instance]:
        out: list[Instance] = []
        errors: list[str] = []
        for name, member in self.members.items():
            try:
                found = member.describe(tags)
            except ProviderError as e:
                errors.append(f"{name}: {e}")
                continue
            for inst in found:
                self._own(inst.instance_id, name)
                out.append(inst)
        if errors:
            raise _fail(errors, "describe")
        return out

    def terminate(self, instance_ids: Sequence[str]) -> None:
        groups: dict[str, list[str]] = {}
        refused: list[str] = []
        for iid in instance_ids:
            owner = self.owner_of(iid)
            if owner is None:
                refused.append(iid)
            else:
                groups.setdefault(owner, []).append(iid)
        if refused:
            raise ProviderError(
                f"{self.name}: refusing to terminate {', '.join(refused)}: no provider of this "
                "job launched or lists it (nothing was terminated)"
            )
        errors: list[str] = []
        for name, ids in groups.items():
            try:
                self.members[name].terminate(ids)
            except ProviderError as e:  # still terminate on the other members
                errors.append(f"{name}: {e}")
        if errors:
            raise _fail(errors, "terminate")

    def notices(self) -> list[Notice]:
        out, self._pending = self._pending, []
        errors: list[str] = []
        for name, member in self.members.items():
            try:
                out += member.notices()
            except ProviderError as e:
                errors.append(f"{name}: {e}")
        if errors:
            self._pending = out
            raise _fail(errors, "notices")
        return out

    def progress(self, instance_id: str) -> list[dict[str, object]]:
        owner = self.owner_of(instance_id)
        if owner is None:
            raise ProviderError(f"{self.name}: no provider of this job owns {instance_id}")
        return self.members[owner].progress(instance_id)

    def agent_heard(self, instance_id: str) -> bool:
        """The owner's optional ``agent_heard`` (:mod:`spotwise.planner.no_word`); False for
        an id no member owns, or an owner without it."""
        owner = self.owner_of(instance_id)
        method = getattr(self.members[owner], "agent_heard", None) if owner else None
        return bool(method(instance_id)) if method is not None else False


class MultiCatalog:
    """The members' catalogs as one: a call naming a region goes to the members that list
    it; a call naming none merges every member's answer (offers sorted by price)."""

    def __init__(self, members: Mapping[str, Catalog]) -> None:
        if not members:
            raise ValueError("MultiCatalog needs at least one member")
        self.members: dict[str, Catalog] = dict(members)
        self.name = "+".join(self.members)

    def _for(self, region: str | None) -> list[Catalog]:
        if region is None:
            return list(self.members.values())
        hit = [c for c in self.members.values() if region in c.regions()]
        if not hit:
            raise NotFoundError(f"{self.name}: no provider of this job has region {region!r}")
        return hit

    def regions(self) -> list[str]:
        return [r for c in self.members.values() for r in c.regions()]

    def instance_types(self, region: str | None = None) -> list[InstanceType]:
        return [t for c in self._for(region) for t in c.instance_types(region)]

    def offers(
        self,
        region: str | None = None,
        instance_types: Sequence[str] | None = None,
        market: Market | None = None,
    ) -> list[Offer]:
        out = [o for c in self._for(region) for o in c.offers(region, instance_types, market)]
        return sorted(out, key=lambda o: (o.price_per_hour, o.key))

    def price_history(
        self, region: str, instance_type: str, start: float, end: float
    ) -> list[PricePoint]:
        return [
            p for c in self._for(region) for p in c.price_history(region, instance_type, start, end)
        ]
