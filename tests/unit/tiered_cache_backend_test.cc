// TieredCacheBackend over a real DRAM arena and a real RocksDB SSD tier.

#include "worker/tiered_cache_backend.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <atomic>
#include <filesystem>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <thread>

#include "tiers/dram_tier.h"
#include "tiers/ssd_tier.h"

namespace mooncake {
namespace {

constexpr uint64_t kMiB = 1ull << 20;

// The ownership directory of a single-node cluster: a real implementation of
// the interface, kept in memory.
class InMemoryDirectory : public OwnerDirectory {
 public:
  Result<void> Claim(const std::string& key) override {
    std::lock_guard lock(mu_);
    if (!owned_.insert(key).second) return Err(ErrorCode::kObjectAlreadyExists);
    return {};
  }
  Result<void> Release(const std::string& key) override {
    std::lock_guard lock(mu_);
    if (owned_.erase(key) == 0) return Err(ErrorCode::kObjectNotFound);
    return {};
  }
  bool Owns(const std::string& key) {
    std::lock_guard lock(mu_);
    return owned_.contains(key);
  }
  // Simulates another node owning a key.
  void ClaimElsewhere(const std::string& key) {
    std::lock_guard lock(mu_);
    owned_.insert(key);
  }

 private:
  std::mutex mu_;
  std::set<std::string> owned_;
};

std::string Pattern(const std::string& key, uint64_t size, uint64_t salt = 0) {
  std::string value(size, '\0');
  std::mt19937_64 rng(std::hash<std::string>{}(key) ^ salt);
  for (auto& c : value) c = static_cast<char>(rng());
  return value;
}

class BackendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/mooncake-backend-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    backend_.reset();
    std::filesystem::remove_all(dir_);
  }

  void Open(uint64_t dram, uint64_t ssd, BackendOptions options = DefaultOptions()) {
    backend_.reset();
    std::vector<std::unique_ptr<CacheTier>> tiers;
    tiers.push_back(std::move(DramTier::Create("dram", dram).value()));
    tiers.push_back(std::move(SsdTier::Open("ssd", dir_ + "/ssd", ssd).value()));
    backend_ = std::make_unique<TieredCacheBackend>(std::move(tiers), &directory_, options);
    recovered_ = backend_->Recover();
  }

  static BackendOptions DefaultOptions() {
    BackendOptions options;
    options.kv_lease_ttl = Millis(0);  // leases are tested on their own
    return options;
  }

  std::string TierOf(const std::string& key) { return backend_->Inspect(key).value().tier; }
  TierSnapshot Tier(size_t i) { return backend_->Stats().tiers.at(i); }

  std::string dir_;
  InMemoryDirectory directory_;
  std::unique_ptr<TieredCacheBackend> backend_;
  std::vector<std::string> recovered_;
};

TEST_F(BackendTest, PutThenGetRoundTripsAndClaimsOwnership) {
  Open(8 * kMiB, 32 * kMiB);
  std::string value = Pattern("a", 100000);
  ASSERT_TRUE(backend_->Put("a", value, {}));
  auto slice = backend_->Get("a", 0, 0);
  ASSERT_TRUE(slice);
  EXPECT_EQ(slice->data, value);
  EXPECT_EQ(slice->total_size, value.size());
  EXPECT_TRUE(directory_.Owns("a"));
  EXPECT_EQ(TierOf("a"), "dram");
}

TEST_F(BackendTest, PutNeverOverwrites) {
  Open(8 * kMiB, 32 * kMiB);
  ASSERT_TRUE(backend_->Put("k", "first", {}));
  EXPECT_EQ(backend_->Put("k", "second", {}).error(), ErrorCode::kObjectAlreadyExists);
  EXPECT_EQ(backend_->Get("k", 0, 0)->data, "first");
}

TEST_F(BackendTest, LosingTheOwnershipRaceFreesTheLocalCopy) {
  Open(8 * kMiB, 32 * kMiB);
  directory_.ClaimElsewhere("taken");
  uint64_t used_before = Tier(0).used;
  EXPECT_EQ(backend_->Put("taken", "value", {}).error(), ErrorCode::kObjectAlreadyExists);
  EXPECT_EQ(backend_->Get("taken", 0, 0).error(), ErrorCode::kObjectNotFound);
  EXPECT_EQ(Tier(0).used, used_before);
}

TEST_F(BackendTest, VersionsRiseWithEveryPut) {
  Open(8 * kMiB, 32 * kMiB);
  ASSERT_TRUE(backend_->Put("v1", "x", {}));
  ASSERT_TRUE(backend_->Put("v2", "y", {}));
  EXPECT_GT(backend_->Get("v2", 0, 0)->version, backend_->Get("v1", 0, 0)->version);
}

