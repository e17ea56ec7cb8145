#include "cli/cli_args.h"

#include <gtest/gtest.h>

#include <map>
#include <optional>
#include <string>
#include <vector>

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
  // ILLEGAL_CLIENT is also a write the worker discarded as abandoned: the
  // line must not blame another writer only.
  EXPECT_EQ(ErrorLine("put", ErrorCode::kIllegalClient, context),
            "error: put failed: ILLEGAL_CLIENT (-601): this write of key 'k' was pre-empted by "
            "another write of it, or discarded as not finished within the worker's "
            "--put-start-discard-timeout-ms");
}

TEST(CliArgsTest, UpsertTakesTheSameSourcesAndPlacementFlags) {
  auto arg = Parse({"upsert", "k", "v2", "--tier", "ssd", "--soft-pin-ttl-ms", "60000"});
  ASSERT_TRUE(arg.command) << arg.err;
  EXPECT_EQ(arg.command->kind, CommandKind::kUpsert);
  EXPECT_EQ(arg.command->value, "v2");
  EXPECT_EQ(arg.command->tier, "ssd");
  EXPECT_TRUE(arg.command->soft_pin);  // implied by the TTL
  EXPECT_EQ(arg.command->soft_pin_ttl_ms, 60000);
  auto file = Parse({"upsert", "k", "--file", "/tmp/x"});
  ASSERT_TRUE(file.command);
  EXPECT_EQ(file.command->source, ValueSource::kFile);
  auto dash = Parse({"upsert", "k", "-"});
  ASSERT_TRUE(dash.command);
  EXPECT_EQ(dash.command->source, ValueSource::kStdin);
  auto put = Parse({"put", "k", "v", "--tier", "dram"});
  ASSERT_TRUE(put.command);
  EXPECT_EQ(put.command->tier, "dram");
  EXPECT_FALSE(put.command->soft_pin);
}

TEST(CliArgsTest, ExistPrefetchAndInspect) {
  auto exist = Parse({"exist", "k", "--prefetch"});
  ASSERT_TRUE(exist.command);
  EXPECT_EQ(exist.command->kind, CommandKind::kExist);
  EXPECT_TRUE(exist.command->prefetch);
  EXPECT_FALSE(Parse({"exist", "k"}).command->prefetch);
  auto inspect = Parse({"inspect", "k", "--json"});
  ASSERT_TRUE(inspect.command);
  EXPECT_EQ(inspect.command->kind, CommandKind::kInspect);
  EXPECT_EQ(inspect.command->key, "k");
  EXPECT_TRUE(inspect.command->json);
}

TEST(CliArgsTest, NewUsageErrorsExitTwo) {
  for (const auto& args : std::vector<std::vector<std::string>>{
           {"upsert", "k"},
           {"upsert", "k", ""},
           {"put", "k", "v", "--tier", "tape"},
           {"put", "k", "v", "--soft-pin-ttl-ms", "0"},
           {"put", "k", "v", "--soft-pin-ttl-ms", "86400001"},
           {"put", "k", "v", "--hard-pin", "--soft-pin-ttl-ms", "5"},
           {"inspect"},
       }) {
    auto outcome = Parse(args);
    EXPECT_FALSE(outcome.command);
    EXPECT_EQ(outcome.exit_code, kExitUsage);
  }
}

TEST(CliArgsTest, EverySubcommandHelpHasAnExample) {
  for (const char* sub :
       {"put", "upsert", "get", "exist", "remove", "inspect", "locate", "stats", "nodes"}) {
    auto outcome = Parse({sub, "--help"});
    EXPECT_EQ(outcome.exit_code, kExitOk) << sub;
    EXPECT_NE(outcome.out.find(std::string("mooncake-cli ") + sub), std::string::npos)
        << sub << ":\n"
        << outcome.out;
  }
}

