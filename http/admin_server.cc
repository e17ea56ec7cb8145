#include "http/admin_server.h"

#include <arpa/inet.h>
#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <exception>
#include <optional>
#include <string>
#include <thread>

#include "common/log.h"
#include "http/bounded_server.h"
#include "http/json_util.h"

namespace mooncake {
namespace {

// Matches every path, newlines included. libstdc++'s regex recurses once per
// character, but httplib caps the request URI at 8 KiB, far below the depth
// that would exhaust a thread's stack; all real routing happens in Dispatch.
constexpr const char* kAnyPath = R"([\s\S]*)";

// Connections the kernel may hold before the accept loop takes them; the
// loop admits or refuses each at once, so this only absorbs bursts.
constexpr int kListenBacklog = 128;

// Longest a started server may take to enter its accept loop.
constexpr auto kStartTimeout = std::chrono::seconds(5);

bool IsMutating(std::string_view method) {
  return method == "POST" || method == "PUT" || method == "PATCH" || method == "DELETE";
}

std::string Lower(std::string_view text) {
  std::string out(text);
  for (auto& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// Compares in time independent of where the strings differ, so response times
// do not leak how much of a guessed token was right.
bool ConstantTimeEquals(std::string_view a, std::string_view b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < a.size(); ++i) {
    diff |= static_cast<unsigned char>(a[i] ^ (i < b.size() ? b[i] : 0));
  }
  return diff == 0;
}

// Whether `host` (a Host header: name or address, optional ":port") names
// this machine by address or as localhost, not by a DNS name that a hostile
// page could point at it (DNS rebinding).
bool IsAddressOrLocalhost(std::string_view host) {
  if (host.starts_with('[')) return host.find(']') != std::string_view::npos;  // IPv6 literal
  if (size_t colon = host.rfind(':'); colon != std::string_view::npos) host = host.substr(0, colon);
  if (Lower(host) == "localhost") return true;
  in_addr v4{};
  return inet_pton(AF_INET, std::string(host).c_str(), &v4) == 1;
}

// The authority ("host[:port]") of an Origin header ("scheme://host[:port]");
// empty for "null" or anything else without a scheme.
std::string_view OriginAuthority(std::string_view origin) {
  size_t scheme_end = origin.find("://");
  if (scheme_end == std::string_view::npos) return {};
  origin.remove_prefix(scheme_end + 3);
  return origin.substr(0, origin.find('/'));
}

// Whether the request has no Content-Length, or exactly one of only
// decimal digits.
bool ValidContentLength(const httplib::Request& req) {
  const size_t count = req.get_header_value_count("Content-Length");
  if (count == 0) return true;
  if (count > 1) return false;
  const std::string value = req.get_header_value("Content-Length");
  return !value.empty() && value.size() <= 19 &&
         std::all_of(value.begin(), value.end(),
                     [](unsigned char c) { return c >= '0' && c <= '9'; });
}

// Code names for failures httplib detects before any route runs.
std::string_view CodeForStatus(int status) {
  switch (status) {
    case 400:
      return "BAD_REQUEST";
    case 404:
      return "ROUTE_NOT_FOUND";
    case 411:
      return "LENGTH_REQUIRED";
    case 413:
      return "PAYLOAD_TOO_LARGE";
    case 414:
      return "URI_TOO_LONG";
    case 416:
      return "RANGE_NOT_SATISFIABLE";
    default:
      return status >= 500 ? "INTERNAL_ERROR" : "BAD_REQUEST";
  }
}

std::string ReasonFor(int status) {
  switch (status) {
    case 400:
      return "malformed HTTP request";
    case 404:
      return "no such path";
    case 411:
      return "chunked request bodies are not accepted; send the body with a Content-Length";
    case 413:
      return "request body too large";
    case 414:
      return "request URI too long";
    default:
      return "request failed with HTTP status " + std::to_string(status);
  }
}

struct Segment {
  enum class Kind { kLiteral, kParam, kRest } kind;
  std::string text;  // the literal, or the parameter's name
};

std::vector<Segment> ParsePattern(std::string_view pattern) {
  if (pattern.starts_with('/')) pattern.remove_prefix(1);
  std::vector<Segment> out;
  size_t pos = 0;
  while (true) {
    size_t end = pattern.find('/', pos);
    std::string_view seg = pattern.substr(pos, end == std::string_view::npos ? end : end - pos);
    if (seg.size() > 5 && seg.starts_with('{') && seg.ends_with("...}")) {
      out.push_back({Segment::Kind::kRest, std::string(seg.substr(1, seg.size() - 5))});
    } else if (seg.size() > 2 && seg.starts_with('{') && seg.ends_with('}')) {
      out.push_back({Segment::Kind::kParam, std::string(seg.substr(1, seg.size() - 2))});
    } else {
      out.push_back({Segment::Kind::kLiteral, std::string(seg)});
    }
    if (end == std::string_view::npos) break;
    pos = end + 1;
  }
  return out;
}

// True if `path` matches; fills `params` with the captured segments.
bool MatchPath(const std::vector<Segment>& pattern, std::string_view path,
               std::map<std::string, std::string>* params) {
  if (!path.starts_with('/')) return false;
  path.remove_prefix(1);
  size_t pos = 0;
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pos > path.size()) return false;  // the path ran out of segments
    const Segment& seg = pattern[i];
    if (seg.kind == Segment::Kind::kRest) {
      if (pos == path.size()) return false;
      (*params)[seg.text] = std::string(path.substr(pos));
      return true;
    }
    size_t end = std::min(path.find('/', pos), path.size());
    std::string_view value = path.substr(pos, end - pos);
    if (seg.kind == Segment::Kind::kLiteral ? value != seg.text : value.empty()) return false;
    if (seg.kind == Segment::Kind::kParam) (*params)[seg.text] = std::string(value);
    pos = end + 1;
  }
  return pos == path.size() + 1;  // every path segment consumed
}

// The first query parameter named more than once, if any. Routes read one
// value a name; with `?force=true&force=false` which one wins would be a
// guess about the operator's intent, so such a request is refused.
std::optional<std::string> RepeatedQueryName(const httplib::Request& req) {
  for (auto it = req.params.begin(); it != req.params.end(); ++it) {
    if (req.params.count(it->first) > 1) return it->first;
  }
  return std::nullopt;
}

HttpRequest Translate(const httplib::Request& req) {
  HttpRequest out;
  out.method = req.method == "HEAD" ? "GET" : req.method;
  out.path = req.path;
  for (const auto& [name, value] : req.params) out.query.try_emplace(name, value);
  for (const auto& [name, value] : req.headers) out.headers.try_emplace(Lower(name), value);
  out.body = req.body;
  return out;
}

void Apply(const HttpResponse& from, httplib::Response& to) {
  to.status = from.status;
  // BoundedServer drops a request's Range header (bounded_server.cc); this
  // tells clients not to send one, and keeps httplib from advertising
  // "Accept-Ranges: bytes" (it adds that only when the header is absent).
  to.set_header("Accept-Ranges", "none");
  for (const auto& [name, value] : from.headers) to.set_header(name, value);
  to.set_content(from.body, from.content_type);
}

}  // namespace

