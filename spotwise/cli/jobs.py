"""`tune`, `resume`, `status`, `trials`, `cancel`: submit a job and read it back."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from spotwise.cli.options import DbOpt, JsonOpt
from spotwise.cli.output import emit, json_text, keep_outcome, quiet_stdout
from spotwise.errors import SpotwiseError

SpecArg = Annotated[
    Path,
    typer.Argument(
        help="Job spec (YAML): command, search_space, metric, steps, trials, parallel, providers, "
        "checkpoint, budget. See README 'Job spec reference'.",
        show_default=False,
    ),
]
#: `tune`, `resume` and `cancel`: done, but instances carrying the job's tags that it did not
#: launch were left running (they may be billed to someone): each is named in the output
EXIT_NOT_OURS = 4
_JOB_ID = typer.Argument(help="Job id (or a unique prefix).", show_default=False)
JobArg = Annotated[str | None, _JOB_ID]


def tune(
    spec: SpecArg,
    policy: Annotated[
        str | None,
        typer.Option(
            help="Policy to run (overrides the spec): spot-greedy, on-demand, asha, spottune, "
            "spotwise, or Can't Be Late's deadline policies greedy and uniform-progress "
            "(docs/simulation.md; they need budget.deadline_hours, else they place on spot "
            "by price per step as spot-greedy but never fall back to on-demand, with a "
            "warning). The spec's policy_options apply to it: options "
            "it does not take are refused."
        ),
    ] = None,
    db: DbOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Run a tuning job to the end: live table of trials, then a summary ($ vs on-demand).

    Exits 2 for a bad spec (nothing written); 1 when a provider cannot be used at the start
    (e.g. no cloud account or credentials: refused with one line before anything is
    recorded), when every trial failed, when no trial has a final metric (a budget, deadline
    or the end of a replayed market's trace left none; trials never reported their last step,
    or ended on NaN), or when an instance could not be terminated at the end (it may still be
    billed: `spotwise cancel JOB` retries); 130 when the job was cancelled (Ctrl-C,
    SIGTERM, a closed terminal, or `spotwise cancel`); otherwise 4 when
    instances carrying the job's tags that it did not launch were left running (listed as
    not launched by it: left alone). 5 when the database failed (corrupt, locked past 30 s,
    a schema from a newer spotwise): the job tries to release what it launched, but check
    `spotwise report --check` once the database works.

    Examples:
      spotwise tune examples/digits/job.yaml
      spotwise tune examples/digits/job.yaml --policy asha --json
    """
    from spotwise import jobs

    _run_live(lambda **kw: jobs.tune(spec, db=db, policy=policy, **kw), json_out)


