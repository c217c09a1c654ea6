"""kvtier.sglang: pure key/namespace helpers (plain python3 + pytest) and the HiCache
storage backend against SGLang's own HiCacheStorage and MHATokenToKVPoolHost (CPU),
with a real in-process `kvtier serve` daemon. The SGLang/torch tests skip when those
are not importable (tools/sglang/setup_venv.sh builds a venv that has them)."""

from __future__ import annotations

import hashlib
import importlib.util
import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE)))  # python/: kvtier.sglang.keys

# The pure module is loaded by path so this part needs neither the extension nor sglang.
_spec = importlib.util.spec_from_file_location(
    "kvtier_sglang_keys", os.path.join(os.path.dirname(HERE), "kvtier", "sglang", "keys.py"))
K = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(K)


# --- pure helpers ---------------------------------------------------------------------
def test_storage_key_hex_digest_is_its_first_16_bytes():
    h = hashlib.sha256(b"page").hexdigest()
    assert K.storage_key(h) == bytes.fromhex(h)[:16]
    assert K.storage_key(h.upper()) == bytes.fromhex(h)[:16]
    assert K.storage_key(h[:32]) == bytes.fromhex(h[:32])


def test_storage_key_other_strings_hash():
    for s in ["hash0", "abc", hashlib.sha256(b"p").hexdigest() + ".mamba",
              hashlib.sha256(b"p").hexdigest()[:31], "zz" * 16, "ünï"]:
        assert K.storage_key(s) == hashlib.sha256(s.encode()).digest()[:16]
        assert len(K.storage_key(s)) == 16
    assert K.storage_key("a") != K.storage_key("b")
    with pytest.raises(TypeError):
        K.storage_key(b"bytes")


def test_storage_keys_and_leading_hits():
    assert K.storage_keys(["a", "b"]) == [K.storage_key("a"), K.storage_key("b")]
    assert K.leading_hits([]) == 0
    assert K.leading_hits([True, True, False, True]) == 2
    assert K.leading_hits([False, True]) == 0
    assert K.leading_hits([True] * 3) == 3


def test_shard_name():
    assert K.shard_name() == "tp0of1"
    assert K.shard_name(tp_rank=1, tp_size=2) == "tp1of2"
    assert K.shard_name(tp_rank=1, tp_size=2, is_mla_model=True) == "mla"
    assert K.shard_name(pp_rank=1, pp_size=2, attn_cp_rank=0, attn_cp_size=2) == "tp0of1-pp1of2-cp0of2"
    assert K.shard_name(is_mla_model=True, dcp_rank=1, dcp_size=2) == "mla-dcp1of2"


def test_namespace_and_fingerprint():
    fp = K.page_fingerprint({"layout": "page_first", "dtype": "torch.float16"})
    assert fp == K.page_fingerprint({"dtype": "torch.float16", "layout": "page_first"})
    assert fp != K.page_fingerprint({"layout": "layer_first", "dtype": "torch.float16"})
    assert len(fp) == 16
    assert K.namespace_tenant("t", "m", "tp0of1", fp) == f"t/sglang/m/tp0of1/{fp}"
    assert K.namespace_tenant("", None, "mla", fp, epoch=2) == f"/sglang//mla/{fp}/e2"


def test_page_spans_and_truthy():
    assert K.page_spans([1, 2, 3, 4], [10, 10, 10, 10], 2) == [[(1, 10), (2, 10)], [(3, 10), (4, 10)]]
    assert K.page_spans([], [], 0) == []
    with pytest.raises(ValueError):
        K.page_spans([1, 2, 3], [1, 1, 1], 2)
    with pytest.raises(ValueError):
        K.page_spans([1], [1, 2], 1)
    assert K.truthy("1") and K.truthy("true") and K.truthy(1) and K.truthy(True)
    assert not K.truthy("0") and not K.truthy(0) and not K.truthy("false")


# --- against SGLang and a real daemon ---------------------------------------------------
def _need(mod):
    try:
        return importlib.import_module(mod)
    except Exception as e:  # noqa: BLE001 -- ImportError, or a CUDA-only dependency failing
        pytest.skip(f"{mod} not importable: {type(e).__name__}: {e}")


import importlib  # noqa: E402


@pytest.fixture(scope="module")
def daemon(tmp_path_factory):
    kvtier = _need("kvtier")
    if not hasattr(kvtier, "serve"):
        pytest.skip("kvtier extension not built")
    d = tmp_path_factory.mktemp("kvt")
    cfg = (f"data_dir: {d}\ntiers:\n  - kind: cpu_dram\n    capacity: 256MiB\n    lock_memory: false\n"
           "store:\n  persistence: none\nlisten:\n  unix_socket: kvtier.sock\n  tcp: false\n  metrics_port: -1\n")
    dm = kvtier.serve(config_text=cfg)
    yield dm
    dm.stop()


