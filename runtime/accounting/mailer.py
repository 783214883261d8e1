"""Delivery of alert emails: a durable outbox in the run directory, drained over SMTP.

:meth:`Mailer.send` renders the alert and writes it to the outbox (``<id>.eml`` plus its
state ``<id>.json``, both written atomically) before it returns; a background thread
then delivers it.  The outbox is the queue, so alerts survive an SMTP outage and a
controller crash, and an alert key the outbox already holds is never queued twice::

    outbox/
      forecast-0.8.eml    forecast-0.8.json   {"status": "sent", "attempts": 1, ...}
      actual-0.5.eml      actual-0.5.json     {"status": "queued", "attempts": 3,
                                               "last_error": "connection refused ..."}

Statuses: ``queued`` (waiting; retried with exponential backoff), ``sent`` (accepted by
the server), ``written`` (no ``smtp_url``: the .eml file *is* the delivery) and
``rejected`` (refused for good with a 5xx reply; not retried).

``smtp://`` upgrades with STARTTLS whenever the server offers it; ``smtps://`` uses TLS
from the start.  Credentials come from ``DANLU_SMTP_USER`` / ``DANLU_SMTP_PASSWORD``
and are never logged.  A failed login is logged once; the Mailer then stops trying for
the rest of the process (a resumed run with fixed credentials delivers the queue).
Nothing here raises into the caller after construction: every failure is logged and
recorded in the message's state.
"""

from __future__ import annotations

import enum
import hashlib
import json
import logging
import os
import re
import smtplib
import socket
import ssl
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from email import policy
from email.parser import BytesParser
from pathlib import Path
from urllib.parse import urlsplit

from danlu import atomic_file
from runtime.accounting.alert_email import render
from runtime.accounting.alerts import Alert, AlertConfigError, AlertsConfig

__all__ = ["Mailer", "OutboxEntry", "OutboxStatus", "SmtpTarget"]

logger = logging.getLogger(__name__)

USER_ENV = "DANLU_SMTP_USER"
PASSWORD_ENV = "DANLU_SMTP_PASSWORD"
SENDER_ENV = "DANLU_SMTP_FROM"
OUTBOX_MODE = 0o600  # alerts name the team's addresses and spend: owner-only, like the mkstemp default


class OutboxStatus(str, enum.Enum):
    QUEUED = "queued"
    SENT = "sent"
    WRITTEN = "written"
    REJECTED = "rejected"


@dataclass(frozen=True, slots=True)
class OutboxEntry:
    """One message in the outbox and what happened to it."""

    id: str
    status: OutboxStatus
    attempts: int
    last_error: str | None
    updated_at: float
    path: Path


@dataclass(frozen=True, slots=True)
class SmtpTarget:
    """Where to deliver: host, port and whether TLS starts at connect (``smtps://``)."""

    host: str
    port: int
    implicit_tls: bool

    @classmethod
    def from_url(cls, url: str) -> SmtpTarget:
        parts = urlsplit(url)
        implicit = parts.scheme == "smtps"
        return cls(parts.hostname or "", parts.port or (465 if implicit else 25), implicit)

    def __str__(self) -> str:
        return f"{'smtps' if self.implicit_tls else 'smtp'}://{self.host}:{self.port}"


class _LoginFailed(Exception):
    """The server refused our credentials (or offers no way to use them)."""