CliEnvironment EnvWithFiles(const char* env_master, std::map<std::string, std::string> files) {
  CliEnvironment env;
  env.env_master = env_master;
  env.default_config_path = "/home/u/.config/mooncake/cli.toml";
  env.read_file = [files](const std::string& path) -> std::optional<std::string> {
    auto it = files.find(path);
    if (it == files.end()) return std::nullopt;
    return it->second;
  };
  return env;
}

TEST(CliArgsTest, MasterPrecedenceFlagEnvFileDefault) {
  std::map<std::string, std::string> files = {
      {"/home/u/.config/mooncake/cli.toml", "# cli\nmaster = \"file-host:1111\"\n"},
      {"/etc/other.toml", "\nmaster = 'other-host:2222'  # comment\n"}};
  auto from_file = ParseCli({"nodes"}, EnvWithFiles(nullptr, files));
  ASSERT_TRUE(from_file.command) << from_file.err;
  EXPECT_EQ(from_file.command->master_host, "file-host");
  EXPECT_EQ(from_file.command->master_port, 1111);
  auto explicit_file =
      ParseCli({"--config", "/etc/other.toml", "nodes"}, EnvWithFiles(nullptr, files));
  ASSERT_TRUE(explicit_file.command) << explicit_file.err;
  EXPECT_EQ(explicit_file.command->master_host, "other-host");
  auto from_env = ParseCli({"nodes"}, EnvWithFiles("env-host:3333", files));
  ASSERT_TRUE(from_env.command);
  EXPECT_EQ(from_env.command->master_host, "env-host");
  auto from_flag =
      ParseCli({"--master", "flag-host:4444", "nodes"}, EnvWithFiles("env-host:3333", files));
  ASSERT_TRUE(from_flag.command);
  EXPECT_EQ(from_flag.command->master_host, "flag-host");
  auto fallback = ParseCli({"nodes"}, EnvWithFiles(nullptr, {}));
  ASSERT_TRUE(fallback.command);
  EXPECT_EQ(fallback.command->master_host, "127.0.0.1");
  EXPECT_EQ(fallback.command->master_port, 50051);
  // A config file named on the command line must exist.
  auto missing = ParseCli({"--config", "/nope.toml", "nodes"}, EnvWithFiles(nullptr, files));
  EXPECT_FALSE(missing.command);
  EXPECT_EQ(missing.exit_code, kExitUsage);
}

// --master, --etcd and --master-shards are one setting, by flag >
// environment > file: MOONCAKE_MASTER beats the file's etcd and
// master-shards keys as it beats its master key. The file's etcd won, and
// `MOONCAKE_MASTER=staging:50051 mooncake-cli remove K` went to production.
TEST(CliArgsTest, TheEnvironmentsMasterBeatsTheFilesEtcdAndShards) {
  const std::string path = "/home/u/.config/mooncake/cli.toml";
  for (const std::string& text : {std::string("etcd = \"http://e:2379\"\n"),
                                  std::string("master-shards = \"127.0.0.1:1,127.0.0.1:2\"\n")}) {
    auto outcome = ParseCli({"nodes"}, EnvWithFiles("10.0.0.1:50051", {{path, text}}));
    ASSERT_TRUE(outcome.command) << text << outcome.err;
    EXPECT_EQ(outcome.command->etcd, "") << text;
    EXPECT_EQ(outcome.command->master_shards, "") << text;
    EXPECT_EQ(outcome.command->master_host, "10.0.0.1") << text;
    EXPECT_EQ(outcome.command->master_port, 50051) << text;
    // Without MOONCAKE_MASTER the file's key is used.
    auto file_only = ParseCli({"nodes"}, EnvWithFiles(nullptr, {{path, text}}));
    ASSERT_TRUE(file_only.command) << file_only.err;
    EXPECT_NE(MasterLabel(*file_only.command), "127.0.0.1:50051") << text;
  }
  // MOONCAKE_ETCD beats the file's master, as before.
  CliEnvironment env = EnvWithFiles(nullptr, {{path, "master = \"h:1\"\n"}});
  env.env_etcd = "http://e:2379";
  auto etcd = ParseCli({"nodes"}, env);
  ASSERT_TRUE(etcd.command) << etcd.err;
  EXPECT_EQ(etcd.command->etcd, "http://e:2379");
  // An unused master address is not checked: MOONCAKE_MASTER=bogus with
  // --etcd is no usage error.
  auto unused = ParseCli({"--etcd", "http://e:2379", "nodes"}, EnvWithFiles("bogus", {}));
  ASSERT_TRUE(unused.command) << unused.err;
  EXPECT_EQ(unused.command->etcd, "http://e:2379");
  auto used = ParseCli({"nodes"}, EnvWithFiles("bogus", {}));
  EXPECT_EQ(used.exit_code, kExitUsage);
}

