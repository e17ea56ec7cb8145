// TieredCacheBackend over a real DRAM arena and a real RocksDB SSD tier.

#include "worker/tiered_cache_backend.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>
#include <new>
#include <random>
#include <set>
#include <span>
#include <thread>

#include "tests/unit/gated_read_tier.h"
#include "tests/unit/in_memory_directory.h"
#include "tiers/dram_tier.h"
#include "tiers/ssd_tier.h"

namespace mooncake {
namespace {

constexpr uint64_t kMiB = 1ull << 20;

using mooncake::testing::InMemoryDirectory;

std::string Pattern(const std::string& key, uint64_t size, uint64_t salt = 0) {
  std::string value(size, '\0');
  std::mt19937_64 rng(std::hash<std::string>{}(key) ^ salt);
  for (auto& c : value) c = static_cast<char>(rng());
  return value;
}

using mooncake::testing::GatedReadTier;

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
    ssd_gate_ = nullptr;
    std::vector<std::unique_ptr<CacheTier>> tiers;
    tiers.push_back(std::move(DramTier::Create("dram", dram).value()));
    tiers.push_back(std::move(SsdTier::Open("ssd", dir_ + "/ssd", ssd).value()));
    backend_ = std::make_unique<TieredCacheBackend>(std::move(tiers), &directory_, options);
    recovered_ = backend_->Recover();
  }

