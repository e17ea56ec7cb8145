// The REST admin API over real HTTP on 127.0.0.1: a real AdminServer in
// front of a real MasterService, and of a real TieredCacheBackend with a DRAM
// and a RocksDB SSD tier.

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "common/metrics.h"
#include "http/admin_client.h"
#include "http/admin_server.h"
#include "http/prometheus_writer.h"
#include "http/ready_file.h"
#include "master/admin_routes.h"
#include "master/leader_election.h"
#include "master/master_server.h"
#include "master/master_service.h"
#include "tests/unit/in_memory_directory.h"
#include "tiers/dram_tier.h"
#include "tiers/ssd_tier.h"
#include "worker/admin_routes.h"
#include "worker/tiered_cache_backend.h"
#include "worker/worker_config.h"

namespace mooncake {
namespace {

using nlohmann::json;
constexpr uint64_t kMiB = 1ull << 20;
constexpr const char* kToken = "s3cret-token";

// ---------------------------------------------------------------------------
// A client for one server: every call is a fresh HTTP request.
class Api {
 public:
  explicit Api(int port) : port_(port) {}

  HttpReply Call(const std::string& method, const std::string& target, const std::string& body = {},
                 const std::string& token = {}) const {
    std::vector<std::pair<std::string, std::string>> headers;
    if (!token.empty()) headers.emplace_back("Authorization", "Bearer " + token);
    auto reply = HttpCall("127.0.0.1", port_, method, target, body, headers);
    if (!reply) throw std::runtime_error("no HTTP reply for " + method + " " + target);
    return *reply;
  }
  HttpReply Get(const std::string& target) const { return Call("GET", target); }

 private:
  int port_;
};

json JsonOf(const HttpReply& reply) {
  json doc = json::parse(reply.body, nullptr, false);
  EXPECT_FALSE(doc.is_discarded()) << "not JSON: " << reply.body;
  EXPECT_EQ(reply.headers.count("content-type") ? reply.headers.at("content-type") : "",
            "application/json");
  return doc;
}

// Status and JSON error body {"error": ..., "code": code}.
void ExpectError(const HttpReply& reply, int status, const std::string& code) {
  EXPECT_EQ(reply.status, status) << reply.body;
  json doc = JsonOf(reply);
  ASSERT_TRUE(doc.is_object()) << reply.body;
  EXPECT_EQ(doc.value("code", ""), code) << reply.body;
  EXPECT_TRUE(doc.contains("error") && doc["error"].is_string() &&
              !doc["error"].get<std::string>().empty())
      << reply.body;
}

// ---------------------------------------------------------------------------
// A small Prometheus text-format parser and the exposition rules /metrics
// must follow.
struct Sample {
  std::string name;
  std::map<std::string, std::string> labels;
  double value = 0;
};

struct Exposition {
  std::map<std::string, std::string> types;  // family -> counter/gauge/histogram
  std::vector<Sample> samples;

