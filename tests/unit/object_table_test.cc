// The object state machine (every legal and illegal transition, as written
// in worker/object_table.h) and the ObjectTable on its own: LRU order,
// pinned bytes, readers and leases, victims, keys and versions.

#include "worker/object_table.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <string>

namespace mooncake {
namespace {

using S = ObjectState;
using M = MoveState;

constexpr std::array<S, kObjectStateCount> kStates = {S::kWriting,      S::kComplete, S::kAdopted,
                                                      S::kTransferring, S::kRemoving, S::kRemoved};
constexpr std::array<M, kMoveStateCount> kMoves = {M::kIdle, M::kCopying, M::kDropping};

// The lifecycle table of object_table.h, cell by cell: [from][to].
constexpr bool kLegal[kObjectStateCount][kObjectStateCount] = {
    //            Writing Complete Adopted Transf Removing Removed
    /* Writing */ {false, true, true, false, false, true},
    /* Complete */ {false, false, false, true, true, true},
    /* Adopted */ {false, true, false, false, false, true},
    /* Transf. */ {false, true, false, false, false, true},
    /* Removing */ {false, true, false, false, false, true},
    /* Removed */ {false, false, false, false, false, false},
};

TEST(ObjectStateMachineTest, EveryLifecycleTransitionIsLegalExactlyAsTheTableSays) {
  for (S from : kStates) {
    for (S to : kStates) {
      EXPECT_EQ(IsLegalTransition(from, to), kLegal[static_cast<int>(from)][static_cast<int>(to)])
          << StateName(from) << " -> " << StateName(to);
    }
  }
}

TEST(ObjectStateMachineTest, EveryMoverTransitionInEveryLifecycleState) {
  for (S state : kStates) {
    for (M from : kMoves) {
      for (M to : kMoves) {
        bool live = state != S::kRemoved;
        bool expected = false;
        if (from == M::kIdle && to == M::kCopying) {
          expected = state == S::kComplete || state == S::kAdopted || state == S::kRemoving;
        } else if (from == M::kIdle && to == M::kDropping) {
          expected = state == S::kComplete;
        } else if (from != M::kIdle && to == M::kIdle) {
          expected = live;
        }
        EXPECT_EQ(IsLegalMove(from, to, state), expected)
            << StateName(from) << " -> " << StateName(to) << " in " << StateName(state);
      }
    }
  }
}

TEST(ObjectStateMachineTest, CombinationsOfLifecycleMoverAndOwnership) {
  // Writing and Transferring never with a mover at work.
  for (M move : {M::kCopying, M::kDropping}) {
    for (bool published : {false, true}) {
      EXPECT_FALSE(IsLegalCombination(S::kWriting, move, published));
      EXPECT_FALSE(IsLegalCombination(S::kTransferring, move, published));
    }
  }
  EXPECT_TRUE(IsLegalCombination(S::kWriting, M::kIdle, false));
  EXPECT_TRUE(IsLegalCombination(S::kWriting, M::kIdle, true));  // an upsert of an owned key
  // A hand-over needs ownership; an adopted copy has none yet.
  EXPECT_TRUE(IsLegalCombination(S::kTransferring, M::kIdle, true));
  EXPECT_FALSE(IsLegalCombination(S::kTransferring, M::kIdle, false));
  EXPECT_TRUE(IsLegalCombination(S::kAdopted, M::kIdle, false));
  EXPECT_TRUE(IsLegalCombination(S::kAdopted, M::kCopying, false));
  EXPECT_FALSE(IsLegalCombination(S::kAdopted, M::kIdle, true));
  EXPECT_FALSE(IsLegalCombination(S::kAdopted, M::kDropping, false));
  // Complete or being removed: a mover may copy; dropping needs ownership.
  for (S state : {S::kComplete, S::kRemoving}) {
    EXPECT_TRUE(IsLegalCombination(state, M::kIdle, false));
    EXPECT_TRUE(IsLegalCombination(state, M::kCopying, false));
    EXPECT_TRUE(IsLegalCombination(state, M::kDropping, true));
    EXPECT_FALSE(IsLegalCombination(state, M::kDropping, false));
  }
}

TEST(ObjectStateMachineTest, StatesHaveNames) {
  EXPECT_EQ(StateName(S::kWriting), "writing");
  EXPECT_EQ(StateName(S::kComplete), "complete");
  EXPECT_EQ(StateName(S::kAdopted), "adopted");
  EXPECT_EQ(StateName(S::kTransferring), "transferring");
  EXPECT_EQ(StateName(S::kRemoving), "removing");
  EXPECT_EQ(StateName(S::kRemoved), "removed");
  EXPECT_EQ(StateName(M::kIdle), "idle");
  EXPECT_EQ(StateName(M::kCopying), "copying");
  EXPECT_EQ(StateName(M::kDropping), "dropping");
}

class ObjectTableTest : public ::testing::Test {
 protected:
  static constexpr Millis kLease{10000};

