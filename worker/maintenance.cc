#include "worker/maintenance.h"

#include "worker/write_path.h"

namespace mooncake {

void WorkQueue::SignalLocked() {
  work_queued_ = true;
  work_cv_.notify_one();
}

void WorkQueue::QueuePromotionLocked(Object& object, PromotionTask task) {
  if (object.promotion_queued) return;
  object.promotion_queued = true;
  promotions_.push_back(std::move(task));
  SignalLocked();
}

void WorkQueue::Wait(Millis timeout) {
  std::unique_lock lock(ctx_.mu);
  work_cv_.wait_for(lock, timeout, [this] { return work_queued_; });
  work_queued_ = false;
}

std::deque<PromotionTask> WorkQueue::TakePromotions() {
  std::deque<PromotionTask> queue;
  std::lock_guard lock(ctx_.mu);
  queue.swap(promotions_);
  return queue;
}

void Maintenance::RunPass() {
  writer_.DiscardExpiredWrites();
  writer_.ReleaseQuarantine();
  for (const PromotionTask& task : work_.TakePromotions()) mover_.Promote(task);
  mover_.DemoteAboveWatermarks();
  mover_.ConfirmAdoptedObjects();
  mover_.SettleHandOvers();
  mover_.RetryKeptCopyClaims();
  // Per-object moves log at DEBUG; operators get one line per pass.
  mover_.LogMoveSummary();
}

}  // namespace mooncake
