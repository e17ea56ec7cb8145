// TieredCacheBackend::ReadManyInPlace (the worker's BatchGet) and
// ReadInPlace (its Get) over a real DRAM arena and a real RocksDB SSD tier:
// one answer per key in order, the reply budget, the same leases, counters
// and promotions as one Get per key, and reads that view the arena and pin
// the objects only while they are visited.

#include <gtest/gtest.h>
#include <stdlib.h>

#include <condition_variable>
#include <filesystem>
#include <mutex>
#include <random>
#include <span>
#include <stdexcept>
#include <string_view>
#include <thread>

#include "tests/unit/gated_read_tier.h"
#include "tests/unit/in_memory_directory.h"
#include "tiers/dram_tier.h"
#include "tiers/ssd_tier.h"
#include "worker/tiered_cache_backend.h"

namespace mooncake {
namespace {

constexpr uint64_t kMiB = 1ull << 20;

using mooncake::testing::InMemoryDirectory;

std::string Pattern(uint64_t size, uint64_t salt) {
  std::string value(size, '\0');
  std::mt19937_64 rng(salt);
  for (auto& c : value) c = static_cast<char>(rng());
  return value;
}

using mooncake::testing::GatedReadTier;

// What a BatchGet answers: each key's piece, copied out while visited.
std::vector<Result<ReadSlice>> GetMany(TieredCacheBackend& backend,
                                       const std::vector<std::string>& keys, uint64_t budget) {
  std::vector<Result<ReadSlice>> results;
  backend.ReadManyInPlace(keys, budget, [&](std::span<const ReadPiece> pieces) {
    for (const ReadPiece& piece : pieces) {
      if (!piece.info) {
        results.push_back(Err(piece.info.error()));
        continue;
      }
      results.push_back(ReadSlice{
          .data =
              std::string(reinterpret_cast<const char*>(piece.bytes.data()), piece.bytes.size()),
          .total_size = piece.info->total_size,
          .version = piece.info->version});
    }
  });
  return results;
}

class BackendReadTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/mooncake-getmany-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    backend_.reset();
    std::filesystem::remove_all(dir_);
  }

  // A DRAM tier and an SSD tier behind a gate (gate_, owned by the backend).
  void Open(uint64_t dram, uint64_t ssd, BackendOptions options = Options()) {
    backend_.reset();
    std::vector<std::unique_ptr<CacheTier>> tiers;
    auto dram_tier = std::move(DramTier::Create("dram", dram).value());
    dram_ = dram_tier.get();
    tiers.push_back(std::move(dram_tier));
    auto gated = std::make_unique<GatedReadTier>(
        std::move(SsdTier::Open("ssd", dir_ + "/ssd", ssd).value()));
    gate_ = gated.get();
    tiers.push_back(std::move(gated));
    backend_ = std::make_unique<TieredCacheBackend>(std::move(tiers), &directory_, options);
    backend_->Recover();
  }

  static BackendOptions Options() {
    BackendOptions options;
    options.kv_lease_ttl = Millis(0);
    return options;
  }

  std::string TierOf(const std::string& key) { return backend_->Inspect(key).value().tier; }

  std::string dir_;
  InMemoryDirectory directory_;
  std::unique_ptr<TieredCacheBackend> backend_;
  GatedReadTier* gate_ = nullptr;
  DramTier* dram_ = nullptr;  // owned by the backend
};

