#include "bench/transfer_bench.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/status.h"
#include "transport/rdma_transport.h"

namespace mooncake::bench {
namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

constexpr int kWarmup = 2;  // untimed transfers before each measurement
constexpr uint64_t kMaxSize = 1ull << 30;
constexpr int kMaxIterations = 100'000;
constexpr int kSocketTimeoutS = 10;  // bounds every send/recv

// One (size, path) measurement.
struct Row {
  uint64_t size = 0;
  std::string path;
  std::vector<double> latencies_us;  // one per timed transfer
  std::string error;                 // non-empty: the measurement failed
  double gb_per_s = 0;
  double p50_us = 0;
  double p99_us = 0;
  std::optional<double> ratio;  // GB/s over tcp's, RDMA rows only
};

double ElapsedUs(Clock::time_point start) {
  return std::chrono::duration<double, std::micro>(Clock::now() - start).count();
}

// Nearest rank, as bench_util's Percentile, on sorted samples.
double PercentileOf(const std::vector<double>& sorted, double q) {
  if (sorted.empty()) return 0;
  auto rank = static_cast<size_t>(std::ceil(q * static_cast<double>(sorted.size())));
  return sorted[std::clamp<size_t>(rank, 1, sorted.size()) - 1];
}

void Summarize(Row& row) {
  std::vector<double> sorted = row.latencies_us;
  std::sort(sorted.begin(), sorted.end());
  double total_us = 0;
  for (double us : sorted) total_us += us;
  if (total_us > 0) {
    row.gb_per_s = static_cast<double>(row.size) * static_cast<double>(sorted.size()) /
                   (total_us * 1e-6) / 1e9;
  }
  row.p50_us = PercentileOf(sorted, 0.50);
  row.p99_us = PercentileOf(sorted, 0.99);
}

std::string SizeText(uint64_t size) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB"};
  int unit = 0;
  while (unit < 3 && size >= 1024 && size % 1024 == 0) {
    size /= 1024;
    ++unit;
  }
  return std::to_string(size) + kUnits[unit];
}

std::string ErrnoText(const char* call) { return std::string(call) + ": " + std::strerror(errno); }

// ---- TCP over loopback ----

class Socket {
 public:
  explicit Socket(int fd = -1) : fd_(fd) {}
  ~Socket() {
    if (fd_ >= 0) ::close(fd_);
  }
  Socket(Socket&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  Socket& operator=(Socket&& other) noexcept {
    std::swap(fd_, other.fd_);
    return *this;
  }
  int fd() const { return fd_; }

 private:
  int fd_;
};

struct TcpLink {
  Socket client;
  Socket server;
};

bool SendAll(int fd, const std::byte* data, size_t n) {
  while (n > 0) {
    ssize_t sent = ::send(fd, data, n, MSG_NOSIGNAL);
    if (sent < 0 && errno == EINTR) continue;
    if (sent <= 0) return false;
    data += sent;
    n -= static_cast<size_t>(sent);
  }
  return true;
}

bool RecvAll(int fd, std::byte* data, size_t n) {
  while (n > 0) {
    ssize_t got = ::recv(fd, data, n, 0);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return false;
    data += got;
    n -= static_cast<size_t>(got);
  }
  return true;
}

void SetSocketOptions(int fd) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  timeval timeout{.tv_sec = kSocketTimeoutS, .tv_usec = 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof(timeout));
}

// A listener on 127.0.0.1, port 0, and one accepted connection to it.
std::optional<TcpLink> ConnectLoopback(std::string& error) {
  Socket listener(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  auto* raw = reinterpret_cast<sockaddr*>(&addr);
  if (listener.fd() < 0 || ::bind(listener.fd(), raw, sizeof(addr)) != 0 ||
      ::listen(listener.fd(), 1) != 0 || ::getsockname(listener.fd(), raw, &len) != 0) {
    error = ErrnoText("tcp listener on 127.0.0.1");
    return std::nullopt;
  }
  TcpLink link{Socket(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)), Socket()};
  // A loopback connect completes from the backlog, before accept().
  if (link.client.fd() < 0 || ::connect(link.client.fd(), raw, sizeof(addr)) != 0) {
    error = ErrnoText("tcp connect");
    return std::nullopt;
  }
  link.server = Socket(::accept4(listener.fd(), nullptr, nullptr, SOCK_CLOEXEC));
  if (link.server.fd() < 0) {
    error = ErrnoText("tcp accept");
    return std::nullopt;
  }
  SetSocketOptions(link.client.fd());
  SetSocketOptions(link.server.fd());
  return link;
}

