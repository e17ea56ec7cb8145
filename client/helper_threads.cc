#include "client/helper_threads.h"

#include <utility>

namespace mooncake {

void HelperThreads::Run(std::function<void()> task) {
  {
    std::unique_lock lock(mu_);
    if (!stopping_) {
      if (!idle_.empty()) {
        // The most recently idle thread: the likeliest to be yielding
        // still rather than asleep.
        Idle* idle = idle_.back();
        idle_.pop_back();
        idle->task = std::move(task);
        lock.unlock();
        idle->wake.Set(Idle::kTask);
        return;
      }
      queue_.push_back(std::move(task));
      // No thread is idle: start one while the bound allows; otherwise the
      // task waits for the first thread to finish its own.
      if (threads_.size() >= max_threads_) return;
      try {
        threads_.reserve(threads_.size() + 1);
        std::function<void()> body = [this] { Loop(); };
        threads_.push_back(start_thread_ ? start_thread_(std::move(body))
                                         : std::thread(std::move(body)));
        return;
      } catch (...) {
        // No thread to be had (the process is at its limit). A running
        // thread takes the task when it finishes its own; with none, it
        // must not wait for a thread that never comes.
        if (!threads_.empty()) return;
        task = std::move(queue_.back());
        queue_.pop_back();
      }
    }
  }
  task();
}

void HelperThreads::Stop() {
  std::vector<std::thread> threads;
  std::vector<Idle*> idle;
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
    threads.swap(threads_);
    idle.swap(idle_);
  }
  for (Idle* waiting : idle) waiting->wake.Set(Idle::kStop);
  for (auto& thread : threads) thread.join();
}

size_t HelperThreads::threads() const {
  std::lock_guard lock(mu_);
  return threads_.size();
}

size_t HelperThreads::idle_threads() const {
  std::lock_guard lock(mu_);
  return idle_.size();
}

void HelperThreads::Loop() {
  for (;;) {
    std::function<void()> task;
    Idle idle;
    {
      std::lock_guard lock(mu_);
      if (!queue_.empty()) {
        task = std::move(queue_.front());
        queue_.pop_front();
      } else if (stopping_) {
        return;  // nothing is left
      } else {
        idle_.push_back(&idle);
      }
    }
    if (!task) {
      // Run() or Stop() takes `idle` off the list, then sets its word once.
      // Its futex wake may come after this loop moved on; a wait on a later
      // Idle at the same address then just looks at its word again.
      if (idle.wake.Wait() == Idle::kStop) return;
      task = std::move(idle.task);
    }
    task();
  }
}

}  // namespace mooncake
