#include "tiers/ssd_tier.h"

#include <dlfcn.h>
#include <gtest/gtest.h>
#include <rocksdb/db.h>
#include <spawn.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <climits>
#include <csignal>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "tests/disk_faults.h"
#include "tiers/ssd_format.h"

extern char** environ;

// Read faults for one file: while fail_reads_of is set, every pread of a file
// whose path ends with it fails with EIO. Defined here, pread replaces libc's
// for the whole test binary (RocksDB's reads included); all other reads go
// on to the next definition (libc's, or a sanitizer's).
namespace {
std::atomic<const char*> fail_reads_of{nullptr};

bool PathEndsWith(int fd, std::string_view suffix) {
  char link[PATH_MAX];
  const std::string proc = "/proc/self/fd/" + std::to_string(fd);
  const ssize_t n = readlink(proc.c_str(), link, sizeof(link));
  return n > 0 && std::string_view(link, static_cast<size_t>(n)).ends_with(suffix);
}
}  // namespace

extern "C" ssize_t pread(int fd, void* buf, size_t count, off_t offset) {
  if (const char* suffix = fail_reads_of.load(); suffix != nullptr && PathEndsWith(fd, suffix)) {
    errno = EIO;
    return -1;
  }
  using Pread = ssize_t (*)(int, void*, size_t, off_t);
  static const auto next = reinterpret_cast<Pread>(dlsym(RTLD_NEXT, "pread"));
  return next(fd, buf, count, offset);
}

