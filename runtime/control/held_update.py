"""Giving a run the held reservations bought, extended or given up since it started:
`planner run --resume RUN_DIR --held-from JOB`.

A run keeps the job it started with, so a reservation the team buys while it runs (a capacity
block for tonight, a reservation that came free) would otherwise reach only a new run, which
starts over. ``--held-from`` takes the ``[[purchase.held]]`` list of a job file -- the run's own,
edited -- in place of the run's, and nothing else. A file that differs in any other key is refused
with those keys named, so an edit is never silently dropped; its budget and deadline are set
apart, since `--budget-usd` and `--deadline-in` may have moved the run's (the run keeps its own).

The resumed run re-plans from where it stands with the new list, after checkpointing any launch
its dead controller left; a held pool it had left for good (its reservation ended) or found full
is offered again, and a run that ended because no plan fit its budget or time -- or at its budget
cap, since held nodes cost nothing more -- is reopened: a reservation may be what makes it fit.
Everything is checked before anything is written: a refused change leaves the run as it was.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from planner.job import HeldReservation, JobSpec, load_job, when
from pricing.pool import HELD, pool_id
from pricing.sources import resolve_catalog
from runtime.control import queue_held
from runtime.control.clock import Clock
from runtime.control.events import EventLog
from runtime.control.reopen import run_clock
from runtime.control.run_state import RunState, RunStateError, load_state, save_state
from runtime.errors import RuntimeFailure
from runtime.providers import registry

# What the resume's own flags move: told apart from an edit, never refused.
_TERMS = {("constraints", "budget_usd"): "--budget-usd", ("constraints", "deadline_hours"): "--deadline-in"}
_NONE = "none"
REOPENS = ("infeasible", "budget_cap")


@dataclass(frozen=True, slots=True)
class HeldUpdate:
    """A checked replacement of a run's held reservations, to :func:`apply`."""

    run_dir: Path
    source: str  # the job file it came from
    held: list[dict[str, Any]]  # as the run's state keeps the job
    added: tuple[str, ...]  # entries, as :func:`describe` says them
    removed: tuple[str, ...]
    kept: tuple[str, ...]  # the run's budget or deadline where the file says another

    @property
    def changed(self) -> bool:
        return bool(self.added or self.removed)

    @property
    def change(self) -> str:
        """The change in a line: ``added 1x ...; removed ...``."""
        return "; ".join(f"{verb} {', '.join(entries)}" for verb, entries in
                         (("added", self.added), ("removed", self.removed)) if entries)


def describe(held: HeldReservation) -> str:
    """One reservation in a line: ``2x p4d.24xlarge aws:us-east-1 until 2027-03-01 (cr-0123...)``."""
    start = f" from {when(held.starts_at)[3:]}" if held.starts_at is not None else ""
    name = f" ({held.reservation_id}{', capacity block' if held.capacity_block else ''})" \
        if held.reservation_id else ""
    return f"{held.count}x {held.instance_type} {held.cloud}:{held.region}{start} until {when(held.ends_at)[3:]}{name}"


def check(run_dir: str | Path, job_path: str | Path) -> HeldUpdate:
    """Read ``job_path``'s held reservations for the run in ``run_dir`` and check them; writes nothing.

    Raises:
        JobSpecError: the file does not read as a job (naming the file and key).
        RunStateError: the run completed or belongs to a queue, the file is another job or changes more
            than its held reservations, the run's provider refuses them, or the run's catalog lacks one.
    """
    run_dir, source = Path(run_dir), str(job_path)
    new = load_job(job_path)
    state = load_state(run_dir)
    if state.status == "completed":
        raise RunStateError(f"{run_dir}: the run ended 'completed'; there is nothing left to run on "
                            "other reservations.")
    if queue_held.read(run_dir) is not None:
        raise RunStateError(f"{run_dir}: is a job of a queue, which runs on the queue's reservations "
                            "([[reservation]] in its queue file), not its own; --held-from does not change them.")
    dumped = new.model_dump(mode="json")
    edited, kept = _differences(state.job_spec().model_dump(mode="json"), dumped)
    if edited:
        raise RunStateError(
            f"{source}: differs from the job {run_dir} started with in {', '.join(edited)}; --held-from takes "
            "only its [[purchase.held]] (a resumed run keeps the rest of its job). To fix: undo those edits, "
            "or start a new run for the changed job.")
    _check_provider(state, new, source)
    _check_catalog(state, new, source)
    old = state.job_spec().purchase.held
    return HeldUpdate(
        run_dir=run_dir, source=source, held=dumped["purchase"]["held"],
        added=tuple(describe(h) for h in new.purchase.held if h not in old),
        removed=tuple(describe(h) for h in old if h not in new.purchase.held),
        kept=tuple(f"{key} {run} ({source} says {said}; {flag} moves it)" for key, flag, run, said in kept))


