// Mutual TLS on every RPC hop of real processes: a throwaway CA (made with
// the `openssl` command) signs the master's and workers' certificate and a
// client's; a second, rogue CA signs a certificate nobody trusts. Expect
// clients, the CLI and worker-to-worker moves with good certificates to work
// byte-exact, and everyone else (plain TCP, a rogue certificate, a raw
// Thrift frame) to get no answer, counted by the master as tls_handshake.
// The admin servers stay plain HTTP, which is how /metrics is read here.
//
// Without the openssl command (Debian package `openssl`) the tests skip.

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <future>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "client/client.h"
#include "tests/integration/test_cluster.h"
#include "tests/raw_rpc.h"

namespace mooncake::testing {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr uint64_t kMiB = 1ull << 20;

bool HaveOpenssl() { return std::system("openssl version >/dev/null 2>&1") == 0; }

std::string Quoted(const fs::path& p) { return "'" + p.string() + "'"; }

// A throwaway PKI in a temp dir: a CA, a node certificate and a client
// certificate it signed, and a rogue CA with a certificate of its own. EC
// P-256 keys: quick to make.
class TestPki {
 public:
  TestPki() {
    std::string tmpl = (fs::temp_directory_path() / "mooncake-tls-XXXXXX").string();
    if (mkdtemp(tmpl.data()) == nullptr) {
      error_ = "mkdtemp failed";
      return;
    }
    dir_ = tmpl;
    std::ofstream(dir_ / "leaf.ext")
        << "basicConstraints=CA:FALSE\nsubjectAltName=IP:127.0.0.1,DNS:localhost\n";
    ok_ = MakeCa("ca", "mooncake-test-ca") && MakeLeaf("node", "ca") && MakeLeaf("client", "ca") &&
          MakeCa("rogue-ca", "rogue-ca") && MakeLeaf("rogue", "rogue-ca");
  }
  ~TestPki() {
    std::error_code ec;
    if (!dir_.empty()) fs::remove_all(dir_, ec);
  }

  bool ok() const { return ok_; }
  // Why the PKI could not be made, with openssl's output.
  std::string error() const {
    std::ifstream log(dir_ / "openssl.log");
    return error_ + "\n" + std::string(std::istreambuf_iterator<char>(log), {});
  }
  const fs::path& dir() const { return dir_; }

  // `name`.crt and `name`.key, trusting `ca`.crt.
  TlsSettings Settings(const std::string& name, const std::string& ca = "ca") const {
    return {.cert_file = (dir_ / (name + ".crt")).string(),
            .key_file = (dir_ / (name + ".key")).string(),
            .ca_file = (dir_ / (ca + ".crt")).string()};
  }
  static std::vector<std::string> Flags(const TlsSettings& tls) {
    return {"--tls-cert", tls.cert_file, "--tls-key", tls.key_file, "--tls-ca", tls.ca_file};
  }

 private:
  bool Run(const std::string& command) {
    if (std::system((command + " >>" + Quoted(dir_ / "openssl.log") + " 2>&1").c_str()) == 0) {
      return true;
    }
    error_ = "failed: " + command;
    return false;
  }
  std::string NewKey(const std::string& name) const {
    return " -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout " +
           Quoted(dir_ / (name + ".key"));
  }
  bool MakeCa(const std::string& name, const std::string& cn) {
    return Run("openssl req -x509" + NewKey(name) + " -out " + Quoted(dir_ / (name + ".crt")) +
               " -days 2 -subj /CN=" + cn);
  }
  bool MakeLeaf(const std::string& name, const std::string& ca) {
    return Run("openssl req -new" + NewKey(name) + " -out " + Quoted(dir_ / (name + ".csr")) +
               " -subj /CN=" + name) &&
           Run("openssl x509 -req -in " + Quoted(dir_ / (name + ".csr")) + " -CA " +
               Quoted(dir_ / (ca + ".crt")) + " -CAkey " + Quoted(dir_ / (ca + ".key")) +
               " -CAcreateserial -days 2 -extfile " + Quoted(dir_ / "leaf.ext") + " -out " +
               Quoted(dir_ / (name + ".crt")));
  }

