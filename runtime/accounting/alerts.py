"""Budget alert policy: which alerts fire, each once per threshold and kind.

Like AWS Budgets, thresholds are fractions of ``budget_usd`` checked against two figures:
*actual* spend (from the ledger) and *forecast* spend (spend to date plus the remaining
work under the current plan).  Besides thresholds the policy alerts when a re-plan
raises the expected cost, when the deadline is at risk, when the controller goes on with
a plan that will miss the deadline (:class:`LatePlan`, once per run), and when the run ends.

A timeline with ``budget_usd = 1000`` and the default thresholds ``[0.5, 0.8, 1.0]``::

    t=0   plan quoted at $850     -> "forecast-0.8" (covers forecast-0.5: one email, not two)
    t=3h  preempted, re-plan $1020 -> "replan-1" and "forecast-1"
    t=5h  spent $512               -> "actual-0.5"
    t=5h  controller SIGKILLed, resumed: the ledger says what was sent -> nothing repeats
    t=9h  stopped at the cap       -> "run-ended"

:meth:`AlertPolicy.evaluate` is pure: it reads the sent keys from the ledger snapshot.
:func:`dispatch` is the one call a controller makes: evaluate, hand each alert to the
mailer (durable in the outbox first), then mark it sent in the ledger.  A crash between
the two steps re-sends to the outbox, which ignores a key it already holds, so every
alert goes out exactly once.  Nothing in :func:`dispatch` raises into the caller.
"""

from __future__ import annotations

import logging
import math
import re
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Protocol
from urllib.parse import urlsplit

from runtime.accounting.forecast import Forecast
from runtime.accounting.ledger import Ledger, LedgerSnapshot
from runtime.errors import RuntimeFailure

__all__ = [
    "Alert",
    "AlertConfigError",
    "AlertKind",
    "AlertPolicy",
    "AlertSink",
    "AlertsConfig",
    "DEFAULT_THRESHOLDS",
    "Event",
    "LatePlan",
    "NodesLeft",
    "Replanned",
    "RunEnded",
    "RunOutcome",
    "dispatch",
]

logger = logging.getLogger(__name__)

DEFAULT_THRESHOLDS = (0.5, 0.8, 1.0)
SMTP_SCHEMES = ("smtp", "smtps")
_ADDRESS = re.compile(r"[^@\s<>,]+@[^@\s<>,]+")


class AlertConfigError(RuntimeFailure):
    """The ``[alerts]`` table is invalid.  The message names the file, the key and the fix."""


@dataclass(frozen=True, slots=True)
class AlertsConfig:
    """The ``[alerts]`` table of job.toml.

    ``smtp_url`` is ``smtp://host[:port]`` (STARTTLS when offered, port 25 by default)
    or ``smtps://host[:port]`` (TLS from the start, port 465); ``None`` writes alerts as
    .eml files to the run's outbox.  Credentials never go in the URL: they come from
    the ``DANLU_SMTP_USER`` / ``DANLU_SMTP_PASSWORD`` environment variables.
    ``sender`` is the From address (default ``$DANLU_SMTP_FROM`` or ``danlu@<host>``).
    """

    email: tuple[str, ...] = ()
    smtp_url: str | None = None
    thresholds: tuple[float, ...] = DEFAULT_THRESHOLDS
    sender: str | None = None

    def __post_init__(self) -> None:
        problems = _problems(self.email, self.smtp_url, self.thresholds, self.sender)
        if problems:
            raise AlertConfigError(_format("invalid [alerts] table", problems))
        object.__setattr__(self, "email", tuple(self.email))
        object.__setattr__(self, "thresholds", tuple(sorted({float(t) for t in self.thresholds})))

    @classmethod
    def from_mapping(cls, table: Mapping[str, object], *, source: str = "job.toml") -> AlertsConfig:
        """Build from a parsed ``[alerts]`` table; errors name ``source`` and every bad key."""
        known = ("email", "smtp_url", "thresholds", "sender")
        problems = [f"[alerts].{k}: unknown key; expected one of {', '.join(known)}"
                    for k in sorted(set(table) - set(known))]
        email = table.get("email", ())
        values = {
            "email": (email,) if isinstance(email, str) else email,
            "smtp_url": table.get("smtp_url"),
            "thresholds": table.get("thresholds", DEFAULT_THRESHOLDS),
            "sender": table.get("sender"),
        }
        problems += _problems(**values)
        if problems:
            raise AlertConfigError(_format(f"{source}: invalid [alerts] table", problems))
        return cls(**values)


