#include "client/helper_threads.h"

#include <utility>

namespace mooncake {

void HelperThreads::Run(std::function<void()> task) {
  {
    std::lock_guard lock(mu_);
    if (!stopping_) {
      queue_.push_back(std::move(task));
      // Each idle thread takes one queued task; a task none will take
      // starts a thread while the bound allows.
      if (queue_.size() > idle_ && threads_.size() < max_threads_) {
        threads_.emplace_back([this] { Loop(); });
      } else {
        ready_.notify_one();
      }
      return;
    }
  }
  task();
}

void HelperThreads::Stop() {
  std::vector<std::thread> threads;
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
    threads.swap(threads_);
  }
  ready_.notify_all();
  for (auto& thread : threads) thread.join();
}

size_t HelperThreads::threads() const {
  std::lock_guard lock(mu_);
  return threads_.size();
}

size_t HelperThreads::idle_threads() const {
  std::lock_guard lock(mu_);
  return idle_;
}

void HelperThreads::Loop() {
  std::unique_lock lock(mu_);
  for (;;) {
    ++idle_;
    ready_.wait(lock, [&] { return !queue_.empty() || stopping_; });
    --idle_;
    if (queue_.empty()) return;  // stopping, and nothing is left
    auto task = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    task();
    lock.lock();
  }
}

}  // namespace mooncake
