#include "common/signals.h"

#include <limits.h>
#include <pthread.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cstring>
#include <mutex>

namespace mooncake {
namespace {

// A registered path's slot: kFree, being written (kFilling), registered
// (kArmed), or being removed by the handler (kRemoving; never reused, as the
// process is about to die).
enum SlotState : int { kFree, kFilling, kArmed, kRemoving };

struct PathSlot {
  std::atomic<int> state{kFree};
  char path[PATH_MAX];
};

std::array<PathSlot, kMaxRemoveOnStopSignal> g_remove_on_stop;
std::once_flag g_remove_on_stop_installed;
static_assert(std::atomic<int>::is_always_lock_free);

constexpr int kRemoveOnSignals[] = {SIGINT, SIGTERM, SIGHUP};

// Only async-signal-safe calls: unlink, sigaction, raise.
void RemoveThenDie(int sig) {
  for (PathSlot& slot : g_remove_on_stop) {
    int armed = kArmed;
    if (slot.state.compare_exchange_strong(armed, kRemoving)) unlink(slot.path);
  }
  // The default action once this handler returns: the process dies of
  // `sig`, as it would have without the handler (the signal is blocked
  // while the handler runs, so it stays pending until then).
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  sigaction(sig, &dfl, nullptr);
  raise(sig);
}

void InstallRemoveOnStop() {
  struct sigaction action {};
  action.sa_handler = RemoveThenDie;
  sigemptyset(&action.sa_mask);
  for (int sig : kRemoveOnSignals) sigaddset(&action.sa_mask, sig);
  for (int sig : kRemoveOnSignals) {
    struct sigaction old {};
    if (sigaction(sig, nullptr, &old) != 0) continue;
    // Ignored (nohup, a shell's background job): stays ignored; a handler
    // of someone else's stays too.
    if (old.sa_handler != SIG_DFL || (old.sa_flags & SA_SIGINFO)) continue;
    sigaction(sig, &action, nullptr);
  }
}

}  // namespace

RemoveOnStopSignal::RemoveOnStopSignal(std::string_view path) {
  if (path.empty() || path.size() >= PATH_MAX) return;
  std::call_once(g_remove_on_stop_installed, InstallRemoveOnStop);
  for (size_t i = 0; i < g_remove_on_stop.size(); ++i) {
    PathSlot& slot = g_remove_on_stop[i];
    int free = kFree;
    if (!slot.state.compare_exchange_strong(free, kFilling)) continue;
    std::memcpy(slot.path, path.data(), path.size());
    slot.path[path.size()] = '\0';
    slot.state.store(kArmed);
    slot_ = static_cast<int>(i);
    return;
  }
}

void RemoveOnStopSignal::Release() {
  if (slot_ < 0) return;
  int armed = kArmed;
  // kRemoving: the handler has the slot and the process is about to die.
  g_remove_on_stop[slot_].state.compare_exchange_strong(armed, kFree);
  slot_ = -1;
}

sigset_t BlockStopSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  std::signal(SIGPIPE, SIG_IGN);
  return set;
}

int WaitForStopSignal(const sigset_t& signals) {
  int sig = 0;
  while (sigwait(&signals, &sig) != 0) {
  }
  return sig;
}

}  // namespace mooncake
