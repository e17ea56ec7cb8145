#pragma once

// ObjectTable: the worker's index of its own objects. It keeps the key ->
// object map, the per-tier LRU order of the objects that may become
// victims, the bytes of hard-pinned objects per tier, reader and lease
// accounting, and each object's lifecycle as an explicit state machine
// whose legal transitions are written down once, here, and checked
// (MC_DCHECK) on every change in debug builds.
//
// Object lifecycle (ObjectState). A record starts in kWriting (a pending
// write: Put, Upsert, Adopt, a plan) or kComplete (recovered from a durable
// tier) and ends in kRemoved (erased). An upsert never rewrites a record: it
// erases the old one and creates a new kWriting record, which for an
// in-place upsert (same size) takes over the old record's allocation.
//
//   from \ to      Writing Complete Adopted Transferring Removing Removed
//   (new record)      S       R        .          .          .        .
//   kWriting          .       P        A          .          .        E
//   kComplete         .       .        .          T          M        E
//   kAdopted          .       C        .          .          .        E
//   kTransferring     .       F        .          .          .        O
//   kRemoving         .       F        .          .          .        E
//   kRemoved          .       .        .          .          .        .
//
//   S  StartWrite reserves the key (Put, Upsert, Adopt, OpenForWrite)
//   R  Recover finds it in a durable tier
//   P  PutEnd/CommitDirect publishes a Put or Upsert (the directory claim
//      follows; `published` turns true once it succeeds)
//   A  PutEnd of an adopted object: complete but not yet ours
//   C  the master names this node as the adopted object's owner
//   T  TransferOut starts handing it to another node
//   M  Remove starts telling the master
//   F  the transfer or the master's release failed: nothing changed
//   O  the master named the new owner: the local copy goes
//   E  erased: revoked, pre-empted, replaced by an upsert, dropped, removed,
//      adopt aborted or refused, claim failed (allowed from every live state)
//   .  illegal
//
// Mover activity (MoveState) is a second, smaller machine on complete
// records, because a mover may work while the lifecycle changes under it:
//
//   kIdle     -> kCopying   MoveObject copies it to another tier; only in
//                           kComplete, kAdopted or kRemoving
//   kCopying  -> kIdle      the copy was switched in or abandoned
//   kIdle     -> kDropping  DropObject asks the master to forget it; only in
//                           kComplete with `published`
//   kDropping -> kIdle      the master refused: the data stays
//   (a record is erased in any MoveState; a mover then finds it gone)
//
// Legal combinations: kWriting and kTransferring only with kIdle (a mover
// never takes an object being written or handed over, and a hand-over never
// starts while a mover works); kAdopted never with kDropping. `published`
// (claimed in the directory) is false in kAdopted and true in kTransferring
// and kDropping; it only ever turns from false to true.
//
// Orthogonal to both machines are the holds, which keep a complete object in
// place but change no state: `readers` (a Get copying out), `lease_until`
// (Get, Exist, Locate), `placement_held_until` (Locate for a shareable tier),
// the pins in `options`, and `promotion_queued`.
//
// Thread-safety: none of its own. Every method must be called with the
// backend's mutex (BackendContext::mu) held.

#include <atomic>
#include <boost/intrusive/set.hpp>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "common/clock.h"
#include "tiers/cache_tier.h"
#include "worker/backend_types.h"
#include "worker/debug_check.h"
#include "worker/object_index.h"

namespace mooncake {

// Tier space held by an object, a pending write or an in-flight copy. The
// space returns to the tier when the last holder lets go.
struct Allocation {
  CacheTier* tier;
  TierLocation location;
  // Cleared at shutdown for committed objects, so a durable tier keeps them
  // for recovery instead of deleting them.
  std::atomic<bool> free_on_release{true};

