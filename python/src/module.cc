// The `_kvtier` extension module; the package `kvtier` (python/kvtier/__init__.py) re-exports
// it. docs/python.md describes the API.
#include "bindings.h"

PYBIND11_MODULE(_kvtier, m) {
  namespace kp = kvtier::python;
  m.doc() = "kvtier: a tiered KV-cache store (bindings of the C++ library)";
  kp::BindErrors(m);
  kp::BindKeys(m);
  kp::BindSizing(m);
  kp::BindStore(m);
  kp::BindClient(m);
  kp::BindDaemon(m);
  kp::BindCopies(m);
}
