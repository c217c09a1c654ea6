// kvtier.copy_rows: many row copies between 2-D buffers in one call, with the GIL released once.
//
// Why it exists: a connector moves KV pages between an engine's per-layer tensors and a
// kvtier segment on a background thread (the vLLM connector's loader and saver). Done with
// one torch copy per layer and run of blocks, that thread must take the GIL back after every
// copy, and while the engine's own thread runs Python (its step loop) each take waits up to
// the interpreter's switch interval (5 ms): eight 4 MiB copies beside a busy Python thread
// took 43-48 ms instead of 1.6 ms on the 2-core development VM (docs/vllm.md, "Copies with
// the GIL released once"). One call here takes it back once, and copies with memmove on the
// calling thread, so no OpenMP pool is started beside the engine's.
#include <array>
#include <cstring>
#include <string>
#include <vector>

#include "bindings.h"

namespace kvtier::python {
namespace {

// A 2-D buffer of rows of bytes: rows may lie anywhere (any row stride), a row is contiguous.
struct RowTable {
  std::byte* base = nullptr;
  py::ssize_t rows = 0;
  py::ssize_t row_bytes = 0;
  py::ssize_t row_stride = 0;

  std::byte* Row(py::ssize_t i) const { return base + i * row_stride; }
};

RowTable RowsOf(const py::buffer_info& info, const std::string& what, bool writable) {
  if (writable && info.readonly) {
    ThrowStatus(Status::InvalidArgument(what + " is read-only; the destination must be writable"));
  }
  if (info.ndim != 2) {
    ThrowStatus(Status::InvalidArgument(what + " has " + std::to_string(info.ndim) +
                                        " dimensions; pass a 2-D view (rows x bytes of a row)"));
  }
  if (info.shape[1] > 1 && info.strides[1] != info.itemsize) {
    ThrowStatus(Status::InvalidArgument(what + ": the bytes of a row are not contiguous (stride " +
                                        std::to_string(info.strides[1]) + " for items of " +
                                        std::to_string(info.itemsize) + " bytes)"));
  }
  return {static_cast<std::byte*>(info.ptr), info.shape[0], info.shape[1] * info.itemsize, info.strides[0]};
}

struct RowCopy {
  std::byte* dst;
  const std::byte* src;
  std::size_t bytes;
};

std::string RunName(const std::string& item, std::size_t r) { return item + " run " + std::to_string(r); }

// (dst_row, src_row, count) of a run of `item`; InvalidArgument naming it otherwise. Runs can
// number thousands a call (a block a run where block ids are scattered): no allocation here.
std::array<py::ssize_t, 3> RunOf(py::handle run, const std::string& item, std::size_t r) {
  std::array<py::ssize_t, 3> v{};
  bool ok = py::isinstance<py::sequence>(run) && !py::isinstance<py::str>(run) && py::len(run) == 3;
  if (ok) {
    const auto seq = py::reinterpret_borrow<py::sequence>(run);
    for (std::size_t k = 0; ok && k < v.size(); ++k) {
      try {  // ints and objects with __index__ (numpy's integers); not floats or strings
        v[k] = py::object(seq[k]).cast<py::ssize_t>();
      } catch (const py::cast_error&) {
        ok = false;
      }
    }
  }
  if (!ok) ThrowStatus(Status::InvalidArgument(RunName(item, r) + " must be (dst_row, src_row, count) of ints"));
  return v;
}

// Appends the copies of one (dst, src, runs) item, each run checked against both tables.
void PlanItem(const RowTable& dst, const RowTable& src, py::handle runs, const std::string& what,
              std::vector<RowCopy>* plan) {
  if (dst.row_bytes != src.row_bytes) {
    ThrowStatus(Status::InvalidArgument(what + ": rows of " + std::to_string(dst.row_bytes) + " bytes (dst) and " +
                                        std::to_string(src.row_bytes) + " (src) differ"));
  }
  const auto bytes = static_cast<std::size_t>(dst.row_bytes);
  // Rows side by side in both tables copy as one run of bytes.
  const bool packed = dst.row_stride == dst.row_bytes && src.row_stride == src.row_bytes;
  if (!py::isinstance<py::sequence>(runs) || py::isinstance<py::str>(runs)) {
    ThrowStatus(Status::InvalidArgument(what + ": runs must be a sequence of (dst_row, src_row, count)"));
  }
  std::size_t r = 0;
  for (py::handle run : runs) {
    const auto [d, s, n] = RunOf(run, what, r);
    if (n < 0 || d < 0 || s < 0 || d > dst.rows - n || s > src.rows - n) {
      ThrowStatus(Status::InvalidArgument(RunName(what, r) + " (" + std::to_string(d) + ", " + std::to_string(s) +
                                          ", " + std::to_string(n) + ") is outside dst's " +
                                          std::to_string(dst.rows) + " or src's " + std::to_string(src.rows) +
                                          " rows"));
    }
    ++r;
    if (packed) {
      if (n > 0) plan->push_back({dst.Row(d), src.Row(s), bytes * static_cast<std::size_t>(n)});
      continue;
    }
    for (py::ssize_t j = 0; j < n; ++j) plan->push_back({dst.Row(d + j), src.Row(s + j), bytes});
  }
}

void CopyRows(py::handle copies) {
  if (!py::isinstance<py::sequence>(copies) || py::isinstance<py::str>(copies)) {
    ThrowStatus(Status::InvalidArgument("copies must be a sequence of (dst, src, runs)"));
  }
  std::vector<py::buffer> exporters;  // torch tensors' numpy() views stay alive until the end
  std::vector<py::buffer_info> held;  // exported (pinned) until the copies are done
  std::vector<RowCopy> plan;
  std::size_t i = 0;
  for (py::handle item : copies) {
    const std::string what = "copies[" + std::to_string(i++) + "]";
    if (!py::isinstance<py::sequence>(item) || py::isinstance<py::str>(item) || py::len(item) != 3) {
      ThrowStatus(Status::InvalidArgument(what + " must be (dst, src, runs)"));
    }
    const auto parts = py::reinterpret_borrow<py::sequence>(item);
    exporters.push_back(BufferExporter(parts[0], what + ".dst"));
    held.push_back(exporters.back().request(false));
    const RowTable dst = RowsOf(held.back(), what + ".dst", true);
    exporters.push_back(BufferExporter(parts[1], what + ".src"));
    held.push_back(exporters.back().request(false));
    const RowTable src = RowsOf(held.back(), what + ".src", false);
    PlanItem(dst, src, parts[2], what, &plan);
  }
  py::gil_scoped_release release;
  for (const RowCopy& c : plan) std::memmove(c.dst, c.src, c.bytes);
}

}  // namespace

void BindCopies(py::module_& m) {
  m.def("copy_rows", &CopyRows, py::arg("copies"),
        "For each (dst, src, runs) of copies, and each (dst_row, src_row, count) of runs: copies rows "
        "src[src_row:src_row + count] into dst[dst_row:dst_row + count]. dst and src are 2-D buffers "
        "(numpy arrays, memoryviews, torch CPU tensors) whose rows hold the same number of bytes, each "
        "row contiguous, the rows at any stride. Every run is checked before anything is copied; the "
        "copies run with the GIL released, on the calling thread. Raises InvalidArgumentError.");
}

}  // namespace kvtier::python
