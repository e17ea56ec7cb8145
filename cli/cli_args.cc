#include "cli/cli_args.h"

#include <spdlog/fmt/fmt.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>
#include <tuple>

#include "common/config_file.h"
#include "common/file_read.h"
#include "common/version.h"
#include "thrift/master_shard_list.h"
#include "thrift/rpc_settings.h"

namespace mooncake::cli {
namespace {

constexpr const char* kTopFooter =
    "Exit codes: 0 success, 1 not found, 2 usage error, 3 server or connection error.\n"
    "Master address precedence: --master > MOONCAKE_MASTER > config file (--config FILE,\n"
    "else ~/.config/mooncake/cli.toml, with the line master = \"host:port\") > 127.0.0.1:50051.\n"
    "The config file (TOML) may also set node, json, tls-cert, tls-key and tls-ca; flags win.\n"
    "Master HA: --etcd http://HOST:PORT[,...] (or MOONCAKE_ETCD, or the file's etcd key) finds\n"
    "the leader of --cluster-name (default mooncake) in etcd.\n"
    "--master, --etcd and --master-shards are one setting: the first of flag, environment,\n"
    "config file that gives any of them decides (MOONCAKE_MASTER beats the file's etcd).\n"
    "Sharded masters: --master-shards 0-8191=HOST:PORT,8192-16383=HOST:PORT or "
    "HOST:PORT,HOST:PORT\n"
    "(or MOONCAKE_MASTER_SHARDS, or the file's master-shards key) routes each key by its slot.\n"
    "--json: every command prints one JSON object with \"ok\"; failures add \"error\" and "
    "\"code\".\n"
    "-h is not help (use --master HOST:PORT); --help is.\n"
    "Run 'mooncake-cli SUBCOMMAND --help' for an example of each subcommand.\n"
    "Example:\n  mooncake-cli --master 10.0.0.1:50051 put greeting hello";

// Soft pins last at most a day (docs/design.md, "Pins and leases").
constexpr int64_t kMaxSoftPinTtlMs = 24ll * 3600 * 1000;

// Values filled by CLI11 before they become a CliCommand.
struct RawArgs {
  std::string master;
  std::string etcd;
  std::string cluster_name;
  std::string master_shards;
  std::string config;
  std::string node;
  bool json = false;
  std::string key;
  std::string value;
  std::string file;
  std::string output;
  bool hard_pin = false;
  bool soft_pin = false;
  int64_t soft_pin_ttl_ms = 0;
  std::string tier;
  bool zero_copy = false;
  bool prefetch = false;
  bool force = false;
  TlsSettings tls;
};

// A subcommand that writes a value: put or upsert.
struct WriteCommand {
  CLI::App* app = nullptr;
  CLI::Option* value = nullptr;
  CLI::Option* file = nullptr;
  CLI::Option* ttl = nullptr;
};

struct Subcommands {
  CLI::Option* master = nullptr;
  CLI::Option* etcd = nullptr;
  CLI::Option* shards = nullptr;
  CLI::Option* config = nullptr;
  CLI::Option* node = nullptr;
  CLI::Option* json = nullptr;
  CLI::Option* cluster_name = nullptr;
  CLI::Option* tls_cert = nullptr;
  CLI::Option* tls_key = nullptr;
  CLI::Option* tls_ca = nullptr;
  WriteCommand put;
  WriteCommand upsert;
  CLI::App* get = nullptr;
  CLI::App* exist = nullptr;
  CLI::App* remove = nullptr;
  CLI::App* inspect = nullptr;
  CLI::App* locate = nullptr;
  CLI::App* stats = nullptr;
  CLI::App* nodes = nullptr;
};

void AddKey(CLI::App* sub, RawArgs& raw) {
  sub->add_option("key", raw.key, "Object key (1..4096 bytes)")->required();
}

// Value sources and placement options shared by put and upsert.
WriteCommand AddWrite(CLI::App& app, RawArgs& raw, const std::string& name,
                      const std::string& description) {
  WriteCommand w;
  w.app = app.add_subcommand(name, description);
  AddKey(w.app, raw);
  w.value = w.app->add_option("value", raw.value, "Value bytes, or - to read stdin");
  w.file = w.app->add_option("--file,-f", raw.file, "Read the value from a file (- is stdin)");
  auto* hard = w.app->add_flag("--hard-pin", raw.hard_pin, "Never demote, move or drop it");
  w.app->add_flag("--soft-pin", raw.soft_pin, "Evict only after unpinned objects")->excludes(hard);
  w.ttl = w.app
              ->add_option("--soft-pin-ttl-ms", raw.soft_pin_ttl_ms,
                           "Soft pin duration in ms (implies --soft-pin; default 30 min, max 24 h)")
              ->excludes(hard);
  w.app->add_option("--tier", raw.tier, "Preferred tier: vram, dram or ssd")
      ->check(CLI::IsMember({"vram", "dram", "ssd"}));
  w.app->add_flag("--zero-copy", raw.zero_copy,
                  "Write straight into the memory of the target worker, which must run on this "
                  "machine (name it with --node): a plan-based write");
  return w;
}

Subcommands Define(CLI::App& app, RawArgs& raw) {
  Subcommands s;
  // `-h HOST` is what redis users type; only --help asks for help.
  app.set_help_flag("--help", "Print this help message and exit");
  app.add_flag("--version")->description("Print the version and exit");
  s.master =
      app.add_option("--master", raw.master, "Master address HOST:PORT (default 127.0.0.1:50051)");
  s.etcd = app.add_option("--etcd", raw.etcd,
                          "Master HA: etcd endpoints http://HOST:PORT[,...]; talk to the leader "
                          "of --cluster-name found there (instead of --master)");
  s.cluster_name = app.add_option("--cluster-name", raw.cluster_name,
                                  "Master HA group name in etcd (default mooncake)");
  s.shards = app.add_option("--master-shards", raw.master_shards,
                            "Sharded masters: FIRST-LAST=HOST:PORT[,...] or HOST:PORT,HOST:PORT "
                            "(even split); each key goes to its slot's master");
  s.config = app.add_option("--config", raw.config,
                            "CLI config file (default ~/.config/mooncake/cli.toml)");
  s.node = app.add_option("--node", raw.node,
                          "Node id: this client's local node, the put target, "
                          "the node for stats");
  s.json = app.add_flag("--json", raw.json, "Machine-readable output");
  AddTlsOptions(app, raw.tls);
  s.tls_cert = app.get_option("--tls-cert");
  s.tls_key = app.get_option("--tls-key");
  s.tls_ca = app.get_option("--tls-ca");
  // Lets global options follow the subcommand: `mooncake-cli stats --node n1`.
  app.fallthrough();
  app.require_subcommand(1);
  app.footer(kTopFooter);

  s.put = AddWrite(app, raw, "put", "Store a new object (never overwrites)");
  s.put.app->footer(
      "Examples:\n  mooncake-cli put greeting hello\n"
      "  mooncake-cli put weights/shard0 --file shard0.bin --hard-pin\n"
      "  mooncake-cli put block-7 --file b7.bin --soft-pin-ttl-ms 600000 --tier dram\n"
      "  cat blob.bin | mooncake-cli put blob -");

  s.upsert = AddWrite(app, raw, "upsert", "Create or replace an object (in place if same size)");
  s.upsert.app->footer(
      "Examples:\n  mooncake-cli upsert greeting 'hello again'\n"
      "  mooncake-cli upsert weights/shard0 --file shard0-v2.bin\n"
      "  producer | mooncake-cli upsert block-7 -");

  s.get = app.add_subcommand("get", "Fetch an object (raw bytes to stdout or a file)");
  AddKey(s.get, raw);
  s.get->add_option("-o,--output", raw.output, "Write to this file instead of stdout");
  s.get->footer("Example:\n  mooncake-cli get weights/shard0 -o shard0.bin");

  s.exist = app.add_subcommand("exist", "Print 1 if the key exists, else 0 (exit code 1)");
  AddKey(s.exist, raw);
  s.exist->add_flag("--prefetch", raw.prefetch,
                    "Start moving an SSD-only object to DRAM (of --node if given)");
  s.exist->footer(
      "Examples:\n  mooncake-cli exist greeting\n"
      "  mooncake-cli --node worker-2 exist block-7 --prefetch");

  s.remove = app.add_subcommand("remove", "Remove an object");
  AddKey(s.remove, raw);
  s.remove->add_flag("--force", raw.force, "Remove even while a read lease is held");
  s.remove->footer("Example:\n  mooncake-cli remove greeting --force");

  s.inspect = app.add_subcommand(
      "inspect", "Show where an object lives: owner node, tier, size, version, pins, state");
  AddKey(s.inspect, raw);
  s.inspect->footer("Example:\n  mooncake-cli inspect weights/shard0 --json");

  s.locate = app.add_subcommand(
      "locate",
      "Show an object's placement for readers on its node (get_location): owner, tier, "
      "offset, size, version and the memory handle to map");
  AddKey(s.locate, raw);
  s.locate->footer("Example:\n  mooncake-cli locate block-7 --json");

  s.stats = app.add_subcommand(
      "stats", "Per-tier counters of one node (--node N), or of every node without --node");
  s.stats->footer("Example:\n  mooncake-cli stats --node node-a");

  s.nodes = app.add_subcommand("nodes", "List the nodes the master knows");
  s.nodes->footer("Example:\n  mooncake-cli nodes --json");
  return s;
}

ParseOutcome Usage(std::string message, bool json) {
  ParseOutcome outcome;
  outcome.exit_code = kExitUsage;
  outcome.err = "error: usage: " + message + "\nRun 'mooncake-cli --help' for usage.\n";
  if (json) outcome.out = UsageJson(message) + "\n";
  return outcome;
}

// Picks the value source of put/upsert; exactly one of VALUE, --file, -.
std::optional<std::string> FillWriteSource(const WriteCommand& w, const RawArgs& raw,
                                           CliCommand& cmd) {
  std::string name = w.app->get_name();
  bool has_value = w.value->count() > 0;
  bool has_file = w.file->count() > 0;
  if (has_value && has_file) return "give the value once: VALUE, --file FILE or - (stdin)";
  if (!has_value && !has_file) return name + " needs a value: VALUE, --file FILE or - (stdin)";
  if ((has_value && raw.value == "-") || (has_file && raw.file == "-")) {
    cmd.source = ValueSource::kStdin;
  } else if (has_file) {
    if (raw.file.empty()) return "--file needs a file name";
    cmd.source = ValueSource::kFile;
    cmd.path = raw.file;
  } else {
    if (raw.value.empty()) return "the value is empty; objects hold at least 1 byte";
    cmd.source = ValueSource::kArgument;
    cmd.value = raw.value;
  }
  return std::nullopt;
}

std::optional<std::string> FillWrite(const WriteCommand& w, const RawArgs& raw, CliCommand& cmd) {
  if (auto problem = FillWriteSource(w, raw, cmd)) return problem;
  cmd.hard_pin = raw.hard_pin;
  cmd.soft_pin = raw.soft_pin;
  cmd.tier = raw.tier;
  cmd.zero_copy = raw.zero_copy;
  if (cmd.zero_copy && cmd.tier == "ssd") return "--zero-copy writes into memory: not --tier ssd";
  if (w.ttl->count() > 0) {
    if (raw.soft_pin_ttl_ms <= 0 || raw.soft_pin_ttl_ms > kMaxSoftPinTtlMs) {
      return "--soft-pin-ttl-ms must be 1.." + std::to_string(kMaxSoftPinTtlMs) + " (24 h)";
    }
    cmd.soft_pin = true;
    cmd.soft_pin_ttl_ms = raw.soft_pin_ttl_ms;
  }
  return std::nullopt;
}

std::optional<CommandKind> Chosen(const Subcommands& s) {
  if (s.put.app->parsed()) return CommandKind::kPut;
  if (s.upsert.app->parsed()) return CommandKind::kUpsert;
  if (s.get->parsed()) return CommandKind::kGet;
  if (s.exist->parsed()) return CommandKind::kExist;
  if (s.remove->parsed()) return CommandKind::kRemove;
  if (s.inspect->parsed()) return CommandKind::kInspect;
  if (s.locate->parsed()) return CommandKind::kLocate;
  if (s.stats->parsed()) return CommandKind::kStats;
  if (s.nodes->parsed()) return CommandKind::kNodes;
  return std::nullopt;
}

bool TakesKey(CommandKind kind) {
  return kind != CommandKind::kStats && kind != CommandKind::kNodes;
}

// The config file: --config FILE (must exist) or the default path (skipped
// when it cannot be read). An empty config when there is none; nullopt with
// `problem` set when it is unreadable or malformed.
std::optional<CliFileConfig> LoadConfig(const Subcommands& s, const RawArgs& raw,
                                        const CliEnvironment& env, std::string& problem) {
  bool explicit_file = s.config->count() > 0;
  std::string path = explicit_file ? raw.config : env.default_config_path;
  if (path.empty()) return CliFileConfig{};
  std::optional<std::string> text;
  if (env.read_file) text = env.read_file(path);
  if (!text) {
    if (!explicit_file) return CliFileConfig{};
    problem = "cannot read the config file '" + path + "'";
    return std::nullopt;
  }
  std::string why;
  auto config = ParseCliConfig(*text, &why);
  if (!config) problem = "config file '" + path + "': " + why;
  return config;
}

// Where a master setting came from, lowest first.
enum class Source { kNone, kFile, kEnvironment, kFlag };

struct Sourced {
  std::string value;
  Source source = Source::kNone;
};

// One master setting by precedence: flag > environment > config file.
Sourced FromSources(const CLI::Option* flag, const std::string& flag_value, const char* env,
                    const std::optional<std::string>& file) {
  if (flag->count() > 0) return {flag_value, Source::kFlag};
  if (env && *env) return {env, Source::kEnvironment};
  if (file) return {*file, Source::kFile};
  return {};
}

// Where the master is: --master, --etcd and --master-shards (and their
// environment variables and file keys) are one setting, so the highest
// source that gives any of them decides and a lower one's are dropped:
// MOONCAKE_MASTER beats the file's etcd and master-shards keys as it beats
// its master key. Within one source, etcd or shards win over master.
struct MasterSettings {
  Sourced master, etcd, shards;
};

MasterSettings ResolveMasterSettings(const Subcommands& s, const RawArgs& raw,
                                     const CliEnvironment& env, const CliFileConfig& file) {
  // An empty etcd or master-shards key in the file says nothing.
  auto non_empty = [](const std::optional<std::string>& v) {
    return v && !v->empty() ? v : std::nullopt;
  };
  MasterSettings m{FromSources(s.master, raw.master, env.env_master, file.master),
                   FromSources(s.etcd, raw.etcd, env.env_etcd, non_empty(file.etcd)),
                   FromSources(s.shards, raw.master_shards, env.env_master_shards,
                               non_empty(file.master_shards))};
  Source highest = std::max({m.master.source, m.etcd.source, m.shards.source});
  for (Sourced* setting : {&m.master, &m.etcd, &m.shards}) {
    if (setting->source < highest) *setting = {};
  }
  return m;
}

std::string_view TrimSpace(std::string_view text);

// [http://]HOST:PORT entries separated by commas.
bool ValidEtcdList(std::string_view text) {
  for (;;) {
    size_t comma = text.find(',');
    std::string_view entry = TrimSpace(text.substr(0, comma));
    if (entry.starts_with("http://")) entry.remove_prefix(7);
    if (entry.find('/') != std::string_view::npos || !ParseHostPort(entry)) return false;
    if (comma == std::string_view::npos) return true;
    text = text.substr(comma + 1);
  }
}

// TLS files: each flag given wins over the config file's key of the same
// name, an empty one included: `--tls-cert "" --tls-key "" --tls-ca ""`
// turns off the file's TLS for one call to a plain-TCP cluster.
TlsSettings ResolveTls(const Subcommands& s, const RawArgs& raw, const CliFileConfig& file) {
  TlsSettings tls = raw.tls;
  for (auto [flag, field, value] : {std::tuple{s.tls_cert, &tls.cert_file, &file.tls_cert},
                                    std::tuple{s.tls_key, &tls.key_file, &file.tls_key},
                                    std::tuple{s.tls_ca, &tls.ca_file, &file.tls_ca}}) {
    if (flag->count() == 0) *field = value->value_or("");
  }
  return tls;
}

// Where a setting that failed its check came from, for the message:
// `--master`, `MOONCAKE_MASTER` or `config file: master`.
std::string SourceName(Source source, std::string_view key, std::string_view env_var) {
  switch (source) {
    case Source::kEnvironment:
      return std::string(env_var);
    case Source::kFile:
      return "config file: " + std::string(key);
    case Source::kNone:
    case Source::kFlag:
      break;
  }
  return "--" + std::string(key);
}

ParseOutcome Build(const Subcommands& s, const RawArgs& raw, const CliEnvironment& env) {
  std::string problem;
  auto file = LoadConfig(s, raw, env, problem);
  if (!file) return Usage(problem, raw.json);
  // A flag given on the command line wins over the file either way:
  // --json=false turns off the file's json = true, --node "" clears its node.
  bool json = s.json->count() > 0 ? raw.json : file->json.value_or(false);
  auto Usage = [json](std::string message) { return cli::Usage(std::move(message), json); };
  auto kind = Chosen(s);
  if (!kind) return Usage("a subcommand is required");
  CliCommand cmd;
  cmd.kind = *kind;
  if (s.master->count() > 0 && s.etcd->count() > 0) {
    return Usage("give --master or --etcd, not both");
  }
  if (s.shards->count() > 0 && (s.master->count() > 0 || s.etcd->count() > 0)) {
    return Usage("give --master-shards or --master/--etcd, not both");
  }
  MasterSettings where = ResolveMasterSettings(s, raw, env, *file);
  if (const std::string& etcd = where.etcd.value; !etcd.empty()) {
    if (!ValidEtcdList(etcd)) {
      return Usage(SourceName(where.etcd.source, "etcd", "MOONCAKE_ETCD") +
                   " must be http://HOST:PORT[,http://HOST:PORT...], got '" + etcd + "'");
    }
    cmd.etcd = etcd;
  }
  if (const std::string& shards = where.shards.value; !shards.empty()) {
    if (std::string why; !ParseMasterShards(shards, &why)) {
      return Usage(SourceName(where.shards.source, "master-shards", "MOONCAKE_MASTER_SHARDS") +
                   ": " + why);
    }
    if (!cmd.etcd.empty()) return Usage("master shards and etcd are exclusive");
    cmd.master_shards = shards;
  }
  // Given, even empty, the flag decides: `--cluster-name ""` is refused as
  // the master and worker refuse it, not replaced by the file's or the
  // default name.
  const bool name_flag = s.cluster_name->count() > 0;
  cmd.cluster_name = name_flag ? raw.cluster_name : file->cluster_name.value_or("mooncake");
  if (cmd.cluster_name.empty() || cmd.cluster_name.find('/') != std::string::npos) {
    return Usage(std::string(name_flag ? "--cluster-name" : "config file: cluster-name") +
                 " must be non-empty and hold no '/'");
  }
  // The master address is checked only when it is used; with etcd or
  // shards the default stands in, unused.
  std::string master(kDefaultMaster);
  if (cmd.etcd.empty() && cmd.master_shards.empty() && where.master.source != Source::kNone) {
    master = where.master.value;
    if (where.master.source == Source::kFile && master.empty()) {
      return Usage("config file: master is empty");
    }
  }
  auto address = ParseHostPort(master);
  if (!address) {
    return Usage(SourceName(where.master.source, "master", "MOONCAKE_MASTER") +
                 " must be HOST:PORT, got '" + master + "'");
  }
  std::tie(cmd.master_host, cmd.master_port) = *address;
  cmd.node = s.node->count() > 0 ? raw.node : file->node.value_or("");
  cmd.json = json;
  if (TakesKey(cmd.kind)) {
    if (!ValidateKey(raw.key)) return Usage("the key must be 1..4096 bytes with no NUL byte");
    cmd.key = raw.key;
  }
  if (cmd.kind == CommandKind::kPut || cmd.kind == CommandKind::kUpsert) {
    const WriteCommand& w = cmd.kind == CommandKind::kPut ? s.put : s.upsert;
    if (auto write_problem = FillWrite(w, raw, cmd)) return Usage(*write_problem);
  }
  if (cmd.kind == CommandKind::kGet) cmd.path = raw.output;
  cmd.prefetch = raw.prefetch;
  cmd.force = raw.force;
  cmd.tls = ResolveTls(s, raw, *file);
  if (std::string why; !ValidateTlsSettings(cmd.tls, &why)) return Usage(why);
  ParseOutcome outcome;
  outcome.command = std::move(cmd);
  return outcome;
}

const std::vector<std::string>& KnownSubcommands() {
  static const std::vector<std::string> kKnown = {"put",     "upsert", "get",   "exist", "remove",
                                                  "inspect", "locate", "stats", "nodes"};
  return kKnown;
}

// The names ("--master", "-o") of every option, global or of a subcommand,
// that takes a value, read from the definitions so the list cannot drift.
std::vector<std::string> OptionsTakingAValue(const CLI::App& app) {
  std::vector<std::string> names;
  auto collect = [&names](const CLI::App& from) {
    for (const CLI::Option* option : from.get_options()) {
      if (option->get_type_size_max() == 0) continue;  // a flag
      for (const auto& name : option->get_lnames()) names.push_back("--" + name);
      for (const auto& name : option->get_snames()) names.push_back("-" + name);
    }
  };
  collect(app);
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
    collect(*sub);
  }
  return names;
}

// Whether `flag` stands among `args` as an option. After `--` every word is
// a value, and so is the word after an option that takes one: `put k --
// --version` stores "--version" and `--file --version` reads a file.
bool GivenAsOption(const std::vector<std::string>& args, std::string_view flag,
                   const std::vector<std::string>& taking_a_value) {
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--") return false;
    if (args[i] == flag) return true;
    if (std::find(taking_a_value.begin(), taking_a_value.end(), args[i]) != taking_a_value.end()) {
      ++i;  // skip the option's value
    }
  }
  return false;
}

