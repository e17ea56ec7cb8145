// KeepFreedHeapForReuse: after a wave of allocations is freed, the next wave
// reuses the heap's pages instead of faulting in fresh ones. Each case runs
// in a forked child, so that its malloc settings and heap stay its own.

#include "common/heap_tuning.h"

#include <gtest/gtest.h>
#include <malloc.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

namespace mooncake {
namespace {

// 1 KiB blocks: past glibc's fastbins, so that freeing them gives their
// memory back to the top of the heap, as a server's freed vectors and
// records do. 16 MiB in all: past the default trim threshold and the
// tuned top pad, within the tuned trim threshold.
constexpr size_t kBlockBytes = 1024;
constexpr size_t kBlocks = 16384;

long MinorFaults() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_minflt;
}

std::vector<char*> AllocateAndTouch() {
  std::vector<char*> blocks(kBlocks);
  for (auto& block : blocks) {
    block = static_cast<char*>(std::malloc(kBlockBytes));
    std::memset(block, 1, kBlockBytes);
  }
  return blocks;
}

void FreeAll(std::vector<char*>& blocks) {
  // In order: the first few stay in the thread's cache, the rest merge into
  // one free run that the last free joins to the heap's top.
  for (char* block : blocks) std::free(block);
}

// glibc's documented defaults, as a fresh process has them: the parent (a
// test binary that ran other tests first) may have moved glibc's adaptive
// thresholds.
void StartFromGlibcDefaults() {
  mallopt(M_MMAP_THRESHOLD, 128 << 10);
  mallopt(M_TRIM_THRESHOLD, 128 << 10);
  mallopt(M_TOP_PAD, 128 << 10);
}

struct WaveResult {
  HeapTuning tuning;
  long refill_faults;  // minor faults of the second wave
};

// In a child: optionally tune, then a wave, free it, and count the faults
// of a second wave of the same size.
std::optional<WaveResult> RunTwoWavesInAChild(std::optional<std::string> tunables) {
  int fds[2];
  if (pipe(fds) != 0) return std::nullopt;
  pid_t pid = fork();
  if (pid < 0) return std::nullopt;
  if (pid == 0) {
    close(fds[0]);
    WaveResult result{HeapTuning::kRefused, -1};
    StartFromGlibcDefaults();
    if (tunables) result.tuning = KeepFreedHeapForReuse(*tunables);
    std::vector<char*> first = AllocateAndTouch();
    FreeAll(first);
    long before = MinorFaults();
    std::vector<char*> second = AllocateAndTouch();
    result.refill_faults = MinorFaults() - before;
    FreeAll(second);
    bool sent = write(fds[1], &result, sizeof(result)) == sizeof(result);
    _exit(sent ? 0 : 1);
  }
  close(fds[1]);
  WaveResult result{};
  bool got = read(fds[0], &result, sizeof(result)) == sizeof(result);
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (!got || !WIFEXITED(status) || WEXITSTATUS(status) != 0) return std::nullopt;
  return result;
}

bool MallocTunedFromOutside() {
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  return tunables != nullptr && std::strstr(tunables, "glibc.malloc.") != nullptr;
}

TEST(HeapTuningTest, ASecondWaveReusesTheFirstWavesPages) {
  auto tuned = RunTwoWavesInAChild(std::string());
  ASSERT_TRUE(tuned) << "the child failed";
  EXPECT_EQ(tuned->tuning, HeapTuning::kApplied);
  // A few faults may come from the fault counter's own pages or the vector.
  EXPECT_LT(tuned->refill_faults, 64) << "the freed 16 MiB went back to the kernel";
}

TEST(HeapTuningTest, WithoutItTheSecondWaveFaultsItsPagesInAgain) {
  // The control: glibc's defaults trim the heap after the first wave, which
  // is what the tuning exists to stop.
  if (MallocTunedFromOutside()) GTEST_SKIP() << "GLIBC_TUNABLES sets malloc for this process";
  auto untuned = RunTwoWavesInAChild(std::nullopt);
  ASSERT_TRUE(untuned) << "the child failed";
  EXPECT_GT(untuned->refill_faults, static_cast<long>(kBlocks * kBlockBytes / 4096 / 2));
}

TEST(HeapTuningTest, AnOperatorsMallocTunablesWin) {
  if (MallocTunedFromOutside()) GTEST_SKIP() << "GLIBC_TUNABLES sets malloc for this process";
  auto left = RunTwoWavesInAChild(std::string("glibc.malloc.arena_max=2"));
  ASSERT_TRUE(left) << "the child failed";
  EXPECT_EQ(left->tuning, HeapTuning::kLeftToTunables);
  // Nothing was changed: glibc still trims (the control above).
  EXPECT_GT(left->refill_faults, static_cast<long>(kBlocks * kBlockBytes / 4096 / 2));
  // Tunables for other parts of glibc do not count.
  auto other = RunTwoWavesInAChild(std::string("glibc.pthread.rseq=0"));
  ASSERT_TRUE(other) << "the child failed";
  EXPECT_EQ(other->tuning, HeapTuning::kApplied);
}

}  // namespace
}  // namespace mooncake
