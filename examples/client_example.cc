// mooncake-client-example: what a serving framework does with
// mooncake::Client, in one small program. It stores a batch of KV blocks,
// probes them (with prefetch, as a decode node would before it needs them),
// reads them back, replaces one with Upsert and checks every answer.
//
//   mooncake-client-example --master 127.0.0.1:50051 [--node worker-1]
//
// Exit status 0 when every step behaved as expected, 1 on a mismatch or
// error (the failing step is printed), 2 on a usage error.

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "client/client.h"

namespace {

using mooncake::Client;
using mooncake::ErrorCode;

constexpr int kBlocks = 8;
constexpr size_t kBlockBytes = 64 * 1024;

bool Check(bool ok, const std::string& what) {
  std::printf("%-48s %s\n", what.c_str(), ok ? "ok" : "FAILED");
  return ok;
}

std::string Describe(ErrorCode code) {
  return std::string(mooncake::ToString(code)) + " (" + std::to_string(static_cast<int>(code)) +
         ")";
}

// A block whose bytes depend on its index and version, so a stale or mixed
// up value is noticed.
std::string Block(int index, int version) {
  std::string data(kBlockBytes, '\0');
  for (size_t i = 0; i < data.size(); ++i) {
    data[i] = static_cast<char>((i * 31 + index * 7 + version * 13) & 0xff);
  }
  return data;
}

// A prefix no earlier run used: Put never overwrites.
std::string RunPrefix() {
  auto now = std::chrono::system_clock::now().time_since_epoch();
  return "example-" +
         std::to_string(std::chrono::duration_cast<std::chrono::microseconds>(now).count()) + "/";
}

bool RunExample(Client& client) {
  std::string prefix = RunPrefix();
  std::vector<std::pair<std::string, std::string>> items;
  std::vector<std::string> keys;
  for (int i = 0; i < kBlocks; ++i) {
    keys.push_back(prefix + "block-" + std::to_string(i));
    items.emplace_back(keys.back(), Block(i, 1));
  }
  bool ok = true;

  auto put = client.BatchPut(items);
  for (int i = 0; i < kBlocks; ++i) {
    ok &= Check(put[i].has_value(),
                "BatchPut " + keys[i] + (put[i] ? "" : ": " + Describe(put[i].error())));
  }

  std::vector<std::string> probe = keys;
  probe.push_back(prefix + "never-written");
  auto exist = client.BatchExist(probe, /*prefetch=*/true);
  for (size_t i = 0; i < probe.size(); ++i) {
    bool expected = i < keys.size();
    ok &= Check(exist[i].has_value() && *exist[i] == expected,
                "BatchExist(prefetch) " + probe[i] + " -> " + (expected ? "1" : "0"));
  }

  auto got = client.BatchGet(keys);
  for (int i = 0; i < kBlocks; ++i) {
    ok &= Check(got[i].has_value() && got[i]->data == items[i].second,
                "BatchGet " + keys[i] + " matches");
  }

  // Same size: replaced in place, with a higher version.
  int64_t old_version = got[0] ? got[0]->version : 0;
  auto upsert = client.Upsert(keys[0], Block(0, 2));
  ok &= Check(upsert.has_value(),
              "Upsert " + keys[0] + (upsert ? "" : ": " + Describe(upsert.error())));
  auto after = client.Get(keys[0]);
  ok &= Check(after.has_value() && after->data == Block(0, 2), "Get after Upsert sees new value");
  ok &= Check(after.has_value() && after->version > old_version, "Upsert raised the version");

  // Upsert of a new key creates it.
  std::string fresh = prefix + "upserted";
  ok &= Check(client.Upsert(fresh, "created by upsert").has_value(), "Upsert of a new key");
  auto fresh_got = client.Get(fresh);
  ok &= Check(fresh_got.has_value() && fresh_got->data == "created by upsert",
              "Get of the upserted key");

  keys.push_back(fresh);
  auto removed = client.BatchRemove(keys, /*force=*/true);
  bool all_removed = true;
  for (const auto& r : removed) all_removed &= r.has_value();
  ok &= Check(all_removed, "BatchRemove of every key (cleanup)");
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  std::string master = "127.0.0.1:50051";
  std::string node;
  CLI::App app{"mooncake-client-example: BatchPut, BatchExist, BatchGet and Upsert",
               "mooncake-client-example"};
  app.add_option("--master", master, "Master HOST:PORT")->capture_default_str();
  app.add_option("--node", node, "This machine's worker node id (optional)");
  CLI11_PARSE(app, argc, argv);

  size_t colon = master.rfind(':');
  if (colon == std::string::npos || colon == 0) {
    std::fprintf(stderr, "error: --master must be HOST:PORT\n");
    return 2;
  }
  mooncake::ClientConfig config;
  config.master_host = master.substr(0, colon);
  config.master_port = std::atoi(master.c_str() + colon + 1);
  config.local_node = node;
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
