#include "bench/worker_loop_workload.h"

#include <spdlog/fmt/fmt.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "bench/bench_report.h"
#include "bench/bench_util.h"
#include "bench/phase_stats.h"
#include "mooncake_rpc/WorkerService.h"
#include "thrift/rpc_codes.h"
#include "thrift/rpc_transport.h"
#include "thrift/value_calls.h"

namespace mooncake::bench {
namespace {

// Longest wait for any reply before the calls still out count as failed.
constexpr auto kReplyTimeout = std::chrono::seconds(10);
constexpr int kConnectTimeoutMs = 2000;
constexpr int kIoTimeoutMs = 10000;

struct LoopConnection {
  std::shared_ptr<BoundedFramedTransport> transport;
  std::unique_ptr<rpc::WorkerServiceClient> client;
  Clock::time_point sent;
  bool waiting = false;  // a call is out and its reply not read
  bool broken = false;   // a transport error: no more calls on it
};

// An epoll set, closed on destruction.
class EpollSet {
 public:
  EpollSet() : fd_(epoll_create1(EPOLL_CLOEXEC)) {}
  ~EpollSet() {
    if (fd_ >= 0) close(fd_);
  }
  EpollSet(const EpollSet&) = delete;
  EpollSet& operator=(const EpollSet&) = delete;

  bool ok() const { return fd_ >= 0; }
  bool Add(int fd, uint64_t tag) {
    epoll_event event{.events = EPOLLIN, .data = {.u64 = tag}};
    return epoll_ctl(fd_, EPOLL_CTL_ADD, fd, &event) == 0;
  }
  void Remove(int fd) { epoll_ctl(fd_, EPOLL_CTL_DEL, fd, nullptr); }
  int Wait(epoll_event* events, int max, int timeout_ms) {
    return epoll_wait(fd_, events, max, timeout_ms);
  }

 private:
  int fd_;
};

class WorkerLoopBench {
 public:
  WorkerLoopBench(const BenchOptions& options, std::string host, int port,
                  std::shared_ptr<const RpcTlsContext> tls)
      : o_(options),
        host_(std::move(host)),
        port_(port),
        tls_(std::move(tls)),
        value_(options.value_size, 'v'),
        run_(RunPrefix(options.key_prefix)) {}

  const std::string& run() const { return run_; }

  // Opens --concurrency connections; false after one error line.
  bool Connect() {
    if (!epoll_.ok()) {
      std::fprintf(stderr, "error: epoll_create1 failed: %s\n", std::strerror(errno));
      return false;
    }
    for (int i = 0; i < o_.concurrency; ++i) {
      LoopConnection conn;
      try {
        conn.transport = OpenClientTransport(host_, port_,
                                             RpcOptions{.connect_timeout_ms = kConnectTimeoutMs,
                                                        .io_timeout_ms = kIoTimeoutMs,
                                                        .poll_us = o_.rpc_poll_us,
                                                        .tls = tls_});
      } catch (const std::exception& e) {
        std::fprintf(stderr, "error: connect failed: cannot reach the worker at %s:%d: %s\n",
                     host_.c_str(), port_, e.what());
        return false;
      }
      conn.client = std::make_unique<rpc::WorkerServiceClient>(
          std::make_shared<BoundedBinaryProtocol>(conn.transport));
      if (!epoll_.Add(conn.transport->socket_fd(), conns_.size())) {
        std::fprintf(stderr, "error: epoll_ctl failed: %s\n", std::strerror(errno));
        return false;
      }
      conns_.push_back(std::move(conn));
    }
    return true;
  }

  std::vector<PhaseRow> Run() {
    std::vector<PhaseRow> rows;
    rows.push_back(Load());
    rows.push_back(Gets());
    if (o_.cleanup) rows.push_back(Removes());
    return rows;
  }

 private:
  std::string Key(uint64_t i) const { return run_ + std::to_string(i); }

  // Puts every key once, the next key on whichever connection answers.
  PhaseRow Load() {
    uint64_t next = 0;
    auto start = Clock::now();
    OpStats stats = Drive(
        [&](LoopConnection& c) {
          if (next >= o_.keys) return false;
          SendValueCall(*c.client, /*upsert=*/false, Key(next++), value_, rpc::ReplicateConfig{});
          return true;
        },
        [&](LoopConnection& c) -> Result<void> { return ToResult(c.client->recv_Put()); },
        o_.value_size);
    return PhaseRow{"load", "put", Seconds(start), std::move(stats)};
  }