TEST_F(BackendTest, BadInputIsRejectedAndChangesNothing) {
  Open(8 * kMiB, 32 * kMiB);
  EXPECT_EQ(backend_->Put("", "x", {}).error(), ErrorCode::kInvalidKey);
  EXPECT_EQ(backend_->Put(std::string(kMaxKeyBytes + 1, 'k'), "x", {}).error(),
            ErrorCode::kInvalidKey);
  EXPECT_EQ(backend_->Put("zero", "", {}).error(), ErrorCode::kInvalidParams);
  EXPECT_EQ(backend_->PutStart("huge", 64 * kMiB, {}).error(), ErrorCode::kNoAvailableHandle);
  EXPECT_EQ(backend_->Get("", 0, 0).error(), ErrorCode::kInvalidKey);
  EXPECT_EQ(backend_->PutChunk(12345, 0, "x").error(), ErrorCode::kIllegalClient);
  EXPECT_EQ(Tier(0).used, 0u);
  EXPECT_EQ(Tier(1).used, 0u);
  EXPECT_TRUE(backend_->Keys().empty());
}

TEST_F(BackendTest, RangedGetsReturnSlicesOfOneVersion) {
  Open(16 * kMiB, 32 * kMiB);
  std::string value = Pattern("big", 10 * kMiB);
  ASSERT_TRUE(backend_->Put("big", value, {}));
  std::string assembled;
  uint64_t version = 0;
  while (assembled.size() < value.size()) {
    auto slice = backend_->Get("big", assembled.size(), 0);
    ASSERT_TRUE(slice);
    ASSERT_LE(slice->data.size(), kRpcChunkBytes);
    if (version == 0) version = slice->version;
    EXPECT_EQ(slice->version, version);
    assembled += slice->data;
  }
  EXPECT_EQ(assembled, value);
  EXPECT_EQ(backend_->Get("big", value.size() + 1, 0).error(), ErrorCode::kInvalidParams);
}

TEST_F(BackendTest, FullDramDemotesLeastRecentlyUsedToSsd) {
  Open(4 * kMiB, 64 * kMiB);
  // 1 MiB objects: four fill DRAM; each further put pushes the coldest down.
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(backend_->Put("k" + std::to_string(i), Pattern("k", kMiB, i), {}));
    std::this_thread::sleep_for(Millis(2));
  }
  ASSERT_TRUE(backend_->Get("k0", 0, 0));  // k0 is now the most recent
  ASSERT_TRUE(backend_->Put("k4", Pattern("k", kMiB, 4), {}));
  EXPECT_EQ(TierOf("k4"), "dram");
  EXPECT_EQ(TierOf("k1"), "ssd");   // least recently used went first
  EXPECT_EQ(TierOf("k0"), "dram");  // a recent read kept it up
  EXPECT_GE(Tier(0).demotions_out, 1u);
  for (int i = 0; i <= 4; ++i) {
    EXPECT_EQ(backend_->Get("k" + std::to_string(i), 0, 0)->data, Pattern("k", kMiB, i));
  }
}

TEST_F(BackendTest, MaintenanceDemotesFromHighToLowWatermark) {
  BackendOptions options = DefaultOptions();
  options.high_watermark = 0.5;
  options.low_watermark = 0.25;
  Open(8 * kMiB, 64 * kMiB, options);
  for (int i = 0; i < 6; ++i) {
    ASSERT_TRUE(backend_->Put("w" + std::to_string(i), Pattern("w", kMiB, i), {}));
  }
  EXPECT_GT(Tier(0).used, 4 * kMiB);  // above high, nothing failed yet
  backend_->RunMaintenance();
  EXPECT_LE(Tier(0).used, 2 * kMiB + 4096);
  EXPECT_EQ(Tier(1).objects + Tier(0).objects, 6u);
  EXPECT_EQ(TierOf("w0"), "ssd");  // oldest first
  EXPECT_EQ(TierOf("w5"), "dram");
}

TEST_F(BackendTest, GetPromotesAnSsdObjectBackToDram) {
  Open(4 * kMiB, 64 * kMiB);
  for (int i = 0; i < 6; ++i) {
    ASSERT_TRUE(backend_->Put("p" + std::to_string(i), Pattern("p", kMiB, i), {}));
  }
  ASSERT_EQ(TierOf("p0"), "ssd");
  auto slice = backend_->Get("p0", 0, 0);
  ASSERT_TRUE(slice);
  EXPECT_EQ(slice->data, Pattern("p", kMiB, 0));
  EXPECT_EQ(Tier(1).hits, 1u);
  backend_->RunMaintenance();
  EXPECT_EQ(TierOf("p0"), "dram");
  EXPECT_EQ(Tier(0).promotions_in, 1u);
  EXPECT_EQ(backend_->Get("p0", 0, 0)->data, Pattern("p", kMiB, 0));
}

