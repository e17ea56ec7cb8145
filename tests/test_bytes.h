#pragma once

// Byte helpers the unit and integration tests share.

#include <cstddef>
#include <cstdint>
#include <random>
#include <span>
#include <string>

namespace mooncake::testing {

// `size` pseudo-random bytes, the same for the same seed.
inline std::string Pattern(uint64_t size, uint64_t seed) {
  std::string value(size, '\0');
  std::mt19937_64 rng(seed);
  for (auto& c : value) c = static_cast<char>(rng());
  return value;
}

// A string's bytes, for the tier and mapping APIs that take std::byte spans.
inline std::span<const std::byte> Bytes(const std::string& s) {
  return std::as_bytes(std::span(s.data(), s.size()));
}

}  // namespace mooncake::testing
