// The mooncake-cli runner: one command against the cluster, with the output
// conventions of docs/design.md, "Interfaces and exit codes" (results on
// stdout, one error line on stderr, JSON with --json). Values' local files
// live in value_io, writes in value_writer, the shape of each answer in
// output_format.

#include "cli/commands.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
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
#include "thrift/rpc_transport.h"

namespace mooncake::cli {
namespace {

using nlohmann::json;

// Tries of `get --json` before it gives up on an object replaced during
// each read (OBJECT_REPLICA_BUSY, retryable).
constexpr int kJsonGetAttempts = 3;

// Bytes of the value base64-encoded at a time by `get --json`: a multiple
// of 3, so the slices' base64 joins up into the whole value's.
constexpr size_t kBase64SliceBytes = 3 << 18;

// std::cout for one command's run: a buffer of our own on descriptor 1, which
// keeps the errno of a write that failed, so that a failure to write stdout
// (a full disk, a closed pipe) is reported with its cause however many
// calls came after it.
class StdoutBuffer {
 public:
  StdoutBuffer() {
    buffer_.set_fd(STDOUT_FILENO, /*seekable=*/false);
    previous_ = std::cout.rdbuf(&buffer_);
  }
  ~StdoutBuffer() {
    std::cout.flush();
    std::cout.rdbuf(previous_);
  }
  StdoutBuffer(const StdoutBuffer&) = delete;
  StdoutBuffer& operator=(const StdoutBuffer&) = delete;

 private:
  FdOutputBuffer buffer_;
  std::streambuf* previous_ = nullptr;
};

// Why writing std::cout failed, when it goes through a StdoutBuffer.
std::string StdoutError() {
  auto* buffer = dynamic_cast<FdOutputBuffer*>(std::cout.rdbuf());
  int error = buffer != nullptr ? buffer->error() : 0;
  return error != 0 ? std::strerror(error) : std::string("the write failed");
}

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
                  std::optional<uint64_t> size = std::nullopt, bool connecting = false,
                  std::string why = {}) {
    ErrorContext context{cmd.key, cmd.node, MasterLabel(cmd), size, connecting, std::move(why)};
    std::string line = ErrorLine(action, code, context);
    std::fprintf(stderr, "%s\n", line.c_str());
    if (cmd.json) Print(FailureJson(line, code));
    return ExitCodeFor(code);
  }

 private:
  int Fail(std::string_view action, ErrorCode code, std::optional<uint64_t> size = std::nullopt) {
    return Fail(cmd_, action, code, size);
  }

  // A problem on this machine (a file), not in the cluster.
  int LocalFail(const std::string& message, int exit_code) {
    std::fprintf(stderr, "error: %s\n", message.c_str());
    if (cmd_.json) Print(LocalFailureJson(message));
    return exit_code;
  }

  // One JSON object, one line, on stdout. Replaces bytes that are not UTF-8
  // (keys are arbitrary bytes) rather than throwing.
  static void Print(const json& out) {
    std::cout << out.dump(-1, ' ', false, json::error_handler_t::replace) << std::endl;
  }

  bool upsert() const { return cmd_.kind == CommandKind::kUpsert; }
  std::string_view action() const { return upsert() ? "upsert" : "put"; }

