// mooncake._mooncake: the Python binding of mooncake::Client (client/client.h).
//
// Conventions kept by every method (docs/python.md has the user's view):
//  * Errors: C++ results are std::expected; the binding turns an error into
//    mooncake.Error at this boundary. Batch calls never raise for one key:
//    they answer one entry per key, a value or an Error instance (like
//    asyncio.gather(return_exceptions=True)). The Mooncake-named calls
//    (is_exist, batch_is_exist, batch_put_from, batch_get_into and
//    batch_upsert_from) answer integer codes as Mooncake's do.
//  * Buffers: values are read from, and get_into writes into, any
//    C-contiguous buffer-protocol object without an intermediate bytes.
//  * The GIL is released around every call that talks to the cluster, so
//    Python threads overlap their network waits.

#include <pthread.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "client/client.h"
#include "client/shared_mapping.h"
#include "common/log.h"
#include "python/src/async_calls.h"
#include "python/src/buffer_view.h"
#include "python/src/convert.h"
#include "python/src/errors.h"
#include "python/src/gil.h"
#include "python/src/py_client.h"

namespace py = pybind11;
using namespace pybind11::literals;

namespace mooncake::python {
namespace {

// ---- Values and buffers -----------------------------------------------

// A sequence's __getitem__ may make a new object per access (a row of a
// numpy or ctypes 2-D array, a custom sequence's fresh bytearray), owned by
// nobody else: each item is held as an object until its view is taken,
// and the view's own reference keeps it alive after that. (Iterating with
// py::handle would borrow from a temporary that frees the item at once.)
std::vector<ValueView> ValueViews(const py::sequence& values) {
  std::vector<ValueView> views;
  const size_t n = values.size();
  views.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    py::object item = values[i];
    views.emplace_back(item);
  }
  return views;
}

std::vector<BufferView> WritableViews(const py::sequence& buffers) {
  std::vector<BufferView> views;
  const size_t n = buffers.size();
  views.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    py::object item = buffers[i];
    views.emplace_back(item, /*writable=*/true);
  }
  return views;
}

void CheckSameLength(const std::vector<std::string>& keys, size_t other, const char* what) {
  if (keys.size() == other) return;
  RaiseError(ErrorCode::kInvalidParams, std::string(what) + ": " + std::to_string(keys.size()) +
                                            " keys but " + std::to_string(other) + " values");
}

// ---- Results ------------------------------------------------------------

template <typename T>
T Unwrap(Result<T> result, std::string_view op, std::string_view key) {
  if (!result) RaiseError(result.error(), Describe(op, key));
  return std::move(*result);
}

void Check(const Result<void>& result, std::string_view op, std::string_view key) {
  if (!result) RaiseError(result.error(), Describe(op, key));
}

int32_t CodeOf(ErrorCode code) { return static_cast<int32_t>(code); }

// One entry per key: `ok(value)` or an Error instance.
template <typename T, typename Ok>
py::list PerKey(const std::vector<Result<T>>& results, const std::vector<std::string>& keys,
                std::string_view op, Ok&& ok) {
  py::list out(results.size());
  for (size_t i = 0; i < results.size(); ++i) {
    if (!results[i]) {
      out[i] = MakeError(results[i].error(), Describe(op, keys[i]));
    } else if constexpr (std::is_void_v<T>) {
      out[i] = ok();
    } else {
      out[i] = ok(*results[i]);
    }
  }
  return out;
}

// Mooncake's convention for writes: 0 or a negative ErrorCode per key.
py::list Codes(const std::vector<Result<void>>& results) {
  py::list out(results.size());
  for (size_t i = 0; i < results.size(); ++i) {
    out[i] = results[i] ? 0 : CodeOf(results[i].error());
  }
  return out;
}

// ---- The client ------------------------------------------------------------

