// mooncake-cli's TLS options: --tls-cert, --tls-key, --tls-ca on the command
// line (before or after the subcommand) and the tls-cert, tls-key, tls-ca
// keys of cli.toml, flags winning key by key. The parser checks that the
// named files can be read, so the tests name real (dummy) files in a temp
// dir; config files come through CliEnvironment::read_file.

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "cli/cli_args.h"

namespace mooncake::cli {
namespace {

constexpr char kDefaultConfig[] = "/home/u/.config/mooncake/cli.toml";

// Three readable files standing in for a certificate, its key and a CA.
class TlsFiles {
 public:
  TlsFiles() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "cli-tls-XXXXXX").string();
    if (mkdtemp(tmpl.data()) != nullptr) dir_ = tmpl;
    cert = Write("cert.pem");
    key = Write("key.pem");
    ca = Write("ca.pem");
    other_cert = Write("other-cert.pem");
  }
  ~TlsFiles() {
    std::error_code ec;
    if (!dir_.empty()) std::filesystem::remove_all(dir_, ec);
  }

  std::string cert, key, ca, other_cert;

 private:
  std::string Write(const std::string& name) {
    auto path = dir_ / name;
    std::ofstream(path) << "-----BEGIN DUMMY-----\n";
    return path.string();
  }
  std::filesystem::path dir_;
};

// An environment whose config files are `files` (path -> text).
CliEnvironment WithFiles(std::map<std::string, std::string> files) {
  CliEnvironment env;
  env.default_config_path = kDefaultConfig;
  env.read_file = [files =
                       std::move(files)](const std::string& path) -> std::optional<std::string> {
    auto it = files.find(path);
    if (it == files.end()) return std::nullopt;
    return it->second;
  };
  return env;
}

ParseOutcome Parse(const std::vector<std::string>& args, const CliEnvironment& env = {}) {
  return ParseCli(args, env);
}

class CliTlsArgsTest : public ::testing::Test {
 protected:
  std::vector<std::string> TlsFlags() const {
    return {"--tls-cert", files_.cert, "--tls-key", files_.key, "--tls-ca", files_.ca};
  }
  static std::vector<std::string> Concat(std::vector<std::string> a,
                                         const std::vector<std::string>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
  }

  TlsFiles files_;
};

TEST_F(CliTlsArgsTest, NoTlsAnywhereMeansPlainTcp) {
  auto outcome = Parse({"get", "k"}, WithFiles({{kDefaultConfig, "master = \"h:1\"\n"}}));
  ASSERT_TRUE(outcome.command) << outcome.err;
  EXPECT_FALSE(outcome.command->tls.enabled());
}

TEST_F(CliTlsArgsTest, FlagsBeforeTheSubcommand) {
  auto outcome = Parse(Concat(TlsFlags(), {"put", "k", "v"}));
  ASSERT_TRUE(outcome.command) << outcome.err;
  EXPECT_EQ(outcome.command->tls.cert_file, files_.cert);
  EXPECT_EQ(outcome.command->tls.key_file, files_.key);
  EXPECT_EQ(outcome.command->tls.ca_file, files_.ca);
  EXPECT_EQ(outcome.command->value, "v");
}

TEST_F(CliTlsArgsTest, FlagsAfterTheSubcommandAndWithEquals) {
  auto after = Parse(Concat({"get", "k"}, TlsFlags()));
  ASSERT_TRUE(after.command) << after.err;
  EXPECT_EQ(after.command->key, "k");
  EXPECT_EQ(after.command->tls.cert_file, files_.cert);
  EXPECT_EQ(after.command->tls.ca_file, files_.ca);

  auto equals = Parse(
      {"--tls-cert=" + files_.cert, "--tls-key=" + files_.key, "--tls-ca=" + files_.ca, "nodes"});
  ASSERT_TRUE(equals.command) << equals.err;
  EXPECT_EQ(equals.command->tls.key_file, files_.key);
}

TEST_F(CliTlsArgsTest, SomeButNotAllFilesIsAUsageError) {
  for (const auto& args : std::vector<std::vector<std::string>>{
           {"--tls-cert", files_.cert, "nodes"},
           {"--tls-cert", files_.cert, "--tls-key", files_.key, "nodes"},
           {"--tls-ca", files_.ca, "get", "k"},
       }) {
    auto outcome = Parse(args);
    EXPECT_FALSE(outcome.command);
    EXPECT_EQ(outcome.exit_code, kExitUsage);
    EXPECT_NE(outcome.err.find("all three"), std::string::npos) << outcome.err;
  }
}

TEST_F(CliTlsArgsTest, UnreadableFileIsAUsageErrorNamingIt) {
  auto outcome = Parse({"--tls-cert", files_.cert, "--tls-key", "/nonexistent/key.pem", "--tls-ca",
                        files_.ca, "nodes"});
  EXPECT_FALSE(outcome.command);
  EXPECT_EQ(outcome.exit_code, kExitUsage);
  EXPECT_NE(outcome.err.find("/nonexistent/key.pem"), std::string::npos) << outcome.err;
}

