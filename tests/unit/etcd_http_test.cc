// EtcdClient and LeaderElection against HTTP servers in the test (httplib on
// 127.0.0.1, a free port): a misbehaving peer (a reply too large, a reply
// trickled a byte at a time), a fake etcd whose answers the test picks
// (the leader key read failing while the lease refresh succeeds, one read
// hanging past the call timeout, the key taken by another master's lease),
// and raw replies byte for byte as etcd 3.4 sends them (error replies end
// with an HTTP trailer).

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <functional>
#include <future>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "common/clock.h"
#include "common/etcd_client.h"
#include "master/leader_election.h"

namespace mooncake {
namespace {

using nlohmann::json;

// Serves `routes` on 127.0.0.1 at a free port until destroyed.
class TestHttpServer {
 public:
  explicit TestHttpServer(const std::function<void(httplib::Server&)>& routes) {
    routes(server_);
    server_.set_keep_alive_timeout(1);
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    // stop() before the accept loop runs would be lost.
    while (!server_.is_running()) std::this_thread::sleep_for(Millis(1));
  }
  ~TestHttpServer() {
    server_.stop();
    thread_.join();
  }
  bool ok() const { return port_ > 0; }
  std::string endpoint() const { return "http://127.0.0.1:" + std::to_string(port_); }

 private:
  httplib::Server server_;
  int port_ = -1;
  std::thread thread_;
};

bool WaitFor(const std::function<bool()>& done, Millis bound) {
  auto until = SteadyClock::now() + bound;
  while (!done()) {
    if (SteadyClock::now() >= until) return false;
    std::this_thread::sleep_for(Millis(10));
  }
  return true;
}

constexpr size_t kHugeBytes = size_t{64} << 20;

// A range reply of one key whose value is ~64 MiB of base64 (valid: read
// whole, it parses), streamed without a Content-Length.
TEST(EtcdReplyBoundTest, OverLargeReplyIsCutOffNotReadWhole) {
  std::atomic<size_t> sent{0};
  std::atomic<bool> finished{false};
  TestHttpServer server([&](httplib::Server& s) {
    s.Post("/v3/kv/range", [&](const httplib::Request&, httplib::Response& res) {
      res.set_chunked_content_provider(
          "application/json",
          [&](size_t, httplib::DataSink& sink) {
            static const std::string kChunk(64 << 10, 'A');
            const std::string head = R"({"kvs":[{"key":"L2s=","value":")";
            if (sent == 0) {
              if (!sink.write(head.data(), head.size())) return false;
              sent += head.size();
            }
            if (sent < kHugeBytes) {
              if (!sink.write(kChunk.data(), kChunk.size())) return false;
              sent += kChunk.size();
              return true;
            }
            const std::string tail = R"("}]})";
            sink.write(tail.data(), tail.size());
            sent += tail.size();
            sink.done();
            return true;
          },
          [&](bool) { finished = true; });
    });
  });
  ASSERT_TRUE(server.ok());
  // A timeout far past the time to read it all: only the size bound stops it.
  auto etcd = EtcdClient::Create({server.endpoint()}, 20000);
  ASSERT_TRUE(etcd.has_value());
  auto got = (*etcd)->Get("/k");
  ASSERT_FALSE(got.has_value()) << "a " << (got && *got ? (*got)->value.size() : 0)
                                << "-byte value was read whole";
  EXPECT_EQ(got.error(), ErrorCode::kInternalError);
  // The client hung up early: the server's writes failed long before the end
  // (what it sent past the bound sat in socket buffers, not in the client).
  ASSERT_TRUE(WaitFor([&] { return finished.load(); }, Millis(30000)));
  EXPECT_LT(sent.load(), kHugeBytes * 3 / 4);
}