def apply(update: HeldUpdate, *, clock: Clock | None = None) -> RunState:
    """Give the run the update's held reservations and have it re-plan on them when it resumes (a run that
    ended for want of budget or time is reopened). An update that changes nothing leaves the run as it was.
    ``clock``: the run's, for the event (default: the system's, as the run counts it)."""
    state = load_state(update.run_dir)
    if not update.changed:
        return state
    old = state.job.get("purchase", {}).get("held", [])
    state.job = {**state.job, "purchase": {**state.job.get("purchase", {}), "held": update.held}}
    # A held pool left for the rest of the run (its reservation ended) or refused (full) may serve again.
    ids = {pool_id(h["cloud"], h["region"], h["instance_type"], h.get("reservation_id")) for h in (*old, *update.held)}
    state.left_out = {pid: until for pid, until in state.left_out.items() if pid not in ids}
    state.refused = {p: pools for p, pools in state.refused.items() if p != HELD}
    state.set_pool(None, None)
    if state.status in REOPENS:
        state.status, state.cause = "running", None
    save_state(update.run_dir, state)
    events = EventLog(update.run_dir, clock=(clock or run_clock(state)).now)
    try:
        events.emit("held_changed", source=str(Path(update.source).resolve()), added=list(update.added),
                    removed=list(update.removed), change=update.change)
    finally:
        events.close()
    return state


def _differences(run: dict[str, Any], new: dict[str, Any]) -> tuple[list[str], list[tuple[str, str, str, str]]]:
    """The keys the new job changes besides its held reservations, as a job file writes them, and the
    budget or deadline it says otherwise than the run's (key, flag, the run's, the file's)."""
    edited: list[str] = []
    kept: list[tuple[str, str, str, str]] = []

    def walk(a: Any, b: Any, path: tuple[str, ...]) -> None:
        if path == ("purchase", "held") or a == b:
            return
        if path in _TERMS:
            kept.append((path[-1], _TERMS[path], _NONE if a is None else f"{a:g}", _NONE if b is None else f"{b:g}"))
        elif isinstance(a, dict) and isinstance(b, dict):
            for key in sorted(a.keys() | b.keys()):
                walk(a.get(key), b.get(key), (*path, key))
        else:
            edited.append(f"[{'.'.join(path[:-1])}] {path[-1]}" if len(path) > 1 else path[0])

    walk(run, new, ())
    return edited, kept


def _check_provider(state: RunState, job: JobSpec, source: str) -> None:
    try:
        provider = registry.load(state.provider)
    except registry.ProviderUnavailable:  # refused where the run is opened, with the fix
        return
    try:
        provider.check_job(job)
    except RuntimeFailure as exc:
        raise RunStateError(f"{source}: {exc}") from None


def _check_catalog(state: RunState, job: JobSpec, source: str) -> None:
    """Each reservation's instance type in its region, in the catalog the run plans with: a misspelt one would
    fail the resumed run's first re-plan."""
    offered = {(o.cloud, o.region, o.instance_type) for o in resolve_catalog(state.catalog, use_cache=state.use_cache)}
    for i, h in enumerate(job.purchase.held):
        if (h.cloud, h.region, h.instance_type) not in offered:
            raise RunStateError(
                f"{source}: purchase.held[{i}]: {h.instance_type} in {h.cloud}:{h.region} is not in the run's "
                "catalog. To fix: check the instance type and region spelling (`planner prices show`).")
