"""How the client reaches a Dask scheduler (``rnn-compat report --scheduler``): its address, or the scheduler
file that names it (:func:`scheduler_address`); the wait and the TLS files (:class:`Reach`); and what answers
there, within a bounded wait, before Dask's client is let near it (:func:`check_scheduler`).

Dask's client waits without a limit for the handshake of whatever accepted its connection: at a port that
accepts and never speaks (a stalled service, a firewall's tarpit) or at an HTTP server (the dashboard's port,
8787, given for the scheduler's, 8786) ``rnn-compat report --scheduler`` hung before any unit. A Dask
scheduler greets every client at once, unasked: its first message names its ``compression``, ``python`` and
``pickle-protocol``. :func:`check_scheduler` connects (through TLS for ``tls://``, with the client's own
security), reads that greeting within ``wait`` seconds, and where it does not come, says what did answer (an
HTTP server, a TLS endpoint, something else, nothing), as a :class:`NotAScheduler` naming the address. Only
the address the user named is connected to; nothing is sent to it but, after a silence, one HTTP ``GET /``
that tells an HTTP server or a TLS endpoint from a dead one.
"""

from __future__ import annotations

import re
import socket
import ssl
import time
from dataclasses import dataclass

LOCAL = re.compile(r"local(?::(\d+))?")  # --scheduler local[:N]: a fleet started on this machine
DEFAULT_PORT = 8786
DEFAULT_WAIT = 5.0  # seconds for a connection, and as many for the scheduler's greeting
GREETING = b"pickle-protocol"  # in the handshake a Dask scheduler sends each client as it connects
SCHEMES = ("tcp", "tls")
ADDRESS = re.compile(r"(?:(?P<scheme>[a-z][a-z0-9+.-]*)://)?(?P<host>\[[^\]]+\]|[^:/\[\]]+)(?::(?P<port>\d+))?/?")
TLS_RECORD = (b"\x15\x03", b"\x16\x03")  # a TLS alert or handshake record: the first bytes a TLS endpoint sends
DASHBOARD = f"this looks like the Dask dashboard; the scheduler listens on its own port, {DEFAULT_PORT} by default"
TLS_HINT = ("give tls://HOST:PORT with the certificates the scheduler wants (--tls-ca-file, --tls-cert, --tls-key; "
            "docs/fleet.md)")


class NotAScheduler(ValueError):
    """Nothing at the address greets as a Dask scheduler does: the message names it and what answered."""


def split_address(address: str) -> tuple[str, str, int]:
    """``(scheme, host, port)`` of a scheduler's address: ``tcp://HOST:PORT``, ``tls://HOST:PORT`` or
    ``HOST[:PORT]`` (tcp; port 8786 by default; an IPv6 host in brackets). ValueError for another scheme or a
    malformed address."""
    match = ADDRESS.fullmatch(address.strip())
    if not match:
        raise ValueError(f"--scheduler {address}: not a scheduler's address (tcp://HOST:8786, tls://HOST:8786)")
    scheme = match.group("scheme") or "tcp"
    if scheme not in SCHEMES:
        raise ValueError(f"--scheduler {address}: the fleet reaches a scheduler over tcp:// or tls://, not {scheme}://")
    port = int(match.group("port") or DEFAULT_PORT)
    if not 0 < port < 65536:
        raise ValueError(f"--scheduler {address}: port {port} is not 1..65535")
    return scheme, match.group("host").strip("[]"), port


