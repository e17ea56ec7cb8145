// mooncake-zero-copy-example: a producer on a worker's own node (a prefill
// process writing KV blocks, say) stores objects without sending their
// bytes through the worker: it asks for a plan, writes into the worker's
// memory itself, and commits. A reader on the node then finds the object
// with GetLocation and reads it in place.
//
//   mooncake-zero-copy-example --master 127.0.0.1:50051 --node worker-1
//
// With a VRAM tier on the worker the plan is device memory (a HIP IPC
// handle) and the copies go through hipMemcpy; without one it is the DRAM
// arena, mapped with mmap. Exit status 0 when every step behaved, 1 on a
// mismatch or error (the failing step is printed), 2 on a usage error.

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <span>
#include <string>

#include "client/client.h"
#include "client/shared_mapping.h"

namespace {

using mooncake::Client;
using mooncake::ErrorCode;
using mooncake::SharedMapping;

constexpr size_t kBlockBytes = 2 * 1024 * 1024;

bool Check(bool ok, const std::string& what) {
  std::printf("%-52s %s\n", what.c_str(), ok ? "ok" : "FAILED");
  return ok;
}

std::string Describe(ErrorCode code) {
  return std::string(mooncake::ToString(code)) + " (" + std::to_string(static_cast<int>(code)) +
         ")";
}

std::string Block(int version) {
  std::string data(kBlockBytes, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>((i * 131 + version) & 0xff);
  return data;
}

std::string RunKey() {
  auto now = std::chrono::system_clock::now().time_since_epoch();
  return "zero-copy-example-" +
         std::to_string(std::chrono::duration_cast<std::chrono::microseconds>(now).count());
}

// Producer: plan, write in place, commit.
bool Produce(Client& client, const std::string& key, const std::string& value, bool upsert) {
  auto plan = client.OpenForWrite(key, value.size(), {}, upsert);
  if (!Check(plan.has_value(), "OpenForWrite " + key +
                                   (plan ? " -> " + plan->tier + " of " + plan->node_id
                                         : ": " + Describe(plan.error())))) {
    return false;
  }
  std::string why;
  auto mapping = SharedMapping::Map(plan->memory, plan->offset, value.size(), &why);
  if (!Check(mapping.has_value(), "map the plan's memory" + (mapping ? "" : ": " + why))) {
    (void)client.Revoke(*plan);
    return false;
  }
  auto written = (*mapping)->CopyIn(0, std::as_bytes(std::span(value.data(), value.size())));
  if (!Check(written.has_value(), "write the value in place")) {
    (void)client.Revoke(*plan);
    return false;
  }
  auto committed = client.Commit(*plan);
  return Check(committed.has_value(),
               "Commit" + (committed ? std::string() : ": " + Describe(committed.error())));
}

// Reader on the same node: locate, read in place, make sure nothing
// rewrote it meanwhile.
bool ReadInPlace(Client& client, const std::string& key, const std::string& expected) {
  auto placement = client.GetLocation(key);
  if (!Check(placement.has_value(), "GetLocation " + key +
                                        (placement ? " -> " + placement->tier + " offset " +
                                                         std::to_string(placement->offset)
                                                   : ": " + Describe(placement.error())))) {
    return false;
  }
  std::string why;
  auto mapping = SharedMapping::Map(placement->memory, placement->offset, placement->size, &why);
  if (!Check(mapping.has_value(), "map the placement" + (mapping ? "" : ": " + why))) return false;
  std::string seen(placement->size, '\0');
  auto read = (*mapping)->CopyOut(0, std::as_writable_bytes(std::span(seen.data(), seen.size())));
  auto again = client.GetLocation(key);
  bool unchanged = again.has_value() && again->version == placement->version;
  return Check(read.has_value() && unchanged && seen == expected,
               "read in place matches (version unchanged)");
}

bool RunExample(Client& client) {
  const std::string key = RunKey();
  bool ok = Produce(client, key, Block(1), /*upsert=*/false);
  auto got = client.Get(key);
  ok &= Check(got.has_value() && got->data == Block(1), "Get sees the committed value");
  ok &= ReadInPlace(client, key, Block(1));
  // Same size: the next version is written over the old one in place.
  ok &= Produce(client, key, Block(2), /*upsert=*/true);
  ok &= ReadInPlace(client, key, Block(2));
  ok &= Check(client.Remove(key, /*force=*/true).has_value(), "Remove (cleanup)");
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  std::string master = "127.0.0.1:50051";
  std::string node;
  CLI::App app{"mooncake-zero-copy-example: plan-based writes and in-place reads on a node",
               "mooncake-zero-copy-example"};
  app.add_option("--master", master, "Master HOST:PORT")->capture_default_str();
  app.add_option("--node", node, "The worker on this machine (node id)")->required();
  CLI11_PARSE(app, argc, argv);

  size_t colon = master.rfind(':');
  if (colon == std::string::npos || colon == 0) {
    std::fprintf(stderr, "error: --master must be HOST:PORT\n");
    return 2;
  }
  mooncake::ClientConfig config;
  config.master_host = master.substr(0, colon);
  config.master_port = std::atoi(master.c_str() + colon + 1);
  config.local_node = node;  // plans are placed on this node
  auto client = Client::Create(config);
  if (!client) {
    std::fprintf(stderr, "error: cannot connect to the master at %s: %s\n", master.c_str(),
                 Describe(client.error()).c_str());
    return 1;
  }
  bool ok = RunExample(**client);
  std::printf("%s\n", ok ? "example finished: every step ok" : "example FAILED");
  return ok ? 0 : 1;
}