class Mailer:
    """Sends alerts by email through the run's outbox.

    Args:
        config: the ``[alerts]`` table; without ``smtp_url`` alerts are only written as
            .eml files to ``outbox_dir``.
        outbox_dir: the run's outbox directory (created 0700).
        env: where to read the SMTP credentials and sender (default ``os.environ``).
        timeout_s: socket timeout of each SMTP operation, so delivery never hangs.
        retry_initial_s, retry_max_s: backoff after a failed delivery, doubling from the
            first to the second.
        background: deliver from a daemon thread (else only :meth:`flush` delivers).

    Raises:
        AlertConfigError: only one of the two credential variables is set.
    """

    def __init__(self, config: AlertsConfig, outbox_dir: str | os.PathLike[str], *,
                 env: Mapping[str, str] | None = None, timeout_s: float = 10.0,
                 retry_initial_s: float = 30.0, retry_max_s: float = 900.0, background: bool = True,
                 clock: Callable[[], float] = time.time):
        env = os.environ if env is None else env
        user, password = env.get(USER_ENV) or None, env.get(PASSWORD_ENV) or None
        if (user is None) != (password is None):
            missing, present = (PASSWORD_ENV, USER_ENV) if password is None else (USER_ENV, PASSWORD_ENV)
            raise AlertConfigError(f"{missing} is not set while {present} is; set both for SMTP AUTH, "
                                   "or neither to send without logging in")
        self.config = config
        self.outbox = Path(outbox_dir)
        self.target = SmtpTarget.from_url(config.smtp_url) if config.smtp_url else None
        self.sender = config.sender or env.get(SENDER_ENV) or f"danlu@{socket.gethostname() or 'localhost'}"
        self._credentials = (user, password) if user is not None else None
        self._timeout_s = timeout_s
        self._retry_initial_s = retry_initial_s
        self._retry_max_s = retry_max_s
        self._clock = clock
        self._store_lock = threading.Lock()
        self._deliver_lock = threading.Lock()
        self._wake = threading.Event()
        self._stopping = False
        self._failures = 0
        self._next_attempt_at = 0.0
        self._blocked: str | None = None
        self._warned_plaintext = False
        self._thread: threading.Thread | None = None
        try:
            self.outbox.mkdir(parents=True, exist_ok=True, mode=0o700)
            self._recover()
        except OSError:
            logger.exception("budget alerts: cannot prepare the outbox %s", self.outbox)
        if self.target is not None and background:
            self._thread = threading.Thread(target=self._run, name="danlu-mailer", daemon=True)
            self._thread.start()
            self._wake.set()  # deliver what a previous process left queued

    # -- public API ------------------------------------------------------------------

    def send(self, alert: Alert) -> bool:
        """Store ``alert`` in the outbox and schedule its delivery; never raises.

        Returns True when the alert is in the outbox (now or from an earlier call),
        False when it could not be stored (the failure is logged).
        """
        try:
            entry_id = _entry_id(alert.key)
            eml = self.outbox / f"{entry_id}.eml"
            with self._store_lock:
                if eml.exists():
                    return True
                message = render(alert, sender=self.sender, recipients=self.config.email)
                atomic_file.write_bytes(eml, bytes(message), mode=OUTBOX_MODE)
                status = OutboxStatus.QUEUED if self.target else OutboxStatus.WRITTEN
                self._write_state(entry_id, status, attempts=0, last_error=self._blocked)
        except Exception:  # alerting must never stop training
            logger.exception("budget alerts: could not store alert %s in %s", alert.key, self.outbox)
            return False
        if self.target is None:
            logger.info("budget alert %s written to %s", alert.key, eml)
        else:
            self._wake.set()
        return True

    def flush(self, timeout_s: float | None = None) -> int:
        """Try to deliver every queued message now, ignoring the backoff; never raises.

        Waits at most ``timeout_s`` for a delivery already in progress to finish; each SMTP
        operation of the delivery itself is bounded by the Mailer's ``timeout_s``.  Returns
        how many messages are still queued.
        """
        if self.target is not None:
            self._deliver(force=True, lock_timeout=-1 if timeout_s is None else timeout_s)
        return self.pending()

    def pending(self) -> int:
        """How many messages wait for delivery."""
        return sum(1 for e in self.entries() if e.status is OutboxStatus.QUEUED)

    def entries(self) -> list[OutboxEntry]:
        """Every message in the outbox with its delivery state, oldest first."""
        entries = []
        try:
            for eml in self.outbox.glob("*.eml"):
                entries.append(self._read_state(eml.stem))
        except OSError:
            logger.exception("budget alerts: cannot read the outbox %s", self.outbox)
        return sorted(entries, key=lambda e: (e.updated_at, e.id))

    @property
    def last_error(self) -> str | None:
        """Why SMTP delivery is stopped (a failed login), if it is."""
        return self._blocked

    def close(self, timeout_s: float = 10.0) -> None:
        """Stop the delivery thread.  Queued messages stay in the outbox for a later Mailer."""
        self._stopping = True
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout_s)

    def __enter__(self) -> Mailer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- delivery --------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            wait = None
            if self._failures:
                wait = max(0.0, self._next_attempt_at - self._clock())
            self._wake.wait(wait)
            self._wake.clear()
            if self._stopping:
                return
            self._deliver(force=False, lock_timeout=-1)

    def _deliver(self, *, force: bool, lock_timeout: float) -> None:
        if not self._deliver_lock.acquire(timeout=lock_timeout):
            return
        try:
            if self._blocked is not None or (not force and self._clock() < self._next_attempt_at):
                return
            with self._store_lock:
                queued = [e for e in self.entries() if e.status is OutboxStatus.QUEUED]
            if queued:
                self._deliver_batch(queued)
        except Exception:  # alerting must never stop training
            logger.exception("budget alerts: unexpected failure while delivering the outbox")
        finally:
            self._deliver_lock.release()

    def _deliver_batch(self, queued: list[OutboxEntry]) -> None:
        remaining = list(queued)
        try:
            with self._connect() as smtp:
                while remaining:
                    entry = remaining[0]
                    self._deliver_one(smtp, entry)
                    remaining.pop(0)
        except _LoginFailed as exc:
            self._blocked = str(exc)
            logger.error("budget alerts: %s", exc)
            for entry in remaining:
                self._record_attempt(entry, OutboxStatus.QUEUED, str(exc))
            return
        except (OSError, smtplib.SMTPException) as exc:
            error = _describe(exc, self.target)
            if not remaining:  # everything went out; only the goodbye (QUIT) failed
                logger.info("budget alerts: %s after the last message", error)
                return
            self._failures += 1
            delay = min(self._retry_max_s, self._retry_initial_s * 2 ** (self._failures - 1))
            self._next_attempt_at = self._clock() + delay
            logger.warning("budget alerts: %s; %d message(s) stay queued in %s, retrying in %.0f s",
                           error, len(remaining), self.outbox, delay)
            for entry in remaining:
                self._record_attempt(entry, OutboxStatus.QUEUED, error)
            return
        self._failures = 0
        self._next_attempt_at = 0.0

    def _deliver_one(self, smtp: smtplib.SMTP, entry: OutboxEntry) -> None:
        with open(entry.path, "rb") as f:
            message = BytesParser(policy=policy.default).parse(f)
        try:
            refused = smtp.send_message(message)
        except smtplib.SMTPRecipientsRefused as exc:
            self._reject(entry, f"every recipient was refused: {_refusals(exc.recipients)}")
            return
        except (smtplib.SMTPSenderRefused, smtplib.SMTPDataError) as exc:
            if 500 <= exc.smtp_code < 600:
                self._reject(entry, f"refused by the server: {exc.smtp_code} {_text(exc.smtp_error)}")
                return
            raise
        partial = f"some recipients were refused: {_refusals(refused)}" if refused else None
        if partial:
            logger.warning("budget alerts: message %s: %s", entry.id, partial)
        self._record_attempt(entry, OutboxStatus.SENT, partial)
        logger.info("budget alert %s delivered through %s", entry.id, self.target)

    def _reject(self, entry: OutboxEntry, error: str) -> None:
        logger.error("budget alerts: message %s was rejected for good (%s); fix [alerts].email or the "
                     "sender address; it stays in %s", entry.id, error, entry.path)
        self._record_attempt(entry, OutboxStatus.REJECTED, error)

    def _connect(self) -> smtplib.SMTP:
        target = self.target
        context = ssl.create_default_context()
        if target.implicit_tls:
            smtp: smtplib.SMTP = smtplib.SMTP_SSL(target.host, target.port, timeout=self._timeout_s,
                                                  context=context)
        else:
            smtp = smtplib.SMTP(target.host, target.port, timeout=self._timeout_s)
        try:
            smtp.ehlo()
            if not target.implicit_tls and smtp.has_extn("starttls"):
                smtp.starttls(context=context)
                smtp.ehlo()
            if self._credentials is not None:
                self._login(smtp, tls=isinstance(smtp.sock, ssl.SSLSocket))
        except BaseException:
            smtp.close()
            raise
        return smtp

    def _login(self, smtp: smtplib.SMTP, *, tls: bool) -> None:
        if not tls and not self._warned_plaintext:
            self._warned_plaintext = True
            logger.warning("budget alerts: %s does not offer STARTTLS; the SMTP credentials are sent "
                           "unencrypted. Use smtps:// or a server with STARTTLS", self.target)
        user, password = self._credentials
        try:
            smtp.login(user, password)
        except smtplib.SMTPAuthenticationError as exc:
            raise _LoginFailed(f"SMTP login to {self.target} failed ({exc.smtp_code} {_text(exc.smtp_error)}); "
                               f"check {USER_ENV} and {PASSWORD_ENV}. Alerts stay queued in {self.outbox} "
                               "and are delivered by the next run with working credentials") from None
        except smtplib.SMTPNotSupportedError:
            raise _LoginFailed(f"{self.target} does not support SMTP AUTH; unset {USER_ENV} and "
                               f"{PASSWORD_ENV} or use a server that accepts logins") from None
        except smtplib.SMTPServerDisconnected:
            raise  # a dropped connection is an outage, retried like any other
        except smtplib.SMTPException as exc:
            raise _LoginFailed(f"SMTP login to {self.target} is not possible ({_text(str(exc))}); check "
                               f"the server's AUTH mechanisms and {USER_ENV}/{PASSWORD_ENV}") from None

    # -- outbox files ----------------------------------------------------------------

    def _recover(self) -> None:
        for tmp in self.outbox.glob(".*.tmp"):
            tmp.unlink(missing_ok=True)
        for eml in self.outbox.glob("*.eml"):
            if not (self.outbox / f"{eml.stem}.json").exists():
                # A crash between writing the message and its state: it was never sent.
                status = OutboxStatus.QUEUED if self.target else OutboxStatus.WRITTEN
                self._write_state(eml.stem, status, attempts=0, last_error=None)

    def _read_state(self, entry_id: str) -> OutboxEntry:
        path = self.outbox / f"{entry_id}.eml"
        try:
            state = json.loads((self.outbox / f"{entry_id}.json").read_text())
            return OutboxEntry(entry_id, OutboxStatus(state["status"]), int(state["attempts"]),
                               state.get("last_error"), float(state["updated_at"]), path)
        except (OSError, ValueError, KeyError, TypeError):
            # Missing or unreadable state: the message was stored but never delivered.
            status = OutboxStatus.QUEUED if self.target else OutboxStatus.WRITTEN
            return OutboxEntry(entry_id, status, 0, None, 0.0, path)

    def _record_attempt(self, entry: OutboxEntry, status: OutboxStatus, error: str | None) -> None:
        try:
            self._write_state(entry.id, status, attempts=entry.attempts + 1, last_error=error)
        except OSError:
            logger.exception("budget alerts: cannot update the state of %s in %s", entry.id, self.outbox)

    def _write_state(self, entry_id: str, status: OutboxStatus, *, attempts: int, last_error: str | None) -> None:
        state = {"id": entry_id, "status": status.value, "attempts": attempts, "last_error": last_error,
                 "updated_at": self._clock()}
        atomic_file.write_bytes(self.outbox / f"{entry_id}.json", (json.dumps(state, indent=1) + "\n").encode(),
                                mode=OUTBOX_MODE)


def _entry_id(key: str) -> str:
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", key).lstrip(".")
    if safe != key or not safe:
        safe = f"{safe}-{hashlib.sha256(key.encode()).hexdigest()[:8]}"
    return safe


def _describe(exc: BaseException, target: SmtpTarget | None) -> str:
    if isinstance(exc, smtplib.SMTPResponseException):
        return f"SMTP server {target} answered {exc.smtp_code} {_text(exc.smtp_error)}"
    if isinstance(exc, ssl.SSLError):
        return f"TLS with {target} failed ({exc.__class__.__name__}: {exc})"
    if isinstance(exc, (ConnectionError, socket.timeout, TimeoutError)):
        return f"cannot reach SMTP server {target} ({exc.__class__.__name__}: {exc})"
    return f"SMTP delivery through {target} failed ({exc.__class__.__name__}: {exc})"


def _text(reply: bytes | str) -> str:
    return reply.decode("utf-8", "replace") if isinstance(reply, bytes) else str(reply)


def _refusals(recipients: Mapping[str, tuple[int, bytes]]) -> str:
    return "; ".join(f"{addr}: {code} {_text(msg)}" for addr, (code, msg) in recipients.items())