// `--cluster-name ""` fell back to the file's name or `mooncake` silently;
// it is a usage error now, as on the master and worker. A bad name from the
// file is reported as the file's key, not as the flag.
TEST(CliArgsTest, AnEmptyClusterNameFlagIsAUsageErrorAndTheFileKeyIsNamedAsSuch) {
  auto env = EnvWithFiles(nullptr, {{"/etc/c.toml", "cluster-name = \"prod\"\n"}});
  auto from_file = ParseCli({"--config", "/etc/c.toml", "--etcd", "http://e:2379", "nodes"}, env);
  ASSERT_TRUE(from_file.command) << from_file.err;
  EXPECT_EQ(from_file.command->cluster_name, "prod");

  auto empty = ParseCli(
      {"--config", "/etc/c.toml", "--etcd", "http://e:2379", "--cluster-name", "", "nodes"}, env);
  EXPECT_FALSE(empty.command);
  EXPECT_EQ(empty.exit_code, kExitUsage);
  EXPECT_NE(empty.err.find("--cluster-name must be non-empty"), std::string::npos) << empty.err;
  auto bare = Parse({"--etcd", "http://e:2379", "--cluster-name", "", "nodes"});
  EXPECT_EQ(bare.exit_code, kExitUsage) << bare.err;

  auto empty_key = ParseCli({"--config", "/etc/e.toml", "--etcd", "http://e:2379", "nodes"},
                            EnvWithFiles(nullptr, {{"/etc/e.toml", "cluster-name = \"\"\n"}}));
  EXPECT_EQ(empty_key.exit_code, kExitUsage);
  EXPECT_NE(empty_key.err.find("config file: cluster-name must be non-empty"), std::string::npos)
      << empty_key.err;
  // So is a bad master from the environment or the file.
  auto env_master = ParseCli({"nodes"}, EnvWithFiles("bogus", {}));
  EXPECT_NE(env_master.err.find("MOONCAKE_MASTER must be HOST:PORT, got 'bogus'"),
            std::string::npos)
      << env_master.err;
  auto file_master = ParseCli({"--config", "/etc/m.toml", "nodes"},
                              EnvWithFiles(nullptr, {{"/etc/m.toml", "master = \"nohost\"\n"}}));
  EXPECT_NE(file_master.err.find("config file: master must be HOST:PORT, got 'nohost'"),
            std::string::npos)
      << file_master.err;
}

TEST(CliArgsTest, ConfigFileParsing) {
  std::string problem;
  auto full = ParseCliConfig(
      "# cli\nmaster = \"h:1\"\nnode = 'w1'  # comment\njson = true\ntls-cert = \"c\"\n"
      "tls-key = \"k\"\ntls-ca = \"a\"\n",
      &problem);
  ASSERT_TRUE(full) << problem;
  EXPECT_EQ(full->master, "h:1");
  EXPECT_EQ(full->node, "w1");
  EXPECT_EQ(full->json, true);
  EXPECT_EQ(full->tls_cert, "c");
  EXPECT_EQ(full->tls_key, "k");
  EXPECT_EQ(full->tls_ca, "a");
  auto empty = ParseCliConfig("# nothing\n\n", &problem);
  ASSERT_TRUE(empty) << problem;
  EXPECT_EQ(empty->master, std::nullopt);
  EXPECT_EQ(empty->json, std::nullopt);
  EXPECT_EQ(ParseCliConfig("master = \"\"", &problem)->master, "");
}