// The value of the last `option VALUE` or `option=VALUE` among `args`, read
// as GivenAsOption reads them; nullopt when the option is not there.
std::optional<std::string> OptionValue(const std::vector<std::string>& args,
                                       std::string_view option,
                                       const std::vector<std::string>& taking_a_value) {
  std::optional<std::string> value;
  const std::string with_equals = std::string(option) + "=";
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--") break;
    if (args[i] == option && i + 1 < args.size()) {
      value = args[i + 1];
    } else if (args[i].starts_with(with_equals)) {
      value = args[i].substr(with_equals.size());
      continue;
    }
    if (std::find(taking_a_value.begin(), taking_a_value.end(), args[i]) != taking_a_value.end()) {
      ++i;  // skip the option's value
    }
  }
  return value;
}

// Whether a usage error that CLI11 found (so Build never ran) is answered in
// JSON: --json (or --json=BOOL) among the arguments, else the json key of
// the config file Build would have read (--config FILE, else the default
// one). A config file that cannot be read or parsed asks for nothing here;
// the usage error found first is what gets reported.
bool UsageErrorWantsJson(const std::vector<std::string>& args, const CliEnvironment& env,
                         const std::vector<std::string>& taking_a_value) {
  if (GivenAsOption(args, "--json", taking_a_value)) return true;
  if (auto flag = OptionValue(args, "--json", taking_a_value)) {
    return *flag == "true" || *flag == "1" || *flag == "yes" || *flag == "on";
  }
  std::string path =
      OptionValue(args, "--config", taking_a_value).value_or(env.default_config_path);
  if (path.empty() || !env.read_file) return false;
  std::optional<std::string> text = env.read_file(path);
  if (!text) return false;
  std::string problem;
  auto config = ParseCliConfig(*text, &problem);
  return config && config->json.value_or(false);
}

