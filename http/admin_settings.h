#pragma once

// Checks and loading shared by every binary that runs a REST admin server
// (--admin-host, --admin-port, --admin-token, --admin-token-file), so the
// master and the worker accept and reject exactly the same values.
//
// Thread-safety: pure functions.

#include <string>
#include <string_view>

#include "common/status.h"

namespace CLI {
class App;
}

namespace mooncake {

// The admin fields of a process's config struct, for AddAdminOptions.
struct AdminFlags {
  std::string& host;
  int& port;
  std::string& token;
  std::string& token_file;
};

// Registers --admin-host, --admin-port, --admin-token and --admin-token-file
// on `app`, bound to `flags`: one spelling and help text for every binary.
void AddAdminOptions(CLI::App& app, const AdminFlags& flags);

// Why the admin flags are unacceptable, or empty when they are fine. Port
// -1 disables the admin server; 0 picks a free port.
std::string AdminSettingsProblem(const std::string& host, int admin_port, int rpc_port,
                                 const std::string& token);

// The port to bind: a server asked for a free RPC port is usually one of
// several on the host (tests, local clusters), so the default admin port
// turns into "pick a free one" too.
int EffectiveAdminPort(int rpc_port, int admin_port, int default_admin_port);

}  // namespace mooncake