  fs::path dir_;
  bool ok_ = false;
  std::string error_;
};

// Counters of the admin servers' /metrics (AdminMetric reads them).
const std::string kTlsRejected = "mooncake_rpc_rejected_frames_total{reason=\"tls_handshake\"}";
const std::string kIdleClosed = "mooncake_rpc_idle_closed_connections_total";

std::string Show(const CliResult& r) {
  return "exit=" + std::to_string(r.exit_code) + " stdout=" + r.out.substr(0, 500) +
         " stderr=" + r.err.substr(0, 1000);
}

// ---- The fixture ----

class TlsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (HaveOpenssl()) pki_ = new TestPki();
  }
  static void TearDownTestSuite() {
    delete pki_;
    pki_ = nullptr;
  }

  void SetUp() override {
    if (pki_ == nullptr) {
      GTEST_SKIP() << "the openssl command is not installed (Debian package 'openssl'); "
                      "it makes the test certificates";
    }
    ASSERT_TRUE(pki_->ok()) << pki_->error();
  }
  void TearDown() override {
    if (HasFailure()) std::cerr << cluster_.AllLogTails(30);
  }

  // Given a master and `workers` (w1, w2, ...), all with the node
  // certificate, and `extra` flags.
  void StartTlsCluster(int workers, const std::vector<std::string>& extra = {}) {
    auto flags = TestPki::Flags(pki_->Settings("node"));
    flags.insert(flags.end(), extra.begin(), extra.end());
    ASSERT_TRUE(cluster_.StartMaster(flags));
    master_admin_ = cluster_.master_admin_port();
    ASSERT_GT(master_admin_, 0);
    for (int i = 1; i <= workers; ++i) {
      WorkerOptions options{.dram = 16 * kMiB, .ssd = 64 * kMiB};
      options.extra_args = flags;
      ASSERT_TRUE(cluster_.StartWorker("w" + std::to_string(i), options));
    }
  }

  ClientConfig ConfigWith(const TlsSettings& tls, const std::string& local_node = "") const {
    ClientConfig config = cluster_.ClientConfigFor(local_node);
    config.tls = tls;
    config.connect_timeout_ms = 2000;
    config.io_timeout_ms = 5000;
    return config;
  }

  double TlsRejections() const { return AdminMetric(master_admin_, kTlsRejected); }

  // Expects Client::Create(config) to fail with `expected`.
  static ::testing::AssertionResult CreateFails(const ClientConfig& config, ErrorCode expected) {
    auto client = Client::Create(config);
    if (client) return ::testing::AssertionFailure() << "Client::Create succeeded";
    return FailsWith(client, expected);
  }

  static TestPki* pki_;
  TestCluster cluster_;
  int master_admin_ = -1;
};

TestPki* TlsTest::pki_ = nullptr;

TEST_F(TlsTest, ClientWithACertificatePutsAndGetsByteExact) {
  ASSERT_NO_FATAL_FAILURE(StartTlsCluster(1));
  auto client = cluster_.NewClient(ConfigWith(pki_->Settings("client")));
  ASSERT_TRUE(client);

  // A small value, and one over a chunk (the chunked PutStart/PutChunk path).
  const std::string small = "hello over TLS";
  const std::string large = PatternBytes(11, kRpcChunkBytes + kMiB + 123);
  ASSERT_TRUE(IsOk(client->Put("small", small)));
  ASSERT_TRUE(IsOk(client->Put("large", large)));
  EXPECT_TRUE(ReadsBack(*client, "small", small));
  EXPECT_TRUE(ReadsBack(*client, "large", large));

  // A batch, through BatchPut and BatchGet.
  std::vector<std::pair<std::string, std::string>> items;
  for (int i = 0; i < 5; ++i) {
    items.emplace_back("batch-" + std::to_string(i), PatternBytes(20 + i, (i + 1) * 100 * 1024));
  }
  for (const auto& r : client->BatchPut(items)) EXPECT_TRUE(IsOk(r));
  std::vector<std::string> keys;
  for (const auto& [key, _] : items) keys.push_back(key);
  auto got = client->BatchGet(keys);
  ASSERT_EQ(got.size(), items.size());
  for (size_t i = 0; i < items.size(); ++i) {
    ASSERT_TRUE(IsOk(got[i])) << items[i].first;
    EXPECT_TRUE(got[i]->data == items[i].second) << items[i].first << " differs";
  }

  // A second client, from the node certificate, reads the same bytes.
  auto other = cluster_.NewClient(ConfigWith(pki_->Settings("node")));
  ASSERT_TRUE(other);
  EXPECT_TRUE(ReadsBack(*other, "large", large));
  EXPECT_EQ(TlsRejections(), 0);
}

TEST_F(TlsTest, GetAsyncOverTlsAnswersTheOrdinaryWay) {
  ASSERT_NO_FATAL_FAILURE(StartTlsCluster(1));
  auto client = cluster_.NewClient(ConfigWith(pki_->Settings("client")));
  ASSERT_TRUE(client);
  const std::string value = PatternBytes(12, 100 * 1024);
  ASSERT_TRUE(IsOk(client->Put("async", value)));

  std::promise<Result<ObjectValue>> got;
  client->GetAsync("async", [&got](Result<ObjectValue> result) { got.set_value(result); });
  auto future = got.get_future();
  ASSERT_EQ(future.wait_for(std::chrono::seconds(20)), std::future_status::ready);
  Result<ObjectValue> result = future.get();
  ASSERT_TRUE(IsOk(result));
  EXPECT_TRUE(result->data == value);
  // A TLS session takes no reader and writer at once: no pipelined
  // connection, every async get goes the way Get goes.
  EXPECT_EQ(client->transport_counters().async_gets_slow, 1u);
  EXPECT_EQ(client->transport_counters().async_gets_pipelined, 0u);
  EXPECT_EQ(TlsRejections(), 0);
}