  Object& Add(const std::string& key, S state, size_t tier, uint64_t size = 100,
              ObjectOptions options = {}, bool published = true) {
    Object object;
    object.id = table_.NextObjectId();
    object.size = size;
    object.options = options;
    return table_.Emplace(key, std::move(object), state, tier, published, Tick());
  }
  // Strictly increasing access times, so LRU order is the order of calls.
  SteadyClock::time_point Tick() { return start_ + std::chrono::milliseconds(++ticks_); }

  std::vector<std::string> Victims(size_t tier, uint64_t bytes, bool soft = true) {
    return table_.PickVictims(tier, bytes, Tick(), soft);
  }

  ObjectTable table_{2};
  SteadyClock::time_point start_ = SteadyClock::now();
  int ticks_ = 0;
};

TEST_F(ObjectTableTest, EmplaceFindAndErase) {
  Object& a = Add("a", S::kComplete, 0);
  uint64_t id = a.id;
  EXPECT_EQ(a.key(), "a");
  EXPECT_EQ(a.state(), S::kComplete);
  EXPECT_EQ(a.move(), M::kIdle);
  EXPECT_TRUE(a.published());
  EXPECT_EQ(table_.Find("a"), &a);
  EXPECT_EQ(table_.FindSame("a", id), &a);
  EXPECT_EQ(table_.FindSame("a", id + 1), nullptr);
  EXPECT_EQ(table_.Find("b"), nullptr);
  table_.EraseIfSame("a", id + 1);
  EXPECT_TRUE(table_.Contains("a"));
  table_.EraseIfSame("a", id);
  EXPECT_FALSE(table_.Contains("a"));
  EXPECT_EQ(table_.size(), 0u);
  EXPECT_TRUE(Victims(0, 1000).empty());  // the LRU index forgot it too
}

// A key's copy lives in its record: the caller's string may go at once.
TEST_F(ObjectTableTest, ARecordKeepsItsOwnCopyOfTheKey) {
  std::string key(100, 'x');  // longer than any small-string buffer
  Object& object = Add(key, S::kComplete, 0);
  EXPECT_NE(object.key().data(), key.data());
  key.assign(100, 'y');
  EXPECT_EQ(object.key(), std::string(100, 'x'));
  EXPECT_EQ(table_.Find(std::string(100, 'x')), &object);
  EXPECT_EQ(table_.Keys(), std::vector<std::string>{std::string(100, 'x')});
}

// FindMany (a batch's lookups with their cache misses overlapped) answers
// each key as Find does, across many of its chunks of 16 keys.
TEST_F(ObjectTableTest, FindManyAnswersEachKeyAsFindDoes) {
  for (int i = 0; i < 300; i += 3) Add("k" + std::to_string(i), S::kComplete, 0);
  std::vector<std::string> keys;
  for (int i = 0; i < 150; ++i) keys.push_back("k" + std::to_string(i));
  std::vector<Object*> found(keys.size(), nullptr);
  table_.FindMany(keys, found);
  for (size_t i = 0; i < keys.size(); ++i) {
    EXPECT_EQ(found[i], table_.Find(keys[i])) << keys[i];
    EXPECT_EQ(found[i] != nullptr, i % 3 == 0) << keys[i];
  }
}

TEST_F(ObjectTableTest, EmplaceIfAbsentLeavesATakenKeyAlone) {
  Object& first = Add("k", S::kComplete, 0, 100);
  Object other;
  other.id = table_.NextObjectId();
  other.size = 999;
  EXPECT_EQ(table_.EmplaceIfAbsent("k", std::move(other), S::kWriting, 1, false, Tick()), nullptr);
  EXPECT_EQ(table_.Find("k"), &first);
  EXPECT_EQ(first.size, 100u);
  EXPECT_EQ(first.tier(), 0u);
  EXPECT_EQ(table_.size(), 1u);
  // A free key gets its record, indexed in its tier like Emplace's.
  Object fresh;
  fresh.id = table_.NextObjectId();
  fresh.size = 7;
  Object* added = table_.EmplaceIfAbsent("j", std::move(fresh), S::kComplete, 1, true, Tick());
  ASSERT_NE(added, nullptr);
  EXPECT_EQ(added->key(), "j");
  EXPECT_EQ(added->tier(), 1u);
  EXPECT_EQ(Victims(1, 1), std::vector<std::string>{"j"});
}

TEST_F(ObjectTableTest, ARefFindsItsRecordUntilItIsErased) {
  Object& a = Add("a", S::kComplete, 0);
  ObjectRef ref = table_.Ref(a);
  EXPECT_EQ(table_.Resolve(ref, "a"), &a);
  Add("b", S::kComplete, 0);
  table_.Erase(*table_.Find("b"));  // another erasure: the ref looks "a" up
  EXPECT_EQ(table_.Resolve(ref, "a"), &a);
  table_.Erase(a);
  Add("a", S::kComplete, 0);  // a new record under the same key is not it
  EXPECT_EQ(table_.Resolve(ref, "a"), nullptr);
}

TEST_F(ObjectTableTest, EveryLegalPathThroughTheLifecycle) {
  Object& put = Add("put", S::kWriting, 0, 100, {}, /*published=*/false);
  EXPECT_FALSE(put.complete());
  table_.SetState(put, S::kComplete);
  table_.MarkPublished(put);
  table_.SetState(put, S::kTransferring);
  EXPECT_TRUE(put.transferring());
  table_.SetState(put, S::kComplete);
  table_.SetState(put, S::kRemoving);
  EXPECT_TRUE(put.removing());
  table_.SetState(put, S::kComplete);
  table_.Erase(put);

  Object& adopted = Add("adopted", S::kWriting, 0, 100, {}, /*published=*/false);
  table_.SetState(adopted, S::kAdopted);
  EXPECT_TRUE(adopted.adopted());
  EXPECT_TRUE(adopted.complete());
  table_.SetMove(adopted, M::kCopying);  // an adopted copy may move up
  table_.SetState(adopted, S::kComplete);
  table_.MarkPublished(adopted);
  table_.SetMove(adopted, M::kIdle);
  table_.SetMove(adopted, M::kDropping);
  EXPECT_TRUE(adopted.moving());
  table_.SetState(adopted, S::kRemoving);  // Remove while a drop is announced
  table_.SetState(adopted, S::kComplete);
  table_.SetMove(adopted, M::kIdle);
  table_.Erase(adopted);
  EXPECT_EQ(table_.size(), 0u);
}

TEST_F(ObjectTableTest, IllegalTransitionsFailInDebugBuilds) {
  Object& writing = Add("w", S::kWriting, 0, 100, {}, /*published=*/false);
  EXPECT_DEBUG_DEATH(table_.SetState(writing, S::kTransferring), "MC_DCHECK");
  Object& writing2 = Add("w2", S::kWriting, 0, 100, {}, /*published=*/false);
  EXPECT_DEBUG_DEATH(table_.SetMove(writing2, M::kCopying), "MC_DCHECK");
  Object& adopted = Add("a", S::kWriting, 0, 100, {}, /*published=*/false);
  table_.SetState(adopted, S::kAdopted);
  EXPECT_DEBUG_DEATH(table_.SetState(adopted, S::kRemoving), "MC_DCHECK");
  Object& adopted2 = Add("a2", S::kWriting, 0, 100, {}, /*published=*/false);
  table_.SetState(adopted2, S::kAdopted);
  EXPECT_DEBUG_DEATH(table_.MarkPublished(adopted2), "MC_DCHECK");
  Object& complete = Add("c", S::kComplete, 0);
  table_.SetMove(complete, M::kCopying);
  EXPECT_DEBUG_DEATH(table_.SetState(complete, S::kTransferring), "MC_DCHECK");
  Object& complete2 = Add("c2", S::kComplete, 0);
  EXPECT_DEBUG_DEATH(table_.SetState(complete2, S::kWriting), "MC_DCHECK");
  Object& complete3 = Add("c3", S::kComplete, 0);
  EXPECT_DEBUG_DEATH(table_.SetMove(complete3, M::kIdle), "MC_DCHECK");
  Object& unowned = Add("u", S::kComplete, 0, 100, {}, /*published=*/false);
  EXPECT_DEBUG_DEATH(table_.SetMove(unowned, M::kDropping), "MC_DCHECK");
}

TEST_F(ObjectTableTest, VictimsComeLeastRecentlyUsedFirstAndTouchReorders) {
  Add("old", S::kComplete, 0);
  Add("mid", S::kComplete, 0);
  Add("new", S::kComplete, 0);
  Add("other-tier", S::kComplete, 1);
  EXPECT_EQ(Victims(0, 150), (std::vector<std::string>{"old", "mid"}));
  table_.Touch(*table_.Find("old"), Tick());
  EXPECT_EQ(Victims(0, 150), (std::vector<std::string>{"mid", "new"}));
  EXPECT_EQ(Victims(0, 1000), (std::vector<std::string>{"mid", "new", "old"}));
  EXPECT_EQ(Victims(1, 1000), (std::vector<std::string>{"other-tier"}));
}

// A touch only raises the record's last access; the victim scan refiles
// what it finds touched. The order must still be exact LRU.
TEST_F(ObjectTableTest, TouchesSeenOnlyByTheScanStillGiveExactLruOrder) {
  Add("a", S::kComplete, 0);
  Add("b", S::kComplete, 0);
  Add("c", S::kComplete, 0);
  table_.Touch(*table_.Find("b"), Tick());
  table_.Touch(*table_.Find("a"), Tick());
  EXPECT_EQ(Victims(0, 1000), (std::vector<std::string>{"c", "b", "a"}));
  // Touched again after that scan refiled them: the order follows.
  table_.Touch(*table_.Find("c"), Tick());
  EXPECT_EQ(Victims(0, 1000), (std::vector<std::string>{"b", "a", "c"}));
}

// A record touched before the next one was even filed still comes first:
// the scan must look at it at once, not skip past it.
TEST_F(ObjectTableTest, ARecordTouchedBeforeTheNextWasFiledIsStillTheFirstVictim) {
  Add("early", S::kComplete, 0);
  table_.Touch(*table_.Find("early"), Tick());
  Add("late", S::kComplete, 0);
  EXPECT_EQ(Victims(0, 100), (std::vector<std::string>{"early"}));
  EXPECT_EQ(Victims(0, 1000), (std::vector<std::string>{"early", "late"}));
}

// Recency never goes back: threads read the clock before the lock, so a
// touch may carry an older time than the last one.
TEST_F(ObjectTableTest, AnOlderTouchDoesNotMakeARecordLessRecent) {
  Add("x", S::kComplete, 0);
  auto earlier = Tick();
  Add("y", S::kComplete, 0);
  table_.Touch(*table_.Find("x"), Tick());
  table_.Touch(*table_.Find("x"), earlier);
  EXPECT_EQ(Victims(0, 100), (std::vector<std::string>{"y"}));
}

// Demoted to another tier, a record is filed there by its last access,
// touches included.
TEST_F(ObjectTableTest, SetTierFilesTheRecordByItsLastAccess) {
  Object& moved = Add("moved", S::kComplete, 0);
  Add("resident", S::kComplete, 1);
  table_.Touch(moved, Tick());
  Add("newer", S::kComplete, 1);
  table_.SetTier(moved, 1);
  EXPECT_EQ(Victims(1, 1000), (std::vector<std::string>{"resident", "moved", "newer"}));
}

TEST_F(ObjectTableTest, SetTierMovesTheLruEntryAndThePinnedBytes) {
  Object& pinned = Add("pinned", S::kComplete, 0, 300, {.hard_pin = true});
  Add("plain", S::kComplete, 0, 50);
  EXPECT_EQ(table_.pinned_bytes(), (std::vector<uint64_t>{300, 0}));
  table_.SetTier(pinned, 1);
  EXPECT_EQ(pinned.tier(), 1u);
  EXPECT_EQ(table_.pinned_bytes(), (std::vector<uint64_t>{0, 300}));
  Object& plain = *table_.Find("plain");
  table_.SetTier(plain, 1);
  EXPECT_EQ(Victims(1, 1000), (std::vector<std::string>{"plain"}));  // hard pins never
  EXPECT_TRUE(Victims(0, 1000).empty());
  table_.Erase(pinned);
  EXPECT_EQ(table_.pinned_bytes(), (std::vector<uint64_t>{0, 0}));
}

TEST_F(ObjectTableTest, OnlyIdleOwnedUnreadUnleasedObjectsAreVictims) {
  Add("writing", S::kWriting, 0);
  Add("unowned", S::kComplete, 0, 100, {}, /*published=*/false);
  table_.SetMove(Add("moving", S::kComplete, 0), M::kCopying);
  table_.SetState(Add("transferring", S::kComplete, 0), S::kTransferring);
  table_.SetState(Add("removing", S::kComplete, 0), S::kRemoving);
  Object& adopted = Add("adopted", S::kWriting, 0, 100, {}, /*published=*/false);
  table_.SetState(adopted, S::kAdopted);
  Object& read = Add("read", S::kComplete, 0);
  table_.BeginRead(read, start_ - std::chrono::hours(1), kLease);  // lease long gone
  Object& leased = Add("leased", S::kComplete, 0);
  table_.GrantLease(leased, SteadyClock::now() + std::chrono::hours(1), kLease);
  Add("victim", S::kComplete, 0);
  EXPECT_EQ(Victims(0, 10000), (std::vector<std::string>{"victim"}));
  table_.EndRead(read);
  EXPECT_FALSE(ObjectTable::IsLeased(read, SteadyClock::now()));
  EXPECT_TRUE(ObjectTable::IsLeased(leased, SteadyClock::now()));
  EXPECT_EQ(Victims(0, 10000), (std::vector<std::string>{"read", "victim"}));
}

TEST_F(ObjectTableTest, SoftPinnedObjectsComeAfterEveryUnpinnedOneAndOnlyIfAllowed) {
  Object& soft = Add("soft", S::kComplete, 0, 100, {.soft_pin = true});
  soft.soft_pin_until = SteadyClock::now() + std::chrono::hours(1);  // set as a commit does
  Add("plain", S::kComplete, 0);
  EXPECT_EQ(Victims(0, 150), (std::vector<std::string>{"plain", "soft"}));
  EXPECT_EQ(Victims(0, 50), (std::vector<std::string>{"plain"}));
  EXPECT_EQ(Victims(0, 150, /*soft=*/false), (std::vector<std::string>{"plain"}));
  table_.SetSoftPinUntil(soft, start_);  // expired: an ordinary object again, oldest first
  EXPECT_EQ(Victims(0, 150, /*soft=*/false), (std::vector<std::string>{"soft", "plain"}));
}

// A victim scan runs under the backend's lock on every put into a full tier
// and every demotion pass. With 500k hard-pinned objects at the front of the
// tier's LRU it stepped over all of them first: 38 ms a put, gets stalled
// for up to 276 ms. A hard-pinned record is never a victim, so no scan may
// look at it: picking one victim costs one victim, however many are pinned.
TEST_F(ObjectTableTest, AScanDoesNotStepOverHardPinnedRecords) {
  constexpr int kPinned = 10000;
  for (int i = 0; i < kPinned; ++i) {
    Add("pinned" + std::to_string(i), S::kComplete, 0, 100, {.hard_pin = true});
  }
  for (int i = 0; i < 3; ++i) Add("plain" + std::to_string(i), S::kComplete, 0);
  EXPECT_EQ(table_.pinned_bytes()[0], 100u * kPinned);
  for (int round = 0; round < 2; ++round) {  // each scan, not only the first
    const uint64_t before = table_.scan_visits();
    EXPECT_EQ(Victims(0, 100), std::vector<std::string>{"plain0"});
    EXPECT_LE(table_.scan_visits() - before, 2u);
  }
  // Nothing evictable at all: still no walk over the pinned ones.
  for (int i = 0; i < 3; ++i) table_.Erase(*table_.Find("plain" + std::to_string(i)));
  const uint64_t before = table_.scan_visits();
  EXPECT_TRUE(Victims(0, 1000).empty());
  EXPECT_EQ(table_.scan_visits() - before, 0u);
  EXPECT_EQ(table_.pinned_bytes()[0], 100u * kPinned);
}

// The same for soft pins: pass 0 (unpinned victims) does not look at them,
// whether the pin was set before the record entered the table (recovery)
// or after (a commit), and pass 1 looks only as far as its victims.
TEST_F(ObjectTableTest, PassZeroDoesNotStepOverSoftPinnedRecords) {
  constexpr int kPinned = 10000;
  const auto until = start_ + std::chrono::hours(1);
  for (int i = 0; i < kPinned / 2; ++i) {
    Object object;
    object.id = table_.NextObjectId();
    object.size = 100;
    object.options = {.soft_pin = true};
    object.soft_pin_until = until;  // as recovery sets it
    table_.Emplace("recovered" + std::to_string(i), std::move(object), S::kComplete, 0, true,
                   Tick());
  }
  for (int i = 0; i < kPinned / 2; ++i) {
    Object& object = Add("written" + std::to_string(i), S::kWriting, 0, 100, {.soft_pin = true});
    object.soft_pin_until = until;  // as a commit sets it
    table_.SetState(object, S::kComplete);
  }
  for (int i = 0; i < 3; ++i) Add("plain" + std::to_string(i), S::kComplete, 0);
  for (int round = 0; round < 2; ++round) {
    for (bool soft : {false, true}) {
      const uint64_t before = table_.scan_visits();
      EXPECT_EQ(Victims(0, 100, soft), std::vector<std::string>{"plain0"});
      EXPECT_LE(table_.scan_visits() - before, 2u);
    }
  }
  // No unpinned victim left: pass 1 takes the least recent soft pin.
  for (int i = 0; i < 3; ++i) table_.Erase(*table_.Find("plain" + std::to_string(i)));
  uint64_t before = table_.scan_visits();
  EXPECT_EQ(Victims(0, 100), std::vector<std::string>{"recovered0"});
  EXPECT_LE(table_.scan_visits() - before, 2u);
  before = table_.scan_visits();
  EXPECT_TRUE(Victims(0, 100, /*soft=*/false).empty());
  EXPECT_EQ(table_.scan_visits() - before, 0u);
}

// A soft pin ends by time alone: the scan after its end sees the object as
// an ordinary one, in LRU order among the unpinned, without being told.
TEST_F(ObjectTableTest, AnEndedSoftPinMakesTheObjectAnOrdinaryVictimInLruOrder) {
  Object& early = Add("ends-early", S::kWriting, 0, 100, {.soft_pin = true});
  early.soft_pin_until = start_ + std::chrono::milliseconds(50);
  table_.SetState(early, S::kComplete);
  Add("plain", S::kComplete, 0);
  Object& late = Add("ends-late", S::kWriting, 0, 100, {.soft_pin = true});
  late.soft_pin_until = start_ + std::chrono::hours(1);
  table_.SetState(late, S::kComplete);
  Add("newest", S::kComplete, 0);
  EXPECT_EQ(Victims(0, 1000, /*soft=*/false), (std::vector<std::string>{"plain", "newest"}));
  EXPECT_EQ(Victims(0, 1000),
            (std::vector<std::string>{"plain", "newest", "ends-early", "ends-late"}));
  while (ticks_ < 50) Tick();
  EXPECT_EQ(Victims(0, 1000, /*soft=*/false),
            (std::vector<std::string>{"ends-early", "plain", "newest"}));
  EXPECT_EQ(Victims(0, 1000),
            (std::vector<std::string>{"ends-early", "plain", "newest", "ends-late"}));
  // Demoted, a soft-pinned record keeps its pin; erased, it is forgotten.
  table_.SetTier(late, 1);
  EXPECT_EQ(Victims(1, 1000, /*soft=*/false), std::vector<std::string>{});
  EXPECT_EQ(Victims(1, 1000), std::vector<std::string>{"ends-late"});
  table_.Erase(late);
  EXPECT_TRUE(Victims(1, 1000).empty());
  EXPECT_EQ(Victims(0, 1000), (std::vector<std::string>{"ends-early", "plain", "newest"}));
}

TEST_F(ObjectTableTest, KeysListCompleteOwnedObjectsOnly) {
  Add("writing", S::kWriting, 0);
  Add("publishing", S::kComplete, 0, 100, {}, /*published=*/false);
  Add("owned", S::kComplete, 1);
  table_.SetState(Add("removing", S::kComplete, 0), S::kRemoving);
  auto keys = table_.Keys();
  std::sort(keys.begin(), keys.end());
  EXPECT_EQ(keys, (std::vector<std::string>{"owned", "removing"}));
}

// Each listing for an announcement is counted: a write that sees the count
// move knows a registration listed the keys without its record.
TEST_F(ObjectTableTest, EveryListingOfTheKeysIsCounted) {
  const uint64_t before = table_.listings();
  table_.Keys();
  table_.Keys();
  EXPECT_EQ(table_.listings(), before + 2);
}

TEST_F(ObjectTableTest, ObjectsOnTheirWayOutAreNotHeld) {
  EXPECT_FALSE(ObjectTable::IsHeld(Add("writing", S::kWriting, 0)));
  EXPECT_FALSE(ObjectTable::IsHeld(Add("publishing", S::kComplete, 0, 100, {}, false)));
  EXPECT_TRUE(ObjectTable::IsHeld(Add("owned", S::kComplete, 1)));
  Object& removing = Add("removing", S::kComplete, 0);
  table_.SetState(removing, S::kRemoving);
  EXPECT_FALSE(ObjectTable::IsHeld(removing));
  Object& dropping = Add("dropping", S::kComplete, 0);
  table_.SetMove(dropping, M::kDropping);
  EXPECT_FALSE(ObjectTable::IsHeld(dropping));
  // A drop the master refused keeps the object: held again.
  table_.SetMove(dropping, M::kIdle);
  EXPECT_TRUE(ObjectTable::IsHeld(dropping));
  Object& copying = Add("copying", S::kComplete, 0);
  table_.SetMove(copying, M::kCopying);
  EXPECT_TRUE(ObjectTable::IsHeld(copying));
}

TEST_F(ObjectTableTest, VersionsOnlyRise) {
  uint64_t first = table_.NextVersion();
  EXPECT_EQ(table_.NextVersion(), first + 1);
  table_.ObserveVersion(100);
  EXPECT_EQ(table_.NextVersion(), 101u);
  table_.ObserveVersion(5);  // an older version does not turn the clock back
  EXPECT_EQ(table_.NextVersion(), 102u);
  EXPECT_NE(table_.NextObjectId(), table_.NextObjectId());
}

}  // namespace
}  // namespace mooncake