// "host:port" or "host" (port 50051).
std::pair<std::string, int> ParseMaster(const std::string& text) {
  auto colon = text.rfind(':');
  if (colon == std::string::npos) return {text, 50051};
  std::string host = text.substr(0, colon);
  std::string port = text.substr(colon + 1);
  char* end = nullptr;
  long value = std::strtol(port.c_str(), &end, 10);
  if (host.empty() || port.empty() || *end != '\0' || value <= 0 || value > 65535) {
    RaiseError(ErrorCode::kInvalidParams,
               "master '" + text + "': expected HOST:PORT with a port in 1..65535");
  }
  return {host, static_cast<int>(value)};
}

std::unique_ptr<PyClient> MakeClient(
    std::optional<std::string> master, std::string etcd, std::string cluster_name,
    int64_t leader_wait_ms, std::string local_node, int64_t pick_reuse_ms, int connect_timeout_ms,
    int io_timeout_ms, int rpc_poll_us, int combined_calls_in_flight, uint64_t location_cache_bytes,
    uint64_t hot_cache_bytes, uint64_t hot_cache_validate_min_bytes,
    int64_t hot_cache_max_staleness_ms, std::string rdma, std::string rdma_device,
    uint64_t rdma_min_bytes, std::string tls_cert, std::string tls_key, std::string tls_ca) {
  if (!master) {
    const char* env = std::getenv("MOONCAKE_MASTER");
    master = env && *env ? env : "127.0.0.1:50051";
  }
  ClientConfig config;
  std::tie(config.master_host, config.master_port) = ParseMaster(*master);
  config.etcd_endpoints = std::move(etcd);
  config.cluster_name = std::move(cluster_name);
  config.leader_wait_ms = leader_wait_ms;
  config.local_node = std::move(local_node);
  config.pick_reuse_ms = pick_reuse_ms;
  config.connect_timeout_ms = connect_timeout_ms;
  config.io_timeout_ms = io_timeout_ms;
  config.rpc_poll_us = rpc_poll_us;
  config.combined_calls_in_flight = combined_calls_in_flight;
  config.location_cache_bytes = location_cache_bytes;
  config.local_hot_cache_bytes = hot_cache_bytes;
  config.hot_cache_validate_min_bytes = hot_cache_validate_min_bytes;
  config.hot_cache_max_staleness_ms = hot_cache_max_staleness_ms;
  config.rdma = std::move(rdma);
  config.rdma_device = std::move(rdma_device);
  config.rdma_min_bytes = rdma_min_bytes;
  config.tls = TlsSettings{std::move(tls_cert), std::move(tls_key), std::move(tls_ca)};
  Result<std::unique_ptr<Client>> client;
  {
    ReleaseGil nogil;
    client = Client::Create(config);
  }
  if (!client) {
    RaiseError(client.error(), config.etcd_endpoints.empty()
                                   ? "connect to master '" + *master + "'"
                                   : "find the leader of cluster '" + config.cluster_name +
                                         "' in etcd '" + config.etcd_endpoints + "'");
  }
  return std::make_unique<PyClient>(std::move(*client));
}

PutOptions Options(bool hard_pin, bool soft_pin, int64_t soft_pin_ttl_ms,
                   std::string preferred_node, std::string preferred_tier) {
  return PutOptions{hard_pin, soft_pin, soft_pin_ttl_ms, std::move(preferred_node),
                    std::move(preferred_tier)};
}

// The keyword arguments every write takes (PutOptions).
#define MOONCAKE_PUT_OPTIONS                                                     \
  py::kw_only(), py::arg("hard_pin") = false, py::arg("soft_pin") = false,       \
                 py::arg("soft_pin_ttl_ms") = 0, py::arg("preferred_node") = "", \
                 py::arg("preferred_tier") = ""

void Write(PyClient& self, const std::string& key, py::handle value, const PutOptions& options,
           bool upsert) {
  auto client = self.get();
  ValueView view(value);
  Result<void> result;
  {
    ReleaseGil nogil;
    result = upsert ? client->Upsert(key, view.bytes(), options)
                    : client->Put(key, view.bytes(), options);
  }
  Check(result, upsert ? "upsert" : "put", key);
}

