"""A run's start: the job checked for what `planner run` can follow, the plan's first pool, and the
fresh state written to its run directory."""

from __future__ import annotations

import fnmatch
import json
import shutil
import time
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from planner.job import JobSpec
from pricing.catalog import PURCHASE_OPTIONS
from pricing.pool import Pool, PoolError
from runtime.control import checkpoint_owner
from runtime.control.queue_record import is_queue_run
from runtime.control.run_home import home_of, runs_root
from runtime.control.run_state import PRIVATE_DIR, STATE_FILE, RunState, RunStateError, save_state, validation_errors
from runtime.errors import RuntimeFailure
from runtime.providers import entrypoint, registry


def check_runnable(job: JobSpec, source: str) -> None:
    """Refuse jobs ``planner run`` cannot follow, naming the key and the fix."""
    if not job.run.entrypoint:
        raise RunStateError(
            f"{source}: run.entrypoint is empty. To fix: give the training command as an argv list, e.g. "
            'entrypoint = ["python", "train.py"].'
        )
    if job.workload.unit == "gpu_hours":
        raise RunStateError(
            f"{source}: workload.gpu_hours cannot be followed step by step. To fix: give workload.steps, "
            "workload.samples, or workload.tokens with workload.global_batch."
        )
    if job.workload.unit == "tokens" and not job.workload.global_batch:
        raise RunStateError(
            f"{source}: workload.tokens needs workload.global_batch (tokens per optimizer step) so progress "
            "can be counted from checkpoints. To fix: add global_batch under [workload]."
        )


def plan_pool(plan: dict[str, Any], *, source: str) -> tuple[Pool, int]:
    """The pool and node count of a plan's first phase (``planner quote --json`` output, or its ``plan``)."""
    body = plan.get("plan", plan) if isinstance(plan, dict) else None
    phases = body.get("phases") if isinstance(body, dict) else None
    if not phases:
        raise RunStateError(
            f"{source}: key 'plan.phases' is missing or empty. To fix: pass the output of "
            "`planner quote JOB --json` for a feasible job."
        )
    phase = phases[0]
    if not isinstance(phase, dict):
        raise RunStateError(f"{source}: plan.phases[0] is not an object. To fix: regenerate it with "
                            "`planner quote JOB --json`.")
    try:
        pool = Pool.from_dict(phase)
    except PoolError as exc:
        raise RunStateError(
            f"{source}: plan.phases[0]: {exc}. To fix: regenerate it with `planner quote JOB --json`."
        ) from None
    try:
        nodes = int(phase["nodes"])
    except KeyError:
        nodes = 0
    except (TypeError, ValueError):
        nodes = -1
    if nodes < 1:
        raise RunStateError(
            f"{source}: plan.phases[0] key 'nodes' is missing or not a whole number >= 1. To fix: regenerate it "
            "with `planner quote JOB --json`."
        )
    return pool, nodes


def check_plan_fits(plan: dict[str, Any], pool: Pool, nodes: int, job: JobSpec, *, source: str) -> None:
    """Refuse a plan (``planner quote --json`` output) whose first phase -- the one a run launches; a
    re-plan chooses what follows under the job's constraints -- the job rules out: a plan quoted for
    another job, or before the job's limits changed, would otherwise run as it stands, on a cloud on
    as many nodes as it says."""
    quoted_for = plan.get("job")
    if isinstance(quoted_for, str) and quoted_for != job.name:
        raise RunStateError(f"{source}: this plan was quoted for job {quoted_for!r}, not {job.name!r}. To fix: "
                            "quote this job (`planner quote JOB --json`) and pass that plan.")
    c, where = job.constraints, "plan.phases[0]"
    problems = []
    if nodes > c.max_nodes:
        problems.append(f"{where} has {nodes} nodes, over constraints.max_nodes = {c.max_nodes}")
    if c.max_gpus is not None and nodes * pool.gpus_per_node > c.max_gpus:
        problems.append(f"{where} has {nodes * pool.gpus_per_node} GPUs, over constraints.max_gpus = {c.max_gpus}")
    if pool.purchase in PURCHASE_OPTIONS:  # held reservations and the team's cluster are named in the job itself
        if pool.purchase not in job.purchase.allow:
            problems.append(f"{where} buys {pool.purchase}, not in purchase.allow = {list(job.purchase.allow)}")
        if c.clouds and pool.cloud not in c.clouds:
            problems.append(f"{where} is on {pool.cloud}, not in constraints.clouds = {list(c.clouds)}")
        if c.regions and not any(fnmatch.fnmatchcase(pool.region, g) for g in c.regions):
            problems.append(f"{where} is in {pool.region}, which constraints.regions = {list(c.regions)} rules out")
        if c.gpus and pool.gpu.lower() not in {g.lower() for g in c.gpus}:
            problems.append(f"{where} uses {pool.gpu}, not in constraints.gpus = {list(c.gpus)}")
    if problems:
        raise RunStateError(f"{source}: the plan breaks the job's constraints: {'; '.join(problems)}. To fix: "
                            "quote the job as it is now (`planner quote JOB --json`) and pass that plan.")


def run_id_for(run_dir: Path, home: str | None) -> str:
    """The id a new run's cloud resources are tagged with: its directory's name, for a job of a queue the
    queue's directory's name before it, and the first digits of its runs directory's home id after it (see
    :mod:`runtime.control.run_home`). A job's name alone ("train") repeats across the queues of a team, a run's
    name across its members' runs directories, and two runs sharing an id would take each other's instances
    for their own (a resume releases every instance tagged with its id) and clash on their names."""
    run_dir = run_dir.resolve()
    name = f"{run_dir.parent.name}-{run_dir.name}" if is_queue_run(run_dir.parent) else run_dir.name
    return f"{name}-{home[:6]}" if home else name


