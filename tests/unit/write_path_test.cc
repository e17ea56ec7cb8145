// The WritePath on its own (worker/write_path.h): two-phase writes, upserts
// in place and pre-emption, adoption, plan-based writes, the discard of
// abandoned writes and the quarantine, driven directly over DRAM tiers.

#include "worker/write_path.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <thread>

#include "tests/test_bytes.h"
#include "tests/unit/backend_parts.h"

namespace mooncake {
namespace {

constexpr uint64_t kKiB = 1024;
constexpr uint64_t kMiB = 1024 * kKiB;

using testing::BackendParts;
using testing::Pattern;

BackendOptions DiscardAtOnce() {
  BackendOptions options;
  options.put_start_discard_timeout = Millis{0};
  return options;
}

Result<uint64_t> StartPut(BackendParts& parts, const std::string& key, uint64_t size,
                          WriteMode mode = WriteMode::kCreate) {
  return parts.writer.Start(key, size, {}, mode, /*adopted=*/{}, /*direct=*/false);
}

uint64_t VersionOf(BackendParts& parts, const std::string& key) {
  uint64_t version = 0;
  parts.With(key, [&](Object& o) { version = o.version; });
  return version;
}

TEST(WritePathTest, PutStartReservesTheKeyAndPutEndPublishesIt) {
  BackendParts parts({1 * kMiB, 4 * kMiB});
  auto handle = StartPut(parts, "k", 5);
  ASSERT_TRUE(handle);
  EXPECT_EQ(parts.StateOf("k"), ObjectState::kWriting);
  EXPECT_EQ(StartPut(parts, "k", 5).error(), ErrorCode::kObjectAlreadyExists);
  auto target = parts.writer.Target(*handle);
  ASSERT_TRUE(target);
  EXPECT_EQ(target->tier_name, "t0");
  EXPECT_EQ(parts.writer.End(*handle).error(), ErrorCode::kInvalidParams);  // bytes missing
  ASSERT_TRUE(parts.writer.Chunk(*handle, 0, "hello"));
  EXPECT_EQ(parts.writer.Chunk(*handle, 3, "toolong").error(), ErrorCode::kInvalidParams);
  ASSERT_TRUE(parts.writer.End(*handle));
  EXPECT_EQ(parts.StateOf("k"), ObjectState::kComplete);
  parts.With("k", [](Object& o) { EXPECT_TRUE(o.published()); });
  EXPECT_TRUE(parts.directory.Owns("k"));
  EXPECT_EQ(parts.Read("k"), "hello");
  EXPECT_EQ(parts.ctx.counters.puts.load(), 1u);
  EXPECT_EQ(parts.writer.End(*handle).error(), ErrorCode::kIllegalClient);  // done already
}

// A chunk sent twice adds up to the size but leaves a hole: publishing it
// would serve what the arena held there, another key's freed bytes.
TEST(WritePathTest, AWriteCommitsOnlyOnceEveryByteWasWritten) {
  BackendParts parts({1 * kMiB});
  auto handle = StartPut(parts, "h", 10);
  ASSERT_TRUE(handle);
  ASSERT_TRUE(parts.writer.Chunk(*handle, 0, "01234"));
  ASSERT_TRUE(parts.writer.Chunk(*handle, 0, "01234"));
  EXPECT_EQ(parts.writer.End(*handle).error(), ErrorCode::kInvalidParams);
  EXPECT_EQ(parts.StateOf("h"), ObjectState::kWriting);  // the rest may still come
  // Out of order and overlapping is fine once every byte is there.
  ASSERT_TRUE(parts.writer.Chunk(*handle, 7, "789"));
  ASSERT_TRUE(parts.writer.Chunk(*handle, 4, "456"));
  ASSERT_TRUE(parts.writer.End(*handle));
  EXPECT_EQ(parts.Read("h"), "0123456789");
}

// Scattered one-byte chunks are refused past a bound, so a write cannot
// make the worker keep a record of each of millions of ranges.
TEST(WritePathTest, AWriteScatteredPastTheBoundIsRefused) {
  BackendParts parts({1 * kMiB});
  auto handle = StartPut(parts, "k", 1000);
  ASSERT_TRUE(handle);
  for (uint64_t i = 0; i < WrittenRanges::kMaxRanges; ++i) {
    ASSERT_TRUE(parts.writer.Chunk(*handle, 2 * i, "x")) << i;
  }
  EXPECT_EQ(parts.writer.Chunk(*handle, 2 * WrittenRanges::kMaxRanges, "x").error(),
            ErrorCode::kInvalidParams);
  // A chunk that joins ranges is still taken, and filling every gap commits.
  ASSERT_TRUE(parts.writer.Chunk(*handle, 1, "y"));
  ASSERT_TRUE(parts.writer.Chunk(*handle, 0, std::string(1000, 'z')));
  ASSERT_TRUE(parts.writer.End(*handle));
  EXPECT_EQ(parts.Read("k"), std::string(1000, 'z'));
}

TEST(WritePathTest, RevokeErasesTheRecordAndFreesTheSpace) {
  BackendParts parts({1 * kMiB});
  auto handle = StartPut(parts, "k", 100 * kKiB);
  ASSERT_TRUE(handle);
  EXPECT_GT(parts.ctx.tiers[0]->used(), 0u);
  ASSERT_TRUE(parts.writer.Revoke(*handle));
  EXPECT_EQ(parts.StateOf("k"), ObjectState::kRemoved);
  EXPECT_EQ(parts.ctx.tiers[0]->used(), 0u);
  EXPECT_EQ(parts.writer.Revoke(*handle).error(), ErrorCode::kIllegalClient);
}

// A placed put: the caller (the worker's RPC) receives the value from its
// socket straight into the space StartPlaced gives.
void Place(const PlacedWrite& placed, const std::string& value) {
  ASSERT_EQ(placed.bytes.size(), value.size());
  std::memcpy(placed.bytes.data(), value.data(), value.size());
}

TEST(WritePathTest, APlacedPutPublishesTheBytesItsCallerPutInItsSpace) {
  BackendParts parts({1 * kMiB});
  const std::string value = Pattern(100 * kKiB, 1);
  auto placed = parts.writer.StartPlaced("k", value.size(), {});
  ASSERT_TRUE(placed);
  EXPECT_EQ(parts.StateOf("k"), ObjectState::kWriting);
  EXPECT_EQ(parts.writer.StartPlaced("k", 5, {}).error(), ErrorCode::kObjectAlreadyExists);
  EXPECT_FALSE(parts.directory.Owns("k")) << "claimed only once the bytes are in";
  Place(*placed, value);
  ASSERT_TRUE(parts.writer.EndPlaced(placed->handle));
  EXPECT_EQ(parts.StateOf("k"), ObjectState::kComplete);
  EXPECT_TRUE(parts.directory.Owns("k"));
  EXPECT_EQ(parts.Read("k"), value);
  EXPECT_EQ(parts.ctx.counters.puts.load(), 1u);
  EXPECT_EQ(parts.ctx.CountersOf(parts.ctx.tiers[0].get()).written_bytes.load(), value.size());
  EXPECT_EQ(parts.writer.EndPlaced(placed->handle).error(), ErrorCode::kIllegalClient);
  EXPECT_EQ(parts.writer.StartPlaced("k", 5, {}).error(), ErrorCode::kObjectAlreadyExists);
}

TEST(WritePathTest, ARevokedPlacedPutFreesTheKeyAndItsSpaceOnceTheReceiverLetsGo) {
  BackendParts parts({1 * kMiB});
  auto placed = parts.writer.StartPlaced("k", 100 * kKiB, {});
  ASSERT_TRUE(placed);
  ASSERT_TRUE(parts.writer.Revoke(placed->handle));  // the value did not all come
  EXPECT_EQ(parts.StateOf("k"), ObjectState::kRemoved);
  EXPECT_FALSE(parts.directory.Owns("k"));
  // The receiver may still be writing into the space: it stays allocated
  // until the receiver lets go of it.
  EXPECT_GT(parts.ctx.tiers[0]->used(), 0u);
  placed->hold.reset();
  EXPECT_EQ(parts.ctx.tiers[0]->used(), 0u);
  ASSERT_TRUE(parts.writer.WriteWhole("k", "later", {}, WriteMode::kCreate));
  EXPECT_EQ(parts.Read("k"), "later");
}

TEST(WritePathTest, AnUpsertPreemptsAPlacedPutWhoseBytesAreStillComing) {
  BackendParts parts({1 * kMiB});
  const std::string value = Pattern(64 * kKiB, 2);
  auto placed = parts.writer.StartPlaced("k", value.size(), {});
  ASSERT_TRUE(placed);
  ASSERT_TRUE(parts.writer.WriteWhole("k", "upsrt", {}, WriteMode::kUpsert));
  Place(*placed, value);  // still its own space: nobody else's bytes change
  EXPECT_EQ(parts.writer.EndPlaced(placed->handle).error(), ErrorCode::kIllegalClient);
  EXPECT_EQ(parts.Read("k"), "upsrt");
}

TEST(WritePathTest, APlacedPutIsOnlyForSpaceInHostMemory) {
  BackendParts parts({1 * kMiB});
  ObjectOptions beyond;
  beyond.preferred_tier = 3;  // no such tier: nothing is reserved
  EXPECT_EQ(parts.writer.StartPlaced("k", 5, beyond).error(), ErrorCode::kTierNotFound);
  EXPECT_EQ(parts.StateOf("k"), ObjectState::kRemoved);
  EXPECT_EQ(parts.writer.StartPlaced("", 5, {}).error(), ErrorCode::kInvalidKey);
  EXPECT_EQ(parts.writer.StartPlaced("k", 0, {}).error(), ErrorCode::kInvalidParams);
  EXPECT_EQ(parts.writer.StartPlaced("k", 2 * kMiB, {}).error(), ErrorCode::kNoAvailableHandle);
}

TEST(WritePathTest, AnUpsertOfTheSameSizeRewritesInPlaceWithAHigherVersion) {
  BackendParts parts({1 * kMiB});
  ASSERT_TRUE(parts.writer.WriteWhole("k", "first", {}, WriteMode::kCreate));
  uint64_t offset = 0;
  parts.With("k", [&](Object& o) { offset = o.allocation->location.offset; });
  uint64_t version = VersionOf(parts, "k");
  ASSERT_TRUE(parts.writer.WriteWhole("k", "again", {}, WriteMode::kUpsert));
  parts.With("k", [&](Object& o) { EXPECT_EQ(o.allocation->location.offset, offset); });
  EXPECT_GT(VersionOf(parts, "k"), version);
  EXPECT_EQ(parts.Read("k"), "again");
  EXPECT_EQ(parts.ctx.counters.upserts.load(), 1u);
  ASSERT_TRUE(parts.writer.WriteWhole("k", "a new size", {}, WriteMode::kUpsert));
  EXPECT_EQ(parts.Read("k"), "a new size");
  EXPECT_TRUE(parts.directory.Owns("k"));
}

TEST(WritePathTest, AnUpsertPreemptsAWriteInFlightAndRefusesABusyObject) {
  BackendParts parts({1 * kMiB});
  auto first = StartPut(parts, "k", 5);
  ASSERT_TRUE(first);
  ASSERT_TRUE(parts.writer.WriteWhole("k", "upsrt", {}, WriteMode::kUpsert));
  EXPECT_EQ(parts.writer.Chunk(*first, 0, "first").error(), ErrorCode::kIllegalClient);
  EXPECT_EQ(parts.writer.End(*first).error(), ErrorCode::kIllegalClient);
  EXPECT_EQ(parts.Read("k"), "upsrt");

  parts.With("k", [](Object& o) { o.readers++; });
  EXPECT_EQ(parts.writer.WriteWhole("k", "again", {}, WriteMode::kUpsert).error(),
            ErrorCode::kObjectReplicaBusy);
  parts.With("k", [&](Object& o) {
    o.readers--;
    parts.table.SetState(o, ObjectState::kRemoving);
  });
  EXPECT_EQ(parts.writer.WriteWhole("k", "again", {}, WriteMode::kUpsert).error(),
            ErrorCode::kObjectReplicaBusy);
}

TEST(WritePathTest, AnUpsertOfAKeyHandedToAnotherNodeIsNotOurs) {
  BackendParts parts({1 * kMiB});
  testing::FakePeers peers;
  parts.ctx.peers = &peers;
  ASSERT_TRUE(parts.writer.WriteWhole("k", "v", {}, WriteMode::kCreate));
  ASSERT_TRUE(parts.mover.TransferOut("k", "node-b", /*dram_only=*/false));
  parts.directory.ClaimElsewhere("k");  // the master names node-b now
  EXPECT_EQ(parts.writer.WriteWhole("k", "w", {}, WriteMode::kUpsert).error(),
            ErrorCode::kNotOwner);
  EXPECT_EQ(parts.StateOf("k"), ObjectState::kRemoved);
}

// The node it was handed to lost the key since (removed, dropped): an upsert
// here creates it, as on any node.
TEST(WritePathTest, AnUpsertOfAKeyHandedAwayAndGoneThereCreatesIt) {
  BackendParts parts({1 * kMiB});
  testing::FakePeers peers;
  parts.ctx.peers = &peers;
  ASSERT_TRUE(parts.writer.WriteWhole("k", "v", {}, WriteMode::kCreate));
  ASSERT_TRUE(parts.mover.TransferOut("k", "node-b", /*dram_only=*/false));
  ASSERT_TRUE(parts.directory.Release("k"));  // no node owns it now
  EXPECT_TRUE(parts.writer.WriteWhole("k", "w", {}, WriteMode::kUpsert));
  EXPECT_EQ(parts.Read("k"), "w");
  EXPECT_TRUE(parts.directory.Owns("k"));
  std::lock_guard lock(parts.ctx.mu);
  EXPECT_FALSE(parts.mover.MovedAwayLocked("k"));
}

TEST(WritePathTest, AnAdoptedWriteEndsCompleteButUnownedWithTheSendersVersion) {
  BackendParts parts({1 * kMiB});
  auto handle = parts.writer.Start("k", 3, {}, WriteMode::kAdopt, {.version = 77}, false);
  ASSERT_TRUE(handle);
  ASSERT_TRUE(parts.writer.Chunk(*handle, 0, "abc"));
  ASSERT_TRUE(parts.writer.CommitDirect(*handle, ""));
  EXPECT_EQ(parts.StateOf("k"), ObjectState::kAdopted);
  parts.With("k", [](Object& o) {
    EXPECT_FALSE(o.published());
    EXPECT_EQ(o.version, 77u);
  });
  EXPECT_FALSE(parts.directory.Owns("k"));
  EXPECT_EQ(parts.ctx.counters.moved_in.load(), 1u);
  std::lock_guard lock(parts.ctx.mu);
  EXPECT_GT(parts.table.NextVersion(), 77u);
}

TEST(WritePathTest, ALostClaimLeavesNothingBehind) {
  BackendParts parts({1 * kMiB});
  parts.directory.ClaimElsewhere("k");
  EXPECT_EQ(parts.writer.WriteWhole("k", "v", {}, WriteMode::kCreate).error(),
            ErrorCode::kObjectAlreadyExists);
  EXPECT_EQ(parts.StateOf("k"), ObjectState::kRemoved);
  EXPECT_EQ(parts.ctx.tiers[0]->used(), 0u);
}

// ---- Puts answered when their claim returns (TryWriteWholeAsync) ----

// The result a put's continuation got, once it ran.
struct AsyncOutcome {
  std::optional<Result<void>> result;
  int runs = 0;
  std::function<void(Result<void>)> Done() {
    return [this](Result<void> r) {
      result = std::move(r);
      ++runs;
    };
  }
};

TEST(WritePathTest, AnAsyncPutIsCompleteBeforeItsClaimAndPublishedWhenTheClaimReturns) {
  BackendParts parts({1 * kMiB, 4 * kMiB});
  parts.directory.HoldAsyncClaims();
  AsyncOutcome outcome;
  ASSERT_TRUE(parts.writer.TryWriteWholeAsync("k", "hello", {}, outcome.Done()));
  // The bytes are in and committed; the claim is on the wire.
  EXPECT_EQ(outcome.runs, 0);
  EXPECT_EQ(parts.directory.held_claims(), 1u);
  EXPECT_EQ(parts.StateOf("k"), ObjectState::kComplete);
  parts.With("k", [](Object& o) { EXPECT_FALSE(o.published()); });
  EXPECT_EQ(parts.Read("k"), "hello");
  // A second put of the key meanwhile is refused at once, without a claim.
  AsyncOutcome second;
  ASSERT_TRUE(parts.writer.TryWriteWholeAsync("k", "other", {}, second.Done()));
  ASSERT_EQ(second.runs, 1);
  EXPECT_EQ(second.result->error(), ErrorCode::kObjectAlreadyExists);
  EXPECT_EQ(parts.directory.held_claims(), 1u);

  parts.directory.RunHeldClaims();
  ASSERT_EQ(outcome.runs, 1);
  EXPECT_TRUE(outcome.result->has_value());
  parts.With("k", [](Object& o) { EXPECT_TRUE(o.published()); });
  EXPECT_TRUE(parts.directory.Owns("k"));
  EXPECT_EQ(parts.ctx.counters.puts.load(), 1u);
  EXPECT_EQ(parts.Read("k"), "hello");
}

TEST(WritePathTest, AnAsyncPutWhoseClaimIsLostLeavesNothingBehind) {
  BackendParts parts({1 * kMiB});
  parts.directory.HoldAsyncClaims();
  AsyncOutcome outcome;
  ASSERT_TRUE(parts.writer.TryWriteWholeAsync("k", "v", {}, outcome.Done()));
  parts.directory.ClaimElsewhere("k");  // another node won the key meanwhile
  parts.directory.RunHeldClaims();
  ASSERT_EQ(outcome.runs, 1);
  EXPECT_EQ(outcome.result->error(), ErrorCode::kObjectAlreadyExists);
  EXPECT_EQ(parts.StateOf("k"), ObjectState::kRemoved);
  EXPECT_EQ(parts.ctx.tiers[0]->used(), 0u);
  EXPECT_EQ(parts.ctx.counters.puts.load(), 0u);
}

// What might wait on the calling thread is left to the blocking put, with
// nothing changed and the continuation not run.
TEST(WritePathTest, AnAsyncPutThatWouldWaitIsRefusedWithNothingChanged) {
  BackendParts parts({64 * kKiB, 4 * kMiB});
  parts.AddComplete("old", std::string(60 * kKiB, 'o'), 0);
  AsyncOutcome outcome;
  const std::string big(16 * kKiB, 'b');
  // No room in host memory without evicting "old".
  EXPECT_FALSE(parts.writer.TryWriteWholeAsync("k", big, {}, outcome.Done()));
  // A hard pin: its copy to the durable tier would wait.
  ObjectOptions pinned;
  pinned.hard_pin = true;
  EXPECT_FALSE(parts.writer.TryWriteWholeAsync("p", "v", pinned, outcome.Done()));
  EXPECT_EQ(outcome.runs, 0);
  EXPECT_EQ(parts.StateOf("k"), ObjectState::kRemoved);
  EXPECT_EQ(parts.StateOf("p"), ObjectState::kRemoved);
  EXPECT_EQ(parts.TierOf("old"), 0);  // nothing evicted
  EXPECT_EQ(parts.ctx.tiers[0]->used(), 60 * kKiB);
  // The blocking put makes room and succeeds.
  EXPECT_TRUE(parts.writer.WriteWhole("k", big, {}, WriteMode::kCreate));
  EXPECT_EQ(parts.Read("k"), big);
}

TEST(WritePathTest, AnAsyncPutOfABadKeyOrSizeFailsAtOnce) {
  BackendParts parts({1 * kMiB});
  AsyncOutcome empty_value;
  ASSERT_TRUE(parts.writer.TryWriteWholeAsync("k", "", {}, empty_value.Done()));
  ASSERT_EQ(empty_value.runs, 1);
  EXPECT_EQ(empty_value.result->error(), ErrorCode::kInvalidParams);
  AsyncOutcome too_large;
  ASSERT_TRUE(
      parts.writer.TryWriteWholeAsync("k", std::string(2 * kMiB, 'x'), {}, too_large.Done()));
  ASSERT_EQ(too_large.runs, 1);
  EXPECT_EQ(too_large.result->error(), ErrorCode::kNoAvailableHandle);
  EXPECT_EQ(parts.StateOf("k"), ObjectState::kRemoved);
}

TEST(WritePathTest, APlanGivesAShareableRegionAndCommitDirectPublishesIt) {
  BackendParts parts({1 * kMiB, 4 * kMiB});
  EXPECT_EQ(parts.writer.LastShareableTier(), 1);
  auto plan = parts.writer.OpenForWrite("k", 4, {}, WriteMode::kCreate);
  ASSERT_TRUE(plan);
  EXPECT_EQ(plan->target.tier, 0u);
  EXPECT_FALSE(plan->region.path.empty());
  // The producer writes the bytes itself.
  std::string value = "plan";
  ASSERT_TRUE(parts.ctx.tiers[0]->Write(plan->target.location, 0,
                                        std::as_bytes(std::span(value.data(), value.size()))));
  EXPECT_EQ(parts.writer.CommitDirect(plan->epoch, "other").error(), ErrorCode::kIllegalClient);
  ASSERT_TRUE(parts.writer.CommitDirect(plan->epoch, "k"));
  EXPECT_EQ(parts.Read("k"), "plan");
  EXPECT_EQ(parts.writer.OpenForWrite("a", 4, {}, WriteMode::kAdopt).error(),
            ErrorCode::kInvalidParams);
  // A write opened for chunks may not skip them.
  auto handle = StartPut(parts, "chunked", 4);
  ASSERT_TRUE(handle);
  EXPECT_EQ(parts.writer.CommitDirect(*handle, "chunked").error(), ErrorCode::kInvalidParams);
}

TEST(WritePathTest, AnAbandonedWriteIsDiscarded) {
  BackendParts parts({1 * kMiB}, DiscardAtOnce());
  auto handle = StartPut(parts, "k", 10);
  ASSERT_TRUE(handle);
  parts.writer.DiscardExpiredWrites();
  EXPECT_EQ(parts.StateOf("k"), ObjectState::kRemoved);
  EXPECT_EQ(parts.writer.Chunk(*handle, 0, "x").error(), ErrorCode::kIllegalClient);
  EXPECT_EQ(parts.ctx.tiers[0]->used(), 0u);  // written only through us: freed at once
}

TEST(WritePathTest, ADiscardedPlanKeepsItsSpaceQuarantinedUntilReleased) {
  BackendParts parts({1 * kMiB}, DiscardAtOnce());
  auto plan = parts.writer.OpenForWrite("k", 100 * kKiB, {}, WriteMode::kCreate);
  ASSERT_TRUE(plan);
  parts.writer.DiscardExpiredWrites();
  EXPECT_EQ(parts.StateOf("k"), ObjectState::kRemoved);
  EXPECT_GT(parts.ctx.tiers[0]->used(), 0u);  // a late producer may still write there
  parts.writer.ReleaseQuarantine();
  EXPECT_EQ(parts.ctx.tiers[0]->used(), 0u);
}

TEST(WritePathTest, ForgettingAPendingWriteFailsItsWriter) {
  BackendParts parts({1 * kMiB});
  auto handle = StartPut(parts, "k", 3);
  ASSERT_TRUE(handle);
  {
    std::lock_guard lock(parts.ctx.mu);
    parts.writer.ForgetLocked(*handle);
    parts.table.Erase(*parts.table.Find("k"));
  }
  EXPECT_EQ(parts.writer.Chunk(*handle, 0, "abc").error(), ErrorCode::kIllegalClient);
  EXPECT_EQ(parts.writer.Target(*handle).error(), ErrorCode::kIllegalClient);
}

// An upsert to another size gives its old value's space back before it looks
// for new space: held on, that space made the search evict others (or fail)
// for room the upsert itself was freeing. On one tier, with nothing to demote
// to, 200 + 500 KiB held and a 600 KiB upsert of the 500 KiB key fits once
// the old value goes: nothing else is dropped, and the hard-pinned key stays.
TEST(WritePathTest, AnUpsertToANewSizeFitsInTheSpaceItsOldValueLeaves) {
  BackendParts parts({1 * kMiB});
  const std::string other = Pattern(200 * kKiB, 1);
  ObjectOptions pinned;
  pinned.hard_pin = true;
  parts.AddComplete("other", other, 0);
  parts.AddComplete("k", Pattern(500 * kKiB, 2), 0, pinned);
  const std::string value = Pattern(600 * kKiB, 3);
  ASSERT_TRUE(parts.writer.WriteWhole("k", value, {}, WriteMode::kUpsert));
  EXPECT_EQ(parts.Read("k"), value);
  EXPECT_EQ(parts.Read("other"), other);
  EXPECT_TRUE(parts.directory.Owns("other"));
  EXPECT_TRUE(parts.directory.Owns("k"));
  EXPECT_EQ(parts.ctx.counters.dropped.load(), 0u);
  EXPECT_EQ(parts.ctx.tiers[0]->used(), 800 * kKiB);
  parts.With("k", [](Object& o) { EXPECT_TRUE(o.options.hard_pin); });
}

// The same for a two-phase upsert, with a slower tier to demote to: freeing
// first keeps both the new value and a colder object in the fast tier, where
// before the colder one was demoted and the new value landed below it.
TEST(WritePathTest, ATwoPhaseUpsertToANewSizeStaysInTheTierItsOldValueLeaves) {
  BackendParts parts({1 * kMiB, 4 * kMiB});
  parts.AddComplete("cold", Pattern(300 * kKiB, 1), 0);
  parts.AddComplete("k", Pattern(600 * kKiB, 2), 0);
  const std::string value = Pattern(650 * kKiB, 3);
  auto handle = StartPut(parts, "k", value.size(), WriteMode::kUpsert);
  ASSERT_TRUE(handle) << ToString(handle.error());
  for (uint64_t offset = 0; offset < value.size(); offset += kRpcChunkBytes) {
    ASSERT_TRUE(parts.writer.Chunk(*handle, offset,
                                   std::string_view(value).substr(offset, kRpcChunkBytes)));
  }
  ASSERT_TRUE(parts.writer.End(*handle));
  EXPECT_EQ(parts.Read("k"), value);
  EXPECT_EQ(parts.TierOf("k"), 0);
  EXPECT_EQ(parts.TierOf("cold"), 0);
  EXPECT_EQ(parts.ctx.tiers[1]->used(), 0u);
}

// Where the new size does not fit even without the old value, the upsert
// fails as documented for a failed upsert: the key is absent here and
// released at the master, and its old space is free.
TEST(WritePathTest, AnUpsertThatFindsNoSpaceLeavesTheKeyAbsentHereAndAtTheMaster) {
  BackendParts parts({1 * kMiB});
  ObjectOptions pinned;
  pinned.hard_pin = true;  // not a victim: nothing can make room
  parts.AddComplete("pinned", Pattern(600 * kKiB, 1), 0, pinned);
  parts.AddComplete("k", Pattern(300 * kKiB, 2), 0);
  auto upserted = parts.writer.WriteWhole("k", Pattern(500 * kKiB, 3), {}, WriteMode::kUpsert);
  ASSERT_FALSE(upserted);
  EXPECT_EQ(upserted.error(), ErrorCode::kNoAvailableHandle);
  EXPECT_EQ(parts.StateOf("k"), ObjectState::kRemoved);
  EXPECT_FALSE(parts.directory.Owns("k"));
  EXPECT_EQ(parts.ctx.tiers[0]->used(), 600 * kKiB);
  EXPECT_EQ(parts.Read("pinned"), Pattern(600 * kKiB, 1));
  // Nothing is left behind: the key can be put again.
  EXPECT_TRUE(parts.writer.WriteWhole("k", "again", {}, WriteMode::kCreate));
  EXPECT_TRUE(parts.directory.Owns("k"));
}

// A write's handle is live from its reserve on, while its Start looks for
// space without the lock (here: dropping a victim, its release held at the
// master). A client that names it meanwhile (handles were sequential once,
// and guessable) gets "not ready" from every call of a writer, instead of
// touching the space the write does not have yet (a null allocation: the
// worker crashed). The test reads the handle from the object's record.
TEST(WritePathTest, ACallForAWriteStillLookingForSpaceIsNotReadyNotACrash) {
  BackendParts parts({1 * kMiB}, DiscardAtOnce());
  parts.AddComplete("victim", Pattern(900 * kKiB, 1), 0);
  parts.directory.HoldReleases();  // FindSpace -> DropObject -> Release waits
  Result<DirectWritePlan> plan = Err(ErrorCode::kInternalError);
  std::thread writer(
      [&] { plan = parts.writer.OpenForWrite("new", 900 * kKiB, {}, WriteMode::kCreate); });
  ASSERT_TRUE(parts.directory.AwaitHeldReleases(1, std::chrono::seconds(10)));
  EXPECT_EQ(parts.StateOf("new"), ObjectState::kWriting);
  const uint64_t next = [&] {
    std::lock_guard lock(parts.ctx.mu);
    return parts.table.Find("new")->write_handle;
  }();
  EXPECT_EQ(parts.writer.Chunk(next, 0, "x").error(), ErrorCode::kReplicaIsNotReady);
  EXPECT_EQ(parts.writer.CommitDirect(next, "").error(), ErrorCode::kReplicaIsNotReady);
  EXPECT_EQ(parts.writer.CommitDirect(next, "new").error(), ErrorCode::kReplicaIsNotReady);
  EXPECT_EQ(parts.writer.EndPlaced(next).error(), ErrorCode::kReplicaIsNotReady);
  EXPECT_EQ(parts.writer.End(next).error(), ErrorCode::kReplicaIsNotReady);
  EXPECT_EQ(parts.writer.Revoke(next).error(), ErrorCode::kReplicaIsNotReady);
  EXPECT_EQ(parts.writer.Target(next).error(), ErrorCode::kReplicaIsNotReady);
  // Nor is it discarded as abandoned: its Start is still at work on it.
  parts.writer.DiscardExpiredWrites();
  EXPECT_EQ(parts.StateOf("new"), ObjectState::kWriting);
  parts.directory.LetReleasesGo();
  writer.join();
  // The write was left as it was: it gets its space and commits.
  ASSERT_TRUE(plan) << ToString(plan.error());
  EXPECT_EQ(plan->epoch, next);
  const std::string value = Pattern(900 * kKiB, 2);
  ASSERT_TRUE(parts.ctx.tiers[0]->Write(plan->target.location, 0,
                                        std::as_bytes(std::span(value.data(), value.size()))));
  ASSERT_TRUE(parts.writer.CommitDirect(next, "new"));
  EXPECT_EQ(parts.Read("new"), value);
  EXPECT_EQ(parts.StateOf("victim"), ObjectState::kRemoved);
}

// A write's handle lets whoever presents it write into that object, so no
// client may work out another's from its own: handles in a row are not
// neighbours, never repeat, and stay positive (the wire's i64). Before,
// they counted up by one from a clock value.
TEST(WritePathTest, WriteHandlesCannotBeWorkedOutFromOneAnother) {
  WriteHandles handles;
  std::set<uint64_t> seen;
  uint64_t previous = handles.Next();
  int neighbours = 0;
  for (int i = 0; i < 100000; ++i) {
    const uint64_t handle = handles.Next();
    ASSERT_GE(handle, 1u);
    ASSERT_LE(handle, uint64_t{INT64_MAX});
    ASSERT_TRUE(seen.insert(handle).second) << "repeated at " << i;
    const uint64_t gap = handle > previous ? handle - previous : previous - handle;
    if (gap < 1000000) ++neighbours;
    previous = handle;
  }
  EXPECT_LT(neighbours, 10);
  // Another process (another key) gives out other handles.
  WriteHandles other;
  EXPECT_NE(other.Next(), WriteHandles().Next());
  // Through the write path: two puts in a row.
  BackendParts parts({1 * kMiB});
  auto first = StartPut(parts, "a", 10);
  auto second = StartPut(parts, "b", 10);
  ASSERT_TRUE(first);
  ASSERT_TRUE(second);
  EXPECT_GT(*first > *second ? *first - *second : *second - *first, 1000000u);
}

}  // namespace
}  // namespace mooncake