// The same with a Content-Length that announces ~64 MiB: refused before the
// body is read.
TEST(EtcdReplyBoundTest, DeclaredOverLargeReplyIsRefused) {
  std::atomic<size_t> sent{0};
  std::atomic<bool> finished{false};
  TestHttpServer server([&](httplib::Server& s) {
    s.Post("/v3/lease/grant", [&](const httplib::Request&, httplib::Response& res) {
      res.set_content_provider(
          kHugeBytes, "application/json",
          [&](size_t offset, size_t length, httplib::DataSink& sink) {
            static const std::string kChunk(64 << 10, ' ');
            size_t n = std::min(length, kChunk.size());
            if (offset + n == kHugeBytes) {
              std::string last(n, ' ');
              last.replace(n - 2, 2, "{}");
              if (!sink.write(last.data(), n)) return false;
            } else if (!sink.write(kChunk.data(), n)) {
              return false;
            }
            sent += n;
            return true;
          },
          [&](bool) { finished = true; });
    });
  });
  ASSERT_TRUE(server.ok());
  auto etcd = EtcdClient::Create({server.endpoint()}, 20000);
  ASSERT_TRUE(etcd.has_value());
  auto lease = (*etcd)->Grant(3);
  ASSERT_FALSE(lease.has_value());
  EXPECT_EQ(lease.error(), ErrorCode::kInternalError);
  ASSERT_TRUE(WaitFor([&] { return finished.load(); }, Millis(30000)));
  EXPECT_LT(sent.load(), kHugeBytes * 3 / 4);
}

// A reply trickled a byte every 50 ms passes every per-read timeout; the
// call still ends near its 300 ms timeout (bounded generously here).
TEST(EtcdReplyBoundTest, TrickledReplyEndsWithinTheTimeout) {
  std::atomic<bool> release{false};
  TestHttpServer server([&](httplib::Server& s) {
    s.Post("/v3/kv/range", [&](const httplib::Request&, httplib::Response& res) {
      res.set_chunked_content_provider("application/json",
                                       [&](size_t offset, httplib::DataSink& sink) {
                                         if (release) return false;  // drop the connection
                                         if (offset > 0) std::this_thread::sleep_for(Millis(50));
                                         const char* byte = offset == 0 ? "{" : " ";
                                         return sink.write(byte, 1);
                                       });
    });
  });
  ASSERT_TRUE(server.ok());
  auto etcd = EtcdClient::Create({server.endpoint()}, 300);
  ASSERT_TRUE(etcd.has_value());
  auto started = SteadyClock::now();
  auto call = std::async(std::launch::async, [&] { return (*etcd)->Get("/k"); });
  bool ended = call.wait_for(std::chrono::seconds(15)) == std::future_status::ready;
  release = true;  // lets a stuck call end so the test can finish
  auto got = call.get();
  ASSERT_TRUE(ended) << "the call was still reading the trickle after 15 s";
  EXPECT_LT(SteadyClock::now() - started, std::chrono::seconds(15));
  ASSERT_FALSE(got.has_value());
  EXPECT_EQ(got.error(), ErrorCode::kRpcFail);
}

// Answers every HTTP request on 127.0.0.1 at a free port with the raw bytes
// `reply(path)` returns, then closes the connection: replies httplib::Server
// cannot write, such as etcd's error replies with a trailer. Requests it
// serves are counted per path.
class RawHttpServer {
 public:
  explicit RawHttpServer(std::function<std::string(const std::string& path)> reply)
      : reply_(std::move(reply)) {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    if (fd_ < 0 || bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
        listen(fd_, 16) != 0 || getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      return;
    }
    port_ = ntohs(addr.sin_port);
    thread_ = std::thread([this] { Serve(); });
  }
  ~RawHttpServer() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
    if (fd_ >= 0) close(fd_);
  }
  bool ok() const { return port_ > 0; }
  std::string endpoint() const { return "http://127.0.0.1:" + std::to_string(port_); }
  int served(const std::string& path) {
    std::lock_guard lock(mu_);
    return served_[path];
  }

 private:
  void Serve() {
    while (!stop_) {
      pollfd p{fd_, POLLIN, 0};
      if (poll(&p, 1, 20) <= 0) continue;
      int conn = accept(fd_, nullptr, nullptr);
      if (conn < 0) continue;
      timeval tv{.tv_sec = 2, .tv_usec = 0};
      setsockopt(conn, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
      // The head, then Content-Length bytes of body (bounded: 64 KiB).
      std::string in;
      char buf[4096];
      size_t head_end = std::string::npos;
      size_t want = 0;
      while (in.size() < (64 << 10)) {
        if (head_end == std::string::npos &&
            (head_end = in.find("\r\n\r\n")) != std::string::npos) {
          auto at = in.find("Content-Length: ");
          if (at == std::string::npos) at = in.find("content-length: ");
          want = head_end + 4 + (at < head_end ? std::stoul(in.substr(at + 16)) : 0);
        }
        if (head_end != std::string::npos && in.size() >= want) break;
        ssize_t n = recv(conn, buf, sizeof(buf), 0);
        if (n <= 0) break;
        in.append(buf, static_cast<size_t>(n));
      }
      const size_t sp = in.find(' ');
      const std::string path =
          sp == std::string::npos ? "" : in.substr(sp + 1, in.find(' ', sp + 1) - sp - 1);
      {
        std::lock_guard lock(mu_);
        ++served_[path];
      }
      const std::string out = reply_(path);
      (void)send(conn, out.data(), out.size(), MSG_NOSIGNAL);
      close(conn);
    }
  }

  const std::function<std::string(const std::string&)> reply_;
  int fd_ = -1;
  int port_ = -1;
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::map<std::string, int> served_;  // guarded by mu_
  std::thread thread_;                 // last: it uses the members above
};