py::bytes Get(PyClient& self, const std::string& key) {
  auto client = self.get();
  Result<ObjectValue> value;
  {
    ReleaseGil nogil;
    value = client->Get(key);
  }
  return NewBytes(Unwrap(std::move(value), "get", key).data);
}

uint64_t GetInto(PyClient& self, const std::string& key, py::handle buffer) {
  auto client = self.get();
  BufferView view(buffer, /*writable=*/true);
  Result<uint64_t> size;
  uint64_t needed = 0;
  {
    ReleaseGil nogil;
    size = client->GetInto(key, view.writable(), &needed);
  }
  if (!size && size.error() == ErrorCode::kInvalidParams && needed > view.size()) {
    RaiseError(ErrorCode::kInvalidParams, Describe("get_into", key) + ": the value has " +
                                              std::to_string(needed) + " bytes, the buffer " +
                                              std::to_string(view.size()));
  }
  return Unwrap(std::move(size), "get_into", key);
}

bool Exist(PyClient& self, const std::string& key, bool prefetch) {
  auto client = self.get();
  Result<bool> found;
  {
    ReleaseGil nogil;
    found = client->Exist(key, prefetch);
  }
  return Unwrap(std::move(found), "exist", key);
}

// Mooncake's is_exist: 1, 0, or a negative ErrorCode.
int32_t IsExist(PyClient& self, const std::string& key, bool prefetch) {
  auto client = self.get();
  Result<bool> found;
  {
    ReleaseGil nogil;
    found = client->Exist(key, prefetch);
  }
  return found ? (*found ? 1 : 0) : CodeOf(found.error());
}

void Remove(PyClient& self, const std::string& key, bool force) {
  auto client = self.get();
  Result<void> removed;
  {
    ReleaseGil nogil;
    removed = client->Remove(key, force);
  }
  Check(removed, "remove", key);
}

// BatchPut or BatchUpsert of keys[i] = values[i].
std::vector<Result<void>> BatchWrite(PyClient& self, const std::vector<std::string>& keys,
                                     const py::sequence& values, const PutOptions& options,
                                     bool upsert) {
  CheckSameLength(keys, values.size(), upsert ? "batch_upsert" : "batch_put");
  auto client = self.get();
  std::vector<ValueView> views = ValueViews(values);
  ReleaseGil nogil;
  // Thrift's request owns its bytes, so each value is copied once here.
  std::vector<std::pair<std::string, std::string>> items;
  items.reserve(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) items.emplace_back(keys[i], views[i].bytes());
  return upsert ? client->BatchUpsert(items, options) : client->BatchPut(items, options);
}

std::vector<Result<uint64_t>> BatchGetInto(PyClient& self, const std::vector<std::string>& keys,
                                           const py::sequence& buffers) {
  CheckSameLength(keys, buffers.size(), "batch_get_into");
  auto client = self.get();
  std::vector<BufferView> views = WritableViews(buffers);
  std::vector<std::span<char>> spans;
  spans.reserve(views.size());
  for (const auto& v : views) spans.push_back(v.writable());
  ReleaseGil nogil;
  return client->BatchGetInto(keys, spans);
}

py::list BatchGet(PyClient& self, const std::vector<std::string>& keys) {
  auto client = self.get();
  std::vector<Result<ObjectValue>> values;
  {
    ReleaseGil nogil;
    values = client->BatchGet(keys);
  }
  return PerKey(values, keys, "get", [](const ObjectValue& v) { return NewBytes(v.data); });
}

std::vector<Result<bool>> BatchExist(PyClient& self, const std::vector<std::string>& keys,
                                     bool prefetch) {
  auto client = self.get();
  ReleaseGil nogil;
  return client->BatchExist(keys, prefetch);
}

py::list BatchRemove(PyClient& self, const std::vector<std::string>& keys, bool force) {
  auto client = self.get();
  std::vector<Result<void>> removed;
  {
    ReleaseGil nogil;
    removed = client->BatchRemove(keys, force);
  }
  return PerKey(removed, keys, "remove", [] { return py::none(); });
}