  // Open, with the SSD tier behind a GatedReadTier (ssd_gate_, owned by the
  // backend).
  void OpenWithGatedSsd(uint64_t dram, uint64_t ssd, BackendOptions options = DefaultOptions()) {
    backend_.reset();
    std::vector<std::unique_ptr<CacheTier>> tiers;
    tiers.push_back(std::move(DramTier::Create("dram", dram).value()));
    auto gated = std::make_unique<GatedReadTier>(
        std::move(SsdTier::Open("ssd", dir_ + "/ssd", ssd).value()));
    ssd_gate_ = gated.get();
    tiers.push_back(std::move(gated));
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
  GatedReadTier* ssd_gate_ = nullptr;  // set by OpenWithGatedSsd
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

TEST_F(BackendTest, EverySmallSizeRoundTripsExactly) {
  // Sizes around std::string's inline buffer (15) and its first growth
  // steps, where a reply buffer's capacity differs from its size.
  Open(8 * kMiB, 32 * kMiB);
  for (size_t size = 1; size <= 100; ++size) {
    std::string key = "small-" + std::to_string(size);
    std::string value = Pattern(key, size);
    ASSERT_TRUE(backend_->Put(key, value, {})) << size;
    auto slice = backend_->Get(key, 0, 0);
    ASSERT_TRUE(slice) << size << " " << ToString(slice.error());
    EXPECT_EQ(slice->data, value) << size;
  }
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

TEST_F(BackendTest, PutManyClaimsTheBatchTogetherAndAnswersEachObject) {
  Open(8 * kMiB, 32 * kMiB);
  ASSERT_TRUE(backend_->Put("stored", "old", {}));
  directory_.ClaimElsewhere("elsewhere");
  uint64_t used_before = Tier(0).used;
  const std::string a = "a", stored = "stored", elsewhere = "elsewhere", b = "b", bad = "";
  const std::string b_value = Pattern("b", 100000);
  std::vector<WholeWrite> writes = {
      {a, "value-a", {}, WriteMode::kCreate},
      {stored, "new", {}, WriteMode::kCreate},       // never overwrites
      {elsewhere, "mine?", {}, WriteMode::kCreate},  // loses the claim
      {b, b_value, {}, WriteMode::kCreate},
      {bad, "x", {}, WriteMode::kCreate},  // invalid key
  };
  auto results = backend_->PutMany(writes);
  ASSERT_EQ(results.size(), writes.size());
  EXPECT_TRUE(results[0].has_value());
  EXPECT_EQ(results[1].error(), ErrorCode::kObjectAlreadyExists);
  EXPECT_EQ(results[2].error(), ErrorCode::kObjectAlreadyExists);
  EXPECT_TRUE(results[3].has_value());
  EXPECT_EQ(results[4].error(), ErrorCode::kInvalidKey);
  // One batched claim for the whole call, not one per object.
  EXPECT_EQ(directory_.claim_many_calls(), 1);
  EXPECT_EQ(backend_->Get("a", 0, 0)->data, "value-a");
  EXPECT_TRUE(backend_->Get("b", 0, 0)->data == b_value);
  EXPECT_EQ(backend_->Get("stored", 0, 0)->data, "old");
  // The loser's key stays absent here, and its bytes were freed: removing
  // the two winners gives back every byte the batch took.
  EXPECT_EQ(backend_->Get("elsewhere", 0, 0).error(), ErrorCode::kObjectNotFound);
  EXPECT_TRUE(directory_.Owns("a"));
  EXPECT_TRUE(directory_.Owns("b"));
  ASSERT_TRUE(backend_->Remove("a", false));
  ASSERT_TRUE(backend_->Remove("b", false));
  EXPECT_EQ(Tier(0).used, used_before);
}

TEST_F(BackendTest, PutManyUpsertsInPlaceWithoutANewClaim) {
  Open(8 * kMiB, 32 * kMiB);
  ASSERT_TRUE(backend_->Put("k", "first", {}));
  const std::string k = "k", fresh = "fresh";
  std::vector<WholeWrite> writes = {{k, "secnd", {}, WriteMode::kUpsert},
                                    {fresh, "value", {}, WriteMode::kUpsert}};
  auto results = backend_->PutMany(writes);
  ASSERT_TRUE(results[0].has_value());
  ASSERT_TRUE(results[1].has_value());
  EXPECT_EQ(backend_->Get("k", 0, 0)->data, "secnd");
  EXPECT_EQ(backend_->Get("fresh", 0, 0)->data, "value");
  EXPECT_TRUE(directory_.Owns("fresh"));
}

TEST_F(BackendTest, ARemoveWaitsForAPutsClaimSoTheMasterIsNotLeftPointingHere) {
  Open(8 * kMiB, 32 * kMiB);
  // A put written and committed, its claim at the master still on the wire.
  directory_.HoldAsyncClaims();
  std::optional<Result<void>> put;
  ASSERT_TRUE(backend_->TryPutAsync("k", Pattern("k", 4096), {},
                                    [&](Result<void> r) { put = std::move(r); }));
  ASSERT_EQ(directory_.held_claims(), 1u);
  // A remove now would release before the claim lands, and the claim would
  // then leave the master pointing at a key this node no longer has.
  auto removed = backend_->Remove("k", /*force=*/true);
  ASSERT_FALSE(removed);
  EXPECT_EQ(removed.error(), ErrorCode::kObjectReplicaBusy);
  directory_.RunHeldClaims();
  ASSERT_TRUE(put.has_value());
  EXPECT_TRUE(*put);
  EXPECT_TRUE(directory_.Owns("k"));
  // Once the put is answered, the remove goes through, at the master too.
  EXPECT_TRUE(backend_->Remove("k", /*force=*/true));
  EXPECT_FALSE(directory_.Owns("k"));
  EXPECT_FALSE(backend_->Get("k", 0, 0));
}

// A copy here that the master no longer names (a hand-over to another node
// was applied but its answer lost, so this node still holds it): a remove
// sent here by a client with a stale owner erases the copy but answers "not
// found here", so the client asks the master and removes the key where it
// lives. Before, it answered OK and the key stayed at the other node.
TEST_F(BackendTest, ARemoveOfACopyTheMasterNamesAnotherNodeForIsNotFoundHere) {
  Open(8 * kMiB, 32 * kMiB);
  for (const char* key : {"one", "batched"}) {
    ASSERT_TRUE(backend_->Put(key, Pattern(key, 4096), {}));
    directory_.ClaimElsewhere(key);
  }
  auto removed = backend_->Remove("one", /*force=*/false);
  ASSERT_FALSE(removed);
  EXPECT_EQ(removed.error(), ErrorCode::kObjectNotFound);
  auto batch = backend_->RemoveMany({"batched"}, /*force=*/false);
  ASSERT_EQ(batch.size(), 1u);
  ASSERT_FALSE(batch[0]);
  EXPECT_EQ(batch[0].error(), ErrorCode::kObjectNotFound);
  for (const char* key : {"one", "batched"}) {
    EXPECT_EQ(backend_->Get(key, 0, 0).error(), ErrorCode::kObjectNotFound) << key;
  }
  EXPECT_EQ(backend_->Stats().removes, 0u);
}

// A put committed here whose claim is still on its way to the master is not
// served yet: the claim may fail (another node put the key), and a reader
// would have got a value whose put then answers OBJECT_ALREADY_EXISTS. It
// reads as being written until the master has answered.
TEST_F(BackendTest, APutWhoseClaimIsOutIsNotReadUntilTheMasterHasAnswered) {
  Open(8 * kMiB, 32 * kMiB);
  for (bool claimed : {false, true}) {
    const std::string key = claimed ? "claimed" : "taken";
    SCOPED_TRACE(key);
    directory_.HoldAsyncClaims();
    std::optional<Result<void>> put;
    ASSERT_TRUE(backend_->TryPutAsync(key, Pattern(key, 4096), {},
                                      [&](Result<void> r) { put = std::move(r); }));
    ASSERT_EQ(directory_.held_claims(), 1u);
    EXPECT_EQ(backend_->Get(key, 0, 0).error(), ErrorCode::kReplicaIsNotReady);
    bool visited = false;
    auto in_place =
        backend_->ReadInPlace(key, 0, 0, [&](const ReadInfo&, auto) { visited = true; });
    EXPECT_EQ(in_place.error(), ErrorCode::kReplicaIsNotReady);
    EXPECT_FALSE(visited);
    const std::vector<std::string> keys = {key};
    backend_->ReadManyInPlace(keys, kMiB, [&](std::span<const ReadPiece> pieces) {
      ASSERT_EQ(pieces.size(), 1u);
      EXPECT_EQ(pieces[0].info.error(), ErrorCode::kReplicaIsNotReady);
    });
    EXPECT_EQ(backend_->Locate(key).error(), ErrorCode::kReplicaIsNotReady);
    EXPECT_EQ(backend_->Exist(key), Result<bool>(false));
    if (!claimed) directory_.ClaimElsewhere(key);  // another node put it meanwhile
    directory_.RunHeldClaims();
    ASSERT_TRUE(put.has_value());
    if (claimed) {
      EXPECT_TRUE(*put);
      EXPECT_EQ(backend_->Get(key, 0, 0)->data, Pattern(key, 4096));
      EXPECT_EQ(backend_->Exist(key), Result<bool>(true));
    } else {
      EXPECT_EQ(put->error(), ErrorCode::kObjectAlreadyExists);
      EXPECT_EQ(backend_->Get(key, 0, 0).error(), ErrorCode::kObjectNotFound);
    }
  }
}

// A claim the master applied but whose answer was lost fails the put, and
// the key is gone here: it must not stay owned at the master, or gets would
// find nothing here and puts elsewhere would be refused, until this node
// registered again. Whichever way the put was sent.
TEST_F(BackendTest, APutWhoseClaimAnswerIsLostLeavesTheMasterNotPointingHere) {
  Open(8 * kMiB, 32 * kMiB);
  directory_.LoseClaimAnswers(ErrorCode::kRpcTimeout);
  auto put = backend_->Put("lone", Pattern("lone", 4096), {});
  ASSERT_FALSE(put);
  EXPECT_EQ(put.error(), ErrorCode::kRpcTimeout);
  const std::string a = "batch-a", b = "batch-b";
  const std::string value_a = Pattern(a, 4096), value_b = Pattern(b, 4096);
  std::vector<WholeWrite> writes = {{a, value_a, {}, WriteMode::kCreate},
                                    {b, value_b, {}, WriteMode::kCreate}};
  for (const auto& result : backend_->PutMany(writes)) EXPECT_FALSE(result);
  std::optional<Result<void>> async;
  ASSERT_TRUE(backend_->TryPutAsync("async", Pattern("async", 4096), {},
                                    [&](Result<void> r) { async = std::move(r); }));
  ASSERT_TRUE(async.has_value());
  EXPECT_FALSE(*async);
  directory_.LoseClaimAnswers(ErrorCode::kOk);
  for (const std::string key : {"lone", "batch-a", "batch-b", "async"}) {
    EXPECT_FALSE(directory_.Owns(key)) << key;
    EXPECT_EQ(backend_->Get(key, 0, 0).error(), ErrorCode::kObjectNotFound) << key;
    EXPECT_TRUE(backend_->Put(key, "again", {})) << key;
    EXPECT_TRUE(directory_.Owns(key)) << key;
  }
  // Another node's ownership is an answer, not a lost one: nothing to release.
  directory_.ClaimElsewhere("theirs");
  EXPECT_EQ(backend_->Put("theirs", "mine", {}).error(), ErrorCode::kObjectAlreadyExists);
  EXPECT_TRUE(directory_.Owns("theirs"));
}

// A put's claim answered with an error (its answer lost) may have landed,
// so its key is released at the master. If an upsert of the key took over
// while that claim was out, that release could land after the upsert's own
// claim and take the key from it: the upsert, committed, must stay owned;
// revoked, it must leave the key released.
TEST_F(BackendTest, ALostPutClaimLeavesTheKeyToTheUpsertThatTookItOver) {
  Open(8 * kMiB, 32 * kMiB);
  for (bool commit : {true, false}) {
    const std::string key = commit ? "committed" : "revoked";
    SCOPED_TRACE(key);
    directory_.HoldAsyncClaims();
    std::optional<Result<void>> put;
    ASSERT_TRUE(backend_->TryPutAsync(key, Pattern(key, 4096), {},
                                      [&](Result<void> r) { put = std::move(r); }));
    auto upsert = backend_->PutStart(key, 8192, {}, WriteMode::kUpsert);
    ASSERT_TRUE(upsert) << ToString(upsert.error());
    // The put's claim lands and its answer is lost; a release sent for it
    // stays on the wire until the upsert has ended.
    directory_.LoseClaimAnswers(ErrorCode::kRpcTimeout);
    directory_.HoldReleases();
    const int claims_before = directory_.claims();
    std::thread answer([&] { directory_.RunHeldClaims(); });
    for (int i = 0; i < 5000 && directory_.claims() == claims_before; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    ASSERT_EQ(directory_.claims(), claims_before + 1);
    directory_.LoseClaimAnswers(ErrorCode::kOk);
    if (commit) {
      ASSERT_TRUE(backend_->PutChunk(*upsert, 0, Pattern(key, 8192, 1)));
      ASSERT_TRUE(backend_->PutEnd(*upsert));
      directory_.LetReleasesGo();
    } else {
      directory_.LetReleasesGo();  // a revoke waits for its own release
      ASSERT_TRUE(backend_->PutRevoke(*upsert));
    }
    answer.join();
    ASSERT_TRUE(put.has_value());
    EXPECT_EQ(put->error(), ErrorCode::kRpcTimeout);
    EXPECT_EQ(directory_.Owns(key), commit);
    auto got = backend_->Get(key, 0, 0);
    ASSERT_EQ(got.has_value(), commit);
    if (commit) EXPECT_EQ(got->data, Pattern(key, 8192, 1));
  }
}

// A master that forgot this node (it restarted, or declared the node dead)
// is registered with again, which purges the node's keys there and announces
// those published by then. A put whose claim was answered just before the
// purge and published just after the announcement's list was taken would be
// acknowledged and unknown to the master. However the put was sent, its key
// is claimed again.
TEST_F(BackendTest, APutClaimedJustBeforeARegistrationIsClaimedAgain) {
  Open(8 * kMiB, 32 * kMiB);
  auto held = [this] { return backend_->Keys(); };
  ASSERT_TRUE(backend_->Put("before", "published before", {}));
  // Each registration announces the keys published before it, so each way
  // of putting is checked before the next registration.
  auto known_to_the_master = [&](const std::string& key) {
    EXPECT_TRUE(directory_.Owns(key)) << key;
    EXPECT_TRUE(backend_->Get(key, 0, 0)) << key;
  };

  directory_.RegisterAfterNextClaim(held);
  ASSERT_TRUE(backend_->Put("lone", Pattern("lone", 4096), {}));
  known_to_the_master("lone");
  known_to_the_master("before");

  directory_.RegisterAfterNextClaim(held);
  const std::string a = "batch-a", b = "batch-b";
  std::vector<WholeWrite> writes = {{a, "a", {}, WriteMode::kCreate},
                                    {b, "b", {}, WriteMode::kCreate}};
  for (const auto& result : backend_->PutMany(writes)) EXPECT_TRUE(result);
  known_to_the_master(a);
  known_to_the_master(b);

  directory_.RegisterAfterNextClaim(held);
  auto handle = backend_->PutStart("phased", 5, {});
  ASSERT_TRUE(handle);
  ASSERT_TRUE(backend_->PutChunk(*handle, 0, "bytes"));
  ASSERT_TRUE(backend_->PutEnd(*handle));
  known_to_the_master("phased");

  directory_.RegisterAfterNextClaim(held);
  std::optional<Result<void>> async;
  ASSERT_TRUE(backend_->TryPutAsync("async", "async value", {},
                                    [&](Result<void> r) { async = std::move(r); }));
  ASSERT_TRUE(async.has_value());
  EXPECT_TRUE(*async);
  known_to_the_master("async");
  EXPECT_EQ(directory_.registrations(), 4u);
}

// A node registering again with every claim (a flapping master) cannot be
// sure the master knows a key: after a few rounds the put fails, as one
// whose claim went unanswered would, rather than being acknowledged.
TEST_F(BackendTest, APutWhoseEveryClaimMeetsARegistrationFails) {
  Open(8 * kMiB, 32 * kMiB);
  uint64_t used_before = Tier(0).used;
  directory_.RegisterAfterNextClaim([this] { return backend_->Keys(); }, /*claims=*/100);
  auto put = backend_->Put("flapping", Pattern("flapping", 4096), {});
  ASSERT_FALSE(put);
  EXPECT_EQ(put.error(), ErrorCode::kRpcFail);
  EXPECT_FALSE(directory_.Owns("flapping"));
  EXPECT_EQ(backend_->Get("flapping", 0, 0).error(), ErrorCode::kObjectNotFound);
  EXPECT_EQ(Tier(0).used, used_before);
  EXPECT_EQ(directory_.claims(), 4);  // the put's own and three more
}

// The key a registration purged may be put by another node before this one
// claims it again: the put is refused as any put of a key owned elsewhere,
// and its copy here is freed.
TEST_F(BackendTest, AKeyTakenElsewhereDuringARegistrationFailsThePutClaimedBeforeIt) {
  Open(8 * kMiB, 32 * kMiB);
  uint64_t used_before = Tier(0).used;
  directory_.RegisterAfterNextClaim([this] {
    directory_.ClaimElsewhere("contested");
    return backend_->Keys();
  });
  auto put = backend_->Put("contested", Pattern("contested", 4096), {});
  ASSERT_FALSE(put);
  EXPECT_EQ(put.error(), ErrorCode::kObjectAlreadyExists);
  EXPECT_EQ(backend_->Get("contested", 0, 0).error(), ErrorCode::kObjectNotFound);
  EXPECT_EQ(Tier(0).used, used_before);
}

// A registration purges this node's keys at the master and announces the
// complete ones. An upsert of a key owned here that is being written then is
// not listed, and would send no claim of its own: committed after the list
// was taken, the master would forget a key this node holds (no client could
// find it, another node could put it). It claims the key again on commit.
// In place and to another size; and also when the registration counted
// itself before the upsert was reserved and listed after it, which a
// comparison of registration counts would miss.
TEST_F(BackendTest, AnOwnedKeysUpsertCommittedAfterARegistrationIsStillOwnedAtTheMaster) {
  Open(8 * kMiB, 32 * kMiB);
  for (bool counted_before_reserve : {false, true}) {
    for (uint64_t size : {7, 9}) {  // in place, another size
      const std::string key = "k-" + std::to_string(size) + (counted_before_reserve ? "-c" : "");
      SCOPED_TRACE(key);
      ASSERT_TRUE(backend_->Put(key, "old-val", {}));
      if (counted_before_reserve) directory_.PurgeAndCount();
      auto upsert = backend_->PutStart(key, size, {}, WriteMode::kUpsert);
      ASSERT_TRUE(upsert) << ToString(upsert.error());
      if (counted_before_reserve) {
        directory_.Announce(backend_->Keys());
      } else {
        directory_.Register([this] { return backend_->Keys(); });  // the master restarted
      }
      ASSERT_FALSE(directory_.Owns(key));  // purged and not announced
      const std::string value = Pattern(key, size, 1);
      ASSERT_TRUE(backend_->PutChunk(*upsert, 0, value));
      ASSERT_TRUE(backend_->PutEnd(*upsert));
      EXPECT_TRUE(directory_.Owns(key));
      EXPECT_EQ(backend_->Get(key, 0, 0)->data, value);
    }
  }
  // With no registration meanwhile, an upsert of an owned key still sends
  // no claim.
  ASSERT_TRUE(backend_->Put("quiet", "old-val", {}));
  const int claims = directory_.claims();
  ASSERT_TRUE(backend_->Upsert("quiet", "new-value", {}));
  EXPECT_EQ(directory_.claims(), claims);
  EXPECT_TRUE(directory_.Owns("quiet"));
}

// An upsert of "k" (owned here, "old-val") that a registration missed, to
// "new-val", ended on a thread of its own with its claim held at the
// master: meanwhile the record is complete and published and the claim is
// out. LetTheClaimGo() returns PutEnd's answer.
class UpsertClaimingAgain {
 public:
  UpsertClaimingAgain(TieredCacheBackend& backend, InMemoryDirectory& directory)
      : directory_(directory) {
    EXPECT_TRUE(backend.Put("k", "old-val", {}));
    auto upsert = backend.PutStart("k", 7, {}, WriteMode::kUpsert);
    if (!upsert) return;
    directory.Register([&backend] { return backend.Keys(); });
    EXPECT_TRUE(backend.PutChunk(*upsert, 0, "new-val"));
    directory.HoldClaims();
    end_ = std::thread([this, &backend, handle = *upsert] { ended_ = backend.PutEnd(handle); });
    held_ = directory.AwaitHeldClaims(1, std::chrono::seconds(10));
  }
  ~UpsertClaimingAgain() {
    if (end_.joinable()) (void)LetTheClaimGo();
  }
  bool held() const { return held_; }
  Result<void> LetTheClaimGo() {
    directory_.LetClaimsGo();
    end_.join();
    return ended_.value_or(Err(ErrorCode::kInternalError));
  }

 private:
  InMemoryDirectory& directory_;
  std::thread end_;
  std::optional<Result<void>> ended_;
  bool held_ = false;
};

// Another upsert of the key meanwhile is busy: taking the key over as owned
// here, it would commit without a claim, and should the claim fail (another
// node put the key while the master did not know it was here), two nodes
// would hold the key.
TEST_F(BackendTest, AnUpsertWhileAnotherClaimsTheKeyAgainIsBusy) {
  Open(8 * kMiB, 32 * kMiB);
  UpsertClaimingAgain upsert(*backend_, directory_);
  ASSERT_TRUE(upsert.held());
  directory_.ClaimElsewhere("k");  // another node put it meanwhile
  auto second = backend_->Upsert("k", "second value", {});
  EXPECT_EQ(second ? ErrorCode::kOk : second.error(), ErrorCode::kObjectReplicaBusy);
  auto ended = upsert.LetTheClaimGo();
  ASSERT_FALSE(ended);
  EXPECT_EQ(ended.error(), ErrorCode::kObjectAlreadyExists);
  EXPECT_EQ(backend_->Get("k", 0, 0).error(), ErrorCode::kObjectNotFound);
  // The key is the other node's now; an upsert here is refused at the master.
  EXPECT_EQ(backend_->Upsert("k", "second value", {}).error(), ErrorCode::kObjectAlreadyExists);
  EXPECT_EQ(backend_->Get("k", 0, 0).error(), ErrorCode::kObjectNotFound);
}

// Nor may a remove or an eviction's drop start while that claim is out:
// their release could reach the master before the claim, which would then
// name this node for a key it erased.
TEST_F(BackendTest, ARemoveOrDropWhileAnUpsertClaimsTheKeyAgainIsBusy) {
  Open(8 * kMiB, 32 * kMiB);
  UpsertClaimingAgain upsert(*backend_, directory_);
  ASSERT_TRUE(upsert.held());
  auto removed = backend_->Remove("k", /*force=*/true);
  EXPECT_EQ(removed ? ErrorCode::kOk : removed.error(), ErrorCode::kObjectReplicaBusy);
  EXPECT_EQ(backend_->EvictTier("dram", 0.0).value_or(1), 0u);  // nothing may leave
  EXPECT_TRUE(upsert.LetTheClaimGo());
  EXPECT_TRUE(directory_.Owns("k"));
  EXPECT_EQ(backend_->Get("k", 0, 0)->data, "new-val");
  EXPECT_TRUE(backend_->Remove("k", /*force=*/true));
  EXPECT_FALSE(directory_.Owns("k"));
}

// The same for whole values (Upsert, and PutMany's batched claims): here the
// registration comes while the upsert finds its space, dropping a victim
// whose release the master holds (one DRAM tier, nothing to demote to).
TEST(RegistrationTest, AnOwnedKeysWholeUpsertCommittedAfterARegistrationIsStillOwnedAtTheMaster) {
  for (bool batch : {false, true}) {
    SCOPED_TRACE(batch ? "PutMany" : "Upsert");
    InMemoryDirectory directory;
    std::vector<std::unique_ptr<CacheTier>> tiers;
    tiers.push_back(std::move(DramTier::Create("dram", kMiB).value()));
    BackendOptions options;
    options.kv_lease_ttl = Millis(0);
    TieredCacheBackend backend(std::move(tiers), &directory, options);
    backend.Recover();
    ASSERT_TRUE(backend.Put("victim", Pattern("victim", 600 * 1024), {}));
    ASSERT_TRUE(backend.Put("k", Pattern("k", 100 * 1024), {}));
    const std::string value = Pattern("k", 500 * 1024, 1);
    directory.HoldReleases();
    Result<void> upserted = Err(ErrorCode::kInternalError);
    std::thread upsert([&] {
      if (batch) {
        const std::string k = "k", fresh = "fresh";  // WholeWrite keeps a reference
        std::vector<WholeWrite> writes = {{k, value, {}, WriteMode::kUpsert},
                                          {fresh, "f", {}, WriteMode::kCreate}};
        auto results = backend.PutMany(writes);
        upserted = results.at(0);
        EXPECT_TRUE(results.at(1)) << ToString(results.at(1).error());
      } else {
        upserted = backend.Upsert("k", value, {});
      }
    });
    ASSERT_TRUE(directory.AwaitHeldReleases(1, std::chrono::seconds(10)));
    directory.Register([&] { return backend.Keys(); });
    ASSERT_FALSE(directory.Owns("k"));
    directory.LetReleasesGo();
    upsert.join();
    ASSERT_TRUE(upserted) << ToString(upserted.error());
    EXPECT_TRUE(directory.Owns("k"));
    EXPECT_EQ(backend.Get("k", 0, 0)->data, value);
    if (batch) EXPECT_TRUE(directory.Owns("fresh"));
  }
}

// A directory whose releases reach the master at once but whose answers
// wait for AnswerReleases: the master has let the key go, this node does
// not know yet.
class LateReleaseAnswers : public InMemoryDirectory {
 public:
  Result<void> Release(const std::string& key) override {
    Result<void> released = InMemoryDirectory::Release(key);
    std::unique_lock lock(mu_);
    ++applied_;
    applied_cv_.notify_all();
    answer_cv_.wait(lock, [&] { return answering_; });
    return released;
  }
  bool AwaitApplied(size_t n) {
    std::unique_lock lock(mu_);
    return applied_cv_.wait_for(lock, std::chrono::seconds(10), [&] { return applied_ >= n; });
  }
  void AnswerReleases() {
    std::lock_guard lock(mu_);
    answering_ = true;
    answer_cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable applied_cv_, answer_cv_;
  size_t applied_ = 0;      // guarded by mu_
  bool answering_ = false;  // guarded by mu_
};

// A registration announces Keys(), then releases again each announced key
// this node no longer holds (WorkerServer::ReleaseKeysRemovedSince, through
// NotHeld). A remove or a drop whose release reached the master before the
// registration's purge, and whose answer has not come back, must count as
// not held: the announcement lists it, and if nothing released it again the
// master would name this node for a key it is about to erase, and every put
// of it elsewhere would fail.
TEST(RegistrationTest, AKeyWhoseRemoveOrDropIsUnansweredIsReleasedAgainAfterTheAnnouncement) {
  LateReleaseAnswers directory;
  std::vector<std::unique_ptr<CacheTier>> tiers;
  tiers.push_back(std::move(DramTier::Create("dram", 8 * kMiB).value()));
  BackendOptions options;
  options.kv_lease_ttl = Millis(0);
  TieredCacheBackend backend(std::move(tiers), &directory, options);
  backend.Recover();
  ObjectOptions pinned;
  pinned.hard_pin = true;  // never a victim of the eviction below
  ASSERT_TRUE(backend.Put("removed", "r", pinned));
  ASSERT_TRUE(backend.Put("dropped", "d", {}));
  ASSERT_TRUE(backend.Put("kept", "k", pinned));

  std::thread remover([&] { EXPECT_TRUE(backend.Remove("removed", /*force=*/false)); });
  ASSERT_TRUE(directory.AwaitApplied(1));
  // DRAM is the last tier: evicting from it drops "dropped" from the cluster.
  std::thread evictor([&] { EXPECT_TRUE(backend.EvictTier("dram", 0.0)); });
  ASSERT_TRUE(directory.AwaitApplied(2));
  ASSERT_FALSE(directory.Owns("removed"));
  ASSERT_FALSE(directory.Owns("dropped"));

  std::vector<std::string> announced;
  directory.Register([&] { return announced = backend.Keys(); });
  std::vector<std::string> gone = backend.NotHeld(announced);
  // Released as ReleaseKeysRemovedSince does, answered at once.
  for (const std::string& key : gone) directory.InMemoryDirectory::Release(key);
  directory.AnswerReleases();
  remover.join();
  evictor.join();

  EXPECT_FALSE(directory.Owns("removed"));
  EXPECT_FALSE(directory.Owns("dropped"));
  EXPECT_EQ(backend.Get("removed", 0, 0).error(), ErrorCode::kObjectNotFound);
  EXPECT_EQ(backend.Get("dropped", 0, 0).error(), ErrorCode::kObjectNotFound);
  EXPECT_TRUE(directory.Owns("kept"));
  EXPECT_EQ(backend.Get("kept", 0, 0)->data, "k");
  const std::vector<std::string> asked = {"kept", "absent"};
  EXPECT_EQ(backend.NotHeld(asked), std::vector<std::string>{"absent"});
}

// An upsert that pre-empts a put whose claim is still on the wire takes the
// key over; if the upsert is then revoked, or removed while it is written,
// the key is gone here, and the master must not keep pointing here once the
// put's claim lands, whichever of the two comes first. (Once the claim has
// landed the upsert owns the key, and a remove is busy until it ends: it is
// revoked then.)
TEST_F(BackendTest, AnUpsertEndedWhileAPutsClaimIsOutLeavesTheMasterNotPointingHere) {
  Open(8 * kMiB, 32 * kMiB);
  for (bool removed : {false, true}) {
    for (bool claim_lands_first : {true, false}) {
      const std::string end = removed ? "remove" : "revoke";
      SCOPED_TRACE(claim_lands_first ? "claim lands, then " + end : end + ", then claim lands");
      const std::string key = end + (claim_lands_first ? "-first" : "-second");
      directory_.HoldAsyncClaims();
      std::optional<Result<void>> put;
      ASSERT_TRUE(backend_->TryPutAsync(key, Pattern(key, 4096), {},
                                        [&](Result<void> r) { put = std::move(r); }));
      ASSERT_EQ(directory_.held_claims(), 1u);
      auto upsert = backend_->PutStart(key, 8192, {}, WriteMode::kUpsert);
      ASSERT_TRUE(upsert) << ToString(upsert.error());
      auto end_upsert = [&] {
        return removed ? backend_->Remove(key, /*force=*/true) : backend_->PutRevoke(*upsert);
      };
      if (claim_lands_first) {
        directory_.RunHeldClaims();
        ASSERT_TRUE(directory_.Owns(key));
        if (removed) {
          auto busy = backend_->Remove(key, /*force=*/true);
          ASSERT_FALSE(busy);
          ASSERT_EQ(busy.error(), ErrorCode::kObjectReplicaBusy);
          ASSERT_TRUE(backend_->PutRevoke(*upsert));
        } else {
          ASSERT_TRUE(end_upsert());
        }
      } else {
        ASSERT_TRUE(end_upsert());
        directory_.RunHeldClaims();
      }
      ASSERT_TRUE(put.has_value());
      EXPECT_FALSE(backend_->Get(key, 0, 0));
      EXPECT_FALSE(directory_.Owns(key));
      // The upsert's writer finds its write gone.
      EXPECT_FALSE(backend_->PutChunk(*upsert, 0, Pattern(key, 8192)));
      // Nothing is left behind: the key can be put again, here or elsewhere.
      EXPECT_TRUE(backend_->Put(key, "again", {}));
      EXPECT_TRUE(directory_.Owns(key));
    }
  }
}

// The put's claim may land while the upsert that replaced it is between its
// commit's two locked steps (making its copy durable). The ownership passes
// to the upsert all the same: committed, it holds the key the master points
// at; failing to persist, it leaves the key absent and releases it.
TEST_F(BackendTest, APutsClaimLandingWhileTheUpsertCommitsHandsItTheKey) {
  OpenWithGatedSsd(8 * kMiB, 32 * kMiB);
  for (bool persists : {true, false}) {
    SCOPED_TRACE(persists ? "the upsert's copy persists" : "the upsert's copy cannot persist");
    const std::string key = persists ? "kept" : "lost";
    directory_.HoldAsyncClaims();
    std::optional<Result<void>> put;
    ASSERT_TRUE(backend_->TryPutAsync(key, Pattern(key, 4096), {},
                                      [&](Result<void> r) { put = std::move(r); }));
    ASSERT_EQ(directory_.held_claims(), 1u);
    ObjectOptions on_ssd;
    on_ssd.preferred_tier = 1;  // its commit persists there
    const std::string value = Pattern(key, 64 * 1024, /*salt=*/1);
    auto upsert = backend_->PutStart(key, value.size(), on_ssd, WriteMode::kUpsert);
    ASSERT_TRUE(upsert) << ToString(upsert.error());
    ASSERT_TRUE(backend_->PutChunk(*upsert, 0, value));
    ssd_gate_->HoldPersists();
    if (!persists) ssd_gate_->FailPersists(ErrorCode::kInternalError);
    std::optional<Result<void>> ended;
    std::thread committing([&] { ended = backend_->PutEnd(*upsert); });
    ASSERT_TRUE(ssd_gate_->WaitForHeldPersists(1, Millis(10000)));
    directory_.RunHeldClaims();  // the put's claim lands mid-commit
    ssd_gate_->LetPersistsGo();
    committing.join();
    ssd_gate_->FailPersists(ErrorCode::kOk);
    ASSERT_TRUE(put.has_value());
    ASSERT_TRUE(ended.has_value());
    if (persists) {
      EXPECT_TRUE(*ended);
      auto got = backend_->Get(key, 0, 0);
      ASSERT_TRUE(got);
      EXPECT_EQ(got->data, value);
      EXPECT_TRUE(directory_.Owns(key));
    } else {
      EXPECT_FALSE(*ended);
      EXPECT_FALSE(backend_->Get(key, 0, 0));
      EXPECT_FALSE(directory_.Owns(key));
      EXPECT_TRUE(backend_->Put(key, "again", {}));
      EXPECT_TRUE(directory_.Owns(key));
    }
  }
}

// A key that has left this node while the master still points here is being
// released there. A put of it meanwhile would claim it (the master answers
// "yours already"), and the release landing after would leave the master
// without the key this node then holds: no client could find it, and other
// nodes could put it too. Until the release lands such a put is busy; after,
// it goes through.
TEST_F(BackendTest, APutWhileTheKeysReleaseIsOutIsBusyUntilTheMasterHasAnswered) {
  Open(8 * kMiB, 32 * kMiB);
  const std::string key = "revoked";  // a revoked upsert
  ASSERT_TRUE(backend_->Put(key, "old value", {}));
  auto upsert = backend_->PutStart(key, 8192, {}, WriteMode::kUpsert);
  ASSERT_TRUE(upsert) << ToString(upsert.error());
  directory_.HoldReleases();
  std::thread leaving([&] { EXPECT_TRUE(backend_->PutRevoke(*upsert)); });
  ASSERT_TRUE(directory_.AwaitHeldReleases(1, std::chrono::seconds(10)));
  auto put = backend_->Put(key, "new value", {});
  ASSERT_FALSE(put);
  EXPECT_EQ(put.error(), ErrorCode::kObjectReplicaBusy);
  std::optional<Result<void>> async_put;
  ASSERT_TRUE(backend_->TryPutAsync(key, "new value", {},
                                    [&](Result<void> r) { async_put = std::move(r); }));
  ASSERT_TRUE(async_put.has_value());  // refused at once, before any claim
  EXPECT_EQ(async_put->error(), ErrorCode::kObjectReplicaBusy);
  directory_.LetReleasesGo();
  leaving.join();
  EXPECT_FALSE(directory_.Owns(key));
  EXPECT_FALSE(backend_->Get(key, 0, 0));
  ASSERT_TRUE(backend_->Put(key, "new value", {}));
  EXPECT_TRUE(directory_.Owns(key));
  EXPECT_EQ(backend_->Get(key, 0, 0)->data, "new value");
}

// A remove of a key whose upsert is still being written would have to end
// the upsert, which has let the old value go already, before the master is
// told: if the master then cannot be told, nothing can be put back as it
// was. It answers busy (retry) and changes nothing, whatever the master
// says; once the upsert is committed or revoked, removes work as usual. A
// first put still being written is unknown to the master: a remove revokes
// it at once.
TEST_F(BackendTest, ARemoveOfAKeyWhoseUpsertIsBeingWrittenIsBusyAndChangesNothing) {
  Open(8 * kMiB, 32 * kMiB);
  ASSERT_TRUE(backend_->Put("k", "old value", {}));
  auto upsert = backend_->PutStart("k", 9, {}, WriteMode::kUpsert);
  ASSERT_TRUE(upsert);
  directory_.FailReleasesWith(ErrorCode::kRpcFail);  // the master cannot be told
  auto removed = backend_->Remove("k", /*force=*/true);
  ASSERT_FALSE(removed);
  EXPECT_EQ(removed.error(), ErrorCode::kObjectReplicaBusy);
  EXPECT_EQ(backend_->Get("k", 0, 0).error(), ErrorCode::kReplicaIsNotReady);
  std::vector<std::string> both = {"k", "k"};
  for (const auto& result : backend_->RemoveMany(both, /*force=*/true)) {
    EXPECT_EQ(result.error(), ErrorCode::kObjectReplicaBusy);
  }
  // The upsert goes on as if nothing had happened.
  ASSERT_TRUE(backend_->PutChunk(*upsert, 0, "new value"));
  ASSERT_TRUE(backend_->PutEnd(*upsert));
  EXPECT_EQ(backend_->Get("k", 0, 0)->data, "new value");
  EXPECT_TRUE(directory_.Owns("k"));
  // With the master reachable too, then removed once the upsert has ended.
  directory_.FailReleasesWith(ErrorCode::kOk);
  auto second = backend_->PutStart("k", 3, {}, WriteMode::kUpsert);
  ASSERT_TRUE(second);
  EXPECT_EQ(backend_->Remove("k", /*force=*/true).error(), ErrorCode::kObjectReplicaBusy);
  EXPECT_TRUE(directory_.Owns("k"));
  ASSERT_TRUE(backend_->PutChunk(*second, 0, "abc"));
  ASSERT_TRUE(backend_->PutEnd(*second));
  EXPECT_TRUE(backend_->Remove("k", /*force=*/true));
  EXPECT_FALSE(directory_.Owns("k"));
  EXPECT_EQ(backend_->Get("k", 0, 0).error(), ErrorCode::kObjectNotFound);
  // A first put being written: revoked by the remove, the master not asked.
  auto first = backend_->PutStart("fresh", 3, {});
  ASSERT_TRUE(first);
  directory_.FailReleasesWith(ErrorCode::kRpcFail);
  EXPECT_TRUE(backend_->Remove("fresh", /*force=*/false));
  directory_.FailReleasesWith(ErrorCode::kOk);
  EXPECT_EQ(backend_->PutChunk(*first, 0, "abc").error(), ErrorCode::kIllegalClient);
  EXPECT_EQ(backend_->Get("fresh", 0, 0).error(), ErrorCode::kObjectNotFound);
}

// An upsert whose new copy cannot be made durable (a full or broken disk)
// leaves the key absent, as a revoked one does, and the master must let the
// key go with it, or every later put elsewhere would meet "already exists".
TEST_F(BackendTest, AnUpsertThatCannotPersistLeavesTheKeyAbsentAtTheMasterToo) {
  OpenWithGatedSsd(8 * kMiB, 32 * kMiB);
  for (bool batch : {false, true}) {
    SCOPED_TRACE(batch ? "PutMany" : "Upsert");
    const std::string key = batch ? "batched" : "single";
    ASSERT_TRUE(backend_->Put(key, "old value", {}));
    ASSERT_TRUE(directory_.Owns(key));
    ssd_gate_->FailPersists(ErrorCode::kInternalError);
    ObjectOptions on_ssd;
    on_ssd.preferred_tier = 1;  // another size, and the SSD: a new copy
    const std::string value = Pattern(key, 64 * 1024);
    Result<void> upserted;
    if (batch) {
      std::vector<WholeWrite> writes = {{key, value, on_ssd, WriteMode::kUpsert}};
      upserted = backend_->PutMany(writes).at(0);
    } else {
      upserted = backend_->Upsert(key, value, on_ssd);
    }
    ssd_gate_->FailPersists(ErrorCode::kOk);
    ASSERT_FALSE(upserted);
    EXPECT_EQ(upserted.error(), ErrorCode::kInternalError);
    EXPECT_FALSE(backend_->Get(key, 0, 0));
    EXPECT_FALSE(directory_.Owns(key));
    EXPECT_TRUE(backend_->Put(key, "again", {}));
    EXPECT_TRUE(directory_.Owns(key));
  }
}

TEST_F(BackendTest, PutManyWithAKeyTwiceActsAsTwoWritesInOrder) {
  // The batch is written a step at a time for many keys at once; a key that
  // comes again must still meet its first write complete, as in two calls.
  Open(8 * kMiB, 32 * kMiB);
  uint64_t used_before = Tier(0).used;
  const std::string d = "d", u = "u", other = "other";
  std::vector<WholeWrite> writes = {
      {d, "one", {}, WriteMode::kCreate},     {u, "first", {}, WriteMode::kUpsert},
      {other, "x", {}, WriteMode::kCreate},   {d, "two", {}, WriteMode::kCreate},
      {u, "second!", {}, WriteMode::kUpsert},  // another size: new space
  };
  auto results = backend_->PutMany(writes);
  ASSERT_EQ(results.size(), writes.size());
  EXPECT_TRUE(results[0].has_value());
  EXPECT_TRUE(results[1].has_value());
  EXPECT_TRUE(results[2].has_value());
  EXPECT_EQ(results[3].error(), ErrorCode::kObjectAlreadyExists);  // never overwrites
  EXPECT_TRUE(results[4].has_value());
  EXPECT_EQ(backend_->Get("d", 0, 0)->data, "one");
  EXPECT_EQ(backend_->Get("u", 0, 0)->data, "second!");
  EXPECT_EQ(backend_->Get("other", 0, 0)->data, "x");
  EXPECT_TRUE(directory_.Owns("d"));
  EXPECT_TRUE(directory_.Owns("u"));
  // The first value of "u" gave its space back.
  for (const char* key : {"d", "u", "other"}) ASSERT_TRUE(backend_->Remove(key, false));
  EXPECT_EQ(Tier(0).used, used_before);
}

TEST_F(BackendTest, PutManyOfManyKeysWritesThemAllAndClaimsThemInOneCall) {
  // Each step of a batch takes the backend's lock afresh every 64 writes, so
  // a large batch never stalls readers for long; the claim stays one call.
  Open(8 * kMiB, 32 * kMiB);
  std::vector<std::string> keys, values;
  for (int i = 0; i < 150; ++i) {
    keys.push_back("many-" + std::to_string(i));
    values.push_back("value-" + std::to_string(i));
  }
  std::vector<WholeWrite> writes;
  for (int i = 0; i < 150; ++i) writes.push_back({keys[i], values[i], {}, WriteMode::kCreate});
  auto results = backend_->PutMany(writes);
  ASSERT_EQ(results.size(), writes.size());
  for (int i = 0; i < 150; ++i) {
    ASSERT_TRUE(results[i].has_value()) << keys[i];
    EXPECT_EQ(backend_->Get(keys[i], 0, 0)->data, values[i]);
    EXPECT_TRUE(directory_.Owns(keys[i]));
  }
  EXPECT_EQ(directory_.claim_many_calls(), 1);
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

// A write's last access is its commit when the commit comes later than a
// moment after the reservation: a two-phase write that took a while is as
// recent as the puts it finished after, not as old as its start.
TEST_F(BackendTest, ASlowTwoPhaseWriteCountsAsUsedWhenItCommits) {
  Open(4 * kMiB, 64 * kMiB);
  auto slow = backend_->PutStart("slow", kMiB, {});
  ASSERT_TRUE(slow);
  std::this_thread::sleep_for(Millis(5));
  ASSERT_TRUE(backend_->Put("k1", Pattern("k", kMiB, 1), {}));
  std::this_thread::sleep_for(Millis(5));
  ASSERT_TRUE(backend_->PutChunk(*slow, 0, Pattern("s", kMiB, 0)));
  ASSERT_TRUE(backend_->PutEnd(*slow));
  std::this_thread::sleep_for(Millis(5));
  ASSERT_TRUE(backend_->Put("k2", Pattern("k", kMiB, 2), {}));
  ASSERT_TRUE(backend_->Put("k3", Pattern("k", kMiB, 3), {}));
  // DRAM holds four: the fifth pushes down the least recently used.
  ASSERT_TRUE(backend_->Put("k4", Pattern("k", kMiB, 4), {}));
  EXPECT_EQ(TierOf("k1"), "ssd");
  EXPECT_EQ(TierOf("slow"), "dram");
  EXPECT_EQ(backend_->Get("slow", 0, 0)->data, Pattern("s", kMiB, 0));
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

TEST_F(BackendTest, OnlyKeysInDramAndAbsentKeysAreReadableFromHostMemory) {
  Open(4 * kMiB, 64 * kMiB);
  for (int i = 0; i < 6; ++i) {
    ASSERT_TRUE(backend_->Put("h" + std::to_string(i), Pattern("h", kMiB, i), {}));
  }
  ASSERT_EQ(TierOf("h0"), "ssd");
  ASSERT_EQ(TierOf("h5"), "dram");
  const std::vector<std::string> in_dram = {"h5", "absent"};
  const std::vector<std::string> mixed = {"h5", "h0"};
  EXPECT_TRUE(backend_->ReadableFromHostMemory(in_dram));
  EXPECT_FALSE(backend_->ReadableFromHostMemory(mixed));
  EXPECT_FALSE(backend_->ReadableFromHostMemory(std::vector<std::string>{"h0"}));
  // Asking changes nothing: no read counted, no promotion queued.
  backend_->RunMaintenance();
  EXPECT_EQ(Tier(1).hits, 0u);
  EXPECT_EQ(TierOf("h0"), "ssd");
  // Once promoted it reads from memory.
  ASSERT_TRUE(backend_->Get("h0", 0, 0));
  backend_->RunMaintenance();
  ASSERT_EQ(TierOf("h0"), "dram");
  EXPECT_TRUE(backend_->ReadableFromHostMemory(std::vector<std::string>{"h0"}));
}

// A BatchGet's key list (up to a frame's worth) is checked a run of keys per
// hold of the lock: a key on the SSD is found wherever it lies among them.
TEST_F(BackendTest, AnSsdKeyAnywhereInALongKeyListMakesItNotReadableFromHostMemory) {
  Open(4 * kMiB, 64 * kMiB);
  for (int i = 0; i < 6; ++i) {
    ASSERT_TRUE(backend_->Put("h" + std::to_string(i), Pattern("h", kMiB, i), {}));
  }
  ASSERT_EQ(TierOf("h0"), "ssd");
  ASSERT_EQ(TierOf("h5"), "dram");
  for (size_t at : {0, 63, 64, 127, 128, 199}) {
    std::vector<std::string> keys(200, "h5");
    keys[at] = "h0";
    EXPECT_FALSE(backend_->ReadableFromHostMemory(keys)) << at;
  }
  std::vector<std::string> keys(200, "absent");
  keys[150] = "h5";
  EXPECT_TRUE(backend_->ReadableFromHostMemory(keys));
}

TEST_F(BackendTest, PromotionCanBeTurnedOff) {
  BackendOptions options = DefaultOptions();
  options.promote_on_get = false;
  Open(2 * kMiB, 64 * kMiB, options);
  for (int i = 0; i < 4; ++i)
    ASSERT_TRUE(backend_->Put("n" + std::to_string(i), Pattern("n", kMiB, i), {}));
  ASSERT_EQ(TierOf("n0"), "ssd");
  ASSERT_TRUE(backend_->Get("n0", 0, 0));
  backend_->RunMaintenance();
  EXPECT_EQ(TierOf("n0"), "ssd");
}

// A Get whose copy throws lets go of the object: a pin left behind would
// keep it from ever moving or being evicted, its upserts busy and its
// removes refused for good.
TEST_F(BackendTest, AGetWhoseCopyThrowsLetsGoOfTheObject) {
  backend_.reset();
  std::vector<std::unique_ptr<CacheTier>> tiers;
  tiers.push_back(std::move(DramTier::Create("dram", 8 * kMiB).value()));
  auto ssd = std::make_unique<GatedReadTier>(
      std::move(SsdTier::Open("ssd", dir_ + "/ssd", 32 * kMiB).value()));
  GatedReadTier* throwing = ssd.get();
  tiers.push_back(std::move(ssd));
  backend_ = std::make_unique<TieredCacheBackend>(std::move(tiers), &directory_, DefaultOptions());
  backend_->Recover();
  ASSERT_TRUE(backend_->Put("a", Pattern("a", 4096), {}));
  ASSERT_TRUE(backend_->EvictTier("dram", 0.0));
  ASSERT_EQ(TierOf("a"), "ssd");

  throwing->ThrowOnReads(true);
  EXPECT_THROW(backend_->Get("a", 0, 0), std::bad_alloc);
  EXPECT_EQ(backend_->Inspect("a")->readers, 0);
  EXPECT_EQ(Tier(1).hits, 0u) << "nothing was read";
  throwing->ThrowOnReads(false);
  EXPECT_EQ(backend_->Get("a", 0, 0)->data, Pattern("a", 4096));
  EXPECT_TRUE(backend_->Remove("a", /*force=*/false)) << "an unpinned object can be removed";
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
  BackendOptions options = DefaultOptions();
  options.hard_pin_write_through = false;  // every byte of both tiers is pinned
  Open(2 * kMiB, 2 * kMiB, options);
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
  // Pinned bytes per tier, kept as objects come and go.
  EXPECT_EQ(Tier(0).pinned_bytes, 2 * kMiB);
  EXPECT_EQ(Tier(1).pinned_bytes, 2 * kMiB);
  ASSERT_TRUE(backend_->Remove("pin0", /*force=*/true));
  ASSERT_TRUE(backend_->Remove("pin3", /*force=*/true));
  EXPECT_EQ(Tier(0).pinned_bytes, kMiB);
  EXPECT_EQ(Tier(1).pinned_bytes, kMiB);
  ASSERT_TRUE(backend_->Put("loose", Pattern("x", kMiB), {}));
  EXPECT_EQ(Tier(0).pinned_bytes + Tier(1).pinned_bytes, 2 * kMiB);
}

// A hard-pinned object recovered from SSD is promoted on a read: its pinned
// bytes move with it (the SSD keeps its durable copy, counted once).
TEST_F(BackendTest, PinnedBytesFollowAPromotedObject) {
  Open(2 * kMiB, 64 * kMiB);
  ASSERT_TRUE(backend_->Put("hp", Pattern("hp", kMiB), {.preferred_tier = 1, .hard_pin = true}));
  EXPECT_EQ(Tier(1).pinned_bytes, kMiB);
  ASSERT_TRUE(backend_->Get("hp", 0, 0));
  backend_->RunMaintenance();
  ASSERT_EQ(TierOf("hp"), "dram");
  EXPECT_EQ(Tier(0).pinned_bytes, kMiB);
  EXPECT_EQ(Tier(1).pinned_bytes, 0u);
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

TEST_F(BackendTest, APlacedPutGoesToDramAndLeavesAnSsdBoundPutToPut) {
  Open(1 * kMiB, 8 * kMiB);
  const std::string value(200 << 10, 'p');
  auto placed = backend_->StartPlacedPut("in-dram", value.size(), {});
  ASSERT_TRUE(placed);
  std::memcpy(placed->bytes.data(), value.data(), value.size());
  ASSERT_TRUE(backend_->EndPlacedPut(placed->handle));
  auto read = backend_->Get("in-dram", 0, 0);
  ASSERT_TRUE(read);
  EXPECT_EQ(read->data, value);
  EXPECT_EQ(backend_->Locate("in-dram")->where.tier_name, "dram");

  // Bound for the SSD: refused before anything is reserved, so the same
  // key can be put the ordinary way at once.
  ObjectOptions on_ssd;
  on_ssd.preferred_tier = backend_->TierIndex("ssd");
  EXPECT_EQ(backend_->StartPlacedPut("on-ssd", value.size(), on_ssd).error(),
            ErrorCode::kTierNotFound);
  EXPECT_FALSE(directory_.Owns("on-ssd"));
  ASSERT_TRUE(backend_->Put("on-ssd", value, on_ssd));
  EXPECT_EQ(backend_->Locate("on-ssd")->where.tier_name, "ssd");
}

// DRAM full of hard-pinned objects: the space a put finds is on the SSD,
// which a socket cannot write into. The placed put gives the key and the
// SSD space back at once, and the ordinary Put stores the value there.
TEST_F(BackendTest, APlacedPutWhoseSpaceLandsOnTheSsdIsRevokedAndPutStoresIt) {
  BackendOptions options = DefaultOptions();
  options.hard_pin_write_through = false;  // the pins take DRAM only
  Open(2 * kMiB, 8 * kMiB, options);
  ASSERT_TRUE(backend_->Put("pin0", Pattern("pin", kMiB, 0), {.hard_pin = true}));
  ASSERT_TRUE(backend_->Put("pin1", Pattern("pin", kMiB, 1), {.hard_pin = true}));
  ASSERT_EQ(TierOf("pin1"), "dram");
  const uint64_t ssd_used = Tier(1).used;

  EXPECT_EQ(backend_->StartPlacedPut("spill", kMiB, {}).error(), ErrorCode::kTierNotFound);
  EXPECT_EQ(Tier(1).used, ssd_used) << "the SSD space it found was given back";
  EXPECT_FALSE(directory_.Owns("spill"));
  EXPECT_EQ(backend_->Get("spill", 0, 0).error(), ErrorCode::kObjectNotFound);

  const std::string value = Pattern("spill", kMiB);
  ASSERT_TRUE(backend_->Put("spill", value, {}));
  EXPECT_EQ(TierOf("spill"), "ssd");
  EXPECT_EQ(backend_->Get("spill", 0, 0)->data, value);
  EXPECT_EQ(backend_->Get("pin0", 0, 0)->data, Pattern("pin", kMiB, 0));
}

TEST_F(BackendTest, RemoveManyAnswersEachKeyAsRemoveAndTellsTheDirectoryOnce) {
  BackendOptions options = DefaultOptions();
  options.kv_lease_ttl = Millis(60000);
  Open(8 * kMiB, 32 * kMiB, options);
  ASSERT_TRUE(backend_->Put("plain1", "one", {}));
  ASSERT_TRUE(backend_->Put("plain2", "two", {}));
  ASSERT_TRUE(backend_->Put("leased", "value", {}));
  ASSERT_TRUE(backend_->Get("leased", 0, 0));
  auto removed = backend_->RemoveMany({"plain1", "leased", "absent", "", "plain2"}, false);
  ASSERT_EQ(removed.size(), 5u);
  EXPECT_TRUE(removed[0]);
  EXPECT_EQ(removed[1].error(), ErrorCode::kObjectHasLease);
  EXPECT_EQ(removed[2].error(), ErrorCode::kObjectNotFound);
  EXPECT_EQ(removed[3].error(), ErrorCode::kInvalidKey);
  EXPECT_TRUE(removed[4]);
  // Only the two removable keys reached the directory, in one call.
  EXPECT_EQ(directory_.release_many_calls(), 1);
  EXPECT_EQ(directory_.released_in_batches(), 2u);
  EXPECT_FALSE(directory_.Owns("plain1"));
  EXPECT_FALSE(directory_.Owns("plain2"));
  EXPECT_TRUE(directory_.Owns("leased"));
  EXPECT_EQ(backend_->Get("plain1", 0, 0).error(), ErrorCode::kObjectNotFound);
  EXPECT_TRUE(backend_->Get("leased", 0, 0));
  // Nothing to tell the directory: no call at all.
  EXPECT_EQ(backend_->RemoveMany({"absent"}, false)[0].error(), ErrorCode::kObjectNotFound);
  EXPECT_EQ(directory_.release_many_calls(), 1);
}

TEST_F(BackendTest, RemoveManyKeepsTheObjectsWhenTheDirectoryCannotBeTold) {
  Open(8 * kMiB, 32 * kMiB);
  ASSERT_TRUE(backend_->Put("a", "alpha", {}));
  ASSERT_TRUE(backend_->Put("b", "beta", {}));
  directory_.FailReleasesWith(ErrorCode::kRpcFail);
  auto removed = backend_->RemoveMany({"a", "b"}, false);
  ASSERT_EQ(removed.size(), 2u);
  for (const auto& r : removed) EXPECT_EQ(r.error(), ErrorCode::kRpcFail);
  // Both still here, still owned, and removable once the master answers.
  auto a = backend_->Get("a", 0, 0);
  ASSERT_TRUE(a);
  EXPECT_TRUE(directory_.Owns("a"));
  directory_.FailReleasesWith(ErrorCode::kOk);
  for (const auto& r : backend_->RemoveMany({"a", "b"}, false)) EXPECT_TRUE(r);
  EXPECT_FALSE(directory_.Owns("b"));
}

// The master applied the release but its answer was lost: the remove
// fails and the copy stays, so the master must name this node again, or
// readers asking it would miss a key this node serves and a put elsewhere
// would make two owners.
TEST_F(BackendTest, ARemoveWhoseReleaseAnswerIsLostClaimsTheKeptCopyAgain) {
  Open(8 * kMiB, 32 * kMiB);
  ASSERT_TRUE(backend_->Put("a", "alpha", {}));
  directory_.LoseReleaseAnswers(ErrorCode::kRpcTimeout);
  EXPECT_EQ(backend_->Remove("a", false).error(), ErrorCode::kRpcTimeout);
  directory_.LoseReleaseAnswers(ErrorCode::kOk);
  EXPECT_TRUE(directory_.Owns("a"));
  auto a = backend_->Get("a", 0, 0);
  ASSERT_TRUE(a);
  EXPECT_EQ(a->data, "alpha");
}

// A second remove while the kept copy is claimed again is refused: run to
// the end, its release could reach the master before the claim, and the
// claim would then name this node for a key it erased.
TEST_F(BackendTest, ARemoveWhileAKeptCopyIsClaimedAgainIsBusy) {
  Open(8 * kMiB, 32 * kMiB);
  ASSERT_TRUE(backend_->Put("a", "alpha", {}));
  directory_.LoseReleaseAnswers(ErrorCode::kRpcTimeout);
  Result<void> during_claim;
  directory_.RegisterAfterNextClaim([&] {
    directory_.LoseReleaseAnswers(ErrorCode::kOk);
    during_claim = backend_->Remove("a", false);
    return std::vector<std::string>{"a"};
  });
  EXPECT_EQ(backend_->Remove("a", false).error(), ErrorCode::kRpcTimeout);
  ASSERT_FALSE(during_claim);
  EXPECT_EQ(during_claim.error(), ErrorCode::kObjectReplicaBusy);
  EXPECT_TRUE(directory_.Owns("a"));
  EXPECT_TRUE(backend_->Get("a", 0, 0));
}

// The same, but another node put the key between the lost release and the
// claim: this copy is no longer the key's and goes.
TEST_F(BackendTest, ARemoveWhoseReleaseAnswerIsLostErasesTheCopyOfAKeyPutElsewhere) {
  Open(8 * kMiB, 32 * kMiB);
  ASSERT_TRUE(backend_->Put("a", "alpha", {}));
  directory_.LoseReleaseAnswers(ErrorCode::kRpcTimeout, /*then_claimed_elsewhere=*/true);
  EXPECT_EQ(backend_->Remove("a", false).error(), ErrorCode::kRpcTimeout);
  directory_.LoseReleaseAnswers(ErrorCode::kOk);
  EXPECT_EQ(backend_->Get("a", 0, 0).error(), ErrorCode::kObjectNotFound);
  EXPECT_TRUE(backend_->Keys().empty());
}

// The master away for the claim as well: the copy stays readable and on
// its way out (a second remove is busy), and the next maintenance pass
// claims it again, so the master names this node for it once more.
TEST_F(BackendTest, AKeptCopyWhoseClaimIsUnansweredIsClaimedOnTheNextPass) {
  Open(8 * kMiB, 32 * kMiB);
  ASSERT_TRUE(backend_->Put("a", "alpha", {}));
  directory_.LoseReleaseAnswers(ErrorCode::kRpcTimeout);
  directory_.FailClaimsWith(ErrorCode::kRpcTimeout);
  EXPECT_EQ(backend_->Remove("a", false).error(), ErrorCode::kRpcTimeout);
  directory_.LoseReleaseAnswers(ErrorCode::kOk);
  EXPECT_FALSE(directory_.Owns("a"));  // the release landed
  auto during = backend_->Get("a", 0, 0);
  ASSERT_TRUE(during);
  EXPECT_EQ(during->data, "alpha");
  EXPECT_EQ(backend_->Remove("a", false).error(), ErrorCode::kObjectReplicaBusy);
  backend_->RunMaintenance();  // the master still away: asked again later
  EXPECT_FALSE(directory_.Owns("a"));
  directory_.FailClaimsWith(ErrorCode::kOk);
  backend_->RunMaintenance();
  EXPECT_TRUE(directory_.Owns("a"));
  auto a = backend_->Get("a", 0, 0);
  ASSERT_TRUE(a);
  EXPECT_EQ(a->data, "alpha");
  EXPECT_TRUE(backend_->Remove("a", false));
  EXPECT_FALSE(directory_.Owns("a"));
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
  for (int i = 0; i < 4; ++i)
    ASSERT_TRUE(backend_->Put("f" + std::to_string(i), Pattern("f", kMiB, i), {}));
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

// An SSD tier can hold two copies of a key after a restart (the older copy's
// delete was lost, e.g. to a full disk). Recovery serves the newest: the
// higher version, else the one written later (the higher id); the older copy
// is deleted from the SSD.
TEST_F(BackendTest, RecoverServesTheNewestSsdCopyOfAKeyAndDeletesTheOlder) {
  {
    auto ssd = SsdTier::Open("ssd", dir_ + "/ssd", 32 * kMiB).value();
    auto store = [&](const std::string& key, const std::string& value, uint64_t version) {
      auto loc = ssd->Allocate(value.size());
      ASSERT_TRUE(loc);
      ASSERT_TRUE(ssd->Write(*loc, 0, std::as_bytes(std::span(value))));
      ASSERT_TRUE(ssd->Persist({.key = key, .location = *loc, .version = version}));
    };
    store("k", "version one", 1);  // id 1
    store("k", "version two", 2);  // id 2
    store("tie", "first", 7);
    store("tie", "second", 7);
    store("v", "higher version", 9);
    store("v", "lower version", 4);
  }
  Open(8 * kMiB, 32 * kMiB);
  EXPECT_EQ(std::count(recovered_.begin(), recovered_.end(), "k"), 1);
  EXPECT_EQ(Tier(1).objects, 3u);
  // The older copies are gone from the SSD, not just hidden.
  Open(8 * kMiB, 32 * kMiB);
  EXPECT_EQ(recovered_.size(), 3u);
  EXPECT_EQ(Tier(1).objects, 3u);

  auto k = backend_->Get("k", 0, 0);
  ASSERT_TRUE(k);
  EXPECT_EQ(k->data, "version two");
  EXPECT_EQ(k->version, 2u);
  EXPECT_EQ(backend_->Get("tie", 0, 0)->data, "second");
  EXPECT_EQ(backend_->Get("v", 0, 0)->data, "higher version");
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
  // Eviction finds victims through the recency index: after all that churn
  // it must still know every object, so emptying DRAM leaves nothing behind.
  ASSERT_TRUE(backend_->EvictTier("dram", 0.0));
  EXPECT_EQ(Tier(0).used, 0u);
  EXPECT_EQ(Tier(0).objects + Tier(1).objects, backend_->Keys().size());
}

// ---------------------------------------------------------------------------
// Object lifecycle: upsert, pins, leases, two-phase writes, prefetch

TEST_F(BackendTest, UpsertOfAnAbsentKeyIsAPut) {
  Open(8 * kMiB, 32 * kMiB);
  ASSERT_TRUE(backend_->Upsert("u", "hello", {}));
  EXPECT_EQ(backend_->Get("u", 0, 0)->data, "hello");
  EXPECT_TRUE(directory_.Owns("u"));
  EXPECT_EQ(backend_->Stats().upserts, 1u);
}

TEST_F(BackendTest, UpsertOfTheSameSizeWritesInPlaceAndRaisesTheVersion) {
  Open(8 * kMiB, 32 * kMiB);
  ASSERT_TRUE(backend_->Put("w", Pattern("w", kMiB, 1), {}));
  auto before = backend_->Inspect("w").value();
  uint64_t used = Tier(0).used;
  ASSERT_TRUE(backend_->Upsert("w", Pattern("w", kMiB, 2), {}));
  auto after = backend_->Inspect("w").value();
  EXPECT_EQ(after.tier, before.tier);
  EXPECT_EQ(after.offset, before.offset);  // same location: no second copy
  EXPECT_GT(after.version, before.version);
  EXPECT_EQ(Tier(0).used, used);
  auto slice = backend_->Get("w", 0, 0);
  EXPECT_EQ(slice->data, Pattern("w", kMiB, 2));
  EXPECT_EQ(slice->version, after.version);
}

TEST_F(BackendTest, InPlaceUpsertHidesTheObjectUntilItCommits) {
  Open(8 * kMiB, 32 * kMiB);
  ASSERT_TRUE(backend_->Put("h", "aaaa", {}));
  auto handle = backend_->PutStart("h", 4, {}, WriteMode::kUpsert);
  ASSERT_TRUE(handle);
  EXPECT_EQ(backend_->Get("h", 0, 0).error(), ErrorCode::kReplicaIsNotReady);
  ASSERT_TRUE(backend_->PutChunk(*handle, 0, "bbbb"));
  ASSERT_TRUE(backend_->PutEnd(*handle));
  EXPECT_EQ(backend_->Get("h", 0, 0)->data, "bbbb");
}

// A framework probing which blocks exist must not be told that one being
// rewritten is gone: it would compute the block again and find its put
// refused. A key whose first put is still being written does not exist yet.
TEST_F(BackendTest, AKeyBeingUpsertedStillExists) {
  Open(8 * kMiB, 32 * kMiB);
  ASSERT_TRUE(backend_->Put("k", Pattern("k", 4096), {}));
  auto upsert = backend_->PutStart("k", 4096, {}, WriteMode::kUpsert);
  ASSERT_TRUE(upsert);
  EXPECT_EQ(backend_->Exist("k"), Result<bool>(true));
  auto first_put = backend_->PutStart("new", 4096, {});
  ASSERT_TRUE(first_put);
  EXPECT_EQ(backend_->Exist("new"), Result<bool>(false));
  ASSERT_TRUE(backend_->PutChunk(*upsert, 0, Pattern("k", 4096, 1)));
  ASSERT_TRUE(backend_->PutEnd(*upsert));
  EXPECT_EQ(backend_->Exist("k"), Result<bool>(true));
  EXPECT_EQ(backend_->Get("k", 0, 0)->data, Pattern("k", 4096, 1));
}

TEST_F(BackendTest, UpsertWithANewSizeFreesTheOldSpace) {
  Open(8 * kMiB, 32 * kMiB);
  ASSERT_TRUE(backend_->Put("g", Pattern("g", 2 * kMiB), {}));
  EXPECT_GE(Tier(0).used, 2 * kMiB);
  ASSERT_TRUE(backend_->Upsert("g", Pattern("g", kMiB / 2), {}));
  EXPECT_LT(Tier(0).used, kMiB);
  EXPECT_EQ(backend_->Get("g", 0, 0)->data, Pattern("g", kMiB / 2));
  EXPECT_EQ(backend_->Inspect("g")->size, kMiB / 2);
}

TEST_F(BackendTest, UpsertPreemptsAnInFlightWrite) {
  Open(8 * kMiB, 32 * kMiB);
  auto slow = backend_->PutStart("p", 8, {});
  ASSERT_TRUE(slow);
  ASSERT_TRUE(backend_->PutChunk(*slow, 0, "old-"));
  ASSERT_TRUE(backend_->Upsert("p", "new-value", {}));
  EXPECT_EQ(backend_->PutChunk(*slow, 4, "data").error(), ErrorCode::kIllegalClient);
  EXPECT_EQ(backend_->PutEnd(*slow).error(), ErrorCode::kIllegalClient);
  EXPECT_EQ(backend_->Get("p", 0, 0)->data, "new-value");
}

TEST_F(BackendTest, PreemptingAnInPlaceWriteNeverReusesItsLocation) {
  // The pre-empted writer may still be copying a chunk it sent before it was
  // pre-empted; the next value must not live where that copy lands.
  Open(8 * kMiB, 32 * kMiB);
  ASSERT_TRUE(backend_->Put("p", "12345678", {}));
  uint64_t original = backend_->Inspect("p")->offset;
  auto in_place = backend_->PutStart("p", 8, {}, WriteMode::kUpsert);
  ASSERT_TRUE(in_place);
  ASSERT_EQ(backend_->Inspect("p")->offset, original);  // same size: in place
  ASSERT_TRUE(backend_->Upsert("p", "abcdefgh", {}));
  EXPECT_NE(backend_->Inspect("p")->offset, original);
  // A late chunk of the pre-empted writer is refused and changes nothing.
  EXPECT_EQ(backend_->PutChunk(*in_place, 0, "XXXXXXXX").error(), ErrorCode::kIllegalClient);
  EXPECT_EQ(backend_->Get("p", 0, 0)->data, "abcdefgh");
}

TEST_F(BackendTest, ARevokedUpsertLeavesTheKeyAbsent) {
  Open(8 * kMiB, 32 * kMiB);
  ASSERT_TRUE(backend_->Put("r", "value", {}));
  auto handle = backend_->PutStart("r", 5, {}, WriteMode::kUpsert);
  ASSERT_TRUE(handle);
  ASSERT_TRUE(backend_->PutRevoke(*handle));
  EXPECT_EQ(backend_->Get("r", 0, 0).error(), ErrorCode::kObjectNotFound);
  EXPECT_FALSE(directory_.Owns("r"));
  EXPECT_EQ(Tier(0).used, 0u);
}

TEST_F(BackendTest, UpsertKeepsPins) {
  Open(8 * kMiB, 32 * kMiB);
  ASSERT_TRUE(backend_->Put("pinned", "abc", {.hard_pin = true}));
  ASSERT_TRUE(backend_->Upsert("pinned", "abcdef", {}));
  EXPECT_TRUE(backend_->Inspect("pinned")->hard_pinned);
}

TEST_F(BackendTest, UpsertDuringReadsAnswersBusyAndReadersSeeWholeValues) {
  BackendOptions options = DefaultOptions();
  options.promote_on_get = false;
  OpenWithGatedSsd(16 * kMiB, 64 * kMiB, options);
  const uint64_t size = 4 * kMiB;  // one RPC chunk: a Get returns it whole
  const std::string v0 = Pattern("busy", size, 0), v1 = Pattern("busy", size, 1);
  ASSERT_TRUE(backend_->Put("busy", v0, {.preferred_tier = 1}));
  ASSERT_EQ(TierOf("busy"), "ssd");

  // Given a reader held in the middle of its read (the gate is shut).
  ssd_gate_->Close();
  Result<ReadSlice> held = Err(ErrorCode::kInternalError);
  std::thread reader([&] { held = backend_->Get("busy", 0, 0); });
  // Whatever happens below, the reader is let go and joined.
  struct Release {
    GatedReadTier* gate;
    std::thread& thread;
    ~Release() {
      gate->Open();
      if (thread.joinable()) thread.join();
    }
  } release{ssd_gate_, reader};
  ASSERT_TRUE(ssd_gate_->WaitForHeldReads(1, Millis(10000))) << "the reader never reached the tier";
  EXPECT_EQ(backend_->Inspect("busy")->readers, 1);

  // When an upsert meets it, expect OBJECT_REPLICA_BUSY and nothing changed.
  auto refused = backend_->Upsert("busy", v1, {});
  ASSERT_FALSE(refused) << "an upsert replaced the value under an active reader";
  EXPECT_EQ(refused.error(), ErrorCode::kObjectReplicaBusy);

  // Then the reader finishes with the whole old value.
  ssd_gate_->Open();
  reader.join();
  ASSERT_TRUE(held) << ToString(held.error());
  EXPECT_TRUE(held->data == v0) << "the held reader saw a torn or new value";

  // With no reader left the upsert goes through, and a new reader sees the
  // whole new value; while an upsert is in flight, readers see no value
  // rather than part of one.
  EXPECT_EQ(backend_->Inspect("busy")->readers, 0);
  auto handle = backend_->PutStart("busy", size, {}, WriteMode::kUpsert);
  ASSERT_TRUE(handle);
  ASSERT_TRUE(backend_->PutChunk(*handle, 0, std::string_view(v1).substr(0, size / 2)));
  auto during = backend_->Get("busy", 0, 0);
  ASSERT_FALSE(during) << "a read during an upsert returned " << during->data.size() << " bytes";
  EXPECT_EQ(during.error(), ErrorCode::kReplicaIsNotReady);
  ASSERT_TRUE(backend_->PutChunk(*handle, size / 2, std::string_view(v1).substr(size / 2)));
  ASSERT_TRUE(backend_->PutEnd(*handle));
  auto after = backend_->Get("busy", 0, 0);
  ASSERT_TRUE(after);
  EXPECT_TRUE(after->data == v1) << "a reader after the upsert saw a torn or old value";
}

TEST_F(BackendTest, SoftPinExpiresAfterItsTtl) {
  Open(3 * kMiB, 64 * kMiB);
  ASSERT_TRUE(
      backend_->Put("soft", Pattern("s", kMiB), {.soft_pin_ttl = Millis(30), .soft_pin = true}));
  EXPECT_TRUE(backend_->Inspect("soft")->soft_pinned);
  std::this_thread::sleep_for(Millis(50));
  EXPECT_FALSE(backend_->Inspect("soft")->soft_pinned);
  ASSERT_TRUE(backend_->Put("a", Pattern("a", kMiB), {}));
  ASSERT_TRUE(backend_->Put("b", Pattern("b", kMiB), {}));
  ASSERT_TRUE(backend_->Put("c", Pattern("c", kMiB), {}));
  EXPECT_EQ(TierOf("soft"), "ssd");  // the oldest, and no longer pinned
}

TEST_F(BackendTest, SoftPinnedObjectsStayWhenEvictingThemIsDisallowed) {
  BackendOptions options = DefaultOptions();
  options.allow_evict_soft_pinned = false;
  Open(2 * kMiB, 2 * kMiB, options);
  ASSERT_TRUE(backend_->Put("s1", Pattern("s", kMiB, 1), {.soft_pin = true}));
  ASSERT_TRUE(backend_->Put("s2", Pattern("s", kMiB, 2), {.soft_pin = true}));
  ASSERT_TRUE(backend_->Put("s3", Pattern("s", kMiB, 3), {.soft_pin = true}));
  ASSERT_TRUE(backend_->Put("s4", Pattern("s", kMiB, 4), {.soft_pin = true}));
  EXPECT_EQ(backend_->Put("x", Pattern("x", kMiB), {}).error(), ErrorCode::kNoAvailableHandle);
  ASSERT_TRUE(backend_->Remove("s1", false));  // a soft pin does not block Remove
}

TEST_F(BackendTest, HardPinnedDramObjectsAreWrittenThroughAndSurviveARestart) {
  Open(8 * kMiB, 32 * kMiB);
  ASSERT_TRUE(backend_->Put("weights", Pattern("weights", kMiB), {.hard_pin = true}));
  EXPECT_EQ(TierOf("weights"), "dram");
  EXPECT_GE(Tier(1).used, kMiB);  // the durable copy
  Open(8 * kMiB, 32 * kMiB);
  auto info = backend_->Inspect("weights");
  ASSERT_TRUE(info);
  EXPECT_TRUE(info->hard_pinned);
  EXPECT_EQ(backend_->Get("weights", 0, 0)->data, Pattern("weights", kMiB));
  backend_->RunMaintenance();  // promoted back to DRAM, durable copy kept
  EXPECT_EQ(TierOf("weights"), "dram");
  EXPECT_GE(Tier(1).used, kMiB);
  ASSERT_TRUE(backend_->Remove("weights", true));
  EXPECT_EQ(Tier(1).used, 0u);
  EXPECT_EQ(Tier(0).used, 0u);
}

TEST_F(BackendTest, ExistWithPrefetchPromotesAnSsdOnlyObject) {
  Open(4 * kMiB, 64 * kMiB);
  for (int i = 0; i < 6; ++i)
    ASSERT_TRUE(backend_->Put("f" + std::to_string(i), Pattern("f", kMiB, i), {}));
  ASSERT_EQ(TierOf("f0"), "ssd");
  EXPECT_TRUE(*backend_->Exist("f0", /*prefetch=*/true));
  EXPECT_EQ(backend_->Stats().prefetch_started, 1u);
  EXPECT_TRUE(*backend_->Exist("f0", true));  // already queued: skipped
  backend_->RunMaintenance();
  EXPECT_EQ(TierOf("f0"), "dram");
  auto stats = backend_->Stats();
  EXPECT_EQ(stats.prefetch_succeeded, 1u);
  EXPECT_GE(stats.prefetch_skipped, 1u);
  EXPECT_TRUE(*backend_->Exist("f5", true));  // in DRAM: nothing to do
  EXPECT_EQ(backend_->Stats().prefetch_started, 1u);
  EXPECT_FALSE(*backend_->Exist("absent", true));
}

TEST_F(BackendTest, EvictTierDemotesDownToTheTargetRatio) {
  Open(8 * kMiB, 64 * kMiB);
  for (int i = 0; i < 6; ++i)
    ASSERT_TRUE(backend_->Put("e" + std::to_string(i), Pattern("e", kMiB, i), {}));
  auto freed = backend_->EvictTier("dram", 0.25);
  ASSERT_TRUE(freed);
  EXPECT_GE(*freed, 4 * kMiB);
  EXPECT_LE(Tier(0).used, 2 * kMiB + 4096);
  EXPECT_EQ(backend_->EvictTier("nvme", 0.5).error(), ErrorCode::kTierNotFound);
  EXPECT_EQ(backend_->EvictTier("dram", 1.5).error(), ErrorCode::kInvalidParams);
}

// A second node in the same process: a real backend that adopts objects.
class InProcessPeer : public PeerTransfer {
 public:
  InProcessPeer(TieredCacheBackend& target, InMemoryDirectory& directory)
      : target_(target), directory_(directory) {}
  Result<std::string> Transfer(const std::string& key, uint64_t size, uint64_t version,
                               const ObjectOptions& options, const ObjectSource& source,
                               const std::string&, bool) override {
    auto handle = target_.PutStart(key, size, options, WriteMode::kAdopt, {.version = version});
    if (!handle) return Err(handle.error());
    std::string buffer(size, '\0');
    if (!source.read(0, std::as_writable_bytes(std::span(buffer.data(), buffer.size())))) {
      return Err(ErrorCode::kTransferFail);
    }
    // An RDMA sender writes straight from this address: it must hold the
    // same bytes as the reader returns.
    if (source.host_address != nullptr) {
      host_sources++;
      if (std::memcmp(source.host_address, buffer.data(), size) != 0) host_mismatches++;
    }
    if (!target_.PutChunk(*handle, 0, buffer) || !target_.PutEnd(*handle)) {
      return Err(ErrorCode::kTransferFail);
    }
    transfers++;
    return std::string("peer");  // the directory is shared: ownership is unchanged by name
  }
  int transfers = 0;
  int host_sources = 0;     // transfers whose source had a host address
  int host_mismatches = 0;  // ...whose bytes there differed from the reader's

 private:
  TieredCacheBackend& target_;
  InMemoryDirectory& directory_;
};

TEST_F(BackendTest, AFullLastTierHandsObjectsToAnotherNodeInsteadOfDropping) {
  Open(2 * kMiB, 4 * kMiB);
  std::vector<std::unique_ptr<CacheTier>> peer_tiers;
  peer_tiers.push_back(std::move(DramTier::Create("dram", 16 * kMiB).value()));
  BackendOptions peer_options = DefaultOptions();
  peer_options.adopt_confirm_delay = Millis(0);
  InMemoryDirectory peer_directory;
  TieredCacheBackend peer(std::move(peer_tiers), &peer_directory, peer_options);
  InProcessPeer link(peer, peer_directory);
  backend_->set_peer_transfer(&link);

  for (int i = 0; i < 8; ++i) {
    ASSERT_TRUE(backend_->Put("m" + std::to_string(i), Pattern("m", kMiB, i), {}));
  }
  auto stats = backend_->Stats();
  EXPECT_EQ(stats.dropped, 0u);
  EXPECT_GE(stats.moved_out, 2u);
  EXPECT_EQ(peer.Stats().moved_in, stats.moved_out);
  EXPECT_EQ(backend_->MovedTo("m0"), "peer");
  // The moved copy is complete on the peer, byte for byte, and becomes the
  // peer's own once its claim is confirmed.
  auto moved = peer.Get("m0", 0, 0);
  ASSERT_TRUE(moved);
  EXPECT_EQ(moved->data, Pattern("m", kMiB, 0));
  EXPECT_EQ(peer.Inspect("m0")->state, "adopted");
  EXPECT_TRUE(peer.Keys().empty());
  peer.RunMaintenance();
  EXPECT_EQ(peer.Inspect("m0")->state, "complete");
  EXPECT_EQ(peer.Keys().size(), stats.moved_out);
}

// With DRAM as the last tier, objects leave the node straight from the
// arena: the transfer gets their host address (an RDMA sender writes from
// it without a copy); from SSD it gets none.
TEST_F(BackendTest, TransfersFromDramCarryTheObjectsHostAddress) {
  std::vector<std::unique_ptr<CacheTier>> tiers;
  tiers.push_back(std::move(DramTier::Create("dram", 4 * kMiB).value()));
  TieredCacheBackend dram_only(std::move(tiers), &directory_, DefaultOptions());
  InMemoryDirectory peer_directory;
  std::vector<std::unique_ptr<CacheTier>> peer_tiers;
  peer_tiers.push_back(std::move(DramTier::Create("dram", 32 * kMiB).value()));
  TieredCacheBackend peer(std::move(peer_tiers), &peer_directory, DefaultOptions());
  InProcessPeer link(peer, peer_directory);
  dram_only.set_peer_transfer(&link);
  for (int i = 0; i < 6; ++i) {
    ASSERT_TRUE(dram_only.Put("h" + std::to_string(i), Pattern("h", kMiB, i), {}));
  }
  EXPECT_GE(link.transfers, 2);
  EXPECT_EQ(link.host_sources, link.transfers);
  EXPECT_EQ(link.host_mismatches, 0);
  EXPECT_EQ(peer.Get("h0", 0, 0)->data, Pattern("h", kMiB, 0));

  Open(2 * kMiB, 4 * kMiB);  // DRAM + SSD: moves leave from the SSD
  InProcessPeer ssd_link(peer, peer_directory);
  backend_->set_peer_transfer(&ssd_link);
  for (int i = 0; i < 8; ++i) {
    ASSERT_TRUE(backend_->Put("s" + std::to_string(i), Pattern("s", kMiB, i), {}));
  }
  EXPECT_GE(ssd_link.transfers, 1);
  EXPECT_EQ(ssd_link.host_sources, 0);
}

TEST_F(BackendTest, AnUpsertOfAKeyHandedToAnotherNodeIsRedirected) {
  Open(2 * kMiB, 4 * kMiB);
  std::vector<std::unique_ptr<CacheTier>> peer_tiers;
  peer_tiers.push_back(std::move(DramTier::Create("dram", 16 * kMiB).value()));
  InMemoryDirectory peer_directory;
  TieredCacheBackend peer(std::move(peer_tiers), &peer_directory, DefaultOptions());
  InProcessPeer link(peer, peer_directory);
  backend_->set_peer_transfer(&link);
  for (int i = 0; i < 8; ++i) {
    ASSERT_TRUE(backend_->Put("r" + std::to_string(i), Pattern("r", kMiB, i), {}));
  }
  ASSERT_EQ(backend_->MovedTo("r0"), "peer");
  directory_.ClaimElsewhere("r0");  // the master names the peer now
  EXPECT_EQ(backend_->Upsert("r0", "new", {}).error(), ErrorCode::kNotOwner);
  EXPECT_EQ(backend_->Inspect("r0").error(), ErrorCode::kObjectNotFound);  // nothing created
  // A plain Put may create the key here again; then it is ours once more.
  directory_.ReleaseElsewhere("r0");
  ASSERT_TRUE(backend_->Put("r0", "again", {}));
  EXPECT_EQ(backend_->MovedTo("r0"), "");
  ASSERT_TRUE(backend_->Upsert("r0", "fresh", {}));
}

TEST_F(BackendTest, AnAdoptedCopyOwnedElsewhereIsDroppedOnConfirmation) {
  BackendOptions options = DefaultOptions();
  options.adopt_confirm_delay = Millis(0);
  Open(8 * kMiB, 32 * kMiB, options);
  directory_.ClaimElsewhere("stolen");  // the sender's hand-over never happened
  auto handle = backend_->PutStart("stolen", 3, {}, WriteMode::kAdopt, {.version = 42});
  ASSERT_TRUE(handle);
  ASSERT_TRUE(backend_->PutChunk(*handle, 0, "abc"));
  ASSERT_TRUE(backend_->PutEnd(*handle));
  EXPECT_EQ(backend_->Inspect("stolen")->version, 42u);
  EXPECT_EQ(backend_->Remove("stolen", true).error(), ErrorCode::kObjectReplicaBusy);
  backend_->RunMaintenance();
  EXPECT_EQ(backend_->Inspect("stolen").error(), ErrorCode::kObjectNotFound);
  ASSERT_TRUE(backend_->PutStart("aborted", 1, {}, WriteMode::kAdopt, {.version = 1}));
}

// A client that resends a chunk after a timeout can have two copies of it in
// flight. The commit must wait for the one still being copied: landing on
// the complete object, it would change a value readers already saw, under
// the same version, and on the SSD tier it would write the write-pending
// marker again, so that the next open dropped the committed object.
TEST_F(BackendTest, ACommitWaitsForADuplicateChunkStillInFlight) {
  OpenWithGatedSsd(8 * kMiB, 32 * kMiB);
  ObjectOptions on_ssd;
  on_ssd.preferred_tier = 1;
  auto handle = backend_->PutStart("resent", 4096, on_ssd);
  ASSERT_TRUE(handle);
  ssd_gate_->HoldNextWrite();
  std::thread first_copy([&] { (void)backend_->PutChunk(*handle, 0, Pattern("late", 4096)); });
  ASSERT_TRUE(ssd_gate_->WaitForHeldWrite(Millis(10000)));
  ASSERT_TRUE(backend_->PutChunk(*handle, 0, Pattern("resent", 4096)));

  std::atomic<bool> ended{false};
  std::optional<ReadSlice> seen_at_end;
  std::thread end([&] {
    EXPECT_TRUE(backend_->PutEnd(*handle));
    seen_at_end = backend_->Get("resent", 0, 0).value();
    ended = true;
  });
  // Without the wait, the commit and the read run now, before the first copy.
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_FALSE(ended.load()) << "the commit did not wait for the chunk in flight";
  ssd_gate_->LetWritesGo();
  first_copy.join();
  end.join();

  auto after = backend_->Get("resent", 0, 0);
  ASSERT_TRUE(after);
  ASSERT_TRUE(seen_at_end.has_value());
  EXPECT_EQ(after->version, seen_at_end->version);
  EXPECT_TRUE(after->data == seen_at_end->data) << "a complete object's bytes changed";

  Open(8 * kMiB, 32 * kMiB);  // a restart
  EXPECT_EQ(recovered_, std::vector<std::string>{"resent"});
  auto reopened = backend_->Get("resent", 0, 0);
  ASSERT_TRUE(reopened);
  EXPECT_TRUE(reopened->data == after->data);
}

// A hard pin survives a restart, which a hard-pinned object in DRAM does
// through its copy on the SSD. A put whose copy cannot be made fails (was:
// it returned OK and the object was gone after the restart), and leaves
// nothing behind, here or at the master; the copy of one that fits survives
// a restart.
TEST_F(BackendTest, AHardPinnedPutWhoseSsdCopyCannotBeMadeFails) {
  Open(8 * kMiB, 1 * kMiB);
  ObjectOptions pinned;
  pinned.hard_pin = true;
  auto put = backend_->Put("pinned", Pattern("pinned", 2 * kMiB), pinned);
  ASSERT_FALSE(put);
  EXPECT_EQ(put.error(), ErrorCode::kNoAvailableHandle);
  EXPECT_EQ(backend_->Get("pinned", 0, 0).error(), ErrorCode::kObjectNotFound);
  EXPECT_FALSE(directory_.Owns("pinned"));
  EXPECT_EQ(Tier(0).used, 0u);

  ASSERT_TRUE(backend_->Put("fits", Pattern("fits", kMiB / 2), pinned));
  Open(8 * kMiB, 1 * kMiB);  // a restart
  EXPECT_EQ(recovered_, std::vector<std::string>{"fits"});

  // An upsert of it has let the old value go before the copy is tried:
  // failing would drop a hard-pinned key, so it stays, in DRAM only.
  ASSERT_TRUE(backend_->Upsert("fits", Pattern("grown", 2 * kMiB), {}));
  EXPECT_TRUE(backend_->Get("fits", 0, 0)->data == Pattern("grown", 2 * kMiB));
  EXPECT_TRUE(directory_.Owns("fits"));
}

}  // namespace
}  // namespace mooncake
