#pragma once

// mooncake-bench --workload vram: host<->VRAM bandwidth and latency of the
// GpuTier data path (a pageable buffer copied through the tier's pinned
// staging buffer; host memory registered with the tier, as the DRAM arena
// under --dram-pin-for-vram, moved by one DMA) next to plain hipMemcpy from
// pageable and from pinned host memory, on one device in one run, so the
// cost of the tier's staging is a measured ratio rather than a guess. Needs no master and no
// worker: it opens its own GpuTier on the local device.

#include <cstdint>
#include <vector>

namespace mooncake::bench {

struct VramBenchOptions {
  // Transfer sizes in bytes, each measured on its own; every size in
  // [1, 16 GiB]. Host memory holds about 5 x the largest size, the device 3 x.
  std::vector<uint64_t> sizes = {64ull << 10, 1ull << 20, 64ull << 20};
  // Timed transfers per size and path, after 2 untimed warm-ups; [1, 100000].
  int iterations = 20;
  // HIP device ordinal.
  int device_index = 0;
  // A JSON document on stdout instead of the text table.
  bool json = false;
};

// Runs the bench and prints its report on stdout. Returns the process exit
// code:
//   0  every transfer succeeded and every tier get returned the bytes the
//      tier put wrote;
//   1  no usable device: built without HIP, no driver or GPU, or
//      device_index out of range; one line "vram: unavailable (<why>)" on
//      stderr;
//   2  invalid options (empty sizes, a size or iteration count out of range);
//   3  a HIP call or a tier transfer failed, or a tier get returned other
//      bytes than the tier put wrote; the reason is on stderr.
// Never throws. Selects device_index as the calling thread's current device
// (hipSetDevice) and leaves it selected.
int RunVramBench(const VramBenchOptions& options);

}  // namespace mooncake::bench
