#pragma once

// Mover: everything that changes where a complete object lives. It places
// new allocations (evicting colder objects when a tier is full), promotes,
// demotes, hands objects to other nodes (inter-node eviction, prefetch to a
// client's node), drops them from the cluster when no node has room, and
// confirms adopted objects at the master. It remembers recent hand-overs so
// a stale client gets a hint.
//
// Data copies and calls to the directory or to peers happen without the
// lock; object records change only under it, and only through the
// ObjectTable (MoveState kCopying/kDropping, ObjectState kTransferring).
//
// Thread-safety: the public methods without "Locked" take BackendContext::mu
// themselves and must be called without it; "Locked" methods need it held.
// moved_to_, moved_order_ and unconfirmed_adopts_ are guarded by it.

#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/status.h"
#include "worker/backend_context.h"
#include "worker/object_table.h"

namespace mooncake {

// A queued promotion (Get of a lower-tier object) or prefetch (Exist).
struct PromotionTask {
  std::string key;
  std::string requester_node;  // prefetch target; empty: this node
  bool prefetch = false;
};

class Mover {
 public:
  Mover(BackendContext& ctx, ObjectTable& table)
      : ctx_(ctx), table_(table), came_short_(ctx.tiers.size(), false) {}

  // Allocates `size` bytes in the first of [first_tier, last_tier] that can
  // take them, demoting (or, with `allow_drop`, moving out of the last tier)
  // LRU victims when needed. Returns the tier and the space.
  Result<std::pair<size_t, AllocationPtr>> AllocateIn(size_t first_tier, size_t last_tier,
                                                      uint64_t size, bool allow_drop);
  // Copies an object into the first of [first_tier, last_tier] with room and
  // switches it there, unless it changed meanwhile. A demotion (a range below
  // the object's tier) moves only an object that may be evicted now: not
  // hard-pinned, leased or being read (ObjectTable::IsEvictable).
  bool MoveObject(const std::string& key, size_t first_tier, size_t last_tier, bool allow_drop);
  // Hands an object to another node; succeeds once the master names it.
  // Without a `target` (an eviction: any node with room) only an object that
  // may be evicted now leaves; a hard-pinned one never does. When the master
  // refuses the hand-over because another node owns the key (kNotOwner),
  // this node's copy is erased, since it is no longer the key's.
  Result<void> TransferOut(const std::string& key, const std::string& target, bool dram_only);
  // Drops `key`'s object from the cluster if a read found its bytes damaged
  // or lost in its tier (CacheTier::Damaged): they can never be served
  // again, so a reader gets a miss, not an error on every try, and a put
  // may store the key afresh. True once it is gone here and at the master.
  bool DropIfDamaged(const std::string& key);
  // Demotes (or drops, for the last tier) LRU objects of tier `t` until its
  // usage is at most `target_ratio` of capacity. Returns bytes freed.
  uint64_t EvictTier(size_t t, double target_ratio);
  // Demotes from every tier above its high watermark down to its low one.
  void DemoteAboveWatermarks();
  bool AnyTierAboveHighWatermark() const;
  // Whether a demotion pass is worth starting now (ctx_.mu held): some tier
  // is above its high watermark and its last pass did not come up short.
  // A pass that found too few victims (everything leased, pinned or being
  // read) scanned the tier's whole recency order under the lock; the next
  // one waits for the periodic pass instead of following every publish.
  bool DemotionDueLocked() const;
  // Runs one queued promotion or prefetch.
  void Promote(const PromotionTask& task);
  // Checks adopted objects that are due against the master: kept (and now
  // ours) if it names this node, or names none because the sender died;
  // dropped otherwise, and when no node owns the key while its sender lives
  // (the key was removed after it was sent). A master that cannot be asked
  // (it is away, or forgot this node) is asked again on later passes; a
  // claim it answers with an error (e.g. NO_AVAILABLE_HANDLE: its key table
  // is full, so it names no node) is retried kMaxConfirmRefusals times in
  // all, and then the copy is dropped: the master never named this node.
  // A claim that finds the sender still the owner (its swap may not have
  // reached the master yet) waits another delay, kMaxSenderWaits times at
  // most, before the copy is dropped.
  void ConfirmAdoptedObjects();
  static constexpr int kMaxConfirmRefusals = 5;
  static constexpr int kMaxSenderWaits = 5;

