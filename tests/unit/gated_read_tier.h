#pragma once

// GatedReadTier: a CacheTier for tests that forwards to a real tier but can
// hold its reads, a write and its Persists open, to pin an interleaving instead of
// hoping for it, and fail its Persist on demand, as a full or broken disk
// would, or throw from its reads, as a copy whose buffer cannot be
// allocated would.

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <new>
#include <span>
#include <string_view>
#include <vector>

#include "common/clock.h"
#include "tiers/cache_tier.h"

namespace mooncake::testing {

// A tier that forwards to `inner` but whose reads can be held open: after
// Close(), every Read blocks (bounded) until Open(). Tests use it to pin an
// interleaving, e.g. "a read is in progress" while something else runs,
// instead of hoping threads meet.
class GatedReadTier : public CacheTier {
 public:
  // A read held longer than this goes on anyway, so a test that fails before
  // Open() cannot hang; such a test fails on its own assertions.
  static constexpr Millis kMaxHold{30000};

  explicit GatedReadTier(std::unique_ptr<CacheTier> inner) : inner_(std::move(inner)) {}

  void Close() {
    std::lock_guard lock(mu_);
    closed_ = true;
  }
  void Open() {
    {
      std::lock_guard lock(mu_);
      closed_ = false;
    }
    cv_.notify_all();
  }
  // Every Read throws std::bad_alloc from now on (false: they forward again).
  void ThrowOnReads(bool on) { throw_on_read_ = on; }
  // Every Read fails from now on and every location reports its bytes
  // Damaged, as an SSD whose records fail their checksums would.
  void Damage() { damaged_ = true; }
  // Every Persist fails with `code` from now on; kOk forwards them again.
  void FailPersists(ErrorCode code) {
    std::lock_guard lock(mu_);
    persist_failure_ = code;
  }
  // Every Persist waits (bounded by kMaxHold) from now until LetPersistsGo,
  // as a slow disk's would.
  void HoldPersists() {
    std::lock_guard lock(mu_);
    persists_held_ = true;
  }
  void LetPersistsGo() {
    {
      std::lock_guard lock(mu_);
      persists_held_ = false;
    }
    cv_.notify_all();
  }
  // Waits up to `timeout` until `n` persists are held.
  bool WaitForHeldPersists(int n, Millis timeout) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, timeout, [&] { return waiting_persists_ >= n; });
  }
  // The next Write waits (bounded by kMaxHold) until LetWritesGo; later
  // ones go through: one copy of a chunk held in flight while others land.
  void HoldNextWrite() {
    std::lock_guard lock(mu_);
    hold_next_write_ = true;
    writes_let_go_ = false;
  }
  void LetWritesGo() {
    {
      std::lock_guard lock(mu_);
      writes_let_go_ = true;
    }
    cv_.notify_all();
  }
  // Waits up to `timeout` until a write is held.
  bool WaitForHeldWrite(Millis timeout) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, timeout, [&] { return held_writes_ > 0; });
  }
  // Waits up to `timeout` until `n` reads are held at the gate.
  bool WaitForHeldReads(int n, Millis timeout) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, timeout, [&] { return held_ >= n; });
  }

  std::string_view name() const override { return inner_->name(); }
  TierKind kind() const override { return inner_->kind(); }
  uint64_t capacity() const override { return inner_->capacity(); }
  uint64_t used() const override { return inner_->used(); }
  uint64_t object_count() const override { return inner_->object_count(); }
  Result<TierLocation> Allocate(uint64_t size) override { return inner_->Allocate(size); }
  void Free(const TierLocation& location) override { inner_->Free(location); }
  Result<void> Write(const TierLocation& location, uint64_t offset,
                     std::span<const std::byte> data) override {
    {
      std::unique_lock lock(mu_);
      if (hold_next_write_) {
        hold_next_write_ = false;
        ++held_writes_;
        cv_.notify_all();
        cv_.wait_for(lock, kMaxHold, [&] { return writes_let_go_; });
        --held_writes_;
      }
    }
    return inner_->Write(location, offset, data);
  }
  Result<void> Read(const TierLocation& location, uint64_t offset,
                    std::span<std::byte> out) const override {
    if (throw_on_read_) throw std::bad_alloc();
    if (damaged_) return Err(ErrorCode::kInternalError);
    {
      std::unique_lock lock(mu_);
      if (closed_) {
        ++held_;
        cv_.notify_all();
        cv_.wait_for(lock, kMaxHold, [&] { return !closed_; });
        --held_;
      }
    }
    return inner_->Read(location, offset, out);
  }
  bool Damaged(const TierLocation& location) const override {
    return damaged_ || inner_->Damaged(location);
  }
  const std::byte* HostAddress(const TierLocation& location) const override {
    return damaged_ ? nullptr : inner_->HostAddress(location);
  }
  Result<SharedRegion> ExportRegion() const override { return inner_->ExportRegion(); }
  Result<void> Persist(const DurableObjectMeta& meta) override {
    {
      std::unique_lock lock(mu_);
      if (persists_held_) {
        ++waiting_persists_;
        cv_.notify_all();
        cv_.wait_for(lock, kMaxHold, [&] { return !persists_held_; });
        --waiting_persists_;
      }
      if (persist_failure_ != ErrorCode::kOk) return Err(persist_failure_);
    }
    return inner_->Persist(meta);
  }
  std::vector<DurableObjectMeta> Recover() override { return inner_->Recover(); }

 private:
  std::unique_ptr<CacheTier> inner_;
  std::atomic<bool> throw_on_read_{false};
  std::atomic<bool> damaged_{false};
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  bool closed_ = false;                         // guarded by mu_
  mutable int held_ = 0;                        // guarded by mu_
  ErrorCode persist_failure_ = ErrorCode::kOk;  // guarded by mu_
  bool persists_held_ = false;                  // guarded by mu_
  int waiting_persists_ = 0;                    // guarded by mu_
  bool hold_next_write_ = false;                // guarded by mu_
  bool writes_let_go_ = false;                  // guarded by mu_
  int held_writes_ = 0;                         // guarded by mu_
};

}  // namespace mooncake::testing
