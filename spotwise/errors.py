"""One exception root for spotwise; the CLI catches it once and prints one line.

    SpotwiseError                 root: everything spotwise raises on purpose
    ├── SpecError                 a job spec (or any user input) is invalid; names the field
    ├── ConfigError               configuration / environment is unusable (bad --db URL, ...)
    ├── NotFoundError             a job, trial, region or instance type does not exist
    ├── StoreError                the database failed (wrapped SQLAlchemy error): exit 5
    ├── ProviderError             a cloud or local provider call failed
    │   ├── ProviderUnavailable   its SDK is not installed or it has no credentials
    │   └── CapacityError         the offer cannot be launched now (no spot capacity)
    ├── CheckpointError           a checkpoint is missing, partial or fails its checksum
    ├── PredictorError            a predictor cannot be trained / loaded / evaluated
    └── BudgetError               an action would exceed the job's budget or deadline

Every error carries an optional ``hint``: the next command to run or the fix to make.

Exit codes (``exit_code``; the CLI exits with it): 1 by default (a command failed, or something
may still be billed); 2 SpecError / ConfigError (bad input, unusable --db URL: nothing done);
3 NotFoundError (no such job; no spotwise database, or its server cannot be reached); 5
StoreError (the database failed: unreadable or corrupt, locked past the busy timeout, a schema
revision from a newer spotwise), apart from 1 so that `report --check`'s "an instance is held"
never stands for a database failure. 4 and 130 are the commands' own (not errors); 70 is
an exception that is none of these (a bug: spotwise.cli.app.EXIT_INTERNAL).
"""

from __future__ import annotations

from collections.abc import Sequence


class SpotwiseError(Exception):
    """Root of every error spotwise raises on purpose."""

    exit_code: int = 1
    #: the job whose run it ended, once that job was recorded (`tune --json` prints its id)
    job_id: str | None = None

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return self.message


class SpecError(SpotwiseError):
    """Invalid user input: a job spec field, a CLI value."""

    exit_code = 2


class ConfigError(SpotwiseError):
    """The environment or configuration cannot be used."""

    exit_code = 2


class NotFoundError(SpotwiseError):
    """A named thing (job, trial, region, instance type) does not exist."""

    exit_code = 3


class StoreError(SpotwiseError):
    """The database failed: it exists but could not be read or written (corrupt or unreadable
    file, a lock held past the busy timeout, a schema revision this spotwise does not know).
    Exit 5 for every command: not 1, which `report --check` gives for "an instance is held"
    and `tune`/`cancel` for "something may still be billed"."""

    exit_code = 5


class ProviderError(SpotwiseError):
    """A provider call failed."""


class ProviderUnavailable(ProviderError):
    """A provider cannot be used here: SDK missing or no credentials."""


class CapacityError(ProviderError):
    """The offer has no capacity right now. ``lasting``: the provider says the refusal will
    not pass within minutes (a Spot price above the job's max price, a size or type not
    offered there): the orchestrator then avoids the offer for a doubling backoff, not a pass."""

    def __init__(self, message: str, *, hint: str | None = None, lasting: bool = False) -> None:
        super().__init__(message, hint=hint)
        self.lasting = lasting


class QuotaError(ProviderError):
    """The account's quota for this capacity in this region is used up (GCP quotaExceeded,
    Azure QuotaExceeded, EC2 VcpuLimitExceeded): the fix is a quota increase, and another
    region may have room meanwhile."""


class TransientError(ProviderError):
    """The call failed for a reason that passes: a server error (HTTP 5xx, EC2
    ``InternalError``/``Unavailable``), a timeout, a dropped connection. The same call should
    succeed later, but this one may have taken effect before it failed (a create whose answer
    was lost). Not a failure of the trial: the planner pauses the provider, looks for what the
    call may have left, and tries again."""


class MachineShortError(ProviderError):
    """This machine could not start a trial for want of a resource (open files, processes,
    memory, disk): nothing was started and the trial is not at fault. The orchestrator does
    not count it as the trial's failure: it pauses launches and tries again
    (:func:`spotwise.planner.machine_short.short_of`). ``limit`` names what is short."""

    def __init__(self, message: str, *, limit: str) -> None:
        super().__init__(message, hint=f"this machine is short of {limit}")
        self.limit = limit


class ThrottledError(TransientError):
    """The provider's API refused the call for its request rate (HTTP 429, EC2
    ``RequestLimitExceeded``, GCP ``rateLimitExceeded``). The last try did nothing, but an
    earlier try of the SDK's own retries may have (a timed-out create retried into throttling).
    Not a failure of the trial: the planner backs off and tries again."""


class CheckpointError(SpotwiseError):
    """A checkpoint is missing, partial or corrupt."""


class PredictorError(SpotwiseError):
    """A predictor cannot be trained, loaded or evaluated."""


