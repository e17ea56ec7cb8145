#pragma once

// In-process request metrics: a fixed-bucket latency histogram and per-operation
// request/error counters. Hot paths only touch relaxed atomics, so recording a
// request costs a few uncontended atomic adds and never takes a lock; the REST
// and Prometheus layers read snapshots and only format them.

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"

namespace mooncake {

// Upper bounds, in seconds, of the histogram's finite buckets (Prometheus'
// convention: a bucket holds values <= its bound). A final +Inf bucket follows.
// 50 us .. 5 s spans a DRAM hit to a slow multi-megabyte SSD read.
inline constexpr std::array<double, 16> kLatencyBucketBounds = {
    0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01,
    0.025,   0.05,   0.1,     0.25,   0.5,   1,      2.5,   5};
inline constexpr size_t kLatencyBucketCount = kLatencyBucketBounds.size() + 1;

// A consistent-enough copy of a LatencyHistogram.
struct HistogramSnapshot {
  // NOT cumulative: counts[i] holds observations in (bound[i-1], bound[i]];
  // counts.back() holds those above the last finite bound (+Inf bucket).
  // Cumulative() gives Prometheus' `le` view.
  std::array<uint64_t, kLatencyBucketCount> counts{};
  double sum_seconds = 0;
  // Always the sum of `counts`, so an exported +Inf bucket equals _count.
  uint64_t count = 0;

  // counts summed up to and including each bucket; the last equals `count`.
  std::array<uint64_t, kLatencyBucketCount> Cumulative() const;
  // Estimate of the q-quantile (q in [0, 1], clamped) in seconds, by linear
  // interpolation inside the bucket that holds it (as Prometheus'
  // histogram_quantile does). 0 when empty; observations in the +Inf bucket
  // report the last finite bound, since nothing better is known.
  double Percentile(double q) const;
  double mean_seconds() const { return count ? sum_seconds / static_cast<double>(count) : 0; }
};

// Thread-safety: Record and Snapshot are lock-free and may run concurrently
// from any threads. A snapshot taken during a Record may include that
// observation's bucket but not yet its sum (nanoseconds of skew), which is
// harmless for monitoring.
class LatencyHistogram {
 public:
  // Negative durations (a clock stepped back) count as 0.
  void Record(std::chrono::nanoseconds duration);
  HistogramSnapshot Snapshot() const;
  double Percentile(double q) const { return Snapshot().Percentile(q); }

 private:
  std::array<std::atomic<uint64_t>, kLatencyBucketCount> buckets_{};
  std::atomic<uint64_t> sum_ns_{0};
};

// Counters of one operation, copied out of RequestMetrics.
struct OperationSnapshot {
  std::string op;
  uint64_t requests = 0;
  uint64_t errors = 0;  // requests that answered anything but kOk
  // Requests per answered code, kOk included; only codes seen at least once,
  // in the order of ErrorCode's declaration.
  std::vector<std::pair<ErrorCode, uint64_t>> codes;
  HistogramSnapshot latency;
};

// Request counts, error counts, per-code counts and latency per operation.
// The set of operation names is fixed at construction (so recording never
// allocates or locks); names not in the set are counted under "other", which
// is always present.
//
// Thread-safety: Record and Snapshot are lock-free and safe to call
// concurrently from any threads; the operation set is immutable.
class RequestMetrics {
 public:
  static constexpr std::string_view kOtherOp = "other";

  // `ops` in the order snapshots list them; duplicates are ignored.
  explicit RequestMetrics(const std::vector<std::string>& ops);
  ~RequestMetrics();
  RequestMetrics(const RequestMetrics&) = delete;
  RequestMetrics& operator=(const RequestMetrics&) = delete;

  void Record(std::string_view op, ErrorCode code, std::chrono::nanoseconds duration);
  // One entry per operation, in construction order, "other" last.
  std::vector<OperationSnapshot> Snapshot() const;
  const std::vector<std::string>& ops() const { return names_; }

 private:
  struct Op;
  size_t IndexOf(std::string_view op) const;

  std::vector<std::string> names_;  // immutable after construction
  std::unique_ptr<Op[]> ops_;       // parallel to names_
};

// Times one request and records it when Finish is called (or, as
// kInternalError, when destroyed unfinished: an exception or an early return
// that forgot to report still shows up as an error).
//
// Thread-safety: owned by the one thread serving the request.
class RequestTimer {
 public:
  RequestTimer(RequestMetrics& metrics, std::string_view op)
      : metrics_(&metrics), op_(op), start_(std::chrono::steady_clock::now()) {}
  ~RequestTimer() {
    if (metrics_) Finish(ErrorCode::kInternalError);
  }
  RequestTimer(const RequestTimer&) = delete;
  RequestTimer& operator=(const RequestTimer&) = delete;

  void Finish(ErrorCode code);

 private:
  RequestMetrics* metrics_;  // null once finished
  std::string_view op_;      // names a caller's string literal or ops() entry
  std::chrono::steady_clock::time_point start_;
};

// Lets a log line through at most once per `interval` per reason (an error
// code, a fault kind) and counts the ones held back, so a flood of identical
// failures (a full cluster answering NO_AVAILABLE_HANDLE to every put, a
// stream of malformed frames) writes one line per second saying how many
// were suppressed.
//
// Thread-safety: Admit takes an internal mutex; call from any thread.
class LogRateLimiter {
 public:
  explicit LogRateLimiter(std::chrono::steady_clock::duration interval) : interval_(interval) {}

  // Whether to log a failure with `code` now. When it returns true,
  // *suppressed holds the failures with that code held back since the last
  // line that was let through.
  bool Admit(int64_t reason, std::chrono::steady_clock::time_point now, uint64_t* suppressed);
  bool Admit(ErrorCode code, std::chrono::steady_clock::time_point now, uint64_t* suppressed) {
    return Admit(static_cast<int64_t>(code), now, suppressed);
  }

 private:
  struct Entry {
    std::chrono::steady_clock::time_point last;
    uint64_t suppressed = 0;
    bool logged = false;
  };
  const std::chrono::steady_clock::duration interval_;
  std::mutex mu_;
  std::vector<std::pair<int64_t, Entry>> entries_;  // guarded by mu_; few reasons
};

}  // namespace mooncake
