#pragma once

#include <chrono>
#include <cstdint>

namespace mooncake {

using SteadyClock = std::chrono::steady_clock;
using Millis = std::chrono::milliseconds;

// Milliseconds since the Unix epoch; for values shown to people and peers.
inline int64_t WallMillis() {
  return std::chrono::duration_cast<Millis>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Nanoseconds of the steady clock, for deadlines kept in an atomic.
inline int64_t SteadyNanos() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(SteadyClock::now().time_since_epoch())
      .count();
}

}  // namespace mooncake
