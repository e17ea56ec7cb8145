#pragma once

// Pure helpers of mooncake-bench: size flags and latency summaries.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace mooncake::bench {

// "4096", "4K", "4KB", "4KiB", "1m", "1MB", "1MiB", "2G"...; every unit is a
// power of 1024, as in fio, so "4KB" is one 4096-byte KV block. nullopt for
// malformed text or zero.
std::optional<uint64_t> ParseSize(std::string_view text);

// The unique start of every key of one run: `prefix`, the clock and the pid
// ("bench-18eb169efb55a63c-20300-"), so runs never share keys.
std::string RunPrefix(const std::string& prefix);

struct HostPort {
  std::string host;
  int port = 0;
};
// "HOST:PORT", split at the last colon; nullopt without a host, or with a
// port that is not a number in 1..65535.
std::optional<HostPort> ParseHostPort(std::string_view text);

// The q-quantile (0..1) of sorted samples; 0 when there are none.
uint32_t Percentile(const std::vector<uint32_t>& sorted, double q);

// The value of the unlabelled sample `name` in a Prometheus text exposition
// ("name 123" or "name 1.5e9" on a line of its own); nullopt when absent or
// malformed.
std::optional<double> MetricValue(std::string_view exposition, std::string_view name);

// The master's memory per key beyond the key text itself:
// (rss_after - rss_before) / keys - avg_key_bytes. May be negative (the RSS
// can shrink, or the allocator had memory ready); nullopt when keys == 0.
std::optional<double> MasterBytesPerKey(uint64_t rss_before, uint64_t rss_after, uint64_t keys,
                                        double avg_key_bytes);

// How many keys call `index` of `batch`-key calls over `total` keys takes:
// `batch`, or what is left for the last call (0 past the end).
uint64_t BatchKeys(uint64_t total, uint64_t batch, uint64_t index);

// Zipf-distributed ranks in [0, n): rank 0 is the most popular. The YCSB
// generator (Gray et al., "Quickly generating billion-record synthetic
// databases"): O(n) set-up to sum the zeta constant, O(1) per sample.
// theta in [0, 1); 0.99 is YCSB's default skew.
//
// Thread-safety: Next() is const; share one generator, give each thread its
// own random engine.
class ZipfGenerator {
 public:
  ZipfGenerator(uint64_t n, double theta);
  // `uniform` is a sample of U[0, 1).
  uint64_t Next(double uniform) const;
  uint64_t n() const { return n_; }

 private:
  uint64_t n_;
  double theta_;
  double zetan_;
  double alpha_;
  double eta_;
};

}  // namespace mooncake::bench