const std::string* HttpRequest::Query(std::string_view name) const {
  auto it = query.find(std::string(name));
  return it == query.end() ? nullptr : &it->second;
}

const std::string* HttpRequest::PathParam(std::string_view name) const {
  auto it = path_params.find(std::string(name));
  return it == path_params.end() ? nullptr : &it->second;
}

HttpResponse HttpResponse::Json(int status, std::string json) {
  HttpResponse out;
  out.status = status;
  out.body = std::move(json);
  return out;
}

HttpResponse HttpResponse::Text(int status, std::string text, std::string content_type) {
  HttpResponse out;
  out.status = status;
  out.body = std::move(text);
  out.content_type = std::move(content_type);
  return out;
}

HttpResponse HttpResponse::Error(int status, std::string_view code, std::string_view message) {
  return JsonResponse({{"error", message}, {"code", code}}, status);
}

HttpResponse HttpResponse::Error(ErrorCode code, std::string_view message) {
  return Error(HttpStatusFor(code), ToString(code), message);
}

int HttpStatusFor(ErrorCode code) {
  switch (code) {
    case ErrorCode::kOk:
      return 200;
    case ErrorCode::kObjectNotFound:
    case ErrorCode::kTierNotFound:
    case ErrorCode::kNodeNotFound:
      return 404;
    case ErrorCode::kInvalidKey:
    case ErrorCode::kInvalidParams:
      return 400;
    case ErrorCode::kObjectHasLease:
    case ErrorCode::kObjectReplicaBusy:
    case ErrorCode::kObjectAlreadyExists:
    case ErrorCode::kReplicaIsNotReady:
    case ErrorCode::kNotOwner:
      return 409;
    case ErrorCode::kNoAvailableHandle:
      return 507;
    default:
      return 500;
  }
}