// An error reply exactly as etcd 3.4's gateway writes it (captured from
// /usr/bin/etcd): chunked, ending with the trailer Grpc-Trailer-Content-Type,
// which cpp-httplib 0.11.4 cannot read.
std::string EtcdErrorReply(int status, const std::string& reason, const std::string& message,
                           int grpc_code) {
  const std::string body =
      json{{"error", message}, {"message", message}, {"code", grpc_code}}.dump();
  char size[16];
  std::snprintf(size, sizeof(size), "%zx", body.size());
  return "HTTP/1.1 " + std::to_string(status) + " " + reason +
         "\r\nAccess-Control-Allow-Headers: accept, content-type, authorization"
         "\r\nAccess-Control-Allow-Methods: POST, GET, OPTIONS, PUT, DELETE"
         "\r\nAccess-Control-Allow-Origin: *\r\nContent-Type: application/json"
         "\r\nTrailer: Grpc-Trailer-Content-Type\r\nDate: Sat, 28 Nov 2026 17:52:07 GMT"
         "\r\nConnection: close\r\nTransfer-Encoding: chunked\r\n\r\n" +
         size + "\r\n" + body + "\r\n0\r\nGrpc-Trailer-Content-Type: application/grpc\r\n\r\n";
}

std::string EtcdOkReply(const std::string& body) {
  return "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: " +
         std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body;
}

// etcd's error replies are answers, not outages: a lease it does not know
// (404) is "gone already" to Revoke and "expired" to KeepAlive, and every
// such reply ends the call at that member, with etcd's message kept for the
// log. httplib failed them all with Error::Read (the trailer), so they read
// as "etcd unreachable" and every other endpoint was tried.
TEST(EtcdErrorReplyTest, ANotFoundReplyWithATrailerIsAnAnswer) {
  RawHttpServer etcd([](const std::string&) {
    return EtcdErrorReply(404, "Not Found", "etcdserver: requested lease not found", 5);
  });
  ASSERT_TRUE(etcd.ok());
  auto client = EtcdClient::Create({etcd.endpoint()}, 2000);
  ASSERT_TRUE(client.has_value());
  auto revoked = (*client)->Revoke(12345);
  EXPECT_TRUE(revoked.has_value())
      << "a revoke of a lease etcd no longer has: " << ToString(revoked.error()) << " "
      << (*client)->last_error();
  auto refreshed = (*client)->KeepAlive(12345);
  ASSERT_FALSE(refreshed.has_value());
  EXPECT_EQ(refreshed.error(), ErrorCode::kObjectNotFound);
  EXPECT_NE((*client)->last_error().find("HTTP 404: etcdserver: requested lease not found"),
            std::string::npos)
      << (*client)->last_error();
}

// etcd out of space (its NOSPACE alarm) refuses a lease grant with 429: a
// refusal with etcd's reason, not RPC_FAIL, and the one member that answered
// is not skipped for the next.
TEST(EtcdErrorReplyTest, AnOutOfSpaceReplyIsARefusalThatNamesEtcdsReason) {
  RawHttpServer etcd([](const std::string&) {
    return EtcdErrorReply(429, "Too Many Requests", "etcdserver: mvcc: database space exceeded", 8);
  });
  ASSERT_TRUE(etcd.ok());
  RawHttpServer second([](const std::string&) { return EtcdOkReply(R"({"ID":"7","TTL":"3"})"); });
  ASSERT_TRUE(second.ok());
  auto client = EtcdClient::Create({etcd.endpoint(), second.endpoint()}, 2000);
  ASSERT_TRUE(client.has_value());
  auto lease = (*client)->Grant(3);
  ASSERT_FALSE(lease.has_value())
      << "granted by the second endpoint: the refusal read as an outage";
  EXPECT_EQ(lease.error(), ErrorCode::kInternalError);
  EXPECT_NE((*client)->last_error().find("database space exceeded"), std::string::npos)
      << (*client)->last_error();
  EXPECT_EQ(second.served("/v3/lease/grant"), 0);
}

