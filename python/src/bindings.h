// What the binding files of the `_kvtier` module share: Status -> Python exception, keys and
// buffers from Python objects, enum names. One concept per file: errors.cc, buffers.cc,
// sizing.cc, keys.cc, store.cc, client.cc, daemon.cc, copies.cc (docs/python.md).
//
// Rules every binding follows:
//  - A non-OK Status raises kvtier.KvtierError (or its subclass for the code), with the GIL held.
//  - Python buffers are acquired (and so pinned: a bytearray cannot resize while exported)
//    before the GIL is released, and released after it is taken back.
//  - Every call into the store, the client or the daemon that can do I/O or wait runs under
//    py::gil_scoped_release.
#pragma once

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "kvtier/block.h"
#include "kvtier/status.h"

namespace kvtier::python {

namespace py = pybind11;

void BindErrors(py::module_& m);
void BindSizing(py::module_& m);
void BindKeys(py::module_& m);
void BindStore(py::module_& m);
void BindClient(py::module_& m);
void BindDaemon(py::module_& m);
void BindCopies(py::module_& m);

// Raises the Python exception for `status` (which must not be OK). Needs the GIL.
[[noreturn]] void ThrowStatus(const Status& status);
inline void ThrowIfError(const Status& status) {
  if (!status.ok()) ThrowStatus(status);
}

// The state of a Python object over a closable kvtier object (a store, a connection). Calls
// in flight hold their own reference, so close() from another thread (or the object's
// collection) never frees it under them: it closes when the last of them returns. `what`
// names it in the error of a call after close().
template <typename T>
class ClosableHandle {
 public:
  ClosableHandle(std::shared_ptr<T> object, const char* what) : object_(std::move(object)), what_(what) {}

  std::shared_ptr<T> Get() const {
    std::shared_ptr<T> o = object_;
    if (!o) ThrowStatus(Status::FailedPrecondition(std::string(what_) + " is closed"));
    return o;
  }
  void Close() {
    std::shared_ptr<T> o = std::move(object_);
    py::gil_scoped_release release;  // closing may finish I/O in flight
    o.reset();
  }

 private:
  std::shared_ptr<T> object_;
  const char* what_;
};
template <typename T>
T ValueOrThrow(Result<T> result) {
  if (!result.ok()) ThrowStatus(result.status());
  return std::move(result).value();
}

// --- keys (keys.cc) ---
// A key from a bytes-like object of 16 bytes (or a 32-byte SHA-256 digest, whose first 16
// bytes are the key): BlockKey::FromDigestBytes. InvalidArgument otherwise.
BlockKey KeyFromPython(py::handle object, std::size_t index = 0);
std::vector<BlockKey> KeysFromPython(py::handle sequence);
std::optional<BlockKey> OptionalKeyFromPython(py::handle object);
// The inverse of FromDigestBytes: hi then lo, big-endian, 16 bytes.
py::bytes KeyToPython(const BlockKey& key);

// BlockType / TransitionType from the bound enum, its name ("user_context") or its number.
BlockType BlockTypeFromPython(py::handle object);
TransitionType TransitionTypeFromPython(py::handle object);

// Per-block values: one value for every block, or a sequence with one per block.
std::vector<uint32_t> PerBlockTokens(py::handle object, std::size_t blocks);
std::vector<BlockType> PerBlockTypes(py::handle object, std::size_t blocks);
std::vector<TransitionType> PerBlockTransitions(py::handle object, std::size_t blocks);

// --- buffers (buffers.cc) ---
// The object that exports `item`'s buffer: `item` itself through the buffer protocol (bytes,
// bytearray, memoryview, numpy arrays, array.array), or, failing that, its `.numpy()` (a torch
// CPU tensor), which the caller keeps alive while it uses the buffer. InvalidArgument naming
// `what` otherwise.
py::buffer BufferExporter(py::handle item, const std::string& what);

// Buffers of Python objects, held (exported) while this lives. Construct and destroy with the
// GIL held; the spans may be used without it.
class HeldBuffers {
 public:
  // Each object of `sequence` through the buffer protocol (bytes, bytearray, memoryview,
  // numpy arrays, array.array), or, failing that, its `.numpy()` (a torch CPU tensor).
  // C-contiguous buffers only: InvalidArgument naming the item otherwise; ReadOnly when
  // `writable` and the buffer is not.
  HeldBuffers(py::handle sequence, bool writable, const char* what);
  HeldBuffers(const HeldBuffers&) = delete;
  HeldBuffers& operator=(const HeldBuffers&) = delete;

  std::size_t size() const { return spans_.size(); }
  std::span<std::byte> operator[](std::size_t i) const { return spans_[i]; }
  const std::vector<std::span<std::byte>>& spans() const { return spans_; }
  std::vector<std::span<const std::byte>> const_spans() const { return {spans_.begin(), spans_.end()}; }

 private:
  std::vector<py::object> owners_;      // what `.numpy()` returned, kept alive
  std::vector<py::buffer_info> infos_;  // the exported buffers
  std::vector<std::span<std::byte>> spans_;
};

}  // namespace kvtier::python