  int Stored(uint64_t size) {
    if (cmd_.json) {
      Print({{"ok", true}, {"key", cmd_.key}, {"size", size}});
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
    return PutReportedSize(in, size);
  }

  int PutStdin() {
    if (auto size = StdinSize()) return PutReportedSize(std::cin, *size);
    return PutUnsized(std::cin);
  }

  // `size` is what stat says, which a pseudo-file does not mean: /proc
  // files report 0 and sysfs ones a page, whatever they hold. A size that
  // fits one RPC is held in memory anyway, so such a file is read to its
  // end (an empty one still fails as empty); a larger one streams.
  int PutReportedSize(std::istream& in, uint64_t size) {
    if (size <= kRpcChunkBytes) return PutUnsized(in);
    return PutSized(in, size);
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
    // Exit 3 as for a larger input (PutSized): a local I/O error.
    if (in.bad()) {
      return LocalFail(std::string(action()) + " failed: reading the input: " + SystemError(),
                       kExitServer);
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
    if (!spooled) {
      return LocalFail(std::string(action()) + " failed: " + spooled.error(), kExitServer);
    }
    return PutSized(spooled->stream, spooled->size);
  }

  int Get() {
    if (cmd_.path.empty() || cmd_.path == "-") return cmd_.json ? GetJson() : GetToStdout();
    OutputFile file(cmd_.path);
    if (!file.ok()) return LocalFail("get failed: " + file.problem(), kExitServer);
    // With --json the answer has the version, which must be the owner's
    // before and after the read, as in GetJson; a file written in place
    // cannot be rewound for another try.
    for (int attempt = 1;; ++attempt) {
      int64_t version = 0;
      if (cmd_.json) {
        auto before = client_.Inspect(cmd_.key);
        if (!before) return Fail("get", before.error());
        version = before->version;
      }
      ProgressBar bar("get " + cmd_.key);
      auto got = client_.GetStream(cmd_.key, file.stream(), [&bar](uint64_t done, uint64_t total) {
        bar.Update(done, total);
      });
      bar.Finish();
      if (!got) return GetToFileFailed(file, got.error());
      if (cmd_.json) {
        auto after = client_.Inspect(cmd_.key);
        if (!after) return Fail("get", after.error());
        if (after->version != version) {
          if (attempt < kJsonGetAttempts && file.Rewind()) continue;
          return Fail("get", ErrorCode::kObjectReplicaBusy);
        }
      }
      if (!file.Commit())
        return LocalFail("get failed: saving " + cmd_.path + ": " + SystemError(), kExitServer);
      if (cmd_.json) {
        Print({{"ok", true},
               {"key", cmd_.key},
               {"size", *got},
               {"version", version},
               {"file", cmd_.path}});
      }
      return kExitOk;
    }
  }

  int GetToFileFailed(OutputFile& file, ErrorCode code) {
    int exit_code =
        !file.stream()
            ? LocalFail("get failed: writing " + cmd_.path + ": " + file.write_error(), kExitServer)
            : Fail("get", code);
    if (file.partly_written()) {
      std::fprintf(stderr,
                   "note: %s was written in place (its directory is not writable) and is "
                   "left incomplete\n",
                   cmd_.path.c_str());
    }
    return exit_code;
  }

  int GetToStdout() {
    ProgressBar bar("get " + cmd_.key);
    auto got = client_.GetStream(
        cmd_.key, std::cout, [&bar](uint64_t done, uint64_t total) { bar.Update(done, total); });
    bar.Finish();
    // A local write error (a full disk under `> FILE`), not the transfer's.
    if (!got && !std::cout) {
      return LocalFail("get failed: writing stdout: " + StdoutError(), kExitServer);
    }
    if (!got) return Fail("get", got.error());
    return kExitOk;
  }

  // The value always travels as value_base64 (standard, padded): one field
  // whatever the bytes, so scripts never branch on the content. The value
  // goes to a scratch file, never into memory (value, base64 and JSON text
  // were ~3.7x its size), and the answer is written around its base64 read
  // back from there: still one whole object, and "version" is known before
  // it starts. A read follows an object replaced meanwhile, so the version
  // is the owner's before and after the read, and must not have changed.
  int GetJson() {
    auto scratch = ScratchFile::Create();
    if (!scratch) return LocalFail("get failed: " + scratch.error(), kExitServer);
    ScratchFile& file = **scratch;
    for (int attempt = 0; attempt < kJsonGetAttempts; ++attempt) {
      auto before = client_.Inspect(cmd_.key);
      if (!before) return Fail("get", before.error());
      if (!file.Rewind()) return ScratchFail();
      auto got = client_.GetStream(cmd_.key, file.stream());
      if (!got && !file.stream()) return ScratchFail();
      if (!got) return Fail("get", got.error());
      auto after = client_.Inspect(cmd_.key);
      if (!after) return Fail("get", after.error());
      if (after->version == before->version) return PrintValueJson(file, *got, after->version);
    }
    return Fail("get", ErrorCode::kObjectReplicaBusy);
  }

  int ScratchFail() {
    return LocalFail("get failed: writing a scratch file: " + SystemError(), kExitServer);
  }

  // {"key":..,"ok":true,"size":..,"version":..,"value_base64":".."}, the
  // base64 a slice of the file at a time.
  int PrintValueJson(ScratchFile& file, uint64_t size, int64_t version) {
    json head = {{"ok", true}, {"key", cmd_.key}, {"size", size}, {"version", version}};
    std::string text = head.dump(-1, ' ', false, json::error_handler_t::replace);
    text.pop_back();  // the closing brace: value_base64 follows
    std::cout << text << R"(,"value_base64":")";
    std::string slice(kBase64SliceBytes, '\0');
    for (uint64_t done = 0; done < size;) {
      size_t want = static_cast<size_t>(std::min<uint64_t>(slice.size(), size - done));
      // The whole slice before encoding it: base64 of a slice that is not a
      // multiple of 3 bytes pads, and padding mid-value corrupts it.
      for (size_t have = 0; have < want;) {
        ssize_t got = file.Read(done + have, slice.data() + have, want - have);
        if (got <= 0) {
          // Half an object is on stdout already: end the line, say why.
          std::cout << std::endl;
          return LocalFail("get failed: reading a scratch file: " +
                               (got < 0 ? SystemError() : std::string("it ended early")),
                           kExitServer);
        }
        have += static_cast<size_t>(got);
      }
      std::cout << Base64(std::string_view(slice.data(), want));
      done += want;
    }
    std::cout << "\"}" << std::endl;
    if (!std::cout) {
      // Not LocalFail: a second object on the stdout that failed helps no one.
      std::fprintf(stderr, "error: get failed: writing stdout: %s\n", StdoutError().c_str());
      return kExitServer;
    }
    return kExitOk;
  }

  int Exist() {
    // The worker queues a prefetch for any requester it is given, and an
    // unknown one ends up promoting the object on its owner: a misspelt
    // --node would pass unnoticed. put refuses one (NODE_NOT_FOUND); so does
    // this.
    if (cmd_.prefetch && !cmd_.node.empty()) {
      auto nodes = client_.ListNodes();
      if (!nodes) return Fail("exist", nodes.error());
      if (std::none_of(nodes->begin(), nodes->end(),
                       [this](const auto& node) { return node.node_id == cmd_.node; })) {
        return Fail("exist", ErrorCode::kNodeNotFound);
      }
    }
    auto found = client_.Exist(cmd_.key, cmd_.prefetch);
    if (!found) return Fail("exist", found.error());
    if (cmd_.json) {
      // The probe itself succeeded: ok is true either way (exit 1 when absent).
      Print({{"ok", true}, {"key", cmd_.key}, {"exists", *found}});
    } else {
      std::cout << (*found ? "1" : "0") << std::endl;
    }
    return *found ? kExitOk : kExitNotFound;
  }

  int Remove() {
    auto removed = client_.Remove(cmd_.key, cmd_.force);
    if (!removed) return Fail("remove", removed.error());
    if (cmd_.json) {
      Print({{"ok", true}, {"key", cmd_.key}});
    } else {
      std::cout << "removed " << cmd_.key << std::endl;
    }
    return kExitOk;
  }

  int Inspect() {
    auto info = client_.Inspect(cmd_.key);
    if (!info) return Fail("inspect", info.error());
    if (cmd_.json) {
      Print(InspectJson(cmd_.key, *info));
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
      Print(LocateJson(cmd_.key, *placement));
      return kExitOk;
    }
    std::cout << LocateText(cmd_.key, *placement);
    std::cout.flush();
    return kExitOk;
  }

  int Stats() {
    if (!cmd_.node.empty()) {
      auto stats = client_.Stats(cmd_.node);
      if (!stats) return Fail("stats", stats.error());
      if (cmd_.json) {
        json out = StatsJson(*stats);
        out["ok"] = true;
        Print(out);
      } else {
        std::cout << StatsText(*stats);
        std::cout.flush();
      }
      return kExitOk;
    }
    auto nodes = client_.ListNodes();
    if (!nodes) return Fail("stats", nodes.error());
    // Every node the master knows, in its order: a dead or unreachable one
    // is reported with its error and never hides the others.
    int exit_code = kExitOk;
    json all = json::array();
    std::optional<ErrorCode> first_error;
    size_t failed = 0;
    for (const auto& node : *nodes) {
      auto stats = node.alive ? client_.Stats(node.node_id)
                              : Result<WorkerCounters>(Err(ErrorCode::kRpcFail));
      if (stats) {
        if (cmd_.json) {
          json entry = StatsJson(*stats);
          entry["ok"] = true;
          all.push_back(std::move(entry));
        } else {
          std::cout << StatsText(*stats);
          std::cout.flush();
        }
        continue;
      }
      ++failed;
      if (!first_error) first_error = stats.error();
      ErrorContext context{cmd_.key, node.node_id, MasterLabel(cmd_)};
      std::string line = node.alive ? ErrorLine("stats of " + node.node_id, stats.error(), context)
                                    : "error: stats of " + node.node_id +
                                          " failed: the master reports the node dead (no "
                                          "heartbeat within its TTL)";
      std::fprintf(stderr, "%s\n", line.c_str());
      exit_code = std::max(exit_code, ExitCodeFor(stats.error()));
      if (cmd_.json) {
        json entry = FailureJson(line, stats.error());
        entry["node_id"] = node.node_id;
        entry["alive"] = node.alive;
        all.push_back(std::move(entry));
      }
    }
    if (cmd_.json) {
      json out = {{"ok", failed == 0}, {"nodes", std::move(all)}};
      if (first_error) {
        out["error"] = "stats failed on " + std::to_string(failed) + " of " +
                       std::to_string(nodes->size()) + " nodes";
        out["code"] = std::string(ToString(*first_error));
      }
      Print(out);
    }
    return exit_code;
  }

  int Nodes() {
    auto nodes = client_.ListNodes();
    if (!nodes) return Fail("nodes", nodes.error());
    if (cmd_.json) {
      // The listing succeeded, so ok is true; a dead node is data: alive
      // false and an error saying so.
      json all = json::array();
      for (const auto& n : *nodes) all.push_back(NodeJson(n));
      Print({{"ok", true}, {"nodes", std::move(all)}});
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

// The exit code once stdout is flushed: a command whose answer could not be
// written (a full disk, a closed pipe) has failed, whatever it did, so a
// script never takes an empty output file for a success. An exit code that
// already reports a failure is kept.
int ExitCodeAfterStdout(const CliCommand& command, int exit_code) {
  std::cout.flush();
  if (std::cout || (exit_code != kExitOk && exit_code != kExitNotFound)) return exit_code;
  const bool changed_the_cluster = exit_code == kExitOk && (command.kind == CommandKind::kPut ||
                                                            command.kind == CommandKind::kUpsert ||
                                                            command.kind == CommandKind::kRemove);
  const std::string name(CommandName(command.kind));
  std::fprintf(stderr, "error: %s failed: writing stdout: %s%s\n", name.c_str(),
               StdoutError().c_str(),
               changed_the_cluster ? (" (the " + name + " itself was done)").c_str() : "");
  return kExitServer;
}

// Why the TLS files of `tls` cannot be used, naming the flag and file the
// reason is about; empty when they load. Client::Create only logs this and
// answers INVALID_PARAMS, whose usual meaning ("an empty value or a size
// that does not match") sent users looking at their request.
std::string TlsProblem(const TlsSettings& tls) {
  std::string why;
  if (!tls.enabled() || RpcTlsContext::Create(tls, /*server=*/false, &why)) return "";
  // OpenSSL's reasons name the call that failed: match it to its file.
  std::string file =
      "--tls-cert " + tls.cert_file + ", --tls-key " + tls.key_file + ", --tls-ca " + tls.ca_file;
  if (why.find("PrivateKey") != std::string::npos) {
    file = "--tls-key " + tls.key_file;
  } else if (why.find("verify_locations") != std::string::npos) {
    file = "--tls-ca " + tls.ca_file;
  } else if (why.find("certificate") != std::string::npos) {
    file = "--tls-cert " + tls.cert_file;
  }
  return "TLS file unusable (" + file + "): " + why;
}

}  // namespace

int RunCommand(const CliCommand& command) {
  // Before any I/O: std::cin and std::cout without stdio's locks.
  std::ios::sync_with_stdio(false);
  StdoutBuffer stdout_buffer;
  ClientConfig config;
  config.master_host = command.master_host;
  config.master_port = command.master_port;
  config.etcd_endpoints = command.etcd;
  config.cluster_name = command.cluster_name;
  config.master_shards = command.master_shards;
  config.local_node = command.node;
  config.tls = command.tls;
  auto client = Client::Create(config);
  std::string why;
  if (!client && client.error() == ErrorCode::kInvalidParams) why = TlsProblem(command.tls);
  int exit_code = client ? Runner(command, **client).Run()
                         : Runner::Fail(command, CommandName(command.kind), client.error(),
                                        std::nullopt, true, std::move(why));
  return ExitCodeAfterStdout(command, exit_code);
}

}  // namespace mooncake::cli
