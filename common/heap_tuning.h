#pragma once

// How a server process's heap (glibc malloc) gives memory back to the
// kernel.
//
// By default glibc returns the free memory at the top of a heap once it
// passes 128 KiB (M_TRIM_THRESHOLD). A server's calls come in waves: a batch
// call's vectors, a wave of new records, a cleanup that frees them. Each wave
// then takes its pages from the kernel again, and every such page is a page
// fault and a page of zeros. Measured on the worker under BatchPut of 16 x
// 4 KiB at 16 threads, once its tables had grown: about 5,900 faults per
// 100,000 keys put, and about 750 with the settings below.
//
// The cost is memory the process keeps: up to kTrimThreshold free at the
// top of each of glibc's heaps (one per arena; glibc's own adaptive
// threshold, which these fixed values replace, goes as high). Settings
// that an operator gives glibc (GLIBC_TUNABLES naming glibc.malloc.*) win:
// the process then changes nothing.
//
// Thread-safety: call once, early in main, before threads start.

#include <cstddef>
#include <string_view>

namespace mooncake {

struct HeapRetention {
  // Free memory at a heap's top is returned to the kernel above this.
  static constexpr size_t kTrimThreshold = 64u << 20;
  // A heap grows (and, when trimmed, keeps) this much beyond what it needs.
  static constexpr size_t kTopPad = 4u << 20;
  // Blocks from this size get their own mapping (freed at once, faulted in
  // again on next use); smaller ones come from the heap. glibc's adaptive
  // threshold ends at this value too, but only after it saw such blocks.
  static constexpr size_t kMmapThreshold = 32u << 20;
};

enum class HeapTuning {
  kApplied,         // the HeapRetention settings are in force
  kLeftToTunables,  // GLIBC_TUNABLES sets glibc.malloc.*: left alone
  kRefused,         // mallopt refused one (a libc other than glibc)
};

// Keeps freed heap memory for reuse (see above) unless `glibc_tunables`
// (the GLIBC_TUNABLES variable, empty when unset) names a malloc setting.
HeapTuning KeepFreedHeapForReuse(std::string_view glibc_tunables);

// The same, reading GLIBC_TUNABLES from the environment.
HeapTuning KeepFreedHeapForReuse();

std::string_view ToString(HeapTuning tuning);

}  // namespace mooncake
