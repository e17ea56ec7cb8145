// The mooncake-cli runner: one command against the cluster, with the output
// conventions of DESIGN.md section 5 (results on stdout, one error line on
// stderr, JSON with --json). Values' local files live in value_io, writes in
// value_writer, the shape of each answer in output_format.

#include "cli/commands.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "cli/output_format.h"
#include "cli/progress.h"
#include "cli/value_io.h"
#include "cli/value_writer.h"
#include "client/client.h"

namespace mooncake::cli {
namespace {

using nlohmann::json;

// Runs one command; owns the output conventions and the exit code.
// Thread-safety: one runner per process, on one thread.
class Runner {
 public:
  Runner(const CliCommand& cmd, Client& client) : cmd_(cmd), client_(client) {}

  int Run() {
    switch (cmd_.kind) {
      case CommandKind::kPut:
      case CommandKind::kUpsert:
        return Put();
      case CommandKind::kGet:
        return Get();
      case CommandKind::kExist:
        return Exist();
      case CommandKind::kRemove:
        return Remove();
      case CommandKind::kInspect:
        return Inspect();
      case CommandKind::kLocate:
        return Locate();
      case CommandKind::kStats:
        return Stats();
      case CommandKind::kNodes:
        return Nodes();
    }
    return kExitUsage;
  }

  static int Fail(const CliCommand& cmd, std::string_view action, ErrorCode code,
                  std::optional<uint64_t> size = std::nullopt, bool connecting = false) {
    ErrorContext context{cmd.key, cmd.node, cmd.master_host + ":" + std::to_string(cmd.master_port),
                         size, connecting};
    std::string line = ErrorLine(action, code, context);
    std::fprintf(stderr, "%s\n", line.c_str());
    if (cmd.json) {
      json out = {{"ok", false},
                  {"error", std::string(ToString(code))},
                  {"code", static_cast<int32_t>(code)},
                  {"message", line}};
      std::cout << out.dump() << std::endl;
    }
    return ExitCodeFor(code);
  }

 private:
  int Fail(std::string_view action, ErrorCode code, std::optional<uint64_t> size = std::nullopt) {
    return Fail(cmd_, action, code, size);
  }

  // A problem on this machine (a file), not in the cluster.
  int LocalFail(const std::string& message, int exit_code) {
    std::fprintf(stderr, "error: %s\n", message.c_str());
    if (cmd_.json) std::cout << json{{"ok", false}, {"message", message}}.dump() << std::endl;
    return exit_code;
  }

  bool upsert() const { return cmd_.kind == CommandKind::kUpsert; }
  std::string_view action() const { return upsert() ? "upsert" : "put"; }

  int Stored(uint64_t size) {
    if (cmd_.json) {
      std::cout << json{{"ok", true}, {"key", cmd_.key}, {"bytes", size}}.dump() << std::endl;
    } else {
      std::cout << (upsert() ? "upserted " : "stored ") << cmd_.key << " (" << FormatBytes(size)
                << ")" << std::endl;
    }
    return kExitOk;
  }

  int Put() {
    switch (cmd_.source) {
      case ValueSource::kArgument: {
        auto put = writer_.Write(cmd_.value);
        return put ? Stored(cmd_.value.size()) : Fail(action(), put.error(), cmd_.value.size());
      }
      case ValueSource::kFile:
        return PutFile();
      case ValueSource::kStdin:
        return PutStdin();
    }
    return kExitUsage;
  }

  int PutFile() {
    std::ifstream in(cmd_.path, std::ios::binary);
    if (!in)
      return LocalFail(
          std::string(action()) + " failed: cannot read " + cmd_.path + ": " + SystemError(),
          kExitUsage);
    std::error_code ec;
    if (!std::filesystem::is_regular_file(cmd_.path, ec)) return PutUnsized(in);
    uint64_t size = std::filesystem::file_size(cmd_.path, ec);
    if (ec)
      return LocalFail(
          std::string(action()) + " failed: cannot stat " + cmd_.path + ": " + ec.message(),
          kExitUsage);
    return PutSized(in, size);
  }

