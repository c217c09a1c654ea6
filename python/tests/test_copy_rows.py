"""kvtier.copy_rows: row copies between 2-D buffers at any row stride, every run checked before
anything is copied, the GIL released while it copies."""

import numpy as np
import pytest

import kvtier
from conftest import ran_python_during


def pages(rows, page, seed):
    return np.random.default_rng(seed).integers(0, 256, size=(rows, page), dtype=np.uint8)


def test_rows_land_where_the_runs_say_and_nothing_else_changes():
    # A layer's KV tensor (pages 64 bytes apart, 48 used) and a staging table whose blocks hold
    # two layers (the second layer's page at byte 48): the connector's shapes in small.
    layer = np.zeros((10, 64), dtype=np.uint8)
    layer_pages = layer[:, :48]
    staging = pages(4, 96, seed=1)
    kvtier.copy_rows([(layer_pages, staging[:, 48:], [(6, 0, 2), (2, 2, 2)])])
    assert np.array_equal(layer_pages[6:8], staging[0:2, 48:])
    assert np.array_equal(layer_pages[2:4], staging[2:4, 48:])
    untouched = [r for r in range(10) if r not in (2, 3, 6, 7)]
    assert not layer[untouched].any() and not layer[:, 48:].any()


def test_several_items_one_call_and_back_again():
    layers = [pages(8, 32, seed=s) for s in range(3)]
    staging = np.zeros((5, 96), dtype=np.uint8)
    runs = [(0, 3, 2), (2, 0, 3)]  # (staging row, layer row, count)
    kvtier.copy_rows([(staging[:, 32 * j:32 * (j + 1)], layers[j], runs) for j in range(3)])
    for j, layer in enumerate(layers):
        assert np.array_equal(staging[0:2, 32 * j:32 * (j + 1)], layer[3:5])
        assert np.array_equal(staging[2:5, 32 * j:32 * (j + 1)], layer[0:3])
    back = [np.zeros_like(layer) for layer in layers]
    kvtier.copy_rows([(back[j], staging[:, 32 * j:32 * (j + 1)], [(3, 0, 2), (0, 2, 3)]) for j in range(3)])
    for layer, copy in zip(layers, back):
        assert np.array_equal(copy[:5], layer[:5])


def test_contiguous_tables_and_wider_items():
    src = np.arange(64, dtype=np.uint32).reshape(8, 8)
    dst = np.zeros((8, 8), dtype=np.uint32)
    kvtier.copy_rows([(dst, src, [(1, 4, 3), (np.int64(7), 0, 1), (0, 0, 0)])])
    assert np.array_equal(dst[1:4], src[4:7]) and np.array_equal(dst[7], src[0])
    assert not dst[[0, 4, 5, 6]].any()
    out = bytearray(32)
    kvtier.copy_rows([(memoryview(out).cast("B", [4, 8]), src.view(np.uint8).reshape(16, 16)[:, 8:], [(0, 2, 4)])])
    assert out == src.view(np.uint8).reshape(16, 16)[2:6, 8:].tobytes()


@pytest.mark.parametrize("copies, message", [
    ("not a list", "sequence"),
    ([(np.zeros((2, 8), np.uint8), np.zeros((2, 8), np.uint8))], "(dst, src, runs)"),
    ([(np.zeros((2, 8), np.uint8), np.zeros((2, 4), np.uint8), [(0, 0, 1)])], "differ"),
    ([(np.zeros((2, 8), np.uint8), np.zeros((2, 8), np.uint8), [(0, 1, 2)])], "outside"),
    ([(np.zeros((2, 8), np.uint8), np.zeros((2, 8), np.uint8), [(-1, 0, 1)])], "outside"),
    ([(np.zeros((2, 8), np.uint8), np.zeros((2, 8), np.uint8), [(0, 0, -1)])], "outside"),
    ([(np.zeros((2, 8), np.uint8), np.zeros((2, 8), np.uint8), [(0, 0)])], "(dst_row, src_row, count)"),
    ([(np.zeros((2, 8), np.uint8), np.zeros((2, 8), np.uint8), [(0, 0, "1")])], "(dst_row, src_row, count)"),
    ([(np.zeros((2, 8), np.uint8), np.zeros((2, 8), np.uint8), [(0, 0, 1.0)])], "(dst_row, src_row, count)"),
    ([(np.zeros((2, 8), np.uint8), np.zeros((2, 8), np.uint8), [(0, 0, 1 << 70)])], "(dst_row, src_row, count)"),
    ([(np.zeros((2, 8), np.uint8), np.zeros((2, 8), np.uint8), 3)], "runs must be a sequence"),
    ([3], "(dst, src, runs)"),
    ([(np.zeros(16, np.uint8), np.zeros((2, 8), np.uint8), [(0, 0, 1)])], "2-D"),
    ([(np.zeros((2, 16), np.uint8)[:, ::2], np.zeros((2, 8), np.uint8), [(0, 0, 1)])], "not contiguous"),
    ([(bytes(16), np.zeros((2, 8), np.uint8), [(0, 0, 1)])], "read-only"),
    ([(np.zeros((2, 8), np.uint8), "text", [(0, 0, 1)])], "buffer protocol"),
])
def test_bad_copies_are_refused(copies, message):
    with pytest.raises(kvtier.InvalidArgumentError, match=message.replace("(", r"\(").replace(")", r"\)")):
        kvtier.copy_rows(copies)


def test_a_bad_run_anywhere_copies_nothing():
    src = pages(4, 16, seed=2)
    first, second = np.zeros((4, 16), np.uint8), np.zeros((4, 16), np.uint8)
    with pytest.raises(kvtier.InvalidArgumentError, match=r"copies\[1\] run 1"):
        kvtier.copy_rows([(first, src, [(0, 0, 4)]), (second, src, [(0, 0, 1), (3, 0, 2)])])
    assert not first.any() and not second.any()


def test_gil_released_while_copying():
    src = pages(64, 1 << 20, seed=3)  # 64 MiB
    dst = np.zeros_like(src)
    assert ran_python_during(lambda: kvtier.copy_rows([(dst, src, [(0, 0, 64)])])), \
        "no Python thread ran during copy_rows: the GIL was held"
    assert np.array_equal(dst, src)