def _on_a_cloud(provider: str) -> bool:
    """Whether the provider's nodes are cloud instances (which carry the run's home)."""
    try:
        cls = registry.load(provider)
    except registry.ProviderUnavailable:  # refused where the run is built, with the fix
        return False
    return cls.remote or cls.delegates


def preflight(job: JobSpec, job_path: Path, provider: str, *, source: str | None = None) -> None:
    """Refuse, before anything is written or billed, a job ``provider`` cannot run (a queue: every job,
    before its first starts), naming the file (``source``, else ``job_path``), the key and the fix.

    Raises:
        RuntimeFailure: the provider is unknown or cannot be loaded here (:mod:`runtime.providers.registry`).
        RunStateError: what is wrong with the job.
    """
    source = source or str(job_path)
    check_runnable(job, source)
    cls = registry.load(provider)
    try:
        cls.check_job(job)
    except RuntimeFailure as exc:
        raise RunStateError(f"{source}: {exc}") from None
    if cls.remote and "://" not in (job.run.checkpoint_dir or ""):
        raise RunStateError(
            f"{source}: [run].checkpoint_dir must be an object-store URL for provider {provider!r} (its nodes "
            "cannot read this machine's disk). To fix: set checkpoint_dir = \"s3://BUCKET/PREFIX\" (or gs://, az://) "
            "in [run]."
        )
    # The nodes run the entrypoint where `planner run` starts (or its bundle): a script not there would
    # fail every launch at step 0, each one billed.
    if cls.runs_entrypoint and (problem := entrypoint.missing_script(
            job.run.entrypoint, Path.cwd(), bundled=cls.remote or cls.delegates, job_dir=job_path.resolve().parent)):
        raise RunStateError(f"{source}: {problem}")


def preflight_resume(run_dir: Path, state: RunState, *, new_terms: bool) -> None:
    """Refuse, before it is reopened, a resume whose next launch would fail at step 0: the run's script is
    gone from the directory it started in. Let through what launches nothing now: a run still holding a
    launch (its controller died; the resume first recovers that launch), and one that ended for good or,
    without ``new_terms`` (a larger budget or a new deadline), for want of budget or time (refused where it
    is opened, with the fix).

    Raises:
        RunStateError: the script is missing, or not what the nodes can run.
    """
    if state.status == "running" and state.current is not None:
        return
    if state.status == "completed" or (state.status in ("budget_cap", "infeasible") and not new_terms):
        return
    try:
        cls = registry.load(state.provider)
    except registry.ProviderUnavailable:  # refused where the run is opened, with the fix
        return
    job = state.job_spec()
    if cls.runs_entrypoint and (problem := entrypoint.missing_script(
            job.run.entrypoint, Path(state.cwd), bundled=cls.remote or cls.delegates, resuming=True)):
        raise RunStateError(f"{run_dir}: {problem}")


def new_state(
    *, job_path: Path, job: JobSpec, run_dir: Path, catalog: str | None, provider: str, time_scale: float,
    policy: str, chaos: list[str], plan_path: Path | None = None, use_cache: bool = True,
) -> RunState:
    """The state of a fresh run (written to ``run_dir``), refusing a directory that holds one."""
    if (run_dir / STATE_FILE).exists():
        raise RunStateError(
            f"{run_dir}: already holds a run. To fix: continue it with `planner run --resume {run_dir}` or "
            "choose another --run-dir."
        )
    check_runnable(job, str(job_path))
    checkpoint_dir = job.run.checkpoint_dir
    if checkpoint_dir is None:
        checkpoint_dir = str((run_dir / "ckpt").resolve())
    elif "://" not in checkpoint_dir:
        checkpoint_dir = str(Path(checkpoint_dir).resolve())
    try:
        state = RunState(
            job_path=str(job_path.resolve()), job=job.model_dump(mode="json"), cwd=str(Path.cwd()),
            catalog=str(Path(catalog).resolve()) if catalog else None, provider=provider,
            checkpoint_dir=checkpoint_dir, origin=time.time(), time_scale=time_scale, policy=policy,
            chaos=list(chaos), use_cache=use_cache,
        )
    except ValidationError as exc:
        raise RunStateError(f"{job_path}: cannot start a run: {validation_errors(exc)}.") from None
    if plan_path is not None:
        try:
            plan = json.loads(plan_path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise RunStateError(f"{plan_path}: cannot read the plan ({exc}). To fix: pass a JSON plan file.") from exc
        pool, nodes = plan_pool(plan, source=str(plan_path))
        check_plan_fits(plan, pool, nodes, job, source=str(plan_path))
        state.set_pool(pool, nodes)
        state.plan = plan.get("plan", plan) if isinstance(plan, dict) else None
    state.home = home_of(runs_root(run_dir)) if _on_a_cloud(provider) else None
    state.run_id = run_id_for(run_dir, state.home)
    made = not run_dir.exists()
    if made:  # a directory the user made is theirs to set; one we make is private
        run_dir.mkdir(parents=True)
        run_dir.chmod(PRIVATE_DIR)  # whatever the umask: the run's job, spend and logs are the team's own
    try:
        checkpoint_owner.claim(checkpoint_dir, run_dir=str(run_dir.resolve()), job=job.name)  # the last check
    except checkpoint_owner.CheckpointDirTaken:
        if made:
            shutil.rmtree(run_dir, ignore_errors=True)  # a refused run leaves nothing behind
        raise
    save_state(run_dir, state)
    return state
