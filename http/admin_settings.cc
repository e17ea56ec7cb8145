#include "http/admin_settings.h"

#include <CLI/CLI.hpp>
#include <algorithm>

namespace mooncake {
namespace {

// Tokens travel in an HTTP header: visible ASCII only, no spaces.
bool IsValidToken(std::string_view token) {
  return std::ranges::all_of(token, [](char c) { return c > ' ' && c < 127; });
}

}  // namespace

void AddAdminOptions(CLI::App& app, const AdminFlags& flags) {
  app.add_option("--admin-host", flags.host, "Address to bind the REST admin server to")
      ->capture_default_str();
  app.add_option("--admin-port", flags.port,
                 "REST admin port (health, stats, /metrics); 0 picks a free port, -1 disables "
                 "it. Left at the default while --port is 0, a free port is picked")
      ->capture_default_str();
  app.add_option("--admin-token", flags.token,
                 "Bearer token required by mutating admin requests (reads stay open)");
  app.add_option("--admin-token-file", flags.token_file,
                 "Read the admin token from this file (trimmed); --admin-token wins")
      ->type_name("FILE");
}

std::string AdminSettingsProblem(const std::string& host, int admin_port, int rpc_port,
                                 const std::string& token) {
  if (admin_port < -1 || admin_port > 65535) {
    return "--admin-port must be in -1..65535, got " + std::to_string(admin_port);
  }
  if (admin_port > 0 && admin_port == rpc_port) {
    return "--admin-port must differ from --port, both are " + std::to_string(rpc_port);
  }
  if (admin_port >= 0 && host.empty()) return "--admin-host must not be empty";
  if (!IsValidToken(token)) return "--admin-token must be visible ASCII characters without spaces";
  return {};
}

int EffectiveAdminPort(int rpc_port, int admin_port, int default_admin_port) {
  return rpc_port == 0 && admin_port == default_admin_port ? 0 : admin_port;
}

}  // namespace mooncake
