#include "cli/commands.h"

#include <spdlog/fmt/fmt.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>

#include "cli/progress.h"
#include "client/client.h"
#include "client/shared_mapping.h"

namespace mooncake::cli {
namespace {

using nlohmann::json;

// Streams of unknown length (a pipe on stdin) are spooled to a temporary
// file once they outgrow one RPC: the protocol needs the size up front, and
// the CLI must never hold a whole large value in memory.
constexpr size_t kSpoolCopyBytes = 1 << 20;

std::string SystemError() { return std::strerror(errno); }

std::string Base64(std::string_view in) {
  static constexpr char kTable[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((in.size() + 2) / 3 * 4);
  for (size_t i = 0; i < in.size(); i += 3) {
    uint32_t n = static_cast<unsigned char>(in[i]) << 16;
    if (i + 1 < in.size()) n |= static_cast<unsigned char>(in[i + 1]) << 8;
    if (i + 2 < in.size()) n |= static_cast<unsigned char>(in[i + 2]);
    out += kTable[(n >> 18) & 63];
    out += kTable[(n >> 12) & 63];
    out += i + 1 < in.size() ? kTable[(n >> 6) & 63] : '=';
    out += i + 2 < in.size() ? kTable[n & 63] : '=';
  }
  return out;
}

// A file the CLI writes into and, when it is a plain file, moves into place
// only once complete, so a failed get leaves no partial file behind.
class OutputFile {
 public:
  explicit OutputFile(std::string path) : path_(std::move(path)) {
    std::error_code ec;
    auto status = std::filesystem::status(path_, ec);
    // /dev/null, a fifo or a device: write straight into it.
    bool special =
        !ec && std::filesystem::exists(status) && !std::filesystem::is_regular_file(status);
    write_path_ = special ? path_ : path_ + ".mooncake-part-" + std::to_string(getpid());
    out_.open(write_path_, std::ios::binary | std::ios::trunc);
  }
  ~OutputFile() {
    if (!committed_ && write_path_ != path_) std::filesystem::remove(write_path_, ignored_);
  }

  bool ok() const { return static_cast<bool>(out_); }
  std::ostream& stream() { return out_; }

  bool Commit() {
    out_.close();
    if (!out_) return false;
    committed_ = true;
    if (write_path_ == path_) return true;
    std::filesystem::rename(write_path_, path_, ignored_);
    return !ignored_;
  }

 private:
  std::string path_;
  std::string write_path_;
  std::ofstream out_;
  bool committed_ = false;
  std::error_code ignored_;
};

// The size left to read on stdin when it is a plain file; nullopt for pipes.
std::optional<uint64_t> StdinSize() {
  struct stat st {};
  if (fstat(STDIN_FILENO, &st) != 0 || !S_ISREG(st.st_mode)) return std::nullopt;
  off_t position = lseek(STDIN_FILENO, 0, SEEK_CUR);
  if (position < 0 || position > st.st_size) return std::nullopt;
  return static_cast<uint64_t>(st.st_size - position);
}

// Runs one command; owns the client and the output conventions.
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

  PutOptions Options() const {
    PutOptions options;
    options.hard_pin = cmd_.hard_pin;
    options.soft_pin = cmd_.soft_pin;
    options.soft_pin_ttl_ms = cmd_.soft_pin_ttl_ms;
    options.preferred_node = cmd_.node;
    options.preferred_tier = cmd_.tier;
    return options;
  }

  bool upsert() const { return cmd_.kind == CommandKind::kUpsert; }
  std::string_view action() const { return upsert() ? "upsert" : "put"; }

  // put never overwrites; upsert creates or replaces. Same sources for both.
  Result<void> Write(std::string_view value) {
    if (cmd_.zero_copy) {
      std::istringstream in{std::string(value)};
      return WritePlanned(in, value.size(), {});
    }
    return upsert() ? client_.Upsert(cmd_.key, value, Options())
                    : client_.Put(cmd_.key, value, Options());
  }

  Result<void> WriteStream(std::istream& in, uint64_t size, const ProgressFn& progress) {
    if (cmd_.zero_copy) return WritePlanned(in, size, progress);
    return upsert() ? client_.UpsertStream(cmd_.key, in, size, Options(), progress)
                    : client_.PutStream(cmd_.key, in, size, Options(), progress);
  }

  // --zero-copy: a plan-based write. The input goes straight into the
  // worker's memory; only the plan and the commit cross the network. Any
  // failure gives the plan's space back.
  Result<void> WritePlanned(std::istream& in, uint64_t size, const ProgressFn& progress) {
    auto plan = client_.OpenForWrite(cmd_.key, size, Options(), upsert());
    if (!plan) return Err(plan.error());
    std::string why;
    auto mapping = SharedMapping::Map(plan->memory, plan->offset, size, &why);
    if (!mapping) {
      std::fprintf(stderr, "error: --zero-copy: cannot map %s memory of %s: %s\n",
                   plan->tier.c_str(), plan->node_id.c_str(), why.c_str());
      (void)client_.Revoke(*plan);
      return Err(mapping.error());
    }
    if (auto copied = CopyInto(**mapping, in, size, progress); !copied) {
      (void)client_.Revoke(*plan);
      return copied;
    }
    return client_.Commit(*plan);
  }

  static Result<void> CopyInto(SharedMapping& mapping, std::istream& in, uint64_t size,
                               const ProgressFn& progress) {
    std::string buffer;
    for (uint64_t done = 0; done < size;) {
      auto length = static_cast<size_t>(std::min<uint64_t>(kRpcChunkBytes, size - done));
      std::span<std::byte> host = mapping.host_bytes();
      // Host memory is filled in place; device memory through a buffer.
      char* into = host.empty() ? (buffer.resize(length), buffer.data())
                                : reinterpret_cast<char*>(host.data() + done);
      in.read(into, static_cast<std::streamsize>(length));
      if (static_cast<size_t>(in.gcount()) != length) {
        return Err(in.bad() ? ErrorCode::kTransferFail : ErrorCode::kInvalidParams);
      }
      if (host.empty()) {
        auto copied = mapping.CopyIn(done, std::as_bytes(std::span(buffer.data(), length)));
        if (!copied) return copied;
      }
      done += length;
      if (progress) progress(done, size);
    }
    return {};
  }

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
        auto put = Write(cmd_.value);
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
    auto put =
        WriteStream(in, size, [&bar](uint64_t done, uint64_t total) { bar.Update(done, total); });
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
      auto put = Write(head);
      return put ? Stored(head.size()) : Fail(action(), put.error(), head.size());
    }
    return PutSpooled(in, head);
  }