def _format(title: str, problems: list[str]) -> str:
    return title + "\n" + "\n".join(f"  - {p}" for p in problems)


def _problems(email: object, smtp_url: object, thresholds: object, sender: object) -> list[str]:
    problems = []
    if not isinstance(email, (list, tuple)) or not all(
            isinstance(a, str) and _ADDRESS.fullmatch(a) for a in email):
        problems.append(f"[alerts].email: {email!r} must be a list of addresses such as "
                        "[\"ml-team@example.com\"]")
    if smtp_url is not None:
        problems.extend(_smtp_url_problems(smtp_url))
        if not email:
            problems.append("[alerts].email: smtp_url is set but there is no recipient; add at least one address")
    if (not isinstance(thresholds, (list, tuple)) or not thresholds
            or not all(isinstance(t, (int, float)) and not isinstance(t, bool) and math.isfinite(t)
                       and 0 < t <= 10 for t in thresholds)):
        problems.append(f"[alerts].thresholds: {thresholds!r} must be a non-empty list of fractions of "
                        "budget_usd in (0, 10], e.g. [0.5, 0.8, 1.0]")
    if sender is not None and (not isinstance(sender, str) or not _ADDRESS.fullmatch(sender)):
        problems.append(f"[alerts].sender: {sender!r} must be an email address such as \"danlu@example.com\"")
    return problems


def _smtp_url_problems(url: object) -> list[str]:
    if not isinstance(url, str):
        return [f"[alerts].smtp_url: {url!r} must be a string such as \"smtp://mail.example.com:587\""]
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        return [f"[alerts].smtp_url: {url!r} is not a valid URL ({exc})"]
    problems = []
    if parts.scheme not in SMTP_SCHEMES:
        problems.append(f"[alerts].smtp_url: scheme {parts.scheme!r} is not supported; use smtp:// "
                        "(STARTTLS when offered) or smtps:// (implicit TLS)")
    if not parts.hostname:
        problems.append(f"[alerts].smtp_url: {url!r} has no host; write e.g. \"smtp://mail.example.com:587\"")
    if parts.username is not None or parts.password is not None:
        # Never echo the URL here: it carries the secret.
        problems.append("[alerts].smtp_url: credentials do not belong in the URL; remove them and set "
                        "DANLU_SMTP_USER and DANLU_SMTP_PASSWORD in the environment")
    if port == 0:
        problems.append("[alerts].smtp_url: port 0 is not a valid SMTP port")
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        problems.append("[alerts].smtp_url: remove the path/query; only scheme://host[:port] is read")
    return problems


class AlertKind(str, Enum):
    """What an alert is about."""

    ACTUAL = "actual"
    FORECAST = "forecast"
    REPLAN_COST_UP = "replan"
    DEADLINE_AT_RISK = "deadline"
    DEADLINE_MISSED = "deadline-missed"
    RUN_ENDED = "run-ended"
    NODES_LEFT = "nodes-left"


class RunOutcome(str, Enum):
    """How a run ended, for the final alert."""

    COMPLETED = "completed"
    BUDGET_CAP = "budget_cap"
    DEADLINE = "deadline"
    FAILED = "failed"
    CANCELLED = "cancelled"
    INFEASIBLE = "infeasible"


@dataclass(frozen=True, slots=True)
class Replanned:
    """Event: the controller re-planned; ``replan_id`` is unique within the run."""

    replan_id: str
    previous_total_usd: float
    new_total_usd: float
    reason: str = ""


@dataclass(frozen=True, slots=True)
class RunEnded:
    """Event: the run ended.  ``detail`` is one line for the email (e.g. the last step)."""

    outcome: RunOutcome
    detail: str = ""


@dataclass(frozen=True, slots=True)
class LatePlan:
    """Event: the controller goes on with a plan that ends at ``expected_end``, after
    ``deadline_at`` (both POSIX seconds); ``reason`` says why no plan meets it."""

    expected_end: float
    deadline_at: float
    reason: str = ""

    @property
    def hours_late(self) -> float:
        return (self.expected_end - self.deadline_at) / 3600.0