  double Value(const std::string& name, const std::map<std::string, std::string>& labels) const {
    for (const auto& s : samples) {
      if (s.name == name && s.labels == labels) return s.value;
    }
    ADD_FAILURE() << "no sample " << name;
    return NAN;
  }
  bool Has(const std::string& name) const {
    for (const auto& s : samples) {
      if (s.name == name) return true;
    }
    return false;
  }
};

bool IsNameChar(char c, bool first) {
  return std::isalpha(static_cast<unsigned char>(c)) || c == '_' || c == ':' ||
         (!first && std::isdigit(static_cast<unsigned char>(c)));
}

// Parses `name{label="value",...} number`; false if malformed.
bool ParseSampleLine(const std::string& line, Sample* out) {
  size_t i = 0;
  while (i < line.size() && IsNameChar(line[i], i == 0)) ++i;
  if (i == 0) return false;
  out->name = line.substr(0, i);
  if (i < line.size() && line[i] == '{') {
    ++i;
    while (i < line.size() && line[i] != '}') {
      size_t start = i;
      while (i < line.size() && IsNameChar(line[i], i == start) && line[i] != ':') ++i;
      if (i == start || i + 1 >= line.size() || line[i] != '=' || line[i + 1] != '"') return false;
      std::string label = line.substr(start, i - start), value;
      for (i += 2; i < line.size() && line[i] != '"'; ++i) {
        if (line[i] == '\\') {
          if (++i >= line.size()) return false;
          char c = line[i];
          if (c != '\\' && c != '"' && c != 'n') return false;
          value += c == 'n' ? '\n' : c;
        } else {
          value += line[i];
        }
      }
      if (i >= line.size()) return false;
      ++i;  // closing quote
      if (!out->labels.emplace(label, value).second) return false;
      if (i < line.size() && line[i] == ',') ++i;
    }
    if (i >= line.size()) return false;
    ++i;  // '}'
  }
  if (i >= line.size() || line[i] != ' ') return false;
  std::string number = line.substr(i + 1);
  if (number == "+Inf" || number == "-Inf" || number == "NaN") {
    out->value = number == "NaN" ? NAN : (number[0] == '+' ? INFINITY : -INFINITY);
    return true;
  }
  char* end = nullptr;
  out->value = std::strtod(number.c_str(), &end);
  return !number.empty() && end == number.c_str() + number.size();
}

// The family a sample belongs to: histogram samples carry a suffix.
std::string FamilyOf(const Exposition& doc, const std::string& name) {
  for (const char* suffix : {"_bucket", "_sum", "_count"}) {
    std::string s = suffix;
    if (name.ends_with(s)) {
      std::string base = name.substr(0, name.size() - s.size());
      auto it = doc.types.find(base);
      if (it != doc.types.end() && it->second == "histogram") return base;
    }
  }
  return name;
}

::testing::AssertionResult ParseExposition(const std::string& text, Exposition* doc) {
  std::istringstream in(text);
  std::string line;
  std::set<std::string> helped;
  std::string current;  // family of the last TYPE line
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    if (line.starts_with("# HELP ")) {
      std::string name = line.substr(7, line.find(' ', 7) - 7);
      if (!helped.insert(name).second) {
        return ::testing::AssertionFailure() << "HELP twice: " << name;
      }
      continue;
    }
    if (line.starts_with("# TYPE ")) {
      std::istringstream fields(line.substr(7));
      std::string name, type, extra;
      fields >> name >> type;
      if (name.empty() || (type != "counter" && type != "gauge" && type != "histogram") ||
          (fields >> extra)) {
        return ::testing::AssertionFailure() << "bad TYPE line: " << line;
      }
      if (!doc->types.emplace(name, type).second) {
        return ::testing::AssertionFailure() << "TYPE twice: " << name;
      }
      current = name;
      continue;
    }
    if (line.starts_with("#")) continue;
    Sample sample;
    if (!ParseSampleLine(line, &sample)) {
      return ::testing::AssertionFailure() << "malformed sample line: \"" << line << "\"";
    }
    std::string family = FamilyOf(*doc, sample.name);
    if (!doc->types.contains(family)) {
      return ::testing::AssertionFailure() << "sample without TYPE: " << line;
    }
    if (family != current) {
      return ::testing::AssertionFailure() << "sample outside its family's block: " << line;
    }
    doc->samples.push_back(std::move(sample));
  }
  return ::testing::AssertionSuccess();
}

// Counters end with _total; histogram buckets are cumulative per label set
// and end with le="+Inf" equal to _count.
::testing::AssertionResult CheckExposition(const Exposition& doc) {
  for (const auto& [name, type] : doc.types) {
    if (type == "counter" && !name.ends_with("_total")) {
      return ::testing::AssertionFailure() << "counter without _total: " << name;
    }
  }
  using LabelSet = std::map<std::string, std::string>;
  std::map<std::pair<std::string, LabelSet>, std::vector<std::pair<std::string, double>>> buckets;
  std::map<std::pair<std::string, LabelSet>, double> counts;
  for (const auto& s : doc.samples) {
    std::string family = FamilyOf(doc, s.name);
    if (doc.types.at(family) != "histogram") continue;
    LabelSet labels = s.labels;
    if (s.name.ends_with("_bucket")) {
      if (!labels.contains("le")) return ::testing::AssertionFailure() << "bucket without le";
      std::string le = labels["le"];
      labels.erase("le");
      buckets[{family, labels}].emplace_back(le, s.value);
    } else if (s.name.ends_with("_count")) {
      counts[{family, labels}] = s.value;
    }
  }
  if (counts.size() != buckets.size()) {
    return ::testing::AssertionFailure() << "histogram series without _count or buckets";
  }
  for (const auto& [series, list] : buckets) {
    double last_bound = -INFINITY, last_count = 0;
    for (const auto& [le, value] : list) {
      double bound = le == "+Inf" ? INFINITY : std::strtod(le.c_str(), nullptr);
      if (bound <= last_bound || value < last_count) {
        return ::testing::AssertionFailure() << series.first << " buckets not cumulative";
      }
      last_bound = bound;
      last_count = value;
    }
    if (list.empty() || list.back().first != "+Inf") {
      return ::testing::AssertionFailure() << series.first << " does not end with +Inf";
    }
    if (!counts.contains(series) || counts.at(series) != list.back().second) {
      return ::testing::AssertionFailure() << series.first << " +Inf bucket != _count";
    }
  }
  return ::testing::AssertionSuccess();
}

// Whether `text` is well-formed UTF-8 (RFC 3629), decoded code point by code
// point: what Prometheus requires of a whole scrape.
bool IsValidUtf8(std::string_view text) {
  for (size_t i = 0; i < text.size();) {
    const auto lead = static_cast<unsigned char>(text[i]);
    const size_t len = lead < 0x80         ? 1
                       : lead >> 5 == 0x6  ? 2
                       : lead >> 4 == 0xE  ? 3
                       : lead >> 3 == 0x1E ? 4
                                           : 0;
    if (len == 0 || i + len > text.size()) return false;
    uint32_t cp = len == 1 ? lead : lead & (0x7F >> len);
    for (size_t k = 1; k < len; ++k) {
      const auto cont = static_cast<unsigned char>(text[i + k]);
      if (cont >> 6 != 0x2) return false;
      cp = cp << 6 | (cont & 0x3F);
    }
    static constexpr uint32_t kMinForLength[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < kMinForLength[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += len;
  }
  return true;
}

Exposition ScrapeMetrics(const Api& api) {
  auto reply = api.Get("/metrics");
  EXPECT_EQ(reply.status, 200);
  EXPECT_TRUE(reply.headers["content-type"].starts_with("text/plain; version=0.0.4"));
  Exposition doc;
  EXPECT_TRUE(ParseExposition(reply.body, &doc)) << reply.body;
  EXPECT_TRUE(CheckExposition(doc)) << reply.body;
  return doc;
}

// ---------------------------------------------------------------------------
// AdminServer itself, with routes of the test's own.
class AdminServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    AdminServerOptions options;
    options.token = kToken;
    options.max_body_bytes = 1024;
    server_ = std::make_unique<AdminServer>(options);
    server_->Route("GET", "/items/{id}/parts/{rest...}", [](const HttpRequest& req) {
      return HttpResponse::Json(200, json{{"id", *req.PathParam("id")},
                                          {"rest", *req.PathParam("rest")},
                                          {"q", req.Query("q") ? *req.Query("q") : ""}}
                                         .dump());
    });
    server_->Route("POST", "/echo", [](const HttpRequest& req) {
      return HttpResponse::Json(200, json{{"body", req.body}}.dump());
    });
    server_->Route("GET", "/echo",
                   [](const HttpRequest&) { return HttpResponse::Json(200, "{}"); });
    server_->Route("GET", "/boom", [](const HttpRequest&) -> HttpResponse {
      throw std::runtime_error("handler bug");
    });
    server_->Route("GET", "/boom-int", [](const HttpRequest&) -> HttpResponse { throw 42; });
    ASSERT_TRUE(server_->Start("127.0.0.1", 0));
    ASSERT_GT(server_->port(), 0);
    api_ = std::make_unique<Api>(server_->port());
  }

  std::unique_ptr<AdminServer> server_;
  std::unique_ptr<Api> api_;
};

TEST_F(AdminServerTest, PathAndQueryParametersArePercentDecoded) {
  auto reply = api_->Get("/items/a%20b/parts/x/y%2Fz?q=" + UrlEncode("k=v&w"));
  ASSERT_EQ(reply.status, 200) << reply.body;
  json doc = JsonOf(reply);
  EXPECT_EQ(doc["id"], "a b");
  EXPECT_EQ(doc["rest"], "x/y/z");
  EXPECT_EQ(doc["q"], "k=v&w");
  auto twice = api_->Get("/items/1/parts/2?q=a&q=b");
  ExpectError(twice, 400, "INVALID_PARAMS");
  EXPECT_EQ(JsonOf(twice)["error"], "query parameter \"q\" is given more than once; give it once");
}

TEST_F(AdminServerTest, UnknownPathsAndWrongMethodsGetJsonErrors) {
  ExpectError(api_->Get("/nope"), 404, "ROUTE_NOT_FOUND");
  ExpectError(api_->Get("/items/1/parts"), 404, "ROUTE_NOT_FOUND");   // {rest...} needs a segment
  ExpectError(api_->Get("/items//parts/x"), 404, "ROUTE_NOT_FOUND");  // {id} must be non-empty
  auto reply = api_->Call("PUT", "/echo", "{}", kToken);
  ExpectError(reply, 405, "METHOD_NOT_ALLOWED");
  EXPECT_EQ(reply.headers["allow"], "POST, GET, HEAD");
  ExpectError(api_->Call("DELETE", "/items/1/parts/2", "", kToken), 405, "METHOD_NOT_ALLOWED");
}

TEST_F(AdminServerTest, MutatingRequestsNeedTheBearerToken) {
  auto missing = api_->Call("POST", "/echo", "hi");
  ExpectError(missing, 401, "UNAUTHORIZED");
  EXPECT_EQ(missing.headers["www-authenticate"], "Bearer");
  ExpectError(api_->Call("POST", "/echo", "hi", "wrong"), 401, "UNAUTHORIZED");
  ExpectError(api_->Call("POST", "/echo", "hi", std::string(kToken) + "x"), 401, "UNAUTHORIZED");
  auto basic = HttpCall("127.0.0.1", server_->port(), "POST", "/echo", "hi",
                        {{"Authorization", std::string("Basic ") + kToken}});
  ASSERT_TRUE(basic);
  ExpectError(*basic, 401, "UNAUTHORIZED");
  auto ok = api_->Call("POST", "/echo", "hi", kToken);
  ASSERT_EQ(ok.status, 200) << ok.body;
  EXPECT_EQ(JsonOf(ok)["body"], "hi");
  // Reads stay open.
  EXPECT_EQ(api_->Get("/echo").status, 200);
}

TEST_F(AdminServerTest, HandlerExceptionsBecome500AndTheServerKeepsServing) {
  ExpectError(api_->Get("/boom"), 500, "INTERNAL_ERROR");
  ExpectError(api_->Get("/boom-int"), 500, "INTERNAL_ERROR");
  EXPECT_EQ(api_->Get("/echo").status, 200);
}

TEST_F(AdminServerTest, OversizedBodiesAreRejected) {
  ExpectError(api_->Call("POST", "/echo", std::string(4096, 'x'), kToken), 413,
              "PAYLOAD_TOO_LARGE");
  EXPECT_EQ(api_->Get("/echo").status, 200);
}

// httplib 0.11 applied a Range header to every answer itself: an 8 KiB
// `Range: bytes=0-,0-,...` made one request build a multipart body ~2,700
// times the page (155 MB for /metrics). The admin API ignores Range: every
// answer is the whole body, 200, with no Content-Range.
TEST_F(AdminServerTest, RangeHeadersAreIgnoredAndTheWholeBodyAnswered) {
  const auto whole = api_->Get("/items/1/parts/2?q=" + std::string(100, 'x'));
  ASSERT_EQ(whole.status, 200) << whole.body;
  EXPECT_EQ(whole.headers.count("accept-ranges") ? whole.headers.at("accept-ranges") : "",
            "none");
  std::string many = "bytes=0-";
  for (int i = 0; i < 500; ++i) many += ",0-";
  for (const std::string range : {many, std::string("bytes=0-3"), std::string("bytes=99999999-"),
                                  std::string("bytes=-1"), std::string("garbage")}) {
    for (const char* name : {"Range", "range", "RANGE"}) {
      auto reply = HttpCall("127.0.0.1", server_->port(), "GET",
                            "/items/1/parts/2?q=" + std::string(100, 'x'), {}, {{name, range}});
      ASSERT_TRUE(reply) << range.substr(0, 40);
      EXPECT_EQ(reply->status, 200) << range.substr(0, 40);
      EXPECT_TRUE(reply->body == whole.body)
          << range.substr(0, 40) << ": " << reply->body.size() << " bytes, not "
          << whole.body.size() << ": " << reply->body.substr(0, 80);
      EXPECT_EQ(reply->headers.count("content-range"), 0u) << range.substr(0, 40);
    }
  }
  // Error bodies stay whole too.
  auto missing = HttpCall("127.0.0.1", server_->port(), "GET", "/nope", {}, {{"Range", "bytes=0-3"}});
  ASSERT_TRUE(missing);
  ExpectError(*missing, 404, "ROUTE_NOT_FOUND");
}

TEST_F(AdminServerTest, GarbageOnTheSocketGetsA400AndChangesNothing) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(server_->port()));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  std::string garbage = "\x01\x02 NOT HTTP AT ALL\r\n\r\n";
  ASSERT_EQ(write(fd, garbage.data(), garbage.size()), static_cast<ssize_t>(garbage.size()));
  // The server answers and closes; read until then (headers and body may
  // arrive in separate segments).
  timeval timeout{5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  std::string reply;
  char buf[4096];
  for (ssize_t n; (n = read(fd, buf, sizeof(buf))) > 0;) reply.append(buf, static_cast<size_t>(n));
  close(fd);
  EXPECT_TRUE(reply.starts_with("HTTP/1.1 400")) << reply;
  EXPECT_NE(reply.find("\"code\":\"BAD_REQUEST\""), std::string::npos) << reply;
  EXPECT_EQ(api_->Get("/echo").status, 200);
}

