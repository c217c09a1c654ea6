// StoreStats as a Python dict (store.cc), shared with the daemon's binding.
#pragma once

#include "bindings.h"
#include "kvtier/store.h"

namespace kvtier::python {

py::dict StoreStatsToPython(const StoreStats& stats);

}  // namespace kvtier::python