class BudgetError(SpotwiseError):
    """An action would exceed the job's budget or deadline."""


def check_choice(field: str, name: str, valid: Sequence[str]) -> None:
    """An unknown ``name`` for ``field`` is a SpecError in one line listing every valid one."""
    if name not in valid:
        raise SpecError(
            f"{field}: unknown {name!r}{did_you_mean(name, list(valid))}; valid: {', '.join(valid)}"
        )


def did_you_mean(value: str, choices: list[str] | tuple[str, ...]) -> str:
    """Return ' (did you mean X?)' for the closest choice, or '' when nothing is close.

    Close (:func:`_close`): a few mistyped letters, or letters left out. Closest among those:
    two letters swapped ("us-esat-1") first; then the best difflib score, its ties broken by
    the fewest edits, then by the longest common start: "us-eest-1" is one edit from both
    "us-east-1" and "us-west-1", and difflib alone (ties go to the greater string) suggested
    "us-west-1"; a mistyped letter is more likely after the first ones."""
    import difflib

    folded = [c for c in choices if c.lower() == value.lower()]  # 'a100': 'A100', not 'V100'
    if folded:
        return f" (did you mean {folded[0]!r}?)"
    found = difflib.get_close_matches(value, list(choices), n=5, cutoff=0.6)
    close = [c for c in found if _close(value, c)]
    # two letters swapped ("us-esat-1") beat a choice that scores the same ("us-west-1")
    swapped = [c for c in close if sorted(c) == sorted(value)]
    if swapped or not close:
        best = (swapped or close)[:1]
        return f" (did you mean {best[0]!r}?)" if best else ""

    def score(c: str) -> float:
        return difflib.SequenceMatcher(None, value, c).ratio()

    top = score(close[0])
    tied = [c for c in close if score(c) >= top - 1e-9]
    best_one = min(tied, key=lambda c: (_edits(value, c), -_common_start(value, c)))
    return f" (did you mean {best_one!r}?)"


def _close(typed: str, choice: str) -> bool:
    """Whether ``choice`` is a name ``typed`` plausibly meant (compared case-blind):
    - at most a quarter of its letters mistyped, added or dropped, two swapped neighbours
      counting as one (at least one edit: "aw" for "aws", "A100" for "V100"), or two when both
      start with the same letter ("t3.micr" for "t2.micro");
    - one the start of the other, at least 3 letters ("every_steps" for "every", "uniform" for
      "uniform-progress"), or most of ``choice`` typed from its start ("max_cost_dollars" for
      "max_cost_usd");
    - ``typed`` a whole end of ``choice`` after a separator, at least half of it ("east-1" for
      "us-east-1");
    - letters left out of ``choice`` or added to it, starting as it does: at least a third of
      it typed ("max_cost" for "max_cost_usd", "cmd" for "command", "sped" for "speedup"), or
      at most half as many added ("workingdir" for "workdir").
    difflib's score alone (its cutoff 0.6) let a shared tail pass: "g4dn.xlarge" suggested
    "p3.2xlarge" (5 edits) and "m4.xlarge" (3, another first letter)."""
    a, b = typed.lower(), choice.lower()
    edits = _edits(a, b, swaps=True)
    same_start = a[:1] == b[:1]
    if edits <= max(1, len(a) // 4) or (edits <= 2 and same_start):
        return True
    if min(len(a), len(b)) >= 3 and (a.startswith(b) or b.startswith(a)):
        return True
    if _common_start(a, b) >= max(4, 0.6 * len(b)):
        return True
    end = len(b) - len(a)
    if len(a) >= 3 and end > 0 and b.endswith(a) and b[end - 1] in "-_.:/" and 2 * len(a) >= len(b):
        return True
    if not same_start or min(len(a), len(b)) < 3:
        return False
    if _within(a, b):  # letters of choice left out
        return 3 * len(a) >= len(b)
    return _within(b, a) and 2 * len(a) <= 3 * len(b)  # letters added to choice


def _within(short: str, long: str) -> bool:
    """Whether ``short``'s letters appear, in order, in ``long``."""
    rest = iter(long)
    return all(c in rest for c in short)


def _edits(a: str, b: str, *, swaps: bool = False) -> int:
    """Levenshtein distance: insertions, deletions and substitutions from ``a`` to ``b``; with
    ``swaps``, two neighbouring letters swapped count as one edit (optimal string alignment)."""
    before: list[int] = []  # the row two letters of ``a`` back
    row = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        new = [i] + [0] * len(b)
        for j, cb in enumerate(b, 1):
            new[j] = min(row[j] + 1, new[j - 1] + 1, row[j - 1] + (ca != cb))
            if swaps and i > 1 and j > 1 and ca == b[j - 2] and a[i - 2] == cb:
                new[j] = min(new[j], before[j - 2] + 1)
        before, row = row, new
    return row[-1]


def _common_start(a: str, b: str) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n