TEST_F(BackendReadTest, AnswersEachKeyInOrderAndCountsLikeGets) {
  Open(8 * kMiB, 32 * kMiB);
  ASSERT_TRUE(backend_->Put("a", "alpha", {}));
  ASSERT_TRUE(backend_->Put("b", Pattern(1000, 2), {}));
  auto pending = backend_->PutStart("w", 10, {});
  ASSERT_TRUE(pending);

  auto results = GetMany(*backend_, {"b", "missing", "", "w", "a", "b"}, 8 * kMiB);

  ASSERT_EQ(results.size(), 6u);
  ASSERT_TRUE(results[0]);
  EXPECT_EQ(results[0]->data, Pattern(1000, 2));
  EXPECT_EQ(results[0]->total_size, 1000u);
  EXPECT_EQ(results[1].error(), ErrorCode::kObjectNotFound);
  EXPECT_EQ(results[2].error(), ErrorCode::kInvalidKey);
  EXPECT_EQ(results[3].error(), ErrorCode::kReplicaIsNotReady);
  ASSERT_TRUE(results[4]);
  EXPECT_EQ(results[4]->data, "alpha");
  EXPECT_EQ(results[4]->version, backend_->Inspect("a")->version);
  ASSERT_TRUE(results[5]);
  EXPECT_EQ(results[5]->data, Pattern(1000, 2));
  BackendStats stats = backend_->Stats();
  EXPECT_EQ(stats.gets, 5u) << "every valid key is one get";
  EXPECT_EQ(stats.get_misses, 1u);
  EXPECT_EQ(stats.tiers[0].hits, 3u);
  // Every read let go of its object: no reader is left behind.
  EXPECT_EQ(backend_->Inspect("a")->readers, 0);
  EXPECT_EQ(backend_->Inspect("b")->readers, 0);
}

TEST_F(BackendReadTest, DataStopsAtTheBudgetButEveryKeyKeepsItsSizeAndVersion) {
  Open(16 * kMiB, 32 * kMiB);
  for (int i = 0; i < 3; ++i)
    ASSERT_TRUE(backend_->Put("k" + std::to_string(i), Pattern(kMiB, i), {}));

  auto results = GetMany(*backend_, {"k0", "k1", "k2"}, kMiB + kMiB / 2);

  ASSERT_EQ(results.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(results[i]) << i;
    EXPECT_EQ(results[i]->total_size, kMiB);
    EXPECT_EQ(results[i]->version, backend_->Inspect("k" + std::to_string(i))->version);
  }
  EXPECT_EQ(results[0]->data, Pattern(kMiB, 0));
  EXPECT_EQ(results[1]->data, Pattern(kMiB, 1).substr(0, kMiB / 2)) << "a partial first chunk";
  EXPECT_TRUE(results[2]->data.empty());
}

// A key past the budget gets only its size and version; the client then
// reads it with a Get at offset 0, and that is the read that counts.
// Counted in the batch as well, each such object would be two gets and two
// hits.
TEST_F(BackendReadTest, AKeyPastTheBudgetCountsNoGetOrHitUntilItIsRead) {
  Open(16 * kMiB, 32 * kMiB);
  for (int i = 0; i < 3; ++i)
    ASSERT_TRUE(backend_->Put("k" + std::to_string(i), Pattern(kMiB, i), {}));

  auto results = GetMany(*backend_, {"k0", "k1", "k2"}, kMiB + kMiB / 2);
  ASSERT_TRUE(results[2]);
  ASSERT_TRUE(results[2]->data.empty());
  BackendStats stats = backend_->Stats();
  EXPECT_EQ(stats.gets, 2u) << "k0 whole, k1 its first piece";
  EXPECT_EQ(stats.tiers[0].hits, 2u);
  EXPECT_EQ(stats.tiers[0].read_bytes, kMiB + kMiB / 2);

  ASSERT_TRUE(backend_->Get("k2", 0, kRpcChunkBytes));  // the client's read of k2
  stats = backend_->Stats();
  EXPECT_EQ(stats.gets, 3u);
  EXPECT_EQ(stats.tiers[0].hits, 3u);
}

