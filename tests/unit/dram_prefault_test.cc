// --dram-prefault: a DRAM tier created with prefault has its whole arena
// resident before Create returns; one without it has nothing resident until
// written. Real tiers, real mappings: residency is read back from the kernel
// (mincore and /proc/self/smaps), not inferred.

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <string>
#include <vector>

#include "tiers/dram_tier.h"
#include "worker/worker_config.h"

namespace mooncake {
namespace {

constexpr uint64_t kMiB = 1ull << 20;
constexpr uint64_t kCapacity = 64 * kMiB;

// Pages of [base, base + size) the kernel holds in memory (for the memfd:
// in its page cache, mapped or not).
uint64_t ResidentPages(const std::byte* base, uint64_t size) {
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  std::vector<unsigned char> vec((size + page - 1) / page);
  void* start = const_cast<std::byte*>(base);
  if (mincore(start, size, vec.data()) != 0) {
    ADD_FAILURE() << "mincore failed errno=" << errno;
    return 0;
  }
  uint64_t resident = 0;
  for (unsigned char v : vec) resident += v & 1;
  return resident;
}

// Rss of the mapping that starts at `base`, in bytes: pages mapped into this
// process, which is what a first write would otherwise fault in.
uint64_t MappingRss(const std::byte* base) {
  char prefix[32];
  std::snprintf(prefix, sizeof(prefix), "%lx-", reinterpret_cast<unsigned long>(base));
  std::ifstream smaps("/proc/self/smaps");
  bool inside = false;
  for (std::string line; std::getline(smaps, line);) {
    if (line.starts_with(prefix)) inside = true;
    unsigned long long kib = 0;
    if (inside && std::sscanf(line.c_str(), "Rss: %llu kB", &kib) == 1) return kib << 10;
  }
  ADD_FAILURE() << "no mapping at " << prefix << " in /proc/self/smaps";
  return 0;
}

uint64_t PagesOf(uint64_t bytes) { return bytes / static_cast<uint64_t>(sysconf(_SC_PAGESIZE)); }

TEST(DramPrefaultTest, PrefaultedArenaIsResidentBeforeCreateReturns) {
  auto tier = DramTier::Create("dram-prefault", kCapacity, {.prefault = true});
  ASSERT_TRUE(tier) << ToString(tier.error());
  const std::byte* base = (*tier)->arena_base();

  EXPECT_EQ(ResidentPages(base, kCapacity), PagesOf(kCapacity));
  EXPECT_GE(MappingRss(base), kCapacity);
  // Still an ordinary tier: the arena holds what is written.
  auto loc = (*tier)->Allocate(kMiB);
  ASSERT_TRUE(loc);
  const std::vector<std::byte> data(kMiB, std::byte{0x5a});
  ASSERT_TRUE((*tier)->Write(*loc, 0, data));
  EXPECT_EQ(std::memcmp((*tier)->HostAddress(*loc), data.data(), data.size()), 0);
}

TEST(DramPrefaultTest, LazyArenaHoldsOnlyWhatWasWritten) {
  auto tier = DramTier::Create("dram-lazy", kCapacity);
  ASSERT_TRUE(tier) << ToString(tier.error());
  const std::byte* base = (*tier)->arena_base();
  EXPECT_EQ(ResidentPages(base, kCapacity), 0u);
  EXPECT_EQ(MappingRss(base), 0u);

  // The probes do see pages once written, so the zeros above mean something.
  auto loc = (*tier)->Allocate(4 * kMiB);
  ASSERT_TRUE(loc);
  ASSERT_TRUE((*tier)->Write(*loc, 0, std::vector<std::byte>(4 * kMiB, std::byte{1})));
  EXPECT_EQ(ResidentPages(base, kCapacity), PagesOf(4 * kMiB));
  EXPECT_LT(MappingRss(base), kCapacity / 2);
}

TEST(DramPrefaultTest, RefusesAnArenaLargerThanFreeMemory) {
  // MemAvailable as the tier reads it; without it the tier cannot tell, and
  // populating a too-large arena would meet the OOM killer instead.
  std::ifstream meminfo("/proc/meminfo");
  unsigned long long kib = 0;
  for (std::string line; std::getline(meminfo, line);) {
    if (std::sscanf(line.c_str(), "MemAvailable: %llu kB", &kib) == 1) break;
  }
  if (kib == 0) GTEST_SKIP() << "no MemAvailable in /proc/meminfo";
  const uint64_t too_much = (kib << 10) * 4;  // far past it, so it cannot become free meanwhile

  auto tier = DramTier::Create("dram-huge", too_much, {.prefault = true});
  ASSERT_FALSE(tier);
  EXPECT_EQ(tier.error(), ErrorCode::kNoAvailableHandle);
}

Result<WorkerConfig> Parse(std::initializer_list<const char*> args, std::string* message) {
  std::vector<const char*> argv = {"mooncake-worker"};
  argv.insert(argv.end(), args.begin(), args.end());
  return ParseWorkerConfig(static_cast<int>(argv.size()), argv.data(), message);
}

TEST(DramPrefaultTest, FlagIsOffByDefaultAndReadFromFlagOrFile) {
  std::string message;
  auto defaults = Parse({}, &message);
  ASSERT_TRUE(defaults) << message;
  EXPECT_FALSE(defaults->dram_prefault);

  auto flag = Parse({"--dram-prefault"}, &message);
  ASSERT_TRUE(flag) << message;
  EXPECT_TRUE(flag->dram_prefault);

  auto explicit_off = Parse({"--dram-prefault=false"}, &message);
  ASSERT_TRUE(explicit_off) << message;
  EXPECT_FALSE(explicit_off->dram_prefault);

  const auto path = std::filesystem::temp_directory_path() /
                    ("dram_prefault_test_" + std::to_string(getpid()) + ".toml");
  std::ofstream(path) << "dram-prefault = true\n";
  auto file = Parse({"--config", path.c_str()}, &message);
  std::filesystem::remove(path);
  ASSERT_TRUE(file) << message;
  EXPECT_TRUE(file->dram_prefault);
}

TEST(DramPrefaultTest, PinningForVramIsOffByDefaultAndReadFromTheFlag) {
  std::string message;
  auto defaults = Parse({}, &message);
  ASSERT_TRUE(defaults) << message;
  EXPECT_FALSE(defaults->dram_pin_for_vram);
  auto flag = Parse({"--dram-pin-for-vram"}, &message);
  ASSERT_TRUE(flag) << message;
  EXPECT_TRUE(flag->dram_pin_for_vram);
  EXPECT_FALSE(flag->dram_prefault) << "implied where it applies, not rewritten in the config";
}

}  // namespace
}  // namespace mooncake