TEST_F(BackendTest, PromotionCanBeTurnedOff) {
  BackendOptions options = DefaultOptions();
  options.promote_on_get = false;
  Open(2 * kMiB, 64 * kMiB, options);
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(backend_->Put("n" + std::to_string(i), Pattern("n", kMiB, i), {}));
  ASSERT_EQ(TierOf("n0"), "ssd");
  ASSERT_TRUE(backend_->Get("n0", 0, 0));
  backend_->RunMaintenance();
  EXPECT_EQ(TierOf("n0"), "ssd");
}

TEST_F(BackendTest, FullLastTierDropsTheColdestFromTheCluster) {
  Open(2 * kMiB, 4 * kMiB);
  for (int i = 0; i < 8; ++i) {
    ASSERT_TRUE(backend_->Put("d" + std::to_string(i), Pattern("d", kMiB, i), {}));
  }
  auto stats = backend_->Stats();
  EXPECT_GE(stats.dropped, 2u);
  EXPECT_FALSE(directory_.Owns("d0"));  // the master was told
  EXPECT_EQ(backend_->Get("d0", 0, 0).error(), ErrorCode::kObjectNotFound);
  EXPECT_TRUE(directory_.Owns("d7"));
  EXPECT_EQ(backend_->Get("d7", 0, 0)->data, Pattern("d", kMiB, 7));
}

TEST_F(BackendTest, HardPinnedObjectsAreNeverMovedAndBlockSpaceCleanly) {
  Open(2 * kMiB, 2 * kMiB);
  ObjectOptions pinned{.hard_pin = true};
  ASSERT_TRUE(backend_->Put("pin0", Pattern("pin", kMiB, 0), pinned));
  ASSERT_TRUE(backend_->Put("pin1", Pattern("pin", kMiB, 1), pinned));
  ASSERT_TRUE(backend_->Put("pin2", Pattern("pin", kMiB, 2), pinned));
  ASSERT_TRUE(backend_->Put("pin3", Pattern("pin", kMiB, 3), pinned));
  EXPECT_EQ(backend_->Put("loose", Pattern("x", kMiB), {}).error(), ErrorCode::kNoAvailableHandle);
  EXPECT_EQ(TierOf("pin0"), "dram");
  EXPECT_EQ(TierOf("pin1"), "dram");
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(backend_->Get("pin" + std::to_string(i), 0, 0)->data, Pattern("pin", kMiB, i));
  }
  EXPECT_EQ(backend_->Stats().dropped, 0u);
}

TEST_F(BackendTest, SoftPinnedObjectsGoAfterUnpinnedOnes) {
  Open(3 * kMiB, 64 * kMiB);
  ASSERT_TRUE(backend_->Put("soft", Pattern("s", kMiB), {.soft_pin = true}));
  std::this_thread::sleep_for(Millis(2));
  ASSERT_TRUE(backend_->Put("plain1", Pattern("p1", kMiB), {}));
  ASSERT_TRUE(backend_->Put("plain2", Pattern("p2", kMiB), {}));
  ASSERT_TRUE(backend_->Put("new", Pattern("n", kMiB), {}));
  EXPECT_EQ(TierOf("soft"), "dram");  // older, but pinned softly
  EXPECT_EQ(TierOf("plain1"), "ssd");
}

TEST_F(BackendTest, LeasedObjectsResistRemoveUnlessForced) {
  BackendOptions options = DefaultOptions();
  options.kv_lease_ttl = Millis(60000);
  Open(8 * kMiB, 32 * kMiB, options);
  ASSERT_TRUE(backend_->Put("leased", "value", {}));
  ASSERT_TRUE(backend_->Get("leased", 0, 0));
  EXPECT_EQ(backend_->Remove("leased", false).error(), ErrorCode::kObjectHasLease);
  EXPECT_GT(backend_->Inspect("leased")->lease_remaining_ms, 0);
  ASSERT_TRUE(backend_->Remove("leased", true));
  EXPECT_FALSE(directory_.Owns("leased"));
  EXPECT_EQ(backend_->Remove("leased", true).error(), ErrorCode::kObjectNotFound);
}

