#pragma once

// Reading the small text files a process is configured with (--config
// files, cli.toml, --admin-token-file) with an upper bound, so that
// `--config /dev/zero`, or a multi-GB file named by mistake, is an error
// naming the file (exit 2) rather than an allocation that ends in
// std::bad_alloc (exit 134) or the OOM killer.
//
// Thread-safety: pure functions.

#include <cstddef>
#include <expected>
#include <istream>
#include <string>

namespace mooncake {

// The most a config file (master, worker, bench, cli.toml) may hold.
inline constexpr size_t kMaxConfigFileBytes = 1 << 20;  // 1 MiB
// The most an --admin-token-file may hold: one token, with room to spare.
inline constexpr size_t kMaxTokenFileBytes = 4 << 10;  // 4 KiB

// At most `max_bytes` + 1 bytes of `in`, from where it stands: a result
// longer than `max_bytes` means the input holds more than that.
std::string ReadAtMost(std::istream& in, size_t max_bytes);

// The whole of the file at `path` when it holds at most `max_bytes`; else
// why not, naming the path: `cannot read "P": No such file or directory`,
// `"P" holds more than 1.0 MiB`.
std::expected<std::string, std::string> ReadFileAtMost(const std::string& path, size_t max_bytes);

// The token in an --admin-token-file: its text with surrounding whitespace
// trimmed, read with the kMaxTokenFileBytes bound. The reason, naming the
// flag and the path, when it cannot be read, is larger, or holds only
// whitespace (a missing secret must not silently turn auth off).
std::expected<std::string, std::string> ReadAdminTokenFile(const std::string& path);

}  // namespace mooncake