// Runs `call(client)` without the GIL and raises its error.
template <typename Call>
auto Plain(PyClient& self, Call&& call, std::string_view op, std::string_view key) {
  auto client = self.get();
  decltype(call(*client)) result;
  {
    ReleaseGil nogil;
    result = call(*client);
  }
  if constexpr (std::is_same_v<decltype(result), Result<void>>) {
    Check(result, op, key);
  } else {
    return Unwrap(std::move(result), op, key);
  }
}

// Copies `buffer` into the plan's reserved bytes through a mapping of the
// worker's memory tier: the producer must run on the plan's node. Only an
// open plan: once committed its bytes are the published object (rewriting
// them would change it under an unchanged version), once revoked or
// refused they may be another object's.
void WritePlanBytes(const PlanHandle& handle, py::handle buffer) {
  const WritePlan& plan = handle.plan;
  if (handle.state != PlanHandle::State::kOpen) {
    RaiseError(ErrorCode::kIllegalClient, Describe("write_plan", plan.key) + ": the plan is " +
                                              StateName(handle.state) +
                                              "; its space is no longer this writer's (open a "
                                              "new plan)");
  }
  ValueView view(buffer);
  if (view.bytes().size() != plan.size) {
    RaiseError(ErrorCode::kInvalidParams, Describe("write_plan", plan.key) + ": the plan has " +
                                              std::to_string(plan.size) + " bytes, the buffer " +
                                              std::to_string(view.bytes().size()));
  }
  std::string why;
  Result<void> copied;
  {
    ReleaseGil nogil;
    auto mapping = SharedMapping::Map(plan.memory, plan.offset, plan.size, &why);
    copied = mapping ? (*mapping)->CopyIn(0, std::as_bytes(std::span(view.bytes())))
                     : Result<void>(Err(mapping.error()));
  }
  if (!copied) {
    RaiseError(copied.error(), Describe("write_plan", plan.key) + (why.empty() ? "" : ": " + why));
  }
}

// Commit (or Revoke) of an open plan, marked used up when it succeeds, or
// when the cluster refuses it (ILLEGAL_CLIENT: pre-empted, discarded, or
// used up). Other errors (RPC_TIMEOUT, ...) leave it open: the outcome is
// unknown, and the cluster answers a retry.
void FinishPlan(PyClient& self, PlanHandle& handle, bool commit) {
  const char* op = commit ? "commit" : "revoke";
  auto client = self.get();
  Result<void> result;
  {
    ReleaseGil nogil;
    result = commit ? client->Commit(handle.plan) : client->Revoke(handle.plan);
  }
  if (handle.state != PlanHandle::State::kOpen) {
    // A used-up plan (the cluster refuses it again) keeps what it was.
  } else if (result) {
    handle.state = commit ? PlanHandle::State::kCommitted : PlanHandle::State::kRevoked;
  } else if (result.error() == ErrorCode::kIllegalClient) {
    handle.state = PlanHandle::State::kInvalid;
  }
  Check(result, op, handle.plan.key);
}