  int PutStdin() {
    std::ios::sync_with_stdio(false);
    if (auto size = StdinSize()) return PutSized(std::cin, *size);
    return PutUnsized(std::cin);
  }

  int PutSized(std::istream& in, uint64_t size) {
    if (size == 0) return Fail(action(), ErrorCode::kInvalidParams, size);
    ProgressBar bar(std::string(action()) + " " + cmd_.key);
    auto put = writer_.WriteStream(
        in, size, [&bar](uint64_t done, uint64_t total) { bar.Update(done, total); });
    bar.Finish();
    if (!put && in.bad()) {
      return LocalFail(std::string(action()) + " failed: reading the input: " + SystemError(),
                       kExitServer);
    }
    return put ? Stored(size) : Fail(action(), put.error(), size);
  }

  // A stream whose length is known only at its end.
  int PutUnsized(std::istream& in) {
    std::string head(kRpcChunkBytes + 1, '\0');
    in.read(head.data(), static_cast<std::streamsize>(head.size()));
    head.resize(static_cast<size_t>(in.gcount()));
    if (in.bad()) {
      return LocalFail(std::string(action()) + " failed: reading the input: " + SystemError(),
                       kExitUsage);
    }
    if (head.size() <= kRpcChunkBytes) {
      if (head.empty()) return Fail(action(), ErrorCode::kInvalidParams, 0);
      auto put = writer_.Write(head);
      return put ? Stored(head.size()) : Fail(action(), put.error(), head.size());
    }
    return PutSpooled(in, head);
  }

  int PutSpooled(std::istream& in, const std::string& head) {
    auto spooled = SpoolToTempFile(in, head);
    if (!spooled) return LocalFail("put failed: " + spooled.error(), kExitServer);
    return PutSized(spooled->stream, spooled->size);
  }

  int Get() {
    if (cmd_.path.empty() || cmd_.path == "-") return cmd_.json ? GetJson() : GetToStdout();
    OutputFile file(cmd_.path);
    if (!file.ok())
      return LocalFail("get failed: cannot write " + cmd_.path + ": " + SystemError(), kExitUsage);
    ProgressBar bar("get " + cmd_.key);
    auto got = client_.GetStream(cmd_.key, file.stream(), [&bar](uint64_t done, uint64_t total) {
      bar.Update(done, total);
    });
    bar.Finish();
    if (!got) {
      if (!file.stream())
        return LocalFail("get failed: writing " + cmd_.path + ": " + SystemError(), kExitServer);
      return Fail("get", got.error());
    }
    if (!file.Commit())
      return LocalFail("get failed: saving " + cmd_.path + ": " + SystemError(), kExitServer);
    if (cmd_.json) {
      std::cout
          << json{{"ok", true}, {"key", cmd_.key}, {"bytes", *got}, {"file", cmd_.path}}.dump()
          << std::endl;
    }
    return kExitOk;
  }

  int GetToStdout() {
    std::ios::sync_with_stdio(false);
    ProgressBar bar("get " + cmd_.key);
    auto got = client_.GetStream(
        cmd_.key, std::cout, [&bar](uint64_t done, uint64_t total) { bar.Update(done, total); });
    bar.Finish();
    if (!got) return Fail("get", got.error());
    return kExitOk;
  }

  // JSON needs the value as text: UTF-8 as is, anything else as base64.
  int GetJson() {
    auto got = client_.Get(cmd_.key);
    if (!got) return Fail("get", got.error());
    json out = {
        {"ok", true}, {"key", cmd_.key}, {"bytes", got->data.size()}, {"version", got->version}};
    std::string text;
    try {
      out["value"] = got->data;
      text = out.dump();
    } catch (const json::exception&) {
      // Not valid UTF-8: JSON strings cannot carry it as is.
      out.erase("value");
      out["value_base64"] = Base64(got->data);
      text = out.dump();
    }
    std::cout << text << std::endl;
    return kExitOk;
  }

