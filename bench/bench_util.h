#pragma once

// Pure helpers of mooncake-bench: size flags and latency summaries.

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

namespace mooncake::bench {

// "4096", "4K", "4KB", "4KiB", "1m", "1MB", "1MiB", "2G"...; every unit is a
// power of 1024, as in fio, so "4KB" is one 4096-byte KV block. nullopt for
// malformed text or zero.
std::optional<uint64_t> ParseSize(std::string_view text);

// The q-quantile (0..1) of sorted samples; 0 when there are none.
uint32_t Percentile(const std::vector<uint32_t>& sorted, double q);

}  // namespace mooncake::bench
