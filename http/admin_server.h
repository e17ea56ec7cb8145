#pragma once

// A small REST admin server for the master and the worker, over cpp-httplib
// (kept out of this header: route files see only HttpRequest/HttpResponse).
//
// Behaviour every route gets for free:
//  * Errors are JSON {"error": "<why>", "code": "<NAME>"} with a 4xx/5xx
//    status: unknown path 404 ROUTE_NOT_FOUND, known path with another method
//    405 METHOD_NOT_ALLOWED (with an Allow header), oversized body 413,
//    malformed HTTP 400, an exception escaping a handler 500 INTERNAL_ERROR;
//    before any parsing: request head over max_head_bytes 431
//    REQUEST_HEADER_FIELDS_TOO_LARGE, head not in within head_timeout 408
//    REQUEST_TIMEOUT, max_connections already admitted 503
//    SERVICE_UNAVAILABLE (each then closes the connection). When full, a
//    connection that has not sent a whole request yet is closed (503) to
//    admit a newcomer, so idle connections cannot lock out /livez or
//    /readyz (http/bounded_server.h).
//    Nothing a client sends can crash the process.
//  * A Range header is ignored: every answer is the whole body (never 206),
//    and says "Accept-Ranges: none".
//  * With a token configured, every mutating request (POST, PUT, PATCH,
//    DELETE) must carry `Authorization: Bearer <token>`, else 401
//    UNAUTHORIZED (before any body is read); reads (GET, HEAD) stay open so
//    monitoring needs no secret.
//  * Against cross-site requests from a browser (CSRF, DNS rebinding): a
//    mutating request with an Origin header that does not match its Host is
//    refused 403 FORBIDDEN_ORIGIN; without a token, one whose Host is not an
//    IP literal or localhost is refused 403 FORBIDDEN_HOST.
//  * Bounded connections, request heads and bodies, and deadlines for a
//    whole request and a whole response, so a slow or hostile client cannot
//    pin a thread, fds or memory for long (see AdminServerOptions); one
//    request per connection. Heads are read by one poll() thread, so only
//    whole requests take pool threads; a client that sends a head and then
//    trickles a body holds a thread until read_timeout (on a server without
//    a token: with one, an unauthorized body is never read).

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"

namespace mooncake {

struct HttpRequest {
  std::string method;  // "GET", "POST", ...; HEAD is routed as GET
  std::string path;    // percent-decoded
  // Values of the route pattern's {name} segments, percent-decoded.
  std::map<std::string, std::string> path_params;
  // Query parameters, percent-decoded; a repeated name keeps its first value.
  std::map<std::string, std::string> query;
  // Header names lower-cased.
  std::map<std::string, std::string> headers;
  std::string body;

  const std::string* Query(std::string_view name) const;
  const std::string* PathParam(std::string_view name) const;
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;

  // `json` must already be serialized JSON.
  static HttpResponse Json(int status, std::string json);
  static HttpResponse Text(int status, std::string text, std::string content_type);
  // The JSON error body every failure uses: {"error": message, "code": code}.
  static HttpResponse Error(int status, std::string_view code, std::string_view message);
  // An ErrorCode answered with HttpStatusFor(code) and the code's Mooncake name.
  static HttpResponse Error(ErrorCode code, std::string_view message);
};

using HttpHandler = std::function<HttpResponse(const HttpRequest&)>;

// The one ErrorCode -> HTTP status mapping of the admin API: *_NOT_FOUND 404;
// INVALID_KEY / INVALID_PARAMS 400; OBJECT_HAS_LEASE, OBJECT_REPLICA_BUSY,
// OBJECT_ALREADY_EXISTS, REPLICA_IS_NOT_READY and NOT_OWNER 409 (the
// request conflicts with the object's current state, retrying may work);
// NO_AVAILABLE_HANDLE 507; everything else 500.
int HttpStatusFor(ErrorCode code);

struct AdminServerOptions {
  // Bearer token required on mutating requests; empty disables the check.
  std::string token;
  // Admin requests carry at most a small JSON document.
  size_t max_body_bytes = 1 << 20;
  // The request line and headers must end (blank line) within this many
  // bytes, else 431: above httplib's own 8 KiB URI limit plus a few headers.
  size_t max_head_bytes = 16 << 10;
  // ... and within this of the connection's accept, else 408. Short, so a
  // client that sends its head slowly holds one of the few threads briefly;
  // real clients send a head in one packet.
  std::chrono::milliseconds head_timeout{2000};
  // The whole request, body included, must arrive within this of the
  // accept; the whole response must be taken within write_timeout.
  std::chrono::seconds read_timeout{5};
  std::chrono::seconds write_timeout{5};
  // Connections admitted at once (served, or waiting for a thread); one more
  // is answered 503 and closed at once. Each holds an fd and at most
  // max_head_bytes until its head arrives or head_timeout passes.
  size_t max_connections = 64;
  // Admin traffic is light: a few threads keep a scrape and a curl served
  // without competing with the data path for cores.
  size_t threads = 4;
};

// Thread-safety: Route() only before Start(). Start/Stop from the owning
// thread; port() from any thread. Handlers run concurrently on the server's
// pool threads and must be thread-safe themselves; the route table is
// immutable while serving, so dispatch takes no lock.
class AdminServer {
 public:
  explicit AdminServer(AdminServerOptions options = {});
  ~AdminServer();  // Stops if still running.
  AdminServer(const AdminServer&) = delete;
  AdminServer& operator=(const AdminServer&) = delete;

  // Registers `handler` for `method` and `pattern`. A pattern is a path whose
  // segments may be "{name}" (one non-empty segment) or, as the last segment,
  // "{name...}" (the rest of the path, slashes included: object keys may
  // contain '/', which a client sends as %2F). Earlier routes win.
  void Route(std::string method, std::string pattern, HttpHandler handler);

  // Binds host:port (0 picks a free port) and serves on a background thread.
  // Returns once the server accepts connections. kRpcFail if the address
  // cannot be bound, kInvalidParams if already started.
  Result<void> Start(const std::string& host, int port);
  // The bound port; 0 before Start.
  int port() const;
  // Stops accepting, finishes in-flight requests, joins the thread.
  // Idempotent.
  void Stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace mooncake