struct AdminServer::Impl {
  struct RouteEntry {
    std::string method;
    std::vector<Segment> pattern;
    HttpHandler handler;
  };

  explicit Impl(AdminServerOptions opts)
      : options(std::move(opts)),
        server(ConnectionLimits{.max_connections = std::max<size_t>(1, options.max_connections),
                                .max_head_bytes = options.max_head_bytes,
                                .head_timeout = options.head_timeout,
                                .request_timeout = options.read_timeout,
                                .write_timeout = options.write_timeout,
                                .threads = options.threads}) {}

  HttpResponse Handle(HttpRequest& req) const;
  bool Authorized(const HttpRequest& req) const;
  std::optional<HttpResponse> CrossSiteRefusal(const HttpRequest& req) const;
  void Configure();

  const AdminServerOptions options;
  std::vector<RouteEntry> routes;  // written only before Start
  BoundedServer server;
  std::thread thread;
  std::atomic<bool> listen_returned{false};
  std::atomic<int> port{0};
};

bool AdminServer::Impl::Authorized(const HttpRequest& req) const {
  if (options.token.empty() || !IsMutating(req.method)) return true;
  auto it = req.headers.find("authorization");
  constexpr std::string_view kScheme = "Bearer ";
  if (it == req.headers.end() || !it->second.starts_with(kScheme)) return false;
  return ConstantTimeEquals(std::string_view(it->second).substr(kScheme.size()), options.token);
}

// A browser on a host that reaches the admin port can be made to send a
// "simple" cross-site POST (no preflight) by any web page, and a page on a
// DNS name rebound to this address can send any request as same-origin.
// Mutating requests are refused (403) when they carry an Origin that is not
// this server's (browsers send Origin on every cross-origin POST, PUT,
// PATCH and DELETE); without a token they must also name the server by IP
// address or localhost in Host. The CLI, curl and scripts send no Origin.
std::optional<HttpResponse> AdminServer::Impl::CrossSiteRefusal(const HttpRequest& req) const {
  if (!IsMutating(req.method)) return std::nullopt;
  auto host = req.headers.find("host");
  auto origin = req.headers.find("origin");
  if (origin != req.headers.end() &&
      (host == req.headers.end() ||
       Lower(OriginAuthority(origin->second)) != Lower(host->second))) {
    return HttpResponse::Error(403, "FORBIDDEN_ORIGIN",
                               "cross-origin request refused: Origin " + origin->second +
                                   " is not this server; send mutating requests from a client "
                                   "that sends no Origin (mooncake-cli, curl)");
  }
  if (options.token.empty() && host != req.headers.end() && !IsAddressOrLocalhost(host->second)) {
    return HttpResponse::Error(
        403, "FORBIDDEN_HOST",
        "without an admin token, mutating requests must name this server by IP address or "
        "localhost (Host: " +
            host->second + "); use the address, or configure --admin-token");
  }
  return std::nullopt;
}

