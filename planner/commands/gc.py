"""`planner gc [--yes]`: find (and delete) cloud instances danlu left behind.

Every instance a cloud provider creates carries danlu's tags (``danlu-run`` = the run's id,
``danlu-home`` = its runs directory's, see :mod:`runtime.providers.cloud_api`). An instance
is an *orphan* when its run has ended (every node should have been released then) or its
run directory is gone from this runs directory; those are listed with what they cost per
hour and, with ``--yes``, deleted. Instances of runs still running, and of runs started
from another runs directory (a teammate's), are kept. Each cloud comes from a registered provider
class with ``remote = True`` through its ``compute(options)`` classmethod; a cloud that
errors is one line, and the others go on.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from planner.tables import Column, fitted_table
from runtime.errors import RuntimeFailure

DESCRIPTION = """\
Find every cloud instance carrying danlu's tags whose run has ended or whose run
directory is gone, list each with its hourly cost, and delete them with --yes (without
it: a dry run that deletes nothing). Runs are looked up under --runs-dir (default
$DANLU_RUNS_DIR, else ./runs: where `planner run` put them); an instance's danlu-run tag
is its run's id, its danlu-home tag the runs directory it was started from. Instances of
runs still running are kept (a run whose controller is gone: `planner cancel RUN_DIR`
releases them), and so are those started from another runs directory unless --any-home.
Every installed cloud provider is asked, with its default credentials. See docs/gc.md."""

EXIT_CLOUD_ERROR = 1


@dataclass(frozen=True, slots=True)
class Found:
    """One tagged instance and what gc makes of it."""

    provider: str
    instance: object  # runtime.providers.cloud_api.Instance
    run: str
    why: str
    orphan: bool
    hourly_usd: float | None


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("gc", help="find and delete cloud instances of ended or deleted runs",
                              description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs-dir", metavar="DIR", type=Path,
                   help="where the run directories are (default $DANLU_RUNS_DIR, else ./runs)")
    p.add_argument("--provider", metavar="NAME", action="append", default=[],
                   help="only this cloud provider (the flag may repeat; default every installed one)")
    p.add_argument("--yes", action="store_true", help="delete the orphans (default: list them, delete nothing)")
    p.add_argument("--json", action="store_true",
                   help="print one JSON document (the instances, what each is, what was deleted, the clouds that "
                        "failed) on stdout; the messages go to stderr")
    p.add_argument("--any-home", action="store_true",
                   help="judge the instances started from other runs directories too, as if from this one (for "
                        "a runs directory that was deleted whole): their runs are not here, so they are orphans")
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace, console: Console) -> int:
    from runtime.control.run_home import known_homes, read_home
    from runtime.control.run_state import RunStateError
    from runtime.providers import registry
    from runtime.reports.run_view import default_runs_dir

    runs_dir: Path = args.runs_dir or default_runs_dir()
    wanted = set(args.provider)
    unknown = wanted - set(registry.names())
    if unknown:
        raise registry.ProviderUnavailable(
            f"--provider {', '.join(sorted(unknown))}: not registered; registered providers: "
            f"{', '.join(registry.names())}."
        )
    if args.json:
        console = Console(stderr=True)
    clouds, failed = _clouds(registry, wanted, console)
    if not clouds and not failed:
        console.print(escape("no cloud providers installed: nothing to collect (they come with e.g. "
                             "`pip install 'danlu[aws]'`)."))
        if args.json:
            print(json.dumps(_document(runs_dir, None, [], [], {}, dry_run=not args.yes), indent=2))
        return 0
    if not runs_dir.is_dir():
        raise RunStateError(
            f"{runs_dir}: no runs directory there, so every instance would look orphaned. To fix: pass "
            "--runs-dir DIR, the directory `planner run` put its runs in (an empty one if they are all gone)."
        )
    runs = _runs_by_tag(runs_dir)
    home = read_home(runs_dir)
    known = known_homes().homes
    found: list[Found] = []
    for name, api in clouds.items():
        try:
            instances = api.list_tagged()
        except RuntimeFailure as exc:  # ComputeAPIError, ProviderError: one line, the next cloud
            _fail(failed, name, f"cannot list instances: {exc}", console)
            continue
        by_tag: dict[str, list[object]] = {}  # as this cloud stores the tag
        for tag, states in runs.items():
            by_tag.setdefault(api.tag_value(tag), []).extend(states)
        here = None if args.any_home else (api.tag_value(home) if home else "")
        found.extend(_judge(name, instance, by_tag, here, known) for instance in instances)
    orphans = [f for f in found if f.orphan]
    if not args.json:
        _print(found, console)
    kept = [f for f in found if not f.orphan]
    if kept:
        console.print(f"kept {len(kept)} instance(s): {_kept_why(kept)}")
    if not orphans:
        answered = [name for name in clouds if name not in failed]
        # A cloud that could not be asked may hold orphans: "none" would say it was checked.
        console.print("no orphaned instances" if not failed else
                      f"no orphaned instances on {', '.join(answered)}" if answered else
                      "no cloud could be asked: nothing is known of their instances")
    elif not args.yes:
        more = (" --any-home" if args.any_home else "") + (f" --runs-dir {escape(str(args.runs_dir))}"
                                                           if args.runs_dir else "")
        console.print(f"dry run: nothing deleted. To delete these {len(orphans)} instance(s): "
                      f"`planner gc --yes{more}`", soft_wrap=True)
    deleted = _delete(clouds, orphans, failed, console) if orphans and args.yes else []
    if args.json:
        print(json.dumps(_document(runs_dir, home, found, deleted, failed, dry_run=not args.yes), indent=2))
    return EXIT_CLOUD_ERROR if failed else 0


def _fail(failed: dict[str, str], name: str, message: str, console: Console) -> None:
    failed[name] = message
    console.print(f"[red]{escape(name)}[/]: {escape(message)}", highlight=False)


def _document(runs_dir: Path, home: str | None, found: list[Found], deleted: list[str], failed: dict[str, str],
              *, dry_run: bool) -> dict[str, object]:
    """What ``--json`` prints."""
    from runtime.providers.cloud_api import TAG_HOME

    orphans = [f for f in found if f.orphan]
    return {
        "runs_dir": str(runs_dir), "home": home, "dry_run": dry_run,
        "instances": [{"cloud": f.provider, "id": f.instance.id, "name": f.instance.name,
                       "state": f.instance.state.value, "zone": f.instance.zone, "run": f.run,
                       "home": f.instance.tags.get(TAG_HOME), "orphan": f.orphan, "why": f.why,
                       "hourly_usd": f.hourly_usd} for f in found],
        "orphans_usd_per_hour": sum(f.hourly_usd for f in orphans if f.hourly_usd is not None),
        "orphans_unpriced": sum(1 for f in orphans if f.hourly_usd is None),
        "deleted": deleted,
        "failed": failed,
    }


def _clouds(registry, wanted: set[str], console: Console) -> tuple[dict[str, object], dict[str, str]]:
    """A ComputeAPI per registered remote provider; the clouds that failed, each with why (said in one line)."""
    clouds: dict[str, object] = {}
    failed: dict[str, str] = {}
    for name in registry.names():
        if wanted and name not in wanted:
            continue
        try:
            cls = registry.load(name)
        except registry.ProviderUnavailable as exc:
            _fail(failed, name, str(exc), console)
            continue
        if not cls.remote or cls.delegates:  # "auto" owns nothing: its clouds' providers list theirs
            continue
        compute = getattr(cls, "compute", None)
        if compute is None:
            _fail(failed, name, "the provider has no compute() classmethod, so its instances cannot be listed",
                  console)
            continue
        try:
            parse = getattr(cls, "parse_options", None)  # a CloudProvider validates its options first
            clouds[name] = compute(parse(_options()) if parse else _options())
        except RuntimeFailure as exc:  # ComputeAPIError, ProviderError: one line, the next cloud
            _fail(failed, name, f"cannot reach the cloud: {exc}", console)
    return clouds, failed


def _options() -> Mapping[str, object]:
    return {}  # the provider's defaults and its SDK's default credential chain


def _runs_by_tag(runs_dir: Path) -> dict[str, list[object]]:
    """Every run under ``runs_dir`` -- those directly in it and the jobs of the queues in it -- by the id
    its cloud resources carry (``danlu-run``): its state, or why it cannot be read.  A list:
    runs started before the id was kept in their state are known by their directory's name, which two
    queues' jobs may share."""
    from runtime.control.run_home import read_home, runs_root
    from runtime.control.run_start import run_id_for
    from runtime.control.run_state import RunStateError, load_state
    from runtime.reports.queue_view import find_queues
    from runtime.reports.run_view import find_runs

    out: dict[str, list[object]] = {}
    for run_dir in [*find_runs(runs_dir), *(r for q in find_queues(runs_dir, linked=True) for r in find_runs(q))]:
        try:
            state = load_state(run_dir)
            out.setdefault(state.tag(run_dir), []).append(state)
        except RunStateError as exc:  # whichever id it had, its instances are kept
            try:
                home = read_home(runs_root(run_dir))
            except RunStateError:
                home = None
            for tag in {run_id_for(run_dir, home), run_id_for(run_dir, None), run_dir.name}:
                out.setdefault(tag, []).append(str(exc))
    return out


