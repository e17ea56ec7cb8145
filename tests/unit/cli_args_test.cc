#include "cli/cli_args.h"

#include <gtest/gtest.h>

namespace mooncake::cli {
namespace {

ParseOutcome Parse(std::vector<std::string> args, const char* env = nullptr) {
  return ParseCli(args, env);
}

TEST(CliArgsTest, PutWithValueUsesDefaultMaster) {
  auto outcome = Parse({"put", "k", "hello"});
  ASSERT_TRUE(outcome.command) << outcome.err;
  EXPECT_EQ(outcome.command->kind, CommandKind::kPut);
  EXPECT_EQ(outcome.command->master_host, "127.0.0.1");
  EXPECT_EQ(outcome.command->master_port, 50051);
  EXPECT_EQ(outcome.command->source, ValueSource::kArgument);
  EXPECT_EQ(outcome.command->value, "hello");
}

TEST(CliArgsTest, MasterComesFromEnvUnlessFlagGiven) {
  auto from_env = Parse({"nodes"}, "10.0.0.2:6000");
  ASSERT_TRUE(from_env.command);
  EXPECT_EQ(from_env.command->master_host, "10.0.0.2");
  EXPECT_EQ(from_env.command->master_port, 6000);
  auto from_flag = Parse({"--master", "h:7", "nodes"}, "10.0.0.2:6000");
  ASSERT_TRUE(from_flag.command);
  EXPECT_EQ(from_flag.command->master_host, "h");
  EXPECT_EQ(from_flag.command->master_port, 7);
}

TEST(CliArgsTest, GlobalOptionsMayFollowTheSubcommand) {
  auto outcome = Parse({"stats", "--node", "n1", "--json"});
  ASSERT_TRUE(outcome.command) << outcome.err;
  EXPECT_EQ(outcome.command->kind, CommandKind::kStats);
  EXPECT_EQ(outcome.command->node, "n1");
  EXPECT_TRUE(outcome.command->json);
}

TEST(CliArgsTest, PutSources) {
  auto dash = Parse({"put", "k", "-"});
  ASSERT_TRUE(dash.command);
  EXPECT_EQ(dash.command->source, ValueSource::kStdin);
  auto file = Parse({"put", "k", "--file", "/tmp/x", "--hard-pin"});
  ASSERT_TRUE(file.command);
  EXPECT_EQ(file.command->source, ValueSource::kFile);
  EXPECT_EQ(file.command->path, "/tmp/x");
  EXPECT_TRUE(file.command->hard_pin);
}

TEST(CliArgsTest, UsageErrorsExitTwo) {
  for (const auto& args : std::vector<std::vector<std::string>>{
           {},
           {"bogus"},
           {"put", "k"},
           {"put", "k", "v", "--file", "f"},
           {"put", "", "v"},
           {"put", "k", ""},
           {"put", "k", "v", "--hard-pin", "--soft-pin"},
           {"--master", "nohost", "nodes"},
           {"--master", "h:70000", "nodes"},
           {"get"},
       }) {
    auto outcome = Parse(args);
    EXPECT_FALSE(outcome.command);
    EXPECT_EQ(outcome.exit_code, kExitUsage);
    EXPECT_NE(outcome.err.find("error: usage:"), std::string::npos);
  }
}

TEST(CliArgsTest, HelpExitsZeroWithExample) {
  auto outcome = Parse({"get", "--help"});
  EXPECT_FALSE(outcome.command);
  EXPECT_EQ(outcome.exit_code, kExitOk);
  EXPECT_NE(outcome.out.find("mooncake-cli get"), std::string::npos);
}

TEST(CliArgsTest, HostPort) {
  EXPECT_EQ(ParseHostPort("a:1"), (std::pair<std::string, int>{"a", 1}));
  EXPECT_EQ(ParseHostPort("[::1]:5"), (std::pair<std::string, int>{"::1", 5}));
  EXPECT_FALSE(ParseHostPort("::1:5"));
  EXPECT_FALSE(ParseHostPort("a:"));
  EXPECT_FALSE(ParseHostPort(":5"));
  EXPECT_FALSE(ParseHostPort("a:5x"));
}

TEST(CliArgsTest, FormatBytes) {
  EXPECT_EQ(FormatBytes(0), "0 B");
  EXPECT_EQ(FormatBytes(1023), "1023 B");
  EXPECT_EQ(FormatBytes(4096), "4.0 KiB");
  EXPECT_EQ(FormatBytes(3ull << 30), "3.0 GiB");
  EXPECT_EQ(FormatBytes((1ull << 20) - 1), "1.0 MiB");
}

TEST(CliArgsTest, ExitCodes) {
  EXPECT_EQ(ExitCodeFor(ErrorCode::kObjectNotFound), kExitNotFound);
  EXPECT_EQ(ExitCodeFor(ErrorCode::kInvalidKey), kExitUsage);
  EXPECT_EQ(ExitCodeFor(ErrorCode::kNodeNotFound), kExitUsage);
  EXPECT_EQ(ExitCodeFor(ErrorCode::kNoAvailableHandle), kExitServer);
  EXPECT_EQ(ExitCodeFor(ErrorCode::kRpcFail), kExitServer);
}

TEST(CliArgsTest, ErrorLineNamesTheCode) {
  ErrorContext context{"k", "", "h:1", 3ull << 30};
  EXPECT_EQ(ErrorLine("put", ErrorCode::kNoAvailableHandle, context),
            "error: put failed: NO_AVAILABLE_HANDLE (-200): no tier on the target node can hold "
            "3.0 GiB");
}

}  // namespace
}  // namespace mooncake::cli
