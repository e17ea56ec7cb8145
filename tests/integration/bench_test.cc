// mooncake-bench against a harness cluster: the --batch load and mixed
// phases, and the master-only workload, each with --json. Checks the report's
// shape and that work was done, never how fast.

#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "client/client.h"
#include "tests/integration/bench_runner.h"
#include "tests/integration/test_cluster.h"
#include "tests/unused_port.h"

#ifndef MOONCAKE_BENCH_BIN
#define MOONCAKE_BENCH_BIN "mooncake-bench"
#endif

namespace mooncake::testing {
namespace {

using nlohmann::json;

class BenchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(cluster_.StartMaster());
    ASSERT_TRUE(cluster_.StartWorker("w1", {.dram = 64ull << 20, .ssd = 64ull << 20}));
  }

  // Runs mooncake-bench with `--master` of this cluster.
  BenchRun Run(std::vector<std::string> args) {
    args.insert(args.begin(), {"--master", cluster_.master_address()});
    return RunBenchBinary(args, cluster_.dir() / "bench.err");
  }

  // The phase `phase`/`op` of a report, or null.
  static const json* Phase(const json& report, const std::string& phase, const std::string& op) {
    for (const auto& row : report["phases"]) {
      if (row["phase"] == phase && row["op"] == op) return &row;
    }
    return nullptr;
  }

  static void ExpectPhaseFields(const json& row) {
    for (const char* field : {"ops", "ops_per_s", "keys_per_s", "calls", "calls_per_s", "p50_us",
                              "p99_us", "p999_us", "errors", "mb_per_s", "seconds"}) {
      EXPECT_TRUE(row.contains(field)) << field << " in " << row.dump();
    }
  }

  TestCluster cluster_;
};

TEST_F(BenchTest, BatchLoadAndMixedReportKeysAndCalls) {
  BenchRun run = Run({"--node", "w1", "--batch", "16", "--keys", "200", "--duration-s", "1",
                      "--concurrency", "2", "--json", "--cleanup"});
  ASSERT_EQ(run.status, 0) << run.out << "\n" << run.err << cluster_.AllLogTails();
  json report = json::parse(run.out);
  EXPECT_EQ(report["config"]["batch"], 16);

  const json* load = Phase(report, "load", "put");
  ASSERT_NE(load, nullptr) << run.out;
  ExpectPhaseFields(*load);
  EXPECT_EQ((*load)["ops"], 200) << "every key loaded";
  EXPECT_EQ((*load)["calls"], 13) << "200 keys in calls of 16: 12 full and one of 8";
  EXPECT_GT((*load)["keys_per_s"].get<double>(), 0);
  EXPECT_GT((*load)["calls_per_s"].get<double>(), 0);
  EXPECT_EQ((*load)["errors"], 0);

  const json* get = Phase(report, "mixed", "get");
  ASSERT_NE(get, nullptr) << run.out;
  ExpectPhaseFields(*get);
  EXPECT_GT((*get)["ops"].get<uint64_t>(), 0u);
  EXPECT_EQ((*get)["ops"].get<uint64_t>(), 16 * (*get)["calls"].get<uint64_t>())
      << "every get call fetched 16 keys";
  EXPECT_GT((*get)["keys_per_s"].get<double>(), (*get)["calls_per_s"].get<double>());
  EXPECT_EQ((*get)["errors"], 0);
}