  Allocation(CacheTier* t, TierLocation loc) : tier(t), location(loc) {}
  ~Allocation() {
    if (free_on_release.load()) tier->Free(location);
  }
};
using AllocationPtr = std::shared_ptr<Allocation>;

enum class ObjectState : uint8_t {
  kWriting,       // a pending write fills it; readers get kReplicaIsNotReady
  kComplete,      // readable; ours once `published`
  kAdopted,       // readable copy handed over by another node, not yet ours
  kTransferring,  // readable while it is handed to another node
  kRemoving,      // readable while Remove tells the master
  kRemoved,       // erased from the table (terminal)
};
inline constexpr int kObjectStateCount = 6;

enum class MoveState : uint8_t {
  kIdle,
  kCopying,   // a mover copies it to another tier
  kDropping,  // a mover asks the master to drop it from the cluster
};
inline constexpr int kMoveStateCount = 3;

std::string_view StateName(ObjectState state);
std::string_view StateName(MoveState state);

// The tables above, as code.
bool IsLegalTransition(ObjectState from, ObjectState to);
// A mover's transition while the lifecycle is in `state`.
bool IsLegalMove(MoveState from, MoveState to, ObjectState state);
// Whether a record may rest in this combination.
bool IsLegalCombination(ObjectState state, MoveState move, bool published);

// An object's place in its tier's recency order (ObjectTable's LRU index):
// a link inside the record itself, so the index costs no allocation of its
// own and a victim scan reads the records in place. 24 bytes (the colour
// bit rides in a pointer).
using LruHook =
    boost::intrusive::set_member_hook<boost::intrusive::link_mode<boost::intrusive::normal_link>,
                                      boost::intrusive::optimize_size<true>>;

struct Object {
  uint64_t id = 0;           // tells apart successive objects stored under one key
  AllocationPtr allocation;  // null while a write is still allocating
  // Write-through copy of a hard-pinned object in the durable tier.
  AllocationPtr durable_copy;
  uint64_t size = 0;
  // A reader on this node was told where the object lives (Locate): it is
  // not moved before this.
  SteadyClock::time_point placement_held_until;
  SteadyClock::time_point adopted_at;
  // Set before the record enters the table or raised later (a commit does);
  // ObjectTable notices a raise lazily. Lowered only through
  // ObjectTable::SetSoftPinUntil, or a victim scan may not see it expire.
  SteadyClock::time_point soft_pin_until;
  uint64_t write_handle = 0;  // the pending write, while kWriting
  uint64_t version = 0;
  // Fixed once the record is in the table (an upsert makes a new record):
  // the pins decide which recency index, if any, the record is filed in.
  ObjectOptions options;
  SteadyClock::time_point lease_until;
  // The small fields sit together, here and at the start of the private
  // part, so that a record (one per object, millions per node) has no holes.
  int32_t readers = 0;
  bool promotion_queued = false;

  ObjectState state() const { return state_; }
  MoveState move() const { return move_; }
  bool published() const { return published_; }
  size_t tier() const { return tier_; }
  SteadyClock::time_point last_access() const { return last_access_; }
  std::string_view key() const { return key_; }

  bool complete() const { return state_ != ObjectState::kWriting; }
  bool moving() const { return move_ != MoveState::kIdle; }
  bool transferring() const { return state_ == ObjectState::kTransferring; }
  bool removing() const { return state_ == ObjectState::kRemoving; }
  bool adopted() const { return state_ == ObjectState::kAdopted; }

 private:
  friend class ObjectTable;
  // Changed only through ObjectTable, which keeps the LRU index, the pinned
  // bytes and the state machine consistent with them.
  ObjectState state_ = ObjectState::kWriting;
  MoveState move_ = MoveState::kIdle;
  // One byte between them, so that the small fields fill eight bytes and
  // the record (one per object, its key's bytes right after it) stays at
  // 176.
  bool published_ : 1 = false;   // claimed in the directory
  bool soft_filed_ : 1 = false;  // filed in soft_lru_[tier_], not lru_[tier_]
  uint8_t tier_ : 6 = 0;         // an index into the backend's few tiers
  SteadyClock::time_point last_access_;
  // Where the record is filed in its recency index: its last access when it
  // was (re)filed, at most last_access_. A touch moves only last_access_;
  // the record is refiled when a victim scan reaches it (see PickVictims).
  SteadyClock::time_point filed_at_;
  std::string_view key_;  // the record's own copy of its key
  // Its link in lru_[tier_] or soft_lru_[tier_] (none if hard-pinned),
  // ordered by (filed_at_, id). Copying a record (before it is in the table)
  // copies no link.
  LruHook lru_hook_;
};

// A way back to one record after the lock was let go. The map never moves
// a record (a rehash keeps nodes in place), so while nothing was erased the
// pointer is still the record and no hash lookup (a few cache misses in a
// table of millions) is needed; after an erasure, ObjectTable::Resolve looks
// the key up and checks it is still the same object.
struct ObjectRef {
  Object* object = nullptr;
  uint64_t id = 0;        // the record's Object::id
  uint64_t erasures = 0;  // ObjectTable::erasures() when it was taken
};

class ObjectTable {
 public:
  explicit ObjectTable(size_t tiers);

  Object* Find(const std::string& key);
  const Object* Find(const std::string& key) const;
  // Find for each of `keys`, their cache misses overlapped: found[i]
  // answers keys[i] (found.size() must equal keys.size()).
  void FindMany(std::span<const std::string> keys, std::span<Object*> found);
  // The record of `key` if it is still the one with `object_id`.
  Object* FindSame(const std::string& key, uint64_t object_id);
  bool Contains(const std::string& key) const { return objects_.Find(key) != nullptr; }
  size_t size() const { return objects_.size(); }

