// Plain C++ results as Python values: counters and inspections become
// dicts (JSON-friendly, printable); plans and placements, which callers
// pass back, become read-only classes.

#include "python/src/convert.h"

#include <pybind11/stl.h>

#include <string>

namespace py = pybind11;
using namespace pybind11::literals;

namespace mooncake::python {

py::bytes NewBytes(std::string_view data) {
  PyObject* bytes = PyBytes_FromStringAndSize(data.data(), static_cast<Py_ssize_t>(data.size()));
  if (bytes == nullptr) throw py::error_already_set();
  return py::reinterpret_steal<py::bytes>(bytes);
}

py::dict TierUsageDict(const TierUsage& t) {
  return py::dict("name"_a = t.name, "kind"_a = t.kind, "capacity"_a = t.capacity,
                  "used"_a = t.used, "objects"_a = t.objects);
}

py::dict NodeDict(const NodeRecord& n) {
  py::list tiers;
  for (const auto& t : n.tiers) tiers.append(TierUsageDict(t));
  return py::dict("node_id"_a = n.node_id, "host"_a = n.host, "port"_a = n.port,
                  "alive"_a = n.alive, "last_heartbeat_ms"_a = n.last_heartbeat_ms,
                  "free_bytes"_a = n.free_bytes(), "tiers"_a = tiers);
}

py::dict StatsDict(const WorkerCounters& w) {
  py::list tiers;
  for (const auto& t : w.tiers) {
    py::dict d = TierUsageDict(t.usage);
    d["hits"] = t.hits;
    d["promotions_in"] = t.promotions_in;
    d["demotions_out"] = t.demotions_out;
    d["evictions"] = t.evictions;
    tiers.append(d);
  }
  return py::dict(
      "node_id"_a = w.node_id, "tiers"_a = tiers, "gets"_a = w.gets, "get_misses"_a = w.get_misses,
      "puts"_a = w.puts, "removes"_a = w.removes, "dropped"_a = w.dropped, "upserts"_a = w.upserts,
      "prefetch_started"_a = w.prefetch_started, "prefetch_succeeded"_a = w.prefetch_succeeded,
      "prefetch_failed"_a = w.prefetch_failed, "prefetch_skipped"_a = w.prefetch_skipped,
      "moved_out"_a = w.moved_out, "moved_in"_a = w.moved_in, "pinned_bytes"_a = w.pinned_bytes);
}

py::dict InspectDict(const ObjectInspection& o) {
  return py::dict("node_id"_a = o.node_id, "tier"_a = o.tier, "offset"_a = o.offset,
                  "size"_a = o.size, "version"_a = o.version, "hard_pinned"_a = o.hard_pinned,
                  "soft_pinned"_a = o.soft_pinned, "state"_a = o.state, "readers"_a = o.readers,
                  "lease_remaining_ms"_a = o.lease_remaining_ms, "idle_ms"_a = o.idle_ms);
}

py::dict HotCacheDict(const HotCacheCounters& h) {
  return py::dict("hits"_a = h.hits, "misses"_a = h.misses, "validations"_a = h.validations,
                  "stale"_a = h.stale, "bytes"_a = h.bytes, "entries"_a = h.entries);
}

py::dict TransportDict(const TransportCounters& t) {
  return py::dict(
      "rdma_gets"_a = t.rdma_gets, "rdma_bytes"_a = t.rdma_bytes,
      "rdma_fallbacks"_a = t.rdma_fallbacks, "rdma_enabled"_a = t.rdma_enabled,
      "rdma_reason"_a = t.rdma_reason, "async_gets_pipelined"_a = t.async_gets_pipelined,
      "async_gets_slow"_a = t.async_gets_slow, "async_connections"_a = t.async_connections,
      "async_puts"_a = t.async_puts, "async_put_batches"_a = t.async_put_batches,
      "combined_gets"_a = t.combined_gets, "combined_get_batches"_a = t.combined_get_batches,
      "combined_puts"_a = t.combined_puts, "combined_put_batches"_a = t.combined_put_batches,
      "combining_waiters"_a = t.combining_waiters);
}

const char* KindName(MemoryRegionHandle::Kind kind) {
  switch (kind) {
    case MemoryRegionHandle::Kind::kHostFile:
      return "host_file";
    case MemoryRegionHandle::Kind::kDeviceIpc:
      return "device_ipc";
    case MemoryRegionHandle::Kind::kNone:
      break;
  }
  return "none";
}

const char* StateName(PlanHandle::State state) {
  switch (state) {
    case PlanHandle::State::kOpen:
      return "open";
    case PlanHandle::State::kCommitted:
      return "committed";
    case PlanHandle::State::kRevoked:
      return "revoked";
    case PlanHandle::State::kInvalid:
      break;
  }
  return "invalid";
}

void BindPlanTypes(py::module_& m) {
  py::class_<MemoryRegionHandle>(m, "MemoryRegion",
                                 "How a process on the worker's node reaches a memory tier.")
      .def_property_readonly("kind", [](const MemoryRegionHandle& h) { return KindName(h.kind); })
      .def_readonly("path", &MemoryRegionHandle::path)
      .def_property_readonly("ipc_handle",
                             [](const MemoryRegionHandle& h) { return NewBytes(h.ipc_handle); })
      .def_readonly("device_index", &MemoryRegionHandle::device_index)
      .def_readonly("region_size", &MemoryRegionHandle::region_size)
      .def_readonly("machine_id", &MemoryRegionHandle::machine_id)
      .def("__repr__", [](const MemoryRegionHandle& h) {
        return "MemoryRegion(kind=" + std::string(KindName(h.kind)) + ", path='" + h.path +
               "', region_size=" + std::to_string(h.region_size) + ")";
      });
  py::class_<PlanHandle>(m, "WritePlan",
                         "A reservation from open_for_write: write_plan, then commit or revoke "
                         "it, once.")
      .def_property_readonly("key", [](const PlanHandle& p) { return p.plan.key; })
      .def_property_readonly("node_id", [](const PlanHandle& p) { return p.plan.node_id; })
      .def_property_readonly("tier", [](const PlanHandle& p) { return p.plan.tier; })
      .def_property_readonly(
          "memory", [](const PlanHandle& p) -> const MemoryRegionHandle& { return p.plan.memory; })
      .def_property_readonly("offset", [](const PlanHandle& p) { return p.plan.offset; })
      .def_property_readonly("size", [](const PlanHandle& p) { return p.plan.size; })
      .def_property_readonly("epoch", [](const PlanHandle& p) { return p.plan.epoch; })
      .def_property_readonly("timeout_ms", [](const PlanHandle& p) { return p.plan.timeout_ms; })
      .def_property_readonly(
          "state", [](const PlanHandle& p) { return StateName(p.state); },
          "'open' until commit or revoke succeeds ('committed', 'revoked') or the cluster "
          "refuses the plan ('invalid': pre-empted, discarded after timeout_ms, or used up); "
          "write_plan takes only an open plan.")
      .def("__repr__", [](const PlanHandle& h) {
        const WritePlan& p = h.plan;
        return "WritePlan(key='" + p.key + "', node_id='" + p.node_id + "', tier='" + p.tier +
               "', offset=" + std::to_string(p.offset) + ", size=" + std::to_string(p.size) +
               ", epoch=" + std::to_string(p.epoch) + ", state=" + StateName(h.state) + ")";
      });
  py::class_<ObjectPlacement>(m, "ObjectPlacement", "Where an object lives (get_location).")
      .def_readonly("node_id", &ObjectPlacement::node_id)
      .def_readonly("tier", &ObjectPlacement::tier)
      .def_readonly("memory", &ObjectPlacement::memory)
      .def_readonly("offset", &ObjectPlacement::offset)
      .def_readonly("size", &ObjectPlacement::size)
      .def_readonly("version", &ObjectPlacement::version)
      .def_readonly("hold_ms", &ObjectPlacement::hold_ms)
      .def("__repr__", [](const ObjectPlacement& p) {
        return "ObjectPlacement(node_id='" + p.node_id + "', tier='" + p.tier +
               "', offset=" + std::to_string(p.offset) + ", size=" + std::to_string(p.size) +
               ", version=" + std::to_string(p.version) + ")";
      });
}

}  // namespace mooncake::python