  int PutSpooled(std::istream& in, const std::string& head) {
    const char* tmpdir = std::getenv("TMPDIR");
    std::string path = std::string(tmpdir && *tmpdir ? tmpdir : "/tmp") + "/mooncake-cli-XXXXXX";
    int fd = mkstemp(path.data());
    if (fd < 0)
      return LocalFail("put failed: cannot create a spool file: " + SystemError(), kExitServer);
    close(fd);
    uint64_t size = 0;
    {
      std::ofstream spool(path, std::ios::binary | std::ios::trunc);
      spool.write(head.data(), static_cast<std::streamsize>(head.size()));
      std::string buffer(kSpoolCopyBytes, '\0');
      while (spool &&
             in.read(buffer.data(), static_cast<std::streamsize>(buffer.size())).gcount() > 0) {
        spool.write(buffer.data(), in.gcount());
      }
      size = static_cast<uint64_t>(spool.tellp());
      if (!spool || in.bad()) {
        std::filesystem::remove(path);
        return LocalFail("put failed: spooling stdin to " + path + ": " + SystemError(),
                         kExitServer);
      }
    }
    std::ifstream spooled(path, std::ios::binary);
    // The open stream keeps the data; the name is not needed any more.
    std::filesystem::remove(path);
    return PutSized(spooled, size);
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
    const ObjectInspection& o = *info;
    if (cmd_.json) {
      std::cout << json{{"ok", true},
                        {"key", cmd_.key},
                        {"node_id", o.node_id},
                        {"tier", o.tier},
                        {"offset", o.offset},
                        {"size", o.size},
                        {"version", o.version},
                        {"hard_pinned", o.hard_pinned},
                        {"soft_pinned", o.soft_pinned},
                        {"state", o.state},
                        {"readers", o.readers},
                        {"lease_remaining_ms", o.lease_remaining_ms},
                        {"idle_ms", o.idle_ms}}
                       .dump()
                << std::endl;
      return kExitOk;
    }
    std::string pins = o.hard_pinned ? "hard" : o.soft_pinned ? "soft" : "none";
    std::cout << fmt::format(
        "key      {}\nowner    {}\ntier     {}\nsize     {} ({} bytes)\nversion  {}\n"
        "pin      {}\nstate    {}\nreaders  {}\nlease    {} ms left\nidle     {} ms\n",
        cmd_.key, o.node_id, o.tier,
        FormatBytes(static_cast<uint64_t>(std::max<int64_t>(o.size, 0))), o.size, o.version, pins,
        o.state, o.readers, o.lease_remaining_ms, o.idle_ms);
    std::cout.flush();
    return kExitOk;
  }