def _judge(provider: str, instance, runs: Mapping[str, list[object]], home: str | None,
           known: Mapping[str, list[str]]) -> Found:
    """What ``instance`` is, from the runs here by their ids (as this cloud stores them) and this runs
    directory's home id as the cloud stores it ("" when it has none; None: every home counts as this one);
    ``known``: where the homes seen on this machine are."""
    from runtime.providers.cloud_api import TAG_HOME, TAG_LAUNCH, TAG_RUN

    run = instance.tags.get(TAG_RUN, "")
    states = runs.get(run, [])
    if not states:
        started = instance.tags.get(TAG_HOME)
        if home is not None and started is not None and started != home:
            # A teammate's run, or one of a runs directory moved without its .danlu-home: not ours to judge.
            where = f" at {known[started][-1]}" if known.get(started) else ""
            return Found(provider, instance, run, f"kept: from another runs directory (home {started}{where})",
                         False, instance.hourly_usd)
        return Found(provider, instance, run, "run directory gone", True, instance.hourly_usd)
    unreadable = [s for s in states if isinstance(s, str)]
    if unreadable:
        return Found(provider, instance, run, f"kept: run state unreadable ({unreadable[0]})", False,
                     instance.hourly_usd)
    hourly = instance.hourly_usd
    if hourly is None:  # the price the run planned it at
        launch = instance.tags.get(TAG_LAUNCH)
        hourly = next((r.pool.hourly_usd for s in states for r in s.launches if r.launch_id == launch), None)
    if any(s.status == "running" for s in states):
        return Found(provider, instance, run, "kept: the run is running", False, hourly)
    return Found(provider, instance, run, f"run ended ({', '.join(sorted({s.status for s in states}))})", True,
                 hourly)