def resume(
    job: Annotated[str, _JOB_ID],
    max_cost: Annotated[
        float | None,
        typer.Option(
            "--max-cost",
            help="Set the job's budget.max_cost_usd to this many dollars, e.g. to raise a "
            "budget it reached (the whole job's: what it spent before counts). Default: the "
            "budget it was started with.",
            show_default=False,
        ),
    ] = None,
    deadline_hours: Annotated[
        float | None,
        typer.Option(
            "--deadline-hours",
            help="Set the job's budget.deadline_hours: the resumed run's deadline, counted from "
            "the resume (market hours on the replay: 3600/speedup wall s each). Default: the "
            "deadline it was started with, in full again.",
            show_default=False,
        ),
    ] = None,
    db: DbOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Continue a job that ended before its plan did (cancelled, failed, or cut by its budget
    or deadline): unfinished trials resume from their checkpoints, then new trials run until
    the spec's count; same job id, spend and stored spec.

    Trials that ended keep their results, and the search is told them again; trials the
    budget, the deadline or a replayed trace's end stopped run again (the replay starts again
    at its replay.start: refused when the last run reached the trace's end keeping nothing, no
    trial ended and no checkpoint saved). A job whose orchestrator died is closed with
    `spotwise cancel JOB` first; one that still holds an instance is refused (cancel releases
    it). A deadline counts again from the resume. Exit codes as for `tune`; 2 when the job
    cannot be resumed (nothing is written).

    Examples:
      spotwise resume JOB
      spotwise resume JOB --max-cost 20 --deadline-hours 6 --json
    """
    from spotwise import jobs

    _run_live(
        lambda **kw: jobs.resume(
            job, db=db, max_cost_usd=max_cost, deadline_hours=deadline_hours, **kw
        ),
        json_out,
    )


def _run_live(run: Any, json_out: bool) -> None:
    """Run a job (``run(on_update=…)``): a live table, then its summary, or its JSON; exits
    non-zero when it failed or left something billed (1), was cancelled (130), or else left
    instances with its tags that it did not launch running (4)."""
    from spotwise.cli.render import LiveJob, print_summary
    from spotwise.job_rows import tune_json

    if json_out:
        try:
            summary = tune_json(run())  # every key docs/json.md lists, null or [] when none
        except SpotwiseError as e:
            if e.job_id:  # recorded before it failed: a script learns which job to resume
                try:
                    print(json_text({"job_id": e.job_id, "state": "failed", "error": str(e)}))
                except BrokenPipeError:  # no reader: the error's own line and code still go
                    quiet_stdout()
            raise
    else:
        with LiveJob() as live:
            summary = run(on_update=live.update)
    code = 0
    # every trial crashed, or something may still be billed: scripts see a non-zero exit
    if summary["state"] == "failed" or summary.get("leftover_instances"):
        code = 1
    elif summary["state"] == "cancelled":  # Ctrl-C or `spotwise cancel`: not a finished run
        code = 130
    elif summary.get("not_ours"):  # its tags on instances it did not launch: left running
        code = EXIT_NOT_OURS
    with keep_outcome(code):  # a closed stdout pipe does not hide it behind 141
        if json_out:
            print(json_text(summary))
        else:
            print_summary(summary)
    if code:
        raise typer.Exit(code)


def status(
    job: JobArg = None,
    limit: Annotated[
        int,
        typer.Option(
            "--limit",
            min=0,
            help="Without JOB: list this many of the newest jobs (0 = all); the listing says "
            "how many there are (--json: total, left_out).",
        ),
    ] = 20,
    show_all: Annotated[
        bool,
        typer.Option(
            "--all",
            help="With JOB: list every instance life (the text shows the 50 newest and every "
            "one still held; --json always has them all).",
        ),
    ] = False,
    db: DbOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Show one job (cost, best trial, instances), or the recent jobs when no id is given.

    A job whose orchestrator is no longer running (it crashed or was killed) is flagged, with
    the `spotwise cancel JOB` that closes it. A replay's dollars (the local provider) are
    simulated, marked `*` (`simulated` in --json); a job not finished shows an estimate,
    marked `~` (`cost_is_estimate`): its running instances as if they ended at its
    orchestrator's last save (`running_usd`; `billed_usd`: the lives billed by then).

    Exit codes: 0 shown. 2: a --db URL it cannot use. 3: no such job (or a job-id prefix that
    matches several: each is named), or no spotwise database
    (a missing or empty file, an in-memory URL such as sqlite:/// with an unset variable, a
    database without spotwise's tables: never created here) or its server cannot be reached.
    5: the database failed (unreadable or corrupt, locked past 30 s, a schema revision from a
    newer spotwise).

    Examples:
      spotwise status                 # the 20 newest jobs
      spotwise status --limit 0       # every job
      spotwise status JOB --json      # one job: its id, or a unique prefix of it
      spotwise status JOB --all       # and every one of its instance lives as text
    """
    from spotwise import jobs
    from spotwise.cli.render import NEWEST_INSTANCES, print_jobs, print_status
    from spotwise.errors import SpecError
    from spotwise.job_rows import status_json

    if show_all and job is None:  # review-aj F6: it was taken and ignored
        raise SpecError(
            "--all lists one job's instance lives: give the JOB (spotwise status JOB --all)"
        )

    # the text reads only the instance lives it shows (review-af F7); --json, --all: every one
    newest = None if json_out or show_all else NEWEST_INSTANCES
    out = status_json(jobs.status(job, db=db, limit=limit, newest=newest))  # docs/json.md
    emit(
        out,
        json_out,
        (lambda o: print_status(o, show_all))
        if job is not None
        else lambda o: print_jobs(o["jobs"], o["total"]),
    )


