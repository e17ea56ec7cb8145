#include "common/spare_cpu.h"

#include <fcntl.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>
#include <vector>

#include "common/clock.h"

namespace mooncake {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kRefreshNs = 1'000'000;  // the running count is read at most once a millisecond

// Test override: kMeasure, or a forced answer.
constexpr int kMeasure = -1;
std::atomic<int> forced{kMeasure};

std::string FirstWord(const fs::path& file) {
  std::ifstream in(file);
  std::string word;
  in >> word;
  return word;
}

// root/relative and each directory above it, up to `root` itself.
std::vector<fs::path> SelfAndAncestors(const fs::path& root, std::string_view relative) {
  std::vector<fs::path> dirs;
  fs::path rel = fs::path(relative).relative_path();
  while (true) {
    dirs.push_back(root / rel);
    if (rel.empty()) break;
    rel = rel.parent_path();
  }
  return dirs;
}

constexpr int64_t kDefaultCfsPeriodUs = 100'000;

std::optional<int64_t> ParseInt(std::string_view text) {
  int64_t value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

// CPUs a quota of `quota_us` per `period_us` gives: at least a hundredth.
double CpusOf(int64_t quota_us, std::optional<int64_t> period_us) {
  int64_t period = period_us && *period_us > 0 ? *period_us : kDefaultCfsPeriodUs;
  return std::max(0.01, static_cast<double>(quota_us) / static_cast<double>(period));
}

// cgroup v2: cpu.max is "max PERIOD" (no quota) or "QUOTA PERIOD". Content
// that does not parse still marks a quota, taken as one CPU.
std::optional<double> LimitInV2(const fs::path& dir) {
  std::ifstream in(dir / "cpu.max");
  std::string quota, period;
  in >> quota >> period;
  if (quota.empty() || quota == "max") return std::nullopt;
  auto quota_us = ParseInt(quota);
  if (!quota_us || *quota_us <= 0) return 1.0;
  return CpusOf(*quota_us, ParseInt(period));
}

// cgroup v1: cpu.cfs_quota_us above 0 is a quota, per cpu.cfs_period_us.
std::optional<double> LimitInV1(const fs::path& dir) {
  auto quota_us = ParseInt(FirstWord(dir / "cpu.cfs_quota_us"));
  if (!quota_us || *quota_us <= 0) return std::nullopt;
  return CpusOf(*quota_us, ParseInt(FirstWord(dir / "cpu.cfs_period_us")));
}

// The smaller of two limits, either possibly absent.
std::optional<double> Tighter(std::optional<double> a, std::optional<double> b) {
  if (!a) return b;
  if (!b) return a;
  return std::min(*a, *b);
}

// This process's cgroup CPU limit, read once: the spare-CPU probe and
// UsableCpus() both ask.
const std::optional<double>& SelfCgroupCpuLimit() {
  static const std::optional<double> limit = [] {
    std::ifstream self("/proc/self/cgroup");
    std::string text((std::istreambuf_iterator<char>(self)), std::istreambuf_iterator<char>());
    return CgroupCpuLimit(text, "/sys/fs/cgroup");
  }();
  return limit;
}

// The process-wide measurement behind SpareCpuNow().
class LoadProbe {
 public:
  LoadProbe() : cpus_(AllowedCpus()) {
    if (SelfCgroupCpuLimit()) {
      unavailable_ = "a cgroup CPU quota applies";
      return;
    }
    fd_ = ::open("/proc/loadavg", O_RDONLY | O_CLOEXEC);
    if (fd_ < 0 || !ReadRunning()) unavailable_ = "cannot read /proc/loadavg";
  }
  ~LoadProbe() {
    if (fd_ >= 0) ::close(fd_);
  }

  bool Spare() {
    if (!unavailable_.empty()) return false;
    int64_t now = SteadyNanos();
    int64_t last = read_at_.load(std::memory_order_relaxed);
    // One caller a millisecond re-reads; the others use what it found.
    if (now - last >= kRefreshNs &&
        read_at_.compare_exchange_strong(last, now, std::memory_order_relaxed)) {
      ReadRunning();
    }
    return running_.load(std::memory_order_relaxed) <= cpus_;
  }

  std::string_view unavailable() const { return unavailable_; }

 private:
  bool ReadRunning() {
    char line[128];
    ssize_t n = ::pread(fd_, line, sizeof(line), 0);
    if (n <= 0) return false;
    auto running = ParseRunningThreads(std::string_view(line, static_cast<size_t>(n)));
    if (!running) return false;
    running_.store(*running, std::memory_order_relaxed);
    return true;
  }

  const int cpus_;
  int fd_ = -1;
  std::string unavailable_;
  std::atomic<int64_t> read_at_{0};
  std::atomic<int> running_{INT32_MAX};
};

LoadProbe& Probe() {
  static LoadProbe probe;
  return probe;
}

}  // namespace

bool SpareCpuNow() {
  int force = forced.load(std::memory_order_relaxed);
  if (force != kMeasure) return force == 1;
  return Probe().Spare();
}

std::string_view SpareCpuUnavailableReason() { return Probe().unavailable(); }

void ForceSpareCpuForTesting(std::optional<bool> spare) {
  forced.store(spare ? static_cast<int>(*spare) : kMeasure, std::memory_order_relaxed);
}

std::optional<int> ParseRunningThreads(std::string_view loadavg) {
  // "avg1 avg5 avg15 running/total last_pid": the fourth word.
  size_t at = 0;
  for (int word = 0; word < 3; ++word) {
    at = loadavg.find(' ', at);
    if (at == std::string_view::npos) return std::nullopt;
    at = loadavg.find_first_not_of(' ', at);
    if (at == std::string_view::npos) return std::nullopt;
  }
  int running = 0;
  auto [end, ec] = std::from_chars(loadavg.data() + at, loadavg.data() + loadavg.size(), running);
  if (ec != std::errc() || end == loadavg.data() + loadavg.size() || *end != '/' || running < 0) {
    return std::nullopt;
  }
  return running;
}

std::optional<double> CgroupCpuLimit(std::string_view self_cgroup, const fs::path& cgroup_mount) {
  std::optional<double> limit;
  // Lines of "id:controllers:path"; id 0 with no controllers is cgroup v2.
  while (!self_cgroup.empty()) {
    size_t end = self_cgroup.find('\n');
    std::string_view line = self_cgroup.substr(0, end);
    self_cgroup = end == std::string_view::npos ? std::string_view() : self_cgroup.substr(end + 1);
    size_t first = line.find(':');
    size_t second = first == std::string_view::npos ? first : line.find(':', first + 1);
    if (second == std::string_view::npos) continue;
    std::string_view controllers = line.substr(first + 1, second - first - 1);
    std::string_view path = line.substr(second + 1);
    if (controllers.empty()) {
      // Unified hierarchy: mounted at the root, or beside v1 as "unified".
      for (const auto& mount : {cgroup_mount, cgroup_mount / "unified"}) {
        for (const auto& dir : SelfAndAncestors(mount, path))
          limit = Tighter(limit, LimitInV2(dir));
      }
      continue;
    }
    bool has_cpu = false;
    for (size_t at = 0; at <= controllers.size();) {
      size_t comma = controllers.find(',', at);
      if (comma == std::string_view::npos) comma = controllers.size();
      has_cpu = has_cpu || controllers.substr(at, comma - at) == "cpu";
      at = comma + 1;
    }
    if (!has_cpu) continue;
    // v1 mounts the controller at its list's name ("cpu,cpuacct"), usually
    // with a "cpu" link beside it.
    for (const auto& mount : {cgroup_mount / std::string(controllers), cgroup_mount / "cpu"}) {
      for (const auto& dir : SelfAndAncestors(mount, path)) limit = Tighter(limit, LimitInV1(dir));
    }
  }
  return limit;
}

int AllowedCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1L, sysconf(_SC_NPROCESSORS_ONLN));
}

int UsableCpus() {
  static const int cpus = [] {
    int allowed = AllowedCpus();
    const std::optional<double>& limit = SelfCgroupCpuLimit();
    if (!limit) return allowed;
    return std::clamp(static_cast<int>(std::ceil(*limit)), 1, allowed);
  }();
  return cpus;
}

}  // namespace mooncake