// The first word that is not a global option, when it names no subcommand:
// CLI11 would only say that a subcommand is required.
std::optional<std::string> UnknownSubcommand(const std::vector<std::string>& args) {
  const auto& known = KnownSubcommands();
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--master" || arg == "--node" || arg == "--config" || arg == "--tls-cert" ||
        arg == "--tls-key" || arg == "--tls-ca" || arg == "--etcd" || arg == "--cluster-name" ||
        arg == "--master-shards") {
      ++i;  // skip the option's value
      continue;
    }
    if (arg.starts_with("-")) continue;
    if (std::find(known.begin(), known.end(), arg) != known.end()) return std::nullopt;
    return arg;
  }
  return std::nullopt;
}

std::string_view TrimSpace(std::string_view text) {
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.front()))) {
    text.remove_prefix(1);
  }
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) {
    text.remove_suffix(1);
  }
  return text;
}

// `text` for an error message: control and non-ASCII bytes as \xNN, at most
// 80 bytes, so a binary file cannot garble the terminal or cut the line.
std::string Printable(std::string_view text) {
  std::string out;
  for (unsigned char c : text.substr(0, 80)) {
    if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
    } else {
      out += fmt::format("\\x{:02x}", c);
    }
  }
  if (text.size() > 80) out += "...";
  return out;
}

}  // namespace

