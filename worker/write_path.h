#pragma once

// WritePath: every way bytes become an object on this node. Two-phase
// writes (PutStart / PutChunk / PutEnd / PutRevoke) for Put, Upsert and
// Adopt, plan-based writes whose bytes a local producer (or a peer's RDMA
// WRITE) places directly, publication at the directory, hard-pin
// write-through, the discard of abandoned writes, and the quarantine that
// keeps space written from outside the process from being reused too soon.
//
// A write reserves its key with a kWriting record (ObjectTable) and keeps
// its own PendingWrite, keyed by handle; publishing turns the record
// kComplete (or kAdopted), revoking erases it.
//
// Thread-safety: the methods without "Locked" take BackendContext::mu
// themselves and must be called without it; "Locked" ones need it held.
// pending_, quarantine_ and handles_ are guarded by it.

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "worker/backend_context.h"
#include "worker/maintenance.h"
#include "worker/mover.h"
#include "worker/object_table.h"
#include "worker/write_handles.h"

namespace mooncake {

// Which bytes of a two-phase write have arrived, as disjoint ranges, so a
// write commits only once every byte was written: counting bytes would let a
// writer that sends one chunk twice publish a hole holding whatever the
// arena held there before (another key's bytes). A writer sends its chunks
// in order, so this stays one range; a scattered one is refused past
// kMaxRanges, which bounds what a write can make this process hold.
class WrittenRanges {
 public:
  static constexpr size_t kMaxRanges = 64;

  // Records [offset, offset + length); false (nothing recorded) when it
  // would leave more than kMaxRanges disjoint ranges.
  bool Add(uint64_t offset, uint64_t length);
  // Every byte of [0, size) written.
  bool Covers(uint64_t size) const;
  void MarkAll(uint64_t size) { ranges_ = {{0, size}}; }

 private:
  std::map<uint64_t, uint64_t> ranges_;  // begin -> end, disjoint, not touching
};

struct PendingWrite {
  std::string key;
  ObjectRef object;  // the record this write fills
  size_t tier = 0;
  AllocationPtr allocation;
  uint64_t size = 0;
  WrittenRanges written;
  // Chunks being copied into `allocation` outside ctx_.mu. The commit waits
  // for them: a duplicate chunk (a client resending after a timeout) must
  // not land on the object once it is complete and readable.
  uint32_t chunks_in_flight = 0;
  bool committing = false;
  WriteMode mode = WriteMode::kCreate;
  bool in_place = false;       // an upsert writing over the object's own bytes
  bool was_published = false;  // the key was owned here before this write
  // A claim of the key answered with an error may have landed: the write
  // claims on commit, yet releases the key if dropped (was_published too).
  bool claim_uncertain = false;
  // ObjectTable::listings() when the key's record last could be listed for
  // an announcement: at the reserve, or at the reserve of the write this
  // one pre-empted. A kWriting record is not listed, so if a registration
  // listed the keys since, it may have purged this one at the master and
  // not announced it: the commit finds that out (`unannounced`) and claims
  // the key again, even for an upsert of a key owned here.
  uint64_t listings = 0;
  bool unannounced = false;
  AdoptedFrom adopted;  // an adopt's
  bool direct = false;  // a producer writes the bytes itself (plan-based write)
  ObjectOptions options;
  SteadyClock::time_point deadline;

  // Bytes may reach the space from outside this process, past the writer's
  // last call here: a producer's mapping, or a peer's RDMA WRITE (adopts).
  // Such space is quarantined, not reused at once, when the write is dropped.
  bool written_from_outside() const { return direct || mode == WriteMode::kAdopt; }
  // Whether the commit claims the key: an upsert of a key owned here needs
  // no claim of its own, unless a registration missed it meanwhile.
  bool NeedsClaim() const { return !was_published || claim_uncertain || unannounced; }
  // Whether the write has its space. A write is in pending_, its handle
  // live, from its reserve on, while FindSpace looks for space without
  // ctx_.mu (evicting may take seconds); a client that holds the handle
  // (or once could guess it) may name it meanwhile, and nothing may touch
  // the allocation before this.
  bool placed() const { return allocation != nullptr; }
};

class WritePath {
 public:
  WritePath(BackendContext& ctx, ObjectTable& table, Mover& mover, WorkQueue& work);