TEST_F(BackendTest, TwoPhaseWriteIsInvisibleUntilPutEnd) {
  Open(8 * kMiB, 32 * kMiB);
  auto handle = backend_->PutStart("tp", 10, {});
  ASSERT_TRUE(handle);
  EXPECT_EQ(backend_->Get("tp", 0, 0).error(), ErrorCode::kReplicaIsNotReady);
  EXPECT_FALSE(*backend_->Exist("tp"));
  EXPECT_EQ(backend_->PutStart("tp", 10, {}).error(), ErrorCode::kObjectAlreadyExists);
  ASSERT_TRUE(backend_->PutChunk(*handle, 0, "01234"));
  EXPECT_EQ(backend_->PutEnd(*handle).error(), ErrorCode::kInvalidParams);  // incomplete
  EXPECT_EQ(backend_->PutChunk(*handle, 8, "abc").error(), ErrorCode::kInvalidParams);
  ASSERT_TRUE(backend_->PutChunk(*handle, 5, "56789"));
  ASSERT_TRUE(backend_->PutEnd(*handle));
  EXPECT_EQ(backend_->Get("tp", 0, 0)->data, "0123456789");
  EXPECT_EQ(backend_->PutEnd(*handle).error(), ErrorCode::kIllegalClient);
}

TEST_F(BackendTest, RevokedAndAbandonedWritesFreeTheirSpace) {
  BackendOptions options = DefaultOptions();
  options.put_start_discard_timeout = Millis(50);
  Open(8 * kMiB, 32 * kMiB, options);
  auto revoked = backend_->PutStart("r", kMiB, {});
  ASSERT_TRUE(revoked);
  ASSERT_TRUE(backend_->PutRevoke(*revoked));
  EXPECT_EQ(backend_->PutChunk(*revoked, 0, "x").error(), ErrorCode::kIllegalClient);
  auto abandoned = backend_->PutStart("a", kMiB, {});
  ASSERT_TRUE(abandoned);
  EXPECT_GT(Tier(0).used, 0u);
  std::this_thread::sleep_for(Millis(80));
  backend_->RunMaintenance();
  EXPECT_EQ(Tier(0).used, 0u);
  EXPECT_EQ(backend_->PutEnd(*abandoned).error(), ErrorCode::kIllegalClient);
  EXPECT_EQ(backend_->Inspect("a").error(), ErrorCode::kObjectNotFound);
}

TEST_F(BackendTest, SsdObjectsAndTheirPinsSurviveARestart) {
  Open(2 * kMiB, 64 * kMiB);
  ASSERT_TRUE(backend_->Put("keep", Pattern("keep", kMiB), {.hard_pin = false}));
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(backend_->Put("f" + std::to_string(i), Pattern("f", kMiB, i), {}));
  ASSERT_EQ(TierOf("keep"), "ssd");
  uint64_t version = backend_->Inspect("keep")->version;
  Open(2 * kMiB, 64 * kMiB);  // a new process over the same RocksDB
  EXPECT_NE(std::find(recovered_.begin(), recovered_.end(), "keep"), recovered_.end());
  auto slice = backend_->Get("keep", 0, 0);
  ASSERT_TRUE(slice);
  EXPECT_EQ(slice->data, Pattern("keep", kMiB));
  EXPECT_EQ(slice->version, version);
  ASSERT_TRUE(backend_->Put("after", "x", {}));
  EXPECT_GT(backend_->Inspect("after")->version, version);
}

TEST_F(BackendTest, ConcurrentClientsNeverSeeTornOrForeignValues) {
  Open(4 * kMiB, 16 * kMiB);
  constexpr int kThreads = 8;
  constexpr int kKeys = 40;
  std::atomic<int> bad{0};
  std::vector<std::thread> threads;
  auto deadline = SteadyClock::now() + Millis(1500);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(t);
      for (int op = 0; op < 4000 && SteadyClock::now() < deadline; ++op) {
        std::string key = "c" + std::to_string(rng() % kKeys);
        uint64_t size = 64 * 1024 + (std::hash<std::string>{}(key) % 4) * 100000;
        switch (rng() % 3) {
          case 0:
            backend_->Put(key, Pattern(key, size), {});
            break;
          case 1: {
            auto slice = backend_->Get(key, 0, 0);
            // Every writer of a key writes the same bytes, so any complete
            // read must match them exactly.
            if (slice && slice->data != Pattern(key, size)) bad++;
            break;
          }
          default:
            backend_->Remove(key, true);
        }
        if (op % 50 == 0) backend_->RunMaintenance();
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(bad.load(), 0);
  for (const std::string& key : backend_->Keys()) {
    uint64_t size = 64 * 1024 + (std::hash<std::string>{}(key) % 4) * 100000;
    EXPECT_EQ(backend_->Get(key, 0, 0)->data, Pattern(key, size)) << key;
    EXPECT_TRUE(directory_.Owns(key)) << key;
  }
}

}  // namespace
}  // namespace mooncake
