"""How kvgate and loadgen reach a server: on loopback only, at the address that was checked, with
nothing else in the way. One module both packages import.

- The loopback rule: every address the URL's host resolves to is loopback (127.0.0.0/8, ::1).
- Resolved once (`pin`): the addresses checked are the addresses connected to, so a name that
  resolves differently the second time (DNS rebinding) cannot take the load or the API key
  elsewhere. aiohttp connects through `PinnedResolver`, which answers only with them.
- No ambient proxy (`trust_env=False`: http_proxy and friends are not read) and no redirect
  followed (`allow_redirects=False` on every request): the bearer token goes to the server asked,
  never to a proxy or to wherever a 30x points.
- URL user and password are never shown (`redact_url`).
"""

from __future__ import annotations

import http.client
import ipaddress
import socket
import ssl
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult

from loadgen.redaction import redact_url

NO_REDIRECTS = {"allow_redirects": False}


class NotLoopback(ValueError):
    """The URL does not lead to this machine (or cannot be read); the message names --url."""


@dataclass(frozen=True)
class Pin:
    """A server's host and the loopback addresses it resolved to, once."""

    host: str
    port: int
    addresses: tuple[str, ...]


def _is_loopback(addr: str) -> bool:
    return ipaddress.ip_address(addr.split("%")[0]).is_loopback


def pin(url: str, what: str = "--url") -> Pin:
    """Resolve the URL's host once; every address must be loopback."""
    shown = redact_url(url)
    try:
        u = urlsplit(url)
        port = u.port  # raises on a port out of range or not a number
    except ValueError as e:
        raise NotLoopback(f"{what}: {shown!r} is not a valid URL ({e}); write e.g. http://127.0.0.1:8000") from None
    if u.scheme not in ("http", "https") or not u.hostname:
        raise NotLoopback(f"{what}: {shown!r} is not an http(s) URL; write e.g. http://127.0.0.1:8000")
    port = port or (443 if u.scheme == "https" else 80)
    try:
        infos = socket.getaddrinfo(u.hostname, port, proto=socket.IPPROTO_TCP)
    except (socket.gaierror, UnicodeError) as e:
        raise NotLoopback(f"{what}: cannot resolve {u.hostname}: {e}") from None
    addrs = tuple(dict.fromkeys(str(info[4][0]) for info in infos))
    if not addrs or not all(_is_loopback(a) for a in addrs):
        raise NotLoopback(
            f"{what}: {u.hostname} is not a loopback address; load tests only target this machine (127.0.0.0/8, ::1)"
        )
    return Pin(host=u.hostname, port=port, addresses=addrs)


def require_loopback(url: str) -> None:
    pin(url)


def pinned_host(host: str, what: str = "vllm.host") -> str:
    """A host name for a server to bind, as the one loopback address it resolves to (resolved
    once: the server binds what was checked)."""
    p = pin(f"http://{'[' + host + ']' if ':' in host and not host.startswith('[') else host}:80", what)
    return p.addresses[0]


def pinned_url(url: str, p: Pin) -> str:
    """The URL with its host replaced by the checked address, for another process to use without
    resolving the name again (http only: https keeps the name its certificate is for)."""
    u = urlsplit(url)
    if u.scheme != "http" or u.hostname in p.addresses:
        return url
    a = p.addresses[0]
    host = f"[{a}]" if ":" in a else a
    netloc = u.netloc.rsplit("@", 1)
    hostport = f"{host}:{u.port}" if u.port else host
    return urlunsplit(
        (u.scheme, f"{netloc[0]}@{hostport}" if len(netloc) == 2 else hostport, u.path, u.query, u.fragment)
    )


class PinnedResolver(AbstractResolver):
    """aiohttp's resolver for one pinned host: its checked addresses, nothing else."""

    def __init__(self, p: Pin):
        self.p = p

    async def resolve(self, host: str, port: int = 0, family: int = socket.AF_UNSPEC) -> list[ResolveResult]:
        if host != self.p.host and host not in self.p.addresses:
            raise OSError(f"{host} is not the server kvgate checked ({self.p.host})")
        out: list[ResolveResult] = []
        for a in self.p.addresses:
            fam = socket.AF_INET6 if ":" in a else socket.AF_INET
            if family in (socket.AF_UNSPEC, fam):
                out.append(
                    {
                        "hostname": host,
                        "host": a,
                        "port": port,
                        "family": fam,
                        "proto": 0,
                        "flags": socket.AI_NUMERICHOST,
                    }
                )
        return out

    async def close(self) -> None:
        pass