// CLI11 2.1 cut a value at its first '#', quoted or not: `node = "gpu#7"`
// became `"gpu`.
TEST(CliArgsTest, AHashInsideQuotesInTheConfigFileIsPartOfTheValue) {
  std::string problem;
  auto config = ParseCliConfig(
      "master = '10.0.0.1:7000'  # the master\nnode = \"gpu#7\" # a comment\n"
      "tls-ca = \"/etc/ca#2.crt\"\n",
      &problem);
  ASSERT_TRUE(config) << problem;
  EXPECT_EQ(config->master, "10.0.0.1:7000");
  EXPECT_EQ(config->node, "gpu#7");
  EXPECT_EQ(config->tls_ca, "/etc/ca#2.crt");

  // A string left open is a usage error naming the file and the line.
  EXPECT_FALSE(ParseCliConfig("master = \"h:1\"\nnode = \"gpu#7\n", &problem));
  EXPECT_NE(problem.find("line 2: the string opened with \" is not closed"), std::string::npos)
      << problem;
  auto outcome = ParseCli({"--config", "/etc/open.toml", "nodes"},
                          EnvWithFiles(nullptr, {{"/etc/open.toml", "node = \"gpu#7\n"}}));
  EXPECT_FALSE(outcome.command);
  EXPECT_EQ(outcome.exit_code, kExitUsage);
  EXPECT_NE(outcome.err.find("config file '/etc/open.toml': line 1:"), std::string::npos)
      << outcome.err;
}

// cli.toml shares the binaries' reader (common/config_file.h): "..." values
// decode TOML escapes, '...' values are kept as written.
TEST(CliArgsTest, TheConfigFileDecodesEscapesInDoubleQuotesOnly) {
  std::string problem;
  auto config = ParseCliConfig(
      "node = \"w\\\\1\"\ntls-ca = '/etc/w\\\\1.crt'\ntls-cert = \"/etc/a \\\"b\\\".crt\"\n",
      &problem);
  ASSERT_TRUE(config) << problem;
  EXPECT_EQ(config->node, "w\\1");
  EXPECT_EQ(config->tls_ca, "/etc/w\\\\1.crt");
  EXPECT_EQ(config->tls_cert, "/etc/a \"b\".crt");

  auto outcome = ParseCli({"--config", "/etc/esc.toml", "nodes"},
                          EnvWithFiles(nullptr, {{"/etc/esc.toml", "node = \"w\\1\"\n"}}));
  EXPECT_FALSE(outcome.command);
  EXPECT_EQ(outcome.exit_code, kExitUsage);
  EXPECT_NE(outcome.err.find("config file '/etc/esc.toml': line 1: invalid escape \\1"),
            std::string::npos)
      << outcome.err;
}

// mooncake-cli reads at most 1 MiB and a byte of a config file; a larger one
// (a model named by mistake, /dev/zero) is a usage error naming it.
TEST(CliArgsTest, AConfigFileOverOneMebibyteIsAUsageError) {
  std::string problem;
  EXPECT_FALSE(ParseCliConfig(std::string((1 << 20) + 1, '#'), &problem));
  EXPECT_NE(problem.find("holds more than 1.0 MiB"), std::string::npos) << problem;
  auto outcome =
      ParseCli({"--config", "/etc/big.toml", "nodes"},
               EnvWithFiles(nullptr, {{"/etc/big.toml", std::string(2 << 20, '#') + "\n"}}));
  EXPECT_FALSE(outcome.command);
  EXPECT_EQ(outcome.exit_code, kExitUsage);
  EXPECT_NE(outcome.err.find("config file '/etc/big.toml': holds more than 1.0 MiB"),
            std::string::npos)
      << outcome.err;
  // At the limit it is read as before.
  auto at_limit = ParseCliConfig(std::string((1 << 20) - 16, '#') + "\nnode = \"w\"\n", &problem);
  ASSERT_TRUE(at_limit) << problem;
  EXPECT_EQ(at_limit->node, "w");
}