// Before the load phase's clock, every thread makes one call shaped as the
// phase's (Put, BatchPut of --batch keys, or with --async one PutAsync per
// call in flight); those keys are removed before the phase, counted in
// neither phase, gone even without --cleanup, and never more than the load.
TEST_F(BenchTest, TheLoadPhaseOpensItsConnectionsFirstAndLeavesNoWarmUpKey) {
  auto client = cluster_.NewClient();
  ASSERT_NE(client, nullptr);
  for (std::string mode : {"1", "4", "async"}) {
    SCOPED_TRACE(mode == "async" ? "--async" : "--batch " + mode);
    const bool async = mode == "async";
    const int batch = async ? 1 : std::stoi(mode);
    std::vector<std::string> args = {"--node", "w1", "--keys",      "20", "--concurrency", "3",
                                     "--ops",  "6",  "--get-ratio", "1",  "--json"};
    if (async) {
      args.push_back("--async");
    } else {
      args.insert(args.end(), {"--batch", mode});
    }
    BenchRun run = Run(args);
    ASSERT_EQ(run.status, 0) << run.out << "\n" << run.err << cluster_.AllLogTails();
    json report = json::parse(run.out);
    const json& warm = report["warm_up"];
    EXPECT_EQ(warm["keys"], 3 * batch) << report.dump();
    EXPECT_EQ(warm["stored"], 3 * batch) << report.dump();
    EXPECT_EQ(warm["removed"], 3 * batch) << report.dump();
    const json* load = Phase(report, "load", "put");
    ASSERT_NE(load, nullptr) << run.out;
    EXPECT_EQ((*load)["ops"], 20) << "the warm-up's puts are not the phase's";
    EXPECT_EQ((*load)["calls"], 20 / batch);

    std::string prefix = report["config"]["run_prefix"];
    for (int t = 0; t < 3; ++t) {
      auto gone = client->Exist(prefix + "warm" + std::to_string(t) + "-0");
      ASSERT_TRUE(gone.has_value());
      EXPECT_FALSE(*gone) << "warm-up key of thread " << t << " is still there";
    }
    auto loaded = client->Exist(prefix + "k19");
    ASSERT_TRUE(loaded.has_value());
    EXPECT_TRUE(*loaded) << "without --cleanup the loaded keys stay";
  }

  // A load smaller than the threads' calls warms with no more keys than it
  // puts: two threads of one key each, not three of four.
  BenchRun small = Run({"--node", "w1", "--keys", "2", "--concurrency", "3", "--batch", "4",
                        "--ops", "1", "--get-ratio", "1", "--json"});
  ASSERT_EQ(small.status, 0) << small.out << "\n" << small.err;
  json report = json::parse(small.out);
  EXPECT_EQ(report["warm_up"]["keys"], 2) << report.dump();
  EXPECT_EQ(report["warm_up"]["removed"], 2) << report.dump();
}

// --rpc-poll-us reaches the client's connections: each wait for a reply is
// counted (polled, or not for want of a spare CPU) unless it is 0.
TEST_F(BenchTest, TheReportCountsTheClientsPollsAndZeroTurnsThemOff) {
  for (int poll_us : {0, 30}) {
    BenchRun run = Run({"--node", "w1", "--keys", "50", "--ops", "100", "--get-ratio", "1",
                        "--concurrency", "1", "--rpc-poll-us", std::to_string(poll_us), "--json"});
    ASSERT_EQ(run.status, 0) << run.out << "\n" << run.err << cluster_.AllLogTails();
    json report = json::parse(run.out);
    EXPECT_EQ(report["config"]["rpc_poll_us"], poll_us);
    const json& polls = report["rpc_polls"];
    ASSERT_TRUE(polls.is_object()) << run.out;
    uint64_t waits = polls["data"].get<uint64_t>() + polls["expired"].get<uint64_t>() +
                     polls["busy"].get<uint64_t>();
    if (poll_us == 0) {
      EXPECT_EQ(waits, 0u) << polls.dump();
    } else {
      // At least the 50 puts' and the 100 gets' replies.
      EXPECT_GE(waits, 150u) << polls.dump();
    }
  }
}