  // Asks the master who owns each key whose hand-over's outcome was unknown
  // (Transfer's kRpcTimeout: the master could not be asked). A copy of a key
  // another node owns now is erased: the swap was applied, and left
  // published here it would serve a value the new owner may have replaced.
  // So is one of a key no node owns while the master knew this node all
  // along: the swap was applied and the key removed (or dropped) at the
  // target since, or it was not, and the target's copy settles the key
  // (ConfirmAdoptedObjects). Kept after this node registered again (the
  // announcement may be on its way). Asked again on the next pass while the
  // master is away.
  void SettleHandOvers();
  // Drops an adopted copy whose ownership swap failed.
  Result<void> AdoptAbort(const std::string& key);
  // A copy kept because its release failed (a remove, a drop) may be one the
  // master forgot all the same: the answer was lost after the release
  // landed, or a registration meanwhile released it. Claims each such key
  // again (a claim of a key this node owns succeeds), and erases the copy
  // when another node owns the key by now. The copies stay on their way out
  // (ObjectState::kRemoving, or MoveState::kDropping) until the claim is
  // answered, so no other remove or drop starts meanwhile; then they are
  // put back. Call without ctx_.mu.
  struct KeptCopy {
    std::string key;
    uint64_t object_id = 0;
    bool dropping = false;  // an eviction's drop, not a remove
  };
  // A claim the master did not answer is sent again by the next
  // RetryKeptCopyClaims, the copy staying on its way out (still readable;
  // removes and upserts of it are busy) until one is answered.
  void ClaimKeptCopies(const std::vector<KeptCopy>& kept);
  void RetryKeptCopyClaims();
  // Queues the adopted copy of `key` for the next ConfirmAdoptedObjects,
  // whether due or not (its sender's swap named this node). kObjectNotFound
  // when no adopted copy of `key` is here.
  Result<void> ConfirmSoonLocked(const std::string& key);
  // An adopted object awaiting confirmation; due after adopt_confirm_delay.
  void NoteAdoptedLocked(const std::string& key, uint64_t object_id, const std::string& sender);
  // Hand-over memory: the node a key recently moved to ("" if none).
  std::string MovedToLocked(const std::string& key) const;
  bool MovedAwayLocked(const std::string& key) const { return moved_to_.contains(key); }
  void ForgetMoveLocked(const std::string& key) { moved_to_.erase(key); }

  // Counts the bytes read and written per tier in `ctx`, when given.
  static Result<void> CopyBetweenTiers(const Allocation& from, const Allocation& to, uint64_t size,
                                       BackendContext* ctx = nullptr);

  // Logs one INFO line summarising the moves (promotions, demotions, moves
  // to other nodes, drops) since the last summary, if there were any. Called
  // once per maintenance pass, from the maintenance thread only.
  void LogMoveSummary();

 private:
  // Demotes (or, from the last tier, moves out or drops) LRU victims so
  // `bytes` may fit.
  bool MakeRoom(size_t tier, uint64_t bytes, bool allow_drop);
  std::vector<std::string> PickVictims(size_t tier, uint64_t bytes);
  // Whether `used` bytes put `tier` above its high watermark.
  bool AboveHighWatermark(const CacheTier& tier, uint64_t used) const;
  // Frees an object's space in the last tier: hands it to another node, or
  // drops it from the cluster when no node has room.
  bool EvictFromLastTier(const std::string& key, size_t tier);
  // Why an object leaves the cluster: no node has room for it, or its
  // bytes will never read back (CacheTier::Damaged).
  enum class DropReason { kNoSpace, kDamaged };
  bool DropObject(const std::string& key, size_t tier, DropReason reason = DropReason::kNoSpace);
  // Whether the bytes of `key`'s object are damaged or lost in its tier.
  bool Damaged(const std::string& key) const;
  // ctx_.mu held: the same for `object`.
  static bool DamagedLocked(const Object& object);
  // ctx_.mu held: the options a copy of `object` sent to another node
  // carries: its own, with a soft pin cut to what is left of it.
  static ObjectOptions OptionsForCopyLocked(const Object& object, SteadyClock::time_point now);
  // ctx_.mu held: whether `object` may leave its tier now, in either pass of
  // the victim scan (its pins, lease and readers may have changed since it
  // was picked).
  bool EvictableNowLocked(const Object& object) const;
  // Moves a victim of tier `t` one step down the hierarchy; out of the node
  // (another node, or dropped) only with `allow_drop`.
  bool EvictOne(const std::string& key, size_t t, bool allow_drop);
  size_t PrefetchTier() const;
  void RememberMoveLocked(const std::string& key, const std::string& node);

