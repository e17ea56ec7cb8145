#pragma once

// The backend's background work: a queue of promotions and a wake-up signal
// (WorkQueue), and one maintenance pass (Maintenance) that the worker runs
// from a single thread after WaitForWork, and tests call directly.
//
// Thread-safety: WorkQueue's "Locked" methods need BackendContext::mu held;
// Wait and Take take it themselves. promotions_ and work_queued_ are guarded
// by it. Maintenance::RunPass takes the lock only through the parts it
// calls and must be called without it.

#include <condition_variable>
#include <deque>

#include "common/clock.h"
#include "worker/backend_context.h"
#include "worker/mover.h"
#include "worker/object_table.h"

namespace mooncake {

class WritePath;

class WorkQueue {
 public:
  explicit WorkQueue(BackendContext& ctx) : ctx_(ctx) {}

  // Wakes the maintenance thread.
  void SignalLocked();
  // Queues a promotion of `object` unless one is queued already.
  void QueuePromotionLocked(Object& object, PromotionTask task);
  // Blocks until work is signalled or `timeout` passes.
  void Wait(Millis timeout);
  // Takes every queued promotion.
  std::deque<PromotionTask> TakePromotions();

 private:
  BackendContext& ctx_;
  std::condition_variable work_cv_;
  std::deque<PromotionTask> promotions_;  // guarded by ctx_.mu
  bool work_queued_ = false;              // guarded by ctx_.mu
};

class Maintenance {
 public:
  Maintenance(WorkQueue& work, WritePath& writer, Mover& mover)
      : work_(work), writer_(writer), mover_(mover) {}

  // Discards abandoned writes, frees quarantined space that is due, runs
  // queued promotions, demotes tiers above their high watermark and
  // confirms adopted objects, in that order.
  void RunPass();

 private:
  WorkQueue& work_;
  WritePath& writer_;
  Mover& mover_;
};

}  // namespace mooncake
