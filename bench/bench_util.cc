#include "bench/bench_util.h"

#include <spdlog/fmt/fmt.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <string>

namespace mooncake::bench {

std::optional<double> MetricValue(std::string_view exposition, std::string_view name) {
  size_t pos = 0;
  while (pos < exposition.size()) {
    size_t end = exposition.find('\n', pos);
    if (end == std::string_view::npos) end = exposition.size();
    std::string_view line = exposition.substr(pos, end - pos);
    pos = end + 1;
    if (!line.starts_with(name) || line.size() <= name.size() || line[name.size()] != ' ') {
      continue;
    }
    std::string number(line.substr(name.size() + 1));
    char* parsed_end = nullptr;
    double value = std::strtod(number.c_str(), &parsed_end);
    if (parsed_end == number.c_str()) return std::nullopt;
    return value;
  }
  return std::nullopt;
}

std::optional<double> MasterBytesPerKey(uint64_t rss_before, uint64_t rss_after, uint64_t keys,
                                        double avg_key_bytes) {
  if (keys == 0) return std::nullopt;
  double grown = static_cast<double>(rss_after) - static_cast<double>(rss_before);
  return grown / static_cast<double>(keys) - avg_key_bytes;
}

uint64_t BatchKeys(uint64_t total, uint64_t batch, uint64_t index) {
  if (batch == 0) return 0;
  uint64_t begin = index * batch;
  if (begin >= total) return 0;
  return std::min(batch, total - begin);
}

std::string RunPrefix(const std::string& prefix) {
  auto now = std::chrono::system_clock::now().time_since_epoch();
  auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(now).count();
  return fmt::format("{}-{:x}-{}-", prefix, ns, getpid());
}

std::optional<HostPort> ParseHostPort(std::string_view text) {
  size_t colon = text.rfind(':');
  if (colon == std::string_view::npos || colon == 0) return std::nullopt;
  std::string_view digits = text.substr(colon + 1);
  int port = 0;
  auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), port);
  if (digits.empty() || error != std::errc() || end != digits.data() + digits.size() || port < 1 ||
      port > 65535) {
    return std::nullopt;
  }
  return HostPort{std::string(text.substr(0, colon)), port};
}

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

namespace {

double Zeta(uint64_t n, double theta) {
  double sum = 0;
  for (uint64_t i = 1; i <= n; ++i) sum += 1.0 / std::pow(static_cast<double>(i), theta);
  return sum;
}

}  // namespace

ZipfGenerator::ZipfGenerator(uint64_t n, double theta)
    : n_(std::max<uint64_t>(n, 1)), theta_(theta), zetan_(Zeta(n_, theta)) {
  double zeta2 = Zeta(2, theta_);
  alpha_ = 1.0 / (1.0 - theta_);
  eta_ = (1.0 - std::pow(2.0 / static_cast<double>(n_), 1.0 - theta_)) / (1.0 - zeta2 / zetan_);
}

uint64_t ZipfGenerator::Next(double uniform) const {
  if (n_ == 1) return 0;
  double uz = uniform * zetan_;
  if (uz < 1.0) return 0;
  if (uz < 1.0 + std::pow(0.5, theta_)) return 1;
  auto rank = static_cast<uint64_t>(static_cast<double>(n_) *
                                    std::pow(eta_ * uniform - eta_ + 1.0, alpha_));
  return std::min(rank, n_ - 1);
}

}  // namespace mooncake::bench