  // Adds a new record in `state` (kWriting or kComplete), placed in `tier`.
  Object& Emplace(const std::string& key, Object object, ObjectState state, size_t tier,
                  bool published, SteadyClock::time_point last_access);
  // Emplace, unless `key` has a record already: then nothing changes and
  // the result is null. One hash lookup either way.
  Object* EmplaceIfAbsent(const std::string& key, Object object, ObjectState state, size_t tier,
                          bool published, SteadyClock::time_point last_access);
  // Erases the record (-> kRemoved); `object` dangles afterwards. Holders of
  // its allocation keep the space alive until they let go.
  void Erase(Object& object);
  void EraseIfSame(const std::string& key, uint64_t object_id);
  // How many records were erased so far. The map never moves a record (a
  // rehash keeps nodes in place), so a pointer to one stays valid for as
  // long as this count has not changed: a reader that let go of the lock
  // can find its record again without a lookup.
  uint64_t erasures() const { return erasures_; }
  ObjectRef Ref(Object& object) const { return {&object, object.id, erasures_}; }
  // The record `ref` was taken of, stored under `key`, or null if it was
  // erased (a new record under the same key is not it).
  Object* Resolve(const ObjectRef& ref, const std::string& key);

  void SetState(Object& object, ObjectState to);
  void SetMove(Object& object, MoveState to);
  void MarkPublished(Object& object);
  void SetTier(Object& object, size_t tier);
  void Touch(Object& object, SteadyClock::time_point now);
  // Sets the soft pin's end. A record in the table must use this to lower
  // it; a raise by assignment (as a commit does) is noticed by the scans.
  void SetSoftPinUntil(Object& object, SteadyClock::time_point until);

  // Reader and lease accounting. A read pins the object (readers) and
  // grants a lease; Exist and Locate grant the lease only.
  void BeginRead(Object& object, SteadyClock::time_point now, Millis lease);
  void EndRead(Object& object);
  void GrantLease(Object& object, SteadyClock::time_point now, Millis lease);
  static bool IsLeased(const Object& object, SteadyClock::time_point now);

  // Pass 0: unpinned objects; pass 1: soft-pinned ones (if allowed).
  // Objects being written, moved, handed over, removed, read, leased,
  // adopted or hard-pinned are never victims.
  static bool IsEvictable(const Object& object, SteadyClock::time_point now, int pass,
                          bool allow_evict_soft_pinned);
  // LRU victims of `tier` whose sizes add up to at least `bytes` (or all
  // that qualify): unpinned before soft-pinned, least recently used first.
  // Refiles the records it passes that were touched since they were filed.
  // It never looks at a hard-pinned record, nor at a soft-pinned one unless
  // it may evict soft-pinned objects (or the pin expired): the scan runs
  // under the backend's lock on every put into a full tier.
  std::vector<std::string> PickVictims(size_t tier, uint64_t bytes, SteadyClock::time_point now,
                                       bool allow_evict_soft_pinned);
  // How many records victim scans have looked at so far (each step of a
  // walk and each soft pin checked for expiry): what the scans cost, for
  // tests to assert on without timing them.
  uint64_t scan_visits() const { return scan_visits_; }

  // Keys of every complete, published object, for a registration to
  // announce: each call counts as one listing (listings()).
  std::vector<std::string> Keys();
  // How many times Keys() listed the keys to announce. A record being
  // written is not listed, so a write of a key owned here (an upsert) during
  // which this moved claims the key on commit: the registration that listed
  // may have purged it at the master (WritePath, PendingWrite::listings).
  uint64_t listings() const { return listings_; }
  // Whether the master should go on naming this node for `object`: complete
  // and published, and not on its way out. A remove or a drop waiting for
  // the master's answer is as good as gone: its release may already have
  // landed, so a registration must not leave the key at the master.
  static bool IsHeld(const Object& object);
  std::vector<uint64_t> pinned_bytes() const { return pinned_bytes_; }
  // At shutdown: committed objects stay in durable tiers for recovery.
  void KeepCommittedOnRelease();

  uint64_t NextObjectId() { return next_object_id_++; }
  uint64_t NextVersion() { return next_version_++; }
  // Versions only ever rise: the next one is past `version`.
  void ObserveVersion(uint64_t version);