// The receiving side: `count` times, take `size` bytes and answer one byte.
void Receive(int fd, uint64_t size, int count) {
  std::vector<std::byte> buffer(size);
  const std::byte ack{1};
  for (int i = 0; i < count; ++i) {
    if (!RecvAll(fd, buffer.data(), size) || !SendAll(fd, &ack, 1)) {
      ::shutdown(fd, SHUT_RDWR);  // wakes the sender at once
      return;
    }
  }
}

Row MeasureTcp(uint64_t size, int iterations) {
  Row row{.size = size, .path = "tcp"};
  auto link = ConnectLoopback(row.error);
  if (!link) return row;
  std::vector<std::byte> data(size, std::byte{0x5a});
  std::thread receiver(Receive, link->server.fd(), size, kWarmup + iterations);
  std::byte ack{};
  for (int i = 0; i < kWarmup + iterations; ++i) {
    const auto start = Clock::now();
    errno = 0;
    if (!SendAll(link->client.fd(), data.data(), size) || !RecvAll(link->client.fd(), &ack, 1)) {
      row.error = errno != 0 ? ErrnoText("tcp transfer") : "tcp transfer: peer closed";
      ::shutdown(link->client.fd(), SHUT_RDWR);  // wakes the receiver at once
      break;
    }
    if (i >= kWarmup) row.latencies_us.push_back(ElapsedUs(start));
  }
  receiver.join();
  return row;
}

// ---- RDMA between two queue pairs of one device ----

// Members in destruction-safe order: queue pairs go first, then regions, then
// the buffers they cover, then the context.
struct RdmaRig {
  std::unique_ptr<RdmaContext> context;
  std::vector<std::byte> src;
  std::vector<std::byte> dst;
  RdmaMemoryRegion src_region;
  RdmaMemoryRegion dst_region;
  RdmaLoopbackPair pair;
};

std::unique_ptr<RdmaRig> SetUpRdma(const TransferBenchOptions& o, uint64_t max_size,
                                   std::string& why) {
  auto context = RdmaContext::Open(o.rdma_device, o.rdma_port, o.rdma_gid_index, &why);
  if (!context) return nullptr;
  auto rig = std::make_unique<RdmaRig>();
  rig->context = std::move(*context);
  rig->src.assign(max_size, std::byte{0xa5});
  rig->dst.assign(max_size, std::byte{0});
  auto src = rig->context->Register(rig->src.data(), max_size);
  auto dst = rig->context->Register(rig->dst.data(), max_size);
  auto pair = ConnectLoopbackPair(*rig->context);
  if (!src || !dst || !pair) {
    ErrorCode code = !src ? src.error() : !dst ? dst.error() : pair.error();
    why = std::string("rdma set-up failed on ") + rig->context->device_name() + ": " +
          std::string(ToString(code));
    return nullptr;
  }
  rig->src_region = std::move(*src);
  rig->dst_region = std::move(*dst);
  rig->pair = std::move(*pair);
  return rig;
}

Result<void> RdmaOnce(RdmaRig& rig, bool write, uint64_t size) {
  RdmaQueuePair& qp = *rig.pair.first;
  return write ? qp.Write(rig.src_region, 0, rig.dst_region.remote(), 0, size)
               : qp.Read(rig.dst_region, 0, rig.src_region.remote(), 0, size);
}

// WRITE pushes src to dst; READ pulls src into dst. Either way dst ends equal
// to src, which is checked once after the timed loop.
Row MeasureRdma(RdmaRig& rig, bool write, uint64_t size, int iterations) {
  Row row{.size = size, .path = write ? "rdma_write" : "rdma_read"};
  std::memset(rig.dst.data(), 0, size);
  for (int i = 0; i < kWarmup + iterations; ++i) {
    const auto start = Clock::now();
    if (auto done = RdmaOnce(rig, write, size); !done) {
      row.error = std::string(ToString(done.error()));
      return row;
    }
    if (i >= kWarmup) row.latencies_us.push_back(ElapsedUs(start));
  }
  if (std::memcmp(rig.dst.data(), rig.src.data(), size) != 0) row.error = "data mismatch";
  return row;
}

// ---- Output ----

