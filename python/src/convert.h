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

// mooncake.WritePlan: a plan from open_for_write, and how it was used, so
// that write_plan refuses a plan whose space is no longer the writer's
// (committed: it is the published object; revoked or refused by the
// cluster: the space may hold another object by now).
struct PlanHandle {
  enum class State { kOpen, kCommitted, kRevoked, kInvalid };
  WritePlan plan;
  State state = State::kOpen;
};
// "open", "committed", "revoked" or "invalid".
const char* StateName(PlanHandle::State state);

// MemoryRegion, WritePlan (PlanHandle) and ObjectPlacement: read-only
// classes.
void BindPlanTypes(pybind11::module_& m);

}  // namespace mooncake::python