TEST_F(BenchTest, AsyncPutsAndGetsKeepConcurrencyInFlightAndCheckEveryValue) {
  BenchRun run = Run({"--node", "w1", "--async", "--get-ratio", "1", "--keys", "200",
                      "--value-size", "2KiB", "--concurrency", "8", "--ops", "500", "--json"});
  ASSERT_EQ(run.status, 0) << run.out << "\n" << run.err << cluster_.AllLogTails();
  json report = json::parse(run.out);
  const json* get = Phase(report, "mixed", "get");
  ASSERT_NE(get, nullptr) << run.out;
  ExpectPhaseFields(*get);
  EXPECT_EQ((*get)["ops"], 500) << "exactly --ops gets, each returning --value-size bytes";
  EXPECT_EQ((*get)["errors"], 0);
  EXPECT_EQ(Phase(report, "mixed", "put"), nullptr) << "--async issues gets only";
  const json* load = Phase(report, "load", "put");
  ASSERT_NE(load, nullptr) << run.out;
  EXPECT_EQ((*load)["ops"], 200) << "every key put through PutAsync";
  EXPECT_EQ((*load)["errors"], 0);
  EXPECT_EQ(report["async"]["puts"], 200) << run.out;
  EXPECT_LE(report["async"]["put_batches"], 200) << run.out;
  // The load phase's puts taught the client every owner: all 500 gets came
  // on the pipelined connection.
  EXPECT_EQ(report["async"]["gets_pipelined"], 500) << run.out;
  EXPECT_EQ(report["async"]["gets_slow"], 0) << run.out;
}

TEST_F(BenchTest, AsyncRefusesPutsAndBatches) {
  for (const auto& extra : std::vector<std::vector<std::string>>{
           {"--get-ratio", "0.9"}, {"--get-ratio", "1", "--batch", "4"}}) {
    std::vector<std::string> args = {"--async", "--keys", "10"};
    args.insert(args.end(), extra.begin(), extra.end());
    BenchRun run = Run(args);
    EXPECT_EQ(run.status, 2) << run.out << run.err;
    EXPECT_NE(run.err.find("--async drives single puts and gets"), std::string::npos) << run.err;
  }
}

TEST_F(BenchTest, MasterWorkloadReportsPutsLocationsAndBytesPerKey) {
  std::string admin = "127.0.0.1:" + std::to_string(cluster_.master_admin_port());
  BenchRun run = Run(
      {"--workload", "master", "--keys", "2000", "--json", "--cleanup", "--master-admin", admin});
  ASSERT_EQ(run.status, 0) << run.out << "\n" << run.err << cluster_.AllLogTails();
  json report = json::parse(run.out);

  const json* put = Phase(report, "master", "put_owner");
  ASSERT_NE(put, nullptr) << run.out;
  ExpectPhaseFields(*put);
  EXPECT_EQ((*put)["ops"], 2000);
  EXPECT_GT((*put)["ops_per_s"].get<double>(), 0);
  EXPECT_EQ((*put)["errors"], 0);

  const json* locate = Phase(report, "master", "get_location");
  ASSERT_NE(locate, nullptr) << run.out;
  ExpectPhaseFields(*locate);
  EXPECT_EQ((*locate)["ops"], 2000);
  EXPECT_EQ((*locate)["calls"], 8) << "2000 keys, 256 per BatchGetLocation";
  EXPECT_GT((*locate)["keys_per_s"].get<double>(), 0);

  const json* remove = Phase(report, "master", "remove_owner");
  ASSERT_NE(remove, nullptr) << run.out;
  EXPECT_EQ((*remove)["ops"], 2000);

  ASSERT_TRUE(report.contains("master_bytes_per_key")) << run.out;
  EXPECT_TRUE(report["master_bytes_per_key"].is_number()) << run.out;
  EXPECT_TRUE(report["master"]["rss_before"].is_number()) << run.out;
  EXPECT_GT(report["master"]["avg_key_bytes"].get<double>(), 0);
}