// A key past the budget sends no bytes, so it is not pinned while the reply
// goes out: a peer slow to read the reply would otherwise keep its upserts
// busy and the object from moving for as long as the send waits.
TEST_F(BackendReadTest, AKeyPastTheBudgetIsNotPinnedWhileTheReplyIsSent) {
  Open(16 * kMiB, 32 * kMiB);
  ASSERT_TRUE(backend_->Put("k0", Pattern(kMiB, 0), {}));
  ASSERT_TRUE(backend_->Put("k1", Pattern(kMiB, 1), {}));
  const uint64_t version = backend_->Inspect("k1")->version;
  int visits = 0;
  backend_->ReadManyInPlace({"k0", "k1"}, kMiB, [&](std::span<const ReadPiece> pieces) {
    ++visits;
    ASSERT_EQ(pieces.size(), 2u);
    ASSERT_TRUE(pieces[1].info);
    EXPECT_EQ(pieces[1].info->total_size, kMiB);
    EXPECT_EQ(pieces[1].info->version, version);
    EXPECT_TRUE(pieces[1].bytes.empty());
    EXPECT_EQ(backend_->Inspect("k0")->readers, 1) << "k0's bytes are being sent";
    EXPECT_EQ(backend_->Inspect("k1")->readers, 0);
    EXPECT_TRUE(backend_->Upsert("k1", Pattern(kMiB, 9), {}));
  });
  EXPECT_EQ(visits, 1);
  EXPECT_TRUE(backend_->Get("k1", 0, 0)->data == Pattern(kMiB, 9)) << "the upsert took";
  EXPECT_EQ(backend_->Inspect("k0")->readers, 0);
}

TEST_F(BackendReadTest, ManyKeysSpanSeveralLockHolds) {
  Open(16 * kMiB, 32 * kMiB);
  std::vector<std::string> keys;
  for (int i = 0; i < 200; ++i) {
    keys.push_back("m" + std::to_string(i));
    ASSERT_TRUE(backend_->Put(keys.back(), Pattern(100, i), {}));
  }
  auto results = GetMany(*backend_, keys, 8 * kMiB);
  ASSERT_EQ(results.size(), keys.size());
  for (int i = 0; i < 200; ++i) {
    ASSERT_TRUE(results[i]) << i;
    EXPECT_EQ(results[i]->data, Pattern(100, i)) << i;
  }
}

TEST_F(BackendReadTest, AWholeReadOfAnSsdObjectPromotesIt) {
  Open(4 * kMiB, 64 * kMiB);
  ASSERT_TRUE(backend_->Put("cold", Pattern(kMiB, 7), {.preferred_tier = 1}));
  ASSERT_EQ(TierOf("cold"), "ssd");
  auto results = GetMany(*backend_, {"cold"}, 8 * kMiB);
  ASSERT_TRUE(results[0]);
  EXPECT_EQ(results[0]->data, Pattern(kMiB, 7));
  EXPECT_EQ(backend_->Stats().tiers[1].hits, 1u);
  backend_->RunMaintenance();
  EXPECT_EQ(TierOf("cold"), "dram");
}

TEST_F(BackendReadTest, AKeyErasedDuringTheReadLeavesTheOthersReleased) {
  BackendOptions options = Options();
  options.promote_on_get = false;
  Open(16 * kMiB, 64 * kMiB, options);
  ASSERT_TRUE(backend_->Put("gone", Pattern(kMiB, 1), {.preferred_tier = 1}));
  ASSERT_TRUE(backend_->Put("kept", Pattern(kMiB, 2), {.preferred_tier = 1}));

  // Given a batch read held in the middle of copying out (the gate is shut).
  gate_->Close();
  std::vector<Result<ReadSlice>> results;
  std::thread reader([&] { results = GetMany(*backend_, {"gone", "kept"}, 8 * kMiB); });
  struct Release {
    GatedReadTier* gate;
    std::thread& thread;
    ~Release() {
      gate->Open();
      if (thread.joinable()) thread.join();
    }
  } release{gate_, reader};
  ASSERT_TRUE(gate_->WaitForHeldReads(1, Millis(10000))) << "the read never reached the tier";
  EXPECT_EQ(backend_->Inspect("kept")->readers, 1);

  // When one of its keys is removed by force meanwhile.
  ASSERT_TRUE(backend_->Remove("gone", true));
  gate_->Open();
  reader.join();

  // Then both reads still return whole values, and the surviving object is
  // let go, so an ordinary remove of it succeeds.
  ASSERT_EQ(results.size(), 2u);
  ASSERT_TRUE(results[0]);
  EXPECT_TRUE(results[0]->data == Pattern(kMiB, 1));
  ASSERT_TRUE(results[1]);
  EXPECT_TRUE(results[1]->data == Pattern(kMiB, 2));
  EXPECT_EQ(backend_->Inspect("kept")->readers, 0);
  EXPECT_TRUE(backend_->Remove("kept", false));
}

// ---- ReadInPlace ----