  // Counter values at the last LogMoveSummary (maintenance thread only).
  struct MoveTotals {
    std::vector<uint64_t> promotions, demotions, evictions;
    uint64_t moved_out = 0, dropped = 0, moved_bytes = 0;
  };
  MoveTotals ReadMoveTotals() const;

  BackendContext& ctx_;
  MoveTotals logged_;
  ObjectTable& table_;                                     // guarded by ctx_.mu
  std::unordered_map<std::string, std::string> moved_to_;  // guarded by ctx_.mu
  std::deque<std::string> moved_order_;                    // guarded by ctx_.mu
  // An adopted copy awaiting confirmation.
  struct UnconfirmedAdopt {
    std::string key;
    uint64_t object_id = 0;
    std::string sender;  // "" from a sender that did not say
    // The directory's registrations() when the copy was adopted. While it
    // holds, the master has known this node throughout, so a key it does
    // not list was removed there, not forgotten in a restart.
    uint64_t registrations = 0;
    int refusals = 0;  // claims the master answered with an error
    // Times the claim found the sender still the owner (its swap not yet
    // landed) and the copy waited another delay.
    int sender_waits = 0;
    // Queued by the sender's AdoptConfirm (ConfirmSoonLocked): the copy
    // also keeps its own entry, which decides if this one's claim fails.
    bool soon = false;
  };
  // Confirms one due adopt, or puts it back in the queue to ask again later.
  // False when the master did not answer (the pass asks no more).
  bool ConfirmAdopted(UnconfirmedAdopt adopt);
  // Whether `adopt`'s key was removed since its copy was sent: the master
  // has known this node since the adoption, names no owner, and the sender
  // lives. nullopt when the master cannot tell now.
  // `unanswered` tells whether the master gave no answer at all.
  std::optional<bool> RemovedSinceSent(const UnconfirmedAdopt& adopt, bool* unanswered);
  // In adoption order: the ones due are always at the front, so no pass
  // scans every object.
  std::deque<UnconfirmedAdopt> unconfirmed_adopts_;  // guarded by ctx_.mu
  // Copies whose hand-over's outcome is unknown (SettleHandOvers); bounded:
  // past kMaxUnsettled, such a copy goes when its next hand-over is refused.
  struct UnsettledHandOver {
    std::string key;
    uint64_t object_id = 0;
    uint64_t registrations = 0;  // the directory's registrations() at the hand-over
  };
  std::vector<UnsettledHandOver> unsettled_;  // guarded by ctx_.mu
  static constexpr size_t kMaxUnsettled = 4096;
  // Kept copies whose claim the master did not answer (ClaimKeptCopies);
  // bounded: past kMaxRetryClaims such a copy is put back unclaimed.
  std::vector<KeptCopy> retry_claims_;  // guarded by ctx_.mu
  static constexpr size_t kMaxRetryClaims = 4096;
  // Adopted copies whose senders said the master named this node; bounded
  // (kMaxConfirmSoon): past it they wait for their turn in the queue above.
  std::vector<UnconfirmedAdopt> confirm_soon_;  // guarded by ctx_.mu
  static constexpr size_t kMaxConfirmSoon = 65536;
  // Per tier: its last demotion pass left it above its low watermark.
  std::vector<bool> came_short_;  // guarded by ctx_.mu
};

}  // namespace mooncake
