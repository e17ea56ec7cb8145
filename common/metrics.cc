#include "common/metrics.h"

#include <algorithm>
#include <cmath>

namespace mooncake {
namespace {

// Every code, in declaration order; per-code counters are indexed by position.
// RequestMetricsTest.EveryNamedCodeIsCountedAsItself fails for a code with a
// name (ToString) that is missing here.
constexpr std::array<ErrorCode, 18> kAllCodes = {
    ErrorCode::kOk,
    ErrorCode::kInternalError,
    ErrorCode::kNoAvailableHandle,
    ErrorCode::kInvalidKey,
    ErrorCode::kInvalidParams,
    ErrorCode::kIllegalClient,
    ErrorCode::kReplicaIsNotReady,
    ErrorCode::kObjectNotFound,
    ErrorCode::kObjectAlreadyExists,
    ErrorCode::kObjectHasLease,
    ErrorCode::kObjectReplicaBusy,
    ErrorCode::kTransferFail,
    ErrorCode::kRpcFail,
    ErrorCode::kRpcTimeout,
    ErrorCode::kNotOwner,
    ErrorCode::kTierNotFound,
    ErrorCode::kNodeNotFound,
    ErrorCode::kNotLeader,
};

// A code added to the enum but not to kAllCodes is counted as an internal
// error rather than dropped.
size_t CodeIndex(ErrorCode code) {
  auto it = std::ranges::find(kAllCodes, code);
  if (it == kAllCodes.end()) it = std::ranges::find(kAllCodes, ErrorCode::kInternalError);
  return static_cast<size_t>(it - kAllCodes.begin());
}

size_t BucketIndex(double seconds) {
  auto it = std::ranges::lower_bound(kLatencyBucketBounds, seconds);
  return static_cast<size_t>(it - kLatencyBucketBounds.begin());  // size() = +Inf bucket
}

}  // namespace

std::array<uint64_t, kLatencyBucketCount> HistogramSnapshot::Cumulative() const {
  std::array<uint64_t, kLatencyBucketCount> out{};
  uint64_t running = 0;
  for (size_t i = 0; i < counts.size(); ++i) out[i] = running += counts[i];
  return out;
}

double HistogramSnapshot::Percentile(double q) const {
  if (count == 0 || std::isnan(q)) return 0;
  q = std::clamp(q, 0.0, 1.0);
  // Rank of the wanted observation, 1-based, so q=0 lands in the first
  // non-empty bucket rather than before it.
  double rank = std::max(1.0, q * static_cast<double>(count));
  uint64_t below = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    if (counts[i] == 0 || static_cast<double>(below + counts[i]) < rank) {
      below += counts[i];
      continue;
    }
    if (i == kLatencyBucketBounds.size()) return kLatencyBucketBounds.back();
    double lower = i == 0 ? 0.0 : kLatencyBucketBounds[i - 1];
    double upper = kLatencyBucketBounds[i];
    double fraction = (rank - static_cast<double>(below)) / static_cast<double>(counts[i]);
    return lower + (upper - lower) * fraction;
  }
  return kLatencyBucketBounds.back();
}

void LatencyHistogram::Record(std::chrono::nanoseconds duration) {
  int64_t ns = std::max<int64_t>(0, duration.count());
  buckets_[BucketIndex(static_cast<double>(ns) * 1e-9)].fetch_add(1, std::memory_order_relaxed);
  sum_ns_.fetch_add(static_cast<uint64_t>(ns), std::memory_order_relaxed);
}

HistogramSnapshot LatencyHistogram::Snapshot() const {
  HistogramSnapshot out;
  for (size_t i = 0; i < buckets_.size(); ++i) {
    out.counts[i] = buckets_[i].load(std::memory_order_relaxed);
    out.count += out.counts[i];
  }
  out.sum_seconds = static_cast<double>(sum_ns_.load(std::memory_order_relaxed)) * 1e-9;
  return out;
}

struct RequestMetrics::Op {
  std::atomic<uint64_t> requests{0};
  std::array<std::atomic<uint64_t>, kAllCodes.size()> codes{};
  LatencyHistogram latency;
};

RequestMetrics::RequestMetrics(const std::vector<std::string>& ops) {
  for (const auto& op : ops) {
    if (op != kOtherOp && std::ranges::find(names_, op) == names_.end()) names_.push_back(op);
  }
  names_.emplace_back(kOtherOp);
  ops_ = std::make_unique<Op[]>(names_.size());
}

RequestMetrics::~RequestMetrics() = default;

// A linear scan: a dozen short names compare faster than hashing one, and the
// set never changes, so no lock is needed.
size_t RequestMetrics::IndexOf(std::string_view op) const {
  for (size_t i = 0; i + 1 < names_.size(); ++i) {
    if (names_[i] == op) return i;
  }
  return names_.size() - 1;  // "other"
}

void RequestMetrics::Record(std::string_view op, ErrorCode code,
                            std::chrono::nanoseconds duration) {
  Op& entry = ops_[IndexOf(op)];
  entry.requests.fetch_add(1, std::memory_order_relaxed);
  entry.codes[CodeIndex(code)].fetch_add(1, std::memory_order_relaxed);
  entry.latency.Record(duration);
}

std::vector<OperationSnapshot> RequestMetrics::Snapshot() const {
  std::vector<OperationSnapshot> out;
  out.reserve(names_.size());
  for (size_t i = 0; i < names_.size(); ++i) {
    const Op& entry = ops_[i];
    OperationSnapshot snap;
    snap.op = names_[i];
    snap.requests = entry.requests.load(std::memory_order_relaxed);
    for (size_t c = 0; c < kAllCodes.size(); ++c) {
      uint64_t n = entry.codes[c].load(std::memory_order_relaxed);
      if (n == 0) continue;
      snap.codes.emplace_back(kAllCodes[c], n);
      if (kAllCodes[c] != ErrorCode::kOk) snap.errors += n;
    }
    snap.latency = entry.latency.Snapshot();
    out.push_back(std::move(snap));
  }
  return out;
}

void RequestTimer::Finish(ErrorCode code) {
  if (!metrics_) return;
  metrics_->Record(op_, code, std::chrono::steady_clock::now() - start_);
  metrics_ = nullptr;
}

bool LogRateLimiter::Admit(int64_t reason, std::chrono::steady_clock::time_point now,
                           uint64_t* suppressed) {
  std::lock_guard lock(mu_);
  Entry* entry = nullptr;
  for (auto& [r, e] : entries_) {
    if (r == reason) entry = &e;
  }
  if (entry == nullptr) entry = &entries_.emplace_back(reason, Entry{}).second;
  if (entry->logged && now - entry->last < interval_) {
    ++entry->suppressed;
    return false;
  }
  *suppressed = std::exchange(entry->suppressed, 0);
  entry->last = now;
  entry->logged = true;
  return true;
}

}  // namespace mooncake