def _kept_why(kept: list[Found]) -> str:
    running = sum(1 for f in kept if f.why == "kept: the run is running")
    elsewhere = sum(1 for f in kept if f.why.startswith("kept: from another"))
    parts = [f"{running} of runs still running"] if running else []
    if elsewhere:
        parts.append(f"{elsewhere} started from other runs directories (run gc there, or pass --any-home if that "
                     "directory is gone)")
    if len(kept) > running + elsewhere:
        parts.append(f"{len(kept) - running - elsewhere} of runs whose state cannot be read")
    return "; ".join(parts)


def _print(found: list[Found], console: Console) -> None:
    if not found:
        return
    # The instance and its run name what to delete: at 80 columns the reason wraps and the state goes.
    columns = [Column("cloud"), Column("instance", wrap=True), Column("state", drop=1), Column("run"),
               Column("why", wrap=True), Column("$/h", "right")]
    rows, styles = [], []
    for f in found:
        inst = f.instance
        name = inst.name if inst.name == inst.id else f"{inst.name} ({inst.id})"
        price = f"${f.hourly_usd:,.4f}" if f.hourly_usd is not None else "?"
        rows.append([escape(f.provider), escape(name), inst.state.value, escape(f.run or "?"), escape(f.why), price])
        styles.append(None if f.orphan else "dim")
    table = fitted_table(columns, rows, width=console.width, title="Instances with danlu's tags", row_styles=styles)
    console.print(table)
    priced = [f.hourly_usd for f in found if f.orphan and f.hourly_usd is not None]
    unpriced = sum(1 for f in found if f.orphan and f.hourly_usd is None)
    if priced:
        extra = f" (+{unpriced} of unknown price)" if unpriced else ""
        console.print(f"orphans cost ${sum(priced):,.4f}/h{extra}")
    elif unpriced:
        console.print(f"orphans cost ? ({unpriced} of unknown price)")


def _delete(clouds: dict[str, object], orphans: list[Found], failed: dict[str, str], console: Console) -> list[str]:
    """Delete the orphans cloud by cloud: the ids each cloud was asked to delete (a cloud that refused is
    added to ``failed``)."""
    deleted: list[str] = []
    for name, api in clouds.items():
        ids = [f.instance.id for f in orphans if f.provider == name]
        if not ids:
            continue
        try:
            api.delete(ids)
        except RuntimeFailure as exc:  # ComputeAPIError, ProviderError: one line, the next cloud
            _fail(failed, name, f"cannot delete {len(ids)} instance(s): {exc}", console)
            continue
        deleted.extend(ids)
        console.print(f"{escape(name)}: asked to delete {len(ids)} instance(s): {escape(', '.join(ids))} (billing "
                      "ends when the cloud has terminated them)", highlight=False)
    return deleted