HttpResponse AdminServer::Impl::Handle(HttpRequest& req) const {
  std::vector<std::string> allowed;
  for (const auto& route : routes) {
    std::map<std::string, std::string> params;
    if (!MatchPath(route.pattern, req.path, &params)) continue;
    if (route.method != req.method) {
      allowed.push_back(route.method);
      continue;
    }
    if (auto refused = CrossSiteRefusal(req)) return *refused;
    if (!Authorized(req)) {
      auto out = HttpResponse::Error(401, "UNAUTHORIZED",
                                     "this request needs an Authorization: Bearer <token> header "
                                     "with the admin token");
      out.headers.emplace_back("WWW-Authenticate", "Bearer");
      return out;
    }
    req.path_params = std::move(params);
    return route.handler(req);
  }
  if (allowed.empty())
    return HttpResponse::Error(404, "ROUTE_NOT_FOUND", "no such path: " + req.path);
  // HEAD is served wherever GET is (routed as GET).
  if (std::find(allowed.begin(), allowed.end(), "GET") != allowed.end()) allowed.push_back("HEAD");
  std::string allow;
  for (const auto& m : allowed) allow += (allow.empty() ? "" : ", ") + m;
  auto out = HttpResponse::Error(405, "METHOD_NOT_ALLOWED",
                                 req.method + " is not allowed on " + req.path + "; use " + allow);
  out.headers.emplace_back("Allow", allow);
  return out;
}

void AdminServer::Impl::Configure() {
  // Connections, threads, the request head and the read and write deadlines
  // are BoundedServer's (set from `options` when Impl was built). It serves
  // one request per connection: a refused request's unread body (see the
  // pre-routing handler below) must never be parsed as a next request, and
  // admin traffic (scrapes, operators) gains nothing from keep-alive.
  server.set_payload_max_length(options.max_body_bytes);
  // httplib's default adds SO_REUSEPORT, which would let a second server
  // bind the same port and silently share its traffic; a busy port must
  // fail instead. SO_REUSEADDR alone still allows a quick restart.
  server.set_socket_options([](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });

  auto dispatch = [this](const httplib::Request& req, httplib::Response& res) {
    // The only place exceptions are caught: every handler is wrapped here, so
    // a bug answers 500 instead of tearing down a pool thread.
    try {
      if (auto repeated = RepeatedQueryName(req)) {
        Apply(HttpResponse::Error(
                  400, "INVALID_PARAMS",
                  "query parameter \"" + *repeated + "\" is given more than once; give it once"),
              res);
        return;
      }
      HttpRequest request = Translate(req);
      Apply(Handle(request), res);
    } catch (const std::exception& e) {
      MC_LOG_ERROR("admin handler failed method={} path={} error=\"{}\"", req.method, req.path,
                   e.what());
      Apply(HttpResponse::Error(500, "INTERNAL_ERROR", e.what()), res);
    } catch (...) {
      MC_LOG_ERROR("admin handler failed method={} path={}", req.method, req.path);
      Apply(HttpResponse::Error(500, "INTERNAL_ERROR", "unknown failure"), res);
    }
  };
  // httplib 0.11 holds the payload limit against a declared Content-Length
  // only: a chunked body, or a body-carrying request without a length (read
  // until the peer closes), is buffered whole before any route or token
  // check runs. Our routes take small JSON bodies, so a chunked request is
  // answered 411 before its body is read. A request with neither
  // Content-Length nor Transfer-Encoding has an empty body (RFC 7230
  // 3.3.3): it is routed here at once with that empty body (404, 405, 401 or
  // the route's answer, as any other request), never read until close. Both
  // close the connection, so unread bytes are never parsed as a next request.
  //
  // With a token configured, a mutating request without it is routed here
  // too, before its body is read (404, 405 or 401, as it would be after):
  // a client without the token cannot hold a thread by trickling a body.
  server.set_pre_routing_handler([this, dispatch](const httplib::Request& req,
                                                  httplib::Response& res) {
    if (req.has_header("Transfer-Encoding")) {
      Apply(HttpResponse::Error(411, CodeForStatus(411), ReasonFor(411)), res);
    } else if (!ValidContentLength(req)) {
      // httplib reads "abc" or "0x10" as 0 and would route the request with
      // an empty body; its real length is unknown, so nothing is read.
      Apply(HttpResponse::Error(400, "BAD_REQUEST",
                                "Content-Length must be a decimal number of bytes, given once"),
            res);
    } else if (IsMutating(req.method) && !req.has_header("Content-Length")) {
      dispatch(req, res);  // req.body is still empty
    } else if (IsMutating(req.method) && !options.token.empty() &&
               !Authorized(HttpRequest{.method = req.method,
                                       .headers = {{"authorization",
                                                    req.get_header_value("Authorization")}}})) {
      dispatch(req, res);  // req.body is still empty; answered 401 unless 404/405
    } else {
      return httplib::Server::HandlerResponse::Unhandled;
    }
    res.set_header("Connection", "close");
    return httplib::Server::HandlerResponse::Handled;
  });
  server.Get(kAnyPath, dispatch);
  server.Post(kAnyPath, dispatch);
  server.Put(kAnyPath, dispatch);
  server.Patch(kAnyPath, dispatch);
  server.Delete(kAnyPath, dispatch);
  server.Options(kAnyPath, dispatch);

  // Failures httplib answers itself (unparsable request, body too large,
  // unknown method) get the same JSON shape as ours.
  server.set_error_handler(httplib::Server::HandlerWithResponse([](const httplib::Request&,
                                                                   httplib::Response& res) {
    if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
    Apply(HttpResponse::Error(res.status, CodeForStatus(res.status), ReasonFor(res.status)), res);
    return httplib::Server::HandlerResponse::Handled;
  }));
  server.set_exception_handler(
      [](const httplib::Request&, httplib::Response& res, std::exception_ptr) {
        Apply(HttpResponse::Error(500, "INTERNAL_ERROR", "request failed"), res);
      });
}

