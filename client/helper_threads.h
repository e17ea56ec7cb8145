#pragma once

// Private to client/: a few threads for work that may block (a master call,
// a chunked read, a batch write) on behalf of callers that must not:
// GetAsync's slow path and PutAsync's batches. Threads start as work
// arrives, up to a maximum; further work queues behind them.
//
// Thread-safety: Run() is safe from any thread, also from a task. Stop()
// runs every queued task (and those they queue) before it joins; a task
// given to Run() after that runs on the caller's thread, so none is lost.

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace mooncake {

class HelperThreads {
 public:
  explicit HelperThreads(size_t max_threads) : max_threads_(max_threads) {}
  ~HelperThreads() { Stop(); }
  HelperThreads(const HelperThreads&) = delete;
  HelperThreads& operator=(const HelperThreads&) = delete;

  void Run(std::function<void()> task);
  void Stop();
  // Threads started so far, and those waiting for work now.
  size_t threads() const;
  size_t idle_threads() const;

 private:
  void Loop();

  const size_t max_threads_;
  mutable std::mutex mu_;
  std::condition_variable ready_;
  std::deque<std::function<void()>> queue_;  // guarded by mu_
  std::vector<std::thread> threads_;         // guarded by mu_
  size_t idle_ = 0;                          // guarded by mu_
  bool stopping_ = false;                    // guarded by mu_
};

}  // namespace mooncake
