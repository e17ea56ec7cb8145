#pragma once

// Human sizes: "64MiB", "1GiB", "512MB", "4KB", "4096". Binary (KiB) and
// decimal (KB) suffixes are both accepted, case-insensitively; "K"/"M"/"G"
// alone mean binary units, as operators usually intend for memory sizes.

#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"

namespace mooncake {

// kInvalidParams for empty input, unknown suffixes, or overflow.
Result<uint64_t> ParseByteSize(std::string_view text);

// "1.5 GiB", "512 B": for logs, CLI output and error messages (rounded to
// a tenth of the unit; never "1024.0 KiB").
std::string FormatBytes(uint64_t bytes);

// "256MiB", "1GiB", "1000": exact, in the largest binary unit that divides
// the size, so ParseByteSize reads it back (--help defaults).
std::string FormatByteSize(uint64_t bytes);

}  // namespace mooncake