TEST_F(TlsTest, CliWithTlsFlagsOrConfigKeysPutsAndGets) {
  ASSERT_NO_FATAL_FAILURE(StartTlsCluster(1));
  const auto flags = TestPki::Flags(pki_->Settings("client"));
  auto with_flags = [&](std::vector<std::string> args) {
    args.insert(args.begin(), flags.begin(), flags.end());
    return args;
  };

  auto put = cluster_.RunCli(with_flags({"put", "cli-key", "cli value"}), {}, true, {}, 30s);
  EXPECT_EQ(put.exit_code, 0) << Show(put);
  auto get = cluster_.RunCli(with_flags({"get", "cli-key"}), {}, true, {}, 30s);
  EXPECT_EQ(get.exit_code, 0) << Show(get);
  EXPECT_TRUE(get.out == "cli value" || get.out == "cli value\n") << Show(get);

  // Without TLS the CLI reaches nothing: a connection error, exit 3.
  auto plain = cluster_.RunCli({"get", "cli-key"}, {}, true, {}, 30s);
  EXPECT_EQ(plain.exit_code, 3) << Show(plain);

  // The same files as keys of cli.toml (the harness points XDG_CONFIG_HOME
  // into the cluster's dir).
  const TlsSettings tls = pki_->Settings("client");
  fs::create_directories(cluster_.dir() / "xdg-config" / "mooncake");
  std::ofstream(cluster_.dir() / "xdg-config" / "mooncake" / "cli.toml")
      << "tls-cert = \"" << tls.cert_file << "\"\ntls-key = \"" << tls.key_file << "\"\ntls-ca = \""
      << tls.ca_file << "\"\n";
  auto from_config = cluster_.RunCli({"get", "cli-key"}, {}, true, {}, 30s);
  EXPECT_EQ(from_config.exit_code, 0) << Show(from_config);
  EXPECT_TRUE(from_config.out.starts_with("cli value")) << Show(from_config);
}

TEST_F(TlsTest, PeersWithoutACertificateSignedByTheCaGetNoAnswer) {
  ASSERT_NO_FATAL_FAILURE(StartTlsCluster(1));
  ASSERT_EQ(TlsRejections(), 0);

  // A client without TLS.
  EXPECT_TRUE(CreateFails(ConfigWith({}), ErrorCode::kRpcFail));
  double rejected = 0;
  EXPECT_TRUE(Eventually([&] { return (rejected = TlsRejections()) >= 1; }, 5s)) << rejected;

  // A client whose certificate the rogue CA signed (it trusts the real CA,
  // so only the master's check of the client certificate can stop it).
  const double before_rogue = TlsRejections();
  EXPECT_TRUE(CreateFails(ConfigWith(pki_->Settings("rogue", "ca")), ErrorCode::kRpcFail));
  EXPECT_TRUE(Eventually([&] { return TlsRejections() > before_rogue; }, 5s));

  // A client with a good certificate that trusts only the rogue CA refuses
  // the master's certificate.
  EXPECT_TRUE(CreateFails(ConfigWith(pki_->Settings("client", "rogue-ca")), ErrorCode::kRpcFail));

  // A raw TCP connection with a plain Thrift frame: no bytes, then a close.
  for (const auto& [name, port] :
       {std::pair{"master", cluster_.master_port()}, std::pair{"w1", cluster_.worker_port("w1")}}) {
    RawConnection conn(port);
    ASSERT_TRUE(conn.connected()) << name;
    conn.Send(Wire().Call("ListNodes").Stop().Framed());
    std::string reply;
    const bool closed = conn.ReadUntilClosed(3s, &reply);
    EXPECT_TRUE(reply.empty()) << name << " answered " << reply.size() << " bytes";
    EXPECT_TRUE(closed) << name << " left the connection open";
  }
  const int w1_admin = cluster_.worker_admin_port("w1");
  EXPECT_TRUE(Eventually([&] { return AdminMetric(w1_admin, kTlsRejected) >= 1; }, 5s));

  // Expect the cluster unharmed: a good client still works.
  auto client = cluster_.NewClient(ConfigWith(pki_->Settings("client")));
  ASSERT_TRUE(client);
  EXPECT_TRUE(IsOk(client->Put("after", "still fine")));
  EXPECT_TRUE(ReadsBack(*client, "after", "still fine"));
}

