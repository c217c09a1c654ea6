"""kvtier.vllm.loader.BlockLoader with fake fetch/unpack callbacks (no torch, no vLLM): layer
gates open in order and only after their layer is copied, a step that does not fit the buffer
still loads, asynchronous jobs are reported once, a step overtakes queued asynchronous work,
and a failed or raising callback fails blocks (as a chain prefix) instead of hanging vLLM."""

import threading

import pytest

from kvtier.vllm.layout import hit_sources, load_asynchronously, RequestPlan
from kvtier.vllm.loader import BlockLoader, LoadJob

LAYERS = 4


class FakeCache:
    """A store of key -> payload and a KV cache of (layer, block) -> payload."""

    def __init__(self, stored, slots, fail_keys=(), raise_on_fetch=False, raise_on_layer=None):
        self.stored = dict(stored)
        self.buffer = [None] * slots
        self.pages = {}
        self.fail_keys = set(fail_keys)
        self.raise_on_fetch = raise_on_fetch
        self.raise_on_layer = raise_on_layer
        self.log = []  # ("fetch", n) / ("unpack", layer)
        self.lock = threading.Lock()
        self.gate = None  # when set, fetch waits on it (lets a test hold the loader thread)

    def fetch(self, keys, first):
        if self.gate is not None:
            self.gate.wait(5)
        if self.raise_on_fetch:
            raise RuntimeError("injected fetch failure")
        good = 0
        for j, k in enumerate(keys):
            if k in self.fail_keys or k not in self.stored:
                break
            self.buffer[first + j] = self.stored[k]
            good += 1
        with self.lock:
            self.log.append(("fetch", len(keys)))
        return good

    def unpack(self, layer, block_ids, first):
        if self.raise_on_layer is not None and layer == self.raise_on_layer:
            raise RuntimeError("injected unpack failure")
        for j, b in enumerate(block_ids):
            for lay in (range(LAYERS) if layer is None else [layer]):
                self.pages[(lay, b)] = self.buffer[first + j]
        with self.lock:
            self.log.append(("unpack", layer))


def job(req, n, base=0, is_async=False, key_base=0):
    return LoadJob(req, [(base + i, f"k{key_base + i}") for i in range(n)], is_async)


def stored(n):
    return {f"k{i}": f"payload{i}" for i in range(n)}


def test_pipelined_step_opens_each_layer_after_copying_it():
    cache = FakeCache(stored(8), slots=16)
    loader = BlockLoader(cache.fetch, cache.unpack, LAYERS, 16)
    try:
        loader.submit([job("a", 5), job("b", 3, base=100, key_base=5)], [])
        for layer in range(LAYERS):
            loader.wait_layer(layer)
            assert all(cache.pages.get((layer, b)) == f"payload{b}" for b in range(5))
            assert all(cache.pages.get((layer, 100 + i)) == f"payload{5 + i}" for i in range(3))
        assert loader.wait_step() == []
        unpacks = [layer for op, layer in cache.log if op == "unpack"]
        assert unpacks == [0, 0, 1, 1, 2, 2, 3, 3], "one copy per job per layer, in layer order"
        assert loader.stats["pipelined_steps"] == 1 and loader.stats["blocks"] == 8
    finally:
        loader.close()


def test_step_larger_than_the_buffer_loads_in_chunks():
    cache = FakeCache(stored(10), slots=4)
    loader = BlockLoader(cache.fetch, cache.unpack, LAYERS, 4)
    try:
        loader.submit([job("a", 10)], [])
        loader.wait_layer(0)
        assert loader.wait_step() == []
        assert all(cache.pages[(lay, b)] == f"payload{b}" for lay in range(LAYERS) for b in range(10))
        assert [n for op, n in cache.log if op == "fetch"] == [4, 4, 2]
        assert loader.stats["pipelined_steps"] == 0
    finally:
        loader.close()


def test_missing_block_fails_the_rest_of_its_chain_only():
    cache = FakeCache(stored(10), slots=16, fail_keys={"k3"})
    loader = BlockLoader(cache.fetch, cache.unpack, LAYERS, 16)
    try:
        loader.submit([job("a", 6), job("b", 2, base=50, key_base=6)], [])
        failed = loader.wait_step()
        assert sorted(failed) == [3, 4, 5]
        assert cache.pages[(LAYERS - 1, 2)] == "payload2"
        assert cache.pages[(LAYERS - 1, 51)] == "payload7", "the other request's blocks still load"
        assert (0, 3) not in cache.pages
    finally:
        loader.close()