AdminServer::AdminServer(AdminServerOptions options)
    : impl_(std::make_unique<Impl>(std::move(options))) {}

AdminServer::~AdminServer() { Stop(); }

void AdminServer::Route(std::string method, std::string pattern, HttpHandler handler) {
  impl_->routes.push_back({std::move(method), ParsePattern(pattern), std::move(handler)});
}

Result<void> AdminServer::Start(const std::string& host, int port) {
  if (impl_->thread.joinable() || port < 0 || port > 65535) return Err(ErrorCode::kInvalidParams);
  impl_->Configure();
  int bound = port == 0 ? impl_->server.bind_to_any_port(host)
                        : (impl_->server.bind_to_port(host, port) ? port : -1);
  if (bound <= 0) {
    MC_LOG_ERROR("admin server cannot bind host={} port={}", host, port);
    return Err(ErrorCode::kRpcFail);
  }
  impl_->port = bound;
  if (!impl_->server.SetListenBacklog(kListenBacklog)) {
    MC_LOG_WARN("admin server keeps httplib's listen backlog host={} port={}", host, bound);
  }
  impl_->thread = std::thread([impl = impl_.get()] {
    impl->server.listen_after_bind();
    impl->listen_returned = true;
  });
  // httplib 0.11 has no wait_until_ready: poll until the accept loop runs.
  auto deadline = std::chrono::steady_clock::now() + kStartTimeout;
  while (!impl_->server.is_running()) {
    if (impl_->listen_returned || std::chrono::steady_clock::now() > deadline) {
      MC_LOG_ERROR("admin server did not start host={} port={}", host, bound);
      Stop();
      return Err(ErrorCode::kRpcFail);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  MC_LOG_INFO("admin server listening host={} port={} auth={}", host, bound,
              impl_->options.token.empty() ? "off" : "bearer");
  return {};
}

int AdminServer::port() const { return impl_->port; }

void AdminServer::Stop() {
  if (!impl_->thread.joinable()) return;
  // stop() is a no-op until the accept loop runs, and must be called once:
  // httplib asserts on a second call while it shuts down.
  while (!impl_->server.is_running() && !impl_->listen_returned) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  if (!impl_->listen_returned) impl_->server.stop();
  impl_->thread.join();
}

}  // namespace mooncake
