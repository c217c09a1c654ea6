"""kvtier.vllm.saver.BlockSaver with fake pack/put callbacks (no torch, no vLLM): puts land in
submission order with each chunk naming the previous one as parent, the staging ring never
hands a queued chunk's slots to a new pack, a full staging makes submit wait (counted) and
drops nothing, failed and refused puts are counted and skip the rest of their chain only, and
close flushes what is queued (or abandons it after its timeout); deferred jobs are copied on
the packer thread after submit returned, in order with the others."""

import random
import threading
import time

import pytest

from kvtier.vllm.saver import BlockSaver, SaveJob


class FakeStore:
    """Staging slots, a pack that writes each block's payload into them, and a put that
    reads them back, checks them and records (parent, keys)."""

    def __init__(self, slots, fail_calls=(), refuse_calls=(), delay=0.0):
        self.staging = [None] * slots
        self.puts = []  # (parent, keys)
        self.tokens = []  # per put, the tokens per block it was given
        self.stored = {}
        self.fail_calls = set(fail_calls)  # put call numbers (from 0) that raise
        self.refuse_calls = set(refuse_calls)  # put call numbers that refuse their last block
        self.delay = delay
        self.gate = None  # when set, put waits on it
        self.calls = 0
        self.corrupt = []
        self.payload_of = {}  # block id -> payload, filled by the test
        self.pack_threads = set()

    def pack(self, blocks, first):
        self.pack_threads.add(threading.current_thread().name)
        for j, (b, _) in enumerate(blocks):
            self.staging[first + j] = self.payload_of[b]

    def put(self, parent, keys, first, tokens):
        if self.gate is not None:
            assert self.gate.wait(10), "test gate never opened"
        if self.delay:
            time.sleep(random.random() * self.delay)
        call = self.calls
        self.calls += 1
        if call in self.fail_calls:
            raise RuntimeError("injected put failure")
        for j, k in enumerate(keys):
            if self.staging[first + j] != f"p-{k}":
                self.corrupt.append((k, self.staging[first + j]))
        self.puts.append((parent, list(keys)))
        self.tokens.append(tokens)
        refused = 1 if call in self.refuse_calls else 0
        for k in keys[:len(keys) - refused]:
            self.stored[k] = True
        return len(keys) - refused, refused


def make_job(store, req, n, parent=None, base=0, prefix=None):
    prefix = prefix or req
    blocks = [(base + i, f"{prefix}{i}") for i in range(n)]
    for b, k in blocks:
        store.payload_of[b] = f"p-{k}"
    return SaveJob(req, parent, blocks)


def test_a_tails_token_count_reaches_its_put():
    store = FakeStore(4)
    saver = BlockSaver(store.put, 4)
    try:
        saver.submit(make_job(store, "a", 2), store.pack)
        tail = make_job(store, "a", 1, parent="a1", base=10, prefix="t")
        tail.tokens = 96
        saver.submit(tail, store.pack)
        assert saver.flush(10)
        assert store.puts == [(None, ["a0", "a1"]), ("a1", ["t0"])] and store.tokens == [0, 96]
    finally:
        saver.close()


def test_chain_puts_land_in_order_with_parents():
    store = FakeStore(8, delay=0.002)
    saver = BlockSaver(store.put, 8, max_chunk_slots=3)
    try:
        # two requests interleaved, each saved over two steps (the second names the first's last key)
        saver.submit(make_job(store, "a", 7, base=0), store.pack)
        saver.submit(make_job(store, "b", 5, base=100), store.pack)
        saver.submit(make_job(store, "a", 4, parent="a6", base=200, prefix="a_"), store.pack)
        assert saver.flush(10)
        assert store.corrupt == [], "a queued chunk's staging was overwritten"
        a_keys = [f"a{i}" for i in range(7)] + [f"a_{i}" for i in range(4)]
        a_puts = [p for p in store.puts if p[1][0].startswith("a")]
        assert [k for _, ks in a_puts for k in ks] == a_keys, "a's chain in order"
        parent = None
        for par, ks in a_puts:
            assert par == parent, f"chunk {ks} names {par}, the previous chunk ended at {parent}"
            parent = ks[-1]
        assert max(len(ks) for _, ks in store.puts) <= 3
        done = saver.take_finished()
        assert [(j.req_id, j.saved) for j in done] == [("a", 7), ("b", 5), ("a", 4)]
        assert saver.take_finished() == [], "reported once"
    finally:
        saver.close()


