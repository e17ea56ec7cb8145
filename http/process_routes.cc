#include "http/process_routes.h"

#include "common/version.h"
#include "http/json_util.h"

namespace mooncake {

void RegisterProcessRoutes(AdminServer& server, std::string role) {
  server.Route("GET", "/livez", [role = std::move(role)](const HttpRequest&) {
    return JsonResponse({{"status", "ok"}, {"role", role}});
  });
  server.Route("GET", "/version", [](const HttpRequest&) {
    const BuildInfo& info = GetBuildInfo();
    return JsonResponse({{"version", info.version},
                         {"commit", info.commit},
                         {"build_type", info.build_type},
                         {"gpu", info.gpu},
                         {"rdma", info.rdma}});
  });
}

}  // namespace mooncake