def trials(job: JobArg = None, db: DbOpt = None, json_out: JsonOpt = False) -> None:
    """List the trials of a job (default: the job most recently active, by its start, last
    heartbeat or end: a resumed older job, not the newest created) with params, step, metric,
    cost. The table's title names the job.

    Exit codes as for `status` (3: no such job, a prefix that matches several, no job yet, or
    no spotwise database).

    Examples:
      spotwise trials                 # the job most recently active
      spotwise trials JOB --json
    """
    from spotwise import jobs
    from spotwise.cli.render import print_trials

    out = jobs.trials(job, db=db)
    emit(out, json_out, print_trials)


def cancel(
    job: Annotated[str, _JOB_ID],
    force: Annotated[
        bool,
        typer.Option(
            "--force",
            help="The job's orchestrator is recorded on another machine (or pid namespace) "
            "that is lost, or its pid is held by a process this user cannot inspect that is "
            "not it: release its instances from here anyway. Refused while the job's "
            "heartbeat is under 391 s old (the database lock patience plus a margin: it is "
            "alive; a plain cancel asks it to stop). Also closes a job asked to stop whose "
            "orchestrator never answered, once its heartbeat is that stale.",
        ),
    ] = False,
    db: DbOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Stop a running job: every trial checkpoints, every instance is released.

    A job running on another machine sharing the database (its heartbeat under 391 s old) is
    asked through the database: its orchestrator sees the cancel within seconds, stops, and
    the cancel waits for its end. Also releases what a finished job's record still holds,
    and a job whose orchestrator died.
    A finished cloud job is looked for on its cloud too: an instance left with its tags is
    terminated and billed to its launch.

    Exit codes: 0 done. 1: an instance could not be confirmed released (its region could
    not be listed, or its terminate was refused): it may still be billed; run it again to
    retry; or the orchestrator was still stopping when the wait ended. 2: refused, nothing
    done (its orchestrator runs on another machine or in another pid namespace with no
    heartbeat for 391 s, or its pid is held by a process this user cannot inspect: see
    --force; --force of a job whose heartbeat is fresh). 3: no such job (or a
    job-id prefix that matches several), or no database. 4: done, but instances carrying
    the job's tags that it did not launch were left running, each named in the answer (1
    wins over 4). 5: the database failed
    (corrupt, locked past 30 s, a schema from a newer spotwise): run it again once it works.

    Examples:
      spotwise cancel JOB
      spotwise cancel JOB --force     # its orchestrator's machine is lost
    """
    from spotwise import jobs
    from spotwise.job_rows import cancel_json

    out: dict[str, Any] = cancel_json(jobs.cancel(job, db=db, force=force))  # docs/json.md
    code = 0
    if out.get("open_instances") or out.get("stopping"):  # may still be billed, or running
        code = 1
    elif out.get("not_ours"):  # done; instances with its tags it did not launch run on
        code = EXIT_NOT_OURS
    say = lambda o: typer.echo(f"{o['job_id']}: {o['state']} — {o['message']}")  # noqa: E731
    emit(out, json_out, say, outcome=code)  # a closed pipe does not hide the code
    if code:
        raise typer.Exit(code)


def register(app: typer.Typer) -> None:
    app.command()(tune)
    app.command()(resume)
    app.command()(status)
    app.command()(trials)
    app.command()(cancel)
