#include "bench/bench_util.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <string>

namespace mooncake::bench {

std::optional<uint64_t> ParseSize(std::string_view text) {
  uint64_t number = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), number);
  if (ec != std::errc() || end == text.data()) return std::nullopt;
  std::string unit(end, text.data() + text.size());
  for (char& c : unit) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (unit.ends_with("ib")) {
    unit.resize(unit.size() - 2);
  } else if (unit.size() > 1 && unit.ends_with("b")) {
    unit.pop_back();
  } else if (unit == "b") {
    unit.clear();
  }
  int shift = 0;
  if (unit == "k") {
    shift = 10;
  } else if (unit == "m") {
    shift = 20;
  } else if (unit == "g") {
    shift = 30;
  } else if (unit == "t") {
    shift = 40;
  } else if (!unit.empty()) {
    return std::nullopt;
  }
  if (number == 0 || number > (UINT64_MAX >> shift)) return std::nullopt;
  return number << shift;
}

uint32_t Percentile(const std::vector<uint32_t>& sorted, double q) {
  if (sorted.empty()) return 0;
  // Nearest rank: the smallest sample at or above a fraction q of all.
  auto rank = static_cast<size_t>(std::ceil(q * static_cast<double>(sorted.size())));
  return sorted[std::clamp<size_t>(rank, 1, sorted.size()) - 1];
}

}  // namespace mooncake::bench
