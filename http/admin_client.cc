#include "http/admin_client.h"

#include <httplib.h>

#include <cctype>

namespace mooncake {

Result<HttpReply> HttpCall(const std::string& host, int port, std::string_view method,
                           const std::string& target, const std::string& body,
                           const std::vector<std::pair<std::string, std::string>>& headers,
                           std::chrono::milliseconds timeout) {
  httplib::Client client(host, port);
  client.set_connection_timeout(timeout);
  client.set_read_timeout(timeout);
  client.set_write_timeout(timeout);
  // `target` arrives encoded; letting httplib encode it again would mangle it.
  client.set_url_encode(false);
  httplib::Request req;
  req.method = std::string(method);
  req.path = target;
  req.body = body;
  for (const auto& [name, value] : headers) req.set_header(name, value);
  if (!body.empty() && !req.has_header("Content-Type")) {
    req.set_header("Content-Type", "application/json");
  }
  httplib::Response res;
  httplib::Error error = httplib::Error::Success;
  if (!client.send(req, res, error)) return Err(ErrorCode::kRpcFail);
  HttpReply reply;
  reply.status = res.status;
  reply.body = std::move(res.body);
  for (const auto& [name, value] : res.headers) {
    std::string lower = name;
    for (auto& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    reply.headers.try_emplace(std::move(lower), value);
  }
  return reply;
}

std::string UrlEncode(std::string_view text) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(text.size());
  for (unsigned char c : text) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 15]);
    }
  }
  return out;
}

}  // namespace mooncake
