"""kvtier.trtllm: the TensorRT-LLM connector driven by a stand-in of TensorRT-LLM's executor.

tensorrt_llm imports only where CUDA is, so these tests drive KvtierConnectorScheduler and
KvtierConnectorWorker the way its PyTorch executor does (tensorrt_llm/_torch/pyexecutor:
py_executor.py, resource_manager.py, kv_cache_connector.py; docs/trtllm.md), against a real
in-process `kvtier serve`:

- KVCacheManager.prepare_resources: add_sequence asks get_num_new_matched_tokens(request,
  device-reused tokens), sets the prepopulated prompt length (context position and chunk),
  then update_state_after_alloc(request, block ids); generation requests get a block when
  their next token needs one; then the scheduler output is built as
  KvCacheConnectorSchedulerOutputManager does (new_tokens / new_block_ids since the last
  output, computed_position without the connector's tokens the first time).
- PyExecutor._kv_connector_start_batch: build_connector_meta, the metadata pickled to every
  rank (mpi_broadcast) and bound, start_load_kv; the forward (wait_for_layer_load and
  save_kv_layer around each layer); wait_for_save; request_finished for finished requests;
  get_finished.

The pool is TensorRT-LLM's primary pool shape, [blocks, layers, 2, tokens * heads * head_dim].
The stand-in model writes each position's K/V as a function of the tokens up to it and
samples the next token from a digest of the sequence's K/V, so a wrong or missing load
changes the generated tokens as well as the pages. A numpy pool runs everywhere; the same
tests run on a torch pool where torch imports.
"""

from __future__ import annotations

import itertools
import pickle
import zlib
from types import SimpleNamespace

import numpy as np
import pytest

import kvtier
from conftest import serve_yaml
from kvtier.trtllm import connector as C
from kvtier.trtllm.options import ENV_SERVER_URL, connector_options, parse_server_url

BS = 4  # tokens per block
LAYERS, HEADS, HEAD_DIM = 3, 2, 8
ROW = HEADS * HEAD_DIM  # elements of one token's K (or V) in one layer

try:
    import torch
except ImportError:  # system python has no torch: the torch pool is skipped
    torch = None

BACKENDS = ["numpy", pytest.param("torch", marks=pytest.mark.skipif(torch is None, reason="torch not importable"))]


def llm_args(url, **over):
    """The TorchLlmArgs fields the connector reads."""
    kv = SimpleNamespace(tokens_per_block=BS, dtype="auto", max_attention_window=None)
    conn = SimpleNamespace(connector_module="kvtier.trtllm.connector",
                           connector_scheduler_class="KvtierConnectorScheduler",
                           connector_worker_class="KvtierConnectorWorker", server_url=url)
    args = SimpleNamespace(model="stand-in/model", dtype="float16", tensor_parallel_size=1,
                           pipeline_parallel_size=1, context_parallel_size=1, enable_attention_dp=False,
                           max_beam_width=1, speculative_config=None, quant_config=None,
                           kv_cache_config=kv, kv_connector_config=conn)
    for k, v in over.items():
        setattr(args, k, v)
    return args


class Request:
    """Shaped like tensorrt_llm.bindings.internal.batch_manager.LlmRequest (the parts used)."""

    def __init__(self, request_id, prompt, max_new_tokens, chunk=None):
        self.request_id = self.py_request_id = request_id
        self.prompt_len = len(prompt)
        self.tokens = list(prompt)
        self.max_new_tokens = max_new_tokens
        self.context_current_position = 0
        self.context_chunk_size = chunk or len(prompt)
        self.state = "CONTEXT_INIT"
        self.lora_task_id = self.cache_salt_id = self.multimodal_hashes = None
        self.is_generation_only_request = False
        self.generated = []

    def get_tokens(self, beam):
        assert beam == 0
        return list(self.tokens)

    @property
    def context_remaining_length(self):
        return self.prompt_len - self.context_current_position


