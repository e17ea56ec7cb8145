#pragma once

// A one-shot HTTP/1.1 client for the admin API (tests, tools, the CLI), so
// callers need not include cpp-httplib.
//
// Thread-safety: reentrant; every call opens its own connection.

#include <chrono>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"

namespace mooncake {

struct HttpReply {
  int status = 0;
  std::string body;
  // Header names lower-cased; a repeated header keeps its first value.
  std::map<std::string, std::string> headers;
};

// Sends `method` `target` (path plus optional "?query", already
// percent-encoded) to host:port. kRpcFail when no reply arrives (refused,
// reset, timeout); any HTTP status, 4xx/5xx included, is a successful call.
Result<HttpReply> HttpCall(const std::string& host, int port, std::string_view method,
                           const std::string& target, const std::string& body = {},
                           const std::vector<std::pair<std::string, std::string>>& headers = {},
                           std::chrono::milliseconds timeout = std::chrono::seconds(5));

// Percent-encodes every byte outside RFC 3986's unreserved set, '/' included,
// so any object key fits in one path segment or query value.
std::string UrlEncode(std::string_view text);

}  // namespace mooncake