ParseOutcome ParseCli(const std::vector<std::string>& args, const char* env_master) {
  CliEnvironment env;
  env.env_master = env_master;
  return ParseCli(args, env);
}

ParseOutcome ParseCli(const std::vector<std::string>& args, const CliEnvironment& env) {
  CLI::App app{
      "mooncake-cli: put, upsert, get, probe, inspect and remove objects in a Mooncake "
      "tiered cache",
      "mooncake-cli"};
  RawArgs raw;
  Subcommands subcommands = Define(app, raw);
  // Checked before CLI11 parses: `mooncake-cli --version` names no
  // subcommand, which CLI11 would reject.
  const std::vector<std::string> taking_a_value = OptionsTakingAValue(app);
  if (GivenAsOption(args, "--version", taking_a_value)) {
    return ParseOutcome{std::nullopt, kExitOk, VersionLine("mooncake-cli") + "\n", ""};
  }
  // CLI11 consumes arguments from the back.
  std::vector<std::string> reversed(args.rbegin(), args.rend());
  try {
    app.parse(reversed);
  } catch (const CLI::CallForHelp& e) {
    // app.exit prints the help of the subcommand that asked for it.
    std::ostringstream out, err;
    app.exit(e, out, err);
    return ParseOutcome{std::nullopt, kExitOk, out.str(), err.str()};
  } catch (const CLI::ParseError& e) {
    const bool json = UsageErrorWantsJson(args, env, taking_a_value);
    if (std::find(args.begin(), args.end(), "-h") != args.end()) {
      return Usage("-h is not an option: use --master HOST:PORT; --help for help", json);
    }
    if (auto unknown = UnknownSubcommand(args)) {
      return Usage("unknown subcommand '" + *unknown +
                       "' (expected put, upsert, get, exist, remove, inspect, locate, stats or "
                       "nodes)",
                   json);
    }
    return Usage(e.what(), json);
  }
  return Build(subcommands, raw, env);
}