  // The backend's write API; see TieredCacheBackend for each contract.
  Result<void> WriteWhole(const std::string& key, std::string_view value,
                          const ObjectOptions& options, WriteMode mode);
  // WriteWhole for each, in order, with the claims of the whole batch sent
  // to the master together (OwnerDirectory::ClaimMany). One result each.
  std::vector<Result<void>> WriteWholeMany(const std::vector<WholeWrite>& writes);
  // A Put of a whole value that waits for nothing on the calling thread: it
  // reserves the key, copies the value into host memory, commits it, and
  // sends the key's claim to the master with the publication, then
  // `done`, as its continuation (OwnerDirectory::ClaimAsync). `done` runs
  // exactly once: here for a failure before the claim, else on the thread
  // that answers the claim. Returns false, having changed nothing and
  // without running `done`, for a write that might wait here: one bound
  // for a tier other than host memory, one with no room there unless others
  // make room (eviction), a hard-pinned one (its write-through to the
  // durable tier). The caller then writes it the blocking way.
  bool TryWriteWholeAsync(const std::string& key, std::string_view value,
                          const ObjectOptions& options, std::function<void(Result<void>)> done);
  // PutStart (`direct` false) or the start of a plan (`direct` true).
  Result<uint64_t> Start(const std::string& key, uint64_t size, const ObjectOptions& options,
                         WriteMode mode, const AdoptedFrom& adopted, bool direct);
  Result<void> Chunk(uint64_t handle, uint64_t offset, std::string_view data);
  Result<void> End(uint64_t handle);
  // A Put whose bytes the caller places in host memory itself; see
  // TieredCacheBackend::StartPlacedPut.
  Result<PlacedWrite> StartPlaced(const std::string& key, uint64_t size,
                                  const ObjectOptions& options);
  Result<void> EndPlaced(uint64_t handle);
  Result<void> Revoke(uint64_t handle);
  Result<DirectWritePlan> OpenForWrite(const std::string& key, uint64_t size,
                                       const ObjectOptions& options, WriteMode mode);
  Result<void> CommitDirect(uint64_t handle, std::string_view key);
  Result<WriteTarget> Target(uint64_t handle) const;

  // Forgets the pending write of a record that Remove or DropLocal erases;
  // its writer's next call fails. Space written from outside this process
  // is quarantined, as when such a write is revoked or pre-empted.
  void ForgetLocked(uint64_t handle);
  // A key gone from this node whose release at the master is on its way:
  // until ReleasedLocked, a write of it is refused as busy (see releasing_).
  // Every ReleasingLocked needs its ReleasedLocked, whatever the master said.
  void ReleasingLocked(const std::string& key) { ++releasing_[key]; }
  void ReleasedLocked(const std::string& key);
  // Discards writes not committed within put_start_discard_timeout.
  void DiscardExpiredWrites();
  // Frees quarantined space whose time is up.
  void ReleaseQuarantine();
  // Last tier a plan-based write may use, or -1 when none can share.
  int LastShareableTier() const;

 private:
  // A reserved key: its handle, and its space once it has some (at once for
  // an upsert in place).
  struct Reservation {
    uint64_t handle = 0;
    AllocationPtr allocation;
  };
  using SpaceFound = Result<std::pair<size_t, AllocationPtr>>;
  // The space a reserve takes from the key's record, each part freed once
  // ctx_.mu is dropped (freeing may write to an SSD tier's index), at its
  // own time.
  struct ReplacedSpace {
    // The old value's space and its durable copy, freed before FindSpace:
    // nothing copies into or out of them any more (no readers, not moving:
    // ClearForUpsertLocked checks), and held on, they would make FindSpace
    // evict other objects, or fail, for room the upsert itself gives back.
    std::vector<AllocationPtr> free_now;
    // A pre-empted writer's space, freed only once the new space is found,
    // so that it never goes to the write that pre-empted it (a chunk of
    // that writer may still be landing there).
    std::vector<AllocationPtr> free_after;
  };
  // A write between BeginCommitLocked and EndCommitLocked.
  struct Committing {
    uint64_t handle = 0;
    PendingWrite write;
    uint64_t version = 0;
    Result<void> persisted;
    AllocationPtr durable_copy;
  };
  // A write whose bytes are committed locally and whose key still has to be
  // claimed (unless it was published here already) before it is visible.
  struct CommittedWrite {
    PendingWrite write;
    uint64_t version = 0;
  };