def _sglang():
    _need("torch")
    hs = _need("sglang.srt.mem_cache.hicache_storage")
    _need("kvtier.sglang.storage")
    return hs


def _config(hs, daemon, **extra):
    return hs.HiCacheStorageConfig(
        tp_rank=0, tp_size=1, pp_rank=0, pp_size=1, attn_cp_rank=0, attn_cp_size=1,
        is_mla_model=False, enable_storage_metrics=False, is_page_first_layout=True,
        model_name="test/model", extra_config={"socket_path": daemon.socket_path, "shared_memory_bytes": 8 << 20, **extra})


def _host_pool(layout, page_size=4, layers=3, heads=2, dim=8):
    import torch
    mp = _need("sglang.srt.mem_cache.memory_pool")
    ph = _need("sglang.srt.mem_cache.pool_host")
    dev = mp.MHATokenToKVPool(64, page_size, torch.float16, heads, dim, layers, "cpu", False, start_layer=0, end_layer=layers)
    host = ph.MHATokenToKVPoolHost(
        dev.get_device_pool_infos()[0].buffer_info, 2, 0, page_size, layout, pin_memory=False,
        device_capacity_tokens=dev.size, start_layer=dev.start_layer, end_layer=dev.end_layer,
        write_back_staging=dev.hicache_write_back_staging)
    return host


def test_is_a_hicache_storage(daemon):
    hs = _sglang()
    from kvtier.sglang.storage import KvtierStorage
    assert issubclass(KvtierStorage, hs.HiCacheStorage)
    s = KvtierStorage(_config(hs, daemon), {})
    assert isinstance(s, hs.HiCacheStorage)
    with pytest.raises(ValueError):
        KvtierStorage(hs.HiCacheStorageConfig(0, 1, 0, 1, 0, 1, False, False, True, "m", extra_config={}), {})
    s.close()


def test_factory_dynamic_backend_loads_it(daemon):
    hs = _sglang()
    bf = _need("sglang.srt.mem_cache.storage.backend_factory")
    cfg = _config(hs, daemon, backend_name="kvtier", module_path="kvtier.sglang.storage",
                  class_name="KvtierStorage", interface_v1=1)
    s = bf.StorageBackendFactory.create_backend("dynamic", cfg, None)
    from kvtier.sglang.storage import KvtierStorage
    assert isinstance(s, KvtierStorage)
    s.close()


def test_generic_set_exists_get_clear(daemon):
    hs = _sglang()
    import torch
    from kvtier.sglang.storage import KvtierStorage
    s = KvtierStorage(_config(hs, daemon, tenant="generic"))
    keys = [hashlib.sha256(f"g{i}".encode()).hexdigest() for i in range(4)]
    vals = [torch.randn(2, 3, 4, 2, 8, dtype=torch.float16).flatten() for _ in keys]
    assert s.batch_exists(keys) == 0 and not s.exists(keys[0])
    assert s.get(keys[0], torch.empty_like(vals[0])) is None  # missing -> None
    assert s.set(keys[0], vals[0])
    assert s.exists(keys[0]) and s.batch_exists(keys) == 1
    assert s.batch_set(keys[1:3], vals[1:3])
    assert s.batch_exists(keys) == 3
    assert s.batch_exists([keys[0], keys[3], keys[1]]) == 1  # leading run only
    out = s.get(keys[1], torch.zeros_like(vals[1]))
    assert torch.equal(out, vals[1])
    got = s.batch_get(keys, [torch.zeros_like(v) for v in vals])
    assert [g is None for g in got] == [False, False, False, True]
    assert all(torch.equal(g, v) for g, v in zip(got[:3], vals[:3]))
    # a page of another size is a miss, not a short read
    assert s.get(keys[0], torch.zeros(10, dtype=torch.float16)) is None
    assert s.clear() is True
    assert s.batch_exists(keys) == 0 and s.get(keys[0], torch.zeros_like(vals[0])) is None
    assert isinstance(s.get_stats(), dict)
    s.close()