std::string MasterLabel(const CliCommand& command) {
  if (!command.master_shards.empty()) return "shards " + command.master_shards;
  if (!command.etcd.empty()) return "etcd " + command.etcd + " cluster " + command.cluster_name;
  return command.master_host + ":" + std::to_string(command.master_port);
}

std::string UsageJson(std::string_view message) {
  nlohmann::json out = {{"ok", false}, {"error", std::string(message)}, {"code", "USAGE"}};
  return out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::optional<CliFileConfig> ParseCliConfig(std::string_view text, std::string* problem) {
  if (text.size() > kMaxConfigFileBytes) {
    *problem = "holds more than " + FormatBytes(kMaxConfigFileBytes) + ": not a cli.toml";
    return std::nullopt;
  }
  // CLI11 reads any line without '=' as a flag and ignores [sections] it
  // cannot place; a cli.toml has neither, so they are rejected first: a YAML
  // file (`master: host:port`) must not pass as an empty config.
  std::string_view rest = text;
  for (int line_no = 1; !rest.empty(); ++line_no) {
    size_t eol = rest.find('\n');
    std::string_view line = TrimSpace(rest.substr(0, eol));
    rest = eol == std::string_view::npos ? std::string_view{} : rest.substr(eol + 1);
    if (line.empty() || line.front() == '#') continue;
    if (line.front() == '[') {
      *problem = "line " + std::to_string(line_no) + ": sections are not supported ('" +
                 Printable(line) + "')";
      return std::nullopt;
    }
    if (line.find('=') == std::string_view::npos) {
      *problem = "line " + std::to_string(line_no) + " is not `key = value` (TOML): '" +
                 Printable(line) + "'";
      return std::nullopt;
    }
  }
  std::vector<CLI::ConfigItem> items;
  try {
    // Quoted values keep a '#' (common/config_file.h).
    std::istringstream in{std::string(text)};
    items = ConfigFileFormat().from_config(in);
  } catch (const CLI::Error& e) {
    std::string what = e.what();
    *problem = what.starts_with(kConfigFileError) ? what.substr(kConfigFileError.size())
                                                  : "not a TOML file: " + what;
    return std::nullopt;
  }
  CliFileConfig config;
  for (const auto& item : items) {
    std::string name = Printable(item.fullname());
    if (!item.parents.empty()) {
      *problem = "unknown key '" + name + "'";
      return std::nullopt;
    }
    if (item.inputs.size() > 1) {
      *problem = "key '" + name + "' takes one value";
      return std::nullopt;
    }
    std::string value = item.inputs.empty() ? std::string() : item.inputs.front();
    if (name == "master") {
      config.master = value;
    } else if (name == "node") {
      config.node = value;
    } else if (name == "tls-cert") {
      config.tls_cert = value;
    } else if (name == "tls-key") {
      config.tls_key = value;
    } else if (name == "tls-ca") {
      config.tls_ca = value;
    } else if (name == "etcd") {
      config.etcd = value;
    } else if (name == "cluster-name") {
      config.cluster_name = value;
    } else if (name == "master-shards") {
      config.master_shards = value;
    } else if (name == "json") {
      if (value != "true" && value != "false") {
        *problem = "json must be true or false, got '" + value + "'";
        return std::nullopt;
      }
      config.json = value == "true";
    } else {
      *problem = "unknown key '" + name +
                 "' (known: master, node, json, tls-cert, tls-key, tls-ca, etcd, cluster-name, "
                 "master-shards)";
      return std::nullopt;
    }
  }
  return config;
}

std::optional<std::pair<std::string, int>> ParseHostPort(std::string_view text) {
  size_t colon = text.rfind(':');
  if (colon == std::string_view::npos || colon == 0) return std::nullopt;
  std::string_view host = text.substr(0, colon);
  std::string_view port_text = text.substr(colon + 1);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  } else if (host.find(':') != std::string_view::npos) {
    return std::nullopt;  // an IPv6 address needs brackets
  }
  int port = 0;
  auto [end, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  if (ec != std::errc() || end != port_text.data() + port_text.size() || port <= 0 ||
      port > 65535) {
    return std::nullopt;
  }
  return std::pair{std::string(host), port};
}

int ExitCodeFor(ErrorCode code) {
  switch (code) {
    case ErrorCode::kOk:
      return kExitOk;
    case ErrorCode::kObjectNotFound:
      return kExitNotFound;
    // The request itself was wrong: a bad key, an empty value, a node name
    // the cluster does not know.
    case ErrorCode::kInvalidKey:
    case ErrorCode::kInvalidParams:
    case ErrorCode::kNodeNotFound:
      return kExitUsage;
    default:
      return kExitServer;
  }
}

namespace {

std::string SizeOrIt(const ErrorContext& context) {
  return context.size ? FormatBytes(*context.size) : std::string("the object");
}

std::string Explain(ErrorCode code, const ErrorContext& c) {
  if (!c.why.empty()) return c.why;
  switch (code) {
    case ErrorCode::kNoAvailableHandle:
      return "no tier on the target node can hold " + SizeOrIt(c);
    case ErrorCode::kInvalidKey:
      return "the key must be 1..4096 bytes with no NUL byte";
    case ErrorCode::kInvalidParams:
      return "invalid request (an empty value or a size that does not match)";
    case ErrorCode::kIllegalClient:
      return "this write of key '" + c.key +
             "' was pre-empted by another write of it, or discarded as not finished within "
             "the worker's --put-start-discard-timeout-ms";
    case ErrorCode::kReplicaIsNotReady:
      return "key '" + c.key + "' is being written; retry shortly";
    case ErrorCode::kObjectNotFound:
      return "key '" + c.key + "' does not exist";
    case ErrorCode::kObjectAlreadyExists:
      return "key '" + c.key + "' already exists; put never overwrites, remove it first";
    case ErrorCode::kObjectHasLease:
      return "key '" + c.key + "' is being read (lease held); retry or use --force";
    case ErrorCode::kObjectReplicaBusy:
      return "key '" + c.key + "' is busy or kept changing during the transfer; retry";
    case ErrorCode::kTransferFail:
      return "the data transfer failed";
    case ErrorCode::kRpcFail:
      if (c.connecting) return "cannot reach the master at " + c.master + "; is it running?";
      return "lost the connection to the master or a worker node";
    case ErrorCode::kRpcTimeout:
      return c.connecting ? "the master at " + c.master + " did not answer in time"
                          : "the server did not answer in time";
    case ErrorCode::kNotOwner:
      return "the node no longer owns key '" + c.key + "'";
    case ErrorCode::kTierNotFound:
      return "no such tier on the node";
    case ErrorCode::kNodeNotFound:
      return "no node '" + c.node + "' is registered with master " + c.master;
    case ErrorCode::kNotLeader:
      return "no master leader answered (" + c.master +
             " is a standby or the HA group is still electing one); retry shortly";
    case ErrorCode::kInternalError:
    case ErrorCode::kOk:
      break;
  }
  return "internal server error; see the server log";
}

}  // namespace

std::string ErrorLine(std::string_view action, ErrorCode code, const ErrorContext& context) {
  return fmt::format("error: {} failed: {} ({}): {}", action, ToString(code),
                     static_cast<int32_t>(code), Explain(code, context));
}

}  // namespace mooncake::cli