namespace mooncake {
namespace {

constexpr uint64_t kChunk = SsdTier::kChunkBytes;
constexpr uint64_t kMiB = 1ull << 20;

std::vector<std::byte> RandomBytes(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::byte> out(n);
  for (auto& b : out) b = static_cast<std::byte>(rng());
  return out;
}

// Writes `data` into `loc` as a sequence of pieces of random, unaligned sizes.
void WriteInPieces(SsdTier& tier, const TierLocation& loc, std::span<const std::byte> data,
                   uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<uint64_t> piece(1, 3 * kChunk / 2);
  uint64_t pos = 0;
  while (pos < data.size()) {
    const uint64_t n = std::min<uint64_t>(piece(rng), data.size() - pos);
    ASSERT_TRUE(tier.Write(loc, pos, data.subspan(pos, n))) << "pos=" << pos;
    pos += n;
  }
}

std::vector<std::byte> ReadAll(const SsdTier& tier, const TierLocation& loc) {
  std::vector<std::byte> out(loc.size);
  EXPECT_TRUE(tier.Read(loc, 0, out));
  return out;
}

class SsdTierTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/ssd_tier_test_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    path_ = dir_ + "/db";
  }
  void TearDown() override {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  std::unique_ptr<SsdTier> Open(uint64_t capacity = 64 * kMiB) {
    auto tier = SsdTier::Open("ssd0", path_, capacity);
    EXPECT_TRUE(tier.has_value());
    return tier ? std::move(*tier) : nullptr;
  }

  // Allocates, writes and persists an object; returns its meta.
  DurableObjectMeta Store(SsdTier& tier, const std::string& key, std::span<const std::byte> data) {
    auto loc = tier.Allocate(data.size());
    EXPECT_TRUE(loc);
    if (!loc) return {};
    EXPECT_TRUE(tier.Write(*loc, 0, data));
    DurableObjectMeta meta{.key = key, .location = *loc, .version = 3};
    EXPECT_TRUE(tier.Persist(meta));
    return meta;
  }

  std::string dir_;
  std::string path_;
};

TEST_F(SsdTierTest, OpenRejectsBadArgumentsAndReportsIdentity) {
  EXPECT_EQ(SsdTier::Open("x", path_, 0).error(), ErrorCode::kInvalidParams);
  EXPECT_EQ(SsdTier::Open("x", "", 1).error(), ErrorCode::kInvalidParams);
  auto tier = Open(5 * kMiB);
  ASSERT_TRUE(tier);
  EXPECT_EQ(tier->name(), "ssd0");
  EXPECT_EQ(tier->kind(), TierKind::kSsd);
  EXPECT_EQ(tier->capacity(), 5 * kMiB);
  EXPECT_EQ(tier->used(), 0u);
  // RocksDB's lock keeps a second instance off the same files.
  EXPECT_EQ(SsdTier::Open("y", path_, kMiB).error(), ErrorCode::kInternalError);
}

TEST_F(SsdTierTest, MultiChunkRoundTripWithUnalignedWrites) {
  auto tier = Open();
  ASSERT_TRUE(tier);
  const uint64_t size = 3 * kChunk + 12345;
  auto loc = tier->Allocate(size);
  ASSERT_TRUE(loc);
  const auto data = RandomBytes(size, 11);
  WriteInPieces(*tier, *loc, data, 5);
  EXPECT_EQ(ReadAll(*tier, *loc), data);

  // A read that starts mid-chunk and spans two boundaries.
  std::vector<std::byte> part(kChunk + 1000);
  const uint64_t start = kChunk - 500;
  ASSERT_TRUE(tier->Read(*loc, start, part));
  EXPECT_TRUE(std::equal(part.begin(), part.end(), data.begin() + start));
}

TEST_F(SsdTierTest, OutOfOrderAndOverlappingWritesKeepEveryByte) {
  auto tier = Open();
  ASSERT_TRUE(tier);
  const uint64_t size = 2 * kChunk + 777;
  auto loc = tier->Allocate(size);
  ASSERT_TRUE(loc);
  auto data = RandomBytes(size, 21);
  const std::span<const std::byte> all(data);
  // Back half first, then the front half, each crossing a chunk boundary.
  const uint64_t mid = kChunk + 4321;
  ASSERT_TRUE(tier->Write(*loc, mid, all.subspan(mid)));
  ASSERT_TRUE(tier->Write(*loc, 0, all.first(mid)));
  EXPECT_EQ(ReadAll(*tier, *loc), data);

  // Overwrite a range straddling the first boundary.
  const auto patch = RandomBytes(3000, 22);
  ASSERT_TRUE(tier->Write(*loc, kChunk - 1500, patch));
  std::copy(patch.begin(), patch.end(), data.begin() + (kChunk - 1500));
  EXPECT_EQ(ReadAll(*tier, *loc), data);
}

TEST_F(SsdTierTest, AlignedLargeWritesRoundTrip) {
  auto tier = Open();
  ASSERT_TRUE(tier);
  const uint64_t size = 9 * kMiB + 100;  // 4 MiB writes, short tail
  auto loc = tier->Allocate(size);
  ASSERT_TRUE(loc);
  const auto data = RandomBytes(size, 31);
  const std::span<const std::byte> all(data);
  for (uint64_t pos = 0; pos < size; pos += 4 * kMiB) {
    ASSERT_TRUE(tier->Write(*loc, pos, all.subspan(pos, std::min(4 * kMiB, size - pos))));
  }
  EXPECT_EQ(ReadAll(*tier, *loc), data);
}

TEST_F(SsdTierTest, OutOfRangeAndUnwrittenReadsFail) {
  auto tier = Open();
  ASSERT_TRUE(tier);
  auto loc = tier->Allocate(2 * kChunk);
  ASSERT_TRUE(loc);
  std::vector<std::byte> two(2);
  EXPECT_EQ(tier->Write(*loc, 2 * kChunk - 1, two).error(), ErrorCode::kInvalidParams);
  EXPECT_EQ(tier->Read(*loc, 2 * kChunk - 1, two).error(), ErrorCode::kInvalidParams);
  EXPECT_EQ(tier->Read(*loc, UINT64_MAX, two).error(), ErrorCode::kInvalidParams);
  // Chunk 1 was never written: the tier refuses rather than inventing bytes.
  ASSERT_TRUE(tier->Write(*loc, 0, RandomBytes(kChunk, 1)));
  EXPECT_TRUE(tier->Read(*loc, 0, two));
  EXPECT_EQ(tier->Read(*loc, kChunk, two).error(), ErrorCode::kInternalError);
}

TEST_F(SsdTierTest, CapacityExhaustionAndFreeReleasesSpace) {
  auto tier = Open(10 * kMiB);
  ASSERT_TRUE(tier);
  EXPECT_EQ(tier->Allocate(0).error(), ErrorCode::kInvalidParams);
  auto a = tier->Allocate(6 * kMiB);
  ASSERT_TRUE(a);
  EXPECT_EQ(tier->Allocate(5 * kMiB).error(), ErrorCode::kNoAvailableHandle);
  auto b = tier->Allocate(4 * kMiB);
  ASSERT_TRUE(b);
  EXPECT_EQ(tier->used(), 10 * kMiB);
  EXPECT_EQ(tier->Allocate(1).error(), ErrorCode::kNoAvailableHandle);

  const auto data = RandomBytes(a->size, 41);
  ASSERT_TRUE(tier->Write(*a, 0, data));
  ASSERT_TRUE(tier->Persist({.key = "a", .location = *a}));
  tier->Free(*a);
  EXPECT_EQ(tier->used(), 4 * kMiB);
  EXPECT_EQ(tier->object_count(), 1u);
  tier->Free(*a);  // a second Free must not release the bytes twice
  EXPECT_EQ(tier->used(), 4 * kMiB);
  // The data and the meta are gone, not just the accounting.
  std::vector<std::byte> one(1);
  EXPECT_EQ(tier->Read(*a, 0, one).error(), ErrorCode::kInternalError);
  EXPECT_TRUE(tier->Recover().empty());
  EXPECT_EQ(tier->Persist({.key = "a", .location = *a}).error(), ErrorCode::kInvalidParams);

  auto c = tier->Allocate(5 * kMiB);
  ASSERT_TRUE(c);
  EXPECT_NE(c->offset, a->offset);
  EXPECT_EQ(tier->used(), 9 * kMiB);
}

TEST_F(SsdTierTest, PersistRejectsUnknownIdsAndSizeMismatch) {
  auto tier = Open();
  ASSERT_TRUE(tier);
  auto loc = tier->Allocate(100);
  ASSERT_TRUE(loc);
  EXPECT_EQ(
      tier->Persist({.key = "k", .location = {.offset = loc->offset + 1000, .size = 100}}).error(),
      ErrorCode::kInvalidParams);
  EXPECT_EQ(tier->Persist({.key = "k", .location = {.offset = loc->offset, .size = 99}}).error(),
            ErrorCode::kInvalidParams);
  EXPECT_TRUE(tier->Persist({.key = "k", .location = *loc}));
}

TEST_F(SsdTierTest, ReopenRecoversPersistedMetasDataAndUsage) {
  const auto d1 = RandomBytes(2 * kChunk + 5, 51);
  const auto d2 = RandomBytes(1000, 52);
  DurableObjectMeta m1, m2;
  {
    auto tier = Open();
    ASSERT_TRUE(tier);
    m1 = Store(*tier, "first", d1);
    m2 = Store(*tier, std::string("bin\xff\x01key", 8), d2);
    m2.hard_pinned = true;
    m2.version = 9;
    ASSERT_TRUE(tier->Persist(m2));  // a re-persist replaces the record
  }
  auto tier = Open();
  ASSERT_TRUE(tier);
  EXPECT_EQ(tier->object_count(), 2u);
  EXPECT_EQ(tier->used(), d1.size() + d2.size());
  auto metas = tier->Recover();
  ASSERT_EQ(metas.size(), 2u);
  std::sort(metas.begin(), metas.end(),
            [](const auto& a, const auto& b) { return a.location.offset < b.location.offset; });
  for (auto [got, want] : {std::pair{metas[0], m1}, std::pair{metas[1], m2}}) {
    EXPECT_EQ(got.key, want.key);
    EXPECT_EQ(got.location, want.location);
    EXPECT_EQ(got.version, want.version);
    EXPECT_EQ(got.hard_pinned, want.hard_pinned);
    EXPECT_EQ(got.soft_pinned, want.soft_pinned);
  }
  EXPECT_EQ(ReadAll(*tier, m1.location), d1);
  EXPECT_EQ(ReadAll(*tier, m2.location), d2);

  // A recovered object can be freed, and stays freed across another reopen.
  tier->Free(m1.location);
  EXPECT_EQ(tier->used(), d2.size());
  tier.reset();
  tier = Open();
  ASSERT_TRUE(tier);
  ASSERT_EQ(tier->Recover().size(), 1u);
  EXPECT_EQ(tier->used(), d2.size());
}

TEST_F(SsdTierTest, UnpersistedObjectIsDroppedOnReopenAndIdsDoNotCollide) {
  const auto kept = RandomBytes(kChunk + 10, 61);
  const auto lost = RandomBytes(3 * kChunk + 17, 62);
  DurableObjectMeta kept_meta;
  TierLocation lost_loc;
  {
    auto tier = Open();
    ASSERT_TRUE(tier);
    kept_meta = Store(*tier, "kept", kept);
    auto loc = tier->Allocate(lost.size());
    ASSERT_TRUE(loc);
    lost_loc = *loc;
    WriteInPieces(*tier, lost_loc, lost, 7);
    EXPECT_EQ(ReadAll(*tier, lost_loc), lost);
  }
  auto tier = Open();
  ASSERT_TRUE(tier);
  auto metas = tier->Recover();
  ASSERT_EQ(metas.size(), 1u);
  EXPECT_EQ(metas[0].key, "kept");
  EXPECT_EQ(tier->used(), kept.size());
  EXPECT_EQ(tier->object_count(), 1u);
  std::vector<std::byte> one(1);
  EXPECT_EQ(tier->Read(lost_loc, 0, one).error(), ErrorCode::kInternalError);

  std::set<uint64_t> seen{kept_meta.location.offset, lost_loc.offset};
  for (int i = 0; i < 5; ++i) {
    auto loc = tier->Allocate(10);
    ASSERT_TRUE(loc);
    EXPECT_TRUE(seen.insert(loc->offset).second) << "id reused: " << loc->offset;
    EXPECT_GT(loc->offset, kept_meta.location.offset);
    EXPECT_GT(loc->offset, lost_loc.offset);
    ASSERT_TRUE(tier->Write(*loc, 0, RandomBytes(10, i)));
  }
  EXPECT_EQ(ReadAll(*tier, kept_meta.location), kept);
}

TEST_F(SsdTierTest, ConcurrentObjectsStayIndependent) {
  auto tier = Open(256 * kMiB);
  ASSERT_TRUE(tier);
  std::atomic<int> mismatches{0};
  auto worker = [&](int tid) {
    for (int i = 0; i < 6; ++i) {
      const auto data = RandomBytes(kChunk + 1000 * (tid + 1) + i, tid * 100 + i);
      auto loc = tier->Allocate(data.size());
      if (!loc || !tier->Write(*loc, 0, data)) {
        ++mismatches;
        continue;
      }
      std::vector<std::byte> out(data.size());
      if (!tier->Read(*loc, 0, out) || out != data) ++mismatches;
      if (i % 2 == 0) tier->Free(*loc);
    }
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) threads.emplace_back(worker, t);
  for (auto& t : threads) t.join();
  EXPECT_EQ(mismatches.load(), 0);
  EXPECT_EQ(tier->object_count(), 4u * 3);
}

// Crash test: a child process writes, persists and then dies by SIGKILL
// without closing the database; the parent reopens and checks what survived.
// The child is this same binary running only SsdTierCrashChild, which does
// nothing unless the parent hands it a directory.
constexpr char kCrashDirEnv[] = "MC_SSD_TIER_CRASH_DIR";
constexpr uint64_t kCrashKeptSize = 2 * kChunk + 99;
constexpr uint64_t kCrashLostSize = kChunk + 5;

TEST(SsdTierCrashChild, WritesThenDiesBySigkill) {
  const char* dir = std::getenv(kCrashDirEnv);
  if (dir == nullptr) GTEST_SKIP() << "only runs as the child of SsdTierTest.SurvivesKill9";
  auto tier = SsdTier::Open("ssd0", std::string(dir) + "/db", 64 * kMiB);
  if (!tier) _exit(2);
  auto kept = (*tier)->Allocate(kCrashKeptSize);
  auto lost = (*tier)->Allocate(kCrashLostSize);
  if (!kept || !lost) _exit(3);
  if (!(*tier)->Write(*kept, 0, RandomBytes(kCrashKeptSize, 71))) _exit(4);
  if (!(*tier)->Persist({.key = "kept", .location = *kept})) _exit(5);
  if (!(*tier)->Write(*lost, 0, RandomBytes(kCrashLostSize, 72))) _exit(6);
  raise(SIGKILL);
}

TEST_F(SsdTierTest, SurvivesKill9) {
  std::string exe = std::filesystem::read_symlink("/proc/self/exe");
  std::string filter = "--gtest_filter=SsdTierCrashChild.WritesThenDiesBySigkill";
  std::string env_var = std::string(kCrashDirEnv) + "=" + dir_;
  std::vector<char*> argv = {exe.data(), filter.data(), nullptr};
  std::vector<char*> envp;
  // Not gtest's shard variables: under sharding the child's one test may
  // fall in another shard, and the child would exit 0 having run nothing.
  for (char** e = environ; *e != nullptr; ++e) {
    std::string_view entry(*e);
    if (entry.starts_with("GTEST_TOTAL_SHARDS=") || entry.starts_with("GTEST_SHARD_INDEX=")) {
      continue;
    }
    envp.push_back(*e);
  }
  envp.push_back(env_var.data());
  envp.push_back(nullptr);
  pid_t pid = 0;
  ASSERT_EQ(posix_spawn(&pid, exe.c_str(), nullptr, nullptr, argv.data(), envp.data()), 0);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFSIGNALED(status)) << "child exited with " << WEXITSTATUS(status);
  ASSERT_EQ(WTERMSIG(status), SIGKILL);

