#include "http/process_metrics.h"

#include <dirent.h>
#include <unistd.h>

#include <charconv>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "common/version.h"

namespace mooncake {
namespace {

std::string ReadFile(const char* path) {
  std::ifstream in(path);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

std::optional<uint64_t> ToU64(std::string_view text) {
  uint64_t value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

std::vector<std::string_view> Fields(std::string_view text) {
  std::vector<std::string_view> out;
  size_t i = 0;
  while (i < text.size()) {
    while (i < text.size() && (text[i] == ' ' || text[i] == '\t' || text[i] == '\n')) ++i;
    size_t start = i;
    while (i < text.size() && text[i] != ' ' && text[i] != '\t' && text[i] != '\n') ++i;
    if (i > start) out.push_back(text.substr(start, i - start));
  }
  return out;
}

uint64_t CountOpenFds() {
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return 0;
  uint64_t n = 0;
  while (dirent* entry = readdir(dir)) {
    if (entry->d_name[0] != '.') ++n;
  }
  closedir(dir);
  return n > 0 ? n - 1 : 0;  // not the descriptor opendir itself holds
}

}  // namespace

std::optional<ProcStatFields> ParseProcSelfStat(std::string_view stat) {
  size_t close = stat.rfind(')');
  if (close == std::string_view::npos) return std::nullopt;
  // fields[0] is field 3 (state) of proc(5), so field N is fields[N - 3].
  auto fields = Fields(stat.substr(close + 1));
  if (fields.size() < 22) return std::nullopt;
  auto utime = ToU64(fields[14 - 3]), stime = ToU64(fields[15 - 3]);
  auto start = ToU64(fields[22 - 3]), vsize = ToU64(fields[23 - 3]);
  auto rss = ToU64(fields[24 - 3]);
  if (!utime || !stime || !start || !vsize || !rss) return std::nullopt;
  return ProcStatFields{*utime, *stime, *start, *vsize, *rss};
}

std::optional<uint64_t> ParseBootTime(std::string_view proc_stat) {
  size_t pos = 0;
  while (pos < proc_stat.size()) {
    size_t end = proc_stat.find('\n', pos);
    if (end == std::string_view::npos) end = proc_stat.size();
    auto fields = Fields(proc_stat.substr(pos, end - pos));
    if (fields.size() == 2 && fields[0] == "btime") return ToU64(fields[1]);
    pos = end + 1;
  }
  return std::nullopt;
}

std::optional<uint64_t> ParseMaxOpenFiles(std::string_view limits) {
  constexpr std::string_view kLine = "Max open files";
  size_t pos = limits.find(kLine);
  if (pos == std::string_view::npos) return std::nullopt;
  size_t end = limits.find('\n', pos);
  auto fields = Fields(limits.substr(pos + kLine.size(), end == std::string_view::npos
                                                             ? std::string_view::npos
                                                             : end - pos - kLine.size()));
  if (fields.empty()) return std::nullopt;
  if (fields[0] == "unlimited") return uint64_t{0};
  return ToU64(fields[0]);
}

ProcessStats ReadProcessStats() {
  ProcessStats stats;
  long ticks = sysconf(_SC_CLK_TCK);
  long page = sysconf(_SC_PAGESIZE);
  if (auto fields = ParseProcSelfStat(ReadFile("/proc/self/stat")); fields && ticks > 0) {
    stats.cpu_seconds =
        static_cast<double>(fields->utime_ticks + fields->stime_ticks) / static_cast<double>(ticks);
    stats.virtual_bytes = fields->vsize_bytes;
    stats.resident_bytes = fields->rss_pages * static_cast<uint64_t>(page > 0 ? page : 4096);
    if (auto boot = ParseBootTime(ReadFile("/proc/stat"))) {
      stats.start_time_seconds =
          static_cast<double>(*boot) +
          static_cast<double>(fields->start_ticks) / static_cast<double>(ticks);
    }
  }
  stats.open_fds = CountOpenFds();
  if (auto max = ParseMaxOpenFiles(ReadFile("/proc/self/limits"))) stats.max_fds = *max;
  return stats;
}

void WriteProcessMetrics(PrometheusWriter& w, const ProcessStats& s) {
  w.BeginCounter("process_cpu_seconds", "Total user and system CPU time spent in seconds.");
  w.Sample({}, s.cpu_seconds);
  auto integer_gauge = [&w](std::string_view name, std::string_view help, uint64_t value) {
    w.BeginGauge(name, help);
    w.Sample({}, value);
  };
  integer_gauge("process_resident_memory_bytes", "Resident memory size in bytes.",
                s.resident_bytes);
  integer_gauge("process_virtual_memory_bytes", "Virtual memory size in bytes.", s.virtual_bytes);
  w.Gauge("process_start_time_seconds", "Start time of the process since unix epoch in seconds.",
          s.start_time_seconds);
  integer_gauge("process_open_fds", "Number of open file descriptors.", s.open_fds);
  integer_gauge("process_max_fds", "Maximum number of open file descriptors.", s.max_fds);
}

void WriteBuildInfo(PrometheusWriter& w) {
  const BuildInfo& info = GetBuildInfo();
  w.BeginGauge("mooncake_build_info", "Always 1; the labels say what was built");
  w.Sample({{"version", std::string(info.version)},
            {"commit", std::string(info.commit)},
            {"build_type", std::string(info.build_type)}},
           uint64_t{1});
}

}  // namespace mooncake
