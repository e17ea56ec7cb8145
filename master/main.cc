// mooncake-master: serves the key -> node directory until SIGINT or SIGTERM.
// Exit codes: 0 after a clean stop, --help or --version, 1 if it cannot start, 2 for a
// bad configuration, 3 after losing HA leadership (--etcd; docs/ha.md: its
// directory may be stale, so a supervisor restarts it as a fresh standby).
// The ready file (--ready-file) holds two lines: the RPC
// port and the admin port (-1 when --admin-port is -1). It is removed again
// once the master stopped (a clean stop or exit 3), unless another process
// has rewritten it since.

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <iostream>
#include <string>

#include "common/flag_parsing.h"
#include "common/heap_tuning.h"
#include "common/log.h"
#include "common/signals.h"
#include "common/stdio_fds.h"
#include "http/ready_file.h"
#include "master/master_config.h"
#include "master/master_server.h"

int main(int argc, char** argv) {
  using namespace mooncake;
  // Before anything opens a file or socket (common/stdio_fds.h).
  ReopenClosedStdio();
  sigset_t stop_signals = BlockStopSignals();

  std::string message;
  auto config = ParseMasterConfig(argc, argv, &message);
  if (auto exit_code = ExitCodeAfterParse(config, message)) return *exit_code;
  SetLogLevel(config->log_level);
  // Before any thread starts (common/heap_tuning.h).
  MC_LOG_INFO("heap freed_memory=\"{}\"", ToString(KeepFreedHeapForReuse()));

  // Set by the election thread; the SIGTERM it raises ends the wait below.
  static std::atomic<bool> lost_leadership{false};
  auto server = MasterServer::Start(*config, [] {
    lost_leadership = true;
    kill(getpid(), SIGTERM);
  });
  if (!server) return 1;
  MC_LOG_INFO("master listening host={} port={} admin_port={} node_ttl_ms={}", config->host,
              (*server)->port(), (*server)->admin_port(), config->node_ttl_ms);
  // RPC port first: readers that take only the first integer keep working.
  const int ports[] = {(*server)->port(), (*server)->admin_port()};
  if (!config->ready_file.empty()) {
    if (auto written = WriteReadyFilePorts(config->ready_file, ports); !written) {
      MC_LOG_ERROR("cannot write ready file path={} error={}", config->ready_file,
                   ToString(written.error()));
      (*server)->Stop();
      return 1;
    }
  }

  int sig = WaitForStopSignal(stop_signals);
  MC_LOG_INFO("master stopping signal={} lost_leadership={}", sig, lost_leadership.load());
  (*server)->Stop();
  if (!config->ready_file.empty()) RemoveReadyFileIfOurs(config->ready_file, ports);
  MC_LOG_INFO("master stopped");
  return lost_leadership ? 3 : 0;
}