  auto tier = Open();
  ASSERT_TRUE(tier);
  auto metas = tier->Recover();
  ASSERT_EQ(metas.size(), 1u);
  EXPECT_EQ(metas[0].key, "kept");
  EXPECT_EQ(metas[0].location.size, kCrashKeptSize);
  EXPECT_EQ(tier->used(), kCrashKeptSize);
  EXPECT_EQ(ReadAll(*tier, metas[0].location), RandomBytes(kCrashKeptSize, 71));
  // The unpersisted object had the next id; its chunks were dropped.
  std::vector<std::byte> one(1);
  TierLocation lost{.offset = metas[0].location.offset + 1, .size = kCrashLostSize};
  EXPECT_EQ(tier->Read(lost, 0, one).error(), ErrorCode::kInternalError);
}

// ---------------------------------------------------------------------------
// Faults: a damaged database at open and a full disk (docs/design.md,
// "Tiers").

namespace fs = std::filesystem;

using testing::FilesEndingWith;
using testing::FilesStartingWith;
using testing::FlipBytes;
using testing::TmpfsMount;
using testing::WriteFile;

class SsdTierFaultTest : public SsdTierTest {
 protected:
  // Stores one large object (its chunks go to blob files) and one small one
  // (inline in a table file), then reopens once so the WAL is flushed into
  // .sst and .blob files, as on any node that restarted since the writes.
  void StoreAndFlush() {
    {
      auto tier = Open();
      ASSERT_TRUE(tier);
      large_ = Store(*tier, "large", large_data_);
      small_ = Store(*tier, "small", small_data_);
    }
    { ASSERT_TRUE(Open()); }
    ASSERT_FALSE(FilesEndingWith(path_, ".sst").empty());
    ASSERT_FALSE(FilesEndingWith(path_, ".blob").empty());
  }

  // Open must fail with a reason naming the path and RocksDB's status.
  void ExpectOpenFails(std::string_view expected_status) {
    std::string why;
    auto tier = SsdTier::Open("ssd0", path_, 64 * kMiB, &why);
    ASSERT_FALSE(tier.has_value()) << "a damaged database opened";
    EXPECT_NE(why.find("path=" + path_), std::string::npos) << why;
    EXPECT_NE(why.find("status="), std::string::npos) << why;
    EXPECT_NE(why.find(expected_status), std::string::npos) << why;
    EXPECT_EQ(why.find('\n'), std::string::npos) << "not one line: " << why;
  }

