#include "common/etcd_client.h"

#include <httplib.h>

#include <array>
#include <charconv>
#include <condition_variable>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>
#include <utility>

#include "common/clock.h"
#include "common/log.h"

namespace mooncake {
namespace etcd_json {
namespace {

using nlohmann::json;

constexpr std::string_view kAlphabet =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

int Base64Value(char c) {
  auto pos = kAlphabet.find(c);
  return pos == std::string_view::npos ? -1 : static_cast<int>(pos);
}

// The gateway writes int64 as a JSON string; accept a number too.
int64_t Int64Field(const json& object, const char* name) {
  auto it = object.find(name);
  if (it == object.end()) return 0;
  if (it->is_number_integer()) return it->get<int64_t>();
  if (!it->is_string()) return 0;
  const std::string& text = it->get_ref<const std::string&>();
  int64_t value = 0;
  std::from_chars(text.data(), text.data() + text.size(), value);
  return value;
}

Result<json> ParseBody(const std::string& body) {
  json parsed = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded() || !parsed.is_object()) return Err(ErrorCode::kInternalError);
  return parsed;
}

Result<EtcdKeyValue> KeyValueFrom(const json& kv) {
  EtcdKeyValue out;
  if (!kv.is_object()) return Err(ErrorCode::kInternalError);
  auto key = Base64Decode(kv.value("key", ""));
  auto value = Base64Decode(kv.value("value", ""));
  if (!key || !value) return Err(ErrorCode::kInternalError);
  out.key = std::move(*key);
  out.value = std::move(*value);
  out.create_revision = Int64Field(kv, "create_revision");
  out.mod_revision = Int64Field(kv, "mod_revision");
  out.lease = Int64Field(kv, "lease");
  return out;
}

// The first kv of a range response object (or nullopt when it has none).
Result<std::optional<EtcdKeyValue>> FirstKeyValue(const json& range) {
  auto kvs = range.find("kvs");
  if (kvs == range.end() || !kvs->is_array() || kvs->empty()) return std::nullopt;
  auto kv = KeyValueFrom(kvs->front());
  if (!kv) return Err(kv.error());
  return std::optional<EtcdKeyValue>(std::move(*kv));
}

}  // namespace

std::string Base64Encode(std::string_view bytes) {
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 3 <= bytes.size(); i += 3) {
    uint32_t n = (static_cast<uint8_t>(bytes[i]) << 16) |
                 (static_cast<uint8_t>(bytes[i + 1]) << 8) | static_cast<uint8_t>(bytes[i + 2]);
    out += kAlphabet[(n >> 18) & 63];
    out += kAlphabet[(n >> 12) & 63];
    out += kAlphabet[(n >> 6) & 63];
    out += kAlphabet[n & 63];
  }
  size_t rest = bytes.size() - i;
  if (rest > 0) {
    uint32_t n = static_cast<uint8_t>(bytes[i]) << 16;
    if (rest == 2) n |= static_cast<uint8_t>(bytes[i + 1]) << 8;
    out += kAlphabet[(n >> 18) & 63];
    out += kAlphabet[(n >> 12) & 63];
    out += rest == 2 ? kAlphabet[(n >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

Result<std::string> Base64Decode(std::string_view text) {
  if (text.size() % 4 != 0) return Err(ErrorCode::kInvalidParams);
  std::string out;
  out.reserve(text.size() / 4 * 3);
  for (size_t i = 0; i < text.size(); i += 4) {
    const bool last = i + 4 == text.size();
    int pad = 0;
    std::array<int, 4> v{};
    for (int j = 0; j < 4; ++j) {
      char c = text[i + j];
      if (c == '=' && last && j >= 2) {
        v[j] = 0;
        ++pad;
        continue;
      }
      // Data after padding inside the last quantum is malformed.
      if (pad > 0) return Err(ErrorCode::kInvalidParams);
      v[j] = Base64Value(c);
      if (v[j] < 0) return Err(ErrorCode::kInvalidParams);
    }
    uint32_t n = (v[0] << 18) | (v[1] << 12) | (v[2] << 6) | v[3];
    out += static_cast<char>((n >> 16) & 0xff);
    if (pad < 2) out += static_cast<char>((n >> 8) & 0xff);
    if (pad < 1) out += static_cast<char>(n & 0xff);
  }
  return out;
}

std::string PrefixRangeEnd(std::string_view prefix) {
  std::string end(prefix);
  while (!end.empty()) {
    auto last = static_cast<unsigned char>(end.back());
    if (last < 0xff) {
      end.back() = static_cast<char>(last + 1);
      return end;
    }
    end.pop_back();
  }
  // Every byte was 0xff (or the prefix was empty): range to the end of the
  // key space.
  return std::string(1, '\0');
}

std::string GrantRequest(int64_t ttl_s) {
  return json{{"TTL", std::to_string(ttl_s)}, {"ID", "0"}}.dump();
}

std::string LeaseIdRequest(int64_t lease) { return json{{"ID", std::to_string(lease)}}.dump(); }

std::string RangeRequest(const std::string& key) { return json{{"key", Base64Encode(key)}}.dump(); }

std::string PutRequest(const std::string& key, const std::string& value, int64_t lease) {
  json body{{"key", Base64Encode(key)}, {"value", Base64Encode(value)}};
  if (lease != 0) body["lease"] = std::to_string(lease);
  return body.dump();
}

std::string CreateIfAbsentRequest(const std::string& key, const std::string& value, int64_t lease) {
  // create_revision == 0 holds exactly when the key does not exist.
  json compare{{"key", Base64Encode(key)},
               {"result", "EQUAL"},
               {"target", "CREATE"},
               {"create_revision", "0"}};
  json put = json::parse(PutRequest(key, value, lease));
  json body{{"compare", json::array({compare})},
            {"success", json::array({json{{"request_put", put}}})},
            {"failure", json::array({json{{"request_range", json{{"key", Base64Encode(key)}}}}})}};
  return body.dump();
}

std::string DeleteIfLeaseRequest(const std::string& key, int64_t lease) {
  json compare{{"key", Base64Encode(key)},
               {"result", "EQUAL"},
               {"target", "LEASE"},
               {"lease", std::to_string(lease)}};
  json body{
      {"compare", json::array({compare})},
      {"success", json::array({json{{"request_delete_range", json{{"key", Base64Encode(key)}}}}})}};
  return body.dump();
}

Result<int64_t> ParseGrantResponse(const std::string& body, int64_t* ttl_s) {
  auto parsed = ParseBody(body);
  if (!parsed) return Err(parsed.error());
  int64_t id = Int64Field(*parsed, "ID");
  if (id == 0) return Err(ErrorCode::kInternalError);
  if (ttl_s) *ttl_s = Int64Field(*parsed, "TTL");
  return id;
}

Result<int64_t> ParseKeepAliveResponse(const std::string& body) {
  // A streamed call: one {"result": {...}} object per line; we sent one
  // request, so the first result is ours.
  auto parsed = ParseBody(body.substr(0, body.find('\n')));
  if (!parsed) return Err(parsed.error());
  auto result = parsed->find("result");
  if (result == parsed->end() || !result->is_object()) return Err(ErrorCode::kInternalError);
  return Int64Field(*result, "TTL");
}

Result<std::optional<EtcdKeyValue>> ParseRangeResponse(const std::string& body) {
  auto parsed = ParseBody(body);
  if (!parsed) return Err(parsed.error());
  return FirstKeyValue(*parsed);
}

Result<bool> ParseTxnSucceeded(const std::string& body) {
  auto parsed = ParseBody(body);
  if (!parsed) return Err(parsed.error());
  return parsed->value("succeeded", false);
}

Result<EtcdCreateOutcome> ParseCreateIfAbsentResponse(const std::string& body) {
  auto parsed = ParseBody(body);
  if (!parsed) return Err(parsed.error());
  EtcdCreateOutcome out;
  out.created = parsed->value("succeeded", false);
  if (out.created) return out;
  auto responses = parsed->find("responses");
  if (responses == parsed->end() || !responses->is_array() || responses->empty()) return out;
  auto range = responses->front().find("response_range");
  if (range == responses->front().end()) return out;
  auto existing = FirstKeyValue(*range);
  if (!existing) return Err(existing.error());
  out.existing = std::move(*existing);
  return out;
}

}  // namespace etcd_json

Result<std::vector<std::string>> ParseEtcdEndpoints(std::string_view text) {
  std::vector<std::string> out;
  for (;;) {
    size_t comma = text.find(',');
    std::string_view entry = text.substr(0, comma);
    text = comma == std::string_view::npos ? std::string_view{} : text.substr(comma + 1);
    while (!entry.empty() && entry.front() == ' ') entry.remove_prefix(1);
    while (!entry.empty() && entry.back() == ' ') entry.remove_suffix(1);
    if (entry.starts_with("http://")) entry.remove_prefix(7);
    size_t colon = entry.rfind(':');
    if (entry.empty() || colon == std::string_view::npos || colon == 0 ||
        entry.find('/') != std::string_view::npos) {
      return Err(ErrorCode::kInvalidParams);
    }
    int port = 0;
    auto [end, ec] = std::from_chars(entry.data() + colon + 1, entry.data() + entry.size(), port);
    if (ec != std::errc() || end != entry.data() + entry.size() || port <= 0 || port > 65535) {
      return Err(ErrorCode::kInvalidParams);
    }
    out.push_back("http://" + std::string(entry));
    if (comma == std::string_view::npos) break;
  }
  return out;
}

std::string MasterLeaderKey(std::string_view cluster_name) {
  return "/mooncake/" + std::string(cluster_name) + "/leader";
}

namespace {

// The largest reply read. Every call here reads or writes one key, and etcd
// takes requests of at most 1.5 MiB by default (--max-request-bytes), so the
// largest legitimate reply (one such key, base64 in JSON) is near 2 MiB; the
// leader key itself is a HOST:PORT, under 1 KiB. httplib alone would read a
// body of any size into memory.
constexpr size_t kMaxReplyBytes = size_t{4} << 20;

// Ends an exchange at `deadline` whatever the peer does (a reply trickled a
// byte at a time passes every per-recv timeout): past it, it shuts the
// client's socket down until Finish(). Client::stop() is httplib's
// thread-safe way to do that; it is repeated because a stop() that comes
// while the client is still connecting finds no socket to shut.
class ExchangeDeadline {
 public:
  ExchangeDeadline(httplib::Client& http, SteadyClock::time_point deadline)
      : thread_([this, &http, deadline] {
          std::unique_lock lock(mu_);
          if (cv_.wait_until(lock, deadline, [this] { return done_; })) return;
          fired_ = true;
          do {
            http.stop();
          } while (!cv_.wait_for(lock, Millis(10), [this] { return done_; }));
        }) {}
  ~ExchangeDeadline() { Finish(); }
  ExchangeDeadline(const ExchangeDeadline&) = delete;
  ExchangeDeadline& operator=(const ExchangeDeadline&) = delete;

  // Ends the watch; whether the deadline passed first.
  bool Finish() {
    {
      std::lock_guard lock(mu_);
      done_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
    return fired_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;   // guarded by mu_
  bool fired_ = false;  // guarded by mu_; read after the join
  std::thread thread_;  // last: it uses the members above
};

// What an etcd error reply says: the gateway's {"error","message","code"}
// message, else the start of the body.
std::string EtcdMessage(const std::string& body) {
  auto parsed = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_object()) {
    for (const char* field : {"message", "error"}) {
      auto it = parsed.find(field);
      if (it != parsed.end() && it->is_string() && !it->get_ref<const std::string&>().empty()) {
        return it->get<std::string>();
      }
    }
  }
  return body.substr(0, 200);
}

}  // namespace

struct EtcdClient::Impl {
  std::vector<std::string> endpoints;
  int timeout_ms = 1000;
  std::mutex mu;
  // The endpoint that answered last; guarded by mu.
  size_t current = 0;
  // Why the last call failed, for logs (last_error()); guarded by mu.
  std::string last_error;
  // Per path, the refusal last logged at WARN, so that a call refused the
  // same way four times a second (a standby's campaign) logs it once, and
  // again when the answer changes; guarded by mu.
  std::map<std::string, std::string> warned;
};

EtcdClient::EtcdClient(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
EtcdClient::~EtcdClient() = default;

Result<std::unique_ptr<EtcdClient>> EtcdClient::Create(const std::vector<std::string>& endpoints,
                                                       int timeout_ms) {
  if (endpoints.empty() || timeout_ms <= 0) return Err(ErrorCode::kInvalidParams);
  auto impl = std::make_unique<Impl>();
  for (const auto& endpoint : endpoints) {
    auto parsed = ParseEtcdEndpoints(endpoint);
    if (!parsed) return Err(parsed.error());
    impl->endpoints.insert(impl->endpoints.end(), parsed->begin(), parsed->end());
  }
  impl->timeout_ms = timeout_ms;
  return std::unique_ptr<EtcdClient>(new EtcdClient(std::move(impl)));
}

Result<std::string> EtcdClient::Post(const std::string& path, const std::string& body) {
  std::lock_guard lock(impl_->mu);
  const size_t n = impl_->endpoints.size();
  for (size_t tried = 0; tried < n; ++tried) {
    size_t index = (impl_->current + tried) % n;
    const std::string& endpoint = impl_->endpoints[index];
    // A fresh connection per call: calls are rare, and a connection to an
    // etcd member that restarted must not linger.
    httplib::Client http(endpoint);
    const time_t sec = impl_->timeout_ms / 1000;
    const time_t usec = (impl_->timeout_ms % 1000) * 1000;
    http.set_connection_timeout(sec, usec);
    http.set_read_timeout(sec, usec);
    http.set_write_timeout(sec, usec);

    httplib::Request request;
    request.method = "POST";
    request.path = path;
    request.body = body;
    request.set_header("Content-Type", "application/json");
    // The reply goes into `reply_body`, never past kMaxReplyBytes: a
    // declared length over it is refused before the body is read.
    std::string reply_body;
    bool too_large = false;
    int status = 0;  // the reply's status, once its header has arrived
    request.response_handler = [&](const httplib::Response& response) {
      status = response.status;
      if (response.has_header("Content-Length") &&
          response.get_header_value<uint64_t>("Content-Length") > kMaxReplyBytes) {
        too_large = true;
        return false;
      }
      return true;
    };
    request.content_receiver = [&](const char* data, size_t size, uint64_t, uint64_t) {
      if (size > kMaxReplyBytes - reply_body.size()) {
        too_large = true;
        return false;
      }
      reply_body.append(data, size);
      return true;
    };
    // The whole exchange with this endpoint, connecting included, ends
    // within the timeout; a call ends within it per endpoint tried.
    ExchangeDeadline deadline(http,
                              SteadyClock::now() + Millis(static_cast<int64_t>(impl_->timeout_ms)));
    auto reply = http.send(request);
    const bool timed_out = deadline.Finish();

    if (too_large) {
      // An answer, but not etcd's (a proxy or another service on the port).
      impl_->current = index;
      impl_->last_error =
          "reply over " + std::to_string(kMaxReplyBytes) + " bytes from " + endpoint;
      MC_LOG_WARN("etcd reply too large endpoint={} path={} limit_bytes={}", endpoint, path,
                  kMaxReplyBytes);
      return Err(ErrorCode::kInternalError);
    }
    // etcd's gateway sends every error reply chunked and ends it with an
    // HTTP trailer (Grpc-Trailer-Content-Type), which cpp-httplib 0.11.4
    // cannot read: send() fails with Error::Read after the status line,
    // the headers and the body have arrived. That status is etcd's answer
    // all the same (a 404 is "no such lease", a 429 "out of space"); only
    // a success needs the reply read whole, and etcd sends those without
    // trailers.
    int answered = 0;
    if (reply) {
      answered = reply->status;
    } else if (!timed_out && reply.error() == httplib::Error::Read && status != 0 &&
               status != 200) {
      answered = status;
    }
    if (answered == 0) {
      impl_->last_error =
          timed_out
              ? "no reply within " + std::to_string(impl_->timeout_ms) + " ms from " + endpoint
              : "cannot reach " + endpoint + " (" + httplib::to_string(reply.error()) + ")";
      MC_LOG_DEBUG("etcd unreachable endpoint={} path={} error=\"{}\"", endpoint, path,
                   impl_->last_error);
      continue;
    }
    if (answered == 200) {
      impl_->current = index;
      impl_->warned.erase(path);
      return reply_body;
    }
    const std::string message = EtcdMessage(reply_body);
    impl_->last_error =
        "etcd " + endpoint + " answered HTTP " + std::to_string(answered) + ": " + message;
    // Said once per path until the answer changes: a standby campaigns
    // four times a second. A 404 (a lease that expired, revoked again) is
    // an answer callers expect, not news.
    std::string& warned = impl_->warned[path];
    const std::string refusal = std::to_string(answered) + " " + message;
    if (answered != 404 && warned != refusal) {
      MC_LOG_WARN("etcd refused endpoint={} path={} status={} message=\"{}\"", endpoint, path,
                  answered, message);
      warned = refusal;
    } else {
      MC_LOG_DEBUG("etcd refused endpoint={} path={} status={} message=\"{}\"", endpoint, path,
                   answered, message);
    }
    // 503 and 504: this member cannot serve now (a learner, no leader, a
    // leader change, a request timed out inside etcd); another may.
    if (answered == 503 || answered == 504) continue;
    impl_->current = index;
    // A lease or key etcd does not know is an answer, not an outage.
    return Err(answered == 404 ? ErrorCode::kObjectNotFound : ErrorCode::kInternalError);
  }
  return Err(ErrorCode::kRpcFail);
}

std::string EtcdClient::last_error() const {
  std::lock_guard lock(impl_->mu);
  return impl_->last_error;
}

Result<int64_t> EtcdClient::Grant(int64_t ttl_s, int64_t* granted_ttl_s) {
  auto body = Post("/v3/lease/grant", etcd_json::GrantRequest(ttl_s));
  if (!body) return Err(body.error());
  return etcd_json::ParseGrantResponse(*body, granted_ttl_s);
}

Result<int64_t> EtcdClient::KeepAlive(int64_t lease) {
  auto body = Post("/v3/lease/keepalive", etcd_json::LeaseIdRequest(lease));
  if (!body) return Err(body.error());
  auto ttl = etcd_json::ParseKeepAliveResponse(*body);
  if (!ttl) return Err(ttl.error());
  if (*ttl <= 0) return Err(ErrorCode::kObjectNotFound);
  return *ttl;
}

Result<void> EtcdClient::Revoke(int64_t lease) {
  auto body = Post("/v3/lease/revoke", etcd_json::LeaseIdRequest(lease));
  if (!body && body.error() == ErrorCode::kObjectNotFound) return {};  // gone already
  if (!body) return Err(body.error());
  return {};
}

Result<std::optional<EtcdKeyValue>> EtcdClient::Get(const std::string& key) {
  auto body = Post("/v3/kv/range", etcd_json::RangeRequest(key));
  if (!body) return Err(body.error());
  return etcd_json::ParseRangeResponse(*body);
}

Result<void> EtcdClient::Put(const std::string& key, const std::string& value, int64_t lease) {
  auto body = Post("/v3/kv/put", etcd_json::PutRequest(key, value, lease));
  if (!body) return Err(body.error());
  return {};
}

Result<EtcdCreateOutcome> EtcdClient::CreateIfAbsent(const std::string& key,
                                                     const std::string& value, int64_t lease) {
  auto body = Post("/v3/kv/txn", etcd_json::CreateIfAbsentRequest(key, value, lease));
  if (!body) return Err(body.error());
  return etcd_json::ParseCreateIfAbsentResponse(*body);
}

Result<bool> EtcdClient::DeleteIfLease(const std::string& key, int64_t lease) {
  auto body = Post("/v3/kv/txn", etcd_json::DeleteIfLeaseRequest(key, lease));
  if (!body) return Err(body.error());
  return etcd_json::ParseTxnSucceeded(*body);
}

}  // namespace mooncake