@dataclass(frozen=True, slots=True)
class NodesLeft:
    """Event: the run stopped but the release of ``launch``'s nodes failed (``error``): they may still be
    billed until someone releases them."""

    launch: str
    error: str


Event = Replanned | RunEnded | LatePlan | NodesLeft


@dataclass(frozen=True, slots=True)
class Alert:
    """One alert to send.  ``key`` is unique per run; ``covers`` are the keys it settles
    (a threshold alert also settles lower thresholds crossed at the same time)."""

    key: str
    kind: AlertKind
    run_name: str
    headline: str
    budget_usd: float | None
    snapshot: LedgerSnapshot
    forecast: Forecast | None = None
    threshold: float | None = None
    covers: tuple[str, ...] = ()
    replan: Replanned | None = None
    ended: RunEnded | None = None
    late: LatePlan | None = None
    thresholds: tuple[float, ...] = field(default=DEFAULT_THRESHOLDS)
    nodes_left: NodesLeft | None = None
    run_dir: str | None = None  # where the run is, for the commands an alert gives

    @property
    def spent_usd(self) -> float:
        return self.snapshot.total_usd

    @property
    def at(self) -> float:
        return self.snapshot.taken_at


class AlertPolicy:
    """Decides which alerts are due.  Keys already in ``snapshot.alerts_sent`` never fire again.

    Args:
        config: the ``[alerts]`` table.
        run_name: the job's ``name``, used in subjects.
        budget_usd: ``[constraints].budget_usd``; ``None`` disables threshold alerts.
        run_dir: the run's directory, named in the commands the alerts give.
        min_replan_increase: a re-plan alerts only if it raises the expected total by at
            least this fraction (re-planning noise of a few cents is not news).
    """

    def __init__(self, config: AlertsConfig, *, run_name: str, budget_usd: float | None,
                 run_dir: str | None = None, min_replan_increase: float = 0.01):
        if budget_usd is not None and (not math.isfinite(budget_usd) or budget_usd <= 0):
            raise AlertConfigError(f"budget_usd={budget_usd!r} must be positive for budget alerts; "
                                   "set [constraints].budget_usd")
        self.config = config
        self.run_name = run_name
        self.budget_usd = budget_usd
        self.run_dir = run_dir
        self.min_replan_increase = min_replan_increase

    def evaluate(self, snapshot: LedgerSnapshot, forecast: Forecast | None = None,
                 events: Iterable[Event] = ()) -> list[Alert]:
        """The alerts due now, in the order they should be sent."""
        sent = set(snapshot.alerts_sent)
        alerts: list[Alert] = []

        def add(alert: Alert | None) -> None:
            if alert is not None and alert.key not in sent:
                alerts.append(alert)
                sent.update(alert.covers)

        events = list(events)
        # A re-plan explains the threshold alerts it causes, so it goes first.
        for event in events:
            if isinstance(event, Replanned):
                add(self._replan_alert(event, snapshot, forecast))
        add(self._threshold_alert(AlertKind.ACTUAL, snapshot.total_usd, snapshot, forecast, sent))
        if forecast is not None:
            add(self._threshold_alert(AlertKind.FORECAST, forecast.total_usd, snapshot, forecast, sent))
        for event in events:
            if isinstance(event, LatePlan):
                # Once per run: a later re-plan that is late again is not news; the run-end alert says how it went.
                add(self._alert(AlertKind.DEADLINE_MISSED, "deadline-missed", snapshot, forecast,
                                f"the deadline will be missed: the plan ends {_utc(event.expected_end)}, "
                                f"{event.hours_late:.1f} h after the deadline {_utc(event.deadline_at)}",
                                late=event, covers=("deadline-missed", "deadline-at-risk")))
        ended = [event for event in events if isinstance(event, RunEnded)]
        if forecast is not None and forecast.deadline_at_risk and not ended:
            add(self._alert(AlertKind.DEADLINE_AT_RISK, "deadline-at-risk", snapshot, forecast,
                            f"the deadline is at risk: the work is expected to finish "
                            f"{-(forecast.slack_hours or 0.0):.1f} h late"))
        for event in ended:
            add(self._alert(AlertKind.RUN_ENDED, "run-ended", snapshot, forecast, _ended_headline(event),
                            ended=event))
        for event in events:
            if isinstance(event, NodesLeft):
                add(self._alert(AlertKind.NODES_LEFT, f"nodes-left-{event.launch}", snapshot, forecast,
                                f"the nodes of launch {event.launch} were not released and may still be billed",
                                nodes_left=event))
        return alerts

    def _alert(self, kind: AlertKind, key: str, snapshot: LedgerSnapshot, forecast: Forecast | None,
               headline: str, **extra: object) -> Alert:
        extra.setdefault("covers", (key,))
        return Alert(key=key, kind=kind, run_name=self.run_name, headline=headline, budget_usd=self.budget_usd,
                     snapshot=snapshot, forecast=forecast, thresholds=self.config.thresholds, run_dir=self.run_dir,
                     **extra)

    def _threshold_alert(self, kind: AlertKind, figure: float, snapshot: LedgerSnapshot,
                         forecast: Forecast | None, sent: set[str]) -> Alert | None:
        if self.budget_usd is None:
            return None
        crossed = [t for t in self.config.thresholds if figure >= t * self.budget_usd]
        fresh = [t for t in crossed if _threshold_key(kind, t) not in sent]
        if not fresh:
            return None
        top = max(fresh)
        budget = f"${self.budget_usd:,.2f} budget"
        if kind is AlertKind.ACTUAL:
            headline = f"spend ${figure:,.2f} reached {top:.0%} of the {budget}"
        else:
            headline = (f"forecast spend ${figure:,.2f} is {figure / self.budget_usd:.0%} of the {budget} "
                        f"(threshold {top:.0%})")
        return self._alert(kind, _threshold_key(kind, top), snapshot, forecast, headline, threshold=top,
                           covers=tuple(_threshold_key(kind, t) for t in fresh))

    def _replan_alert(self, event: Replanned, snapshot: LedgerSnapshot,
                      forecast: Forecast | None) -> Alert | None:
        rise = event.new_total_usd - event.previous_total_usd
        if rise <= 0 or rise < self.min_replan_increase * event.previous_total_usd:
            return None
        headline = (f"a re-plan raised the expected cost by ${rise:,.2f}: "
                    f"${event.previous_total_usd:,.2f} -> ${event.new_total_usd:,.2f}")
        return self._alert(AlertKind.REPLAN_COST_UP, f"replan-{event.replan_id}", snapshot, forecast, headline,
                           replan=event)


