#pragma once

// What the device tests (GPU, RDMA) share: they skip with the reason when no
// device is usable, and on a machine that should have one the environment
// turns those skips into failures, so a broken set-up never passes
// vacuously:
//   MOONCAKE_REQUIRE_GPU=1   GPU tests fail instead of skipping
//   MOONCAKE_REQUIRE_RDMA=1  RDMA tests fail instead of skipping
//   MOONCAKE_GPU_DEVICE=N    the HIP device to test (default 0)

#include <cstdlib>
#include <string>

#include "tiers/gpu_tier.h"

namespace mooncake::testing {

// True when the variable is set to anything but "" or "0".
inline bool EnvFlag(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' && std::string(value) != "0";
}

inline int TestDeviceIndex() {
  const char* value = std::getenv("MOONCAKE_GPU_DEVICE");
  return value != nullptr && *value != '\0' ? std::atoi(value) : 0;
}

inline bool HaveDevice() {
  auto count = GpuTier::DeviceCount();
  return count && *count > 0;
}

}  // namespace mooncake::testing

// In a test body or SetUp: skips the test, printing why, when no GPU is
// usable; fails it instead under MOONCAKE_REQUIRE_GPU. A macro because
// GTEST_SKIP and FAIL return from the enclosing function.
#define MOONCAKE_SKIP_WITHOUT_GPU()                                     \
  do {                                                                  \
    if (!::mooncake::testing::HaveDevice()) {                           \
      if (::mooncake::testing::EnvFlag("MOONCAKE_REQUIRE_GPU")) {       \
        FAIL() << "MOONCAKE_REQUIRE_GPU is set but no GPU is usable: "  \
               << ::mooncake::GpuTier::ProbeReason();                   \
      }                                                                 \
      GTEST_SKIP() << "no GPU: " << ::mooncake::GpuTier::ProbeReason(); \
    }                                                                   \
  } while (0)
