#pragma once

// JSON helpers for the admin server (http/admin_server.cc) and the route
// files beside the services they expose (master/admin_routes.cc,
// worker/admin_routes.cc). Included by .cc files only: nlohmann/json is
// heavy, so no header includes this one.

#include <nlohmann/json.hpp>
#include <string>

#include "http/admin_server.h"

namespace mooncake {

// Serializes `value`. Keys are arbitrary bytes, not necessarily UTF-8:
// invalid sequences become U+FFFD instead of throwing.
inline std::string DumpJson(const nlohmann::json& value) {
  return value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

inline HttpResponse JsonResponse(const nlohmann::json& value, int status = 200) {
  return HttpResponse::Json(status, DumpJson(value));
}

}  // namespace mooncake