void PrintText(const std::vector<Row>& rows) {
  std::printf("%-8s %-11s %10s %10s %10s %7s\n", "size", "path", "GB/s", "p50_us", "p99_us",
              "ratio");
  for (const Row& row : rows) {
    const std::string size = SizeText(row.size);
    if (!row.error.empty()) {
      std::printf("%-8s %-11s failed: %s\n", size.c_str(), row.path.c_str(), row.error.c_str());
      continue;
    }
    char ratio[32] = "-";
    if (row.ratio) std::snprintf(ratio, sizeof(ratio), "%.2f", *row.ratio);
    std::printf("%-8s %-11s %10.3f %10.1f %10.1f %7s\n", size.c_str(), row.path.c_str(),
                row.gb_per_s, row.p50_us, row.p99_us, ratio);
  }
}

void PrintJson(const TransferBenchOptions& o, const std::vector<Row>& rows, const RdmaRig* rig,
               const std::string& rdma_reason) {
  json results = json::array();
  for (const Row& row : rows) {
    json item = {{"size", row.size},
                 {"size_text", SizeText(row.size)},
                 {"path", row.path},
                 {"gb_per_s", row.gb_per_s},
                 {"p50_us", row.p50_us},
                 {"p99_us", row.p99_us},
                 {"samples", row.latencies_us.size()}};
    item["ratio_vs_tcp"] = row.ratio ? json(*row.ratio) : json(nullptr);
    if (!row.error.empty()) item["error"] = row.error;
    results.push_back(std::move(item));
  }
  json rdma = {{"available", rig != nullptr}};
  if (rig != nullptr) {
    rdma["device"] = rig->context->device_name();
    rdma["port"] = rig->context->port();
  } else {
    rdma["reason"] = rdma_reason;
  }
  json out = {{"workload", "transfer"}, {"iterations", o.iterations},
              {"warmup", kWarmup},      {"gb", "1e9 bytes"},
              {"rdma", rdma},           {"results", results}};
  std::cout << out.dump(2) << std::endl;
}

std::optional<std::string> Validate(const TransferBenchOptions& o) {
  if (o.sizes.empty()) return "no transfer size given";
  for (uint64_t size : o.sizes) {
    if (size == 0 || size > kMaxSize) {
      return "transfer size " + std::to_string(size) + " outside [1, 1GiB]";
    }
  }
  if (o.iterations < 1 || o.iterations > kMaxIterations) {
    return "iterations " + std::to_string(o.iterations) + " outside [1, 100000]";
  }
  return std::nullopt;
}

// Measures one size on every available path; RDMA rows carry the ratio.
void MeasureSize(uint64_t size, int iterations, RdmaRig* rig, std::vector<Row>& rows) {
  Row tcp = MeasureTcp(size, iterations);
  Summarize(tcp);
  const double tcp_gb = tcp.error.empty() ? tcp.gb_per_s : 0;
  rows.push_back(std::move(tcp));
  if (rig == nullptr) return;
  for (bool write : {true, false}) {
    Row row = MeasureRdma(*rig, write, size, iterations);
    Summarize(row);
    if (row.error.empty() && tcp_gb > 0) row.ratio = row.gb_per_s / tcp_gb;
    rows.push_back(std::move(row));
  }
}

}  // namespace

int RunTransferBench(const TransferBenchOptions& options) {
  if (auto bad = Validate(options)) {
    std::fprintf(stderr, "error: usage: %s\n", bad->c_str());
    return 2;
  }
  const uint64_t max_size = *std::max_element(options.sizes.begin(), options.sizes.end());
  std::string reason;
  std::unique_ptr<RdmaRig> rig = SetUpRdma(options, max_size, reason);
  if (!options.json) {
    std::printf("mooncake-bench workload=transfer iterations=%d warmup=%d\n", options.iterations,
                kWarmup);
  }
  if (rig == nullptr) {
    // Keep stdout parseable in JSON mode; the JSON carries the reason too.
    std::fprintf(options.json ? stderr : stdout, "rdma: unavailable (%s)\n", reason.c_str());
  } else if (!options.json) {
    std::printf("rdma: device=%s port=%d\n", rig->context->device_name().c_str(),
                rig->context->port());
  }
  std::vector<Row> rows;
  for (uint64_t size : options.sizes) MeasureSize(size, options.iterations, rig.get(), rows);
  if (options.json) {
    PrintJson(options, rows, rig.get(), reason);
  } else {
    PrintText(rows);
  }
  const bool failed =
      std::any_of(rows.begin(), rows.end(), [](const Row& r) { return !r.error.empty(); });
  return failed ? 1 : 0;
}

}  // namespace mooncake::bench