TEST(CliArgsTest, ConfigFileRejectsUnknownKeysYamlAndGarbage) {
  for (auto [text, expected] : std::vector<std::pair<std::string, std::string>>{
           {"masters = \"x:1\"\n", "unknown key 'masters'"},
           {"master = \"h:1\"\nmaster-port = 5\n", "unknown key 'master-port'"},
           {"master: \"h:1\"\n", "line 1 is not `key = value`"},
           {"---\nmaster: h:1\n", "line 1"},
           {"[cli]\nmaster = \"h:1\"\n", "sections are not supported"},
           {"json = maybe\n", "json must be true or false"},
           {std::string("\x7f"
                        "ELF\x01\x00\x00garbage",
                        13),
            "line 1"}}) {
    std::string problem;
    EXPECT_FALSE(ParseCliConfig(text, &problem)) << text;
    EXPECT_NE(problem.find(expected), std::string::npos) << problem;
    EXPECT_EQ(problem.find('\0'), std::string::npos) << "a NUL byte in the message";
  }
  // Through ParseCli: a usage error naming the file and the key.
  CliEnvironment env = EnvWithFiles(nullptr, {{"/etc/bad.toml", "mastr = \"h:1\"\n"}});
  auto outcome = ParseCli({"--config", "/etc/bad.toml", "nodes"}, env);
  EXPECT_FALSE(outcome.command);
  EXPECT_EQ(outcome.exit_code, kExitUsage);
  EXPECT_NE(outcome.err.find("/etc/bad.toml"), std::string::npos) << outcome.err;
  EXPECT_NE(outcome.err.find("'mastr'"), std::string::npos) << outcome.err;
  // The default file too: a broken one is never silently ignored.
  auto broken_default = ParseCli(
      {"nodes"}, EnvWithFiles(nullptr, {{"/home/u/.config/mooncake/cli.toml", "master: h:1\n"}}));
  EXPECT_FALSE(broken_default.command);
  EXPECT_EQ(broken_default.exit_code, kExitUsage);
}

TEST(CliArgsTest, ConfigFileNodeAndJsonYieldToFlags) {
  auto env = EnvWithFiles(nullptr, {{"/home/u/.config/mooncake/cli.toml",
                                     "master = \"h:1\"\nnode = \"w-file\"\njson = true\n"}});
  auto from_file = ParseCli({"nodes"}, env);
  ASSERT_TRUE(from_file.command) << from_file.err;
  EXPECT_EQ(from_file.command->node, "w-file");
  EXPECT_TRUE(from_file.command->json);
  auto from_flag = ParseCli({"--node", "w-flag", "nodes"}, env);
  ASSERT_TRUE(from_flag.command) << from_flag.err;
  EXPECT_EQ(from_flag.command->node, "w-flag");
  // json = true in the file makes usage errors JSON too.
  auto usage = ParseCli({"put", "k"}, env);
  EXPECT_EQ(usage.exit_code, kExitUsage);
  EXPECT_NE(usage.out.find("\"code\":\"USAGE\""), std::string::npos) << usage.out;
}