def test_ring_under_random_load_keeps_every_payload():
    random.seed(7)
    store = FakeStore(10, delay=0.001)
    saver = BlockSaver(store.put, 10, max_chunk_slots=4)
    try:
        base = 0
        for r in range(40):
            n = random.randint(1, 9)
            saver.submit(make_job(store, f"r{r}", n, base=base), store.pack)
            base += n
        assert saver.flush(20)
        assert store.corrupt == []
        assert len(store.stored) == base
        assert saver.stats_snapshot()["saved_blocks"] == base
    finally:
        saver.close()


def test_full_staging_makes_submit_wait_and_drops_nothing():
    store = FakeStore(4)
    store.gate = threading.Event()
    saver = BlockSaver(store.put, 4, max_chunk_slots=2)
    try:
        submitter = threading.Thread(target=saver.submit, args=(make_job(store, "a", 10), store.pack))
        submitter.start()
        submitter.join(0.3)
        assert submitter.is_alive(), "submit returned although the staging holds 4 of 10 blocks"
        assert saver.stats_snapshot()["waits"] == 1
        assert saver.pending("a")
        store.gate.set()
        submitter.join(10)
        assert not submitter.is_alive()
        assert saver.flush(10)
        assert not saver.pending("a")
        assert [k for _, ks in store.puts for k in ks] == [f"a{i}" for i in range(10)]
        assert store.corrupt == []
        st = saver.stats_snapshot()
        assert st["waits"] >= 1 and st["wait_s"] > 0.2 and st["saved_blocks"] == 10
    finally:
        store.gate.set()
        saver.close()


def test_failed_put_is_counted_and_skips_the_rest_of_its_chain_only():
    store = FakeStore(16, fail_calls={1})
    saver = BlockSaver(store.put, 16, max_chunk_slots=2)
    try:
        saver.submit(make_job(store, "a", 6), store.pack)  # puts 0, 1 (fails), 2 (skipped)
        saver.submit(make_job(store, "b", 2, base=50), store.pack)  # put 2
        assert saver.flush(10)
        jobs = {j.req_id: j for j in saver.take_finished()}
        assert (jobs["a"].saved, jobs["a"].refused, jobs["a"].skipped, jobs["a"].failed_puts) == (2, 2, 2, 1)
        assert jobs["b"].saved == 2 and jobs["b"].failed_puts == 0
        assert "a4" not in store.stored, "a chunk after a failed one must not be put without its parent"
        st = saver.stats_snapshot()
        assert (st["failed_puts"], st["refused_blocks"], st["skipped_blocks"], st["saved_blocks"]) == (1, 2, 2, 4)
    finally:
        saver.close()


def test_refused_block_stops_its_chain():
    store = FakeStore(16, refuse_calls={0})
    saver = BlockSaver(store.put, 16, max_chunk_slots=3)
    try:
        saver.submit(make_job(store, "a", 6), store.pack)
        assert saver.flush(10)
        (job,) = saver.take_finished()
        assert (job.saved, job.refused, job.skipped) == (2, 1, 3)
        assert len(store.puts) == 1
    finally:
        saver.close()


def test_failed_pack_fails_the_rest_and_the_saver_goes_on():
    store = FakeStore(16)
    saver = BlockSaver(store.put, 16, max_chunk_slots=2)
    calls = []

    def pack(ids, first):
        calls.append(ids)
        if len(calls) == 2:
            raise RuntimeError("injected pack failure")
        store.pack(ids, first)

    try:
        with pytest.raises(RuntimeError):
            saver.submit(make_job(store, "a", 6), pack)
        assert saver.flush(10)
        (job,) = saver.take_finished()
        assert (job.saved, job.refused) == (2, 4)
        assert not saver.pending("a")
        saver.submit(make_job(store, "b", 2, base=50), store.pack)
        assert saver.flush(10) and store.stored.get("b1")
    finally:
        saver.close()