// A member that cannot serve now (503: a learner, no leader, a leader
// change) sends the call on to the next endpoint, as before.
TEST(EtcdErrorReplyTest, AnUnavailableMemberPassesTheCallOn) {
  RawHttpServer learner([](const std::string&) {
    return EtcdErrorReply(503, "Service Unavailable", "etcdserver: rpc not supported for learner",
                          14);
  });
  ASSERT_TRUE(learner.ok());
  RawHttpServer member([](const std::string&) { return EtcdOkReply(R"({"ID":"7","TTL":"3"})"); });
  ASSERT_TRUE(member.ok());
  auto client = EtcdClient::Create({learner.endpoint(), member.endpoint()}, 2000);
  ASSERT_TRUE(client.has_value());
  auto lease = (*client)->Grant(3);
  ASSERT_TRUE(lease.has_value()) << ToString(lease.error()) << " " << (*client)->last_error();
  EXPECT_EQ(*lease, 7);
  EXPECT_EQ(learner.served("/v3/lease/grant"), 1);
}

// A standby whose campaign etcd refuses (out of space) says why, in the
// gate that /readyz reads, instead of retrying four times a second in
// silence while no master can take over.
TEST(LeaderElectionEtcdTest, ACampaignEtcdRefusesSaysWhy) {
  RawHttpServer etcd([](const std::string& path) {
    if (path == "/v3/kv/range") return EtcdOkReply(R"({"header":{"revision":"1"}})");
    return EtcdErrorReply(429, "Too Many Requests", "etcdserver: mvcc: database space exceeded", 8);
  });
  ASSERT_TRUE(etcd.ok());
  RoleGate gate("c", Millis(0));
  auto election = LeaderElection::Start(ElectionOptions{.etcd_endpoints = {etcd.endpoint()},
                                                        .cluster_name = "c",
                                                        .self_address = "127.0.0.1:7",
                                                        .lease_ttl_s = 1,
                                                        .poll_interval = Millis(50)},
                                        gate, {});
  ASSERT_TRUE(election.has_value());
  EXPECT_TRUE(WaitFor([&] { return !gate.Snapshot().campaign_problem.empty(); }, Millis(10000)));
  const std::string problem = gate.Snapshot().campaign_problem;
  EXPECT_NE(problem.find("cannot grant a lease"), std::string::npos) << problem;
  EXPECT_NE(problem.find("database space exceeded"), std::string::npos) << problem;
  EXPECT_FALSE(gate.leader());
  (*election)->Stop();
}

// Enough of etcd's gateway for one LeaderElection: a single lease (id 100,
// TTL `ttl_s`), the leader key, and knobs for what the range read answers
// and how slowly the lease refresh and the range read answer.
class FakeEtcd {
 public:
  enum class RangeMode { kNormal, kStatus500, kGarbage };