  int Exist() {
    auto found = client_.Exist(cmd_.key, cmd_.prefetch);
    if (!found) return Fail("exist", found.error());
    if (cmd_.json) {
      std::cout << json{{"key", cmd_.key}, {"exists", *found}}.dump() << std::endl;
    } else {
      std::cout << (*found ? "1" : "0") << std::endl;
    }
    return *found ? kExitOk : kExitNotFound;
  }

  int Remove() {
    auto removed = client_.Remove(cmd_.key, cmd_.force);
    if (!removed) return Fail("remove", removed.error());
    if (cmd_.json) {
      std::cout << json{{"ok", true}, {"key", cmd_.key}}.dump() << std::endl;
    } else {
      std::cout << "removed " << cmd_.key << std::endl;
    }
    return kExitOk;
  }

  int Inspect() {
    auto info = client_.Inspect(cmd_.key);
    if (!info) return Fail("inspect", info.error());
    if (cmd_.json) {
      std::cout << InspectJson(cmd_.key, *info).dump() << std::endl;
      return kExitOk;
    }
    std::cout << InspectText(cmd_.key, *info);
    std::cout.flush();
    return kExitOk;
  }

  int Locate() {
    auto placement = client_.GetLocation(cmd_.key);
    if (!placement) return Fail("locate", placement.error());
    if (cmd_.json) {
      std::cout << LocateJson(cmd_.key, *placement).dump() << std::endl;
      return kExitOk;
    }
    std::cout << LocateText(cmd_.key, *placement);
    std::cout.flush();
    return kExitOk;
  }

  int Stats() {
    std::vector<std::string> node_ids;
    if (!cmd_.node.empty()) {
      node_ids.push_back(cmd_.node);
    } else {
      auto nodes = client_.ListNodes();
      if (!nodes) return Fail("stats", nodes.error());
      for (const auto& node : *nodes) {
        if (node.alive) node_ids.push_back(node.node_id);
      }
    }
    int exit_code = kExitOk;
    json all = json::array();
    for (const auto& node_id : node_ids) {
      auto stats = client_.Stats(node_id);
      if (!stats) {
        CliCommand about = cmd_;
        about.node = node_id;
        exit_code = Fail(about, "stats of " + node_id, stats.error());
        continue;
      }
      if (cmd_.json) {
        all.push_back(StatsJson(*stats));
      } else {
        std::cout << StatsText(*stats);
        std::cout.flush();
      }
    }
    if (cmd_.json && exit_code == kExitOk) {
      std::cout << (cmd_.node.empty() ? all : all.at(0)).dump() << std::endl;
    }
    return exit_code;
  }

  int Nodes() {
    auto nodes = client_.ListNodes();
    if (!nodes) return Fail("nodes", nodes.error());
    if (cmd_.json) {
      json all = json::array();
      for (const auto& n : *nodes) all.push_back(NodeJson(n));
      std::cout << all.dump() << std::endl;
      return kExitOk;
    }
    std::cout << NodesText(*nodes);
    std::cout.flush();
    return kExitOk;
  }

  const CliCommand& cmd_;
  Client& client_;
  ValueWriter writer_{cmd_, client_};
};

std::string_view CommandName(CommandKind kind) {
  switch (kind) {
    case CommandKind::kPut:
      return "put";
    case CommandKind::kUpsert:
      return "upsert";
    case CommandKind::kGet:
      return "get";
    case CommandKind::kExist:
      return "exist";
    case CommandKind::kRemove:
      return "remove";
    case CommandKind::kInspect:
      return "inspect";
    case CommandKind::kLocate:
      return "locate";
    case CommandKind::kStats:
      return "stats";
    case CommandKind::kNodes:
      return "nodes";
  }
  return "command";
}

}  // namespace

int RunCommand(const CliCommand& command) {
  ClientConfig config;
  config.master_host = command.master_host;
  config.master_port = command.master_port;
  config.local_node = command.node;
  config.tls = command.tls;
  auto client = Client::Create(config);
  if (!client) {
    return Runner::Fail(command, CommandName(command.kind), client.error(), std::nullopt, true);
  }
  return Runner(command, **client).Run();
}

}  // namespace mooncake::cli
