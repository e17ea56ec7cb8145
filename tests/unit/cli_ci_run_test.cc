// The command line scripts/test.sh gives ctest (and so `.ci/run [extra
// ctest args]`, which passes its arguments to test.sh): extra arguments
// arrive after CTEST_ARGS, and without any the command line is as it always
// was. test.sh runs against a fake build tree whose tools/bin/ctest (first
// on test.sh's PATH) records its arguments; nothing is built or installed.

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace mooncake::testing {
namespace {

namespace fs = std::filesystem;

class CliCiRunTest : public ::testing::Test {
 protected:
  void SetUp() override {
    build_ = fs::temp_directory_path() / ("cli_ci_run_test_" + std::to_string(getpid()));
    fs::create_directories(build_ / "tools/bin");
    // Configured already, with the tests on: test.sh does not run cmake.
    std::ofstream(build_ / "CMakeCache.txt")
        << "CMAKE_BUILD_TYPE:STRING=RelWithDebInfo\nMOONCAKE_BUILD_TESTS:BOOL=ON\n";
    const fs::path ctest = build_ / "tools/bin/ctest";
    std::ofstream(ctest) << "#!/bin/sh\nprintf '%s\\n' \"$*\" > \"$(dirname \"$0\")/args\"\n";
    fs::permissions(ctest, fs::perms::owner_all);
  }
  void TearDown() override { fs::remove_all(build_); }

  // The arguments the fake ctest got from `scripts/test.sh ARGS` (test.sh's
  // exit status must be 0).
  std::string CtestArgs(const std::string& args, const std::string& ctest_args_env = "") {
    const fs::path script = fs::path(__FILE__).parent_path() / "../../scripts/test.sh";
    std::string command = "env SKIP_DEPS=1 SKIP_BUILD=1 JOBS=2 BUILD_DIR='" + build_.string() +
                          "' CTEST_ARGS='" + ctest_args_env + "' bash '" + script.string() + "' " +
                          args + " >/dev/null 2>&1";
    EXPECT_EQ(std::system(command.c_str()), 0) << command;
    std::ifstream in(build_ / "tools/bin/args");
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  }

  fs::path build_;
};

TEST_F(CliCiRunTest, ExtraArgumentsReachCtestAndNoneChangeNothing) {
  const std::string base =
      "--test-dir " + build_.string() + " --output-on-failure --no-tests=error -j2 --timeout 600";
  // Without arguments: the command line as before.
  EXPECT_EQ(CtestArgs(""), base + "\n");
  // `.ci/run -R CliTest -L unit` -> test.sh -R CliTest -L unit: they arrive.
  EXPECT_EQ(CtestArgs("-R CliTest -L unit"), base + " -R CliTest -L unit\n");
  // After CTEST_ARGS, which still works.
  EXPECT_EQ(CtestArgs("-E Flaky", "-L integration"), base + " -L integration -E Flaky\n");
}

}  // namespace
}  // namespace mooncake::testing
