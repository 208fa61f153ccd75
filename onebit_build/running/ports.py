"""Addresses and ports for llama-server: a host and port are checked when they are parsed,
and probed the way servers bind them (``SO_REUSEADDR``: a port whose only users are
connections in TIME_WAIT is free, as it is for the server; a port another socket listens
on, on any address that overlaps, is not)."""

from __future__ import annotations

import errno
import ipaddress
import re
import socket

from onebit_build.core.errors import ConfigError

HOST = "127.0.0.1"
ANY_HOSTS = ("0.0.0.0", "::", "")
PORT_RANGE = (1, 65535)
_NUMERIC = re.compile(r"^[0-9.]+$")


def check_port(text: str) -> int:
    """A TCP port from 1 to 65535 (ValueError otherwise). Pure."""
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"{text!r} is not a port number") from None
    if not PORT_RANGE[0] <= value <= PORT_RANGE[1]:
        raise ValueError(f"{text!r} is not a port: give one from {PORT_RANGE[0]} to {PORT_RANGE[1]}")
    return value


def check_host(text: str) -> str:
    """An IP address, or a host name that resolves (ValueError otherwise). ``999.1.1.1`` is
    refused as an address, never looked up as a name."""
    try:
        ipaddress.ip_address(text)
        return text
    except ValueError:
        pass
    if not text or _NUMERIC.match(text) or len(text) > 253:
        raise ValueError(f"{text!r} is not an IP address or host name (e.g. 127.0.0.1, or 0.0.0.0 for every address)")
    try:
        socket.getaddrinfo(text, None, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise ValueError(f"host {text!r} does not resolve ({exc}); give an address of this machine,"
                         " e.g. 127.0.0.1") from None
    return text


def client_host(listen: str) -> str:
    """Where a client on this machine reaches a server listening on ``listen``. Pure."""
    return HOST if listen in ANY_HOSTS else listen


def _address(host: str, port: int) -> tuple[int, tuple]:
    family, _, _, _, addr = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]
    return family, addr


def bind_problem(host: str, port: int) -> OSError | None:
    """Why a server could not listen on ``host:port`` now (None: it could). Binds and
    listens as servers do, with ``SO_REUSEADDR``."""
    try:
        family, addr = _address(host, port)
    except socket.gaierror as exc:
        return OSError(errno.EADDRNOTAVAIL, str(exc))
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(addr)
            s.listen(1)
        except OSError as exc:
            return exc
    return None


def port_is_free(port: int, host: str = HOST) -> bool:
    return bind_problem(host, port) is None


def free_port(host: str = HOST) -> int:
    """A port nobody listens on right now on ``host`` (the kernel picks it)."""
    family, addr = _address(host, 0)
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.bind(addr)
        return int(s.getsockname()[1])


def bind_error(host: str, port: int, exc: OSError) -> ConfigError:
    """The one-line error for a host and port a server cannot listen on, naming the cause."""
    if exc.errno == errno.EADDRINUSE:
        where = f"on {host}"
        if host in ANY_HOSTS:
            where = "on some address of this machine (--host 0.0.0.0 needs it free on all)"
        return ConfigError(f"port {port} is in use {where}",
                           hint="pass --port with a free port, or stop what listens there")
    if exc.errno == errno.EADDRNOTAVAIL:
        return ConfigError(f"{host} is not an address of this machine",
                           hint="pass --host with one of its addresses: 127.0.0.1, or 0.0.0.0 for all of them")
    if exc.errno in (errno.EACCES, errno.EPERM):
        return ConfigError(f"port {port} may be used only with more privileges",
                           hint="pass --port with a port above 1023")
    return ConfigError(f"cannot listen on {host}:{port}: {exc.strerror or exc}", hint="pass another --host or --port")
