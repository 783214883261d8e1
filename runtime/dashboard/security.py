"""Who may talk to the dashboard: a token off loopback, the right Host on it, strict headers always.

* Bound to a loopback address, only requests that name a loopback host (``Host:
  127.0.0.1:N``/``localhost``) are served: a web page cannot reach the dashboard through a
  DNS name rebound to 127.0.0.1.
* Bound to any other address, every request needs the token: ``Authorization: Bearer T``,
  the ``danlu_dashboard`` cookie, or ``?token=T`` once (answered with a redirect that sets the
  cookie and drops the token from the address bar). A token given on loopback is enforced too.
* Every answer carries a Content-Security-Policy that allows this server's own scripts,
  styles and images only: no inline script, nothing from a CDN.
"""

from __future__ import annotations

import ipaddress
import secrets
from http.cookies import SimpleCookie
from urllib.parse import parse_qsl, urlencode

__all__ = ["COOKIE", "SecurityMiddleware", "is_loopback", "new_token"]

COOKIE = "danlu_dashboard"
CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
       "object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'")
_HEADERS = [
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),
]
_LOOPBACK_NAMES = {"localhost", "127.0.0.1", "::1"}


def is_loopback(host: str) -> bool:
    """True for 127.0.0.0/8, ::1 and ``localhost``."""
    if host.strip("[]") in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _same(given: str, token: str) -> bool:
    # Bytes: compare_digest refuses non-ASCII str, and a request may send anything.
    return secrets.compare_digest(given.encode("utf-8", "replace"), token.encode("utf-8"))


def new_token() -> str:
    return secrets.token_urlsafe(24)


def _host_name(value: str) -> str:
    value = value.strip()
    if value.startswith("["):
        return value[1:value.find("]")] if "]" in value else value
    return value.rsplit(":", 1)[0] if value.count(":") == 1 else value


class SecurityMiddleware:
    """ASGI middleware: see the module docstring. ``token`` None means none is required."""

    def __init__(self, app, *, token: str | None, loopback: bool):
        self.app = app
        self.token = token
        self.loopback = loopback

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        if self.loopback and not is_loopback(_host_name(headers.get("host", ""))):
            return await _plain(send, 421, "This dashboard answers to 127.0.0.1/localhost only.")
        if self.token is not None:
            query = dict(parse_qsl(scope.get("query_string", b"").decode("latin-1")))
            if _same(query.get("token", ""), self.token) and scope["method"] == "GET":
                rest = urlencode([(k, v) for k, v in query.items() if k != "token"])
                location = scope["path"] + (f"?{rest}" if rest else "")
                cookie = f"{COOKIE}={self.token}; HttpOnly; SameSite=Strict; Path=/"
                return await _plain(send, 303, "token accepted", [(b"location", location.encode()),
                                                                  (b"set-cookie", cookie.encode())])
            if not self._authorized(headers):
                return await _plain(send, 401, "A token is required: open the address `planner dashboard` printed "
                                               "(it ends in ?token=...), or send Authorization: Bearer TOKEN.",
                                    [(b"www-authenticate", b"Bearer")])

        async def send_with_headers(message):
            if message["type"] == "http.response.start":
                message["headers"] = list(message.get("headers", [])) + _HEADERS
            await send(message)

        return await self.app(scope, receive, send_with_headers)

    def _authorized(self, headers: dict[str, str]) -> bool:
        auth = headers.get("authorization", "")
        if auth.lower().startswith("bearer ") and _same(auth[7:].strip(), self.token):
            return True
        cookie = SimpleCookie()
        try:
            cookie.load(headers.get("cookie", ""))
        except Exception:  # noqa: BLE001 -- a malformed cookie header is simply no token
            return False
        morsel = cookie.get(COOKIE)
        return morsel is not None and _same(morsel.value, self.token)


async def _plain(send, status: int, text: str, extra: list[tuple[bytes, bytes]] | None = None) -> None:
    body = (text + "\n").encode()
    headers = [(b"content-type", b"text/plain; charset=utf-8"), (b"content-length", str(len(body)).encode()),
               *_HEADERS, *(extra or [])]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
