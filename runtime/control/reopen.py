"""What `planner run --resume RUN_DIR` changes in a run before its controller opens it again: a larger
budget (--budget-usd), a new deadline (--deadline-in), and the reopening of a run that was stopped or failed.

Each reads the run's state, checks what it is given, and writes the state back whole or not at all: a
refused change leaves the run as it was. A run reopened this way is re-planned from where it stands now
(the work, budget and time left, today's prices) and continues from its last committed checkpoint.
"""

from __future__ import annotations

import math
from pathlib import Path

from pydantic import ValidationError

from runtime.control.clock import Clock, WallClock
from runtime.control.run_state import RunState, RunStateError, load_state, save_state, validation_errors

REOPENABLE = ("cancelled", "failed")  # what --resume reopens (the cap takes --budget-usd; no plan, either flag)


def check_budget_value(budget_usd: float) -> None:
    """Refuse a --budget-usd that is not a positive number of USD."""
    if not (math.isfinite(budget_usd) and budget_usd > 0):
        raise RunStateError(f"--budget-usd {budget_usd:g} must be a positive number of USD. To fix: pass e.g. "
                            "--budget-usd 50.")


def check_deadline_value(hours: float) -> None:
    """Refuse a --deadline-in that is not a positive number of hours."""
    if not (math.isfinite(hours) and hours > 0):
        raise RunStateError(f"--deadline-in {hours:g} must be a positive number of hours from now. To fix: pass "
                            "e.g. --deadline-in 12.")


def raise_budget(run_dir: str | Path, budget_usd: float) -> RunState:
    """Give a run that has not completed a larger ``budget_usd``: one the hard budget cap stopped, or that
    found no plan within its budget, is reopened; one cancelled or failed is reopened by
    :func:`reopen_stopped` after this.

    The run resumes from its last checkpoint; alerts already sent stay sent.

    Raises:
        RunStateError: the run completed, or the new budget is not a number larger than the old one; the
            state is left as it was.
    """
    check_budget_value(budget_usd)
    state = load_state(run_dir)
    if state.status == "completed":
        raise RunStateError(f"{run_dir}: the run ended 'completed'; there is nothing left to spend a budget on.")
    old = state.job.get("constraints", {}).get("budget_usd")
    if old is not None and budget_usd <= old:
        raise RunStateError(f"--budget-usd {budget_usd:g} must be larger than the run's budget ({old:g} USD).")
    _set_constraint(state, "budget_usd", budget_usd, flag=f"--budget-usd {budget_usd:g}")
    if state.status in ("budget_cap", "infeasible"):
        _reopen(state)
    save_state(run_dir, state)
    return state


def move_deadline(run_dir: str | Path, hours_from_now: float, *, clock: Clock | None = None) -> RunState:
    """Set the run's deadline ``hours_from_now`` hours of its clock from now (later or sooner than the one
    it had, or a first one): a run that ended because no plan met its deadline is reopened; one cancelled
    or failed is reopened by :func:`reopen_stopped` after this; a live run takes it at its next re-plan.
    ``clock``: the run's clock (default: the system's, as the run counts it).

    Raises:
        RunStateError: the run completed, or the budget cap stopped it (a deadline adds no budget: pass
            --budget-usd, which :func:`raise_budget` applies first), or the value is not a positive number
            of hours; the state is left as it was.
    """
    check_deadline_value(hours_from_now)
    state = load_state(run_dir)
    if state.status == "completed":
        raise RunStateError(f"{run_dir}: the run ended 'completed'; there is no deadline left to move.")
    if state.status == "budget_cap":
        raise RunStateError(f"{run_dir}: the run stopped at its budget cap, which a later deadline does not lift. "
                            f"To fix: pass a larger budget too, `planner run --resume {run_dir} --budget-usd USD "
                            f"--deadline-in {hours_from_now:g}`.")
    clock = clock or run_clock(state)
    _set_constraint(state, "deadline_hours", clock.elapsed_hours() + hours_from_now,
                    flag=f"--deadline-in {hours_from_now:g}")
    if state.status == "infeasible":
        _reopen(state)
    save_state(run_dir, state)
    return state


def run_clock(state: RunState) -> WallClock:
    """The run's clock, as its controller counts it: simulated time, its paused spells left out."""
    clock = WallClock(state.origin, state.time_scale)
    clock.pauses = [list(p) for p in state.clock_pauses]
    clock.resume()
    return clock


def reopen_stopped(run_dir: str | Path) -> tuple[str, str | None] | None:
    """Reopen a run stopped by Ctrl-C or ``planner cancel``, or one that failed (a bug in the training
    script since fixed, a cloud API that kept erring), so ``--resume`` continues it from its last committed
    checkpoint (from step 0 when none committed). Returns the status and cause it ended with; None when
    it ended otherwise.

    Its nodes were released when it ended and its ledger is closed, so nothing is billed twice: the
    resumed run plans, provisions and bills afresh from now. A failed run gets [run].max_restarts
    retries anew.
    """
    state = load_state(run_dir)
    if state.status not in REOPENABLE:
        return None
    ended = (state.status, state.cause)
    if state.status == "failed":
        state.failures_before_reopen = state.failures
    _reopen(state)
    save_state(run_dir, state)
    return ended


def _set_constraint(state: RunState, key: str, value: float, *, flag: str) -> None:
    try:
        state.job = {**state.job, "constraints": {**state.job.get("constraints", {}), key: value}}
    except ValidationError as exc:
        raise RunStateError(f"{flag}: {validation_errors(exc)}; the run was left as it was.") from None


def _reopen(state: RunState) -> None:
    state.status, state.cause = "running", None
    state.set_pool(None, None)  # re-planned from where it stands now: the time and budget left, the prices
