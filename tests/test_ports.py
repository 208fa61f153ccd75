"""Hosts and ports for 'serve': checked when parsed, probed the way servers bind (real
sockets), a port the user chose never swapped for another (the real llama-server)."""

from __future__ import annotations

import errno
import socket
import time

import pytest
import requests

from _support import serving, REPO, run_cli
from onebit_build.core.errors import ConfigError
from onebit_build.running import ports
from onebit_build.running import server as srvmod
from onebit_build.running.server_args import ServerSpec
from onebit_build.running.ports import port_is_free


@pytest.mark.parametrize("text, ok", [("1", 1), ("65535", 65535), ("8080", 8080)])
def test_ports_in_range_are_accepted(text, ok):
    assert ports.check_port(text) == ok


@pytest.mark.parametrize("text", ["0", "70000", "-1", "http", "65536"])
def test_ports_out_of_range_are_refused(text):
    with pytest.raises(ValueError, match="port"):
        ports.check_port(text)


@pytest.mark.parametrize("text", ["127.0.0.1", "0.0.0.0", "::1", "localhost"])
def test_hosts_that_are_addresses_or_resolve(text):
    assert ports.check_host(text) == text


@pytest.mark.parametrize("text, why", [
    ("999.1.1.1", "is not an IP address or host name"),
    ("1.2.3", "is not an IP address or host name"),
    ("", "is not an IP address or host name"),
    ("no-such-host.invalid", "does not resolve"),
])
def test_hosts_that_are_neither_are_refused(text, why):
    with pytest.raises(ValueError, match=why):
        ports.check_host(text)


@pytest.mark.parametrize("args, says", [
    (["--port", "70000"], "argument --port: '70000' is not a port: give one from 1 to 65535"),
    (["--host", "999.1.1.1"], "argument --host: '999.1.1.1' is not an IP address or host name"),
])
def test_serve_refuses_a_bad_host_or_port_while_parsing(tmp_path, args, says):
    out = run_cli(REPO, "--workspace", str(tmp_path / "ws"), "serve", *args)
    assert out.returncode == 2 and says in out.stderr, out.stderr
    assert "Traceback" not in out.stderr and not (tmp_path / "ws").exists()


def _listener(host: str, *, reuse: bool = False) -> socket.socket:
    s = socket.socket()
    if reuse:  # as llama-server's HTTP library sets it on its own listening socket
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((host, 0))
    s.listen()
    return s


def test_a_port_taken_on_another_address_is_in_use_for_every_address():
    with _listener("127.0.0.2") as s:
        port = s.getsockname()[1]
        assert ports.port_is_free(port, "127.0.0.1")  # another address: free there
        problem = ports.bind_problem("0.0.0.0", port)
        assert problem is not None and problem.errno == errno.EADDRINUSE
        err = ports.bind_error("0.0.0.0", port, problem)
        assert isinstance(err, ConfigError) and err.exit_code == 2
        assert str(err).startswith(f"port {port} is in use on some address of this machine"
                                   " (--host 0.0.0.0 needs it free")


def test_time_wait_alone_leaves_the_port_free_as_for_a_server():
    """A server that closed a connection first leaves it in TIME_WAIT on its port: a plain
    bind fails there, a server's bind (SO_REUSEADDR) does not, nor does the probe."""
    lst = _listener("127.0.0.1", reuse=True)
    port = lst.getsockname()[1]
    client = socket.create_connection(("127.0.0.1", port))
    conn, _ = lst.accept()
    conn.close()  # the server side closes first: its end goes to TIME_WAIT
    client.recv(1)
    client.close()
    lst.close()
    time.sleep(0.2)
    with socket.socket() as plain:
        with pytest.raises(OSError) as e:
            plain.bind(("127.0.0.1", port))
        assert e.value.errno == errno.EADDRINUSE  # what the old probe met
    assert ports.bind_problem("127.0.0.1", port) is None and port_is_free(port)


def test_an_address_not_of_this_machine_is_named():
    problem = ports.bind_problem("192.0.2.1", ports.free_port())  # TEST-NET-1: never local
    assert problem is not None and problem.errno == errno.EADDRNOTAVAIL
    assert str(ports.bind_error("192.0.2.1", 8080, problem)).startswith("192.0.2.1 is not an address of this machine")


def test_serve_names_an_address_not_of_this_machine_before_building(tmp_path):
    out = run_cli(REPO, "--workspace", str(tmp_path / "ws"), "serve", "--host", "192.0.2.1", "--port", "8080")
    assert out.returncode == 2, out.stderr
    assert out.stderr.strip().splitlines() == [
        "error: 192.0.2.1 is not an address of this machine"
        " (pass --host with one of its addresses: 127.0.0.1, or 0.0.0.0 for all of them)"]
    assert not (tmp_path / "ws").exists()


@pytest.mark.slow
def test_a_chosen_port_is_never_swapped_and_time_wait_does_not_block_it(llama_server, gemma_model, tmp_path):
    """The real server: with the user's port taken on another address, it is refused
    naming the port (before: served on a random one); after a served connection and a
    stop, the same port serves again at once (before: 'port is in use')."""
    with _listener("127.0.0.2") as s:
        port = s.getsockname()[1]
        spec = ServerSpec(binary=llama_server, model=gemma_model, log=tmp_path / "a.log", host="0.0.0.0",
                                 port=port, fixed_port=True, threads=1, ctx_size=512)
        with pytest.raises(ConfigError, match=f"port {port} is in use on some address"):
            srvmod.serve_foreground(spec, has_chat_template=False)
        # the probe bypassed: llama-server itself fails to bind, and start() still keeps the port
        with pytest.raises(ConfigError, match=f"port {port} is in use"):
            srvmod.start(spec)
        assert "couldn't bind" in spec.log.read_text()
    port = ports.free_port()
    spec = ServerSpec(binary=llama_server, model=gemma_model, log=tmp_path / "b.log", port=port, fixed_port=True,
                             threads=1, ctx_size=512)
    with serving(spec) as server:
        assert requests.get(server.url + "/health", timeout=5).status_code == 200
    with serving(spec) as again:  # at once: the first server's connection is in TIME_WAIT
        assert again.port == port and requests.get(again.url + "/health", timeout=5).status_code == 200
