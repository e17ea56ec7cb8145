// mooncake-cli: put, get, probe and remove objects; inspect nodes and stats.

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <thrift/TOutput.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "cli/cli_args.h"
#include "cli/commands.h"

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

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  auto outcome = mooncake::cli::ParseCli(args, std::getenv("MOONCAKE_MASTER"));
  if (!outcome.command) {
    std::fputs(outcome.out.c_str(), stdout);
    std::fputs(outcome.err.c_str(), stderr);
    return outcome.exit_code;
  }
  QuietLibraries();
  return mooncake::cli::RunCommand(*outcome.command);
}