def test_close_flushes_queued_puts():
    store = FakeStore(16)
    store.gate = threading.Event()
    saver = BlockSaver(store.put, 16, max_chunk_slots=2)
    saver.submit(make_job(store, "a", 8), store.pack)
    threading.Timer(0.2, store.gate.set).start()
    saver.close()
    assert len(store.stored) == 8, "close returned before the queued puts were sent"
    assert saver.stats_snapshot()["abandoned_blocks"] == 0
    with pytest.raises(RuntimeError):
        saver.submit(make_job(store, "b", 1, base=50), store.pack)


def test_close_abandons_after_its_timeout():
    store = FakeStore(16)
    store.gate = threading.Event()
    saver = BlockSaver(store.put, 16, max_chunk_slots=2, close_timeout_s=0.3)
    saver.submit(make_job(store, "a", 8), store.pack)
    t0 = time.monotonic()
    saver.close()  # the first put hangs: close gives up after its timeout
    assert time.monotonic() - t0 < 5
    store.gate.set()
    saver._thread.join(5)
    assert not saver._thread.is_alive()
    st = saver.stats_snapshot()
    assert st["abandoned_blocks"] == 6 and st["saved_blocks"] == 2, st


def test_staging_must_hold_a_block():
    with pytest.raises(ValueError):
        BlockSaver(lambda p, k, f, t: (0, 0), 0)


def test_deferred_jobs_are_copied_after_submit_returns_and_in_order():
    store = FakeStore(4)
    store.gate = threading.Event()
    saver = BlockSaver(store.put, 4, max_chunk_slots=2)
    try:
        t0 = time.monotonic()
        a = make_job(store, "a", 10)
        a.pin = 7
        saver.submit(a, store.pack, deferred=True)  # 10 blocks through a 4-slot ring, puts held
        b = make_job(store, "a", 2, parent="a9", base=100, prefix="b")
        b.pin = 8
        saver.submit(b, store.pack, deferred=True)
        assert time.monotonic() - t0 < 0.2, "a deferred submit waited for the staging"
        assert saver.pending("a")
        store.gate.set()
        assert saver.flush(10)
        assert [k for _, ks in store.puts for k in ks] == [f"a{i}" for i in range(10)] + ["b0", "b1"]
        assert store.corrupt == []
        assert store.pack_threads == {"kvtier-save-packer"}
        assert [j.pin for j in saver.take_finished()] == [7, 8]
        assert not saver.pending("a")
    finally:
        store.gate.set()
        saver.close()


def test_a_job_copied_on_the_step_waits_for_the_deferred_ones_before_it():
    store = FakeStore(4)
    store.gate = threading.Event()
    saver = BlockSaver(store.put, 4, max_chunk_slots=2)
    try:
        saver.submit(make_job(store, "a", 6), store.pack, deferred=True)
        tail = make_job(store, "a", 1, parent="a5", base=50, prefix="t")
        submitter = threading.Thread(target=saver.submit, args=(tail, store.pack))
        submitter.start()
        submitter.join(0.3)
        assert submitter.is_alive(), "packed before the deferred job ahead of it"
        store.gate.set()
        submitter.join(10)
        assert saver.flush(10)
        assert [k for _, ks in store.puts for k in ks] == [f"a{i}" for i in range(6)] + ["t0"]
    finally:
        store.gate.set()
        saver.close()


def test_a_failed_deferred_copy_is_reported_and_the_saver_goes_on():
    store = FakeStore(16)
    saver = BlockSaver(store.put, 16, max_chunk_slots=2)

    def pack(blocks, first):
        if blocks[0][0] == 2:
            raise RuntimeError("injected pack failure")
        store.pack(blocks, first)

    try:
        a = make_job(store, "a", 6)
        a.pin = 1
        saver.submit(a, pack, deferred=True)
        c = make_job(store, "c", 2, base=50)
        c.pin = 2
        saver.submit(c, pack, deferred=True)
        assert saver.flush(10)
        jobs = {j.pin: j for j in saver.take_finished()}
        assert (jobs[1].saved, jobs[1].refused) == (2, 4), "the chunks after the failed copy never exist"
        assert jobs[2].saved == 2, "the next job is copied and put"
    finally:
        saver.close()


def test_close_flushes_deferred_jobs():
    store = FakeStore(4)
    saver = BlockSaver(store.put, 4, max_chunk_slots=2)
    saver.submit(make_job(store, "a", 9), store.pack, deferred=True)
    saver.close()
    assert len(store.stored) == 9, "close returned before the deferred job was copied and put"