  const std::vector<std::byte> large_data_ = RandomBytes(2 * kChunk + 321, 81);
  const std::vector<std::byte> small_data_ = RandomBytes(4000, 82);
  DurableObjectMeta large_, small_;
};

TEST_F(SsdTierFaultTest, GarbageCurrentFailsOpenWithPathAndStatus) {
  ASSERT_NO_FATAL_FAILURE(StoreAndFlush());
  ASSERT_NO_FATAL_FAILURE(WriteFile(fs::path(path_) / "CURRENT", "\x01garbage-no-newline"));
  ExpectOpenFails("Corruption");
}

TEST_F(SsdTierFaultTest, OverwrittenManifestFailsOpen) {
  ASSERT_NO_FATAL_FAILURE(StoreAndFlush());
  auto manifests = FilesStartingWith(path_, "MANIFEST-");
  ASSERT_FALSE(manifests.empty());
  for (const auto& m : manifests) {
    ASSERT_NO_FATAL_FAILURE(WriteFile(m, std::string(4096, '\x5a')));
  }
  ExpectOpenFails("Corruption");
}

TEST_F(SsdTierFaultTest, TruncatedTableFileFailsOpen) {
  ASSERT_NO_FATAL_FAILURE(StoreAndFlush());
  for (const auto& sst : FilesEndingWith(path_, ".sst")) fs::resize_file(sst, 100);
  ExpectOpenFails("");
}

TEST_F(SsdTierFaultTest, DeletedTableFileFailsOpen) {
  ASSERT_NO_FATAL_FAILURE(StoreAndFlush());
  auto tables = FilesEndingWith(path_, ".sst");
  ASSERT_FALSE(tables.empty());
  fs::remove(tables.front());
  ExpectOpenFails("");
}

TEST_F(SsdTierFaultTest, DeletedCurrentWithDataFilesLeftFailsOpen) {
  ASSERT_NO_FATAL_FAILURE(StoreAndFlush());
  fs::remove(fs::path(path_) / "CURRENT");
  ExpectOpenFails("CURRENT is missing");
  // Refusing must not have started a new database over the old files.
  EXPECT_FALSE(fs::exists(fs::path(path_) / "CURRENT"));
}

TEST_F(SsdTierFaultTest, DeletedWholeDirectoryStartsAsAnEmptyTier) {
  ASSERT_NO_FATAL_FAILURE(StoreAndFlush());
  fs::remove_all(path_);
  auto tier = Open();
  ASSERT_TRUE(tier);
  EXPECT_EQ(tier->object_count(), 0u);
  EXPECT_EQ(tier->used(), 0u);
  EXPECT_TRUE(tier->Recover().empty());
}

TEST_F(SsdTierFaultTest, DamagedBlobBytesFailTheReadInsteadOfServingThem) {
  ASSERT_NO_FATAL_FAILURE(StoreAndFlush());
  // Damage the middle of every blob file: value bytes, not headers.
  for (const auto& blob : FilesEndingWith(path_, ".blob")) {
    const uint64_t size = fs::file_size(blob);
    ASSERT_GT(size, 8192u);
    ASSERT_NO_FATAL_FAILURE(FlipBytes(blob, size / 2, 64));
  }
  auto tier = Open();
  ASSERT_TRUE(tier);
  std::vector<std::byte> out(large_.location.size);
  EXPECT_EQ(tier->Read(large_.location, 0, out).error(), ErrorCode::kInternalError);
  // The small object lives in a table file and is still served, exactly.
  EXPECT_EQ(ReadAll(*tier, small_.location), small_data_);
}

// A read that found the bytes damaged says so (Damaged), so the worker can
// let the lost object go instead of keeping it as a victim no eviction can
// move; an undamaged object, and a freed id, are not damaged.
TEST_F(SsdTierFaultTest, ADamagedReadMarksItsObjectDamagedUntilItIsFreed) {
  ASSERT_NO_FATAL_FAILURE(StoreAndFlush());
  for (const auto& blob : FilesEndingWith(path_, ".blob")) {
    ASSERT_NO_FATAL_FAILURE(FlipBytes(blob, fs::file_size(blob) / 2, 64));
  }
  auto tier = Open();
  ASSERT_TRUE(tier);
  EXPECT_FALSE(tier->Damaged(large_.location));  // not known before a read
  std::vector<std::byte> out(large_.location.size);
  ASSERT_FALSE(tier->Read(large_.location, 0, out));
  EXPECT_TRUE(tier->Damaged(large_.location));
  EXPECT_EQ(ReadAll(*tier, small_.location), small_data_);
  EXPECT_FALSE(tier->Damaged(small_.location));
  tier->Free(large_.location);
  EXPECT_FALSE(tier->Damaged(large_.location));
}

// An object rewritten in place (a same-size upsert keeps its location) is
// no longer damaged: the mark from the failed read would otherwise let an
// eviction drop a value that reads back.
TEST_F(SsdTierFaultTest, AnObjectRewrittenInPlaceIsNoLongerDamaged) {
  ASSERT_NO_FATAL_FAILURE(StoreAndFlush());
  for (const auto& blob : FilesEndingWith(path_, ".blob")) {
    ASSERT_NO_FATAL_FAILURE(FlipBytes(blob, fs::file_size(blob) / 2, 64));
  }
  auto tier = Open();
  ASSERT_TRUE(tier);
  std::vector<std::byte> out(large_.location.size);
  ASSERT_FALSE(tier->Read(large_.location, 0, out));
  ASSERT_TRUE(tier->Damaged(large_.location));
  const std::vector<std::byte> rewritten = RandomBytes(large_.location.size, 83);
  ASSERT_TRUE(tier->Write(large_.location, 0, rewritten));
  EXPECT_FALSE(tier->Damaged(large_.location));
  EXPECT_EQ(ReadAll(*tier, large_.location), rewritten);
}

TEST_F(SsdTierFaultTest, DamagedTableBlockFailsTheReadInsteadOfServingIt) {
  {
    auto tier = Open();
    ASSERT_TRUE(tier);
    small_ = Store(*tier, "small", small_data_);
  }
  { ASSERT_TRUE(Open()); }
  // The data family's table holds the 4000 value bytes; the meta family's
  // table is tiny. Damage the first data block of the larger table.
  auto tables = FilesEndingWith(path_, ".sst");
  ASSERT_FALSE(tables.empty());
  auto largest = *std::max_element(tables.begin(), tables.end(), [](const auto& a, const auto& b) {
    return fs::file_size(a) < fs::file_size(b);
  });
  ASSERT_GT(fs::file_size(largest), small_data_.size());
  ASSERT_NO_FATAL_FAILURE(FlipBytes(largest, 1000, 64));
  std::string why;
  auto tier = SsdTier::Open("ssd0", path_, 64 * kMiB, &why);
  if (!tier) {
    // Also acceptable: RocksDB caught it at open. Nothing was served.
    EXPECT_NE(why.find("Corruption"), std::string::npos) << why;
    return;
  }
  std::vector<std::byte> out(small_.location.size);
  EXPECT_EQ((*tier)->Read(small_.location, 0, out).error(), ErrorCode::kInternalError);
}

