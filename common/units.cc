#include "common/units.h"

#include <array>
#include <cctype>
#include <charconv>
#include <cstdio>
#include <utility>

namespace mooncake {
namespace {

std::string Lower(std::string_view text) {
  std::string out(text);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

Result<uint64_t> SuffixMultiplier(std::string_view suffix) {
  static constexpr std::array<std::pair<std::string_view, uint64_t>, 14> kSuffixes = {{
      {"", 1},
      {"b", 1},
      {"k", 1ull << 10},
      {"kib", 1ull << 10},
      {"kb", 1000ull},
      {"m", 1ull << 20},
      {"mib", 1ull << 20},
      {"mb", 1000ull * 1000},
      {"g", 1ull << 30},
      {"gib", 1ull << 30},
      {"gb", 1000ull * 1000 * 1000},
      {"t", 1ull << 40},
      {"tib", 1ull << 40},
      {"tb", 1000ull * 1000 * 1000 * 1000},
  }};
  std::string lowered = Lower(suffix);
  for (const auto& [name, multiplier] : kSuffixes) {
    if (lowered == name) return multiplier;
  }
  return Err(ErrorCode::kInvalidParams);
}

}  // namespace

Result<uint64_t> ParseByteSize(std::string_view text) {
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) {
    text.remove_suffix(1);
  }
  uint64_t number = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), number);
  if (ec != std::errc() || end == text.data()) return Err(ErrorCode::kInvalidParams);
  std::string_view suffix(end, text.data() + text.size() - end);
  while (!suffix.empty() && suffix.front() == ' ') suffix.remove_prefix(1);
  auto multiplier = SuffixMultiplier(suffix);
  if (!multiplier) return Err(multiplier.error());
  if (number != 0 && *multiplier > UINT64_MAX / number) return Err(ErrorCode::kInvalidParams);
  return number * *multiplier;
}

std::string FormatBytes(uint64_t bytes) {
  static constexpr std::array<const char*, 7> kUnits = {"B",   "KiB", "MiB", "GiB",
                                                        "TiB", "PiB", "EiB"};
  char buf[32];
  if (bytes < 1024) {
    std::snprintf(buf, sizeof(buf), "%llu B", static_cast<unsigned long long>(bytes));
    return buf;
  }
  double value = static_cast<double>(bytes);
  size_t unit = 0;
  while (value >= 1024.0 && unit + 1 < kUnits.size()) {
    value /= 1024.0;
    ++unit;
  }
  // 1023.96 KiB would print as "1024.0 KiB"; move up a unit instead.
  if (value >= 1023.95 && unit + 1 < kUnits.size()) {
    value /= 1024.0;
    ++unit;
  }
  std::snprintf(buf, sizeof(buf), "%.1f %s", value, kUnits[unit]);
  return buf;
}

std::string FormatByteSize(uint64_t bytes) {
  // The units ParseByteSize knows, largest last.
  static constexpr std::array<const char*, 4> kUnits = {"KiB", "MiB", "GiB", "TiB"};
  if (bytes == 0) return "0";
  int unit = -1;
  while (unit + 1 < static_cast<int>(kUnits.size()) && bytes % 1024 == 0) {
    bytes /= 1024;
    ++unit;
  }
  return std::to_string(bytes) + (unit < 0 ? "" : kUnits[unit]);
}

}  // namespace mooncake