TEST_F(BackendReadTest, ReadInPlaceViewsDramBytesWhereTheyLieWhileTheObjectIsPinned) {
  Open(8 * kMiB, 32 * kMiB);
  const std::string value = Pattern(kMiB, 3);
  ASSERT_TRUE(backend_->Put("a", value, {}));
  const ObjectSnapshot before = backend_->Inspect("a").value();

  int visits = 0;
  auto read = backend_->ReadInPlace("a", 0, 0, [&](const ReadInfo& info, auto bytes) {
    ++visits;
    EXPECT_EQ(reinterpret_cast<const void*>(bytes.data()),
              reinterpret_cast<const void*>(dram_->arena_base() + before.offset))
        << "a view of the arena, not a copy";
    EXPECT_TRUE(std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()) ==
                value);
    EXPECT_EQ(info.total_size, kMiB);
    EXPECT_EQ(info.version, before.version);
    EXPECT_EQ(backend_->Inspect("a")->readers, 1) << "pinned while visited";
  });

  ASSERT_TRUE(read) << ToString(read.error());
  EXPECT_EQ(visits, 1);
  EXPECT_EQ(backend_->Inspect("a")->readers, 0);
  BackendStats stats = backend_->Stats();
  EXPECT_EQ(stats.gets, 1u);
  EXPECT_EQ(stats.tiers[0].hits, 1u);
  EXPECT_EQ(stats.tiers[0].read_bytes, kMiB);
}

TEST_F(BackendReadTest, ReadInPlaceOfARangeViewsOnlyThatRange) {
  Open(8 * kMiB, 32 * kMiB);
  const std::string value = Pattern(1000, 4);
  ASSERT_TRUE(backend_->Put("r", value, {}));
  std::string seen;
  ASSERT_TRUE(backend_->ReadInPlace("r", 100, 50, [&](const ReadInfo& info, auto bytes) {
    seen.assign(reinterpret_cast<const char*>(bytes.data()), bytes.size());
    EXPECT_EQ(info.total_size, 1000u);
  }));
  EXPECT_EQ(seen, value.substr(100, 50));
  EXPECT_EQ(backend_->Stats().gets, 0u) << "only a read from offset 0 counts as a get";
}

