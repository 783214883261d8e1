"""The quote page's jobs: a run's own job, a job.toml in the runs directory, or a pasted one.

A quote is :func:`planner.quote_service.quote_job` and :func:`planner.report.quote_json`, the
calls behind ``planner quote --json``: the page shows that object's numbers.
"""

from __future__ import annotations

import threading
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from planner.job import MAX_FILE_BYTES, JobSpec, load_job, parse_job
from runtime.errors import RuntimeFailure
from runtime.reports.queue_view import find_queues
from runtime.reports.run_view import find_runs

__all__ = ["JobNotFound", "QuoteSettings", "job_choices", "load_choice", "parse_pasted", "quote_payload"]

PASTED = "pasted job.toml"
_SOLVING = threading.Lock()  # one MILP at a time: a page must not take every core of the machine


class JobNotFound(RuntimeFailure):
    """The job asked for is not one the runs directory offers."""


@dataclass(frozen=True, slots=True)
class QuoteSettings:
    """What `planner quote` options the dashboard was started with."""

    catalog: str | None = None
    use_cache: bool = True
    top: int = 3


def job_choices(root: Path) -> list[dict[str, str]]:
    """Jobs to quote: every run's job (as it was run; a queue's jobs too) and the ``*.toml`` files at most
    one level down."""
    from runtime.control.run_state import load_state

    out = []
    runs = [*find_runs(root), *(r for q in find_queues(root) for r in find_runs(q))] if root.is_dir() else []
    for run in runs:  # a queue's jobs as QUEUE_DIR/JOB, as the runs list names them
        try:
            name = load_state(run).job.get("name", "?")
        except RuntimeFailure:
            continue
        rel = run.relative_to(root).as_posix()
        out.append({"id": f"run:{rel}", "label": f"{rel} (the job it ran: {name})"})
    for path in sorted([*root.glob("*.toml"), *root.glob("*/*.toml")]) if root.is_dir() else []:
        rel = path.relative_to(root).as_posix()
        out.append({"id": f"file:{rel}", "label": rel})
    return out


def load_choice(root: Path, choice: str) -> tuple[JobSpec, str]:
    """The job a :func:`job_choices` id names, and the source its errors name.

    Raises:
        JobNotFound: the id is not one of :func:`job_choices` (nothing outside the root is read).
        PlannerError: the job file is invalid (the message names the file and key).
    """
    if choice not in {c["id"] for c in job_choices(root)}:
        raise JobNotFound(f"{choice!r} is not a job under {root}; pick one from the list or paste a job.toml")
    kind, _, rest = choice.partition(":")
    if kind == "run":
        from runtime.control.run_state import load_state

        state = load_state(root / rest)
        source = f"{root / rest / 'state.json'} (key 'job')"
        return parse_job(state.job, source=source), source
    path = root / rest
    return load_job(path), str(path)


def parse_pasted(text: str) -> tuple[JobSpec, str]:
    """A job pasted into the page.

    Raises:
        PlannerError: not TOML, too large, or not a valid job (the message names the key).
    """
    from planner.errors import JobSpecError

    if len(text.encode("utf-8")) > MAX_FILE_BYTES:
        raise JobSpecError(PASTED, [f"larger than {MAX_FILE_BYTES // 1024} KiB; a job file is a page of settings"])
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise JobSpecError(PASTED, [f"not valid TOML: {exc}"]) from None
    except RecursionError:
        raise JobSpecError(PASTED, ["nested deeper than a job file ever is"]) from None
    return parse_job(raw, source=PASTED), PASTED


def quote_payload(job: JobSpec, source: str, settings: QuoteSettings, *,
                  objective: str | None = None) -> dict[str, Any]:
    """``planner quote --json``'s object for ``job``.

    Raises:
        PlannerError, PricingError: as ``planner quote`` would (bad GPU names, unreadable catalog).
    """
    from planner.quote_service import quote_job
    from planner.report import quote_json

    with _SOLVING:
        quote = quote_job(job, source=source, catalog=settings.catalog, use_cache=settings.use_cache,
                          top=settings.top, objective=objective)
    return quote_json(quote)

