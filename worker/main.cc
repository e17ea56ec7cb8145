// mooncake-worker: serves one node's tiers until SIGINT or SIGTERM.
// Exit codes: 0 after a clean stop, --help or --version, 1 if it cannot start, 2 for a
// bad configuration, 4 if the SSD tier (--ssd-path) cannot be opened: its
// RocksDB directory is corrupt (CURRENT, a MANIFEST, a table or WAL file
// damaged or deleted), locked by another process, unreadable, or cannot be
// created. The worker then prints one line naming the path and the reason
// and serves nothing, rather than risk wrong bytes. A missing or empty
// --ssd-path is created as a fresh, empty SSD tier (a new node).

#include <iostream>

#include "common/flag_parsing.h"
#include "common/heap_tuning.h"
#include "common/log.h"
#include "common/signals.h"
#include "common/stdio_fds.h"
#include "worker/worker_config.h"
#include "worker/worker_server.h"

namespace {

constexpr int kExitSsdUnusable = 4;

}  // namespace

int main(int argc, char** argv) {
  using namespace mooncake;
  // Before anything opens a file or socket (common/stdio_fds.h).
  ReopenClosedStdio();
  sigset_t stop_signals = BlockStopSignals();

  std::string message;
  auto config = ParseWorkerConfig(argc, argv, &message);
  if (auto exit_code = ExitCodeAfterParse(config, message)) return *exit_code;
  SetLogLevel(config->log_level);
  // Before any thread starts (common/heap_tuning.h).
  MC_LOG_INFO("heap freed_memory=\"{}\"", ToString(KeepFreedHeapForReuse()));

  std::string ssd_error;
  auto server = WorkerServer::Start(*config, &ssd_error);
  if (!server && !ssd_error.empty()) {
    std::cerr << "mooncake-worker: ssd tier cannot be opened: " << ssd_error << " (exit code "
              << kExitSsdUnusable << ")\n";
    return kExitSsdUnusable;
  }
  if (!server) {
    std::cerr << "mooncake-worker: cannot start: " << ToString(server.error()) << "\n";
    return 1;
  }
  int sig = WaitForStopSignal(stop_signals);
  MC_LOG_INFO("worker stopping signal={}", sig);
  (*server)->Stop();
  server->reset();
  MC_LOG_INFO("worker stopped");
  return 0;
}
