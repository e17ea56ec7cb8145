#pragma once

// Runs the mooncake-bench binary for the bench tests: bounded by timeout(1),
// stdout and stderr kept apart.

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace mooncake::testing {

struct BenchRun {
  int status = -1;
  std::string out;
  std::string err;
};

// MOONCAKE_BENCH_BIN with `args` (each single-quoted); stderr goes through
// `err_path`, which is removed afterwards.
inline BenchRun RunBenchBinary(const std::vector<std::string>& args,
                               const std::filesystem::path& err_path) {
  std::string command = "timeout 120 " + std::string(MOONCAKE_BENCH_BIN);
  for (const auto& arg : args) command += " '" + arg + "'";
  command += " 2>" + err_path.string();
  BenchRun run;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return run;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), pipe)) > 0) run.out.append(buf.data(), n);
  int raw = pclose(pipe);
  run.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
  std::ifstream err(err_path);
  std::stringstream text;
  text << err.rdbuf();
  run.err = text.str();
  std::error_code ec;
  std::filesystem::remove(err_path, ec);
  return run;
}

}  // namespace mooncake::testing