  explicit FakeEtcd(int ttl_s = 1)
      : ttl_(std::to_string(ttl_s)), server_([this](httplib::Server& s) {
          s.Post("/v3/lease/grant", [this](const httplib::Request&, httplib::Response& res) {
            res.set_content(json{{"ID", "100"}, {"TTL", ttl_}}.dump(), "application/json");
          });
          s.Post("/v3/lease/keepalive", [this](const httplib::Request&, httplib::Response& res) {
            ++keepalives_;
            std::this_thread::sleep_for(Millis(keepalive_delay_ms_.load()));
            res.set_content(json{{"result", {{"ID", "100"}, {"TTL", ttl_}}}}.dump(),
                            "application/json");
          });
          s.Post("/v3/lease/revoke", [this](const httplib::Request&, httplib::Response& res) {
            std::lock_guard lock(mu_);
            ++revokes_;
            if (key_lease_ == 100) key_present_ = false;
            res.set_content("{}", "application/json");
          });
          s.Post("/v3/kv/txn", [this](const httplib::Request& req, httplib::Response& res) {
            // CreateIfAbsent only.
            json body = json::parse(req.body);
            const json& put = body["success"][0]["request_put"];
            std::lock_guard lock(mu_);
            if (key_present_) {
              res.set_content(
                  json{{"responses", json::array({json{{"response_range", RangeLocked()}}})}}
                      .dump(),
                  "application/json");
              return;
            }
            key_present_ = true;
            key_value_ = put["value"];
            key_lease_ = std::stoll(put["lease"].get<std::string>());
            res.set_content(R"({"succeeded":true})", "application/json");
          });
          s.Post("/v3/kv/range", [this](const httplib::Request&, httplib::Response& res) {
            if (hang_next_range_.exchange(false)) {
              ++range_hangs_;
              // Answers (normally) long after the client gave up.
              std::this_thread::sleep_for(Millis(hang_ms_.load()));
            }
            std::lock_guard lock(mu_);
            switch (range_mode_) {
              case RangeMode::kStatus500:
                res.status = 500;
                res.set_content(R"({"error":"etcdserver: request timed out"})", "application/json");
                return;
              case RangeMode::kGarbage:
                res.set_content("<html>proxy error</html>", "text/html");
                return;
              case RangeMode::kNormal:
                res.set_content(RangeLocked().dump(), "application/json");
                return;
            }
          });
        }) {}

  bool ok() const { return server_.ok(); }
  std::string endpoint() const { return server_.endpoint(); }
  int keepalives() const { return keepalives_; }
  int range_hangs() const { return range_hangs_; }
  // Every lease refresh answers after `delay`.
  void set_keepalive_delay(Millis delay) { keepalive_delay_ms_ = delay.count(); }
  // The next range read answers only after `hang`; later ones at once.
  void HangNextRange(Millis hang) {
    hang_ms_ = hang.count();
    hang_next_range_ = true;
  }
  int revokes() {
    std::lock_guard lock(mu_);
    return revokes_;
  }
  void set_range_mode(RangeMode mode) {
    std::lock_guard lock(mu_);
    range_mode_ = mode;
  }
  // As if the key was deleted by hand and another master took it.
  void GiveKeyTo(int64_t lease, const std::string& address) {
    std::lock_guard lock(mu_);
    key_present_ = true;
    key_lease_ = lease;
    key_value_ = etcd_json::Base64Encode(address);
  }

 private:
  json RangeLocked() const {
    if (!key_present_) return json::object();
    return json{{"kvs", json::array({json{{"key", etcd_json::Base64Encode("/mooncake/c/leader")},
                                          {"value", key_value_},
                                          {"lease", std::to_string(key_lease_)}}})}};
  }

  const std::string ttl_;
  std::atomic<int> keepalives_{0};
  std::atomic<int64_t> keepalive_delay_ms_{0};
  std::atomic<bool> hang_next_range_{false};
  std::atomic<int64_t> hang_ms_{0};
  std::atomic<int> range_hangs_{0};
  std::mutex mu_;
  bool key_present_ = false;  // guarded by mu_, as are the fields below
  std::string key_value_;     // base64
  int64_t key_lease_ = 0;
  int revokes_ = 0;
  RangeMode range_mode_ = RangeMode::kNormal;
  TestHttpServer server_;  // last: its handlers use the fields above
};

ElectionOptions QuickElection(const FakeEtcd& etcd) {
  return ElectionOptions{.etcd_endpoints = {etcd.endpoint()},
                         .cluster_name = "c",
                         .self_address = "127.0.0.1:7",
                         .lease_ttl_s = 1,
                         .poll_interval = Millis(50)};
}

// A master elected over a FakeEtcd: the gate it leads through, and whether
// it has reported the loss of leadership.
struct ElectedMaster {
  RoleGate gate{"c", Millis(0)};
  std::atomic<bool> lost{false};
  std::unique_ptr<LeaderElection> election;

  // Starts the election with `options` and waits until it leads.
  ::testing::AssertionResult Lead(ElectionOptions options) {
    auto started = LeaderElection::Start(std::move(options), gate, [this] { lost = true; });
    if (!started) return ::testing::AssertionFailure() << "the election did not start";
    election = std::move(*started);
    if (!WaitFor([&] { return gate.leader(); }, Millis(5000))) {
      return ::testing::AssertionFailure() << "it never led";
    }
    return ::testing::AssertionSuccess();
  }
  ~ElectedMaster() {
    if (election) election->Stop();
  }
};