void BindSingleCalls(py::class_<PyClient>& c) {
  c.def(
       "put",
       [](PyClient& self, const std::string& key, py::handle value, bool hard_pin, bool soft_pin,
          int64_t ttl, std::string node, std::string tier) {
         Write(self, key, value, Options(hard_pin, soft_pin, ttl, node, tier), false);
       },
       py::arg("key"), py::arg("value"), MOONCAKE_PUT_OPTIONS,
       "Stores a new object from bytes, a str or any buffer. OBJECT_ALREADY_EXISTS if the key "
       "has one.")
      .def(
          "put_from",
          [](PyClient& self, const std::string& key, py::handle buffer, bool hard_pin,
             bool soft_pin, int64_t ttl, std::string node, std::string tier) {
            Write(self, key, buffer, Options(hard_pin, soft_pin, ttl, node, tier), false);
          },
          py::arg("key"), py::arg("buffer"), MOONCAKE_PUT_OPTIONS,
          "put() from a buffer (numpy array, memoryview, ...), read in place.")
      .def(
          "upsert",
          [](PyClient& self, const std::string& key, py::handle value, bool hard_pin, bool soft_pin,
             int64_t ttl, std::string node, std::string tier) {
            Write(self, key, value, Options(hard_pin, soft_pin, ttl, node, tier), true);
          },
          py::arg("key"), py::arg("value"), MOONCAKE_PUT_OPTIONS,
          "Creates or replaces the object. OBJECT_REPLICA_BUSY (retryable) while it is read.")
      .def(
          "upsert_from",
          [](PyClient& self, const std::string& key, py::handle buffer, bool hard_pin,
             bool soft_pin, int64_t ttl, std::string node, std::string tier) {
            Write(self, key, buffer, Options(hard_pin, soft_pin, ttl, node, tier), true);
          },
          py::arg("key"), py::arg("buffer"), MOONCAKE_PUT_OPTIONS,
          "upsert() from a buffer, read in place.")
      .def("get", &Get, py::arg("key"), "The object's bytes. OBJECT_NOT_FOUND if absent.")
      .def("get_into", &GetInto, py::arg("key"), py::arg("buffer"),
           "Reads the object into a writable buffer; returns its size. INVALID_PARAMS when the "
           "buffer is too small.")
      .def("exist", &Exist, py::arg("key"), py::arg("prefetch") = false,
           "True if the key has an object. prefetch=True starts moving an SSD-only object to "
           "DRAM.")
      .def("is_exist", &IsExist, py::arg("key"), py::arg("prefetch") = false,
           "Mooncake's is_exist: 1 (exists), 0 (absent) or a negative ErrorCode.")
      .def("remove", &Remove, py::arg("key"), py::arg("force") = false,
           "Removes the object; force=True overrides a read lease (OBJECT_HAS_LEASE).");
}

void BindBatchCalls(py::class_<PyClient>& c) {
  auto writes = [](bool upsert, bool codes) {
    return [upsert, codes](PyClient& self, const std::vector<std::string>& keys,
                           const py::sequence& values, bool hard_pin, bool soft_pin, int64_t ttl,
                           std::string node, std::string tier) -> py::list {
      auto results =
          BatchWrite(self, keys, values, Options(hard_pin, soft_pin, ttl, node, tier), upsert);
      if (codes) return Codes(results);
      return PerKey(results, keys, upsert ? "upsert" : "put", [] { return py::none(); });
    };
  };
  c.def("batch_put", writes(false, false), py::arg("keys"), py::arg("values"), MOONCAKE_PUT_OPTIONS,
        "One entry per key: None (stored) or a mooncake.Error.")
      .def("batch_upsert", writes(true, false), py::arg("keys"), py::arg("values"),
           MOONCAKE_PUT_OPTIONS, "One entry per key: None (stored) or a mooncake.Error.")
      .def("batch_put_from", writes(false, true), py::arg("keys"), py::arg("buffers"),
           MOONCAKE_PUT_OPTIONS, "Mooncake's batch_put_from: 0 or a negative ErrorCode per key.")
      .def("batch_upsert_from", writes(true, true), py::arg("keys"), py::arg("buffers"),
           MOONCAKE_PUT_OPTIONS, "0 or a negative ErrorCode per key.")
      .def("batch_get", &BatchGet, py::arg("keys"),
           "One entry per key: its bytes or a mooncake.Error.")
      .def(
          "batch_get_into",
          [](PyClient& self, const std::vector<std::string>& keys, const py::sequence& buffers) {
            py::list out;
            for (const auto& r : BatchGetInto(self, keys, buffers)) {
              out.append(r ? py::int_(*r) : py::int_(CodeOf(r.error())));
            }
            return out;
          },
          py::arg("keys"), py::arg("buffers"),
          "Mooncake's batch_get_into: reads keys[i] into buffers[i]; per key the bytes read or "
          "a negative ErrorCode.")
      .def(
          "batch_exist",
          [](PyClient& self, const std::vector<std::string>& keys, bool prefetch) {
            return PerKey(BatchExist(self, keys, prefetch), keys, "exist",
                          [](bool found) { return py::bool_(found); });
          },
          py::arg("keys"), py::arg("prefetch") = false,
          "One entry per key: True, False or a mooncake.Error.")
      .def(
          "batch_is_exist",
          [](PyClient& self, const std::vector<std::string>& keys, bool prefetch) {
            py::list out;
            for (const auto& r : BatchExist(self, keys, prefetch)) {
              out.append(r ? (*r ? 1 : 0) : CodeOf(r.error()));
            }
            return out;
          },
          py::arg("keys"), py::arg("prefetch") = false,
          "Mooncake's batch_is_exist: 1, 0 or a negative ErrorCode per key.")
      .def("batch_remove", &BatchRemove, py::arg("keys"), py::arg("force") = false,
           "One entry per key: None (removed) or a mooncake.Error.");
}