def _utc(ts: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(ts))


def _threshold_key(kind: AlertKind, threshold: float) -> str:
    return f"{kind.value}-{threshold:g}"


def _ended_headline(event: RunEnded) -> str:
    return {
        RunOutcome.COMPLETED: "the run completed",
        RunOutcome.BUDGET_CAP: "the run was checkpointed and stopped before exceeding its budget",
        RunOutcome.DEADLINE: "the run was stopped at its deadline",
        RunOutcome.FAILED: "the run failed",
        RunOutcome.CANCELLED: "the run was cancelled",
        RunOutcome.INFEASIBLE: "the run stopped: no plan fits what is left of its budget and deadline",
    }[RunOutcome(event.outcome)]


class AlertSink(Protocol):
    """Where alerts go (a :class:`runtime.accounting.mailer.Mailer`).  ``send`` returns True once the
    alert is durably stored or delivered, and never raises."""

    def send(self, alert: Alert) -> bool: ...


def dispatch(policy: AlertPolicy, ledger: Ledger, sink: AlertSink, forecast: Forecast | None = None,
             events: Sequence[Event] = (), *, now: float | None = None) -> list[Alert]:
    """Evaluate the policy against the ledger, send what is due, and record it as sent.

    Returns the alerts handed to ``sink``.  Every failure is logged, none is raised:
    alerting must never stop training.  An alert that could not be stored is not marked
    sent, so the next call tries it again.
    """
    try:
        snapshot = ledger.snapshot(now=time.time() if now is None else now)
        alerts = policy.evaluate(snapshot, forecast, events)
    except Exception:  # alerting must never stop training
        logger.exception("budget alerts: could not evaluate the alert policy")
        return []
    handed: list[Alert] = []
    for alert in alerts:
        try:
            if not sink.send(alert):
                continue
            handed.append(alert)
            ledger.mark_alerts_sent(alert.covers, kind=alert.kind.value, at=alert.at)
        except Exception:  # alerting must never stop training
            logger.exception("budget alerts: could not send or record alert %s", alert.key)
    return handed