TEST(CliArgsTest, JsonInTheConfigFileMakesEveryUsageErrorJson) {
  // Given json = true in the default file or in a file named by --config,
  // when the arguments are wrong in any way the parser itself catches
  // (no key, an unknown flag or subcommand, a bad --tier, a duplicated
  // option), expect one JSON object on stdout, as README promises scripts.
  const std::map<std::string, std::string> files = {
      {"/home/u/.config/mooncake/cli.toml", "json = true\n"}, {"/etc/json.toml", "json = true\n"}};
  for (const auto& args :
       std::vector<std::vector<std::string>>{{"exist"},
                                             {"--bogus", "exist", "k"},
                                             {"frob"},
                                             {"put", "k", "v", "--tier", "tape"},
                                             {"get", "k", "-o", "a", "-o", "b"},
                                             {"--config", "/etc/json.toml", "exist"},
                                             {"--config=/etc/json.toml", "frob"}}) {
    CliEnvironment env = EnvWithFiles(nullptr, files);
    if (args.front().starts_with("--config")) env.default_config_path.clear();
    auto outcome = ParseCli(args, env);
    std::string joined;
    for (const auto& a : args) joined += a + " ";
    EXPECT_FALSE(outcome.command) << joined;
    EXPECT_EQ(outcome.exit_code, kExitUsage) << joined;
    EXPECT_TRUE(outcome.out.starts_with("{\"code\":\"USAGE\",\"error\":\""))
        << joined << ": stdout " << outcome.out;
    EXPECT_NE(outcome.err.find("error: usage:"), std::string::npos) << outcome.err;
  }
  // No file, or one without json = true: no JSON.
  EXPECT_EQ(ParseCli({"exist"}, EnvWithFiles(nullptr, {})).out, "");
  EXPECT_EQ(
      ParseCli({"exist"},
               EnvWithFiles(nullptr, {{"/home/u/.config/mooncake/cli.toml", "json = false\n"}}))
          .out,
      "");
}

TEST(CliArgsTest, FlagsOnTheCommandLineOverrideTheFilesJsonAndNode) {
  auto env = EnvWithFiles(nullptr, {{"/home/u/.config/mooncake/cli.toml",
                                     "master = \"h:1\"\nnode = \"w-file\"\njson = true\n"}});
  // --json=false turns the file's json = true off, for a command and for a
  // usage error alike.
  auto plain = ParseCli({"--json=false", "nodes"}, env);
  ASSERT_TRUE(plain.command) << plain.err;
  EXPECT_FALSE(plain.command->json);
  EXPECT_EQ(ParseCli({"--json=false", "exist"}, env).out, "");
  EXPECT_EQ(ParseCli({"--json=false", "put", "k"}, env).out, "");
  // --node "" clears the file's node: stats then covers every node.
  auto all_nodes = ParseCli({"--node", "", "stats"}, env);
  ASSERT_TRUE(all_nodes.command) << all_nodes.err;
  EXPECT_EQ(all_nodes.command->node, "");
}

TEST(CliArgsTest, UsageErrorsWithJsonPrintOneJsonObject) {
  for (const auto& args :
       std::vector<std::vector<std::string>>{{"--json"},
                                             {"--json", "bogus"},
                                             {"--json", "put", "k"},
                                             {"get", "--json"},
                                             {"--json", "--master", "nohost", "nodes"},
                                             {"--json", "-h", "h", "nodes"}}) {
    auto outcome = Parse(args);
    EXPECT_FALSE(outcome.command);
    EXPECT_EQ(outcome.exit_code, kExitUsage);
    EXPECT_TRUE(outcome.out.starts_with("{\"code\":\"USAGE\",\"error\":\"")) << outcome.out;
    EXPECT_TRUE(outcome.out.ends_with("\"ok\":false}\n")) << outcome.out;
    EXPECT_NE(outcome.err.find("error: usage:"), std::string::npos) << outcome.err;
  }
  // Without --json: no JSON.
  EXPECT_EQ(Parse({"put", "k"}).out, "");
  EXPECT_EQ(UsageJson("a \"b\""), "{\"code\":\"USAGE\",\"error\":\"a \\\"b\\\"\",\"ok\":false}");
}