 private:
  void Unindex(Object& object);
  void Index(Object& object);
  // Files `object` in its tier's recency index for soft-pinned records
  // (`soft`) or for the rest, by its last access.
  void File(Object& object, bool soft);
  // Refiles `object` under its last access if it was touched since it was
  // filed; true if it moved.
  bool RefileIfTouched(Object& object);
  // Moves `object`, filed in lru_ but soft-pinned now, to soft_lru_.
  void FileSoftPinned(Object& object);
  // Queues a check of `object`'s soft pin for when it ends.
  void ExpectSoftPinEnd(const Object& object, SteadyClock::time_point until);
  // Moves the soft-pinned records of `tier` whose pin ended by `now` to the
  // ordinary recency index, where pass 0 finds them.
  void UnpinExpired(size_t tier, SteadyClock::time_point now);
  // Rebuilds soft_ends_[tier] from soft_lru_[tier] once stale entries (of
  // records erased, moved or checked already) outnumber the live ones.
  void CompactSoftEnds(size_t tier);
  // One pass of PickVictims over its index (pass 0: lru_, 1: soft_lru_).
  void Scan(size_t tier, int pass, uint64_t bytes, SteadyClock::time_point now,
            bool allow_evict_soft_pinned, std::vector<std::string>& victims, uint64_t& freed);

  // Least recently filed first; ties (one clock tick) by age of the record.
  struct ByRecency {
    bool operator()(const Object& a, const Object& b) const {
      return std::tie(a.filed_at_, a.id) < std::tie(b.filed_at_, b.id);
    }
  };
  // Links the records themselves (Object::lru_hook_); it never allocates or
  // frees them, and its destructor does not touch them.
  using LruIndex = boost::intrusive::set<
      Object, boost::intrusive::member_hook<Object, LruHook, &Object::lru_hook_>,
      boost::intrusive::compare<ByRecency>, boost::intrusive::constant_time_size<false>>;

  // When a soft-pinned record's pin is due to end. It names the record by
  // its key's hash and id, not a pointer, so that an entry may outlive its
  // record (an erase leaves it, to be dropped when it comes due).
  struct SoftPinEnd {
    SteadyClock::time_point until;
    uint64_t key_hash;
    uint64_t id;
  };
  // For a min-heap: the earliest end on top.
  struct LaterEnd {
    bool operator()(const SoftPinEnd& a, const SoftPinEnd& b) const { return a.until > b.until; }
  };
  // The recency index `object` is filed in (it must not be hard-pinned).
  LruIndex& IndexOf(const Object& object);

  // An object and the key it is filed under, in one allocation (the key's
  // bytes right after the object, where a lookup's compare finds them near
  // the fields a read touches next) that never moves while it lives.
  class Record {
   public:
    // A record whose object.key() is its own copy of `key`.
    static Record* Create(std::string_view key, Object object);
    static void Destroy(Record* record);
    std::string_view key() const { return object.key_; }

    Object object;

   private:
    explicit Record(Object o) : object(std::move(o)) {}
  };
  ObjectIndex<Record> objects_;
  // Recency order of each tier's objects: least recently filed first.
  // Eviction walks it from the front, so choosing victims costs what it
  // picks, not the size of the node (a node holds millions of KV blocks).
  //
  // A read touches its record on every call, so the index is kept lazily:
  // a touch only raises last_access_, and the scan refiles a record it finds
  // touched. That order is still exactly least recently used first: a
  // record at the front that was not touched since it was filed has a last
  // access no later than any other record's filing time, which is itself no
  // later than that record's last access. A hot object costs one refile per
  // scan that reaches it instead of a tree erase and insert (with their
  // rebalancing, a tenth of the worker's CPU in a BatchGet profile) per
  // read.
  //
  // Only records that may become victims are filed. A hard-pinned record is
  // in no index (it is never a victim), and a soft-pinned one is in
  // soft_lru_, walked only by the pass that may evict it: a scan that had to
  // step over every pinned record (hundreds of thousands: pinned prompts and
  // KV prefixes) before its first victim stalled puts and gets for tens to
  // hundreds of milliseconds.
  //
  // A soft pin ends by time, so each soft-pinned record has an entry in
  // soft_ends_, a min-heap on the pin's end; a scan first moves the records
  // whose pin ended to lru_. A write's record is filed in lru_ (its pin is
  // set at commit) and moved to soft_lru_ when SetState commits it; one
  // whose pin was raised otherwise is moved when pass 0 meets it. An entry
  // whose record is gone, moved or pinned for longer is dropped or requeued
  // when it comes due. The heap costs 24 bytes per soft-pinned record; the
  // record itself grows by nothing (one bit, soft_filed_).
  std::vector<LruIndex> lru_;       // per tier: unpinned (or pin ended, or not set yet)
  std::vector<LruIndex> soft_lru_;  // per tier: soft-pinned records, pin not known ended
  std::vector<size_t> soft_count_;  // per tier: records in soft_lru_
  std::vector<std::vector<SoftPinEnd>> soft_ends_;  // per tier: heap by LaterEnd
  std::vector<uint64_t> pinned_bytes_;              // per tier: bytes of hard-pinned objects
  uint64_t scan_visits_ = 0;
  uint64_t next_object_id_ = 1;
  uint64_t next_version_ = 1;
  uint64_t erasures_ = 0;
  uint64_t listings_ = 0;
};

}  // namespace mooncake
