"""kvtier.serve() and kvtier.Client: round trips through shared memory (Unix socket) and
inline (TCP, plain and TLS), tenants isolated, and the GIL released while a client waits on
the server."""

import json
import os
import pathlib
import shutil
import socket
import subprocess
import threading
import time

import pytest

import kvtier
from conftest import serve_yaml

BLOCK = 64 << 10


def keys_for(n, salt=""):
    return kvtier.chain_keys(list(range(16 * n)), cache_salt=salt)


def pattern(i, size=BLOCK):
    return (bytes([i % 256]) * 251 + bytes(range(251)))[: 502] * (size // 502) + bytes(size % 502)


def test_daemon_properties(daemon):
    assert daemon.running
    assert os.path.exists(daemon.socket_path)
    assert daemon.tcp_port > 0
    assert daemon.metrics_port == 0  # metrics off
    assert daemon.store_stats()["tiers"][0]["kind"] == "cpu_dram"


def test_shared_memory_round_trip(daemon):
    with kvtier.Client.connect_unix(daemon.socket_path, shared_memory_bytes=8 << 20) as client:
        shm = client.shared_memory
        assert isinstance(shm, memoryview) and not shm.readonly and len(shm) == 8 << 20
        assert client.tier_count == 2
        keys = keys_for(4, "shm")
        for i in range(4):  # lay the payloads out in the segment: they travel as references
            shm[i * BLOCK:(i + 1) * BLOCK] = pattern(i)
        result = client.put(keys, [shm[i * BLOCK:(i + 1) * BLOCK] for i in range(4)])
        assert result.new_blocks == 4
        [(prefix, load, tiers, sizes)] = client.lookup([keys])
        assert (prefix, load, sizes) == (4, 4, [BLOCK] * 4) and len(tiers) == 4
        base = 4 << 20
        shm[base:base + 4 * BLOCK] = bytes(4 * BLOCK)
        outs = [shm[base + i * BLOCK:base + (i + 1) * BLOCK] for i in range(4)]
        assert client.get(keys, outs) == [BLOCK] * 4  # the server writes into the segment
        for i in range(4):
            assert bytes(outs[i]) == pattern(i)
        # buffers outside the segment travel inline, both ways
        other = keys_for(2, "inline")
        client.put(other, [pattern(7), bytearray(pattern(8))])
        outs = [bytearray(BLOCK), bytearray(BLOCK)]
        assert client.get(other, outs) == [BLOCK, BLOCK]
        assert [bytes(o) for o in outs] == [pattern(7), pattern(8)]
        del shm, outs


def test_a_run_starting_mid_chain_is_found_read_and_pinned(daemon):
    # An engine holding a chain's first blocks asks only for the rest (the vLLM connector loads
    # from the engine's own hit on): the daemon's keys name their prefix.
    with kvtier.Client.connect_unix(daemon.socket_path, shared_memory_bytes=0) as client:
        keys = keys_for(6, "mid")
        assert client.put(keys, [pattern(i) for i in range(6)]).new_blocks == 6
        [(prefix, load, _, sizes)] = client.lookup([keys[2:5]])
        assert (prefix, load, sizes) == (3, 3, [BLOCK] * 3)
        outs = [bytearray(BLOCK) for _ in range(4)]
        assert client.get(keys[2:6], outs) == [BLOCK] * 4
        assert [bytes(o) for o in outs] == [pattern(i) for i in range(2, 6)]
        pin_id, pinned = client.pin(keys[3:6])
        assert pinned == 3
        client.unpin(pin_id)
        # after its first key, a run must continue the chain
        assert client.get([keys[2], keys[4]], outs[:2]) == [BLOCK]


def test_tcp_round_trip_and_numpy(daemon):
    np = pytest.importorskip("numpy")
    with kvtier.Client.connect_tcp("127.0.0.1", daemon.tcp_port) as client:
        assert len(client.shared_memory) == 0
        keys = keys_for(3, "tcp")
        arrays = [np.full(BLOCK // 2, i, dtype=np.uint16) for i in range(3)]
        assert client.put(keys, arrays, tokens=16, block_type="system_prompt").new_blocks == 3
        outs = [np.zeros(BLOCK // 2, dtype=np.uint16) for _ in keys]
        assert client.get(keys, outs, transition=kvtier.TransitionType.TOOL_SWITCH) == [BLOCK] * 3
        for i, out in enumerate(outs):
            assert (out == i).all()
        with pytest.raises(kvtier.InvalidArgumentError):
            client.put(keys_for(1, "nc"), [np.zeros((64, 64), dtype=np.uint8)[:, ::2]])


def test_tenants_are_isolated(tmp_path):
    with kvtier.serve(config_text=serve_yaml(tmp_path / "srv", tenants=["a", "b"])) as d:
        a = kvtier.Client.connect_unix(d.socket_path, tenant="a")
        b = kvtier.Client.connect_tcp("127.0.0.1", d.tcp_port, tenant="b")
        keys = keys_for(2, "shared-prefix")
        a.put(keys, [pattern(1), pattern(2)])
        assert a.lookup([keys])[0][0] == 2
        assert b.lookup([keys])[0][0] == 0  # same keys, another namespace
        assert b.get(keys, [bytearray(BLOCK), bytearray(BLOCK)]) == []
        b.put(keys, [pattern(3), pattern(4)])
        out = [bytearray(BLOCK)]
        a.get(keys[:1], out)
        assert bytes(out[0]) == pattern(1)
        with pytest.raises(kvtier.KvtierError) as info:
            kvtier.Client.connect_unix(d.socket_path, tenant="intruder")
        assert info.value.code_name in ("PermissionDenied", "Unavailable")
        a.close()
        b.close()


def test_pin_tags_prefetch_stats_importance(daemon):
    with kvtier.Client.connect_unix(daemon.socket_path) as client:
        keys = keys_for(3, "ops")
        client.put(keys, [pattern(i) for i in range(3)])
        pin_id, pinned = client.pin(keys)
        assert pinned == 3
        client.unpin(pin_id)
        client.update_tags([(keys[0], kvtier.BlockType.TOOL_CONTEXT, "reasoning_step")])
        client.prefetch(keys)
        stats = client.stats()
        assert isinstance(stats, dict)
        json.dumps(stats)
        try:
            client.report_importance([(0, 1, 0.5)])
        except kvtier.KvtierError as e:  # refused without a head layout: a clean error, not a crash
            assert e.code_name in ("FailedPrecondition", "Unsupported", "InvalidArgument")
        with pytest.raises(kvtier.KvtierError):
            client.unpin(123456789)


def test_expect_and_unexpect(daemon):
    with kvtier.Client.connect_unix(daemon.socket_path) as client:
        keys = keys_for(4, "queued")
        client.put(keys[:2], [pattern(i) for i in range(2)])
        expect_id = client.expect(keys)  # stored or not yet: a queued request's whole chain
        assert client.stats()["expected_blocks"] == 4
        client.unexpect(expect_id)
        assert client.stats()["expected_blocks"] == 0
        with pytest.raises(kvtier.NotFoundError):
            client.unexpect(expect_id)


def test_closed_client_and_stopped_daemon(tmp_path):
    d = kvtier.serve(config_text=serve_yaml(tmp_path / "srv"))
    client = kvtier.Client.connect_unix(d.socket_path)
    shm = client.shared_memory
    client.close()
    with pytest.raises(kvtier.FailedPreconditionError):
        client.lookup([keys_for(1)])
    shm[0:4] = b"abcd"  # the mapping outlives close() while a view of it exists
    del shm
    d.stop()
    d.stop()
    assert not d.running
    with pytest.raises(kvtier.FailedPreconditionError):
        d.socket_path


def test_two_threads_64mib_gets_concurrently(daemon):
    """Two threads each read 64 MiB through their own connection at the same time; both finish
    (a held GIL would serialize them but not hang them; the next test proves the release)."""
    size = 4 << 20
    chains = [keys_for(16, f"big{t}") for t in range(2)]
    with kvtier.Client.connect_unix(daemon.socket_path, shared_memory_bytes=72 << 20) as c:
        for keys in chains:
            shm = c.shared_memory
            for i in range(len(keys)):
                shm[i * size:i * size + 16] = bytes([i]) * 16
            c.put(keys, [shm[i * size:(i + 1) * size] for i in range(len(keys))])
            del shm
    results, errors = {}, []

    def reader(t):
        try:
            with kvtier.Client.connect_unix(daemon.socket_path, shared_memory_bytes=72 << 20) as c:
                shm = c.shared_memory
                outs = [shm[i * size:(i + 1) * size] for i in range(16)]
                results[t] = (c.get(chains[t], outs), [bytes(o[:16]) for o in outs])
                del outs, shm
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=reader, args=(t,)) for t in range(2)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=60)
    assert not errors and sorted(results) == [0, 1]
    for t in range(2):
        sizes, heads = results[t]
        assert sizes == [size] * 16
        assert heads == [bytes([i]) * 16 for i in range(16)]


def test_gil_released_while_client_waits(tmp_path):
    """A client waiting for a reply must let Python threads run: here the 'server' is a Python
    thread, which could never answer if connect_unix held the GIL (the client would time out)."""
    path = str(tmp_path / "fake.sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(1)
    received = []

    def fake_server():
        conn, _ = listener.accept()
        received.append(conn.recv(4096))  # the Hello frame
        conn.close()  # no reply: the client sees a closed connection

    thread = threading.Thread(target=fake_server)
    thread.start()
    start = time.monotonic()
    with pytest.raises(kvtier.UnavailableError):
        kvtier.Client.connect_unix(path, shared_memory_bytes=0, io_timeout_ms=20000)
    elapsed = time.monotonic() - start
    thread.join(timeout=5)
    listener.close()
    assert received and received[0][:4] == b"KVTP"
    assert elapsed < 10, f"the client waited {elapsed:.1f}s: the Python server thread could not run"


def make_pki(directory, name):
    """A throwaway CA and a server certificate for localhost and 127.0.0.1, by the openssl CLI."""
    d = pathlib.Path(directory)
    ca_key, ca, key, csr, cert = (d / f"{name}-{s}" for s in ("ca.key", "ca.pem", "server.key", "server.csr", "server.pem"))
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"]
    run = lambda *args: subprocess.run(["openssl", *args], check=True, capture_output=True)  # noqa: E731
    run("req", "-x509", *ec, "-keyout", ca_key, "-out", ca, "-days", "1", "-subj", f"/CN=kvtier test CA {name}")
    run("req", *ec, "-keyout", key, "-out", csr, "-subj", "/CN=localhost")
    ext = d / f"{name}-ext.cnf"
    ext.write_text("subjectAltName=DNS:localhost,IP:127.0.0.1\n")
    run("x509", "-req", "-in", csr, "-CA", ca, "-CAkey", ca_key, "-CAcreateserial", "-out", cert, "-days", "1",
        "-extfile", ext)
    return str(ca), str(cert), str(key)


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command")
def test_tls_round_trip_and_refusals(tmp_path):
    ca, cert, key = make_pki(tmp_path, "ours")
    other_ca, _, _ = make_pki(tmp_path, "theirs")
    yaml = serve_yaml(tmp_path / "srv").replace("  tcp_port: 0\n", f"  tcp_port: 0\n  tls: {{cert: {cert}, key: {key}}}\n")
    with kvtier.serve(config_text=yaml) as d:
        with kvtier.Client.connect_tcp("127.0.0.1", d.tcp_port, tls=True, ca_file=ca) as client:
            keys = keys_for(2, "tls")
            client.put(keys, [pattern(1), pattern(2)])
            outs = [bytearray(BLOCK), bytearray(BLOCK)]
            assert client.get(keys, outs) == [BLOCK, BLOCK]
            assert [bytes(o) for o in outs] == [pattern(1), pattern(2)]
        with pytest.raises(kvtier.PermissionDeniedError, match="does not verify"):
            kvtier.Client.connect_tcp("127.0.0.1", d.tcp_port, tls=True, ca_file=other_ca)
        with pytest.raises(kvtier.KvtierError, match="speaks TLS"):
            kvtier.Client.connect_tcp("127.0.0.1", d.tcp_port)
        with kvtier.Client.connect_tcp("localhost", d.tcp_port, tls=True, ca_file=ca, server_name="localhost") as c:
            assert c.tier_count == 2
