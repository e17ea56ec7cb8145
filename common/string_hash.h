#pragma once

// A hash for unordered containers keyed by std::string that also accepts a
// std::string_view, so that a lookup by view builds no string. Use it with
// std::equal_to<> as the key-equal.

#include <cstddef>
#include <functional>
#include <string_view>

namespace mooncake {

struct TransparentStringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

}  // namespace mooncake