@pytest.mark.parametrize("layout", ["page_first", "layer_first", "page_first_direct"])
def test_v1_zero_copy_with_sglang_host_pool(daemon, layout):
    hs = _sglang()
    import torch
    from kvtier.sglang.storage import KvtierStorage
    ps = 4
    try:
        pool = _host_pool(layout, page_size=ps)
    except pytest.skip.Exception:
        raise
    except Exception as e:  # noqa: BLE001
        pytest.skip(f"MHATokenToKVPoolHost({layout}) on CPU: {type(e).__name__}: {e}")
    torch.manual_seed(0)
    pool.kv_buffer.copy_(torch.randn(pool.kv_buffer.shape).to(pool.kv_buffer.dtype))
    s = KvtierStorage(_config(hs, daemon, tenant=f"v1-{layout}", interface_v1=1), {})
    s.register_mem_pool_host(pool)
    keys = [hashlib.sha256(f"{layout}{i}".encode()).hexdigest() for i in range(3)]
    src = torch.arange(ps, 4 * ps, dtype=torch.int64)  # pages 1..3
    before = [pool.get_data_page(int(src[i * ps]), flat=True).clone() for i in range(3)]
    assert s.batch_exists(keys) == 0
    assert s.batch_set_v1(keys, src) == [True, True, True]
    assert s.batch_exists(keys) == 3
    dst = torch.arange(8 * ps, 11 * ps, dtype=torch.int64)  # pages 8..10, still random
    assert not torch.equal(pool.get_data_page(int(dst[0]), flat=True), before[0])
    assert s.batch_get_v1(keys, dst) == [True, True, True]
    for i in range(3):
        assert torch.equal(pool.get_data_page(int(dst[i * ps]), flat=True), before[i])
    # a missing key in the middle: leading run loads, the rest report False
    mixed = [keys[0], hashlib.sha256(b"missing").hexdigest(), keys[2]]
    assert s.batch_get_v1(mixed, dst) == [True, False, False]
    assert s.batch_exists(mixed) == 1
    s.close()


def test_namespace_isolates_layouts_and_ranks(daemon):
    hs = _sglang()
    import torch
    from kvtier.sglang.storage import KvtierStorage
    a = KvtierStorage(_config(hs, daemon, tenant="iso"))
    cfg_b = _config(hs, daemon, tenant="iso")
    cfg_b.tp_size, cfg_b.tp_rank = 2, 1
    b = KvtierStorage(cfg_b)
    k = hashlib.sha256(b"iso").hexdigest()
    assert a.set(k, torch.ones(16, dtype=torch.float16))
    assert a.exists(k) and not b.exists(k)
    a.close(); b.close()


class _PageFirstPool:
    """Stand-in for MHATokenToKVPoolHost(layout="page_first") when SGLang's memory_pool
    cannot be imported on CPU (it needs torchvision): kv_buffer [2, size, layers, heads, dim]
    and get_page_buffer_meta with SGLang 0.5.23's formula (K and V span per page)."""

    layout = "page_first"

    def __init__(self, size=64, page_size=4, layers=3, heads=2, dim=8):
        import torch
        self.size, self.page_size, self.layer_num, self.head_num, self.head_dim = size, page_size, layers, heads, dim
        self.dtype = torch.float16
        self.kv_buffer = torch.randn(2, size, layers, heads, dim).to(self.dtype)

    def get_page_buffer_meta(self, indices):
        it = self.dtype.itemsize
        v_off = self.layer_num * self.size * self.head_num * self.head_dim * it
        ptrs = []
        idx = indices.tolist()
        for i in range(0, len(idx), self.page_size):
            k = self.kv_buffer.data_ptr() + idx[i] * self.layer_num * self.head_num * self.head_dim * it
            ptrs += [k, k + v_off]
        return ptrs, [self.layer_num * it * self.page_size * self.head_num * self.head_dim] * len(ptrs)

    def get_data_page(self, index, flat=True):
        return self.kv_buffer[:, index:index + self.page_size].flatten()


def test_v1_zero_copy_with_page_shaped_tensors(daemon):
    hs = _sglang()
    import torch
    from kvtier.sglang.storage import KvtierStorage
    pool = _PageFirstPool()
    ps = pool.page_size
    s = KvtierStorage(_config(hs, daemon, tenant="v1-fake", interface_v1=1), {})
    s.register_mem_pool_host(pool)
    keys = [hashlib.sha256(f"fake{i}".encode()).hexdigest() for i in range(3)]
    src = torch.arange(ps, 4 * ps, dtype=torch.int64)
    before = [pool.get_data_page(int(src[i * ps])).clone() for i in range(3)]
    assert s.batch_set_v1(keys, src) == [True] * 3 and s.batch_exists(keys) == 3
    dst = torch.arange(8 * ps, 11 * ps, dtype=torch.int64)
    assert s.batch_get_v1(keys, dst) == [True] * 3
    for i in range(3):
        assert torch.equal(pool.get_data_page(int(dst[i * ps])), before[i])
    assert s.batch_get_v1([keys[0], "missing", keys[2]], dst) == [True, False, False]
    s.close()
