"""kvtier.vllm.landing.LandingSaves, the bookkeeping behind the vLLM connector's lookup deferral
(get_num_new_matched_tokens returns None while the next missing block is in a finished
request's save that has not landed): no vLLM, and a fake clock instead of waiting."""

import pytest

from kvtier.vllm.landing import LandingSaves

WAIT_S = 10.0


class FakeClock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def landing_with(saves, reporters=1):
    """A LandingSaves on a fake clock, each request in ``saves`` sent its keys and finished."""
    clock = FakeClock()
    landing = LandingSaves(WAIT_S, reporters, clock)
    for req_id, keys in saves.items():
        landing.sent(req_id, keys)
        assert landing.finished(req_id)
    return landing, clock


def test_a_finished_requests_keys_land_until_it_is_reported_sent():
    landing, _ = landing_with({"a": [b"a0", b"a1"]})
    assert landing.is_landing(b"a0") and landing.is_landing(b"a1")
    landing.landed({"a": 1})
    assert not landing.is_landing(b"a0") and not landing.is_landing(b"a1")


def test_a_running_requests_keys_are_not_landing():
    landing = LandingSaves(WAIT_S, clock=FakeClock())
    landing.sent("a", [b"a0"])
    landing.sent("a", [b"a1"])  # a later step's saves add to the request's keys
    assert not landing.is_landing(b"a0")
    assert landing.finished("a")
    assert landing.is_landing(b"a0") and landing.is_landing(b"a1")


def test_a_request_that_saved_nothing_has_nothing_to_wait_for():
    landing = LandingSaves(WAIT_S, clock=FakeClock())
    assert not landing.finished("idle")
    landing.landed({"idle": 1, "never-seen": 1})  # reports of unknown requests are ignored


def test_keys_stop_landing_after_the_wait():
    landing, clock = landing_with({"a": [b"a0"]})
    clock.now += WAIT_S - 0.001
    assert landing.is_landing(b"a0")
    clock.now += 0.001
    assert not landing.is_landing(b"a0")  # a worker that never reports holds nobody forever


def test_each_request_lands_on_its_own():
    landing, clock = landing_with({"a": [b"a0"]})
    clock.now += 5
    landing.sent("b", [b"b0"])
    assert landing.finished("b")
    assert not landing.is_landing(b"c0")  # a key no request saves
    landing.landed({"a": 1})
    assert not landing.is_landing(b"a0") and landing.is_landing(b"b0")
    clock.now += WAIT_S - 1  # past a's wait, within b's
    assert landing.is_landing(b"b0")


def test_keys_land_once_every_worker_reported():
    landing, _ = landing_with({"a": [b"a0"]}, reporters=4)
    landing.landed({"a": 2})  # two ranks in one step
    assert landing.is_landing(b"a0")
    landing.landed({"a": 1})
    assert landing.is_landing(b"a0")
    landing.landed({"a": 1, "b": 3})
    assert not landing.is_landing(b"a0")


def test_a_report_before_the_finish_does_not_count():
    landing = LandingSaves(WAIT_S, 2, FakeClock())
    landing.sent("a", [b"a0"])
    landing.landed({"a": 2})  # the request is still running: nothing of it is landing yet
    assert landing.finished("a")
    assert landing.is_landing(b"a0")


def test_requests_past_their_wait_are_forgotten():
    landing, clock = landing_with({"a": [b"a0"]})
    clock.now += WAIT_S
    assert not landing.is_landing(b"a0")
    clock.now -= WAIT_S  # were it kept, it would be landing again
    assert not landing.is_landing(b"a0")


def test_no_reporters_is_refused():
    with pytest.raises(ValueError, match="reporters"):
        LandingSaves(WAIT_S, 0)