TEST_F(SsdTierFaultTest, FullDiskFailsWritesWithNoSpaceKeepsDataAndRecovers) {
  TmpfsMount mnt(dir_ + "/mnt", 8 * kMiB);
  if (!mnt.mounted()) GTEST_SKIP() << "needs root to mount a tmpfs: " << mnt.error();
  path_ = dir_ + "/mnt/db";
  const fs::path filler = dir_ + "/mnt/filler";
  ASSERT_NO_FATAL_FAILURE(WriteFile(filler, std::string(2 * kMiB, 'f')));

  std::vector<std::pair<DurableObjectMeta, std::vector<std::byte>>> stored;
  {
    auto tier = Open(256 * kMiB);  // far more logical room than the disk has
    ASSERT_TRUE(tier);
    auto big = tier->Allocate(3 * kChunk);
    ASSERT_TRUE(big);
    const auto big_data = RandomBytes(3 * kChunk, 99);
    ASSERT_TRUE(tier->Write(*big, 0, std::span(big_data).first(kChunk)));
    bool refused = false;
    for (int i = 0; i < 16 && !refused; ++i) {
      auto data = RandomBytes(kChunk, 100 + i);
      auto loc = tier->Allocate(data.size());
      ASSERT_TRUE(loc);
      auto written = tier->Write(*loc, 0, data);
      if (!written) {
        EXPECT_EQ(written.error(), ErrorCode::kNoAvailableHandle);
        tier->Free(*loc);  // what the cache does with a failed write
        refused = true;
        break;
      }
      DurableObjectMeta meta{.key = "k" + std::to_string(i), .location = *loc};
      ASSERT_TRUE(tier->Persist(meta));
      stored.emplace_back(meta, std::move(data));
    }
    ASSERT_TRUE(refused) << "8 MiB of disk took 16 MiB";
    ASSERT_FALSE(stored.empty());
    EXPECT_EQ(tier->object_count(), stored.size() + 1);  // + the unfinished one

    // A multi-chunk object refused part-way (its first chunk fitted before
    // the disk filled) leaves nothing behind once the cache frees it, even
    // across a restart (below).
    auto rest = std::span(big_data).subspan(kChunk);
    EXPECT_EQ(tier->Write(*big, kChunk, rest).error(), ErrorCode::kNoAvailableHandle);
    tier->Free(*big);
    std::vector<std::byte> one(1);
    EXPECT_EQ(tier->Read(*big, 0, one).error(), ErrorCode::kInternalError);

    for (const auto& [meta, data] : stored) EXPECT_EQ(ReadAll(*tier, meta.location), data);

    // Room again: writes work, and nothing was stuck.
    fs::remove(filler);
    auto data = RandomBytes(256 * 1024, 200);
    auto loc = tier->Allocate(data.size());
    ASSERT_TRUE(loc);
    ASSERT_TRUE(tier->Write(*loc, 0, data));
    DurableObjectMeta meta{.key = "after", .location = *loc};
    ASSERT_TRUE(tier->Persist(meta));
    stored.emplace_back(meta, std::move(data));
  }
  // After a restart exactly the committed objects come back, byte-exact.
  auto tier = Open(256 * kMiB);
  ASSERT_TRUE(tier);
  auto metas = tier->Recover();
  EXPECT_EQ(metas.size(), stored.size());
  for (const auto& [meta, data] : stored) EXPECT_EQ(ReadAll(*tier, meta.location), data);
  tier.reset();
}