TEST_F(AdminServerTest, ABusyPortFailsToStartAndStopIsIdempotent) {
  AdminServer other;
  auto started = other.Start("127.0.0.1", server_->port());
  ASSERT_FALSE(started);
  EXPECT_EQ(started.error(), ErrorCode::kRpcFail);
  EXPECT_FALSE(AdminServer().Start("127.0.0.1", 70000));
  server_->Stop();
  server_->Stop();
  EXPECT_FALSE(HttpCall("127.0.0.1", server_->port(), "GET", "/echo"));
}

// A node id or tier name is any bytes; Prometheus rejects a whole scrape over
// one label value that is not UTF-8, so such bytes are written as \xNN text.
TEST(PrometheusLabelTest, LabelValuesThatAreNotUtf8StayValidUtf8) {
  PrometheusWriter w;
  w.SetConstLabels({{"node", "w\xff"}});
  w.BeginGauge("up", "help");
  // A lone continuation byte, a truncated sequence, an overlong '/', a
  // surrogate, above U+10FFFF; then valid two-, three- and four-byte
  // characters, which pass through unchanged.
  w.Sample({{"tier",
             "a\x81"
             "b\xe2\x82"},
            {"kind", "\xc0\xaf\xed\xa0\x80\xf4\x90\x80\x80"}},
           1.0);
  w.Sample({{"tier", "\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80"}, {"kind", "q\"\\"}}, 2.0);
  const std::string text = w.Take();
  EXPECT_TRUE(IsValidUtf8(text)) << text;
  Exposition doc;
  ASSERT_TRUE(ParseExposition(text, &doc)) << text;
  EXPECT_EQ(doc.Value("up", {{"node", "w\\xFF"},
                             {"tier", "a\\x81b\\xE2\\x82"},
                             {"kind", "\\xC0\\xAF\\xED\\xA0\\x80\\xF4\\x90\\x80\\x80"}}),
            1.0)
      << text;
  EXPECT_EQ(doc.Value("up", {{"node", "w\\xFF"},
                             {"tier", "\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80"},
                             {"kind", "q\"\\"}}),
            2.0)
      << text;
  EXPECT_EQ(PrometheusWriter::EscapeLabelValue("w\xfe"), "w\\\\xFE");
}

