"""Real SMTP servers (aiosmtpd) on 127.0.0.1 ephemeral ports, and a self-signed TLS cert."""

from __future__ import annotations

import datetime as dt
import ipaddress
import logging
import ssl
import threading
import time
from dataclasses import dataclass, field
from email import policy
from email.message import EmailMessage
from email.parser import BytesParser
from pathlib import Path

import pytest
from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult, LoginPassword

USER = "alerts-bot"
PASSWORD = "s3cret-Pa55word-value"


@dataclass
class Received:
    """One message the test server accepted, with how it arrived."""

    message: EmailMessage
    mail_from: str
    rcpt_tos: list[str]
    tls: bool
    authenticated: bool


class Inbox:
    """aiosmtpd handler that keeps every accepted message; ``reply`` can refuse them."""

    def __init__(self, reply: str = "250 Message accepted for delivery"):
        self.reply = reply
        self.received: list[Received] = []
        self._cond = threading.Condition()

    async def handle_DATA(self, server, session, envelope):
        if not self.reply.startswith("250"):
            return self.reply
        message = BytesParser(policy=policy.default).parsebytes(envelope.original_content)
        with self._cond:
            self.received.append(Received(message, envelope.mail_from, list(envelope.rcpt_tos),
                                          tls=session.ssl is not None, authenticated=session.authenticated))
            self._cond.notify_all()
        return "250 Message accepted for delivery"

    def wait_for(self, count: int, timeout: float = 15.0) -> list[Received]:
        deadline = time.monotonic() + timeout
        with self._cond:
            while len(self.received) < count:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"expected {count} message(s), the server got {len(self.received)}")
                self._cond.wait(left)
            return list(self.received)

    def keys(self) -> list[str]:
        with self._cond:
            return [r.message["X-Danlu-Alert"] for r in self.received]


class _EphemeralController(Controller):
    """A Controller that can bind port 0 and learns the port the kernel chose."""

    def _trigger_server(self):
        self.port = self.server.sockets[0].getsockname()[1]
        super()._trigger_server()


def _authenticator(server, session, envelope, mechanism, auth_data):
    ok = (isinstance(auth_data, LoginPassword) and auth_data.login == USER.encode()
          and auth_data.password == PASSWORD.encode())
    # handled=False makes aiosmtpd answer 535 itself on a failure.
    return AuthResult(success=ok, handled=False)


@dataclass
class SmtpServers:
    """Starts aiosmtpd servers for one test and stops them all at the end."""

    started: list[Controller] = field(default_factory=list)

    def start(self, inbox: Inbox | None = None, *, port: int = 0, auth: bool = False,
              starttls: ssl.SSLContext | None = None, implicit_tls: ssl.SSLContext | None = None):
        inbox = inbox or Inbox()
        kwargs: dict = {}
        if auth:
            kwargs.update(authenticator=_authenticator, auth_require_tls=starttls is not None)
        if starttls is not None:
            kwargs.update(tls_context=starttls, require_starttls=True)
        controller = _EphemeralController(inbox, hostname="127.0.0.1", port=port, ssl_context=implicit_tls,
                                          **kwargs)
        controller.start()
        self.started.append(controller)
        return controller, inbox

    def stop(self, controller: Controller) -> None:
        controller.stop()
        self.started.remove(controller)


@pytest.fixture
def smtp_servers():
    servers = SmtpServers()
    yield servers
    for controller in list(servers.started):
        controller.stop()


@pytest.fixture(scope="session")
def tls_cert(tmp_path_factory) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1: (cert.pem, key.pem)."""
    x509 = pytest.importorskip("cryptography.x509")
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "danlu test smtp")])
    now = dt.datetime.now(dt.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                           critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    folder = tmp_path_factory.mktemp("tls")
    cert_path, key_path = folder / "cert.pem", folder / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_path, key_path


@pytest.fixture
def server_tls(tls_cert) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(*tls_cert)
    return context


def free_port(servers: SmtpServers) -> int:
    """A port nothing listens on: bind a server to an ephemeral port, then stop it."""
    controller, _ = servers.start()
    port = controller.port
    servers.stop(controller)
    return port


@pytest.fixture(autouse=True)
def _quiet_smtp_server_log():
    """aiosmtpd logs every SMTP line at DEBUG/INFO; keep the tests' captured logs about danlu."""
    server_log = logging.getLogger("mail.log")
    old = server_log.level
    server_log.setLevel(logging.WARNING)
    yield
    server_log.setLevel(old)
