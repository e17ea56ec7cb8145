// mooncake-worker: serves one node's tiers until SIGINT or SIGTERM.
// Exit codes: 0 after a clean stop or --help, 1 if it cannot start, 2 for a
// bad configuration.

#include <iostream>

#include "common/flag_parsing.h"
#include "common/log.h"
#include "common/signals.h"
#include "worker/worker_config.h"
#include "worker/worker_server.h"

int main(int argc, char** argv) {
  using namespace mooncake;
  sigset_t stop_signals = BlockStopSignals();

  std::string message;
  auto config = ParseWorkerConfig(argc, argv, &message);
  if (auto exit_code = ExitCodeAfterParse(config, message)) return *exit_code;
  SetLogLevel(config->log_level);

  auto server = WorkerServer::Start(*config);
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