TEST_F(TlsTest, UnusableTlsFilesAreInvalidParams) {
  ASSERT_NO_FATAL_FAILURE(StartTlsCluster(0));
  TlsSettings missing = pki_->Settings("client");
  missing.key_file = (pki_->dir() / "no-such.key").string();
  EXPECT_TRUE(CreateFails(ConfigWith(missing), ErrorCode::kInvalidParams));

  TlsSettings incomplete = pki_->Settings("client");
  incomplete.ca_file.clear();
  EXPECT_TRUE(CreateFails(ConfigWith(incomplete), ErrorCode::kInvalidParams));

  // Readable, but not PEM: the CSR in place of the key, a key as the CA.
  TlsSettings wrong = pki_->Settings("client");
  wrong.key_file = (pki_->dir() / "client.csr").string();
  EXPECT_TRUE(CreateFails(ConfigWith(wrong), ErrorCode::kInvalidParams));
  TlsSettings mismatched = pki_->Settings("client");
  mismatched.key_file = pki_->Settings("node").key_file;  // not client.crt's key
  EXPECT_TRUE(CreateFails(ConfigWith(mismatched), ErrorCode::kInvalidParams));
}

TEST_F(TlsTest, ObjectsMoveBetweenWorkersOverTls) {
  ASSERT_NO_FATAL_FAILURE(StartTlsCluster(2));
  auto writer = cluster_.NewClient(ConfigWith(pki_->Settings("client"), "w1"));
  auto on_w2 = cluster_.NewClient(ConfigWith(pki_->Settings("client"), "w2"));
  ASSERT_TRUE(writer && on_w2);
  PutOptions on_w1_ssd;
  on_w1_ssd.preferred_node = "w1";
  on_w1_ssd.preferred_tier = "ssd";
  const std::string value = PatternBytes(5, 3 * kMiB + 17);
  ASSERT_TRUE(IsOk(writer->Put("mover", value, on_w1_ssd)));

  // When a client on w2 probes it with prefetch, w1 streams it to w2 (a
  // worker-to-worker TLS connection) and the master's owner changes (w1 to
  // the master).
  auto exists = on_w2->Exist("mover", /*prefetch=*/true);
  ASSERT_TRUE(IsOk(exists));
  EXPECT_TRUE(*exists);
  Result<ObjectInspection> info = Err(ErrorCode::kObjectNotFound);
  EXPECT_TRUE(Eventually(
      [&] {
        info = on_w2->Inspect("mover");
        return info && info->node_id == "w2";
      },
      10s))
      << Describe(info);
  EXPECT_TRUE(ReadsBack(*on_w2, "mover", value));
  EXPECT_TRUE(ReadsBack(*writer, "mover", value));
  EXPECT_EQ(TlsRejections(), 0);
  EXPECT_EQ(AdminMetric(cluster_.worker_admin_port("w2"), kTlsRejected), 0);
}

TEST_F(TlsTest, SilentConnectionsAreClosedAtTheIdleTimeoutAndClientsReconnect) {
  ASSERT_NO_FATAL_FAILURE(StartTlsCluster(1, {"--rpc-idle-timeout-ms", "300"}));

  // A TCP connection that never starts its handshake is closed like any
  // silent connection, and counted as idle.
  const double idle_before = AdminMetric(master_admin_, kIdleClosed);
  const auto start = Clock::now();
  RawConnection silent(cluster_.master_port());
  ASSERT_TRUE(silent.connected());
  std::string reply;
  EXPECT_TRUE(silent.ReadUntilClosed(5s, &reply)) << "still open after 5 s";
  EXPECT_TRUE(reply.empty());
  EXPECT_LT(Clock::now() - start, 3s);
  EXPECT_TRUE(Eventually([&] { return AdminMetric(master_admin_, kIdleClosed) > idle_before; }, 5s))
      << "idle_closed " << AdminMetric(master_admin_, kIdleClosed) << " tls_handshake "
      << TlsRejections();

  // A TLS client whose pooled connections were closed while it slept
  // reconnects (a new handshake) on its next call.
  auto client = cluster_.NewClient(ConfigWith(pki_->Settings("client")));
  ASSERT_TRUE(client);
  const std::string value = PatternBytes(3, 300 * 1024);
  ASSERT_TRUE(IsOk(client->Put("k", value)));
  const double idle_after_put = AdminMetric(master_admin_, kIdleClosed);
  std::this_thread::sleep_for(1200ms);
  EXPECT_GT(AdminMetric(master_admin_, kIdleClosed), idle_after_put);
  EXPECT_TRUE(ReadsBack(*client, "k", value));
  EXPECT_TRUE(IsOk(client->ListNodes()));
}

}  // namespace
}  // namespace mooncake::testing
