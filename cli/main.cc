// mooncake-cli: put, get, probe and remove objects; inspect nodes and stats.

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <thrift/TOutput.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "cli/cli_args.h"
#include "cli/commands.h"
#include "common/file_read.h"
#include "common/stdio_fds.h"

namespace {

// stdout carries raw object bytes, so library logs go to stderr, and only
// warnings: every failure already prints its own one-line error. Thrift's
// own connect messages would repeat that line, so they are dropped.
void QuietLibraries() {
  auto logger = spdlog::stderr_color_mt("mooncake-cli");
  logger->set_level(spdlog::level::warn);
  spdlog::set_default_logger(logger);
  apache::thrift::GlobalOutput.setOutputFunction([](const char*) {});
}

// ~/.config/mooncake/cli.toml, honouring XDG_CONFIG_HOME; empty if no home.
std::string DefaultConfigPath() {
  if (const char* xdg = std::getenv("XDG_CONFIG_HOME"); xdg && *xdg) {
    return std::string(xdg) + "/mooncake/cli.toml";
  }
  const char* home = std::getenv("HOME");
  return home && *home ? std::string(home) + "/.config/mooncake/cli.toml" : std::string();
}

// The config file, or its first kMaxConfigFileBytes + 1 bytes: ParseCliConfig
// refuses a longer one (`--config /dev/zero` must not read forever).
std::optional<std::string> ReadConfigFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::string text = mooncake::ReadAtMost(in, mooncake::kMaxConfigFileBytes);
  if (in.bad()) return std::nullopt;
  return text;
}

}  // namespace

int main(int argc, char** argv) {
  // Before anything opens a file or socket. A closed stdout or stdin stays
  // unusable (EBADF) rather than becoming /dev/null: `get K >&-` must fail
  // as writing a closed stdout does, not report a value it threw away.
  mooncake::ReopenClosedStdio(mooncake::ClosedStdioAs::kUnusable);
  std::vector<std::string> args(argv + 1, argv + argc);
  mooncake::cli::CliEnvironment env;
  env.env_master = std::getenv("MOONCAKE_MASTER");
  env.env_etcd = std::getenv("MOONCAKE_ETCD");
  env.env_master_shards = std::getenv("MOONCAKE_MASTER_SHARDS");
  env.default_config_path = DefaultConfigPath();
  env.read_file = ReadConfigFile;
  auto outcome = mooncake::cli::ParseCli(args, env);
  if (!outcome.command) {
    std::fputs(outcome.out.c_str(), stdout);
    std::fputs(outcome.err.c_str(), stderr);
    return outcome.exit_code;
  }
  QuietLibraries();
  return mooncake::cli::RunCommand(*outcome.command);
}
