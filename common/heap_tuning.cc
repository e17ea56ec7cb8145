#include "common/heap_tuning.h"

#include <malloc.h>

#include <cstdlib>

namespace mooncake {

HeapTuning KeepFreedHeapForReuse(std::string_view glibc_tunables) {
  if (glibc_tunables.find("glibc.malloc.") != std::string_view::npos) {
    return HeapTuning::kLeftToTunables;
  }
  // mallopt returns 1 on success. Setting any of these also ends glibc's
  // adaptive mmap threshold, hence the explicit one.
  bool applied = mallopt(M_MMAP_THRESHOLD, static_cast<int>(HeapRetention::kMmapThreshold)) == 1;
  applied =
      mallopt(M_TRIM_THRESHOLD, static_cast<int>(HeapRetention::kTrimThreshold)) == 1 && applied;
  applied = mallopt(M_TOP_PAD, static_cast<int>(HeapRetention::kTopPad)) == 1 && applied;
  return applied ? HeapTuning::kApplied : HeapTuning::kRefused;
}

HeapTuning KeepFreedHeapForReuse() {
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  return KeepFreedHeapForReuse(tunables != nullptr ? tunables : "");
}

std::string_view ToString(HeapTuning tuning) {
  switch (tuning) {
    case HeapTuning::kApplied:
      return "kept for reuse";
    case HeapTuning::kLeftToTunables:
      return "as GLIBC_TUNABLES sets it";
    case HeapTuning::kRefused:
      return "libc defaults (mallopt refused)";
  }
  return "unknown";
}

}  // namespace mooncake