  // Gets of random loaded keys until --duration-s has passed.
  PhaseRow Gets() {
    std::mt19937_64 rng(std::random_device{}());
    auto start = Clock::now();
    auto end = start + std::chrono::duration_cast<Clock::duration>(
                           std::chrono::duration<double>(o_.duration_s));
    OpStats stats = Drive(
        [&](LoopConnection& c) {
          if (Clock::now() >= end) return false;
          c.client->send_Get(Key(rng() % o_.keys), 0, static_cast<int64_t>(o_.value_size));
          return true;
        },
        [&](LoopConnection& c) -> Result<void> {
          rpc::GetResult reply;
          c.client->recv_Get(reply);
          if (reply.code != rpc::ErrorCode::OK) return ToResult(reply.code);
          // A get that answers with other bytes than were put is an error.
          if (reply.data != value_) return Err(ErrorCode::kInternalError);
          return {};
        },
        o_.value_size);
    return PhaseRow{"mixed", "get", Seconds(start), std::move(stats)};
  }

  PhaseRow Removes() {
    uint64_t next = 0;
    auto start = Clock::now();
    OpStats stats = Drive(
        [&](LoopConnection& c) {
          if (next >= o_.keys) return false;
          // force, as --cleanup of the other workloads: the gets have just
          // granted leases, and the worker refuses a plain Remove of a
          // leased object.
          c.client->send_Remove(Key(next++), /*force=*/true);
          return true;
        },
        [&](LoopConnection& c) -> Result<void> { return ToResult(c.client->recv_Remove()); }, 0);
    return PhaseRow{"cleanup", "remove", Seconds(start), std::move(stats)};
  }

  // One phase: keeps one call out on every connection while `send(conn)`
  // issues one (false: the phase has no more), and reads each reply with
  // `receive(conn)` as epoll reports it. A connection that fails in
  // transport counts an error and carries no more calls.
  template <typename Send, typename Receive>
  OpStats Drive(Send&& send, Receive&& receive, uint64_t bytes_per_op) {
    OpStats stats;
    size_t waiting = 0;
    auto fail = [&](LoopConnection& c) {
      c.broken = true;
      c.waiting = false;
      epoll_.Remove(c.transport->socket_fd());
      stats.errors[ErrorCode::kRpcFail]++;
    };
    auto issue = [&](LoopConnection& c) {
      if (c.broken) return;
      c.sent = Clock::now();
      try {
        if (!send(c)) return;
      } catch (const std::exception&) {
        fail(c);
        return;
      }
      c.waiting = true;
      ++waiting;
    };
    for (auto& c : conns_) issue(c);

    epoll_event events[64];
    auto last_reply = Clock::now();
    while (waiting > 0) {
      int ready = epoll_.Wait(events, 64, 100);
      if (ready < 0 && errno == EINTR) continue;
      if (ready <= 0) {
        if (ready == 0 && Clock::now() - last_reply < kReplyTimeout) continue;
        // No reply for too long, or epoll failed: what is still out failed.
        for (auto& c : conns_) {
          if (c.waiting) fail(c);
        }
        break;
      }
      last_reply = Clock::now();
      for (int e = 0; e < ready; ++e) {
        LoopConnection& c = conns_[events[e].data.u64];
        if (!c.waiting) continue;
        c.waiting = false;
        --waiting;
        Result<void> result = Err(ErrorCode::kRpcFail);
        try {
          result = receive(c);
        } catch (const std::exception&) {
          fail(c);
          continue;
        }
        stats.Record(c.sent, result, result ? bytes_per_op : 0);
        issue(c);
      }
    }
    return stats;
  }

  const BenchOptions& o_;
  const std::string host_;
  const int port_;
  const std::shared_ptr<const RpcTlsContext> tls_;
  const std::string value_;
  const std::string run_;
  EpollSet epoll_;
  std::vector<LoopConnection> conns_;
};

}  // namespace

int RunWorkerLoopBench(const BenchOptions& options) {
  auto worker = ParseHostPort(options.worker);
  if (!worker) {
    std::fprintf(stderr, "error: usage: --workload loop needs --worker HOST:PORT\n");
    return 2;
  }
  if (options.value_size > kRpcChunkBytes) {
    std::fprintf(stderr, "error: usage: --workload loop takes values up to 4MiB (one call each)\n");
    return 2;
  }
  auto tls = ToRpcTls(options);
  if (!tls) return 2;
  WorkerLoopBench bench(options, worker->host, worker->port, *tls);
  if (!bench.Connect()) return 3;
  auto rows = bench.Run();
  return Report(options, bench.run(), rows, nlohmann::json::object());
}

}  // namespace mooncake::bench
