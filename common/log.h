#pragma once

// Logging goes through spdlog with key=value pairs in the message, e.g.
//   MC_LOG_INFO("demoted key={} from={} to={}", key, from, to);
// The level is set once per process from its config (`--log-level`).

#include <spdlog/spdlog.h>

#include <string_view>

#define MC_LOG_DEBUG(...) SPDLOG_DEBUG(__VA_ARGS__)
#define MC_LOG_INFO(...) SPDLOG_INFO(__VA_ARGS__)
#define MC_LOG_WARN(...) SPDLOG_WARN(__VA_ARGS__)
#define MC_LOG_ERROR(...) SPDLOG_ERROR(__VA_ARGS__)

namespace mooncake {

// Sets the process-wide level from "debug", "info", "warn" or "error"; returns
// false for anything else.
bool SetLogLevel(std::string_view level);

}  // namespace mooncake