def connector(p: Pin | None = None, **kw) -> aiohttp.TCPConnector:
    """A connection pool that connects only to the pinned addresses (any address when None: the
    caller passes a literal it already checked)."""
    return aiohttp.TCPConnector(resolver=PinnedResolver(p) if p else None, **kw)


def session(p: Pin | None = None, **kw) -> aiohttp.ClientSession:
    """A client session with no ambient proxy (trust_env off) over a pinned connection pool."""
    conn = kw.pop("connector", None) or connector(p)
    return aiohttp.ClientSession(connector=conn, trust_env=False, **kw)


async def get(
    s: aiohttp.ClientSession, url: str, timeout: float, headers: dict | None = None, max_bytes: int | None = None
) -> tuple[int | None, str]:
    """GET through a session of this module: (status, body) or (None, what went wrong); never raises
    but on cancellation. A redirect is an answer like any other (never followed)."""
    try:
        async with s.get(
            url, headers=headers or {}, timeout=aiohttp.ClientTimeout(total=timeout), allow_redirects=False
        ) as r:
            body = await (r.content.read(max_bytes + 1) if max_bytes else r.read())
            if max_bytes and len(body) > max_bytes:
                return None, f"answer larger than {max_bytes >> 20} MiB"
            return r.status, body.decode(errors="replace")
    except (aiohttp.ClientError, TimeoutError, OSError) as e:
        return None, f"{type(e).__name__}: {e}"


async def post(s: aiohttp.ClientSession, url: str, timeout: float) -> tuple[int | None, str]:
    """POST with no body (the dev-mode routes: /pause, /resume, /reset_prefix_cache), as get()."""
    try:
        async with s.post(url, timeout=aiohttp.ClientTimeout(total=timeout), allow_redirects=False) as r:
            return r.status, (await r.text())[:200]
    except (aiohttp.ClientError, TimeoutError, OSError) as e:
        return None, f"{type(e).__name__}: {e}"


class _PinnedHTTP(http.client.HTTPConnection):
    """http.client to the checked address (it reads no proxy settings and follows no redirect)."""

    def __init__(self, p: Pin, timeout: float):
        super().__init__(p.host, p.port, timeout=timeout)
        self.pin = p

    def connect(self) -> None:
        self.sock = socket.create_connection((self.pin.addresses[0], self.pin.port), self.timeout)


class _PinnedHTTPS(_PinnedHTTP):
    def connect(self) -> None:
        super().connect()
        self.sock = ssl.create_default_context().wrap_socket(self.sock, server_hostname=self.pin.host)


def get_blocking(
    url: str, timeout: float, headers: dict | None = None, max_bytes: int | None = None, p: Pin | None = None
) -> tuple[int | None, str]:
    """get() without an event loop, for the launcher's polling and the start-up facts: a signal that
    lands in it (Ctrl-C, SIGTERM) leaves no half-built loop behind. Same rules: the pinned address
    (resolved now when no pin is given), no proxy, no redirect, a bounded body."""
    try:
        p = p or pin(url)
        u = urlsplit(url)
        conn = (_PinnedHTTPS if u.scheme == "https" else _PinnedHTTP)(p, timeout)
        try:
            conn.request("GET", (u.path or "/") + (f"?{u.query}" if u.query else ""), headers=headers or {})
            r = conn.getresponse()
            body = r.read(max_bytes + 1) if max_bytes else r.read()
        finally:
            conn.close()
    except (OSError, http.client.HTTPException, NotLoopback) as e:
        return None, f"{type(e).__name__}: {e}"
    if max_bytes and len(body) > max_bytes:
        return None, f"answer larger than {max_bytes >> 20} MiB"
    return r.status, body.decode(errors="replace")
