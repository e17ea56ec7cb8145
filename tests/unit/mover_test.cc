// The Mover on its own (worker/mover.h): placement, promotion, demotion,
// eviction, hand-over to other nodes and adopt confirmation, driven
// directly over DRAM tiers.

#include "worker/mover.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "tests/unit/backend_parts.h"
#include "tiers/ssd_tier.h"
#include "worker/tiered_cache_backend.h"

namespace mooncake {
namespace {

constexpr uint64_t kKiB = 1024;
constexpr uint64_t kMiB = 1024 * kKiB;

using testing::BackendParts;
using testing::FakePeers;

BackendOptions NoConfirmDelay() {
  BackendOptions options;
  options.adopt_confirm_delay = Millis{0};
  return options;
}

TEST(MoverTest, AllocateInTakesTheFirstTierThatCanHoldTheObject) {
  BackendParts parts({1 * kMiB, 4 * kMiB});
  auto small = parts.mover.AllocateIn(0, 1, 512 * kKiB, /*allow_drop=*/true);
  ASSERT_TRUE(small);
  EXPECT_EQ(small->first, 0u);
  auto large = parts.mover.AllocateIn(0, 1, 2 * kMiB, /*allow_drop=*/true);
  ASSERT_TRUE(large);
  EXPECT_EQ(large->first, 1u);
  EXPECT_FALSE(parts.mover.AllocateIn(0, 1, 8 * kMiB, /*allow_drop=*/true));
}

// A node restarted with a smaller --ssd-capacity recovers more than the SSD
// may hold. The first put that needs SSD room makes room for itself and the
// excess at once, and succeeds; it failed with NO_AVAILABLE_HANDLE four times
// over, each time dropping 8 objects that were freed but never enough.
TEST(MoverTest, APutIntoATierRecoveredOverCapacityEvictsTheExcessAndSucceeds) {
  char tmpl[] = "/tmp/mover_test_XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  const std::string value(1 * kMiB, 'v');
  ObjectOptions on_ssd;
  on_ssd.preferred_tier = 1;
  testing::InMemoryDirectory directory;
  auto open = [&](uint64_t ssd_capacity) {
    std::vector<std::unique_ptr<CacheTier>> tiers;
    tiers.push_back(std::move(DramTier::Create("dram", 4 * kMiB).value()));
    tiers.push_back(std::move(SsdTier::Open("ssd", dir + "/ssd", ssd_capacity).value()));
    return std::make_unique<TieredCacheBackend>(std::move(tiers), &directory, BackendOptions{});
  };
  {
    auto backend = open(64 * kMiB);
    for (int i = 0; i < 48; ++i) ASSERT_TRUE(backend->Put("k" + std::to_string(i), value, on_ssd));
  }
  auto backend = open(16 * kMiB);
  EXPECT_EQ(backend->Recover().size(), 48u);
  ASSERT_GT(backend->Stats().tiers[1].used, 16 * kMiB);

  EXPECT_TRUE(backend->Put("new", value, on_ssd));
  EXPECT_LE(backend->Stats().tiers[1].used, 16 * kMiB);
  // Only the excess and the new object's room went: 33 of 48 objects.
  EXPECT_EQ(backend->Stats().dropped, 33u);
  backend.reset();
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
}

TEST(MoverTest, MoveObjectCopiesTheBytesAndCountsPromotionsAndDemotions) {
  BackendParts parts({1 * kMiB, 4 * kMiB});
  std::string value(300 * kKiB, 'v');
  parts.AddComplete("k", value, 1);
  EXPECT_TRUE(parts.mover.MoveObject("k", 0, 0, /*allow_drop=*/false));
  EXPECT_EQ(parts.TierOf("k"), 0);
  EXPECT_EQ(parts.Read("k"), value);
  EXPECT_EQ(parts.ctx.counters.tier[0].promotions_in.load(), 1u);
  EXPECT_TRUE(parts.mover.MoveObject("k", 1, 1, /*allow_drop=*/true));
  EXPECT_EQ(parts.TierOf("k"), 1);
  EXPECT_EQ(parts.ctx.counters.tier[0].demotions_out.load(), 1u);
  EXPECT_EQ(parts.ctx.tiers[0]->used(), 0u);
  parts.With("k", [](Object& o) { EXPECT_EQ(o.move(), MoveState::kIdle); });
}

TEST(MoverTest, MoveObjectLeavesObjectsThatAreHeldOrAlreadyThereAlone) {
  BackendParts parts({1 * kMiB, 4 * kMiB});
  parts.AddComplete("held", "held", 1);
  parts.With("held", [](Object& o) {
    o.placement_held_until = SteadyClock::now() + std::chrono::hours(1);
  });
  EXPECT_FALSE(parts.mover.MoveObject("held", 0, 0, false));
  parts.AddComplete("there", "there", 1);
  EXPECT_FALSE(parts.mover.MoveObject("there", 1, 1, true));
  parts.AddComplete("handed-over", "bytes", 1);
  parts.With("handed-over",
             [&](Object& o) { parts.table.SetState(o, ObjectState::kTransferring); });
  EXPECT_FALSE(parts.mover.MoveObject("handed-over", 0, 0, false));
  EXPECT_FALSE(parts.mover.MoveObject("absent", 0, 0, false));
  EXPECT_EQ(parts.TierOf("held"), 1);
  EXPECT_EQ(parts.TierOf("handed-over"), 1);
}

// A victim is picked under the lock and moved later, one after another; by
// then it may have been leased, read, hard-pinned or replaced. A demotion
// checks again, while a promotion of the same objects still goes.
TEST(MoverTest, ADemotionLeavesObjectsLeasedReadOrPinnedSinceTheyWerePicked) {
  BackendParts parts({1 * kMiB, 4 * kMiB});
  parts.AddComplete("leased", "l", 0);
  parts.With("leased",
             [](Object& o) { o.lease_until = SteadyClock::now() + std::chrono::hours(1); });
  parts.AddComplete("read", "r", 0);
  parts.With("read", [](Object& o) { o.readers = 1; });
  parts.AddComplete("pinned", "p", 0, {.hard_pin = true});
  for (const char* key : {"leased", "read", "pinned"}) {
    EXPECT_FALSE(parts.mover.MoveObject(key, 1, 1, /*allow_drop=*/true)) << key;
    EXPECT_EQ(parts.TierOf(key), 0) << key;
  }
  parts.AddComplete("up", "u", 1);
  parts.With("up", [](Object& o) { o.lease_until = SteadyClock::now() + std::chrono::hours(1); });
  EXPECT_TRUE(parts.mover.MoveObject("up", 0, 0, /*allow_drop=*/false));
  EXPECT_EQ(parts.TierOf("up"), 0);
  EXPECT_EQ(parts.ctx.counters.tier[0].demotions_out.load(), 0u);
}

TEST(MoverTest, AllocationPressureDemotesTheLeastRecentlyUsedObject) {
  BackendParts parts({1 * kMiB, 4 * kMiB});
  parts.AddComplete("older", std::string(400 * kKiB, 'o'), 0);
  parts.AddComplete("newer", std::string(400 * kKiB, 'n'), 0);
  auto placed = parts.mover.AllocateIn(0, 1, 400 * kKiB, /*allow_drop=*/true);
  ASSERT_TRUE(placed);
  EXPECT_EQ(placed->first, 0u);
  EXPECT_EQ(parts.TierOf("older"), 1);
  EXPECT_EQ(parts.TierOf("newer"), 0);
  EXPECT_EQ(parts.Read("older"), std::string(400 * kKiB, 'o'));
}

TEST(MoverTest, WithoutPeersTheLastTierDropsObjectsFromTheCluster) {
  BackendParts parts({1 * kMiB});
  parts.AddComplete("a", std::string(100 * kKiB, 'a'), 0);
  parts.AddComplete("b", std::string(100 * kKiB, 'b'), 0);
  parts.AddComplete("pinned", std::string(100 * kKiB, 'p'), 0, {.hard_pin = true});
  EXPECT_GT(parts.mover.EvictTier(0, 0.0), 0u);
  EXPECT_EQ(parts.StateOf("a"), ObjectState::kRemoved);
  EXPECT_EQ(parts.StateOf("b"), ObjectState::kRemoved);
  EXPECT_EQ(parts.StateOf("pinned"), ObjectState::kComplete);  // hard pins stay
  EXPECT_FALSE(parts.directory.Owns("a"));
  EXPECT_TRUE(parts.directory.Owns("pinned"));
  EXPECT_EQ(parts.ctx.counters.dropped.load(), 2u);
  EXPECT_EQ(parts.ctx.counters.tier[0].evictions.load(), 2u);
}

TEST(MoverTest, WithPeersTheLastTierHandsObjectsOverAndRemembersWhere) {
  BackendParts parts({1 * kMiB});
  FakePeers peers;
  parts.ctx.peers = &peers;
  std::string value(100 * kKiB, 'x');
  parts.AddComplete("k", value, 0);
  EXPECT_GT(parts.mover.EvictTier(0, 0.0), 0u);
  EXPECT_EQ(parts.StateOf("k"), ObjectState::kRemoved);
  EXPECT_EQ(peers.received["k"], value);
  EXPECT_EQ(peers.last_target, "");
  EXPECT_FALSE(peers.last_dram_only);
  std::lock_guard lock(parts.ctx.mu);
  EXPECT_EQ(parts.mover.MovedToLocked("k"), "node-b");
  EXPECT_TRUE(parts.mover.MovedAwayLocked("k"));
  EXPECT_EQ(parts.ctx.counters.moved_out.load(), 1u);
  EXPECT_EQ(parts.ctx.counters.tier[0].evictions.load(), 1u);
  parts.mover.ForgetMoveLocked("k");
  EXPECT_EQ(parts.mover.MovedToLocked("k"), "");
}

TEST(MoverTest, AFailedTransferLeavesTheObjectCompleteAndHere) {
  BackendParts parts({1 * kMiB});
  FakePeers peers;
  peers.error = ErrorCode::kRpcFail;
  parts.ctx.peers = &peers;
  parts.AddComplete("k", "value", 0);
  auto moved = parts.mover.TransferOut("k", "node-c", /*dram_only=*/true);
  ASSERT_FALSE(moved);
  EXPECT_EQ(moved.error(), ErrorCode::kRpcFail);
  EXPECT_EQ(parts.StateOf("k"), ObjectState::kComplete);
  EXPECT_EQ(parts.mover.EvictTier(0, 0.0), 0u);  // not dropped for a mere failure
  EXPECT_EQ(parts.StateOf("k"), ObjectState::kComplete);
  // With no node that has room, the object leaves the cluster.
  peers.error = ErrorCode::kNoAvailableHandle;
  EXPECT_GT(parts.mover.EvictTier(0, 0.0), 0u);
  EXPECT_EQ(parts.StateOf("k"), ObjectState::kRemoved);
  EXPECT_EQ(parts.ctx.counters.dropped.load(), 1u);
}

// The master refused the hand-over because the key is another node's (a
// hand-over whose outcome this node never learnt, say). The copy here is
// erased, as a drop whose release was refused is, and its space is free.
TEST(MoverTest, AHandOverTheMasterRefusesErasesTheCopyThatIsNotOurs) {
  BackendParts parts({1 * kMiB});
  FakePeers peers;
  peers.error = ErrorCode::kNotOwner;
  parts.ctx.peers = &peers;
  parts.AddComplete("k", std::string(100 * kKiB, 'x'), 0);
  EXPECT_EQ(parts.mover.EvictTier(0, 0.0), 100 * kKiB);
  EXPECT_EQ(parts.StateOf("k"), ObjectState::kRemoved);
  EXPECT_EQ(parts.ctx.tiers[0]->used(), 0u);
  EXPECT_EQ(parts.ctx.counters.dropped.load(), 0u);
  EXPECT_EQ(parts.mover.EvictTier(0, 0.0), 0u);
  EXPECT_EQ(peers.calls, 1) << "an erased copy is not sent again";
}

// A key the master does not know may be one a re-announcement (after the
// master restarted or forgot this node) has not reached yet: it is kept.
TEST(MoverTest, AKeyTheMasterDoesNotKnowIsKept) {
  BackendParts parts({1 * kMiB});
  FakePeers peers;
  peers.error = ErrorCode::kObjectNotFound;
  parts.ctx.peers = &peers;
  parts.AddComplete("k", "value", 0);
  auto moved = parts.mover.TransferOut("k", "", /*dram_only=*/false);
  ASSERT_FALSE(moved);
  EXPECT_EQ(moved.error(), ErrorCode::kObjectNotFound);
  EXPECT_EQ(parts.StateOf("k"), ObjectState::kComplete);
  EXPECT_EQ(parts.Read("k"), "value");
}

TEST(MoverTest, OnlyIdleOwnedUnpinnedObjectsAreHandedOver) {
  BackendParts parts({1 * kMiB});
  FakePeers peers;
  parts.ctx.peers = &peers;
  parts.AddComplete("pinned", "p", 0, {.hard_pin = true});
  parts.AddComplete("moving", "m", 0);
  parts.With("moving", [&](Object& o) { parts.table.SetMove(o, MoveState::kCopying); });
  parts.AddComplete("removing", "r", 0);
  parts.With("removing", [&](Object& o) { parts.table.SetState(o, ObjectState::kRemoving); });
  // Evictions leave leased and read objects too.
  parts.AddComplete("leased", "l", 0);
  parts.With("leased",
             [](Object& o) { o.lease_until = SteadyClock::now() + std::chrono::hours(1); });
  parts.AddComplete("read", "d", 0);
  parts.With("read", [](Object& o) { o.readers = 1; });
  for (const char* key : {"pinned", "moving", "removing", "leased", "read"}) {
    auto moved = parts.mover.TransferOut(key, "", false);
    ASSERT_FALSE(moved) << key;
    EXPECT_EQ(moved.error(), ErrorCode::kObjectReplicaBusy) << key;
  }
  EXPECT_EQ(parts.mover.TransferOut("absent", "", false).error(), ErrorCode::kObjectNotFound);
  EXPECT_EQ(peers.calls, 0);
  // A prefetch for a client on another node moves a leased object to it.
  EXPECT_TRUE(parts.mover.TransferOut("leased", "node-c", /*dram_only=*/true));
  EXPECT_EQ(peers.last_target, "node-c");
}

// An adopted record as PutEnd leaves it: complete, unowned, awaiting
// confirmation.
void AddAdopted(BackendParts& parts, const std::string& key) {
  std::lock_guard lock(parts.ctx.mu);
  Object object;
  object.id = parts.table.NextObjectId();
  object.size = 1;
  uint64_t id = object.id;
  Object& o = parts.table.Emplace(key, std::move(object), ObjectState::kWriting, 0,
                                  /*published=*/false, SteadyClock::now());
  parts.table.SetState(o, ObjectState::kAdopted);
  o.adopted_at = SteadyClock::now();
  parts.mover.NoteAdoptedLocked(key, id, "");
}

TEST(MoverTest, AnAdoptedObjectBecomesOursWhenTheMasterNamesUs) {
  BackendParts parts({1 * kMiB}, NoConfirmDelay());
  AddAdopted(parts, "ours");
  AddAdopted(parts, "theirs");
  parts.directory.ClaimElsewhere("theirs");  // the sender's swap failed
  parts.mover.ConfirmAdoptedObjects();
  EXPECT_EQ(parts.StateOf("ours"), ObjectState::kComplete);
  parts.With("ours", [](Object& o) { EXPECT_TRUE(o.published()); });
  EXPECT_TRUE(parts.directory.Owns("ours"));
  EXPECT_EQ(parts.StateOf("theirs"), ObjectState::kRemoved);
}

// A registration between an adopted object's claim and its confirmation
// may have purged the claim and announced without the key (unpublished
// then): the object stays adopted, and the next pass claims it again.
TEST(MoverTest, AnAdoptedObjectClaimedJustBeforeARegistrationIsConfirmedAfterIt) {
  BackendParts parts({1 * kMiB}, NoConfirmDelay());
  AddAdopted(parts, "k");
  parts.directory.RegisterAfterNextClaim([&] {
    std::lock_guard lock(parts.ctx.mu);
    return parts.table.Keys();
  });
  parts.mover.ConfirmAdoptedObjects();
  EXPECT_EQ(parts.StateOf("k"), ObjectState::kAdopted);
  parts.mover.ConfirmAdoptedObjects();
  EXPECT_EQ(parts.StateOf("k"), ObjectState::kComplete);
  EXPECT_TRUE(parts.directory.Owns("k"));
}

// A claim the master refuses (its key table is full: it names no node) is
// tried kMaxConfirmRefusals times, then the copy goes: it is never left
// adopted for good, unevictable and unwritable.
TEST(MoverTest, AnAdoptedObjectTheMasterKeepsRefusingIsDroppedAfterAFewTries) {
  BackendParts parts({1 * kMiB}, NoConfirmDelay());
  AddAdopted(parts, "k");
  parts.directory.FailClaimsWith(ErrorCode::kNoAvailableHandle);
  for (int pass = 1; pass < Mover::kMaxConfirmRefusals; ++pass) {
    parts.mover.ConfirmAdoptedObjects();
    ASSERT_EQ(parts.StateOf("k"), ObjectState::kAdopted) << "pass " << pass;
  }
  parts.mover.ConfirmAdoptedObjects();
  EXPECT_EQ(parts.StateOf("k"), ObjectState::kRemoved);
  EXPECT_EQ(parts.directory.claims(), Mover::kMaxConfirmRefusals);
  parts.directory.FailClaimsWith(ErrorCode::kOk);
  parts.mover.ConfirmAdoptedObjects();
  EXPECT_EQ(parts.directory.claims(), Mover::kMaxConfirmRefusals) << "no longer queued";
  EXPECT_FALSE(parts.directory.Owns("k"));
}

// While the master cannot be reached the claim is retried, however long
// that takes, and confirmed once it answers.
TEST(MoverTest, AnAdoptedObjectIsConfirmedOnceTheMasterIsBack) {
  BackendParts parts({1 * kMiB}, NoConfirmDelay());
  AddAdopted(parts, "k");
  parts.directory.FailClaimsWith(ErrorCode::kRpcTimeout);
  for (int pass = 0; pass < 3 * Mover::kMaxConfirmRefusals; ++pass) {
    parts.mover.ConfirmAdoptedObjects();
  }
  EXPECT_EQ(parts.StateOf("k"), ObjectState::kAdopted);
  parts.directory.FailClaimsWith(ErrorCode::kOk);
  parts.mover.ConfirmAdoptedObjects();
  EXPECT_EQ(parts.StateOf("k"), ObjectState::kComplete);
  EXPECT_TRUE(parts.directory.Owns("k"));
}

TEST(MoverTest, AnAdoptedObjectWaitsForTheConfirmDelay) {
  BackendParts parts({1 * kMiB});  // 30 s delay
  AddAdopted(parts, "k");
  parts.mover.ConfirmAdoptedObjects();
  EXPECT_EQ(parts.StateOf("k"), ObjectState::kAdopted);
  EXPECT_FALSE(parts.directory.Owns("k"));
}

TEST(MoverTest, AdoptAbortDropsOnlyAdoptedCopies) {
  BackendParts parts({1 * kMiB});
  AddAdopted(parts, "adopted");
  parts.AddComplete("own", "own", 0);
  EXPECT_EQ(parts.mover.AdoptAbort("own").error(), ErrorCode::kInvalidParams);
  EXPECT_EQ(parts.mover.AdoptAbort("absent").error(), ErrorCode::kObjectNotFound);
  EXPECT_TRUE(parts.mover.AdoptAbort("adopted"));
  EXPECT_EQ(parts.StateOf("adopted"), ObjectState::kRemoved);
  EXPECT_EQ(parts.StateOf("own"), ObjectState::kComplete);
}

TEST(MoverTest, PromoteBringsAnObjectUpAndAPrefetchGoesToTheRequester) {
  BackendParts parts({1 * kMiB, 4 * kMiB});
  parts.AddComplete("up", "up", 1);
  parts.With("up", [](Object& o) { o.promotion_queued = true; });
  parts.mover.Promote({.key = "up"});
  EXPECT_EQ(parts.TierOf("up"), 0);
  parts.With("up", [](Object& o) { EXPECT_FALSE(o.promotion_queued); });

  FakePeers peers;
  parts.ctx.peers = &peers;
  parts.AddComplete("away", "away", 1);
  parts.mover.Promote({.key = "away", .requester_node = "client-node", .prefetch = true});
  EXPECT_EQ(parts.StateOf("away"), ObjectState::kRemoved);
  EXPECT_EQ(peers.last_target, "client-node");
  EXPECT_TRUE(peers.last_dram_only);
  EXPECT_EQ(parts.ctx.counters.prefetch_succeeded.load(), 1u);
  parts.mover.Promote({.key = "gone", .prefetch = true});
  EXPECT_EQ(parts.ctx.counters.prefetch_failed.load(), 1u);
}

// A promotion may push colder objects down a tier, never out of the node:
// the DRAM victim it demotes must not, in turn, push an SSD object out.
TEST(MoverTest, APromotionNeverDropsAnotherKeyToMakeRoom) {
  BackendParts parts({1 * kMiB, 1 * kMiB});
  parts.AddComplete("a", std::string(512 * kKiB, 'a'), 0);
  parts.AddComplete("b", std::string(512 * kKiB, 'b'), 0);
  parts.AddComplete("c", std::string(512 * kKiB, 'c'), 1);
  parts.AddComplete("d", std::string(512 * kKiB, 'd'), 1);
  parts.mover.Promote({.key = "c"});
  EXPECT_EQ(parts.ctx.counters.dropped.load(), 0u);
  for (const char* key : {"a", "b", "c", "d"}) {
    EXPECT_EQ(parts.StateOf(key), ObjectState::kComplete) << key;
    EXPECT_TRUE(parts.directory.Owns(key)) << key;
  }
  EXPECT_EQ(parts.Read("d"), std::string(512 * kKiB, 'd'));
}

// A prefetch queued before its key was rewritten into the top tier still
// ends counted.
TEST(MoverTest, APrefetchOfAnObjectAlreadyOnTopIsCountedAsDone) {
  BackendParts parts({1 * kMiB, 4 * kMiB});
  parts.AddComplete("top", "top", 0);
  parts.mover.Promote({.key = "top", .prefetch = true});
  EXPECT_EQ(
      parts.ctx.counters.prefetch_succeeded.load() + parts.ctx.counters.prefetch_failed.load(), 1u);
}

// With every object leased, a demotion pass scans the tier's whole recency
// order under the lock and moves nothing. Such a pass is not started again
// by every put (each publish signals the maintenance thread while a tier is
// above its high watermark): the periodic pass retries it. Once one comes
// through, puts start passes again.
TEST(MoverTest, APassThatFoundNoVictimIsNotRestartedByEveryPut) {
  BackendOptions options;
  options.high_watermark = 0.5;
  options.low_watermark = 0.2;
  BackendParts parts({1 * kMiB, 4 * kMiB}, options);
  for (const char* key : {"a", "b", "c"}) {
    parts.AddComplete(key, std::string(250 * kKiB, 'x'), 0);
    parts.With(key, [](Object& o) { o.lease_until = SteadyClock::now() + std::chrono::hours(1); });
  }
  parts.mover.DemoteAboveWatermarks();
  EXPECT_TRUE(parts.mover.AnyTierAboveHighWatermark());
  {
    std::lock_guard lock(parts.ctx.mu);
    EXPECT_FALSE(parts.mover.DemotionDueLocked());
  }
  ASSERT_TRUE(parts.writer.WriteWhole("new", "v", {}, WriteMode::kCreate));
  auto start = SteadyClock::now();
  parts.work.Wait(Millis{50});  // returns at once if the put signalled
  EXPECT_GE(SteadyClock::now() - start, std::chrono::milliseconds(50));

  for (const char* key : {"a", "b", "c"}) {
    parts.With(key, [](Object& o) { o.lease_until = SteadyClock::time_point{}; });
  }
  parts.mover.DemoteAboveWatermarks();  // the periodic pass
  EXPECT_FALSE(parts.mover.AnyTierAboveHighWatermark());
  parts.AddComplete("d", std::string(600 * kKiB, 'x'), 0);
  std::lock_guard lock(parts.ctx.mu);
  EXPECT_TRUE(parts.mover.DemotionDueLocked());
}

TEST(MoverTest, DemotionAboveTheHighWatermarkGoesDownToTheLowOne) {
  BackendOptions options;
  options.high_watermark = 0.5;
  options.low_watermark = 0.2;
  BackendParts parts({1 * kMiB, 4 * kMiB}, options);
  for (const char* key : {"a", "b", "c"}) parts.AddComplete(key, std::string(250 * kKiB, 'x'), 0);
  EXPECT_TRUE(parts.mover.AnyTierAboveHighWatermark());
  parts.mover.DemoteAboveWatermarks();
  EXPECT_FALSE(parts.mover.AnyTierAboveHighWatermark());
  EXPECT_LE(parts.ctx.tiers[0]->used(), 200 * kKiB);
  for (const char* key : {"a", "b", "c"}) EXPECT_EQ(parts.TierOf(key), 1) << key;
}

}  // namespace
}  // namespace mooncake