void BindAdminCalls(py::class_<PyClient>& c) {
  c.def(
       "inspect",
       [](PyClient& self, const std::string& key) {
         return InspectDict(Plain(
             self, [&](Client& cl) { return cl.Inspect(key); }, "inspect", key));
       },
       py::arg("key"), "Placement and state of one object, as its owner sees it (a dict).")
      .def(
          "nodes",
          [](PyClient& self) {
            py::list out;
            for (const auto& n : Plain(
                     self, [](Client& cl) { return cl.ListNodes(); }, "nodes", ""))
              out.append(NodeDict(n));
            return out;
          },
          "Every node the master knows, dead ones too (a list of dicts).")
      .def(
          "stats",
          [](PyClient& self, const std::string& node_id) {
            return StatsDict(Plain(
                self, [&](Client& cl) { return cl.Stats(node_id); }, "stats", node_id));
          },
          py::arg("node_id"), "One worker's counters (a dict).")
      .def("hot_cache_counters",
           [](PyClient& self) { return HotCacheDict(self.get()->hot_cache_counters()); })
      .def("transport_counters",
           [](PyClient& self) { return TransportDict(self.get()->transport_counters()); });
}

void BindPlanCalls(py::class_<PyClient>& c) {
  c.def(
       "open_for_write",
       [](PyClient& self, const std::string& key, uint64_t size, bool upsert, bool hard_pin,
          bool soft_pin, int64_t ttl, std::string node, std::string tier) {
         PutOptions options = Options(hard_pin, soft_pin, ttl, node, tier);
         return PlanHandle{Plain(
             self, [&](Client& cl) { return cl.OpenForWrite(key, size, options, upsert); },
             "open_for_write", key)};
       },
       py::arg("key"), py::arg("size"), py::kw_only(), py::arg("upsert") = false,
       py::arg("hard_pin") = false, py::arg("soft_pin") = false, py::arg("soft_pin_ttl_ms") = 0,
       py::arg("preferred_node") = "", py::arg("preferred_tier") = "",
       "Reserves size bytes in a memory tier; write them (write_plan), then commit or revoke.")
      .def(
          "commit", [](PyClient& self, PlanHandle& plan) { FinishPlan(self, plan, true); },
          py::arg("plan"),
          "Publishes a plan's bytes. ILLEGAL_CLIENT if it was pre-empted, discarded after its "
          "timeout, or already committed or revoked.")
      .def(
          "revoke", [](PyClient& self, PlanHandle& plan) { FinishPlan(self, plan, false); },
          py::arg("plan"),
          "Gives a plan's space back without publishing anything. ILLEGAL_CLIENT as commit.")
      .def(
          "get_location",
          [](PyClient& self, const std::string& key) {
            return Plain(
                self, [&](Client& cl) { return cl.GetLocation(key); }, "get_location", key);
          },
          py::arg("key"), "Owner, tier and placement of an object (ObjectPlacement).")
      .def(
          "write_plan",
          [](PyClient& self, const PlanHandle& plan, py::handle buffer) {
            self.get();  // a closed client raises, as everywhere
            WritePlanBytes(plan, buffer);
          },
          py::arg("plan"), py::arg("buffer"),
          "Copies exactly plan.size bytes into the plan's reserved memory. Only on the plan's "
          "node (the worker's memory is mapped), and only while the plan is open: "
          "ILLEGAL_CLIENT once it was committed, revoked or refused.");
}