  int Locate() {
    auto placement = client_.GetLocation(cmd_.key);
    if (!placement) return Fail("locate", placement.error());
    const ObjectPlacement& p = *placement;
    const char* kind = p.memory.kind == MemoryRegionHandle::Kind::kHostFile    ? "host_file"
                       : p.memory.kind == MemoryRegionHandle::Kind::kDeviceIpc ? "device_ipc"
                                                                               : "none";
    if (cmd_.json) {
      std::cout << json{{"ok", true},
                        {"key", cmd_.key},
                        {"node_id", p.node_id},
                        {"tier", p.tier},
                        {"offset", p.offset},
                        {"size", p.size},
                        {"version", p.version},
                        {"hold_ms", p.hold_ms},
                        {"memory",
                         {{"kind", kind},
                          {"path", p.memory.path},
                          {"device_index", p.memory.device_index},
                          {"region_size", p.memory.region_size},
                          {"ipc_handle_bytes", p.memory.ipc_handle.size()}}}}
                       .dump()
                << std::endl;
      return kExitOk;
    }
    std::cout << fmt::format(
        "key      {}\nowner    {}\ntier     {}\noffset   {}\nsize     {} ({} bytes)\n"
        "version  {}\nmemory   {}{}\nheld     {} ms\n",
        cmd_.key, p.node_id, p.tier, p.offset, FormatBytes(p.size), p.size, p.version, kind,
        p.memory.path.empty() ? "" : " " + p.memory.path, p.hold_ms);
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
        PrintStats(*stats);
      }
    }
    if (cmd_.json && exit_code == kExitOk) {
      std::cout << (cmd_.node.empty() ? all : all.at(0)).dump() << std::endl;
    }
    return exit_code;
  }

  static json StatsJson(const WorkerCounters& s) {
    json tiers = json::array();
    for (const auto& t : s.tiers) {
      tiers.push_back({{"name", t.usage.name},
                       {"kind", t.usage.kind},
                       {"capacity", t.usage.capacity},
                       {"used", t.usage.used},
                       {"objects", t.usage.objects},
                       {"hits", t.hits},
                       {"promotions_in", t.promotions_in},
                       {"demotions_out", t.demotions_out},
                       {"evictions", t.evictions}});
    }
    return {{"node_id", s.node_id},
            {"gets", s.gets},
            {"get_misses", s.get_misses},
            {"puts", s.puts},
            {"removes", s.removes},
            {"dropped", s.dropped},
            {"upserts", s.upserts},
            {"prefetch_started", s.prefetch_started},
            {"prefetch_succeeded", s.prefetch_succeeded},
            {"prefetch_failed", s.prefetch_failed},
            {"prefetch_skipped", s.prefetch_skipped},
            {"moved_out", s.moved_out},
            {"moved_in", s.moved_in},
            {"pinned_bytes", s.pinned_bytes},
            {"tiers", tiers}};
  }

  static void PrintStats(const WorkerCounters& s) {
    std::cout << fmt::format(
        "node {}: gets {} (misses {}), puts {}, upserts {}, removes {}, dropped {}\n", s.node_id,
        s.gets, s.get_misses, s.puts, s.upserts, s.removes, s.dropped);
    std::cout << fmt::format(
        "  prefetch: started {}, succeeded {}, failed {}, skipped {}; moved out {}, in {}; "
        "pinned {}\n",
        s.prefetch_started, s.prefetch_succeeded, s.prefetch_failed, s.prefetch_skipped,
        s.moved_out, s.moved_in,
        FormatBytes(static_cast<uint64_t>(std::max<int64_t>(s.pinned_bytes, 0))));
    std::cout << fmt::format("  {:<12} {:<5} {:>11} {:>11} {:>9} {:>10} {:>10} {:>10} {:>10}\n",
                             "TIER", "KIND", "CAPACITY", "USED", "OBJECTS", "HITS", "PROMOTIONS",
                             "DEMOTIONS", "EVICTIONS");
    for (const auto& t : s.tiers) {
      std::cout << fmt::format("  {:<12} {:<5} {:>11} {:>11} {:>9} {:>10} {:>10} {:>10} {:>10}\n",
                               t.usage.name, t.usage.kind, FormatBytes(t.usage.capacity),
                               FormatBytes(t.usage.used), t.usage.objects, t.hits, t.promotions_in,
                               t.demotions_out, t.evictions);
    }
    std::cout.flush();
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
    std::cout << fmt::format("{:<16} {:<22} {:<6} {}\n", "NODE", "ADDRESS", "ALIVE",
                             "TIERS (used/capacity)");
    for (const auto& n : *nodes) {
      std::string tiers;
      for (const auto& t : n.tiers) {
        if (!tiers.empty()) tiers += ", ";
        tiers += fmt::format("{} {}/{}", t.name, FormatBytes(t.used), FormatBytes(t.capacity));
      }
      std::cout << fmt::format("{:<16} {:<22} {:<6} {}\n", n.node_id,
                               n.host + ":" + std::to_string(n.port), n.alive ? "yes" : "no",
                               tiers);
    }
    std::cout.flush();
    return kExitOk;
  }

  static json NodeJson(const NodeRecord& n) {
    json tiers = json::array();
    for (const auto& t : n.tiers) {
      tiers.push_back({{"name", t.name},
                       {"kind", t.kind},
                       {"capacity", t.capacity},
                       {"used", t.used},
                       {"objects", t.objects}});
    }
    return {{"node_id", n.node_id},
            {"host", n.host},
            {"port", n.port},
            {"alive", n.alive},
            {"last_heartbeat_ms", n.last_heartbeat_ms},
            {"tiers", tiers}};
  }

  const CliCommand& cmd_;
  Client& client_;
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
