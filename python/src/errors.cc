// kvtier.KvtierError and one subclass per StatusCode: every non-OK Status or Result from the
// library raises one, with the code (`code`, `code_name`) and the message (`message`, and
// str() of the exception).
#include <Python.h>

#include <array>
#include <string>

#include "bindings.h"

namespace kvtier::python {
namespace {

struct ErrorClass {
  StatusCode code;
  const char* name;      // the Python class name
  PyObject* extra_base;  // a built-in it also derives from, or nullptr
};

// One per StatusCode (status.h); a code added there without a class here raises KvtierError.
const std::array<ErrorClass, 11>& ErrorClasses() {
  static const std::array<ErrorClass, 11> classes = {{
      {StatusCode::kInvalidArgument, "InvalidArgumentError", PyExc_ValueError},
      {StatusCode::kNotFound, "NotFoundError", PyExc_LookupError},
      {StatusCode::kIoError, "IoError", nullptr},
      {StatusCode::kCorruption, "CorruptionError", nullptr},
      {StatusCode::kUnsupported, "UnsupportedError", nullptr},
      {StatusCode::kResourceExhausted, "ResourceExhaustedError", nullptr},
      {StatusCode::kUnavailable, "UnavailableError", nullptr},
      {StatusCode::kInternal, "InternalError", nullptr},
      {StatusCode::kFailedPrecondition, "FailedPreconditionError", nullptr},
      {StatusCode::kAlreadyExists, "AlreadyExistsError", nullptr},
      {StatusCode::kPermissionDenied, "PermissionDeniedError", nullptr},
  }};
  return classes;
}

// Created once at import; owned by the module (references never dropped).
PyObject* g_base = nullptr;
std::array<PyObject*, 16> g_by_code{};

PyObject* NewClass(const std::string& name, PyObject* bases, const char* doc, StatusCode code, bool with_code) {
  py::dict attrs;
  if (with_code) {
    attrs["code"] = static_cast<int>(code);
    attrs["code_name"] = std::string(StatusCodeName(code));
  }
  PyObject* cls = PyErr_NewExceptionWithDoc(("kvtier." + name).c_str(), doc, bases, attrs.ptr());
  if (cls == nullptr) throw py::error_already_set();
  return cls;
}

}  // namespace

[[noreturn]] void ThrowStatus(const Status& status) {
  const auto index = static_cast<std::size_t>(status.code());
  PyObject* cls = index < g_by_code.size() && g_by_code[index] != nullptr ? g_by_code[index] : g_base;
  py::object exc = py::reinterpret_borrow<py::object>(cls)(status.message());
  exc.attr("code") = static_cast<int>(status.code());
  exc.attr("code_name") = std::string(StatusCodeName(status.code()));
  exc.attr("message") = status.message();
  PyErr_SetObject(cls, exc.ptr());
  throw py::error_already_set();
}

void BindErrors(py::module_& m) {
  g_base = NewClass("KvtierError", PyExc_Exception,
                    "An error from kvtier: `code` (int, the StatusCode), `code_name` (str) and `message`.",
                    StatusCode::kInternal, false);
  m.attr("KvtierError") = py::reinterpret_borrow<py::object>(g_base);
  for (const ErrorClass& c : ErrorClasses()) {
    py::tuple bases = c.extra_base != nullptr ? py::tuple(py::make_tuple(py::handle(g_base), py::handle(c.extra_base)))
                                              : py::tuple(py::make_tuple(py::handle(g_base)));
    const std::string doc = "kvtier StatusCode " + std::string(StatusCodeName(c.code)) + ".";
    PyObject* cls = NewClass(c.name, bases.ptr(), doc.c_str(), c.code, true);
    g_by_code[static_cast<std::size_t>(c.code)] = cls;
    m.attr(c.name) = py::reinterpret_borrow<py::object>(cls);
  }
  m.def(
      "status_code_name", [](int code) { return std::string(StatusCodeName(static_cast<StatusCode>(code))); },
      py::arg("code"), "The name of a StatusCode number (\"InvalidArgument\", ...).");
}

}  // namespace kvtier::python
