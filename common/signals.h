#pragma once

// Process-level stop handling shared by the server binaries: SIGINT/SIGTERM
// are blocked in every thread and collected by sigwait() in main, so no
// signal handler and no global state are needed.

#include <csignal>

namespace mooncake {

// Call first in main (right after ReopenClosedStdio, common/stdio_fds.h),
// before any thread starts, so all threads inherit the mask. Also ignores
// SIGPIPE: a peer hanging up must not kill a server.
sigset_t BlockStopSignals();

// Blocks until SIGINT or SIGTERM arrives; returns the signal number.
int WaitForStopSignal(const sigset_t& signals);

}  // namespace mooncake
