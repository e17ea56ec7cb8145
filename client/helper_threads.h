#pragma once

// Private to client/: a few threads for work that may block (a master call,
// a chunked read, a batch write) on behalf of callers that must not:
// GetAsync's slow path, PutAsync's batches, and the per-node calls of a
// batch spread over nodes (RunParallel). Threads start as work arrives, up
// to a maximum; further work queues behind them.
//
// Thread-safety: Run() is safe from any thread, also from a task. Stop()
// runs every queued task (and those they queue) before it joins; a task
// given to Run() after that runs on the caller's thread, so none is lost.
//
// A task goes straight to an idle thread when there is one: Run() hands it
// over and wakes that thread alone. An idle thread waits on a WakeWord of
// its own (common/wake_word.h), so under load it is usually still yielding,
// not asleep, when its next task comes.

#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "common/wake_word.h"

namespace mooncake {

class HelperThreads {
 public:
  // Starts a thread running `body`; may throw (std::system_error when the
  // process has no threads left). Tests substitute one that fails.
  using StartThread = std::function<std::thread(std::function<void()> body)>;

  explicit HelperThreads(size_t max_threads, StartThread start_thread = {})
      : max_threads_(max_threads), start_thread_(std::move(start_thread)) {}
  ~HelperThreads() { Stop(); }
  HelperThreads(const HelperThreads&) = delete;
  HelperThreads& operator=(const HelperThreads&) = delete;

  // Never throws for want of a thread: when none can be started, the task
  // waits for a running one, or runs on the caller's thread if there is
  // none.
  void Run(std::function<void()> task);
  void Stop();
  // Threads started so far, and those waiting for work now.
  size_t threads() const;
  size_t idle_threads() const;

 private:
  // A thread waiting for work, on its own stack: Run() sets `task` and
  // then wakes it with kTask; Stop() wakes it with kStop.
  struct Idle {
    static constexpr uint32_t kTask = 1;
    static constexpr uint32_t kStop = 2;
    std::function<void()> task;
    WakeWord wake;
  };

  void Loop();

  const size_t max_threads_;
  const StartThread start_thread_;  // empty: std::thread
  mutable std::mutex mu_;
  std::deque<std::function<void()>> queue_;  // guarded by mu_: no idle thread took these
  std::vector<std::thread> threads_;         // guarded by mu_
  std::vector<Idle*> idle_;                  // guarded by mu_: the last to idle first
  bool stopping_ = false;                    // guarded by mu_
};

}  // namespace mooncake
