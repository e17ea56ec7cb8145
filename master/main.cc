// mooncake-master: serves the key -> node directory until SIGINT or SIGTERM.
// Exit codes: 0 after a clean stop or --help, 1 if it cannot start, 2 for a
// bad configuration.

#include <pthread.h>

#include <csignal>
#include <iostream>
#include <string>

#include "common/log.h"
#include "master/master_config.h"
#include "master/master_server.h"
#include "thrift/rpc_server.h"

namespace {

// Blocks SIGINT and SIGTERM in this thread before any other thread exists, so
// every thread inherits the mask and the signals wait for sigwait() instead of
// killing the process or needing a handler with global state.
sigset_t PrepareSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  // A peer that hangs up mid-reply must not kill the master.
  std::signal(SIGPIPE, SIG_IGN);
  return set;
}

int WaitForStopSignal(const sigset_t& set) {
  int sig = 0;
  while (sigwait(&set, &sig) != 0) {
  }
  return sig;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace mooncake;
  sigset_t stop_signals = PrepareSignals();

  std::string message;
  auto config = ParseMasterConfig(argc, argv, &message);
  if (!config) {
    std::cerr << message << (message.ends_with('\n') ? "" : "\n");
    return 2;
  }
  if (config->show_help) {
    std::cout << message;
    return 0;
  }
  SetLogLevel(config->log_level);

  auto server = MasterServer::Start(*config);
  if (!server) return 1;
  MC_LOG_INFO("master listening host={} port={} node_ttl_ms={}", config->host, (*server)->port(),
              config->node_ttl_ms);
  if (!config->ready_file.empty()) {
    if (auto written = WriteReadyFile(config->ready_file, (*server)->port()); !written) {
      MC_LOG_ERROR("cannot write ready file path={} error={}", config->ready_file,
                   ToString(written.error()));
      (*server)->Stop();
      return 1;
    }
  }

  int sig = WaitForStopSignal(stop_signals);
  MC_LOG_INFO("master stopping signal={}", sig);
  (*server)->Stop();
  MC_LOG_INFO("master stopped");
  return 0;
}