@pytest.mark.parametrize("where", ["fetch", "unpack"])
def test_raising_callback_fails_blocks_and_opens_every_gate(where):
    cache = FakeCache(stored(4), slots=8, raise_on_fetch=where == "fetch",
                      raise_on_layer=2 if where == "unpack" else None)
    loader = BlockLoader(cache.fetch, cache.unpack, LAYERS, 8)
    try:
        loader.submit([job("a", 4)], [])
        for layer in range(LAYERS):
            loader.wait_layer(layer)  # must not hang
        assert sorted(loader.wait_step()) == [0, 1, 2, 3], "half-copied blocks are reloaded by vLLM"
        loader.submit([], [job("b", 4, base=10, is_async=True)])
        done = wait_finished(loader, 1)
        assert done[0].req_id == "b"
    finally:
        loader.close()


def wait_finished(loader, count, timeout=5.0):
    import time

    done, deadline = [], time.monotonic() + timeout
    while len(done) < count and time.monotonic() < deadline:
        done += loader.take_finished()
        time.sleep(0.005)
    assert len(done) == count, f"{len(done)} of {count} asynchronous jobs finished"
    return done


def test_async_jobs_finish_once_each_with_their_failures():
    cache = FakeCache(stored(20), slots=3, fail_keys={"k12"})
    loader = BlockLoader(cache.fetch, cache.unpack, LAYERS, 3)
    try:
        loader.submit([], [job("a", 8, is_async=True), job("b", 8, base=100, key_base=8, is_async=True)])
        done = {j.req_id: j for j in wait_finished(loader, 2)}
        assert done["a"].failed == []
        assert done["b"].failed == [104, 105, 106, 107]
        assert all(cache.pages[(lay, b)] == f"payload{b}" for lay in range(LAYERS) for b in range(8))
        assert loader.take_finished() == [], "reported once"
        assert loader.stats["async_jobs"] == 2
    finally:
        loader.close()


def test_step_overtakes_queued_async_work():
    cache = FakeCache(stored(40), slots=8)
    cache.gate = threading.Event()  # holds the loader in its first async chunk
    loader = BlockLoader(cache.fetch, cache.unpack, LAYERS, 8)
    try:
        loader.submit([], [job("slow", 30, is_async=True)])
        loader.submit([job("now", 2, base=500, key_base=30)], [])
        cache.gate.set()
        loader.wait_layer(LAYERS - 1)
        assert loader.wait_step() == []
        assert wait_finished(loader, 1)[0].req_id == "slow"
        fetches = [n for op, n in cache.log if op == "fetch"]
        assert sorted(fetches) == [2, 6, 8, 8, 8]
        assert fetches.index(2) <= 1, f"the step waited for the whole async job: {fetches}"
    finally:
        loader.close()


def test_close_releases_a_waiting_forward():
    cache = FakeCache(stored(4), slots=8)
    cache.gate = threading.Event()
    loader = BlockLoader(cache.fetch, cache.unpack, LAYERS, 8)
    loader.submit([], [job("slow", 4, is_async=True)])
    loader.submit([job("a", 2, key_base=2)], [])
    closer = threading.Thread(target=loader.close)
    closer.start()
    cache.gate.set()
    closer.join(5)
    assert not closer.is_alive()
    loader.wait_layer(0)  # returns: close opened the gates
    with pytest.raises(RuntimeError):
        loader.submit([job("b", 1)], [])


def test_buffer_must_hold_a_block():
    with pytest.raises(ValueError):
        BlockLoader(lambda k, f: 0, lambda l, b, f: None, LAYERS, 0)


# ------------------------------------------------------------- the scheduler's decision
KINDS = ["cpu_dram", "nvme", "remote_pool"]


def test_async_decision_follows_the_slowest_tier():
    assert not load_asynchronously("auto", [0, 0], KINDS)
    assert load_asynchronously("auto", [0, 1], KINDS)
    assert load_asynchronously("auto", [2], KINDS)
    assert load_asynchronously("auto", [7], KINDS), "an undescribed tier counts as slow"
    assert not load_asynchronously("auto", [], KINDS)
    assert load_asynchronously("always", [0], KINDS)
    assert not load_asynchronously("never", [1], KINDS)
    with pytest.raises(ValueError, match="async_load"):
        load_asynchronously("sometimes", [0], KINDS)


def test_hit_sources_split_tokens_by_tier():
    assert hit_sources([0, 0, 1, 2], KINDS, 16) == {"host": 32, "disk": 16, "external_unspecified": 16}
    assert hit_sources([], KINDS, 16) == {}
    # the last block loaded for all but its last token (a block-aligned prompt)
    assert hit_sources([0, 2], KINDS, 16, tokens=31) == {"host": 16, "external_unspecified": 15}


def test_plan_remembers_tiers_and_async():
    plan = RequestPlan("r", 16)
    plan.on_lookup(1, 4, 2, tiers=[0, 1, 1, 0], load_async=True)
    assert plan.ext_tiers() == [1, 1] and plan.load_async
    plan.on_lookup(4, 4, 0, tiers=[0, 1, 1, 0], load_async=True)
    assert not plan.load_async, "nothing to load is never asynchronous"