TEST_F(BackendReadTest, ReadInPlaceOfAnSsdObjectPassesACopyAndPromotesIt) {
  Open(4 * kMiB, 64 * kMiB);
  ASSERT_TRUE(backend_->Put("cold", Pattern(kMiB, 7), {.preferred_tier = 1}));
  ASSERT_EQ(TierOf("cold"), "ssd");
  std::string seen;
  ASSERT_TRUE(backend_->ReadInPlace("cold", 0, 0, [&](const ReadInfo&, auto bytes) {
    seen.assign(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  }));
  EXPECT_TRUE(seen == Pattern(kMiB, 7));
  EXPECT_EQ(backend_->Stats().tiers[1].hits, 1u);
  backend_->RunMaintenance();
  EXPECT_EQ(TierOf("cold"), "dram");
}

TEST_F(BackendReadTest, ReadInPlaceOfWhatCannotBeReadNeverVisits) {
  Open(8 * kMiB, 32 * kMiB);
  ASSERT_TRUE(backend_->PutStart("w", 10, {}));
  int visits = 0;
  auto visit = [&](const ReadInfo&, auto) { ++visits; };
  EXPECT_EQ(backend_->ReadInPlace("missing", 0, 0, visit).error(), ErrorCode::kObjectNotFound);
  EXPECT_EQ(backend_->ReadInPlace("", 0, 0, visit).error(), ErrorCode::kInvalidKey);
  EXPECT_EQ(backend_->ReadInPlace("w", 0, 0, visit).error(), ErrorCode::kReplicaIsNotReady);
  EXPECT_EQ(visits, 0);
  EXPECT_EQ(backend_->Stats().get_misses, 1u);
}

TEST_F(BackendReadTest, AVisitThatThrowsStillLetsGoOfTheObject) {
  Open(8 * kMiB, 32 * kMiB);
  ASSERT_TRUE(backend_->Put("a", Pattern(4096, 5), {}));
  EXPECT_THROW(
      backend_->ReadInPlace(
          "a", 0, 0, [](const ReadInfo&, auto) { throw std::runtime_error("the peer went away"); }),
      std::runtime_error);
  EXPECT_EQ(backend_->Inspect("a")->readers, 0);
  EXPECT_TRUE(backend_->Remove("a", false)) << "an unpinned object can be removed";
}

TEST_F(BackendReadTest, ABatchReadViewsEveryDramKeyPinnedAndLetsGoOfAllEvenWhenTheVisitThrows) {
  Open(16 * kMiB, 32 * kMiB);
  std::vector<std::string> keys;
  for (int i = 0; i < 150; ++i) {  // more than one run of keys per lock hold
    keys.push_back("v" + std::to_string(i));
    ASSERT_TRUE(backend_->Put(keys.back(), Pattern(512, i), {}));
  }
  int visits = 0;
  backend_->ReadManyInPlace(keys, 8 * kMiB, [&](std::span<const ReadPiece> pieces) {
    ++visits;
    ASSERT_EQ(pieces.size(), keys.size());
    for (size_t i = 0; i < keys.size(); ++i) {
      const ObjectSnapshot object = backend_->Inspect(keys[i]).value();
      EXPECT_EQ(reinterpret_cast<const void*>(pieces[i].bytes.data()),
                reinterpret_cast<const void*>(dram_->arena_base() + object.offset))
          << keys[i] << " is viewed where it lies";
      EXPECT_EQ(object.readers, 1) << keys[i] << " is pinned while visited";
    }
  });
  EXPECT_EQ(visits, 1);
  EXPECT_THROW(backend_->ReadManyInPlace(keys, 8 * kMiB,
                                         [](std::span<const ReadPiece>) {
                                           throw std::runtime_error("the peer went away");
                                         }),
               std::runtime_error);
  for (const std::string& key : keys) {
    EXPECT_EQ(backend_->Inspect(key)->readers, 0) << key;
  }
}

// A read that finds an object's bytes damaged or lost in its tier (an SSD
// whose records fail their checksums) drops the object, pinned or not: the
// reader gets a miss through each read path, the master no longer names this
// node, and a put stores the key afresh. Before, every read answered
// INTERNAL_ERROR until an eviction happened to pick the object (never, for a
// hard-pinned one), and a put of the key elsewhere found it taken.
TEST_F(BackendReadTest, AnObjectWhoseBytesAreFoundDamagedIsDroppedAndReadsAsAMiss) {
  Open(4 * kMiB, 64 * kMiB);
  for (const char* key : {"by-get", "in-place", "in-batch"}) {
    ASSERT_TRUE(backend_->Put(key, Pattern(kMiB, 3), {.preferred_tier = 1, .hard_pin = true}));
    ASSERT_EQ(TierOf(key), "ssd");
  }
  gate_->Damage();

  EXPECT_EQ(backend_->Get("by-get", 0, 0).error(), ErrorCode::kObjectNotFound);
  int visits = 0;
  auto visit = [&](const ReadInfo&, auto) { ++visits; };
  EXPECT_EQ(backend_->ReadInPlace("in-place", 0, 0, visit).error(), ErrorCode::kObjectNotFound);
  EXPECT_EQ(visits, 0);
  auto batch = GetMany(*backend_, {"in-batch"}, 8 * kMiB);
  ASSERT_EQ(batch.size(), 1u);
  EXPECT_EQ(batch[0].error(), ErrorCode::kObjectNotFound);

  EXPECT_EQ(backend_->Stats().dropped, 3u);
  for (const char* key : {"by-get", "in-place", "in-batch"}) {
    EXPECT_FALSE(directory_.Owns(key)) << key;
    EXPECT_EQ(backend_->Get(key, 0, 0).error(), ErrorCode::kObjectNotFound) << key;
  }
  ASSERT_TRUE(backend_->Put("by-get", Pattern(4096, 4), {}));
  auto again = backend_->Get("by-get", 0, 0);
  ASSERT_TRUE(again);
  EXPECT_EQ(again->data, Pattern(4096, 4));
}
}  // namespace
}  // namespace mooncake