// A blocking TCP connection to 127.0.0.1:port, or -1.
int ConnectLoopback(int port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// Whether the server answered or closed `fd` (bytes, EOF or a reset are
// waiting) within `timeout`; nothing is read.
bool ServerSpoke(int fd, std::chrono::milliseconds timeout) {
  pollfd p{fd, POLLIN, 0};
  return poll(&p, 1, static_cast<int>(timeout.count())) > 0;
}

// "Content-Length: abc" (or "0x10", or two lengths) was read as 0 and the
// request routed with an empty body; it is malformed HTTP.
TEST_F(AdminServerTest, AContentLengthThatIsNotANumberIsRefused) {
  for (const std::string length : {"abc", "0x10", "-1", "1 2", "99999999999999999999"}) {
    const std::string request = "POST /echo HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer " +
                                std::string(kToken) + "\r\nContent-Length: " + length +
                                "\r\n\r\n{}";
    int fd = ConnectLoopback(server_->port());
    ASSERT_GE(fd, 0);
    ASSERT_EQ(send(fd, request.data(), request.size(), MSG_NOSIGNAL),
              static_cast<ssize_t>(request.size()));
    timeval timeout{5, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
    std::string reply;
    char buf[4096];
    for (ssize_t n; (n = read(fd, buf, sizeof(buf))) > 0;) reply.append(buf, static_cast<size_t>(n));
    close(fd);
    EXPECT_TRUE(reply.starts_with("HTTP/1.1 400")) << "Content-Length: " << length << "\n" << reply;
    EXPECT_NE(reply.find("\"code\":\"BAD_REQUEST\""), std::string::npos) << reply;
  }
  auto ok = api_->Call("POST", "/echo", "hi", kToken);
  EXPECT_EQ(ok.status, 200) << ok.body;
}

// Clients that send a request head a byte at a time (every 500 ms, far
// inside the per-read timeout) on as many connections as the server has
// threads held them all, for as long as they kept dripping. The head must
// arrive whole within head_timeout (2 s) of the accept, so they are cut and
// another client is answered within 3 s.
TEST_F(AdminServerTest, ClientsDrippingTheirHeadsAreCutAndOthersAnswered) {
  const int drippers = static_cast<int>(AdminServerOptions{}.threads);
  std::atomic<bool> done{false};
  std::atomic<int> cut{0};
  std::vector<std::jthread> threads;
  for (int i = 0; i < drippers; ++i) {
    threads.emplace_back([&, port = server_->port()] {
      int fd = ConnectLoopback(port);
      if (fd < 0) return;
      const std::string head = "GET /echo HTTP/1.1\r\nHost: x\r\nX-Pad: " + std::string(256, 'p');
      for (size_t k = 0; !done; ++k) {
        if (send(fd, &head[k % head.size()], 1, MSG_NOSIGNAL) != 1 ||
            ServerSpoke(fd, std::chrono::milliseconds(500))) {
          ++cut;
          break;
        }
      }
      close(fd);
    });
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // they hold the threads
  const auto start = std::chrono::steady_clock::now();
  auto reply = HttpCall("127.0.0.1", server_->port(), "GET", "/echo", {}, {},
                        std::chrono::milliseconds(3000));
  const auto waited = std::chrono::steady_clock::now() - start;
  EXPECT_TRUE(reply && reply->status == 200) << "no answer while clients dripped their heads";
  EXPECT_LT(waited, std::chrono::seconds(3));
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(3);
  while (cut < drippers && std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  done = true;
  threads.clear();  // joins
  EXPECT_EQ(cut, drippers) << "a client dripping its head was never cut";
}

// Idle connections beyond max_connections shed the oldest idle ones (503,
// closed at once), instead of each holding an fd while queued for one of the 4 threads
// (1,500 of them kept 1,492 fds and starved every request); the admitted
// ones are closed at the head deadline, so the server answers again while
// the clients still hold all of them open.
TEST_F(AdminServerTest, IdleConnectionsOverTheCapAreRefusedAndOthersStillAnswered) {
  const int cap = static_cast<int>(AdminServerOptions{}.max_connections);
  const int idle = 3 * cap;
  std::vector<int> fds;
  for (int i = 0; i < idle; ++i) {
    int fd = ConnectLoopback(server_->port());
    if (fd >= 0) fds.push_back(fd);
  }
  ASSERT_EQ(fds.size(), static_cast<size_t>(idle));
  const auto connected = std::chrono::steady_clock::now();
  // Well before the 2 s head deadline: only refusals can have closed any.
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  int refused = 0;
  for (int fd : fds) refused += ServerSpoke(fd, std::chrono::milliseconds(0)) ? 1 : 0;
  EXPECT_GE(refused, idle - cap);
  // A full server sheds its oldest connection without a request for a
  // newcomer: the first to connect was answered 503 and closed.
  char reply[12] = {};
  EXPECT_EQ(recv(fds.front(), reply, sizeof(reply), MSG_DONTWAIT), 12);
  EXPECT_EQ(std::string_view(reply, sizeof(reply)), "HTTP/1.1 503");

  // Answered again within 3 s of the flood, with every idle socket still
  // open on this side (a request that meets a full server is refused too).
  bool answered = false;
  while (!answered && std::chrono::steady_clock::now() < connected + std::chrono::seconds(3)) {
    auto reply = HttpCall("127.0.0.1", server_->port(), "GET", "/echo", {}, {},
                          std::chrono::milliseconds(1000));
    answered = reply && reply->status == 200;
    if (!answered) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_TRUE(answered) << "no answer within 3 s of " << idle << " idle connections";
  std::this_thread::sleep_until(connected + std::chrono::milliseconds(3500));
  int closed = 0;
  for (int fd : fds) closed += ServerSpoke(fd, std::chrono::milliseconds(0)) ? 1 : 0;
  EXPECT_EQ(closed, idle) << "an idle connection was kept past the head deadline";
  for (int fd : fds) close(fd);
}

// A client that keeps more than max_connections idle connections open and
// reconnects each one the moment it is closed held every slot, so every
// request, /livez included, was answered 503 (a liveness probe then restarts
// a healthy process). Idle connections hold no thread and a full server
// sheds them for a newcomer, so a request sent at once is answered.
TEST_F(AdminServerTest, RequestsAreAnsweredWhileIdleClientsKeepTheServerFull) {
  const int cap = static_cast<int>(AdminServerOptions{}.max_connections);
  std::atomic<bool> done{false};
  std::atomic<int> flooding{0};
  std::jthread flood([&, port = server_->port()] {
    std::vector<int> fds;
    for (int i = 0; i < cap + 8; ++i) {
      int fd = ConnectLoopback(port);
      if (fd >= 0) fds.push_back(fd);
    }
    flooding = static_cast<int>(fds.size());
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!done && std::chrono::steady_clock::now() < give_up) {
      for (int& fd : fds) {  // reconnect every connection the server closed
        if (fd >= 0 && !ServerSpoke(fd, std::chrono::milliseconds(0))) continue;
        if (fd >= 0) close(fd);
        fd = ConnectLoopback(port);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    for (int fd : fds) {
      if (fd >= 0) close(fd);
    }
  });
  const auto wait_flood = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (flooding == 0 && std::chrono::steady_clock::now() < wait_flood) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_GT(flooding.load(), cap);
  int answered = 0;
  std::string failures;
  for (int i = 0; i < 6; ++i) {  // across the 2 s head deadline of the first wave
    auto reply = HttpCall("127.0.0.1", server_->port(), "GET", "/echo", {}, {},
                          std::chrono::milliseconds(1000));
    if (reply && reply->status == 200) {
      ++answered;
    } else {
      failures += (reply ? std::to_string(reply->status) + " " + reply->body : "no reply") + "; ";
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
  done = true;
  EXPECT_EQ(answered, 6) << failures;
}

// A client without the token that sends a POST head and then trickles its
// body held a pool thread for the whole read_timeout (the body was read
// before the token was checked); as many as the server has threads delayed
// every request by up to 5 s. It is answered 401 before its body is read.
TEST_F(AdminServerTest, UnauthorizedBodiesAreRefusedBeforeTheyAreRead) {
  const int tricklers = static_cast<int>(AdminServerOptions{}.threads);
  std::vector<int> fds;
  const std::string head =
      "POST /echo HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
      "Content-Length: 1000\r\n\r\n{";
  for (int i = 0; i < tricklers; ++i) {
    int fd = ConnectLoopback(server_->port());
    ASSERT_GE(fd, 0);
    ASSERT_EQ(send(fd, head.data(), head.size(), MSG_NOSIGNAL), static_cast<ssize_t>(head.size()));
    fds.push_back(fd);
  }
  for (int fd : fds) {
    ASSERT_TRUE(ServerSpoke(fd, std::chrono::milliseconds(2000)))
        << "a trickled body without the token was waited for";
    char reply[12] = {};
    EXPECT_EQ(recv(fd, reply, sizeof(reply), 0), 12);
    EXPECT_EQ(std::string_view(reply, sizeof(reply)), "HTTP/1.1 401");
    close(fd);
  }
  // With the token the body is read and served as before.
  auto ok = api_->Call("POST", "/echo", "hi", kToken);
  ASSERT_EQ(ok.status, 200) << ok.body;
  EXPECT_EQ(JsonOf(ok)["body"], "hi");
  // Unknown paths still say so.
  ExpectError(api_->Call("POST", "/nope", "hi"), 404, "ROUTE_NOT_FOUND");
}

// Any web page could make the operator's browser POST to a token-less admin
// port ("simple" requests need no preflight), and a page on a DNS name
// rebound to 127.0.0.1 could send anything as same-origin. Mutating
// requests with a foreign Origin, or (without a token) a Host that is not an
// address or localhost, are refused; reads and the CLI's requests are not.
TEST(AdminServerCrossSiteTest, ForeignOriginsAndRebindableHostsCannotMutate) {
  AdminServer open_server;  // no token: the default
  std::atomic<int> posts{0};
  open_server.Route("POST", "/evict", [&](const HttpRequest&) {
    ++posts;
    return HttpResponse::Json(200, "{}");
  });
  open_server.Route("GET", "/evict", [](const HttpRequest&) { return HttpResponse::Json(200, "{}"); });
  ASSERT_TRUE(open_server.Start("127.0.0.1", 0));
  const int port = open_server.port();
  const std::string self = "127.0.0.1:" + std::to_string(port);
  using Headers = std::vector<std::pair<std::string, std::string>>;
  auto post = [&](Headers headers) {
    headers.emplace_back("Content-Type", "text/plain;charset=UTF-8");
    auto reply = HttpCall("127.0.0.1", port, "POST", "/evict", "{\"tier\":\"dram\"}", headers);
    EXPECT_TRUE(reply);
    return reply ? *reply : HttpReply{};
  };
  ExpectError(post({{"Origin", "http://evil.example"}}), 403, "FORBIDDEN_ORIGIN");
  ExpectError(post({{"Origin", "null"}}), 403, "FORBIDDEN_ORIGIN");
  ExpectError(post({{"Host", "evil.example:" + std::to_string(port)}}), 403, "FORBIDDEN_HOST");
  ExpectError(post({{"Host", "evil.example:" + std::to_string(port)},
                    {"Origin", "http://evil.example:" + std::to_string(port)}}),
              403, "FORBIDDEN_HOST");
  EXPECT_EQ(posts, 0);
  // The CLI and curl send no Origin and name the server by address.
  EXPECT_EQ(post({}).status, 200);
  EXPECT_EQ(post({{"Host", "localhost:" + std::to_string(port)}}).status, 200);
  EXPECT_EQ(post({{"Host", "[::1]:" + std::to_string(port)}}).status, 200);
  EXPECT_EQ(post({{"Origin", "http://" + self}}).status, 200);  // same origin
  EXPECT_EQ(posts, 4);
  // Reads stay open.
  auto read = HttpCall("127.0.0.1", port, "GET", "/evict", {},
                       {{"Host", "evil.example"}, {"Origin", "http://evil.example"}});
  ASSERT_TRUE(read);
  EXPECT_EQ(read->status, 200);

  // With a token a DNS name is fine (the token is the check), a foreign
  // Origin is still refused.
  AdminServerOptions options;
  options.token = kToken;
  AdminServer guarded(options);
  guarded.Route("POST", "/evict", [](const HttpRequest&) { return HttpResponse::Json(200, "{}"); });
  ASSERT_TRUE(guarded.Start("127.0.0.1", 0));
  const Headers auth = {{"Authorization", std::string("Bearer ") + kToken}};
  Headers named = auth;
  named.emplace_back("Host", "worker-3.internal");
  auto by_name = HttpCall("127.0.0.1", guarded.port(), "POST", "/evict", "{}", named);
  ASSERT_TRUE(by_name);
  EXPECT_EQ(by_name->status, 200) << by_name->body;
  Headers foreign = auth;
  foreign.emplace_back("Origin", "http://evil.example");
  auto cross = HttpCall("127.0.0.1", guarded.port(), "POST", "/evict", "{}", foreign);
  ASSERT_TRUE(cross);
  ExpectError(*cross, 403, "FORBIDDEN_ORIGIN");
}

TEST(HttpStatusForTest, MapsEveryErrorFamily) {
  EXPECT_EQ(HttpStatusFor(ErrorCode::kObjectNotFound), 404);
  EXPECT_EQ(HttpStatusFor(ErrorCode::kTierNotFound), 404);
  EXPECT_EQ(HttpStatusFor(ErrorCode::kNodeNotFound), 404);
  EXPECT_EQ(HttpStatusFor(ErrorCode::kInvalidKey), 400);
  EXPECT_EQ(HttpStatusFor(ErrorCode::kInvalidParams), 400);
  EXPECT_EQ(HttpStatusFor(ErrorCode::kObjectHasLease), 409);
  EXPECT_EQ(HttpStatusFor(ErrorCode::kObjectReplicaBusy), 409);
  EXPECT_EQ(HttpStatusFor(ErrorCode::kObjectAlreadyExists), 409);
  EXPECT_EQ(HttpStatusFor(ErrorCode::kNoAvailableHandle), 507);
  EXPECT_EQ(HttpStatusFor(ErrorCode::kInternalError), 500);
  EXPECT_EQ(HttpStatusFor(ErrorCode::kRpcFail), 500);
}

TEST(ReadyFileTest, WritesOnePortPerLineAndReplacesAtomically) {
  auto path =
      std::filesystem::temp_directory_path() / ("ready_file_test_" + std::to_string(getpid()));
  std::ofstream(path) << "stale\n";
  const int ports[] = {50051, 50050};
  ASSERT_TRUE(WriteReadyFilePorts(path.string(), ports));
  std::ifstream in(path);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text, "50051\n50050\n");
  std::filesystem::remove(path);
  EXPECT_FALSE(WriteReadyFilePorts("/nonexistent-dir/ready", ports));
}

// ---------------------------------------------------------------------------
// Master routes.
class MasterAdminTest : public ::testing::Test {
 protected:
  void SetUp() override {
    MasterOptions options;
    options.node_ttl = Millis(1000);
    options.now = [this] { return now_; };
    service_ = std::make_unique<MasterService>(options);
    ASSERT_TRUE(service_->RegisterNode(Node("node-a", 7001)));
    ASSERT_TRUE(service_->RegisterNode(Node("node-b", 7002)));
    // node-b goes silent and dies; node-a keeps beating.
    now_ += Millis(2000);
    ASSERT_TRUE(service_->Heartbeat("node-a", Node("node-a", 7001).tiers));
    ASSERT_EQ(service_->ExpireDeadNodes(), 1u);

    AdminServerOptions admin_options;
    admin_options.token = kToken;
    server_ = std::make_unique<AdminServer>(admin_options);
    RegisterMasterAdminRoutes(*server_, *service_, &requests_);
    ASSERT_TRUE(server_->Start("127.0.0.1", 0));
    api_ = std::make_unique<Api>(server_->port());
  }

  static NodeRecord Node(const std::string& id, int port) {
    NodeRecord node;
    node.node_id = id;
    node.host = "127.0.0.1";
    node.port = port;
    node.tiers = {{"dram", "dram", 64 * kMiB, 16 * kMiB, 3}, {"ssd", "ssd", 1024 * kMiB, 0, 0}};
    return node;
  }

  SteadyClock::time_point now_ = SteadyClock::now();
  std::unique_ptr<MasterService> service_;
  RequestMetrics requests_{{"put_owner", "get_location"}};
  std::unique_ptr<AdminServer> server_;
  std::unique_ptr<Api> api_;
};

TEST_F(MasterAdminTest, HealthCountsKeysAndLiveNodes) {
  ASSERT_TRUE(service_->PutOwner("k1", "node-a"));
  auto reply = api_->Get("/health");
  ASSERT_EQ(reply.status, 200);
  json doc = JsonOf(reply);
  EXPECT_EQ(doc["status"], "ok");
  EXPECT_EQ(doc["role"], "master");
  EXPECT_EQ(doc["keys"], 1);
  EXPECT_EQ(doc["nodes_alive"], 1);
  EXPECT_EQ(doc["nodes_dead"], 1);
}

TEST_F(MasterAdminTest, NodesListsAddressesStatesAndTiers) {
  auto reply = api_->Get("/nodes");
  ASSERT_EQ(reply.status, 200);
  json nodes = JsonOf(reply)["nodes"];
  ASSERT_EQ(nodes.size(), 2u);
  EXPECT_EQ(nodes[0]["node_id"], "node-a");
  EXPECT_EQ(nodes[0]["address"], "127.0.0.1:7001");
  EXPECT_EQ(nodes[0]["alive"], true);
  EXPECT_EQ(nodes[0]["state"], "alive");
  EXPECT_GT(nodes[0]["last_heartbeat_ms"].get<int64_t>(), 0);
  ASSERT_EQ(nodes[0]["tiers"].size(), 2u);
  EXPECT_EQ(nodes[0]["tiers"][0], (json{{"name", "dram"},
                                        {"kind", "dram"},
                                        {"capacity", 64 * kMiB},
                                        {"used", 16 * kMiB},
                                        {"objects", 3}}));
  EXPECT_EQ(nodes[1]["node_id"], "node-b");
  EXPECT_EQ(nodes[1]["state"], "dead");
  EXPECT_EQ(nodes[1]["alive"], false);
}

TEST_F(MasterAdminTest, KeyLookupAnswersOwnerOr404Or400) {
  ASSERT_TRUE(service_->PutOwner("dir/key 1", "node-a"));
  auto reply = api_->Get("/keys/" + UrlEncode("dir/key 1"));
  ASSERT_EQ(reply.status, 200) << reply.body;
  json doc = JsonOf(reply);
  EXPECT_EQ(doc["key"], "dir/key 1");
  EXPECT_EQ(doc["node_id"], "node-a");
  EXPECT_EQ(doc["address"], "127.0.0.1:7001");
  // Unescaped slashes reach the key too.
  EXPECT_EQ(api_->Get("/keys/dir/key%201").status, 200);

  ExpectError(api_->Get("/keys/absent"), 404, "OBJECT_NOT_FOUND");
  ExpectError(api_->Get("/keys/" + std::string(kMaxKeyBytes + 1, 'k')), 400, "INVALID_KEY");
  ExpectError(api_->Get("/keys/a%00b"), 400, "INVALID_KEY");
}

TEST_F(MasterAdminTest, KeysArePagedInOrderWithACursor) {
  for (int i = 24; i >= 0; --i) {
    char key[8];
    std::snprintf(key, sizeof(key), "k%02d", i);
    ASSERT_TRUE(service_->PutOwner(key, "node-a"));
  }
  ASSERT_TRUE(service_->PutOwner("other", "node-a"));

  std::vector<std::string> seen;
  std::string cursor;
  int pages = 0;
  while (true) {
    std::string target = "/keys?prefix=k&limit=10";
    if (!cursor.empty()) target += "&cursor=" + UrlEncode(cursor);
    auto reply = api_->Get(target);
    ASSERT_EQ(reply.status, 200) << reply.body;
    json doc = JsonOf(reply);
    ++pages;
    for (const auto& k : doc["keys"]) seen.push_back(k.get<std::string>());
    EXPECT_EQ(doc["count"], doc["keys"].size());
    if (doc["next_cursor"].is_null()) break;
    cursor = doc["next_cursor"].get<std::string>();
    EXPECT_EQ(cursor, seen.back());
    ASSERT_LT(pages, 10);
  }
  EXPECT_EQ(pages, 3);
  ASSERT_EQ(seen.size(), 25u);
  EXPECT_TRUE(std::is_sorted(seen.begin(), seen.end()));
  EXPECT_EQ(seen.front(), "k00");
  EXPECT_EQ(seen.back(), "k24");

  // No prefix: every key, default limit 100.
  json all = JsonOf(api_->Get("/keys"));
  EXPECT_EQ(all["count"], 26);
  EXPECT_TRUE(all["next_cursor"].is_null());

  for (const char* bad : {"0", "-1", "abc", "10001", "5x", ""}) {
    ExpectError(api_->Get(std::string("/keys?limit=") + bad), 400, "INVALID_PARAMS");
  }
  EXPECT_EQ(api_->Get("/keys?limit=10000").status, 200);
}

// Keys are bytes, not UTF-8. Their JSON form replaces invalid bytes with
// U+FFFD, so "a\xff" and "a\x81" read alike in "keys"; the cursor must still
// name the exact key, or paging after "a\x81" would return "a\xff" forever.
TEST_F(MasterAdminTest, KeyCursorsNameKeysThatAreNotUtf8Exactly) {
  for (const char* key : {"a\xff", "a\x81", "b"}) ASSERT_TRUE(service_->PutOwner(key, "node-a"));
  std::vector<std::string> seen;
  std::string cursor;
  int pages = 0;
  for (; pages < 10; ++pages) {
    std::string target = "/keys?limit=1";
    if (!cursor.empty()) target += "&cursor=" + UrlEncode(cursor);
    auto reply = api_->Get(target);
    ASSERT_EQ(reply.status, 200) << reply.body;
    json doc = JsonOf(reply);
    for (const auto& k : doc["keys"]) seen.push_back(k.get<std::string>());
    if (doc["next_cursor"].is_null()) break;
    cursor = doc["next_cursor"].get<std::string>();
  }
  EXPECT_LT(pages, 10) << "paging did not end";
  const std::string replaced = "a\xef\xbf\xbd";  // "a" and U+FFFD
  EXPECT_EQ(seen, (std::vector<std::string>{replaced, replaced, "b"}));
  // A cursor in the old form, a plain key, is still accepted.
  EXPECT_EQ(JsonOf(api_->Get("/keys?cursor=a"))["count"], 3);
  EXPECT_EQ(JsonOf(api_->Get("/keys?cursor=" + UrlEncode("a\xff")))["keys"], json::array({"b"}));
}

TEST_F(MasterAdminTest, MetricsAreWellFormedPrometheus) {
  ASSERT_TRUE(service_->PutOwner("k1", "node-a"));
  ASSERT_TRUE(service_->PutOwner("k2", "node-a"));
  requests_.Record("get_location", ErrorCode::kOk, std::chrono::microseconds(120));
  requests_.Record("get_location", ErrorCode::kObjectNotFound, std::chrono::microseconds(80));
  Exposition doc = ScrapeMetrics(*api_);
  EXPECT_EQ(doc.Value("mooncake_master_keys", {}), 2);
  EXPECT_EQ(doc.Value("mooncake_master_nodes", {{"state", "alive"}}), 1);
  EXPECT_EQ(doc.Value("mooncake_master_nodes", {{"state", "dead"}}), 1);
  EXPECT_EQ(doc.Value("mooncake_master_node_up", {{"node", "node-b"}}), 0);
  EXPECT_EQ(doc.Value("mooncake_master_node_tier_capacity_bytes",
                      {{"node", "node-a"}, {"tier", "dram"}, {"kind", "dram"}}),
            64.0 * kMiB);
  EXPECT_EQ(doc.Value("mooncake_master_node_tier_used_bytes",
                      {{"node", "node-a"}, {"tier", "dram"}, {"kind", "dram"}}),
            16.0 * kMiB);
  EXPECT_EQ(doc.Value("mooncake_master_requests_total",
                      {{"op", "get_location"}, {"code", "OBJECT_NOT_FOUND"}}),
            1);
  EXPECT_EQ(doc.Value("mooncake_master_request_duration_seconds_count", {{"op", "get_location"}}),
            2);
  // A get_location that found no owner is a client's get of an absent key.
  EXPECT_EQ(doc.Value("mooncake_master_get_misses_total", {}), 1);
  EXPECT_GT(doc.Value("process_resident_memory_bytes", {}), 0);
  EXPECT_GT(doc.Value("process_start_time_seconds", {}), 1.5e9);
  EXPECT_TRUE(doc.Has("process_cpu_seconds_total"));
  EXPECT_TRUE(doc.Has("process_virtual_memory_bytes"));
  EXPECT_TRUE(doc.Has("process_max_fds"));
  EXPECT_TRUE(doc.Has("mooncake_build_info"));
}

TEST_F(MasterAdminTest, MetricsStayValidUtf8WhenANodeIdIsNot) {
  ASSERT_TRUE(service_->RegisterNode(Node("w\xff", 7003)));
  auto reply = api_->Get("/metrics");
  ASSERT_EQ(reply.status, 200);
  EXPECT_TRUE(IsValidUtf8(reply.body)) << reply.body;
  Exposition doc;
  ASSERT_TRUE(ParseExposition(reply.body, &doc)) << reply.body;
  EXPECT_EQ(doc.Value("mooncake_master_node_up", {{"node", "w\\xFF"}}), 1);
}

TEST_F(MasterAdminTest, ReadOnlyRoutesRejectOtherMethodsAndUnknownPaths) {
  ExpectError(api_->Call("DELETE", "/keys/k1", "", kToken), 405, "METHOD_NOT_ALLOWED");
  ExpectError(api_->Call("POST", "/nodes", "{}", kToken), 405, "METHOD_NOT_ALLOWED");
  // GET / (the status page) and GET /stats exist on the master, read-only.
  ExpectError(api_->Call("POST", "/stats", "{}", kToken), 405, "METHOD_NOT_ALLOWED");
  ExpectError(api_->Call("POST", "/", "{}", kToken), 405, "METHOD_NOT_ALLOWED");
  ExpectError(api_->Get("/nope"), 404, "ROUTE_NOT_FOUND");
  ExpectError(api_->Get("/cluster"), 404, "ROUTE_NOT_FOUND");
}

// A standby answers every key call NOT_LEADER, and so does a new leader
// inside its rebuild window: neither may say ready (a readiness-gated
// Service would send it traffic), and both say their HA role, in /readyz and
// in /metrics. Without a gate (no --etcd) the master is "standalone", ready.
TEST_F(MasterAdminTest, ReadinessFollowsTheHaRole) {
  RoleGate gate("c", Millis(300));
  gate.set_self_address("127.0.0.1:7100");
  AdminServer ha_server;
  RegisterMasterAdminRoutes(ha_server, *service_, &requests_, {}, {}, &gate);
  ASSERT_TRUE(ha_server.Start("127.0.0.1", 0));
  Api ha(ha_server.port());

  auto role_metric = [&](const std::string& role) {
    return ScrapeMetrics(ha).Value("mooncake_master_ha_role", {{"role", role}});
  };
  for (const char* path : {"/readyz", "/health"}) {
    auto reply = ha.Get(path);
    EXPECT_EQ(reply.status, 503) << reply.body;
    json doc = JsonOf(reply);
    EXPECT_EQ(doc["ready"], false);
    EXPECT_EQ(doc["status"], "unavailable");
    EXPECT_EQ(doc["ha_role"], "standby");
    EXPECT_EQ(doc["leader"], nullptr);
    ASSERT_FALSE(doc["reasons"].empty());
    EXPECT_TRUE(doc["reasons"][0].get<std::string>().starts_with("standby")) << reply.body;
  }
  gate.BecomeStandby("10.0.0.9:50051");
  json standby = JsonOf(ha.Get("/readyz"));
  EXPECT_EQ(standby["leader"], "10.0.0.9:50051");
  EXPECT_NE(standby["reasons"][0].get<std::string>().find("10.0.0.9:50051"), std::string::npos);
  EXPECT_EQ(ScrapeMetrics(ha).Value("mooncake_master_is_leader", {}), 0.0);
  EXPECT_EQ(role_metric("standby"), 1.0);

  const auto became = SteadyClock::now();
  gate.BecomeLeader(became + std::chrono::hours(1));
  auto rebuilding = ha.Get("/readyz");
  if (SteadyClock::now() < became + Millis(300)) {  // still inside the window
    EXPECT_EQ(rebuilding.status, 503) << rebuilding.body;
    EXPECT_EQ(JsonOf(rebuilding)["ha_role"], "rebuilding");
  }
  const auto give_up = SteadyClock::now() + std::chrono::seconds(5);
  while (!gate.serving_keys() && SteadyClock::now() < give_up) {
    std::this_thread::sleep_for(Millis(20));
  }
  auto leader = ha.Get("/readyz");
  EXPECT_EQ(leader.status, 200) << leader.body;
  json doc = JsonOf(leader);
  EXPECT_EQ(doc["ready"], true);
  EXPECT_EQ(doc["ha_role"], "leader");
  EXPECT_EQ(doc["leader"], "127.0.0.1:7100");
  EXPECT_EQ(ScrapeMetrics(ha).Value("mooncake_master_is_leader", {}), 1.0);
  EXPECT_EQ(role_metric("leader"), 1.0);
  EXPECT_EQ(role_metric("standby"), 0.0);
  ha_server.Stop();

  // The fixture's server has no gate.
  json standalone = JsonOf(api_->Get("/readyz"));
  EXPECT_EQ(standalone["ready"], true);
  EXPECT_EQ(standalone["ha_role"], "standalone");
  EXPECT_EQ(ScrapeMetrics(*api_).Value("mooncake_master_is_leader", {}), 1.0);
}

TEST(MasterServerAdminTest, StartsTheAdminServerUnlessDisabled) {
  MasterConfig config;
  config.port = 0;
  config.admin_port = 0;
  config.admin_token = kToken;
  config.rebuild_ms = 0;  // no worker holds keys from before: healthy at once
  auto server = MasterServer::Start(config);
  ASSERT_TRUE(server);
  int admin_port = (*server)->admin_port();
  ASSERT_GT(admin_port, 0);
  EXPECT_NE(admin_port, (*server)->port());
  auto health = HttpCall("127.0.0.1", admin_port, "GET", "/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  (*server)->Stop();
  EXPECT_FALSE(HttpCall("127.0.0.1", admin_port, "GET", "/health"));

  config.admin_port = -1;
  auto without = MasterServer::Start(config);
  ASSERT_TRUE(without);
  EXPECT_EQ((*without)->admin_port(), -1);

  // An unreadable token file fails the start rather than disabling auth.
  config.admin_port = 0;
  config.admin_token.clear();
  config.admin_token_file = "/nonexistent/token";
  auto refused = MasterServer::Start(config);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error(), ErrorCode::kInvalidParams);
}

TEST(MasterServiceListKeysTest, FiltersByPrefixPagesAfterACursorAndSortsBytewise) {
  MasterService service;
  NodeRecord node;
  node.node_id = "n";
  node.host = "127.0.0.1";
  node.port = 7000;
  ASSERT_TRUE(service.RegisterNode(node));
  for (const char* key : {"b2", "a", "b1", "b10", "c", "b\xff", "B"}) {
    ASSERT_TRUE(service.PutOwner(key, "n"));
  }
  using Keys = std::vector<std::string>;
  EXPECT_EQ(service.ListKeys("", "", 100), (Keys{"B", "a", "b1", "b10", "b2", "b\xff", "c"}));
  EXPECT_EQ(service.ListKeys("b", "", 2), (Keys{"b1", "b10"}));
  EXPECT_EQ(service.ListKeys("b", "b10", 2), (Keys{"b2", "b\xff"}));
  EXPECT_EQ(service.ListKeys("b", "b\xff", 2), Keys{});
  EXPECT_EQ(service.ListKeys("", "", 0), Keys{});
  EXPECT_EQ(service.ListKeys("zz", "", 5), Keys{});
}

// ---------------------------------------------------------------------------
// Worker routes.

using mooncake::testing::InMemoryDirectory;

class WorkerAdminTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/http_admin_test_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    std::vector<std::unique_ptr<CacheTier>> tiers;
    tiers.push_back(std::move(DramTier::Create("dram", 8 * kMiB).value()));
    tiers.push_back(std::move(SsdTier::Open("ssd", dir_ + "/ssd", 32 * kMiB).value()));
    BackendOptions options;
    options.kv_lease_ttl = Millis(60000);
    backend_ = std::make_unique<TieredCacheBackend>(std::move(tiers), &directory_, options);

    config_.node_id = "worker-1";
    config_.dram_capacity = 8 * kMiB;
    config_.ssd_capacity = 32 * kMiB;
    config_.ssd_path = dir_ + "/ssd";
    AdminServerOptions admin_options;
    admin_options.token = kToken;
    server_ = std::make_unique<AdminServer>(admin_options);
    RegisterWorkerAdminRoutes(*server_, *backend_, config_, requests_,
                              [this] { return transport_; });
    ASSERT_TRUE(server_->Start("127.0.0.1", 0));
    api_ = std::make_unique<Api>(server_->port());
  }

  void TearDown() override {
    server_.reset();
    backend_.reset();
    std::filesystem::remove_all(dir_);
  }

  void Put(const std::string& key, uint64_t size, bool hard_pin = false) {
    ObjectOptions options;
    options.hard_pin = hard_pin;
    ASSERT_TRUE(backend_->Put(key, std::string(size, 'v'), options)) << key;
  }

  std::string dir_;
  InMemoryDirectory directory_;
  std::unique_ptr<TieredCacheBackend> backend_;
  WorkerConfig config_;
  RequestMetrics requests_{{"put", "get", "exist", "remove", "upsert"}};
  TransportSnapshot transport_;  // what the worker's transports report
  std::unique_ptr<AdminServer> server_;
  std::unique_ptr<Api> api_;
};

TEST_F(WorkerAdminTest, StatsAndMetricsReportMovesByTransport) {
  transport_ = {.rdma_enabled = false,
                .rdma_reason = "no RDMA device",
                .rdma_objects = 0,
                .rdma_bytes = 0,
                .tcp_objects = 7,
                .tcp_bytes = 7340032,
                .rdma_fallbacks = 2};
  json doc = JsonOf(api_->Get("/stats"));
  EXPECT_EQ(doc["transport"]["rdma_enabled"], false);
  EXPECT_EQ(doc["transport"]["rdma_reason"], "no RDMA device");
  EXPECT_EQ(doc["transport"]["tcp_objects"], 7);
  EXPECT_EQ(doc["transport"]["tcp_bytes"], 7340032);
  EXPECT_EQ(doc["transport"]["rdma_fallbacks"], 2);
  std::string metrics = api_->Get("/metrics").body;
  EXPECT_NE(
      metrics.find("mooncake_worker_peer_transfers_total{node=\"worker-1\",transport=\"tcp\"} 7"),
      std::string::npos)
      << metrics;
  EXPECT_NE(metrics.find("mooncake_worker_rdma_fallbacks_total{node=\"worker-1\"} 2"),
            std::string::npos);
  EXPECT_NE(metrics.find("mooncake_worker_rdma_enabled{node=\"worker-1\"} 0"), std::string::npos);
}

TEST_F(WorkerAdminTest, HealthNamesTheNodeAndCountsObjects) {
  Put("a", 1000);
  Put("b", 1000);
  auto reply = api_->Get("/health");
  ASSERT_EQ(reply.status, 200);
  json doc = JsonOf(reply);
  EXPECT_EQ(doc["status"], "ok");
  EXPECT_EQ(doc["role"], "worker");
  EXPECT_EQ(doc["node_id"], "worker-1");
  EXPECT_EQ(doc["objects"], 2);
  EXPECT_EQ(doc["tiers"], 2);
}

TEST_F(WorkerAdminTest, StatsReportTiersTotalsAndRequests) {
  Put("a", 4096);
  ASSERT_TRUE(backend_->Get("a", 0, 0));
  EXPECT_FALSE(backend_->Get("missing", 0, 0));
  requests_.Record("get", ErrorCode::kOk, std::chrono::microseconds(300));
  requests_.Record("get", ErrorCode::kObjectNotFound, std::chrono::microseconds(90));

  auto reply = api_->Get("/stats");
  ASSERT_EQ(reply.status, 200);
  json doc = JsonOf(reply);
  EXPECT_EQ(doc["node_id"], "worker-1");
  ASSERT_EQ(doc["tiers"].size(), 2u);
  const json& dram = doc["tiers"][0];
  EXPECT_EQ(dram["name"], "dram");
  EXPECT_EQ(dram["kind"], "dram");
  EXPECT_EQ(dram["capacity"], 8 * kMiB);
  EXPECT_GE(dram["used"].get<uint64_t>(), 4096u);
  EXPECT_EQ(dram["objects"], 1);
  for (const char* field :
       {"hits", "promotions_in", "demotions_out", "evictions", "pinned_bytes"}) {
    EXPECT_TRUE(dram[field].is_number_unsigned()) << field;
  }
  EXPECT_EQ(doc["tiers"][1]["kind"], "ssd");
  const json& totals = doc["totals"];
  EXPECT_EQ(totals["puts"], 1);
  EXPECT_EQ(totals["gets"], 2);
  EXPECT_EQ(totals["get_misses"], 1);
  for (const char* field :
       {"upserts", "removes", "dropped", "prefetch_started", "prefetch_succeeded",
        "prefetch_failed", "prefetch_skipped", "moved_in", "moved_out"}) {
    EXPECT_TRUE(totals[field].is_number_unsigned()) << field;
  }
  const json& get = doc["requests"]["get"];
  EXPECT_EQ(get["requests"], 2);
  EXPECT_EQ(get["errors"], 1);
  EXPECT_EQ(get["codes"]["OBJECT_NOT_FOUND"], 1);
  EXPECT_GT(get["p50_ms"].get<double>(), 0.0);
  EXPECT_GE(get["p99_ms"].get<double>(), get["p50_ms"].get<double>());
  EXPECT_EQ(doc["requests"]["put"]["requests"], 0);
  EXPECT_TRUE(doc["requests"].contains("other"));
}

TEST_F(WorkerAdminTest, ObjectInspectionShowsPlacementAndState) {
  Put("dir/obj", 5000, /*hard_pin=*/true);
  auto reply = api_->Get("/objects/" + UrlEncode("dir/obj"));
  ASSERT_EQ(reply.status, 200) << reply.body;
  json doc = JsonOf(reply);
  EXPECT_EQ(doc["key"], "dir/obj");
  EXPECT_EQ(doc["tier"], "dram");
  EXPECT_EQ(doc["size"], 5000);
  EXPECT_GT(doc["version"].get<uint64_t>(), 0u);
  EXPECT_EQ(doc["hard_pinned"], true);
  EXPECT_EQ(doc["soft_pinned"], false);
  EXPECT_EQ(doc["state"], "complete");
  EXPECT_EQ(doc["readers"], 0);
  for (const char* field : {"offset", "lease_remaining_ms", "idle_ms"}) {
    EXPECT_TRUE(doc[field].is_number()) << field;
  }
  ExpectError(api_->Get("/objects/absent"), 404, "OBJECT_NOT_FOUND");
  ExpectError(api_->Get("/objects/" + std::string(kMaxKeyBytes + 1, 'k')), 400, "INVALID_KEY");
}

TEST_F(WorkerAdminTest, DeleteNeedsTheTokenAndHonoursLeases) {
  Put("victim", 1000);
  ExpectError(api_->Call("DELETE", "/objects/victim"), 401, "UNAUTHORIZED");
  ExpectError(api_->Call("DELETE", "/objects/victim", "", "wrong"), 401, "UNAUTHORIZED");
  EXPECT_EQ(api_->Get("/objects/victim").status, 200);  // still there

  // A read leases the object: removal without force conflicts.
  ASSERT_TRUE(backend_->Get("victim", 0, 0));
  ExpectError(api_->Call("DELETE", "/objects/victim?force=false", "", kToken), 409,
              "OBJECT_HAS_LEASE");
  ExpectError(api_->Call("DELETE", "/objects/victim?force=maybe", "", kToken), 400,
              "INVALID_PARAMS");
  // Which of two values would win is a guess: refused, nothing removed.
  ExpectError(api_->Call("DELETE", "/objects/victim?force=true&force=false", "", kToken), 400,
              "INVALID_PARAMS");
  EXPECT_EQ(api_->Get("/objects/victim").status, 200);
  auto removed = api_->Call("DELETE", "/objects/victim?force=true", "", kToken);
  ASSERT_EQ(removed.status, 200) << removed.body;
  EXPECT_EQ(JsonOf(removed), (json{{"key", "victim"}, {"removed", true}}));
  ExpectError(api_->Get("/objects/victim"), 404, "OBJECT_NOT_FOUND");
  ExpectError(api_->Call("DELETE", "/objects/victim", "", kToken), 404, "OBJECT_NOT_FOUND");
}

TEST_F(WorkerAdminTest, EvictValidatesItsInputAndDemotes) {
  for (int i = 0; i < 4; ++i) Put("blk" + std::to_string(i), kMiB);
  const std::string body = R"({"tier":"dram","target_ratio":0.0})";
  ExpectError(api_->Call("POST", "/evict", body), 401, "UNAUTHORIZED");
  ExpectError(api_->Call("POST", "/evict", body, "wrong"), 401, "UNAUTHORIZED");
  for (const char* bad :
       {"{not json", "[]", R"({"tier":"dram"})", R"({"target_ratio":0.5})",
        R"({"tier":"dram","target_ratio":2.0})", R"({"tier":"dram","target_ratio":-0.1})",
        R"({"tier":"dram","target_ratio":"0.5"})", R"({"tier":"","target_ratio":0.5})",
        R"({"tier":"dram","ratio":0.5})", ""}) {
    ExpectError(api_->Call("POST", "/evict", bad, kToken), 400, "INVALID_PARAMS");
  }
  ExpectError(api_->Call("POST", "/evict", R"({"tier":"tape","target_ratio":0.5})", kToken), 404,
              "TIER_NOT_FOUND");
  ExpectError(api_->Call("GET", "/evict"), 405, "METHOD_NOT_ALLOWED");
  EXPECT_EQ(api_->Get("/objects/blk0").status, 200);

  auto reply = api_->Call("POST", "/evict", body, kToken);
  ASSERT_EQ(reply.status, 200) << reply.body;
  json doc = JsonOf(reply);
  EXPECT_EQ(doc["tier"], "dram");
  EXPECT_EQ(doc["target_ratio"], 0.0);
  EXPECT_GE(doc["bytes_freed"].get<uint64_t>(), 4 * kMiB);
  EXPECT_EQ(doc["used"], 0);
  EXPECT_EQ(JsonOf(api_->Get("/objects/blk0"))["tier"], "ssd");
}

// nlohmann keeps the last of repeated names, so {"tier":"dram",...,"tier":"ssd"}
// used to evict the SSD tier (dropping objects for good) with 200. A repeated
// field is now a 400 naming it, and nothing is evicted.
TEST_F(WorkerAdminTest, EvictRejectsARepeatedFieldAndChangesNothing) {
  for (int i = 0; i < 2; ++i) Put("blk" + std::to_string(i), kMiB);
  struct Case {
    const char* body;
    const char* field;
  };
  for (const Case& c :
       {Case{R"({"tier":"dram","target_ratio":0,"tier":"ssd"})", "tier"},
        Case{R"({"tier":"dram","target_ratio":1,"target_ratio":0})", "target_ratio"},
        Case{R"({"tier":"dram","tier":"dram","target_ratio":0})", "tier"}}) {
    auto reply = api_->Call("POST", "/evict", c.body, kToken);
    ExpectError(reply, 400, "INVALID_PARAMS");
    EXPECT_EQ(JsonOf(reply)["error"],
              "duplicate field \"" + std::string(c.field) + "\": name each field once")
        << c.body;
  }
  EXPECT_EQ(JsonOf(api_->Get("/objects/blk0"))["tier"], "dram");
  EXPECT_EQ(JsonOf(api_->Get("/objects/blk1"))["tier"], "dram");
  // The same name in a nested object is not a repeat (and still a bad ratio).
  auto nested =
      api_->Call("POST", "/evict", R"({"tier":"dram","target_ratio":{"tier":1}})", kToken);
  ExpectError(nested, 400, "INVALID_PARAMS");
  EXPECT_EQ(JsonOf(nested)["error"], "\"target_ratio\" must be a number in [0, 1]");
}

TEST_F(WorkerAdminTest, ConfigShowsEveryFieldByFlagName) {
  auto reply = api_->Get("/config");
  ASSERT_EQ(reply.status, 200);
  json doc = JsonOf(reply);
  EXPECT_EQ(doc["node-id"], "worker-1");
  EXPECT_EQ(doc["dram-capacity"], 8 * kMiB);
  EXPECT_EQ(doc["ssd-path"], dir_ + "/ssd");
  EXPECT_EQ(doc["high-watermark"], config_.high_watermark);
  EXPECT_EQ(doc["promote-on-get"], config_.promote_on_get);
  for (const char* flag :
       {"host", "advertise-host", "port", "master", "ssd-capacity", "low-watermark",
        "heartbeat-interval-ms", "allow-evict-soft-pinned", "kv-lease-ttl-ms",
        "put-start-discard-timeout-ms", "ready-file", "log-level"}) {
    EXPECT_TRUE(doc.contains(flag)) << flag;
  }
}

// /config used to show the unused default master (127.0.0.1:50051) for a
// worker that follows etcd or sharded masters, left out --etcd,
// --cluster-name and --master-shards, and showed the requested admin port
// (0, or the default) rather than the one the server listens on.
TEST_F(WorkerAdminTest, ConfigShowsTheMastersInUseAndTheBoundAdminPort) {
  json doc = JsonOf(api_->Get("/config"));
  EXPECT_EQ(doc["master"], config_.master);
  EXPECT_EQ(doc["etcd"], "");
  EXPECT_EQ(doc["master-shards"], "");
  EXPECT_EQ(doc["cluster-name"], "mooncake");
  EXPECT_EQ(doc["admin-port"], server_->port());
  EXPECT_NE(server_->port(), config_.admin_port);  // the default 50060 was not what it bound

  struct Case {
    std::string etcd, shards;
  };
  for (const Case& c : {Case{"http://127.0.0.1:2379", ""},
                        Case{"", "0-8191=127.0.0.1:7001,8192-16383=127.0.0.1:7002"}}) {
    WorkerConfig config = config_;
    config.etcd = c.etcd;
    config.master_shards = c.shards;
    config.cluster_name = "prod";
    config.admin_port = 0;
    AdminServer server;
    RegisterWorkerAdminRoutes(server, *backend_, config, requests_);
    ASSERT_TRUE(server.Start("127.0.0.1", 0));
    Api api(server.port());
    json shown = JsonOf(api.Get("/config"));
    EXPECT_TRUE(shown["master"].is_null()) << shown.dump();
    EXPECT_EQ(shown["etcd"], c.etcd);
    EXPECT_EQ(shown["master-shards"], c.shards);
    EXPECT_EQ(shown["cluster-name"], "prod");
    EXPECT_EQ(shown["admin-port"], server.port());
    EXPECT_GT(server.port(), 0);
  }
}

TEST_F(WorkerAdminTest, MetricsAreWellFormedPrometheus) {
  Put("a", 2048);
  ASSERT_TRUE(backend_->Get("a", 0, 0));
  requests_.Record("put", ErrorCode::kOk, std::chrono::microseconds(700));
  requests_.Record("get", ErrorCode::kOk, std::chrono::milliseconds(3));
  requests_.Record("get", ErrorCode::kObjectNotFound, std::chrono::microseconds(40));
  Exposition doc = ScrapeMetrics(*api_);
  const std::map<std::string, std::string> kNode = {{"node", "worker-1"}};
  EXPECT_EQ(doc.Value("mooncake_worker_tier_capacity_bytes",
                      {{"node", "worker-1"}, {"tier", "dram"}, {"kind", "dram"}}),
            8.0 * kMiB);
  EXPECT_EQ(doc.Value("mooncake_worker_tier_capacity_bytes",
                      {{"node", "worker-1"}, {"tier", "ssd"}, {"kind", "ssd"}}),
            32.0 * kMiB);
  EXPECT_GE(doc.Value("mooncake_worker_tier_used_bytes",
                      {{"node", "worker-1"}, {"tier", "dram"}, {"kind", "dram"}}),
            2048);
  EXPECT_EQ(doc.Value("mooncake_worker_tier_objects",
                      {{"node", "worker-1"}, {"tier", "dram"}, {"kind", "dram"}}),
            1);
  for (const char* counter : {"mooncake_worker_promotions_total", "mooncake_worker_demotions_total",
                              "mooncake_worker_evictions_total", "mooncake_worker_hits_total"}) {
    EXPECT_EQ(doc.types[counter], "counter") << counter;
  }
  EXPECT_EQ(doc.Value("mooncake_worker_puts_total", kNode), 1);
  EXPECT_EQ(doc.Value("mooncake_worker_gets_total", kNode), 1);
  EXPECT_TRUE(doc.Has("mooncake_worker_prefetch_started_total"));
  EXPECT_EQ(doc.Value("mooncake_worker_requests_total",
                      {{"node", "worker-1"}, {"op", "get"}, {"code", "OK"}}),
            1);
  EXPECT_EQ(doc.Value("mooncake_worker_requests_total",
                      {{"node", "worker-1"}, {"op", "get"}, {"code", "OBJECT_NOT_FOUND"}}),
            1);
  EXPECT_EQ(doc.types["mooncake_worker_request_duration_seconds"], "histogram");
  EXPECT_EQ(doc.Value("mooncake_worker_request_duration_seconds_count",
                      {{"node", "worker-1"}, {"op", "get"}}),
            2);
  EXPECT_EQ(doc.Value("mooncake_worker_request_duration_seconds_bucket",
                      {{"node", "worker-1"}, {"op", "get"}, {"le", "5e-05"}}),
            1);
  // The read of "a" counted its bytes against the DRAM tier.
  EXPECT_EQ(doc.Value("mooncake_worker_tier_read_bytes_total",
                      {{"node", "worker-1"}, {"tier", "dram"}, {"kind", "dram"}}),
            2048);
  EXPECT_EQ(doc.types["process_resident_memory_bytes"], "gauge");
  EXPECT_GT(doc.Value("process_resident_memory_bytes", kNode), 0);
  EXPECT_GT(doc.Value("process_open_fds", kNode), 0);
  EXPECT_EQ(doc.types["process_cpu_seconds_total"], "counter");
  EXPECT_EQ(doc.types["mooncake_build_info"], "gauge");
  for (const auto& sample : doc.samples) {
    EXPECT_EQ(sample.labels.count("node"), 1u) << sample.name;
  }
}

}  // namespace
}  // namespace mooncake
