// Python buffers as spans, without copying: the buffer protocol (bytes, bytearray, memoryview,
// numpy arrays, array.array), or `.numpy()` for objects that only offer that (torch CPU
// tensors). Only C-contiguous buffers qualify: a block is one run of bytes.
#include <string>

#include "bindings.h"

namespace kvtier::python {
namespace {

bool CContiguous(const py::buffer_info& info) {
  py::ssize_t expected = info.itemsize;
  for (py::ssize_t d = info.ndim - 1; d >= 0; --d) {
    const auto i = static_cast<std::size_t>(d);
    if (info.shape[i] == 0) return true;  // empty: any strides
    if (info.shape[i] != 1 && info.strides[i] != expected) return false;
    expected *= info.shape[i];
  }
  return true;
}

std::string Item(const char* what, std::size_t i) { return std::string(what) + "[" + std::to_string(i) + "]"; }

}  // namespace

py::buffer BufferExporter(py::handle item, const std::string& what) {
  py::object object = py::reinterpret_borrow<py::object>(item);
  if (PyObject_CheckBuffer(object.ptr()) == 0 && py::hasattr(object, "numpy")) {
    object = object.attr("numpy")();  // a torch CPU tensor: numpy() shares its memory
  }
  if (PyObject_CheckBuffer(object.ptr()) == 0) {
    ThrowStatus(Status::InvalidArgument(what + " (" + std::string(py::str(py::type::handle_of(item))) +
                                        ") does not support the buffer protocol; pass bytes, bytearray, "
                                        "memoryview or a numpy array"));
  }
  return py::reinterpret_steal<py::buffer>(object.release());
}

HeldBuffers::HeldBuffers(py::handle sequence, bool writable, const char* what) {
  if (!py::isinstance<py::sequence>(sequence) || py::isinstance<py::str>(sequence) ||
      PyObject_CheckBuffer(sequence.ptr()) != 0) {
    ThrowStatus(Status::InvalidArgument(std::string(what) + " must be a sequence (list or tuple) of buffers"));
  }
  auto seq = py::reinterpret_borrow<py::sequence>(sequence);
  const std::size_t n = seq.size();
  infos_.reserve(n);
  spans_.reserve(n);
  for (std::size_t i = 0; i < n; ++i) {
    py::object item = seq[i];
    py::buffer exporter = BufferExporter(item, Item(what, i));
    if (!exporter.is(item)) owners_.push_back(exporter);
    py::buffer_info info = exporter.request(false);
    if (writable && info.readonly) {
      ThrowStatus(Status::InvalidArgument(Item(what, i) + " is read-only; pass a writable buffer (bytearray, "
                                                          "numpy array, memoryview of one)"));
    }
    if (!CContiguous(info)) {
      ThrowStatus(Status::InvalidArgument(Item(what, i) + " is not C-contiguous; pass a contiguous copy "
                                                          "(numpy.ascontiguousarray, tensor.contiguous())"));
    }
    const auto bytes = static_cast<std::size_t>(info.size * info.itemsize);
    spans_.emplace_back(static_cast<std::byte*>(info.ptr), bytes);
    infos_.push_back(std::move(info));
  }
}

}  // namespace kvtier::python
