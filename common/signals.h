#pragma once

// Process-level stop handling. The server binaries block SIGINT/SIGTERM in
// every thread and collect them by sigwait() in main, so they need no
// signal handler and no global state. Tools that are simply killed by them
// (mooncake-cli) use RemoveOnStopSignal for the files they must not leave
// behind.

#include <csignal>
#include <string_view>

namespace mooncake {

// Call first in main (right after ReopenClosedStdio, common/stdio_fds.h),
// before any thread starts, so all threads inherit the mask. Also ignores
// SIGPIPE: a peer hanging up must not kill a server.
sigset_t BlockStopSignals();

// Blocks until SIGINT or SIGTERM arrives; returns the signal number.
int WaitForStopSignal(const sigset_t& signals);

// Removes a file if SIGINT, SIGTERM or SIGHUP ends the process while this
// object lives: a partial output file, a spool file with a name (Ctrl-C on
// `mooncake-cli get -o FILE` left FILE.mooncake-part-PID behind). The first
// one installs handlers for those signals that unlink every registered path
// and then die of the signal as before (exit status 128+N); a signal that
// is ignored (nohup) stays ignored. It does not remove the file itself:
// the owner does that, or renames it into place, and then destroys (or
// Release()s) this object.
//
// Register the path before creating the file, so no moment exists where
// the file is there and a signal would leave it. A process holds at most
// kMaxRemoveOnStopSignal registrations at once; past that, or for a path
// of PATH_MAX bytes or more, armed() is false and nothing is removed.
//
// Thread-safety: any thread may create and destroy these; the handler may
// run on any thread. The registry is the one piece of process-wide mutable
// state here (a signal handler can reach nothing else): fixed slots, each
// guarded by a lock-free atomic state, so the handler never takes a lock.
inline constexpr int kMaxRemoveOnStopSignal = 8;

class RemoveOnStopSignal {
 public:
  explicit RemoveOnStopSignal(std::string_view path);
  ~RemoveOnStopSignal() { Release(); }
  RemoveOnStopSignal(const RemoveOnStopSignal&) = delete;
  RemoveOnStopSignal& operator=(const RemoveOnStopSignal&) = delete;

  // Whether a stop signal would remove the path now.
  bool armed() const { return slot_ >= 0; }
  // A stop signal no longer removes the path (it was renamed or removed).
  void Release();

 private:
  int slot_ = -1;
};

}  // namespace mooncake
