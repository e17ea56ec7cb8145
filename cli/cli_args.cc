#include "cli/cli_args.h"

#include <spdlog/fmt/fmt.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <charconv>
#include <cstdio>
#include <sstream>

namespace mooncake::cli {
namespace {

constexpr const char* kTopFooter =
    "Exit codes: 0 success, 1 not found, 2 usage error, 3 server or connection error.\n"
    "MOONCAKE_MASTER sets the default for --master.\n"
    "Example:\n  mooncake-cli --master 10.0.0.1:50051 put greeting hello";

// Values filled by CLI11 before they become a CliCommand.
struct RawArgs {
  std::string master;
  std::string node;
  bool json = false;
  std::string key;
  std::string value;
  std::string file;
  std::string output;
  bool hard_pin = false;
  bool soft_pin = false;
  bool force = false;
};

struct Subcommands {
  CLI::App* put = nullptr;
  CLI::App* get = nullptr;
  CLI::App* exist = nullptr;
  CLI::App* remove = nullptr;
  CLI::App* stats = nullptr;
  CLI::App* nodes = nullptr;
  CLI::Option* value = nullptr;
  CLI::Option* file = nullptr;
};

void AddKey(CLI::App* sub, RawArgs& raw) {
  sub->add_option("key", raw.key, "Object key (1..4096 bytes)")->required();
}

Subcommands Define(CLI::App& app, RawArgs& raw) {
  Subcommands s;
  app.add_option("--master", raw.master, "Master address HOST:PORT")->capture_default_str();
  app.add_option("--node", raw.node,
                 "Node id: this client's local node, the put target, "
                 "the node for stats");
  app.add_flag("--json", raw.json, "Machine-readable output");
  // Lets global options follow the subcommand: `mooncake-cli stats --node n1`.
  app.fallthrough();
  app.require_subcommand(1);
  app.footer(kTopFooter);

  s.put = app.add_subcommand("put", "Store a new object (never overwrites)");
  AddKey(s.put, raw);
  s.value = s.put->add_option("value", raw.value, "Value bytes, or - to read stdin");
  s.file = s.put->add_option("--file,-f", raw.file, "Read the value from a file (- is stdin)");
  auto* hard = s.put->add_flag("--hard-pin", raw.hard_pin, "Never demote, move or drop it");
  s.put->add_flag("--soft-pin", raw.soft_pin, "Evict only after unpinned objects")->excludes(hard);
  s.put->footer(
      "Examples:\n  mooncake-cli put greeting hello\n"
      "  mooncake-cli put weights/shard0 --file shard0.bin --hard-pin\n"
      "  cat blob.bin | mooncake-cli put blob -");

  s.get = app.add_subcommand("get", "Fetch an object (raw bytes to stdout or a file)");
  AddKey(s.get, raw);
  s.get->add_option("-o,--output", raw.output, "Write to this file instead of stdout");
  s.get->footer("Example:\n  mooncake-cli get weights/shard0 -o shard0.bin");

  s.exist = app.add_subcommand("exist", "Print 1 if the key exists, else 0 (exit code 1)");
  AddKey(s.exist, raw);
  s.exist->footer("Example:\n  mooncake-cli exist greeting");

  s.remove = app.add_subcommand("remove", "Remove an object");
  AddKey(s.remove, raw);
  s.remove->add_flag("--force", raw.force, "Remove even while a read lease is held");
  s.remove->footer("Example:\n  mooncake-cli remove greeting --force");

  s.stats = app.add_subcommand(
      "stats", "Per-tier counters of one node (--node N), or of every node without --node");
  s.stats->footer("Example:\n  mooncake-cli stats --node node-a");

  s.nodes = app.add_subcommand("nodes", "List the nodes the master knows");
  s.nodes->footer("Example:\n  mooncake-cli nodes --json");
  return s;
}

ParseOutcome Usage(std::string message) {
  ParseOutcome outcome;
  outcome.exit_code = kExitUsage;
  outcome.err = "error: usage: " + message + "\nRun 'mooncake-cli --help' for usage.\n";
  return outcome;
}

// Picks the value source of `put`; exactly one of VALUE, --file, - is allowed.
std::optional<std::string> FillPutSource(const Subcommands& s, const RawArgs& raw,
                                         CliCommand& cmd) {
  bool has_value = s.value->count() > 0;
  bool has_file = s.file->count() > 0;
  if (has_value && has_file) return "give the value once: VALUE, --file FILE or - (stdin)";
  if (!has_value && !has_file) return "put needs a value: VALUE, --file FILE or - (stdin)";
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

std::optional<CommandKind> Chosen(const Subcommands& s) {
  if (s.put->parsed()) return CommandKind::kPut;
  if (s.get->parsed()) return CommandKind::kGet;
  if (s.exist->parsed()) return CommandKind::kExist;
  if (s.remove->parsed()) return CommandKind::kRemove;
  if (s.stats->parsed()) return CommandKind::kStats;
  if (s.nodes->parsed()) return CommandKind::kNodes;
  return std::nullopt;
}

bool TakesKey(CommandKind kind) {
  return kind == CommandKind::kPut || kind == CommandKind::kGet || kind == CommandKind::kExist ||
         kind == CommandKind::kRemove;
}

ParseOutcome Build(const Subcommands& s, const RawArgs& raw) {
  auto kind = Chosen(s);
  if (!kind) return Usage("a subcommand is required");
  CliCommand cmd;
  cmd.kind = *kind;
  auto address = ParseHostPort(raw.master);
  if (!address) return Usage("--master must be HOST:PORT, got '" + raw.master + "'");
  std::tie(cmd.master_host, cmd.master_port) = *address;
  cmd.node = raw.node;
  cmd.json = raw.json;
  if (TakesKey(cmd.kind)) {
    if (!ValidateKey(raw.key)) return Usage("the key must be 1..4096 bytes with no NUL byte");
    cmd.key = raw.key;
  }
  if (cmd.kind == CommandKind::kPut) {
    if (auto problem = FillPutSource(s, raw, cmd)) return Usage(*problem);
    cmd.hard_pin = raw.hard_pin;
    cmd.soft_pin = raw.soft_pin;
  }
  if (cmd.kind == CommandKind::kGet) cmd.path = raw.output;
  cmd.force = raw.force;
  ParseOutcome outcome;
  outcome.command = std::move(cmd);
  return outcome;
}

// The first word that is not a global option, when it names no subcommand:
// CLI11 would only say that a subcommand is required.
std::optional<std::string> UnknownSubcommand(const std::vector<std::string>& args) {
  static const std::vector<std::string> kKnown = {"put",    "get",   "exist",
                                                  "remove", "stats", "nodes"};
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--master" || arg == "--node") {
      ++i;  // skip the option's value
      continue;
    }
    if (arg.starts_with("-")) continue;
    if (std::find(kKnown.begin(), kKnown.end(), arg) != kKnown.end()) return std::nullopt;
    return arg;
  }
  return std::nullopt;
}

}  // namespace