// The lease refresh keeps succeeding but the read that checks the leader key
// still names our lease fails: leadership cannot be confirmed, so the gate
// is not extended and runs out within the lease (1 s here), and the master
// gives leadership up. Another master may hold the key meanwhile.
TEST(LeaderElectionEtcdTest, UnconfirmedLeaderKeyIsNotExtended) {
  for (auto mode : {FakeEtcd::RangeMode::kStatus500, FakeEtcd::RangeMode::kGarbage}) {
    SCOPED_TRACE(mode == FakeEtcd::RangeMode::kStatus500 ? "range answers 500"
                                                         : "range answers garbage");
    FakeEtcd etcd;
    ASSERT_TRUE(etcd.ok());
    ElectedMaster master;
    ASSERT_TRUE(master.Lead(QuickElection(etcd)));

    etcd.set_range_mode(mode);
    const int keepalives = etcd.keepalives();
    EXPECT_TRUE(WaitFor([&] { return !master.gate.leader(); }, Millis(5000)))
        << "still leading with its leader key unconfirmed";
    EXPECT_GT(etcd.keepalives(), keepalives);  // the lease refresh went on
    EXPECT_TRUE(WaitFor([&] { return master.lost.load(); }, Millis(5000)));
    EXPECT_FALSE(master.gate.leader());
    master.election->Stop();
  }
}

// One read of the leader key hangs past the call timeout while the lease
// refreshes succeed (slowly): the gate is not extended by that round, the
// read is retried and the master keeps leading. With the TTL of 2 s (call
// timeout ~667 ms, margin 500 ms) and refreshes taking 250 ms, the hung read
// ends ~250 ms past the gate's end last confirmed and ~250 ms before the
// lease's end last confirmed: a leader that stepped down as soon as a read
// failed past the gate's end reported a loss here (a spurious failover).
TEST(LeaderElectionEtcdTest, OneHungLeaderKeyReadDoesNotEndLeadership) {
  FakeEtcd etcd(2);
  ASSERT_TRUE(etcd.ok());
  etcd.set_keepalive_delay(Millis(250));
  ElectionOptions options = QuickElection(etcd);
  options.lease_ttl_s = 2;
  ElectedMaster master;
  ASSERT_TRUE(master.Lead(options));
  // Past the first refresh: the rounds run at their steady pace.
  ASSERT_TRUE(WaitFor([&] { return etcd.keepalives() >= 2; }, Millis(10000)));

  etcd.HangNextRange(Millis(1500));
  ASSERT_TRUE(WaitFor([&] { return etcd.range_hangs() == 1; }, Millis(10000)));
  const int keepalives = etcd.keepalives();
  // A few more rounds, or the loss.
  WaitFor([&] { return master.lost.load() || etcd.keepalives() >= keepalives + 3; }, Millis(20000));
  EXPECT_FALSE(master.lost.load()) << "one hung read of the leader key ended leadership";
  EXPECT_EQ(etcd.revokes(), 0);
  EXPECT_GE(etcd.keepalives(), keepalives + 3);
  EXPECT_TRUE(WaitFor([&] { return master.gate.leader(); }, Millis(5000)));
  master.election->Stop();
  EXPECT_FALSE(master.gate.leader());
}

// The key deleted by hand and taken by another master's lease while ours
// lives on: the leader steps down within a refresh period and gives its
// lease back.
TEST(LeaderElectionEtcdTest, LeaderKeyTakenByAnotherLeaseEndsLeadership) {
  FakeEtcd etcd;
  ASSERT_TRUE(etcd.ok());
  ElectedMaster master;
  ASSERT_TRUE(master.Lead(QuickElection(etcd)));

  etcd.GiveKeyTo(200, "127.0.0.1:8");
  EXPECT_TRUE(WaitFor([&] { return !master.gate.leader(); }, Millis(5000)));
  EXPECT_TRUE(WaitFor([&] { return master.lost.load(); }, Millis(5000)));
  EXPECT_GE(etcd.revokes(), 1);
  master.election->Stop();
  EXPECT_FALSE(master.gate.leader());
}

}  // namespace
}  // namespace mooncake