  // WriteWhole and WriteWholeMany, for writes of distinct keys: a step at a
  // time, each step for up to 64 writes per hold of ctx_.mu. A write that
  // fails gets its error in `results` and drops out of the later steps.
  void WriteWave(std::span<const WholeWrite> writes, std::span<Result<void>> results);
  // Whether no key comes twice in `writes` (the usual batch).
  static bool KeysDistinct(std::span<const WholeWrite> writes);
  // Reserves each key and gives it space (in place, or found anew).
  std::vector<std::optional<Reservation>> ReserveWave(std::span<const WholeWrite> writes,
                                                      std::span<Result<void>> results);
  // Commits each write whose bytes were copied; nullopt where none is left
  // to publish.
  std::vector<std::optional<CommittedWrite>> CommitWave(
      std::span<const WholeWrite> writes, std::span<const std::optional<Reservation>> reserved,
      std::span<Result<void>> results);
  // Claims the committed keys in one call and publishes them.
  void PublishWave(std::vector<std::optional<CommittedWrite>> committed,
                   std::span<Result<void>> results);
  // The pending write `handle` for a call of its writer (a chunk, a commit,
  // a revoke): ILLEGAL_CLIENT when there is none (pre-empted, discarded,
  // never issued) or it is committing already; REPLICA_IS_NOT_READY while
  // it is still looking for space (not placed()).
  Result<PendingWrite*> WriterCallLocked(uint64_t handle);
  // The checks of a write that need no lock.
  Result<void> CheckWrite(const std::string& key, uint64_t size,
                          const ObjectOptions& options) const;
  // Reserves `key` with a kWriting record and a PendingWrite, pre-empting an
  // unfinished upsert of it. Space the write replaces goes to `replaced`.
  Result<Reservation> ReserveLocked(const std::string& key, uint64_t size,
                                    const ObjectOptions& options, WriteMode mode,
                                    const AdoptedFrom& adopted, bool direct,
                                    ReplacedSpace& replaced);
  // For an upsert: takes over the pins and publication of the key's record
  // here, pre-empts its unfinished write, and erases it (its space goes to
  // `replaced`, or to `pending` for an in-place write of the same size).
  // OBJECT_REPLICA_BUSY while the record is read, moved or handed over;
  // NOT_OWNER for a key this node handed to another one.
  Result<void> ClearForUpsertLocked(const std::string& key, PendingWrite& pending,
                                    ReplacedSpace& replaced);
  // The kWriting record of `pending`'s write `handle`.
  Object Placeholder(const PendingWrite& pending, uint64_t handle);
  // Allocates for a reserved write, evicting if need be (without ctx_.mu).
  SpaceFound FindSpace(uint64_t size, const ObjectOptions& options, WriteMode mode, bool direct);
  // Gives a reserved write the space found, or revokes it if none was;
  // a revoked write's key that the master must forget goes to `release_keys`.
  Result<AllocationPtr> PlaceLocked(uint64_t handle, const std::string& key,
                                    const SpaceFound& found,
                                    std::vector<std::string>& release_keys);
  // Copies a whole value into its reserved space, without Chunk's per-slice
  // bookkeeping (BeginCommitLocked counts the bytes); revokes the write on a
  // failure. Holding the space keeps it alive even if an upsert pre-empts
  // the write meanwhile; the commit then refuses it.
  Result<void> CopyWhole(const Reservation& reserved, std::string_view value);
  // End's first half: Commit persists the bytes and marks the object
  // complete (nullopt for an adopted object, which needs no claim of its
  // own); it is BeginCommitLocked (counting `bytes_copied` more bytes as
  // written), MakeDurable without the lock, and EndCommitLocked.
  Result<std::optional<CommittedWrite>> Commit(uint64_t handle, uint64_t bytes_copied = 0);
  Result<Committing> BeginCommitLocked(uint64_t handle, uint64_t bytes_copied);
  void MakeDurable(Committing& committing);
  // A write whose bytes could not be made durable is dropped; if the key
  // was owned here, it goes to `release`, for the master once ctx_.mu is
  // let go.
  Result<std::optional<CommittedWrite>> EndCommitLocked(Committing committing,
                                                        std::vector<std::string>& release);
  // End's second half, given the outcome of the key's claim. A claim that
  // landed for an object no longer here (an upsert took the key over while
  // the claim was out) hands the key's ownership on: to that upsert's
  // pending write, whose revoke then releases it, or, when nothing of the
  // key is left here, to `release`, for the master once ctx_.mu is let go.
  Result<void> FinishPublishLocked(const PendingWrite& write, uint64_t version,
                                   const Result<void>& claimed, std::vector<std::string>& release);
  // FinishPublishLocked, unless this node registered again since the claim
  // was sent, when the directory counted `registrations` (nullopt then).
  // That registration may have purged the claim at the master and listed
  // the keys to announce before this publish; the key is then to be
  // claimed again, still unpublished, so a remove keeps off it meanwhile.
  // A registration lists its keys under ctx_.mu after counting itself, so
  // an unchanged count read here, under ctx_.mu, rules that out.
  std::optional<Result<void>> PublishUnlessRegisteredLocked(uint64_t registrations,
                                                            const CommittedWrite& committed,
                                                            const Result<void>& claimed,
                                                            std::vector<std::string>& release);
  // Claims a committed write's key and publishes it, claiming again after
  // each registration that intervenes (a few times at most).
  Result<void> ClaimThenPublish(const CommittedWrite& committed);
  // After a claim of `key` failed in a way that may have landed: releases
  // the key at the master unless another write of it here took over.
  void MayOwnLocked(const std::string& key, std::vector<std::string>& release);
  // Writes a hard-pinned object's bytes to the durable tier as well: the
  // copy, or nullptr where none is needed (write-through off, no SSD tier,
  // or the object is on it); an error where the copy could not be made.
  Result<AllocationPtr> WriteThrough(const std::string& key, const AllocationPtr& primary,
                                     uint64_t size, uint64_t version, const ObjectOptions& options);
  void QuarantineLocked(AllocationPtr allocation);
  // Drops a pending write; if its object was published, its key goes to
  // `release` (ReleaseLaterLocked: a revoked upsert leaves it absent).
  // `writer_gone`: the writer itself revoked, so a direct write's space may
  // be reused at once; otherwise it is quarantined.
  void RevokeLocked(uint64_t handle, bool writer_gone, std::vector<std::string>& release);
  // `key`, gone from this node but owned here at the master, goes to
  // `release` for the master once ctx_.mu is let go; until then writes of it
  // are refused (ReleasingLocked).
  void ReleaseLaterLocked(const std::string& key, std::vector<std::string>& release);
  // Releases `keys` (each passed to ReleasingLocked) at the master, then
  // lets writes of them in again.
  void ReleaseAbandonedOwnership(const std::vector<std::string>& keys);
  // Runs `step(release)` under ctx_.mu, then releases at the master the
  // keys `step` put in `release`; returns what `step` returned.
  template <typename Step>
  auto LockedThenRelease(Step&& step);

  struct QuarantinedSpace {
    SteadyClock::time_point until;
    AllocationPtr allocation;
  };

  BackendContext& ctx_;
  ObjectTable& table_;  // guarded by ctx_.mu
  Mover& mover_;
  WorkQueue& work_;
  std::unordered_map<uint64_t, PendingWrite> pending_;  // guarded by ctx_.mu
  // Signalled when a write's last chunk in flight has landed (with ctx_.mu).
  std::condition_variable chunks_landed_;
  std::deque<QuarantinedSpace> quarantine_;  // guarded by ctx_.mu
  WriteHandles handles_;                     // guarded by ctx_.mu; doubles as plan epochs
  // Keys being released at the master, with how many releases are out. The
  // master answers this node's claim of a key it already owns with "yes", so
  // a put that claimed such a key before the release landed would be left
  // holding a key the master had then forgotten: other nodes could put it
  // too, and no client could find it. Such a put is refused as busy instead.
  std::unordered_map<std::string, uint32_t> releasing_;  // guarded by ctx_.mu
  // (Keys whose commit's claim is still out: BackendContext::claiming. An
  // upsert of such a key is refused as busy: it would take over, as owned,
  // a key the claim may yet fail to get, and commit without a claim.)
};

}  // namespace mooncake
