#pragma once

// Raw loopback traffic for the tests of the RPC servers and the admin
// servers, unit and integration alike:
//  * Wire and Frame: strict binary-protocol Thrift bytes built by hand, so a
//    test can send what no well-behaved writer would;
//  * RawConnection: one TCP connection to 127.0.0.1 that sends exactly those
//    bytes (MSG_NOSIGNAL: a peer that closed first never raises SIGPIPE) and
//    tells what the server did with them, every wait bounded;
//  * Http, MetricIn and AdminMetric: a plain HTTP/1.1 client of the admin
//    servers (the integration tests do not link the http library) and the
//    reader of their Prometheus /metrics page.

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace mooncake::testing {

// ---- The Thrift binary protocol, by hand ----

// Type ids of the binary protocol (Thrift's TType).
enum WireType : uint8_t {
  kStop = 0,
  kBool = 2,
  kByte = 3,
  kDouble = 4,
  kI16 = 6,
  kI32 = 8,
  kI64 = 10,
  kString = 11,
  kStruct = 12,
  kMap = 13,
  kSet = 14,
  kList = 15,
};

// Message header words of the strict protocol, as ReadI32 reads them back.
constexpr int32_t kCallHeader = static_cast<int32_t>(0x80010001);   // VERSION_1 | T_CALL
constexpr int32_t kReplyHeader = static_cast<int32_t>(0x80010002);  // VERSION_1 | T_REPLY

// `payload` behind a frame header that declares `declared` bytes (a header
// alone: Frame("", n)).
inline std::string Frame(std::string_view payload, uint32_t declared) {
  std::string out = {static_cast<char>(declared >> 24), static_cast<char>(declared >> 16),
                     static_cast<char>(declared >> 8), static_cast<char>(declared)};
  out += payload;
  return out;
}
// `payload` behind the frame header that declares its size.
inline std::string Frame(std::string_view payload) {
  return Frame(payload, static_cast<uint32_t>(payload.size()));
}

// The big-endian i32 at `offset` of `bytes`.
inline int32_t ReadI32(std::string_view bytes, size_t offset) {
  uint32_t v = 0;
  for (size_t i = 0; i < 4; ++i) v = (v << 8) | static_cast<uint8_t>(bytes[offset + i]);
  return static_cast<int32_t>(v);
}

// A big-endian encoder of the strict binary protocol.
class Wire {
 public:
  Wire& U8(uint8_t v) {
    out_.push_back(static_cast<char>(v));
    return *this;
  }
  Wire& I16(uint16_t v) { return BigEndian(v, 2); }
  Wire& I32(uint32_t v) { return BigEndian(v, 4); }
  Wire& I64(uint64_t v) { return BigEndian(v, 8); }
  Wire& Raw(std::string_view s) {
    out_ += s;
    return *this;
  }
  // A string or binary value: its i32 length, then its bytes.
  Wire& Str(std::string_view s) { return I32(static_cast<uint32_t>(s.size())).Raw(s); }
  // A list<string> value: element type, count, items.
  Wire& Strings(std::initializer_list<std::string_view> items) {
    U8(kString).I32(static_cast<uint32_t>(items.size()));
    for (std::string_view item : items) Str(item);
    return *this;
  }
  Wire& Field(uint8_t type, int16_t id) { return U8(type).I16(static_cast<uint16_t>(id)); }
  Wire& Stop() { return U8(kStop); }
  // A message header: version word and type, method name, sequence id.
  Wire& Message(uint32_t header, std::string_view method, uint32_t seqid = 1) {
    return I32(header).Str(method).I32(seqid);
  }
  Wire& Call(std::string_view method, uint32_t seqid = 1) {
    return Message(static_cast<uint32_t>(kCallHeader), method, seqid);
  }

  const std::string& str() const { return out_; }
  // The bytes behind the frame header that declares their size.
  std::string Framed() const { return Frame(out_); }

 private:
  Wire& BigEndian(uint64_t v, int bytes) {
    for (int i = bytes - 1; i >= 0; --i) out_.push_back(static_cast<char>(v >> (8 * i)));
    return *this;
  }
  std::string out_;
};

// ---- A raw loopback connection ----

class RawConnection {
 public:
  // What the server did with the connection.
  enum class Outcome { kClosed, kAnswered, kSilent };

  // Connects to 127.0.0.1:port (TCP_NODELAY: each Send goes out as it is).
  // With `send_timeout`, a send the server does not take within it fails
  // instead of blocking.
  explicit RawConnection(int port, std::chrono::milliseconds send_timeout = {}) {
    fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd_ < 0) return;
    if (send_timeout.count() > 0) {
      const auto us = std::chrono::duration_cast<std::chrono::microseconds>(send_timeout).count();
      timeval tv{.tv_sec = us / 1000000, .tv_usec = us % 1000000};
      setsockopt(fd_, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    }
    int one = 1;
    setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) Close();
  }
  ~RawConnection() { Close(); }
  RawConnection(RawConnection&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  RawConnection& operator=(RawConnection&& other) noexcept {
    if (this != &other) {
      Close();
      fd_ = std::exchange(other.fd_, -1);
    }
    return *this;
  }
  RawConnection(const RawConnection&) = delete;
  RawConnection& operator=(const RawConnection&) = delete;

  bool connected() const { return fd_ >= 0; }

  // False once the server has closed the connection (EPIPE, ECONNRESET) or
  // stopped reading past the send timeout.
  bool Send(std::string_view bytes) {
    while (!bytes.empty()) {
      ssize_t n = send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;
      bytes.remove_prefix(static_cast<size_t>(n));
    }
    return true;
  }

  // Half-closes: the server reads EOF after what was sent.
  void ShutdownWrite() {
    if (fd_ >= 0) shutdown(fd_, SHUT_WR);
  }

  // Whether bytes or a hang-up arrive within `timeout` (nothing is read).
  bool Readable(std::chrono::milliseconds timeout) {
    pollfd p{fd_, POLLIN, 0};
    return poll(&p, 1, static_cast<int>(timeout.count())) > 0;
  }

  // Waits up to `timeout` for what the server does next: bytes (appended to
  // `*got`: kAnswered), a hang-up or reset (kClosed), or nothing (kSilent).
  Outcome Receive(std::chrono::milliseconds timeout, std::string* got) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return Outcome::kSilent;
      pollfd p{fd_, POLLIN, 0};
      if (poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
      char buf[16 * 1024];
      ssize_t n = recv(fd_, buf, sizeof(buf), MSG_DONTWAIT);
      if (n > 0) {
        got->append(buf, static_cast<size_t>(n));
        return Outcome::kAnswered;
      }
      if (n == 0 || (errno != EAGAIN && errno != EINTR)) return Outcome::kClosed;
    }
  }

  // Waits up to `timeout` for the server to answer or hang up. Bytes that
  // arrive are appended to `*got`; once `*got` holds any, the outcome is
  // kAnswered.
  Outcome Await(std::chrono::milliseconds timeout, std::string* got = nullptr) {
    std::string local;
    std::string& out = got ? *got : local;
    Outcome outcome = Receive(timeout, &out);
    return out.empty() ? outcome : Outcome::kAnswered;
  }

  // Reads until the server hangs up (true; a reset counts) or nothing
  // arrives for `idle` (false). What came is appended to `*got`.
  bool ReadUntilClosed(std::chrono::milliseconds idle, std::string* got = nullptr) {
    std::string local;
    for (;;) {
      Outcome outcome = Receive(idle, got ? got : &local);
      if (outcome != Outcome::kAnswered) return outcome == Outcome::kClosed;
    }
  }

  // One whole reply frame (payload only), or nullopt if none within `timeout`.
  std::optional<std::string> ReadFrame(
      std::chrono::milliseconds timeout = std::chrono::seconds(5)) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    std::string got;
    auto complete = [&] {
      return got.size() >= 4 && got.size() >= 4 + static_cast<size_t>(ReadI32(got, 0));
    };
    while (!complete()) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0 || Await(left, &got) != Outcome::kAnswered) return std::nullopt;
    }
    return got.substr(4, static_cast<size_t>(ReadI32(got, 0)));
  }

  // Sends a call of `method` without arguments (ListNodes on a master, Stats
  // on a worker) and expects a Thrift reply frame within 5 s.
  ::testing::AssertionResult RoundTrip(std::string_view method = "ListNodes") {
    if (!Send(Wire().Call(method).Stop().Framed())) {
      return ::testing::AssertionFailure() << "send failed";
    }
    auto reply = ReadFrame();
    if (!reply) return ::testing::AssertionFailure() << "no whole reply frame";
    if (reply->size() < 4 || ReadI32(*reply, 0) != kReplyHeader) {
      return ::testing::AssertionFailure() << "not a Thrift reply: " << reply->size() << " bytes";
    }
    return ::testing::AssertionSuccess();
  }

  void Close() {
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

// ---- The admin servers over plain HTTP ----

struct HttpReply {
  int status = 0;
  std::string headers;  // the raw header block, lower-cased
  std::string body;     // de-chunked
};

namespace raw_http_detail {

inline std::string Lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

// Whether `raw` holds a whole response: headers, then Content-Length bytes.
// Without a Content-Length (a chunked body) only the server's close tells.
inline bool WholeResponse(const std::string& raw) {
  size_t end = raw.find("\r\n\r\n");
  if (end == std::string::npos) return false;
  std::string headers = Lower(raw.substr(0, end));
  size_t at = headers.find("content-length:");
  if (at == std::string::npos) return false;
  return raw.size() - end - 4 >= std::stoul(headers.substr(at + 15));
}

// The body of a "Transfer-Encoding: chunked" reply.
inline std::string Dechunk(const std::string& raw) {
  std::string out;
  size_t pos = 0;
  while (pos < raw.size()) {
    size_t eol = raw.find("\r\n", pos);
    if (eol == std::string::npos) break;
    size_t size = std::stoul(raw.substr(pos, eol - pos), nullptr, 16);
    if (size == 0) break;
    out += raw.substr(eol + 2, size);
    pos = eol + 2 + size + 2;
  }
  return out;
}

}  // namespace raw_http_detail

// One HTTP/1.1 request to 127.0.0.1:port with "Connection: close", a bearer
// `token` when given and a JSON `body` when given (or a POST); nullopt when
// no whole reply arrives (nothing for `timeout`, or no HTTP status line).
inline std::optional<HttpReply> Http(int port, std::string_view method, std::string_view target,
                                     std::string_view body = {}, std::string_view token = {},
                                     std::chrono::milliseconds timeout = std::chrono::seconds(5)) {
  RawConnection conn(port, timeout);
  if (!conn.connected()) return std::nullopt;
  std::string request = std::string(method) + " " + std::string(target) +
                        " HTTP/1.1\r\nHost: 127.0.0.1:" + std::to_string(port) +
                        "\r\nConnection: close\r\n";
  if (!token.empty()) request += "Authorization: Bearer " + std::string(token) + "\r\n";
  if (!body.empty() || method == "POST") {
    request +=
        "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
  }
  request += "\r\n";
  request += body;
  if (!conn.Send(request)) return std::nullopt;
  std::string raw;
  while (!raw_http_detail::WholeResponse(raw)) {
    RawConnection::Outcome outcome = conn.Receive(timeout, &raw);
    if (outcome == RawConnection::Outcome::kSilent) return std::nullopt;
    if (outcome == RawConnection::Outcome::kClosed) break;
  }
  size_t header_end = raw.find("\r\n\r\n");
  if (header_end == std::string::npos || !raw.starts_with("HTTP/1.")) return std::nullopt;
  HttpReply reply;
  reply.status = std::atoi(raw.c_str() + raw.find(' ') + 1);
  reply.headers = raw_http_detail::Lower(raw.substr(0, header_end));
  reply.body = raw.substr(header_end + 4);
  if (reply.headers.find("transfer-encoding: chunked") != std::string::npos) {
    reply.body = raw_http_detail::Dechunk(reply.body);
  }
  return reply;
}

// `series` without a leading node="..." label: a worker writes its node id
// as the first label of every series, which callers may leave out.
inline std::string WithoutNodeLabel(std::string_view series) {
  constexpr std::string_view kNode = "{node=\"";
  size_t open = series.find(kNode);
  if (open == std::string_view::npos || series.find('{') != open) return std::string(series);
  size_t close = series.find('"', open + kNode.size());
  if (close == std::string_view::npos || close + 1 >= series.size()) return std::string(series);
  if (series[close + 1] == '}') {
    return std::string(series.substr(0, open)) + std::string(series.substr(close + 2));
  }
  return std::string(series.substr(0, open + 1)) + std::string(series.substr(close + 2));
}

// The value of one series ("name" or "name{labels}") in a Prometheus text
// page, matched with or without a leading node="..." label; NaN when absent.
inline double MetricIn(const std::string& page, std::string_view series) {
  for (size_t pos = 0; pos < page.size();) {
    size_t eol = page.find('\n', pos);
    if (eol == std::string::npos) eol = page.size();
    std::string_view line(page.data() + pos, eol - pos);
    size_t space = line.rfind(' ');
    if (!line.starts_with('#') && space != std::string_view::npos) {
      std::string_view name = line.substr(0, space);
      if (name == series || WithoutNodeLabel(name) == series) {
        return std::strtod(std::string(line.substr(space + 1)).c_str(), nullptr);
      }
    }
    pos = eol + 1;
  }
  return std::nan("");
}

// `series` in GET /metrics of the admin server on `admin_port`; NaN when
// absent or when the server does not answer within 5 s.
inline double AdminMetric(int admin_port, std::string_view series) {
  auto reply = Http(admin_port, "GET", "/metrics");
  return reply ? MetricIn(reply->body, series) : std::nan("");
}

}  // namespace mooncake::testing
