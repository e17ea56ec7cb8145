#pragma once

// Conversions of client results into Python values (python/src/convert.cc).
//
// Thread-safety: every function needs the GIL.

#include <pybind11/pybind11.h>

#include <string_view>

#include "client/client.h"
#include "common/node.h"

namespace mooncake::python {

// A new bytes object of `data`. When it cannot be allocated this raises
// Python's MemoryError (pybind11::error_already_set), where py::bytes
// would throw a std::runtime_error ("Could not allocate bytes object!"),
// seen as RuntimeError, and fatal on a client thread.
pybind11::bytes NewBytes(std::string_view data);

pybind11::dict TierUsageDict(const TierUsage& t);
pybind11::dict NodeDict(const NodeRecord& n);
pybind11::dict StatsDict(const WorkerCounters& w);
pybind11::dict InspectDict(const ObjectInspection& o);
pybind11::dict HotCacheDict(const HotCacheCounters& h);
pybind11::dict TransportDict(const TransportCounters& t);
// "host_file", "device_ipc" or "none".
const char* KindName(MemoryRegionHandle::Kind kind);

// MemoryRegion, WritePlan and ObjectPlacement: read-only classes.
void BindPlanTypes(pybind11::module_& m);

}  // namespace mooncake::python