def kv_of(prefix, layer, rank=0):
    """The stand-in model's K and V of the last token of `prefix` in `layer`."""
    seed = zlib.crc32(np.asarray(prefix, dtype=np.int32).tobytes()) ^ (layer * 7919) ^ (rank << 20)
    return np.random.default_rng(seed).standard_normal((2, ROW)).astype(np.float16)


class Engine:
    """The stand-in executor: one scheduler (rank 0) and one worker per rank, each with a pool."""

    def __init__(self, args, num_blocks, backend="numpy", reverse_free=False, tp=1):
        self.backend = backend
        self.scheduler = C.KvtierConnectorScheduler(args)
        self.workers, self.pools = [], []
        mpi_rank = C._mpi_rank
        for rank in range(tp):
            C._mpi_rank = lambda rank=rank: rank  # the rank tensorrt_llm._utils.mpi_rank() gives
            try:
                worker = C.KvtierConnectorWorker(args)
            finally:
                C._mpi_rank = mpi_rank
            shape = (num_blocks, LAYERS, 2, BS * ROW)
            pool = (np.zeros(shape, np.float16) if backend == "numpy" else torch.zeros(shape, dtype=torch.float16))
            worker.register_kv_caches(pool)  # PyExecutor: kv_cache_manager.get_unique_primary_pool()
            self.workers.append(worker)
            self.pools.append(pool)
        self.free = list(range(num_blocks))
        if reverse_free:
            self.free.reverse()
        self.blocks = {}  # request id -> block ids
        self.sent = {}  # KvCacheConnectorSchedulerOutputRequest: request id -> (blocks, tokens) sent
        self.external = {}  # KvCacheConnectorSchedulerOutputManager.external_loads
        self.matched = {}  # request id -> the connector's tokens
        self.reuse = {}  # request id -> tokens the stand-in's own prefix cache "reuses"
        self.load_hook = None  # called between metadata and start_load_kv

    # --- pool access ------------------------------------------------------------------
    def _write(self, rank, block, layer, slot, kv):
        if self.backend == "numpy":
            self.pools[rank][block, layer, :, slot * ROW:(slot + 1) * ROW] = kv
        else:
            self.pools[rank][block, layer, :, slot * ROW:(slot + 1) * ROW] = torch.from_numpy(kv)

    def _read(self, rank, block, layer, slot):
        page = self.pools[rank][block, layer, :, slot * ROW:(slot + 1) * ROW]
        return page if self.backend == "numpy" else page.numpy()

    def page_bytes(self, rank, block):
        page = self.pools[rank][block]
        return (page if self.backend == "numpy" else page.numpy()).tobytes()

    def _compute(self, req, positions):
        for rank in range(len(self.workers)):
            for layer in range(LAYERS):
                self.workers[rank].wait_for_layer_load(layer, None)  # KvCacheConnectorManager.layer_pre_hook
                for p in positions:
                    self._write(rank, self.blocks[req.request_id][p // BS], layer, p % BS,
                                kv_of(req.tokens[:p + 1], layer, rank))
                self.workers[rank].save_kv_layer(layer, None)  # layer_post_hook

    def _sample(self, req):
        """The next token: a digest of every position's K/V (a wrong page changes it)."""
        h = 0
        for rank in range(len(self.workers)):
            for p in range(len(req.tokens)):
                for layer in range(LAYERS):
                    h = zlib.crc32(self._read(rank, self.blocks[req.request_id][p // BS], layer, p % BS).tobytes(), h)
        return h % 50000

    # --- the executor loop ------------------------------------------------------------
    def _allocate(self, req, tokens):
        ids = self.blocks.setdefault(req.request_id, [])
        while len(ids) * BS < tokens:
            ids.append(self.free.pop(0))

    def _add_sequence(self, req):
        """KVCacheManager.add_sequence with the connector (kvCacheManager.cpp addSequence)."""
        self._allocate(req, req.prompt_len)
        reused = self.reuse.get(req.request_id, 0)
        for p in range(reused):  # the stand-in's own prefix cache held these positions
            for rank in range(len(self.workers)):
                for layer in range(LAYERS):
                    self._write(rank, self.blocks[req.request_id][p // BS], layer, p % BS,
                                kv_of(req.tokens[:p + 1], layer, rank))
        num, load_async = self.scheduler.get_num_new_matched_tokens(req, reused)
        assert not load_async, "the connector loads synchronously"
        assert reused + num < req.prompt_len, "There must be at least one uncomputed token in the prompt!"
        self.external[req.request_id] = num
        self.matched[req.request_id] = num
        pre = reused + num
        if pre > 0:  # LlmRequest.setPrepopulatedPromptLen
            chunk = req.context_chunk_size
            if pre + chunk < req.prompt_len:
                chunk = (pre + chunk) // BS * BS - pre
            req.context_current_position = pre
            req.context_chunk_size = chunk
        self.scheduler.update_state_after_alloc(req, list(self.blocks[req.request_id]))

    def _request_data(self, req):
        ids = self.blocks[req.request_id]
        nb, nt = self.sent.get(req.request_id, (0, 0))
        self.sent[req.request_id] = (len(ids), len(req.tokens))
        if req.state == "CONTEXT_INIT":
            computed = req.context_current_position - self.external.get(req.request_id, 0)
            scheduled = min(req.context_remaining_length, req.context_chunk_size)
        else:
            computed, scheduled = len(req.tokens) - 1, 1
        return SimpleNamespace(request_id=req.request_id, new_tokens=req.tokens[nt:], new_block_ids=ids[nb:],
                               computed_position=computed, num_scheduled_tokens=scheduled)

    def step(self, requests):
        new, cached = [], []
        for req in requests:  # KVCacheManager.prepare_resources
            if req.state == "CONTEXT_INIT" and req.request_id not in self.blocks:
                self._add_sequence(req)
            elif req.state == "GENERATION":
                self._allocate(req, len(req.tokens))
        for req in requests:  # build_scheduler_output
            (new if req.request_id not in self.sent else cached).append(self._request_data(req))
        self.external = {}
        so = SimpleNamespace(new_requests=new, cached_requests=cached)
        meta = self.scheduler.build_connector_meta(so)  # KvCacheConnectorManager.handle_metadata
        for worker in self.workers:
            worker.bind_connector_meta(pickle.loads(pickle.dumps(meta)))  # mpi_broadcast
        if self.load_hook is not None:
            self.load_hook()
        for worker in self.workers:
            worker.start_load_kv(None)
        for req in requests:  # the forward
            if req.state == "CONTEXT_INIT":
                n = min(req.context_remaining_length, req.context_chunk_size)
                self._compute(req, range(req.context_current_position, req.context_current_position + n))
            else:
                self._compute(req, [len(req.tokens) - 1])
        for worker in self.workers:
            worker.wait_for_save(None)  # PyExecutor._forward_step
        done = []
        for req in requests:  # sampling and request states
            if req.state == "CONTEXT_INIT":
                req.context_current_position += min(req.context_remaining_length, req.context_chunk_size)
                if req.context_current_position < req.prompt_len:
                    req.context_chunk_size = min(req.context_chunk_size, req.context_remaining_length)
                    continue
                req.state = "GENERATION"
            tok = self._sample(req)
            req.tokens.append(tok)
            req.generated.append(tok)
            if len(req.generated) == req.max_new_tokens:
                done.append(req)
        for req in done:  # PyExecutor._do_terminate_request
            assert self.scheduler.request_finished(req, list(self.blocks[req.request_id])) is False
            self.free += self.blocks.pop(req.request_id)
            self.sent.pop(req.request_id)
        for worker in self.workers:  # KvCacheConnectorManager.get_finished
            assert worker.get_finished([], []) == ([], [])
        return [r for r in requests if r not in done]

    def run(self, *requests):
        left = list(requests)
        while left:
            left = self.step(left)
        return [r.generated for r in requests]

    def close(self):
        self.scheduler.close()
        for worker in self.workers:
            worker.close()


def url_of(daemon, query=""):
    return f"unix://{daemon.socket_path}" + (f"?{query}" if query else "")


PROMPT = [101 + 3 * i for i in range(18)]  # 4 full blocks and 2 tokens


_reference_runs = itertools.count()


def reference(daemon, prompt, max_new, backend="numpy"):
    """What the stand-in model generates with no kvtier hit (a namespace of its own: an earlier
    reference run of a prefix of ``prompt`` would otherwise be a hit)."""
    eng = Engine(llm_args(url_of(daemon, f"model=reference-{next(_reference_runs)}")), 64, backend)
    try:
        req = Request("ref", prompt, max_new)
        out = eng.run(req)[0]
        assert eng.matched["ref"] == 0
        return out
    finally:
        eng.close()


def stored_prefix(daemon, args, prompt):
    opts = connector_options(args)
    keys = kvtier.chain_keys(prompt, BS, "xxh3_128", root_seed="kvtier-trtllm")
    with kvtier.Client.connect_unix(daemon.socket_path, tenant=opts.tenants[0]) as c:
        return c.lookup([keys])[0][0]


# --- round trips ------------------------------------------------------------------------
@pytest.mark.parametrize("backend", BACKENDS)
def test_engine_b_loads_what_engine_a_saved(daemon, backend):
    args = llm_args(url_of(daemon))
    a = Engine(args, 32, backend)
    req_a = Request(1, PROMPT, 3)
    out_a = a.run(req_a)[0]
    assert a.matched[1] == 0
    # 4 prompt blocks after the prefill, the 5th after the second decode step filled it
    assert a.workers[0].stats["saved_blocks"] == 5
    pages_a = [a.page_bytes(0, b) for b in range(5)]  # A's free list hands out 0, 1, 2, ...
    assert stored_prefix(daemon, args, PROMPT + out_a) == 5
    a.close()

    b = Engine(args, 48, backend, reverse_free=True)  # other block ids, another tensor
    assert all(b.page_bytes(0, 47 - i) != pages_a[i] for i in range(4)), "the test must start from empty pages"
    loads = []
    b.load_hook = lambda: loads.extend(b.workers[0].get_connector_meta().loads)
    req_b = Request(7, PROMPT, 3)
    out_b = b.run(req_b)[0]
    assert b.matched[7] == 16  # 4 blocks; the prompt's last 2 tokens are computed
    assert [[block for block, _ in blocks] for _, blocks in loads] == [[47, 46, 45, 44]]
    assert b.workers[0].stats["loaded_blocks"] == 4
    for i in range(4):
        assert b.page_bytes(0, 47 - i) == pages_a[i], f"block {i} differs after the load"
    assert out_b == out_a

    # The conversation's next turn: the decode-filled block loads too (20 of 21 tokens).
    req_c = Request(8, PROMPT + out_a, 2)
    out_c = b.run(req_c)[0]
    assert b.matched[8] == 20
    assert out_c == reference(daemon, PROMPT + out_a, 2, backend)
    b.close()


def test_dropped_loads_are_detected(daemon):
    """Negative control: the same run with the loads thrown away generates other tokens."""
    args = llm_args(url_of(daemon))
    a = Engine(args, 32)
    out_a = a.run(Request(1, PROMPT, 3))[0]
    a.close()
    b = Engine(args, 32)
    b.workers[0].start_load_kv = lambda stream: None
    out_b = b.run(Request(2, PROMPT, 3))[0]
    assert b.matched[2] == 16
    assert out_b != out_a
    assert b.page_bytes(0, 0) != a.page_bytes(0, 0)
    b.close()


@pytest.mark.parametrize("backend", BACKENDS)
def test_partial_prefix_hit_loads_the_shared_blocks_and_saves_the_rest(daemon, backend):
    args = llm_args(url_of(daemon))
    a = Engine(args, 32, backend)
    a.run(Request(1, PROMPT, 1))
    a.close()
    other = PROMPT[:8] + [9000 + i for i in range(10)]  # the first 2 blocks shared
    assert stored_prefix(daemon, args, other) == 2
    b = Engine(args, 32, backend, reverse_free=True)
    out = b.run(Request(2, other, 2))[0]
    assert b.matched[2] == 8
    assert b.workers[0].stats["loaded_blocks"] == 2
    assert out == reference(daemon, other, 2, backend)
    assert stored_prefix(daemon, args, other) == 4  # blocks 2 and 3 saved under block 1's key
    b.close()


def test_a_hit_longer_than_the_segment_loads_in_segment_sized_gets(daemon):
    """A segment of 3 blocks (of 768 bytes) and a hit of 4: the whole hit loads, in a Get of 3
    blocks and a Get of 1, byte-equal."""
    a = Engine(llm_args(url_of(daemon)), 32)
    out_a = a.run(Request(1, PROMPT, 2))[0]
    pages_a = [a.page_bytes(0, blk) for blk in range(4)]  # A's free list hands out 0, 1, 2, ...
    a.close()
    b = Engine(llm_args(url_of(daemon, f"shared_memory_bytes={3 * LAYERS * 2 * BS * ROW * 2}")), 32,
               reverse_free=True)
    worker_spy = ClientSpy(b.workers[0]._client)
    b.workers[0]._client = worker_spy
    ids = []
    b.load_hook = lambda: ids.extend(b.blocks[2])
    assert b.run(Request(2, PROMPT, 2))[0] == out_a
    keys = kvtier.chain_keys(PROMPT, BS, "xxh3_128", root_seed="kvtier-trtllm")
    assert b.matched[2] == 4 * BS and b.workers[0].stats["loaded_blocks"] == 4
    assert worker_spy.got == [keys[0:3], keys[3:4]]
    for i in range(4):
        assert b.page_bytes(0, ids[i]) == pages_a[i], f"block {i} differs after the load"
    b.close()


def test_a_block_larger_than_the_segment_is_no_hit(daemon):
    """A scheduler whose segment (512 bytes) cannot hold one stored block (768) finds no hit:
    the engine computes the prompt, no error."""
    a = Engine(llm_args(url_of(daemon)), 32)
    out_a = a.run(Request(1, PROMPT, 2))[0]
    a.close()
    b = Engine(llm_args(url_of(daemon)), 32)
    b.scheduler = C.KvtierConnectorScheduler(llm_args(url_of(daemon, "shared_memory_bytes=512")))
    assert b.run(Request(2, PROMPT, 2))[0] == out_a
    assert b.matched[2] == 0 and b.workers[0].stats["loaded_blocks"] == 0
    b.close()


class ClientSpy:
    """Stands in front of a kvtier.Client, recording the keys of each get and pin."""

    def __init__(self, client):
        self._client = client
        self.got, self.pinned = [], []

    def get(self, keys, outs):
        self.got.append(list(keys))
        return self._client.get(keys, outs)

    def pin(self, keys):
        self.pinned.append(list(keys))
        return self._client.pin(keys)

    def __getattr__(self, name):
        return getattr(self._client, name)


LONG_PROMPT = [301 + 5 * i for i in range(26)]  # 6 full blocks and 2 tokens


def test_a_device_hit_is_followed_by_reading_only_the_missing_blocks(daemon):
    args = llm_args(url_of(daemon))
    a = Engine(args, 32)
    out_a = a.run(Request(1, LONG_PROMPT, 1))[0]
    pages_a = [a.page_bytes(0, b) for b in range(6)]  # A's free list hands out 0, 1, 2, ...
    a.close()
    assert stored_prefix(daemon, args, LONG_PROMPT) == 6
    b = Engine(args, 32, reverse_free=True)
    b.reuse[2] = 2 * BS  # the engine's own cache has blocks 0 and 1: kvtier reads blocks 2-5
    scheduler_spy, worker_spy = ClientSpy(b.scheduler._clients[0]), ClientSpy(b.workers[0]._client)
    b.scheduler._clients[0], b.workers[0]._client = scheduler_spy, worker_spy
    ids = []
    b.load_hook = lambda: ids.extend(b.blocks[2])
    assert b.run(Request(2, LONG_PROMPT, 1))[0] == out_a
    assert b.matched[2] == 4 * BS
    keys = kvtier.chain_keys(LONG_PROMPT, BS, "xxh3_128", root_seed="kvtier-trtllm")
    assert scheduler_spy.pinned == [keys[2:6]]
    assert worker_spy.got == [keys[2:6]]
    assert b.workers[0].stats["loaded_blocks"] == 4
    for i in range(2, 6):
        assert b.page_bytes(0, ids[i]) == pages_a[i], f"block {i} differs after the load"
    b.close()


def test_the_segment_holds_only_the_blocks_read(daemon):
    """A segment of 3 blocks: the device has 3 of 6 stored blocks, so the other 3 fit."""
    a = Engine(llm_args(url_of(daemon)), 32)
    out_a = a.run(Request(1, LONG_PROMPT, 1))[0]
    a.close()
    b = Engine(llm_args(url_of(daemon, f"shared_memory_bytes={3 * LAYERS * 2 * BS * ROW * 2}")), 32)
    b.reuse[2] = 3 * BS
    assert b.run(Request(2, LONG_PROMPT, 1))[0] == out_a
    assert b.matched[2] == 3 * BS and b.workers[0].stats["loaded_blocks"] == 3
    b.close()


def test_kvtier_lacking_a_device_block_is_no_hit_and_saves_it(daemon):
    """The lookup starts at the root: kvtier holding blocks 0-1 of a request whose device hit
    is 3 blocks gives nothing to load, and the device's block 2 is saved."""
    args = llm_args(url_of(daemon))
    a = Engine(args, 32)
    a.run(Request(1, LONG_PROMPT[:9], 1))
    a.close()
    assert stored_prefix(daemon, args, LONG_PROMPT) == 2
    b = Engine(args, 32)
    b.reuse[2] = 3 * BS
    b.run(Request(2, LONG_PROMPT, 1))
    assert b.matched[2] == 0 and b.workers[0].stats["loaded_blocks"] == 0
    assert stored_prefix(daemon, args, LONG_PROMPT) == 6
    b.close()


def test_miss_loads_nothing_and_saves_the_prompt(daemon):
    args = llm_args(url_of(daemon))
    eng = Engine(args, 32)
    loads = []
    eng.load_hook = lambda: loads.extend(eng.workers[0].get_connector_meta().loads)
    prompt = [5000 + i for i in range(13)]
    out = eng.run(Request("miss", prompt, 1))[0]
    assert eng.matched["miss"] == 0 and loads == []
    assert eng.workers[0].stats["saved_blocks"] == 3 and eng.workers[0].stats["loaded_blocks"] == 0
    assert stored_prefix(daemon, args, prompt) == 3
    assert out == reference(daemon, prompt, 1)
    eng.close()


def test_device_hit_then_kvtier_hit_and_chunked_prefill(daemon):
    args = llm_args(url_of(daemon))
    a = Engine(args, 32)
    out_a = a.run(Request(1, PROMPT, 2))[0]
    a.close()
    b = Engine(args, 32, reverse_free=True)
    b.reuse[2] = 4  # the engine's own cache has block 0: kvtier loads blocks 1-3
    loads, ids = [], []
    b.load_hook = lambda: (loads.extend(b.workers[0].get_connector_meta().loads), ids.append(list(b.blocks[2])))
    assert b.run(Request(2, PROMPT, 2))[0] == out_a
    assert b.matched[2] == 12
    assert [[block for block, _ in blocks] for _, blocks in loads] == [ids[0][1:4]]
    # A chunked prefill of a new prompt saves each block once, in chain order.
    b.load_hook = None
    prompt = [7000 + i for i in range(22)]
    out = b.run(Request(3, prompt, 1, chunk=8))[0]
    assert out == reference(daemon, prompt, 1)
    assert stored_prefix(daemon, args, prompt) == 5
    b.close()


def test_two_requests_in_one_batch(daemon):
    args = llm_args(url_of(daemon))
    a = Engine(args, 32)
    out_a = a.run(Request(1, PROMPT, 2))[0]
    a.close()
    b = Engine(args, 32, reverse_free=True)
    other = [8000 + i for i in range(9)]
    outs = b.run(Request(2, other, 3), Request(3, PROMPT, 2))
    assert b.matched == {2: 0, 3: 16}
    assert outs == [reference(daemon, other, 3), out_a]
    b.close()


def test_tensor_parallel_ranks_keep_their_own_pages(daemon):
    args = llm_args(url_of(daemon), tensor_parallel_size=2)
    a = Engine(args, 32, tp=2)
    out_a = a.run(Request(1, PROMPT, 2))[0]
    assert [w.stats["saved_blocks"] for w in a.workers] == [4, 4]
    a.close()
    b = Engine(args, 32, reverse_free=True, tp=2)
    assert b.run(Request(2, PROMPT, 2))[0] == out_a
    assert b.matched[2] == 16
    for rank in range(2):
        assert b.page_bytes(rank, 31) != b.page_bytes(1 - rank, 31)
    b.close()
    # A block only one rank has is no hit: rank 1's namespace alone holds this chain.
    opts = connector_options(args)
    keys = kvtier.chain_keys([1] * 8, BS, "xxh3_128", root_seed="kvtier-trtllm")
    with kvtier.Client.connect_unix(daemon.socket_path, tenant=opts.tenants[1]) as c:
        c.put(keys, [bytes(LAYERS * 2 * BS * ROW * 2)] * 2, tokens=BS)
    c = Engine(args, 32, tp=2)
    assert c.scheduler.get_num_new_matched_tokens(Request(3, [1] * 9, 1), 0) == (0, False)
    c.close()


# --- failures ----------------------------------------------------------------------------
def test_no_daemon_at_start_is_a_clear_error(tmp_path):
    args = llm_args(f"unix://{tmp_path}/absent.sock")
    with pytest.raises(kvtier.KvtierError, match="cannot reach `kvtier serve` at .*absent.sock"):
        C.KvtierConnectorScheduler(args)
    with pytest.raises(kvtier.KvtierError, match="start the daemon or fix server_url"):
        C.KvtierConnectorWorker(args)


def test_daemon_gone_mid_run_is_a_miss_and_skipped_saves(tmp_path):
    with kvtier.serve(config_text=serve_yaml(tmp_path / "srv")) as d:
        eng = Engine(llm_args(url_of(d)), 32)
    # the daemon is stopped: lookups miss, saves are logged and skipped, the run goes on
    out = eng.run(Request(1, PROMPT, 2))[0]
    assert eng.matched[1] == 0
    assert eng.scheduler.stats["lookup_errors"] == 1
    assert eng.workers[0].stats["save_errors"] >= 1 and eng.workers[0].stats["saved_blocks"] == 0
    with kvtier.serve(config_text=serve_yaml(tmp_path / "srv2")) as d2:
        assert out == reference(d2, PROMPT, 2)
    eng.close()


def test_daemon_gone_before_a_promised_load_raises(tmp_path):
    with kvtier.serve(config_text=serve_yaml(tmp_path / "srv")) as d:
        args = llm_args(url_of(d))
        a = Engine(args, 32)
        a.run(Request(1, PROMPT, 1))
        a.close()
        b = Engine(args, 32)
        b.load_hook = d.stop
        with pytest.raises(RuntimeError, match="cannot recompute them"):
            b.run(Request(2, PROMPT, 1))
        assert b.matched[2] == 16


def test_hit_is_pinned_until_loaded(daemon):
    args = llm_args(url_of(daemon))
    a = Engine(args, 32)
    a.run(Request(1, PROMPT, 1))
    a.close()
    b = Engine(args, 32)
    pins = []
    b.load_hook = lambda: pins.append(len(b.scheduler._pins))
    b.run(Request(2, PROMPT, 1))
    assert pins == [1]  # held while the load ran
    assert b.scheduler._pins == {}  # released by the next metadata / request_finished
    b.close()


# --- configuration -------------------------------------------------------------------------
def test_server_url_and_environment():
    path, opts = parse_server_url("unix:///run/kvtier/k.sock?tenant=acme&shared_memory_bytes=4096")
    assert path == "/run/kvtier/k.sock" and opts["tenant"] == "acme" and opts["shared_memory_bytes"] == "4096"
    args = llm_args(None)
    with pytest.raises(ValueError, match=ENV_SERVER_URL):
        connector_options(args, environ={})
    opts = connector_options(args, environ={ENV_SERVER_URL: "unix:///tmp/x.sock?model=m"})
    assert opts.socket_path == "/tmp/x.sock" and opts.tenants[0].startswith("/m/")
    # the namespace separates models and layouts, and ranks
    other = connector_options(llm_args("unix:///tmp/x.sock?model=m", kv_cache_config=SimpleNamespace(
        tokens_per_block=8, dtype="auto", max_attention_window=None)))
    assert other.tenants != opts.tenants
    tp = connector_options(llm_args("unix:///tmp/x.sock", tensor_parallel_size=2))
    assert len(tp.tenants) == 2 and tp.tenants[0].endswith("/tp0of2")
    assert connector_options(llm_args("unix:///tmp/x.sock?tenant=t&fold_namespace=0")).tenants == ("t",)


@pytest.mark.parametrize("url, error, match", [
    ("tcp://127.0.0.1:7000", NotImplementedError, "only a Unix socket"),
    ("/run/kvtier.sock", ValueError, "not of the form"),
    ("unix://", ValueError, "names no socket path"),
    ("unix:///x.sock?tenants=a", ValueError, "unknown option 'tenants'"),
    ("unix:///x.sock?shared_memory_bytes=lots", ValueError, "not an integer"),
    ("unix:///x.sock?partial_block_tokens=some", ValueError, "partial_block_tokens 'some' is not an integer"),
    ("unix:///x.sock?partial_block_tokens=-1", ValueError, "partial_block_tokens must be 0"),
])
def test_bad_server_url_is_refused(url, error, match):
    with pytest.raises(error, match=match):
        connector_options(llm_args(url))


@pytest.mark.parametrize("field, value, match", [
    ("pipeline_parallel_size", 2, "pipeline parallelism"),
    ("context_parallel_size", 2, "context parallelism"),
    ("enable_attention_dp", True, "attention data parallelism"),
    ("max_beam_width", 4, "beam search"),
    ("speculative_config", object(), "speculative decoding"),
    ("kv_cache_config", SimpleNamespace(tokens_per_block=BS, dtype="auto", max_attention_window=[512, 4096]),
     "sliding-window"),
])
def test_unsupported_configuration_is_refused(daemon, field, value, match):
    args = llm_args(url_of(daemon), **{field: value})
    with pytest.raises(NotImplementedError, match=match):
        C.KvtierConnectorScheduler(args)
    with pytest.raises(NotImplementedError, match=match):
        C.KvtierConnectorWorker(args)


def test_bad_pools_are_refused(daemon):
    worker = C.KvtierConnectorWorker(llm_args(url_of(daemon, "shared_memory_bytes=65536")))
    with pytest.raises(ValueError, match="raise shared_memory_bytes"):
        worker.register_kv_caches(np.zeros((4, 64, 2, 512), np.float16))  # 128 KiB blocks
    with pytest.raises(NotImplementedError, match="contiguous pool"):
        worker.register_kv_caches(np.zeros((4, 2, 2, 64), np.float16)[::2])
    with pytest.raises(ValueError, match="not contiguous"):
        worker.register_kv_caches(np.zeros((4, 2, 2, 64), np.float16)[:, :, :, ::2])
    worker.close()


def test_multimodal_requests_bypass_kvtier(daemon):
    args = llm_args(url_of(daemon))
    eng = Engine(args, 32)
    req = Request(1, PROMPT, 1)
    req.multimodal_hashes = [[1, 2, 3, 4, 5, 6, 7, 8]]
    eng.run(req)
    assert eng.matched[1] == 0 and eng.workers[0].stats["saved_blocks"] == 0
    eng.close()


def test_lora_separates_chains(daemon):
    args = llm_args(url_of(daemon))
    eng = Engine(args, 32)
    eng.run(Request(1, PROMPT, 1))
    req = Request(2, PROMPT, 1)
    req.lora_task_id = 5
    eng.run(req)
    assert eng.matched[2] == 0  # another adapter's KV is not this one's
    eng.close()