TEST_F(BenchTest, MasterWorkloadWithoutAdminSkipsBytesPerKey) {
  BenchRun run = Run({"--workload", "master", "--keys", "2000", "--json"});
  ASSERT_EQ(run.status, 0) << run.out << "\n" << run.err;
  json report = json::parse(run.out);
  EXPECT_TRUE(report["master_bytes_per_key"].is_null());
  EXPECT_NE(report["master"]["rss_note"].get<std::string>().find("--master-admin"),
            std::string::npos);
  const json* put = Phase(report, "master", "put_owner");
  ASSERT_NE(put, nullptr);
  EXPECT_GT((*put)["ops_per_s"].get<double>(), 0);
}

// --workload loop calls the worker directly from one thread: its puts are
// real (claimed at the master, readable through a Client), its gets return
// the bytes put, and --cleanup removes every key.
TEST_F(BenchTest, LoopWorkloadPutsGetsAndRemovesThroughTheWorkerAlone) {
  std::string worker = "127.0.0.1:" + std::to_string(cluster_.worker_port("w1"));
  BenchRun run = Run({"--workload", "loop", "--worker", worker, "--keys", "300", "--value-size",
                      "1KiB", "--concurrency", "4", "--duration-s", "1", "--json"});
  ASSERT_EQ(run.status, 0) << run.out << "\n" << run.err << cluster_.AllLogTails();
  json report = json::parse(run.out);
  const json* load = Phase(report, "load", "put");
  ASSERT_NE(load, nullptr) << run.out;
  ExpectPhaseFields(*load);
  EXPECT_EQ((*load)["ops"], 300);
  EXPECT_EQ((*load)["errors"], 0);
  const json* get = Phase(report, "mixed", "get");
  ASSERT_NE(get, nullptr) << run.out;
  EXPECT_GT((*get)["ops"].get<uint64_t>(), 0u);
  EXPECT_EQ((*get)["ops"], (*get)["calls"]) << "one key per call";
  EXPECT_EQ((*get)["errors"], 0) << "every get returned the bytes put";
  EXPECT_EQ(Phase(report, "cleanup", "remove"), nullptr) << "no --cleanup, no removes";

  std::string prefix = report["config"]["run_prefix"];
  auto client = cluster_.NewClient();
  ASSERT_NE(client, nullptr);
  EXPECT_TRUE(ReadsBack(*client, prefix + "0", std::string(1024, 'v')));
  EXPECT_TRUE(ReadsBack(*client, prefix + "299", std::string(1024, 'v')));

  BenchRun cleaned = Run({"--workload", "loop", "--worker", worker, "--keys", "100",
                          "--concurrency", "3", "--duration-s", "0.2", "--json", "--cleanup"});
  ASSERT_EQ(cleaned.status, 0) << cleaned.out << "\n" << cleaned.err;
  json second = json::parse(cleaned.out);
  const json* remove = Phase(second, "cleanup", "remove");
  ASSERT_NE(remove, nullptr) << cleaned.out;
  EXPECT_EQ((*remove)["ops"], 100);
  EXPECT_EQ((*remove)["errors"], 0);
  std::string second_prefix = second["config"]["run_prefix"];
  auto removed = client->Get(second_prefix + "0");
  ASSERT_FALSE(removed) << "a key of the cleaned-up run is still there";
  EXPECT_EQ(removed.error(), ErrorCode::kObjectNotFound);
}

TEST_F(BenchTest, LoopWorkloadRejectsAMissingWorkerAndReportsAnUnreachableOne) {
  BenchRun missing = Run({"--workload", "loop"});
  EXPECT_EQ(missing.status, 2) << missing.out << missing.err;
  EXPECT_NE(missing.err.find("--worker HOST:PORT"), std::string::npos) << missing.err;
  BenchRun unreachable =
      Run({"--workload", "loop", "--worker", "127.0.0.1:" + std::to_string(UnusedPort())});
  EXPECT_EQ(unreachable.status, 3) << unreachable.out << unreachable.err;
  EXPECT_NE(unreachable.err.find("cannot reach the worker"), std::string::npos) << unreachable.err;
}

}  // namespace
}  // namespace mooncake::testing
