#include "bench/master_workload.h"

#include <spdlog/fmt/fmt.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench_report.h"
#include "bench/bench_util.h"
#include "bench/phase_stats.h"
#include "http/admin_client.h"
#include "mooncake_rpc/MasterService.h"
#include "thrift/rpc_channel.h"
#include "thrift/rpc_codes.h"

namespace mooncake::bench {
namespace {

using nlohmann::json;
using Channel = RpcChannel<rpc::MasterServiceClient>;

// How often the fake nodes heartbeat; well inside any sane node TTL.
constexpr auto kHeartbeatEvery = std::chrono::milliseconds(500);

// A master RPC that answers an ErrorCode, as a Result.
Result<void> Checked(const Result<rpc::ErrorCode::type>& reply) {
  if (!reply) return Err(reply.error());
  return ToResult(*reply);
}

// The master's process_resident_memory_bytes from its admin /metrics; on
// failure nullopt and why in `why`.
std::optional<uint64_t> ReadRss(const std::string& admin, std::string& why) {
  auto address = ParseHostPort(admin);
  if (!address) {
    why = "--master-admin '" + admin + "' is not HOST:PORT";
    return std::nullopt;
  }
  auto reply = HttpCall(address->host, address->port, "GET", "/metrics");
  if (!reply || reply->status != 200) {
    why = "GET http://" + admin + "/metrics failed";
    return std::nullopt;
  }
  auto rss = MetricValue(reply->body, "process_resident_memory_bytes");
  if (!rss) {
    why = "no process_resident_memory_bytes in the master's /metrics";
    return std::nullopt;
  }
  return static_cast<uint64_t>(*rss);
}

// Keeps the fake nodes alive until destroyed.
class Heartbeats {
 public:
  Heartbeats(Channel& channel, std::vector<std::string> nodes)
      : channel_(channel), nodes_(std::move(nodes)), thread_([this] { Loop(); }) {}
  ~Heartbeats() {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

 private:
  void Loop() {
    std::unique_lock lock(mu_);
    while (!cv_.wait_for(lock, kHeartbeatEvery, [this] { return stop_; })) {
      lock.unlock();
      for (const auto& node : nodes_) {
        (void)channel_.Call([&](rpc::MasterServiceClient& client) {
          return client.Heartbeat(node, std::vector<rpc::TierUsage>{});
        });
      }
      lock.lock();
    }
  }

  Channel& channel_;
  const std::vector<std::string> nodes_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

// Runs `body(thread_index, stats)` on `threads` threads; merged stats.
template <typename Body>
OpStats OnThreads(int threads, Body&& body) {
  std::vector<OpStats> per_thread(threads);
  std::vector<std::thread> running;
  for (int t = 0; t < threads; ++t) running.emplace_back([&, t] { body(per_thread[t]); });
  for (auto& thread : running) thread.join();
  OpStats total;
  for (auto& s : per_thread) total.Merge(s);
  return total;
}

class MasterBench {
 public:
  MasterBench(const BenchOptions& options, Channel& channel)
      : o_(options), channel_(channel), run_(RunPrefix(options.key_prefix)) {}

  const std::string& run() const { return run_; }

  // False (after one error line) when a fake node could not register.
  bool Register() {
    for (int i = 0; i < o_.master_nodes; ++i) {
      rpc::NodeInfo info;
      info.node_id = fmt::format("{}node{}", run_, i);
      info.host = "127.0.0.1";
      info.port = 1;  // never dialled: the bench only asks the master
      info.alive = true;
      auto registered = Checked(channel_.Call(
          [&](rpc::MasterServiceClient& client) { return client.RegisterNode(info); }));
      if (!registered) {
        std::fprintf(stderr, "error: RegisterNode %s failed: %s: cannot reach the master at %s\n",
                     info.node_id.c_str(), std::string(ToString(registered.error())).c_str(),
                     o_.master.c_str());
        return false;
      }
      nodes_.push_back(info.node_id);
    }
    return true;
  }

  std::vector<PhaseRow> Run() {
    Heartbeats heartbeats(channel_, nodes_);
    keys_.reserve(o_.keys);
    uint64_t key_bytes = 0;
    for (uint64_t i = 0; i < o_.keys; ++i) {
      keys_.push_back(fmt::format("{}m{}", run_, i));
      key_bytes += keys_.back().size();
    }
    avg_key_bytes_ = static_cast<double>(key_bytes) / static_cast<double>(o_.keys);
    WarmConnections();
    std::string why;
    auto rss_before = o_.master_admin.empty() ? std::nullopt : ReadRss(o_.master_admin, why);
    std::vector<PhaseRow> rows;
    rows.push_back(PutOwners());
    auto rss_after = rss_before ? ReadRss(o_.master_admin, why) : std::nullopt;
    rows.push_back(GetLocations());
    if (o_.cleanup) rows.push_back(RemoveOwners());
    Report(rss_before, rss_after, why);
    return rows;
  }

  const json& extra() const { return extra_; }

 private:
  Clock::time_point Deadline(Clock::time_point start) const {
    return start + std::chrono::duration_cast<Clock::duration>(
                       std::chrono::duration<double>(o_.load_timeout_s));
  }

  // Opens the connections the phases will use (up to the channel's idle
  // pool) before the first RSS reading, so that the master's per-connection
  // buffers do not count as per-key memory: each thread holds its connection
  // until all have one, or a second has passed.
  void WarmConnections() {
    std::mutex mu;
    std::condition_variable cv;
    int holding = 0;
    OnThreads(o_.concurrency, [&](OpStats&) {
      (void)channel_.Call([&](rpc::MasterServiceClient& client) {
        rpc::LocationResult location;
        client.GetLocation(location, run_ + "warm-up");
        std::unique_lock lock(mu);
        ++holding;
        cv.notify_all();
        cv.wait_for(lock, std::chrono::seconds(1), [&] { return holding >= o_.concurrency; });
        return location.code;
      });
    });
  }

  // The fake node that claims key i: round-robin per key, or per call of
  // --batch keys when the puts are batched (one node per BatchPutOwner).
  const std::string& NodeOf(uint64_t i) const {
    uint64_t slot = o_.batch > 1 ? i / o_.batch : i;
    return nodes_[slot % nodes_.size()];
  }

  PhaseRow PutOwners() {
    owned_.assign(keys_.size(), 0);
    if (o_.batch > 1) return BatchPutOwners();
    std::atomic<uint64_t> next{0};
    auto start = Clock::now();
    auto deadline = Deadline(start);
    OpStats stats = OnThreads(o_.concurrency, [&](OpStats& mine) {
      for (uint64_t i = next++; i < keys_.size() && Clock::now() < deadline; i = next++) {
        auto op_start = Clock::now();
        auto reply = channel_.Call([&](rpc::MasterServiceClient& client) {
          rpc::PutOwnerResult result;
          client.PutOwner(result, keys_[i], NodeOf(i));
          return result;
        });
        Result<void> put = reply ? ToResult(reply->code) : Result<void>(Err(reply.error()));
        mine.Record(op_start, put, 0);
        if (put) owned_[i] = 1;
      }
    });
    return PhaseRow{"master", "put_owner", Seconds(start), std::move(stats)};
  }

  // put_owner with --batch N > 1: BatchPutOwner of N consecutive keys per
  // call (the fast load path for large --keys); ops/s counts keys.
  PhaseRow BatchPutOwners() {
    const uint64_t batch = o_.batch;
    std::atomic<uint64_t> next{0};
    auto start = Clock::now();
    auto deadline = Deadline(start);
    OpStats stats = OnThreads(o_.concurrency, [&](OpStats& mine) {
      for (uint64_t call = next++; Clock::now() < deadline; call = next++) {
        uint64_t n = BatchKeys(keys_.size(), batch, call);
        if (n == 0) break;
        uint64_t first = call * batch;
        std::vector<std::string> keys(keys_.begin() + first, keys_.begin() + first + n);
        auto op_start = Clock::now();
        auto reply = channel_.Call([&](rpc::MasterServiceClient& client) {
          std::vector<rpc::PutOwnerResult> results;
          client.BatchPutOwner(results, keys, NodeOf(first));
          return results;
        });
        std::vector<Result<void>> results;
        if (!reply) {
          results.assign(n, Err(reply.error()));
        } else {
          for (const auto& r : *reply) results.push_back(ToResult(r.code));
          if (results.size() != n) results.assign(n, Err(ErrorCode::kInternalError));
        }
        for (uint64_t j = 0; j < n; ++j) owned_[first + j] = results[j] ? 1 : 0;
        mine.RecordBatch(op_start, results, 0);
      }
    });
    return PhaseRow{"master", "put_owner", Seconds(start), std::move(stats)};
  }

  // One pass over every key; with --duration-s, passes again and again for
  // that long (long enough to profile the master while it answers).
  PhaseRow GetLocations() {
    const uint64_t batch = o_.location_batch;
    const uint64_t calls_per_pass = (keys_.size() + batch - 1) / batch;
    std::atomic<uint64_t> next{0};
    auto start = Clock::now();
    auto deadline = o_.duration_given ? start + std::chrono::duration_cast<Clock::duration>(
                                                    std::chrono::duration<double>(o_.duration_s))
                                      : Deadline(start);
    OpStats stats = OnThreads(o_.concurrency, [&](OpStats& mine) {
      for (uint64_t call = next++; Clock::now() < deadline; call = next++) {
        if (call >= calls_per_pass && !o_.duration_given) break;
        call %= calls_per_pass;
        uint64_t n = BatchKeys(keys_.size(), batch, call);
        if (n == 0) break;
        std::vector<std::string> keys(keys_.begin() + call * batch,
                                      keys_.begin() + call * batch + n);
        auto op_start = Clock::now();
        auto reply = channel_.Call([&](rpc::MasterServiceClient& client) {
          std::vector<rpc::LocationResult> locations;
          client.BatchGetLocation(locations, keys);
          return locations;
        });
        std::vector<Result<void>> results;
        if (!reply) {
          results.assign(n, Err(reply.error()));
        } else {
          for (const auto& location : *reply) results.push_back(ToResult(location.code));
          if (results.size() != n) results.assign(n, Err(ErrorCode::kInternalError));
        }
        mine.RecordBatch(op_start, results, 0);
      }
    });
    return PhaseRow{"master", "get_location", Seconds(start), std::move(stats)};
  }

  PhaseRow RemoveOwners() {
    std::atomic<uint64_t> next{0};
    auto start = Clock::now();
    auto deadline = Deadline(start);
    OpStats stats = OnThreads(o_.concurrency, [&](OpStats& mine) {
      for (uint64_t i = next++; i < keys_.size() && Clock::now() < deadline; i = next++) {
        if (!owned_[i]) continue;
        auto op_start = Clock::now();
        auto removed = Checked(channel_.Call([&](rpc::MasterServiceClient& client) {
          return client.RemoveOwner(keys_[i], NodeOf(i));
        }));
        mine.Record(op_start, removed, 0);
      }
    });
    return PhaseRow{"master", "remove_owner", Seconds(start), std::move(stats)};
  }

  void Report(std::optional<uint64_t> rss_before, std::optional<uint64_t> rss_after,
              const std::string& why) {
    uint64_t owned = std::count(owned_.begin(), owned_.end(), uint8_t{1});
    json master = {{"nodes", o_.master_nodes},
                   {"location_batch", o_.location_batch},
                   {"keys_owned", owned},
                   {"avg_key_bytes", avg_key_bytes_},
                   {"rss_before", nullptr},
                   {"rss_after", nullptr},
                   {"rss_note", ""}};
    extra_["master_bytes_per_key"] = nullptr;
    if (o_.master_admin.empty()) {
      master["rss_note"] = "no --master-admin HOST:PORT given";
    } else if (!rss_before || !rss_after) {
      master["rss_note"] = why;
    } else {
      master["rss_before"] = *rss_before;
      master["rss_after"] = *rss_after;
      auto per_key = MasterBytesPerKey(*rss_before, *rss_after, owned, avg_key_bytes_);
      if (per_key) {
        extra_["master_bytes_per_key"] = *per_key;
      } else {
        master["rss_note"] = "no key was stored";
      }
    }
    extra_["master"] = master;
  }

  const BenchOptions& o_;
  Channel& channel_;
  const std::string run_;
  std::vector<std::string> nodes_;
  std::vector<std::string> keys_;
  std::vector<uint8_t> owned_;  // one byte per key: threads write distinct ones
  double avg_key_bytes_ = 0;
  json extra_ = json::object();
};

}  // namespace

int RunMasterBench(const BenchOptions& options) {
  auto master = ParseHostPort(options.master);
  if (!master) {
    std::fprintf(stderr, "error: usage: --master must be HOST:PORT\n");
    return 2;
  }
  auto tls = ToRpcTls(options);
  if (!tls) return 2;
  Channel channel(master->host, master->port,
                  RpcOptions{.io_timeout_ms = 10000, .poll_us = options.rpc_poll_us, .tls = *tls});
  MasterBench bench(options, channel);
  if (!bench.Register()) return 3;
  auto rows = bench.Run();
  return Report(options, bench.run(), rows, bench.extra());
}

}  // namespace mooncake::bench