TEST_F(CliTlsArgsTest, DefaultConfigFileKeys) {
  auto env = WithFiles(
      {{kDefaultConfig, "# cli\nmaster = \"h:1\"\ntls-cert = \"" + files_.cert + "\"\ntls-key = '" +
                            files_.key + "'  # single quotes\ntls-ca=" + files_.ca + "\n"}});
  auto outcome = Parse({"nodes"}, env);
  ASSERT_TRUE(outcome.command) << outcome.err;
  EXPECT_EQ(outcome.command->master_host, "h");
  EXPECT_EQ(outcome.command->tls.cert_file, files_.cert);
  EXPECT_EQ(outcome.command->tls.key_file, files_.key);
  EXPECT_EQ(outcome.command->tls.ca_file, files_.ca);
}

TEST_F(CliTlsArgsTest, ExplicitConfigFileKeys) {
  auto env =
      WithFiles({{"/etc/mc.toml", "master = \"h:2\"\ntls-cert = " + files_.cert + "\ntls-key = " +
                                      files_.key + "\ntls-ca = " + files_.ca + "\n"},
                 {kDefaultConfig, "master = \"ignored:1\"\n"}});
  auto outcome = Parse({"--config", "/etc/mc.toml", "get", "k"}, env);
  ASSERT_TRUE(outcome.command) << outcome.err;
  EXPECT_EQ(outcome.command->master_port, 2);
  EXPECT_EQ(outcome.command->tls.cert_file, files_.cert);
  EXPECT_EQ(outcome.command->tls.ca_file, files_.ca);
}

TEST_F(CliTlsArgsTest, FlagWinsOverTheConfigKeyOfTheSameName) {
  auto env = WithFiles({{kDefaultConfig, "tls-cert = " + files_.cert + "\ntls-key = " + files_.key +
                                             "\ntls-ca = " + files_.ca + "\n"}});
  auto outcome = Parse({"--master", "h:3", "--tls-cert", files_.other_cert, "nodes"}, env);
  ASSERT_TRUE(outcome.command) << outcome.err;
  EXPECT_EQ(outcome.command->tls.cert_file, files_.other_cert);
  EXPECT_EQ(outcome.command->tls.key_file, files_.key);  // from the file
  EXPECT_EQ(outcome.command->tls.ca_file, files_.ca);
}

// README: the TLS flags win over the file's keys. An empty flag was
// ignored, so with TLS keys in cli.toml no call could reach a plain-TCP
// cluster; an empty flag now turns its key off.
TEST_F(CliTlsArgsTest, EmptyFlagsTurnOffTheConfigFilesTls) {
  auto env = WithFiles({{kDefaultConfig, "tls-cert = " + files_.cert + "\ntls-key = " + files_.key +
                                             "\ntls-ca = " + files_.ca + "\n"}});
  auto off =
      Parse({"--master", "h:3", "--tls-cert", "", "--tls-key", "", "--tls-ca", "", "nodes"}, env);
  ASSERT_TRUE(off.command) << off.err;
  EXPECT_FALSE(off.command->tls.enabled());
  auto off_after = Parse(
      {"--master", "h:3", "get", "k", "--tls-cert", "", "--tls-key", "", "--tls-ca", ""}, env);
  ASSERT_TRUE(off_after.command) << off_after.err;
  EXPECT_FALSE(off_after.command->tls.enabled());
  // Turning off one of the three leaves an incomplete setting: refused.
  auto partly = Parse({"--master", "h:3", "--tls-cert", "", "nodes"}, env);
  EXPECT_FALSE(partly.command);
  EXPECT_EQ(partly.exit_code, kExitUsage);
  EXPECT_NE(partly.err.find("all three"), std::string::npos) << partly.err;
}

TEST_F(CliTlsArgsTest, IncompleteConfigFileIsAUsageError) {
  auto env = WithFiles({{kDefaultConfig, "master = \"h:1\"\ntls-cert = " + files_.cert + "\n"}});
  auto outcome = Parse({"nodes"}, env);
  EXPECT_FALSE(outcome.command);
  EXPECT_EQ(outcome.exit_code, kExitUsage);
  EXPECT_NE(outcome.err.find("all three"), std::string::npos) << outcome.err;
}

TEST_F(CliTlsArgsTest, UnknownSubcommandIsNamedPastTlsValues) {
  auto outcome = Parse({"--tls-cert", files_.cert, "bogus"});
  EXPECT_FALSE(outcome.command);
  EXPECT_EQ(outcome.exit_code, kExitUsage);
  EXPECT_NE(outcome.err.find("'bogus'"), std::string::npos) << outcome.err;
}

TEST_F(CliTlsArgsTest, HelpListsTheTlsFlags) {
  auto outcome = Parse({"--help"});
  EXPECT_EQ(outcome.exit_code, kExitOk);
  for (const char* flag : {"--tls-cert", "--tls-key", "--tls-ca"}) {
    EXPECT_NE(outcome.out.find(flag), std::string::npos) << flag << "\n" << outcome.out;
  }
}

}  // namespace
}  // namespace mooncake::cli
