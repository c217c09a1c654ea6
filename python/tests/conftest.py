"""Fixtures of the kvtier Python tests: small tier configurations, an in-process store and
an in-process `kvtier serve`. Run with PYTHONPATH=<build>/python (ctest's python.pytest sets
it, and KVTIER_CLI to the CLI binary)."""

import os
import pathlib
import shutil
import sys
import threading
import time

import pytest

import kvtier

REPO = pathlib.Path(__file__).resolve().parents[2]
FIXTURES = pathlib.Path(os.environ.get("KVTIER_FIXTURES", REPO / "tests" / "fixtures"))


def tier_yaml(data_dir, dram="256MiB", disk="256MiB"):
    """A DRAM tier over a small NVMe slab file under data_dir."""
    return f"""
data_dir: {data_dir}
tiers:
  - kind: cpu_dram
    capacity: {dram}
    lock_memory: false
  - kind: nvme
    name: disk
    files: [disk/slab.0]
    capacity: {disk}
"""


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.when == "call":
        item.kvtier_passed = report.passed


@pytest.fixture(autouse=True)
def _remove_a_passed_tests_folder(request, tmp_path):
    """Every store and daemon here preallocates a 256 MiB NVMe slab under tmp_path, and pytest
    keeps the folders of its last three runs: a machine that ran the suite a few times held
    57 GB of them, and the next run failed with a full disk. A passed test's folder goes once
    its other fixtures are torn down (this one is set up before them, so it is torn down after
    them); a failed test's stays for a look. Asking for tmp_path makes it outlive this fixture."""
    yield
    if getattr(request.node, "kvtier_passed", False):
        shutil.rmtree(tmp_path, ignore_errors=True)


@pytest.fixture
def store(tmp_path):
    with kvtier.Store(tier_config_text=tier_yaml(tmp_path / "data"), policy="lru") as s:
        yield s


def serve_yaml(data_dir, tenants=None):
    text = tier_yaml(data_dir, dram="512MiB") + """
store:
  policy: bayes
  persistence: none
listen:
  unix_socket: kvtier.sock
  tcp: true
  tcp_port: 0
  metrics_port: -1
"""
    if tenants:
        text += "tenants:\n" + "".join(f"  - name: {t}\n" for t in tenants)
    return text


@pytest.fixture
def daemon(tmp_path):
    with kvtier.serve(config_text=serve_yaml(tmp_path / "srv")) as d:
        yield d


def ran_python_during(call, attempts=10) -> bool:
    """Whether another Python thread ran while `call()` was inside the extension: the proof that
    the call released the GIL. With a long switch interval the interpreter never preempts the
    calling thread on its own, so a counter thread can only run while the call has released the
    GIL: a timestamp it records inside a call's [start, end] window proves the release."""
    stamps = []
    stop = False

    def counter():
        n = 0
        while not stop:
            n += 1
            if n % 50 == 0:
                stamps.append(time.perf_counter_ns())
                time.sleep(0)

    old = sys.getswitchinterval()
    sys.setswitchinterval(0.25)
    thread = threading.Thread(target=counter)
    thread.start()
    try:
        for _ in range(attempts):
            time.sleep(0.002)  # let the counter run, then take the GIL back
            start = time.perf_counter_ns()
            call()
            end = time.perf_counter_ns()
            if any(start < t < end for t in list(stamps)):
                return True
        return False
    finally:
        stop = True
        thread.join()
        sys.setswitchinterval(old)
