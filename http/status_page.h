#pragma once

// The operator's status page, served at GET / on both admin servers
// (docs/status-page.md). One self-contained HTML document compiled into the
// binary: inline style and script, no external asset, nothing read at run
// time. It refreshes itself every few seconds from the admin server's own
// JSON endpoints:
//
//   master: /version, /nodes, /stats (the master's requests and latency),
//           /cluster/stats (each alive worker's counters, fetched by the
//           master over the worker's Stats RPC)
//   worker: /version, /readyz, /stats
//
// Every number the page shows is also an attribute of its element
// (data-stat/data-value, data-node, data-tier, data-used, data-capacity,
// ...), and <body data-loaded=N> counts successful refreshes, so a headless
// browser (tests/integration/status_page_test.cc) can read what an operator
// sees.
//
// Thread-safety: the handler it registers is stateless.

#include <string>
#include <string_view>

#include "http/admin_server.h"

namespace mooncake {

// The page for `role` ("master" or "worker").
std::string StatusPageHtml(std::string_view role);

// Registers GET / answering StatusPageHtml(role) as text/html, with a
// Content-Security-Policy that lets the page load nothing but fetches to its
// own origin (so it works, and stays private, on a network without internet).
void RegisterStatusPage(AdminServer& server, std::string_view role);

}  // namespace mooncake
