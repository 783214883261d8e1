"""Mailer against real aiosmtpd servers on 127.0.0.1: delivery, outages, auth and TLS."""

from __future__ import annotations

import json
import logging
import stat
import time
from dataclasses import replace

import pytest

from runtime.accounting.alerts import AlertConfigError, AlertsConfig
from runtime.accounting.mailer import Mailer, OutboxStatus

from .conftest import PASSWORD, USER, Inbox, free_port
from .helpers import budget_stop_alert

RECIPIENTS = ("ml-team@example.com",)


def config(port: int | None, scheme: str = "smtp") -> AlertsConfig:
    url = None if port is None else f"{scheme}://127.0.0.1:{port}"
    return AlertsConfig(email=RECIPIENTS, smtp_url=url, sender="danlu@example.com")


def alerts(tmp_path, *keys):
    base = budget_stop_alert(tmp_path / "run")
    return [replace(base, key=k, covers=(k,)) for k in keys]


def wait_until(predicate, timeout=15.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(0.05)


def test_without_smtp_alerts_are_written_as_eml_files(tmp_path):
    outbox = tmp_path / "outbox"
    mailer = Mailer(config(None), outbox, env={})
    (alert,) = alerts(tmp_path, "actual-0.5")
    assert mailer.send(alert) and mailer.send(alert)
    (entry,) = mailer.entries()
    assert entry.status is OutboxStatus.WRITTEN and entry.path == outbox / "actual-0.5.eml"
    assert stat.S_IMODE(entry.path.stat().st_mode) == 0o600
    assert stat.S_IMODE(outbox.stat().st_mode) == 0o700
    assert sorted(p.name for p in outbox.iterdir()) == ["actual-0.5.eml", "actual-0.5.json"]
    assert b"X-Danlu-Alert: actual-0.5" in entry.path.read_bytes()
    assert mailer.flush() == 0


def test_each_alert_is_delivered_once_with_all_parts(tmp_path, smtp_servers):
    controller, inbox = smtp_servers.start()
    with Mailer(config(controller.port), tmp_path / "outbox", env={}, retry_initial_s=0.1) as mailer:
        batch = alerts(tmp_path, "actual-0.5", "forecast-0.8")
        for alert in batch + batch:
            assert mailer.send(alert)
        received = inbox.wait_for(2)
        assert mailer.flush(timeout_s=10) == 0
    time.sleep(0.2)
    assert sorted(inbox.keys()) == ["actual-0.5", "forecast-0.8"]
    got = received[0]
    assert got.mail_from == "danlu@example.com" and got.rcpt_tos == list(RECIPIENTS)
    types = [p.get_content_type() for p in got.message.walk()]
    assert types == ["multipart/alternative", "text/plain", "multipart/related", "text/html", "image/png"]
    assert "$453.39" in got.message.get_body(("plain",)).get_content()
    assert "$781.09" in got.message.get_body(("html",)).get_content()
    assert [e.status for e in mailer.entries()] == [OutboxStatus.SENT, OutboxStatus.SENT]


def test_smtp_down_then_up_delivers_the_queue_without_duplicates(tmp_path, smtp_servers, caplog):
    port = free_port(smtp_servers)
    outbox = tmp_path / "outbox"
    with caplog.at_level(logging.WARNING, logger="runtime.accounting.mailer"):
        mailer = Mailer(config(port), outbox, env={}, retry_initial_s=0.3, retry_max_s=0.6, timeout_s=2)
        for alert in alerts(tmp_path, "actual-0.5", "replan-1"):
            assert mailer.send(alert)  # returns at once: SMTP is down
        wait_until(lambda: all(e.attempts >= 1 for e in mailer.entries()))
    assert all(e.status is OutboxStatus.QUEUED for e in mailer.entries())
    state = json.loads((outbox / "actual-0.5.json").read_text())
    assert state["status"] == "queued" and "cannot reach SMTP server" in state["last_error"]
    assert "stay queued" in caplog.text

    _, inbox = smtp_servers.start(port=port)  # the server comes back; the retry delivers
    inbox.wait_for(2)
    wait_until(lambda: mailer.pending() == 0)
    assert mailer.flush(timeout_s=5) == 0
    mailer.close()
    # A resumed controller's Mailer finds nothing left to send.
    with Mailer(config(port), outbox, env={}) as again:
        assert again.flush(timeout_s=5) == 0
        assert again.send(alerts(tmp_path, "actual-0.5")[0])
    time.sleep(0.3)
    assert sorted(inbox.keys()) == ["actual-0.5", "replan-1"]


def test_queued_alerts_survive_a_restart(tmp_path, smtp_servers):
    port = free_port(smtp_servers)
    outbox = tmp_path / "outbox"
    first = Mailer(config(port), outbox, env={}, background=False, timeout_s=2)
    first.send(alerts(tmp_path, "deadline-at-risk")[0])
    assert first.flush() == 1
    first.close()
    _, inbox = smtp_servers.start(port=port)
    with Mailer(config(port), outbox, env={}):  # delivers what the previous process left
        (got,) = inbox.wait_for(1)
    assert got.message["X-Danlu-Alert"] == "deadline-at-risk"


def test_wrong_password_is_one_clear_error_and_the_caller_goes_on(tmp_path, smtp_servers, caplog):
    controller, inbox = smtp_servers.start(auth=True)
    wrong = {"DANLU_SMTP_USER": USER, "DANLU_SMTP_PASSWORD": "not-the-password"}
    outbox = tmp_path / "outbox"
    with caplog.at_level(logging.DEBUG):
        mailer = Mailer(config(controller.port), outbox, env=wrong, retry_initial_s=0.05)
        first, second = alerts(tmp_path, "actual-0.5", "actual-0.8")
        assert mailer.send(first)
        wait_until(lambda: mailer.last_error is not None)
        assert mailer.send(second)  # still accepted, queued behind the error
        assert mailer.flush(timeout_s=5) == 2
        time.sleep(0.3)
        mailer.close()
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1, [r.getMessage() for r in errors]
    message = errors[0].getMessage()
    assert "SMTP login to smtp://127.0.0.1" in message and "535" in message
    assert "check DANLU_SMTP_USER and DANLU_SMTP_PASSWORD" in message
    assert inbox.received == []
    states = {p.stem: json.loads(p.read_text()) for p in outbox.glob("*.json")}
    assert {s["status"] for s in states.values()} == {"queued"}
    assert all("SMTP login" in s["last_error"] for s in states.values())
    everything = caplog.text + "".join(p.read_text(errors="replace") for p in outbox.iterdir())
    assert "not-the-password" not in everything and PASSWORD not in everything

    # The next run, with the right password, delivers both.
    right = {"DANLU_SMTP_USER": USER, "DANLU_SMTP_PASSWORD": PASSWORD}
    with Mailer(config(controller.port), outbox, env=right) as fixed:
        received = inbox.wait_for(2)
        wait_until(lambda: fixed.pending() == 0)
    assert all(r.authenticated for r in received)


def test_login_over_plain_smtp_warns_once_and_never_logs_the_password(tmp_path, smtp_servers, caplog):
    controller, inbox = smtp_servers.start(auth=True)
    env = {"DANLU_SMTP_USER": USER, "DANLU_SMTP_PASSWORD": PASSWORD}
    with caplog.at_level(logging.DEBUG):
        with Mailer(config(controller.port), tmp_path / "outbox", env=env) as mailer:
            for alert in alerts(tmp_path, "a", "b"):
                mailer.send(alert)
                inbox.wait_for(len(inbox.received) + 1)
    assert all(r.authenticated and not r.tls for r in inbox.received)
    assert caplog.text.count("credentials are sent unencrypted") == 1
    assert PASSWORD not in caplog.text


def test_starttls_is_used_when_offered(tmp_path, smtp_servers, server_tls, tls_cert, monkeypatch):
    monkeypatch.setenv("SSL_CERT_FILE", str(tls_cert[0]))  # trust the test's self-signed cert
    controller, inbox = smtp_servers.start(auth=True, starttls=server_tls)
    env = {"DANLU_SMTP_USER": USER, "DANLU_SMTP_PASSWORD": PASSWORD}
    with Mailer(config(controller.port), tmp_path / "outbox", env=env) as mailer:
        mailer.send(alerts(tmp_path, "actual-1")[0])
        (got,) = inbox.wait_for(1)
    assert got.tls and got.authenticated


def test_smtps_uses_tls_from_the_start(tmp_path, smtp_servers, server_tls, tls_cert, monkeypatch):
    monkeypatch.setenv("SSL_CERT_FILE", str(tls_cert[0]))
    controller, inbox = smtp_servers.start(implicit_tls=server_tls)
    with Mailer(config(controller.port, "smtps"), tmp_path / "outbox", env={}) as mailer:
        mailer.send(alerts(tmp_path, "run-ended")[0])
        (got,) = inbox.wait_for(1)
    assert got.message["X-Danlu-Alert"] == "run-ended"


def test_an_untrusted_certificate_keeps_the_alert_queued(tmp_path, smtp_servers, server_tls, tls_cert,
                                                         monkeypatch, caplog):
    monkeypatch.setenv("SSL_CERT_FILE", str(tmp_path / "no-such-ca.pem"))
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    controller, inbox = smtp_servers.start(starttls=server_tls)
    mailer = Mailer(config(controller.port), tmp_path / "outbox", env={}, background=False)
    mailer.send(alerts(tmp_path, "actual-0.5")[0])
    with caplog.at_level(logging.WARNING, logger="runtime.accounting.mailer"):
        assert mailer.flush(timeout_s=5) == 1
    assert "TLS with smtp://127.0.0.1" in caplog.text and "CERTIFICATE_VERIFY_FAILED" in caplog.text
    assert inbox.received == []


def test_a_permanent_refusal_is_recorded_and_not_retried(tmp_path, smtp_servers, caplog):
    controller, _ = smtp_servers.start(Inbox(reply="554 5.7.1 Message rejected as spam"))
    mailer = Mailer(config(controller.port), tmp_path / "outbox", env={}, background=False)
    mailer.send(alerts(tmp_path, "actual-0.5")[0])
    with caplog.at_level(logging.ERROR, logger="runtime.accounting.mailer"):
        assert mailer.flush(timeout_s=5) == 0
        assert mailer.flush(timeout_s=5) == 0
    (entry,) = mailer.entries()
    assert entry.status is OutboxStatus.REJECTED and entry.attempts == 1
    assert "554 5.7.1 Message rejected as spam" in entry.last_error
    assert caplog.text.count("rejected for good") == 1


def test_send_never_raises_when_the_outbox_cannot_be_written(tmp_path, caplog):
    blocker = tmp_path / "outbox"
    blocker.write_text("a file where the outbox directory should be")
    with caplog.at_level(logging.ERROR, logger="runtime.accounting.mailer"):
        mailer = Mailer(config(None), blocker, env={})
        assert mailer.send(alerts(tmp_path, "actual-0.5")[0]) is False
        assert mailer.entries() == []
    assert "could not store alert actual-0.5" in caplog.text


def test_half_written_outbox_entries_are_recovered(tmp_path, smtp_servers):
    outbox = tmp_path / "outbox"
    with Mailer(config(None), outbox, env={}) as offline:
        offline.send(alerts(tmp_path, "forecast-1")[0])
    (outbox / "forecast-1.json").unlink()  # crash between the message and its state
    (outbox / ".forecast-1.json.abc.tmp").write_text("{")  # and a torn temp file
    controller, inbox = smtp_servers.start()
    with Mailer(config(controller.port), outbox, env={}):
        inbox.wait_for(1)
    assert not list(outbox.glob(".*.tmp"))


def test_only_one_credential_variable_is_a_config_error(tmp_path):
    with pytest.raises(AlertConfigError, match="DANLU_SMTP_PASSWORD is not set while DANLU_SMTP_USER is"):
        Mailer(config(2525), tmp_path / "outbox", env={"DANLU_SMTP_USER": "bob"})
