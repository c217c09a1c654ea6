"""End-to-end checksums (protocol version 2, docs/protocol.md): the client checks every block
a Get returns against the checksum the server sends with it. Here the 'server' is a Python
thread that speaks the protocol itself, so that it can hand back a block with a byte changed
after the checksum was taken (in the daemon's memory, in shared memory or on the wire)."""

import socket
import struct
import threading

import pytest

import kvtier
from conftest import serve_yaml

HEADER = struct.Struct("<IHHQIHH")  # magic, version, type, request id, payload bytes, flags, 0
MAGIC = 0x5054564B
REPLY = 0x8000
HELLO, PUT, GET = 1, 3, 4
INLINE = 0xFFFFFFFF


def recv_exactly(conn, n):
    data = b""
    while len(data) < n:
        chunk = conn.recv(n - len(data))
        if not chunk:
            raise EOFError
        data += chunk
    return data


def recv_frame(conn):
    magic, version, kind, request_id, size, _, _ = HEADER.unpack(recv_exactly(conn, HEADER.size))
    assert magic == MAGIC and version == 2, "the client speaks version 2 by default"
    return kind, request_id, recv_exactly(conn, size)


def send_reply(conn, kind, request_id, payload):
    conn.sendall(HEADER.pack(MAGIC, 2, kind | REPLY, request_id, len(payload), 0, 0) + payload)


def parse_put(payload):
    """{key: (bytes, checksum)} of a version 2 Put of inline blocks."""
    at = 1 + (16 if payload[0] else 0)
    (n,) = struct.unpack_from("<I", payload, at)
    at += 4
    blocks = {}
    for _ in range(n):
        key = payload[at:at + 16]
        segment, _, length, checksum = struct.unpack_from("<IQIQ", payload, at + 22)
        at += 22 + 24
        assert segment == INLINE
        (size,) = struct.unpack_from("<I", payload, at)
        blocks[key] = (payload[at + 4:at + 4 + size], checksum)
        at += 4 + size
    return blocks


def get_keys(payload):
    (n,) = struct.unpack_from("<I", payload, 1)
    return [payload[5 + 32 * i:5 + 32 * i + 16] for i in range(n)]


def fake_server(listener, corrupt_gets):
    """Serves Hello, Puts (kept in memory) and Gets; the Gets numbered in corrupt_gets (from
    0) hand back each block with one byte changed, under the checksum the client put."""
    conn, _ = listener.accept()
    stored, gets = {}, 0
    with conn:
        while True:
            try:
                kind, request_id, payload = recv_frame(conn)
            except EOFError:
                return
            if kind == HELLO:
                send_reply(conn, HELLO, request_id, struct.pack("<HI", 2, 1))
            elif kind == PUT:
                blocks = parse_put(payload)
                stored.update(blocks)
                send_reply(conn, PUT, request_id, struct.pack("<III", len(blocks), 0, 0))
            elif kind == GET:
                found = [stored[k] for k in get_keys(payload)]
                sizes = b"".join(struct.pack("<IQ", len(data), checksum) for data, checksum in found)
                blocks = b""
                for data, _ in found:
                    if gets in corrupt_gets:
                        data = data[:100] + bytes([data[100] ^ 0x04]) + data[101:]
                    blocks += struct.pack("<I", len(data)) + data
                send_reply(conn, GET, request_id, struct.pack("<I", len(found)) + sizes +
                           struct.pack("<I", len(found)) + blocks)
                gets += 1


def test_a_block_changed_after_its_checksum_is_refused_and_counted(tmp_path):
    path = str(tmp_path / "fake.sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(1)
    thread = threading.Thread(target=fake_server, args=(listener, {1}))
    thread.start()
    try:
        with kvtier.Client.connect_unix(path, shared_memory_bytes=0, io_timeout_ms=20000) as client:
            keys = kvtier.chain_keys(list(range(32)))
            payloads = [bytes(range(256)) * 16, bytes(reversed(range(256))) * 16]
            assert client.put(keys, payloads).new_blocks == 2
            outs = [bytearray(4096), bytearray(4096)]
            assert client.get(keys, outs) == [4096, 4096]  # whole: the checksums match
            assert [bytes(o) for o in outs] == payloads
            with pytest.raises(kvtier.CorruptionError, match="checksum"):
                client.get(keys, outs)
            assert client.checksum_mismatches == 1
            assert bytes(outs[0]) == bytes(4096), "a block that failed is never handed back"
            assert client.get(keys, outs) == [4096, 4096]  # the connection is still good
            assert [bytes(o) for o in outs] == payloads
    finally:
        thread.join(timeout=10)
        listener.close()


def test_version_one_clients_without_checksums_still_work(tmp_path):
    with kvtier.serve(config_text=serve_yaml(tmp_path / "srv")) as d:
        with kvtier.Client.connect_unix(d.socket_path, shared_memory_bytes=1 << 20, checksums=False) as old:
            keys = kvtier.chain_keys(list(range(32)), cache_salt="v1")
            shm = old.shared_memory
            shm[0:4096] = bytes(range(256)) * 16
            shm[4096:8192] = b"\x05" * 4096
            assert old.put(keys, [shm[0:4096], shm[4096:8192]]).new_blocks == 2
            outs = [shm[8192:12288], shm[12288:16384]]
            assert old.get(keys, outs) == [4096, 4096]
            assert bytes(outs[1]) == b"\x05" * 4096
            del shm, outs
        with kvtier.Client.connect_tcp("127.0.0.1", d.tcp_port) as new:  # version 2 reads them
            outs = [bytearray(4096), bytearray(4096)]
            assert new.get(keys, outs) == [4096, 4096]
            assert bytes(outs[0]) == bytes(range(256)) * 16
            assert new.checksum_mismatches == 0