def check_scheduler(address: str, wait: float = DEFAULT_WAIT, tls: ssl.SSLContext | None = None) -> None:
    """Returns once a Dask scheduler at ``address`` has greeted; else :class:`NotAScheduler` saying what is
    there, after at most ``2 * wait`` seconds (a connection, a greeting) plus 6 (an HTTP request's answer, a TLS
    hello on a second connection). ``tls``: the context a
    ``tls://`` address is reached with (its certificates), else the system's default one."""
    scheme, host, port = split_address(address)
    try:
        raw = socket.create_connection((host, port), timeout=wait)
    except ConnectionRefusedError:
        raise NotAScheduler(f"--scheduler {address}: nothing listens there (connection refused): is the scheduler "
                            f"running, on this host and port ({DEFAULT_PORT} by default)?") from None
    except socket.gaierror as exc:
        raise NotAScheduler(f"--scheduler {address}: no such host {host!r} ({exc.strerror})") from None
    except TimeoutError:
        raise NotAScheduler(f"--scheduler {address}: no connection within {wait:g} s (a host that drops it, or a "
                            f"firewall); --scheduler-wait SECONDS waits longer") from None
    except OSError as exc:
        raise NotAScheduler(f"--scheduler {address}: cannot connect ({exc.strerror or exc})") from None
    with raw:
        conn = raw if scheme == "tcp" else _tls(raw, address, host, wait, tls)
        deadline = time.monotonic() + wait
        try:
            heard = _listen(conn, deadline)
        except ssl.SSLError as exc:  # (TLS 1.3: the server judges the client's certificate after the handshake)
            raise NotAScheduler(f"--scheduler {address}: the scheduler refused this client over TLS "
                                f"({exc.reason or exc}): it wants a client certificate it trusts (--tls-cert, "
                                f"--tls-key)") from None
        if heard is None:  # closed at once
            raise NotAScheduler(f"--scheduler {address}: the connection was closed without a word: not a Dask "
                                f"scheduler (which greets each client as it connects)")
        if GREETING in heard:
            return
        if heard:
            raise NotAScheduler(f"--scheduler {address}: {_what(heard)}")
        try:  # silent so far: ask as a browser would, to tell an HTTP server from a dead port
            conn.sendall(b"GET / HTTP/1.0\r\nHost: " + host.encode(errors="replace") + b"\r\n\r\n")
            reply = _listen(conn, time.monotonic() + min(wait, 2.0))
        except OSError:
            reply = b""
    if reply:
        raise NotAScheduler(f"--scheduler {address}: {_what(reply)}")
    if scheme == "tcp" and _speaks_tls(host, port, min(wait, 2.0)):
        raise NotAScheduler(f"--scheduler {address}: a TLS endpoint answered, not a plain Dask scheduler: {TLS_HINT}")
    raise NotAScheduler(f"--scheduler {address}: it accepted the connection and said nothing for {wait:g} s: not a "
                        f"Dask scheduler, which greets each client at once (--scheduler-wait SECONDS waits longer "
                        f"for a busy one)")


def _speaks_tls(host: str, port: int, wait: float) -> bool:
    """Whether a new connection to ``host:port`` gets through a TLS handshake's first steps (the server's hello,
    whatever its certificate): a TLS scheduler, silent to a plain client, is one."""
    probe = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    probe.check_hostname, probe.verify_mode = False, ssl.CERT_NONE
    try:
        with socket.create_connection((host, port), timeout=wait) as raw, probe.wrap_socket(raw):
            return True
    except ssl.SSLError as exc:  # a TLS alert (a client certificate required, ...) is TLS too
        return exc.reason not in ("WRONG_VERSION_NUMBER", None)
    except OSError:
        return False


def _tls(raw: socket.socket, address: str, host: str, wait: float, tls: ssl.SSLContext | None) -> ssl.SSLSocket:
    context = tls or ssl.create_default_context()
    raw.settimeout(wait)
    try:
        return context.wrap_socket(raw, server_hostname=host if context.check_hostname else None)
    except TimeoutError:
        raise NotAScheduler(f"--scheduler {address}: no TLS handshake within {wait:g} s: not a TLS endpoint") from None
    except ssl.SSLError as exc:
        if exc.reason == "WRONG_VERSION_NUMBER":  # plain bytes where a TLS record should be
            raise NotAScheduler(f"--scheduler {address}: it does not speak TLS (a scheduler without TLS is reached "
                                f"at tcp://)") from None
        raise NotAScheduler(f"--scheduler {address}: the TLS handshake failed ({exc.reason or exc}): the scheduler's "
                            f"certificate must be one --tls-ca-file trusts, and --tls-cert and --tls-key the client's "
                            f"that it accepts") from None
    except OSError as exc:
        raise NotAScheduler(f"--scheduler {address}: the TLS handshake failed ({exc.strerror or exc})") from None


def _listen(conn: socket.socket, deadline: float, limit: int = 1 << 16) -> bytes | None:
    """What ``conn`` sends before ``deadline`` or the greeting (at most ``limit`` bytes); None where it closed
    before sending anything."""
    heard = b""
    while GREETING not in heard and len(heard) < limit:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        conn.settimeout(left)
        try:
            chunk = conn.recv(limit - len(heard))
        except (TimeoutError, ssl.SSLWantReadError):
            break
        except ssl.SSLError:
            raise
        except OSError:  # reset
            return heard or None
        if not chunk:
            return heard or None
        heard += chunk
    return heard


def _what(heard: bytes) -> str:
    """Who the first bytes ``heard`` sound like, and what to do about it."""
    if heard.startswith(b"HTTP/"):
        status = heard.split(b"\r\n", 1)[0].decode(errors="replace")[:60]
        return f"an HTTP server answered ({status}), not a Dask scheduler: {DASHBOARD}"
    if heard.startswith(TLS_RECORD):
        return f"a TLS endpoint answered, not a plain Dask scheduler: {TLS_HINT}"
    if heard.startswith(b"SSH-"):
        return "an SSH server answered, not a Dask scheduler"
    return f"it answered {heard[:24]!r}, not a Dask scheduler's greeting"


