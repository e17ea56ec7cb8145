#pragma once

// Routes about the process rather than the service it runs, the same on the
// master and the worker:
//
//   GET /livez    {"status":"ok","role":ROLE}: 200 while the process answers HTTP
//   GET /version  {"version","commit","build_type","gpu","rdma"} (common/version.h)
//
// Thread-safety: register before the server starts; the handlers are
// stateless.

#include <string>

#include "http/admin_server.h"

namespace mooncake {

void RegisterProcessRoutes(AdminServer& server, std::string role);

}  // namespace mooncake