// The ids recorded in the tier's deferred-deletes file at `db`.
std::vector<uint64_t> DeferredIds(const std::string& db) {
  std::ifstream in(db + "/" + ssd_format::kDeferredDeletesFile, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<uint64_t> ids;
  for (size_t at = 0; at + ssd_format::kDeferredSlotBytes <= bytes.size();
       at += ssd_format::kDeferredSlotBytes) {
    if (uint64_t id = ssd_format::DecodeDeferredSlot(bytes.data() + at)) ids.push_back(id);
  }
  return ids;
}

// A tiny tmpfs holding the database, and a filler file that leaves it less
// free space than a metadata write (a delete) needs, but enough for RocksDB to
// open. Skips the test without root.
class SsdTierFullDiskTest : public SsdTierTest {
 protected:
  void SetUp() override {
    SsdTierTest::SetUp();
    mnt_.emplace(dir_ + "/mnt", 8 * kMiB);
    if (!mnt_->mounted()) GTEST_SKIP() << "needs root to mount a tmpfs: " << mnt_->error();
    path_ = dir_ + "/mnt/db";
  }
  void TearDown() override {
    mnt_.reset();
    SsdTierTest::TearDown();
  }
  void FillDisk() {
    struct statvfs st {};
    ASSERT_EQ(statvfs(path_.c_str(), &st), 0);
    const uint64_t free = static_cast<uint64_t>(st.f_bavail) * st.f_frsize;
    ASSERT_GT(free, kLeftFree);
    ASSERT_NO_FATAL_FAILURE(WriteFile(Filler(), std::string(free - kLeftFree, 'f')));
  }
  void FreeDisk() { fs::remove(Filler()); }
  fs::path Filler() const { return dir_ + "/mnt/filler"; }

  static constexpr uint64_t kLeftFree = 60 * 1024;  // < SsdTier::kMetaWriteReserveBytes
  std::optional<TmpfsMount> mnt_;
};

// Remove(K) on a full disk: the delete cannot be written and is deferred. A
// restart while the disk is still full must not bring K back (it did: the
// deferred delete lived only in memory and K's meta was recovered); once
// there is room the delete lands for good.
TEST_F(SsdTierFullDiskTest, ADeferredDeleteSurvivesARestartOnAFullDisk) {
  const auto gone_data = RandomBytes(1000, 1);
  const auto kept_data = RandomBytes(1000, 2);
  DurableObjectMeta gone;
  DurableObjectMeta kept;
  {
    auto tier = Open();
    ASSERT_TRUE(tier);
    gone = Store(*tier, "gone", gone_data);
    kept = Store(*tier, "kept", kept_data);
    ASSERT_NO_FATAL_FAILURE(FillDisk());
    tier->Free(gone.location);
    EXPECT_EQ(tier->object_count(), 1u);
    EXPECT_EQ(DeferredIds(path_), std::vector<uint64_t>{gone.location.offset})
        << "the delete was expected to fail on the full disk";
  }  // close retries, and fails again
  {
    auto tier = Open();
    ASSERT_TRUE(tier);
    auto metas = tier->Recover();
    ASSERT_EQ(metas.size(), 1u);
    EXPECT_EQ(metas[0].key, "kept");
    EXPECT_EQ(tier->object_count(), 1u);
    EXPECT_EQ(tier->used(), kept_data.size());
    // A new object never reuses the id of one still waiting to be deleted.
    FreeDisk();
    auto loc = tier->Allocate(10);
    ASSERT_TRUE(loc);
    EXPECT_GT(loc->offset, gone.location.offset);
    tier->Free(*loc);
  }
  auto tier = Open();
  ASSERT_TRUE(tier);
  EXPECT_TRUE(DeferredIds(path_).empty());
  ASSERT_EQ(tier->Recover().size(), 1u);
  std::vector<std::byte> one(1);
  EXPECT_EQ(tier->Read(gone.location, 0, one).error(), ErrorCode::kInternalError);
  EXPECT_EQ(ReadAll(*tier, kept.location), kept_data);
}

// A delete deferred on a full disk is retried when the tier closes: with room
// again by then, it lands before the process exits.
TEST_F(SsdTierFullDiskTest, ADeferredDeleteIsRetriedAtClose) {
  DurableObjectMeta gone;
  {
    auto tier = Open();
    ASSERT_TRUE(tier);
    gone = Store(*tier, "gone", RandomBytes(1000, 1));
    ASSERT_NO_FATAL_FAILURE(FillDisk());
    tier->Free(gone.location);
    EXPECT_EQ(DeferredIds(path_), std::vector<uint64_t>{gone.location.offset});
    FreeDisk();
  }
  EXPECT_TRUE(DeferredIds(path_).empty()) << "close did not retry the deferred delete";
  auto tier = Open();
  ASSERT_TRUE(tier);
  EXPECT_TRUE(tier->Recover().empty());
  std::vector<std::byte> one(1);
  EXPECT_EQ(tier->Read(gone.location, 0, one).error(), ErrorCode::kInternalError);
}

// A small tmpfs that the tier itself fills (no filler file): a write is then
// refused because RocksDB's own files (WAL, memtables waiting for a flush,
// blob files of objects already freed) hold the disk. Skips without root.
class SsdTierReclaimTest : public SsdTierTest {
 protected:
  void SetUp() override {
    SsdTierTest::SetUp();
    mnt_.emplace(dir_ + "/mnt", 24 * kMiB);
    if (!mnt_->mounted()) GTEST_SKIP() << "needs root to mount a tmpfs: " << mnt_->error();
    path_ = dir_ + "/mnt/db";
  }
  void TearDown() override {
    mnt_.reset();
    SsdTierTest::TearDown();
  }

  // Stores 1 MiB objects until the disk refuses one (far below the logical
  // capacity); returns the stored ones. Fails the test if none is refused.
  std::vector<TierLocation> FillUntilRefused(SsdTier& tier, uint64_t seed) {
    std::vector<TierLocation> stored;
    for (int i = 0; i < 64; ++i) {
      auto loc = tier.Allocate(kChunk);
      if (!loc) {
        ADD_FAILURE() << "allocate refused at " << i;
        return stored;
      }
      const auto data = RandomBytes(kChunk, seed + i);
      if (auto written = tier.Write(*loc, 0, data); !written) {
        EXPECT_EQ(written.error(), ErrorCode::kNoAvailableHandle);
        tier.Free(*loc);  // what the cache does with a failed write
        return stored;
      }
      DurableObjectMeta meta{.key = "k" + std::to_string(seed + i), .location = *loc};
      EXPECT_TRUE(tier.Persist(meta));
      stored.push_back(*loc);
    }
    ADD_FAILURE() << "24 MiB of disk took 64 MiB";
    return stored;
  }

  // Tries to store an object of `size` bytes for up to about 10 s (the space
  // of freed objects comes back in the background); true once one is stored
  // and reads back.
  bool EventuallyStores(SsdTier& tier, uint64_t size) {
    const auto data = RandomBytes(size, 7);
    for (int attempt = 0; attempt < 200; ++attempt) {
      auto loc = tier.Allocate(size);
      if (loc && tier.Write(*loc, 0, data) && tier.Persist({.key = "after", .location = *loc})) {
        return ReadAll(tier, *loc) == data;
      }
      if (loc) tier.Free(*loc);
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return false;
  }

  static constexpr uint64_t kLogicalCapacity = 1ull << 30;  // far beyond the disk
  std::optional<TmpfsMount> mnt_;
};

// A tier whose disk filled up, then emptied by the cache (every object freed,
// used() == 0), takes writes again. It refused them forever: the freed bytes
// stayed in the WAL and the memtables, which nothing flushed because no write
// reached RocksDB any more.
TEST_F(SsdTierReclaimTest, AFullTierTakesWritesAgainOnceItsObjectsAreFreed) {
  auto tier = Open(kLogicalCapacity);
  ASSERT_TRUE(tier);
  const auto stored = FillUntilRefused(*tier, 100);
  ASSERT_FALSE(stored.empty());
  for (const auto& loc : stored) tier->Free(loc);
  EXPECT_EQ(tier->used(), 0u);
  EXPECT_TRUE(EventuallyStores(*tier, kChunk));
}

// The same when the freed bytes already sit in blob files (written before a
// restart): only a compaction deletes those, and the tier asks for one. The
// object stored afterwards needs most of the disk, so it fits only once both
// the memtables and the dead blob files are gone.
TEST_F(SsdTierReclaimTest, BlobFilesOfFreedObjectsAreReclaimed) {
  // Fewer than fill the disk, so that no refusal flushes them before the
  // restart does (and few table files start no compaction of RocksDB's own).
  std::vector<TierLocation> before_restart;
  {
    auto tier = Open(kLogicalCapacity);
    ASSERT_TRUE(tier);
    for (int i = 0; i < 10; ++i) {
      before_restart.push_back(
          Store(*tier, "b" + std::to_string(i), RandomBytes(kChunk, i)).location);
    }
  }
  auto tier = Open(kLogicalCapacity);  // the WAL is flushed into blob files
  ASSERT_TRUE(tier);
  ASSERT_FALSE(FilesEndingWith(path_, ".blob").empty());
  const auto after_restart = FillUntilRefused(*tier, 200);
  for (const auto& loc : before_restart) tier->Free(loc);
  for (const auto& loc : after_restart) tier->Free(loc);
  EXPECT_EQ(tier->used(), 0u);
  EXPECT_TRUE(EventuallyStores(*tier, 8 * kChunk));
}

// A new node's --ssd-path may not exist yet, parents included: Open creates
// it. A path that cannot be created (a parent is a regular file) fails with
// one line naming the path and the reason.
TEST_F(SsdTierTest, OpenCreatesMissingParentsAndNamesAnUncreatablePath) {
  const std::string nested = dir_ + "/a/b/c/ssd";
  {
    auto tier = SsdTier::Open("ssd0", nested, kMiB);
    ASSERT_TRUE(tier.has_value());
    EXPECT_TRUE(std::filesystem::is_directory(nested));
  }
  const std::string file = dir_ + "/plain-file";
  std::ofstream(file) << "not a directory";
  const std::string under_file = file + "/ssd";
  std::string error;
  auto tier = SsdTier::Open("ssd0", under_file, kMiB, &error);
  ASSERT_FALSE(tier.has_value());
  EXPECT_EQ(tier.error(), ErrorCode::kInternalError);
  EXPECT_NE(error.find("path=" + under_file), std::string::npos) << error;
  EXPECT_NE(error.find("cannot create directory"), std::string::npos) << error;
  EXPECT_EQ(error.find('\n'), std::string::npos) << error;
}

// ---------------------------------------------------------------------------
// Records Open cannot use as they are: written by a newer release, damaged,
// or naming impossible ids.

// The tier's database opened directly through RocksDB (the tier must be
// closed), to plant or inspect records as another release would leave them.
class RawDb {
 public:
  explicit RawDb(const std::string& path) {
    std::vector<rocksdb::ColumnFamilyDescriptor> families = {
        {rocksdb::kDefaultColumnFamilyName, rocksdb::ColumnFamilyOptions()},
        {ssd_format::kMetaCfName, rocksdb::ColumnFamilyOptions()}};
    rocksdb::DB* raw = nullptr;
    status_ = rocksdb::DB::Open(rocksdb::DBOptions(), path, families, &handles_, &raw);
    db_.reset(raw);
  }
  ~RawDb() {
    for (auto* handle : handles_) db_->DestroyColumnFamilyHandle(handle);
  }
  RawDb(const RawDb&) = delete;
  RawDb& operator=(const RawDb&) = delete;

  const rocksdb::Status& status() const { return status_; }
  // The value of `key` in the meta (or data) column family, nullopt if absent.
  std::optional<std::string> Meta(const std::string& key) { return Get(handles_[1], key); }
  std::optional<std::string> Data(const std::string& key) { return Get(handles_[0], key); }
  bool PutMeta(const std::string& key, const std::string& value) {
    return db_->Put(rocksdb::WriteOptions(), handles_[1], key, value).ok();
  }

 private:
  std::optional<std::string> Get(rocksdb::ColumnFamilyHandle* cf, const std::string& key) {
    std::string value;
    if (!db_->Get(rocksdb::ReadOptions(), cf, key, &value).ok()) return std::nullopt;
    return value;
  }

  rocksdb::Status status_;
  std::unique_ptr<rocksdb::DB> db_;
  std::vector<rocksdb::ColumnFamilyHandle*> handles_;
};

// A rollback: a release that writes meta format 2 stored an object, then this
// release (format 1) opened the directory. It must leave the object on disk
// (Open used to delete it with its data, as if damaged), serve nothing of it,
// never reuse its id, and the release that can read it serves it again. A damaged record is still
// deleted with its data.
TEST_F(SsdTierTest, AnObjectOfANewerFormatSurvivesARollbackUntouched) {
  const auto newer_data = RandomBytes(kChunk + 77, 91);
  const auto damaged_data = RandomBytes(500, 92);
  DurableObjectMeta newer;
  DurableObjectMeta damaged;
  std::string newer_record;
  {
    auto tier = Open();
    ASSERT_TRUE(tier);
    newer = Store(*tier, "newer", newer_data);
    damaged = Store(*tier, "damaged", damaged_data);
  }
  const std::string newer_key =
      ssd_format::PrefixedKey(ssd_format::kMetaPrefix, newer.location.offset);
  const std::string damaged_key =
      ssd_format::PrefixedKey(ssd_format::kMetaPrefix, damaged.location.offset);
  {
    RawDb raw(path_);
    ASSERT_TRUE(raw.status().ok()) << raw.status().ToString();
    auto record = raw.Meta(newer_key);
    ASSERT_TRUE(record);
    newer_record = *record;
    std::string as_format_2 = newer_record;
    as_format_2[0] = 2;  // the format byte of a newer release
    ASSERT_TRUE(raw.PutMeta(newer_key, as_format_2));
    ASSERT_TRUE(raw.PutMeta(damaged_key, "\x01short"));  // version 1, cut short
  }
  {
    auto tier = Open();
    ASSERT_TRUE(tier);
    EXPECT_EQ(tier->object_count(), 0u);
    EXPECT_EQ(tier->used(), 0u);
    EXPECT_TRUE(tier->Recover().empty());
    auto loc = tier->Allocate(10);
    ASSERT_TRUE(loc);
    EXPECT_GT(loc->offset, newer.location.offset) << "the newer object's id was reused";
    EXPECT_GT(loc->offset, damaged.location.offset);
  }
  {
    RawDb raw(path_);
    ASSERT_TRUE(raw.status().ok()) << raw.status().ToString();
    EXPECT_TRUE(raw.Meta(newer_key)) << "the newer release's record was deleted";
    EXPECT_TRUE(raw.Data(ssd_format::DataKey(newer.location.offset, 0)))
        << "the newer release's data was deleted";
    EXPECT_FALSE(raw.Meta(damaged_key)) << "a damaged record was kept";
    EXPECT_FALSE(raw.Data(ssd_format::DataKey(damaged.location.offset, 0)));
    ASSERT_TRUE(raw.PutMeta(newer_key, newer_record));  // read as the newer release would
  }
  auto tier = Open();
  ASSERT_TRUE(tier);
  auto metas = tier->Recover();
  ASSERT_EQ(metas.size(), 1u);
  EXPECT_EQ(metas[0].key, "newer");
  EXPECT_EQ(ReadAll(*tier, metas[0].location), newer_data);
}

// A meta record and a deferred-deletes slot naming id 2^64-1 (foreign or
// damaged, yet passing RocksDB's checksums). The next id was max + 1, which
// wrapped to 0: new objects got the ids of live ones, and freeing one deleted
// the live object's data. Such ids are now damage: dropped, never counted.
TEST_F(SsdTierTest, AStrayHugeIdDoesNotWrapNewIdsOntoLiveObjects) {
  const auto kept_data = RandomBytes(3000, 101);
  DurableObjectMeta kept;
  {
    auto tier = Open();
    ASSERT_TRUE(tier);
    kept = Store(*tier, "kept", kept_data);
  }
  constexpr uint64_t kHuge = UINT64_MAX;
  const std::string stray_key = ssd_format::PrefixedKey(ssd_format::kMetaPrefix, kHuge);
  {
    RawDb raw(path_);
    ASSERT_TRUE(raw.status().ok()) << raw.status().ToString();
    const DurableObjectMeta stray{.key = "stray", .location = {.offset = kHuge, .size = 10}};
    ASSERT_TRUE(raw.PutMeta(stray_key, ssd_format::EncodeMeta(stray)));
  }
  {
    std::fstream file(path_ + "/" + ssd_format::kDeferredDeletesFile,
                      std::ios::in | std::ios::out | std::ios::binary);
    ASSERT_TRUE(file);
    const auto slot = ssd_format::EncodeDeferredSlot(kHuge);
    file.write(slot.data(), slot.size());
    ASSERT_TRUE(file);
  }
  {
    auto tier = Open();
    ASSERT_TRUE(tier);
    auto metas = tier->Recover();
    ASSERT_EQ(metas.size(), 1u);
    EXPECT_EQ(metas[0].key, "kept");
    EXPECT_EQ(tier->used(), kept_data.size());
    std::set<uint64_t> ids{kept.location.offset};
    std::vector<TierLocation> fresh;
    for (int i = 0; i < 3; ++i) {
      auto loc = tier->Allocate(16);
      ASSERT_TRUE(loc);
      EXPECT_TRUE(ids.insert(loc->offset).second) << "id handed out twice: " << loc->offset;
      EXPECT_LT(loc->offset, 1ull << 63);
      fresh.push_back(*loc);
    }
    for (const auto& loc : fresh) tier->Free(loc);
    EXPECT_EQ(ReadAll(*tier, kept.location), kept_data) << "a new object's Free hit the live one";
  }
  RawDb raw(path_);
  ASSERT_TRUE(raw.status().ok()) << raw.status().ToString();
  EXPECT_FALSE(raw.Meta(stray_key)) << "the record with the impossible id was kept";
}

// Ids stay below 2^63 (so id + 1 never wraps and the next Open never takes
// an object for damage): once the highest id is 2^63 - 1, Allocate refuses.
TEST_F(SsdTierTest, AllocateNeverHandsOutAnIdOf2To63OrMore) {
  constexpr uint64_t kLast = (1ull << 63) - 1;
  { ASSERT_TRUE(Open()); }
  {
    RawDb raw(path_);
    ASSERT_TRUE(raw.status().ok()) << raw.status().ToString();
    const DurableObjectMeta last{.key = "last", .location = {.offset = kLast, .size = 10}};
    ASSERT_TRUE(raw.PutMeta(ssd_format::PrefixedKey(ssd_format::kMetaPrefix, kLast),
                            ssd_format::EncodeMeta(last)));
  }
  auto tier = Open();
  ASSERT_TRUE(tier);
  EXPECT_EQ(tier->object_count(), 1u);
  auto loc = tier->Allocate(16);
  ASSERT_FALSE(loc) << "handed out id " << loc->offset;
  EXPECT_EQ(loc.error(), ErrorCode::kNoAvailableHandle);
  EXPECT_EQ(tier->used(), 10u);
}

// Writes `id` into slot `slot` of the deferred-deletes file at `db`, as a
// Free whose delete the full disk refused would have.
void RecordDeferredId(const std::string& db, size_t slot, uint64_t id) {
  std::fstream file(db + "/" + ssd_format::kDeferredDeletesFile,
                    std::ios::in | std::ios::out | std::ios::binary);
  ASSERT_TRUE(file);
  file.seekp(static_cast<std::streamoff>(slot * ssd_format::kDeferredSlotBytes));
  const auto bytes = ssd_format::EncodeDeferredSlot(id);
  file.write(bytes.data(), bytes.size());
  ASSERT_TRUE(file);
}

// A read error on the deferred-deletes file (EIO) must fail the open, not
// read as a new file: Open used to zero the file, losing the recorded
// deletes, so the removed object was recovered and served again.
TEST_F(SsdTierTest, AReadErrorOnTheDeferredDeletesFileFailsOpenAndKeepsTheRecords) {
  DurableObjectMeta gone;
  DurableObjectMeta kept;
  {
    auto tier = Open();
    ASSERT_TRUE(tier);
    gone = Store(*tier, "gone", RandomBytes(1000, 111));
    kept = Store(*tier, "kept", RandomBytes(1000, 112));
  }
  ASSERT_NO_FATAL_FAILURE(RecordDeferredId(path_, 0, gone.location.offset));
  {
    std::string why;
    fail_reads_of.store(ssd_format::kDeferredDeletesFile);
    auto failed = SsdTier::Open("ssd0", path_, 64 * kMiB, &why);
    fail_reads_of.store(nullptr);
    EXPECT_FALSE(failed.has_value()) << "opened without the recorded deletes";
    EXPECT_NE(why.find("path=" + path_), std::string::npos) << why;
    EXPECT_NE(why.find(ssd_format::kDeferredDeletesFile), std::string::npos) << why;
    EXPECT_NE(why.find(std::strerror(EIO)), std::string::npos) << why;
    EXPECT_EQ(why.find('\n'), std::string::npos) << "not one line: " << why;
  }
  EXPECT_EQ(DeferredIds(path_), std::vector<uint64_t>{gone.location.offset})
      << "the recorded delete was overwritten";
  auto tier = Open();
  ASSERT_TRUE(tier);
  auto metas = tier->Recover();
  ASSERT_EQ(metas.size(), 1u) << "the deleted object came back";
  EXPECT_EQ(metas[0].key, "kept");
}

// A deferred-deletes file that exists but cannot be opened (here a
// directory) fails the open too; one cut short keeps the slots it holds and
// is extended with empty ones.
TEST_F(SsdTierTest, AnUnopenableDeferredDeletesFileFailsOpenAndAShortOneKeepsItsSlots) {
  DurableObjectMeta gone;
  {
    auto tier = Open();
    ASSERT_TRUE(tier);
    gone = Store(*tier, "gone", RandomBytes(1000, 121));
  }
  const fs::path file = fs::path(path_) / ssd_format::kDeferredDeletesFile;
  ASSERT_NO_FATAL_FAILURE(RecordDeferredId(path_, 1, gone.location.offset));
  fs::resize_file(file, 2 * ssd_format::kDeferredSlotBytes + 5);
  const fs::path aside = fs::path(dir_) / "deferred-aside";
  fs::rename(file, aside);
  fs::create_directory(file);
  {
    std::string why;
    auto tier = SsdTier::Open("ssd0", path_, 64 * kMiB, &why);
    EXPECT_FALSE(tier.has_value()) << "opened without reading the recorded deletes";
    EXPECT_NE(why.find(ssd_format::kDeferredDeletesFile), std::string::npos) << why;
  }
  fs::remove(file);
  fs::rename(aside, file);
  auto tier = Open();
  ASSERT_TRUE(tier);
  EXPECT_TRUE(tier->Recover().empty()) << "the deleted object came back";
  EXPECT_EQ(fs::file_size(file), ssd_format::kDeferredSlots * ssd_format::kDeferredSlotBytes);
}

}  // namespace
}  // namespace mooncake