TEST(CliArgsTest, DashHIsNotHelp) {
  for (const auto& args : std::vector<std::vector<std::string>>{
           {"-h"}, {"-h", "10.0.0.1", "nodes"}, {"get", "k", "-h"}, {"nodes", "-h"}}) {
    auto outcome = Parse(args);
    EXPECT_FALSE(outcome.command);
    EXPECT_EQ(outcome.exit_code, kExitUsage);
    EXPECT_NE(outcome.err.find("use --master HOST:PORT; --help for help"), std::string::npos)
        << outcome.err;
  }
  auto help = Parse({"--help"});
  EXPECT_EQ(help.exit_code, kExitOk);
  EXPECT_NE(help.out.find("--help"), std::string::npos);
  EXPECT_EQ(help.out.find("-h,"), std::string::npos) << help.out;
}

TEST(CliArgsTest, VersionPrintsTheVersionLine) {
  for (const auto& args :
       std::vector<std::vector<std::string>>{{"--version"}, {"--master", "h:1", "--version"}}) {
    auto outcome = Parse(args);
    EXPECT_FALSE(outcome.command);
    EXPECT_EQ(outcome.exit_code, kExitOk);
    EXPECT_TRUE(outcome.out.starts_with("mooncake-cli ")) << outcome.out;
    EXPECT_NE(outcome.out.find("commit"), std::string::npos) << outcome.out;
    EXPECT_EQ(outcome.err, "");
  }
}

TEST(CliArgsTest, VersionAfterDoubleDashOrAsAnOptionValueIsNotTheOption) {
  // After `--` it is the value: a script's `put k -- --version` must store it,
  // not print the version and exit 0 having stored nothing.
  auto after_dashes = Parse({"put", "k", "--", "--version"});
  ASSERT_TRUE(after_dashes.command) << after_dashes.out << after_dashes.err;
  EXPECT_EQ(after_dashes.command->kind, CommandKind::kPut);
  EXPECT_EQ(after_dashes.command->source, ValueSource::kArgument);
  EXPECT_EQ(after_dashes.command->value, "--version");

  // The value of an option that takes one: the file to read or write.
  auto file = Parse({"put", "k", "--file", "--version"});
  ASSERT_TRUE(file.command) << file.out << file.err;
  EXPECT_EQ(file.command->source, ValueSource::kFile);
  EXPECT_EQ(file.command->path, "--version");
  auto output = Parse({"get", "k", "-o", "--version"});
  ASSERT_TRUE(output.command) << output.out << output.err;
  EXPECT_EQ(output.command->path, "--version");

  // Where it is an option, after a subcommand too, it still prints the version.
  auto option = Parse({"get", "k", "--version"});
  EXPECT_FALSE(option.command);
  EXPECT_EQ(option.exit_code, kExitOk);
  EXPECT_TRUE(option.out.starts_with("mooncake-cli ")) << option.out;
}

TEST(CliArgsTest, ZeroCopyWritesAndLocate) {
  auto put = Parse({"--node", "w1", "put", "k", "--file", "v.bin", "--zero-copy"});
  ASSERT_TRUE(put.command) << put.err;
  EXPECT_TRUE(put.command->zero_copy);
  EXPECT_EQ(put.command->node, "w1");
  auto upsert = Parse({"upsert", "k", "v", "--zero-copy", "--tier", "vram"});
  ASSERT_TRUE(upsert.command) << upsert.err;
  EXPECT_TRUE(upsert.command->zero_copy);
  EXPECT_FALSE(Parse({"put", "k", "v"}).command->zero_copy);
  // The SSD tier cannot be written in place.
  auto ssd = Parse({"put", "k", "v", "--zero-copy", "--tier", "ssd"});
  EXPECT_FALSE(ssd.command);
  EXPECT_EQ(ssd.exit_code, kExitUsage);
  EXPECT_NE(ssd.err.find("--zero-copy"), std::string::npos) << ssd.err;

  auto locate = Parse({"locate", "k", "--json"});
  ASSERT_TRUE(locate.command) << locate.err;
  EXPECT_EQ(locate.command->kind, CommandKind::kLocate);
  EXPECT_EQ(locate.command->key, "k");
  EXPECT_EQ(Parse({"locate"}).exit_code, kExitUsage);
}

}  // namespace
}  // namespace mooncake::cli