ParseOutcome ParseCli(const std::vector<std::string>& args, const char* env_master) {
  CLI::App app{"mooncake-cli: put, get, probe and remove objects in a Mooncake tiered cache",
               "mooncake-cli"};
  RawArgs raw;
  raw.master = env_master && *env_master ? env_master : std::string(kDefaultMaster);
  Subcommands subcommands = Define(app, raw);
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
    if (auto unknown = UnknownSubcommand(args)) {
      return Usage("unknown subcommand '" + *unknown +
                   "' (expected put, get, exist, remove, stats or nodes)");
    }
    return Usage(e.what());
  }
  return Build(subcommands, raw);
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

std::string FormatBytes(uint64_t bytes) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  if (bytes < 1024) return fmt::format("{} B", bytes);
  double value = static_cast<double>(bytes);
  size_t unit = 0;
  while (value >= 1024.0 && unit + 1 < std::size(kUnits)) {
    value /= 1024.0;
    ++unit;
  }
  // 1023.96 KiB would print as "1024.0 KiB"; move up a unit instead.
  if (value >= 1023.95 && unit + 1 < std::size(kUnits)) {
    value /= 1024.0;
    ++unit;
  }
  return fmt::format("{:.1f} {}", value, kUnits[unit]);
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
  switch (code) {
    case ErrorCode::kNoAvailableHandle:
      return "no tier on the target node can hold " + SizeOrIt(c);
    case ErrorCode::kInvalidKey:
      return "the key must be 1..4096 bytes with no NUL byte";
    case ErrorCode::kInvalidParams:
      return "invalid request (an empty value or a size that does not match)";
    case ErrorCode::kIllegalClient:
      return "another write of key '" + c.key + "' pre-empted this one";
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