void BindClient(py::module_& m) {
  ClientConfig d;  // the documented defaults
  py::class_<PyClient> c(m, "Client", "A client of one Mooncake cluster (mooncake::Client).");
  c.def(py::init(&MakeClient), py::kw_only(), py::arg("master") = py::none(),
        py::arg("etcd") = d.etcd_endpoints, py::arg("cluster_name") = d.cluster_name,
        py::arg("leader_wait_ms") = d.leader_wait_ms, py::arg("local_node") = "",
        py::arg("pick_reuse_ms") = d.pick_reuse_ms,
        py::arg("connect_timeout_ms") = d.connect_timeout_ms,
        py::arg("io_timeout_ms") = d.io_timeout_ms, py::arg("rpc_poll_us") = d.rpc_poll_us,
        py::arg("combined_calls_in_flight") = d.combined_calls_in_flight,
        py::arg("location_cache_bytes") = d.location_cache_bytes,
        py::arg("hot_cache_bytes") = d.local_hot_cache_bytes,
        py::arg("hot_cache_validate_min_bytes") = d.hot_cache_validate_min_bytes,
        py::arg("hot_cache_max_staleness_ms") = d.hot_cache_max_staleness_ms,
        py::arg("rdma") = d.rdma, py::arg("rdma_device") = d.rdma_device,
        py::arg("rdma_min_bytes") = d.rdma_min_bytes, py::arg("tls_cert") = "",
        py::arg("tls_key") = "", py::arg("tls_ca") = "",
        "Connects to the master: HOST:PORT (default $MOONCAKE_MASTER, else 127.0.0.1:50051), "
        "or, with etcd='http://HOST:PORT,...', the leader of cluster_name.");
  BindSingleCalls(c);
  BindBatchCalls(c);
  BindAdminCalls(c);
  BindPlanCalls(c);
  BindAsyncCalls(c);
  c.def("close", &PyClient::close, "Drops the connections; later calls raise.")
      .def_property_readonly("closed", &PyClient::closed)
      .def("__enter__", [](py::object self) { return self; })
      .def("__exit__", [](PyClient& self, py::args) { self.close(); });
}

}  // namespace
}  // namespace mooncake::python

PYBIND11_MODULE(_mooncake, m) {
  using namespace mooncake::python;
  m.doc() = "Binding of mooncake::Client; import the `mooncake` package instead.";
  InitGilGate();
  DefineErrors(m);
  BindPlanTypes(m);
  BindClient(m);
  // Before the interpreter finalizes, while client threads can still take
  // the GIL to complete the futures of calls in flight.
  py::module_::import("atexit").attr("register")(py::cpp_function(&CloseAllClients));
  // A client made before fork() raises in the child (PyClient::get); the
  // locks its exit hook takes start over there.
  pthread_atfork(nullptr, nullptr, &ResetAfterForkInChild);
  m.def("set_log_level", &mooncake::SetLogLevel, py::arg("level"),
        "Sets the client's log level ('debug', 'info', 'warn', 'error'); False if unknown.");
  m.def("max_key_bytes", [] { return mooncake::kMaxKeyBytes; });
  m.attr("RPC_CHUNK_BYTES") = mooncake::kRpcChunkBytes;
#ifdef MOONCAKE_VERSION
  m.attr("__version__") = MOONCAKE_VERSION;
#endif
}