SCHEDULER_FILE_LIMIT = 1 << 20  # bytes: a scheduler file is a few hundred


def scheduler_address(where: str) -> str:
    """The address ``--scheduler`` names: itself, or the ``address`` in the scheduler file (``.json``) that
    ``dask scheduler --scheduler-file`` wrote. ValueError naming the file where it holds no address."""
    if not where.endswith(".json"):
        return where
    from reference.formats.files import load_json

    with open(where, "rb") as fh:
        text = fh.read(SCHEDULER_FILE_LIMIT + 1)
    if len(text) > SCHEDULER_FILE_LIMIT:
        raise ValueError(f"--scheduler {where}: over {SCHEDULER_FILE_LIMIT} bytes, not a scheduler file")
    document = load_json(text, f"--scheduler {where}")
    address = document.get("address") if isinstance(document, dict) else None
    if not isinstance(address, str) or not address:
        raise ValueError(f"--scheduler {where}: a scheduler file holds the scheduler's address (\"address\": "
                         f"\"tcp://HOST:8786\"); this one does not")
    split_address(address)
    return address


@dataclass(frozen=True)
class Reach:
    """How the client reaches a scheduler: the seconds it waits for one to answer (``--scheduler-wait``), and
    its TLS files (``--tls-ca-file``, ``--tls-cert``, ``--tls-key``: a ``tls://`` scheduler's CA, and the
    client's certificate and key, as ``dask scheduler`` and ``dask worker`` take them)."""

    wait: float = DEFAULT_WAIT
    ca_file: str | None = None
    cert: str | None = None
    key: str | None = None

    def check(self, scheduler: str) -> None:
        """ValueError naming the option where these do not fit ``scheduler`` or a file is not there."""
        if not (self.wait > 0 and self.wait < float("inf")):
            raise ValueError(f"--scheduler-wait must be a finite number of seconds > 0, got {self.wait}")
        given = [(o, f) for o, f in (("--tls-ca-file", self.ca_file), ("--tls-cert", self.cert),
                                     ("--tls-key", self.key)) if f is not None]
        if not given:
            return
        if LOCAL.fullmatch(scheduler.strip()):
            raise ValueError(f"{given[0][0]}: a local fleet listens on 127.0.0.1 alone, without TLS; the TLS "
                             f"options reach a tls:// scheduler")
        if not scheduler.endswith(".json") and split_address(scheduler)[0] != "tls":
            raise ValueError(f"{given[0][0]}: the TLS options reach a tls:// scheduler; --scheduler {scheduler} is "
                             f"not one")
        if self.ca_file is None or self.cert is None:
            raise ValueError("a TLS scheduler is reached with --tls-ca-file (the CA its certificate is signed by) and "
                             "--tls-cert (the client's certificate; --tls-key its key, unless the file holds it)")
        for option, file in given:
            with open(file, "rb"):  # a missing or unreadable file: the OSError that names it
                pass

    def security(self):
        """Dask's ``Security`` for the client: from these files, else from Dask's own configuration."""
        from distributed import Security

        if self.ca_file is None:
            return Security()
        return Security(tls_ca_file=self.ca_file, tls_client_cert=self.cert, tls_client_key=self.key,
                        require_encryption=True)


def tls_context(security, address: str) -> ssl.SSLContext:
    """The SSL context the client reaches the tls:// ``address`` with: ``security``'s (Dask's ``Security``)."""
    try:
        context = security.get_connection_args("client")["ssl_context"]
    except (ssl.SSLError, OSError) as exc:
        raise ValueError(f"--scheduler {address}: the TLS files do not load ({exc}): --tls-cert must be a PEM "
                         f"certificate, --tls-key its key, --tls-ca-file a PEM CA") from None
    if context is None:
        raise ValueError(f"--scheduler {address}: a TLS scheduler is reached with --tls-ca-file and --tls-cert "
                         f"(--tls-key), or with Dask's own TLS configuration (distributed.comm.tls); none is given")
    return context


def plain_beyond_this_machine(address: str) -> bool:
    """Whether ``address`` is a tcp:// (not TLS) scheduler on another machine."""
    import ipaddress

    scheme, host, _ = split_address(address)
    if scheme != "tcp" or host == "localhost":
        return False
    try:
        return not ipaddress.ip_address(host).is_loopback
    except ValueError:  # a host name
        return True
