"""kvtier.Store: put/get round trips from every kind of buffer, without copies on the Python
side; bad buffers rejected with InvalidArgument; the GIL released while the store works."""

import array

import pytest

import kvtier
from conftest import ran_python_during, tier_yaml

BLOCK = 4096


def keys_for(n, salt=""):
    return kvtier.chain_keys(list(range(16 * n)), cache_salt=salt)


def pattern(i, size=BLOCK):
    return bytes((i * 31 + j) % 251 for j in range(size))


def test_round_trip_bytes_bytearray_memoryview_array(store):
    keys = keys_for(4)
    payloads = [pattern(0), bytearray(pattern(1)), memoryview(pattern(2)), array.array("B", pattern(3))]
    result = store.put(keys, payloads)
    assert (result.new_blocks, result.present_blocks, result.refused_blocks) == (4, 0, 0)
    prefix, tiers, sizes = store.lookup(keys)
    assert prefix == 4 and tiers == [0, 0, 0, 0] and sizes == [BLOCK] * 4
    outs = [bytearray(BLOCK) for _ in keys]
    assert store.get(keys, outs) == [BLOCK] * 4
    assert [bytes(o) for o in outs] == [pattern(i) for i in range(4)]
    # outs may be memoryviews into one larger buffer (zero-copy destinations)
    arena = bytearray(4 * BLOCK)
    view = memoryview(arena)
    assert store.get(keys, [view[i * BLOCK:(i + 1) * BLOCK] for i in range(4)]) == [BLOCK] * 4
    assert bytes(arena) == b"".join(pattern(i) for i in range(4))
    assert store.put(keys, payloads).present_blocks == 4


def test_round_trip_numpy(store):
    np = pytest.importorskip("numpy")
    keys = keys_for(3, "np")
    arrays = [np.full((16, 64), i, dtype=np.float32) for i in range(3)]  # 4 KiB each
    store.put(keys, arrays, tokens=[16, 16, 16], block_type=["system_prompt", kvtier.BlockType.USER_CONTEXT, 2])
    outs = [np.empty((16, 64), dtype=np.float32) for _ in keys]
    assert store.get(keys, outs) == [BLOCK] * 3
    for i, out in enumerate(outs):
        assert (out == i).all()


def test_prefix_chain_and_parent(store):
    keys = keys_for(4, "chain")
    store.put(keys[:2], [pattern(0), pattern(1)])
    store.put(keys[2:], [pattern(2), pattern(3)], parent=keys[1], transition="tool_switch")
    assert store.lookup(keys)[0] == 4
    outs = [bytearray(BLOCK) for _ in keys]
    assert store.get(keys[:3] + [b"\x00" * 16], outs) == [BLOCK] * 3  # stops at the first missing block
    with pytest.raises(kvtier.NotFoundError):
        store.put([keys_for(1, "x")[0]], [b"x"], parent=b"\x01" * 16)


def test_non_contiguous_buffer_rejected(store):
    np = pytest.importorskip("numpy")
    strided = np.zeros((64, 64), dtype=np.uint8)[:, ::2]
    with pytest.raises(kvtier.KvtierError) as info:
        store.put(keys_for(1, "nc"), [strided])
    assert info.value.code == 1 and info.value.code_name == "InvalidArgument"
    assert "C-contiguous" in str(info.value)
    transposed = np.zeros((64, 64), dtype=np.uint8).T
    with pytest.raises(kvtier.InvalidArgumentError):
        store.put(keys_for(1, "nc"), [transposed])
    store.put(keys_for(1, "nc"), [np.ascontiguousarray(strided)])  # a contiguous copy is fine


def test_bad_arguments(store):
    keys = keys_for(2, "bad")
    with pytest.raises(kvtier.InvalidArgumentError):
        store.put(keys, [b"a"])  # count mismatch
    with pytest.raises(kvtier.InvalidArgumentError):
        store.put([b"short"], [b"a"])  # a key is 16 bytes
    with pytest.raises(kvtier.InvalidArgumentError):
        store.put(keys, [b"a", 3])  # not a buffer
    with pytest.raises(kvtier.InvalidArgumentError):
        store.put(keys, b"ab")  # payloads is a list, not one buffer
    with pytest.raises(kvtier.InvalidArgumentError):
        store.put(keys, [b"a", b"b"], block_type="not_a_type")
    store.put(keys, [b"a" * 64, b"b" * 64])
    with pytest.raises(kvtier.InvalidArgumentError) as info:
        store.get(keys, [b"x" * 64, b"y" * 64])  # read-only destinations
    assert "read-only" in str(info.value)


def test_stats_pin_tags_drain(store):
    keys = keys_for(2, "stats")
    store.put(keys, [pattern(0), pattern(1)])
    with store.pin(keys) as pin:
        assert len(pin) == 2
        assert store.stats()["pinned_blocks"] == 2
    assert store.stats()["pinned_blocks"] == 0
    store.update_tags([(keys[0], "tool_context", "agent_handoff")])
    store.prefetch(keys)
    store.drain()
    stats = store.stats()
    assert stats["puts"] >= 1 and stats["put_blocks"] >= 2
    assert [t["kind"] for t in stats["tiers"]] == ["cpu_dram", "nvme"]
    assert stats["tiers"][0]["blocks"] >= 2
    assert store.tier_count == 2


def test_closed_store(tmp_path):
    s = kvtier.Store(tier_config_text=tier_yaml(tmp_path / "d"))
    s.close()
    with pytest.raises(kvtier.FailedPreconditionError):
        s.lookup(keys_for(1))
    s.close()  # idempotent


def test_data_dir_only_with_the_default(tmp_path):
    with pytest.raises(kvtier.InvalidArgumentError):
        kvtier.Store(tier_config_text=tier_yaml(tmp_path), data_dir=str(tmp_path))


def test_gil_released_during_get(tmp_path):
    """A Python thread runs while another is inside Store.get (conftest.ran_python_during)."""
    with kvtier.Store(tier_config_text=tier_yaml(tmp_path / "d", dram="512MiB")) as s:
        size = 4 << 20
        keys = keys_for(16, "gil")  # 64 MiB
        payload = bytes(size)
        s.put(keys, [payload] * len(keys))
        outs = [bytearray(size) for _ in keys]

        def get():
            assert s.get(keys, outs) == [size] * len(keys)

        assert ran_python_during(get), "no Python thread ran during Store.get: the GIL was held"
