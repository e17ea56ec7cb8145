#include "tiers/cache_tier.h"

namespace mooncake {

std::string_view ToString(TierKind kind) {
  switch (kind) {
    case TierKind::kVram:
      return "vram";
    case TierKind::kDram:
      return "dram";
    case TierKind::kSsd:
      return "ssd";
  }
  return "unknown";
}

}  // namespace mooncake
