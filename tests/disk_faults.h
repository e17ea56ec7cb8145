#pragma once

// Disk faults for the SSD tests, unit and integration alike: a small tmpfs
// that fills up, and the files of a RocksDB directory found and damaged.

#include <gtest/gtest.h>
#include <sys/mount.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace mooncake::testing {

// A tmpfs of `bytes` mounted on `dir` (created if missing) for one test;
// needs root, so a test skips when mounted() is false (error() says why).
// Unmounted on destruction, lazily if something still holds it: stop the
// processes that use it first.
class TmpfsMount {
 public:
  TmpfsMount(std::filesystem::path dir, uint64_t bytes) : dir_(std::move(dir)) {
    std::error_code ec;
    std::filesystem::create_directories(dir_, ec);
    const std::string options = "size=" + std::to_string(bytes);
    if (mount("tmpfs", dir_.c_str(), "tmpfs", 0, options.c_str()) != 0) {
      error_ =
          "mount -t tmpfs -o " + options + " tmpfs " + dir_.string() + ": " + std::strerror(errno);
    } else {
      mounted_ = true;
    }
  }
  ~TmpfsMount() {
    if (mounted_ && umount(dir_.c_str()) != 0) umount2(dir_.c_str(), MNT_DETACH);
  }
  TmpfsMount(const TmpfsMount&) = delete;
  TmpfsMount& operator=(const TmpfsMount&) = delete;

  bool mounted() const { return mounted_; }
  const std::string& error() const { return error_; }

 private:
  std::filesystem::path dir_;
  std::string error_;
  bool mounted_ = false;
};

// The files directly in `dir` whose names `match`, sorted.
inline std::vector<std::filesystem::path> FilesNamed(
    const std::filesystem::path& dir, const std::function<bool(const std::string&)>& match) {
  std::vector<std::filesystem::path> out;
  std::error_code ec;
  for (std::filesystem::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    if (match(it->path().filename().string())) out.push_back(it->path());
  }
  std::sort(out.begin(), out.end());
  return out;
}
inline std::vector<std::filesystem::path> FilesEndingWith(const std::filesystem::path& dir,
                                                          std::string_view suffix) {
  return FilesNamed(dir, [&](const std::string& name) { return name.ends_with(suffix); });
}
inline std::vector<std::filesystem::path> FilesStartingWith(const std::filesystem::path& dir,
                                                            std::string_view prefix) {
  return FilesNamed(dir, [&](const std::string& name) { return name.starts_with(prefix); });
}

// Replaces `file`'s content with `content` (fails the test if it cannot).
inline void WriteFile(const std::filesystem::path& file, std::string_view content) {
  std::ofstream f(file, std::ios::binary | std::ios::trunc);
  f << content;
  ASSERT_TRUE(f) << "cannot write " << file;
}

// Replaces `length` bytes at `offset` of `file` with their complement, so
// the file keeps its size but every byte of the range is wrong.
inline void FlipBytes(const std::filesystem::path& file, uint64_t offset, uint64_t length) {
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  ASSERT_TRUE(f) << file;
  std::string bytes(length, '\0');
  f.seekg(static_cast<std::streamoff>(offset));
  f.read(bytes.data(), static_cast<std::streamsize>(length));
  ASSERT_EQ(f.gcount(), static_cast<std::streamsize>(length)) << file;
  for (char& c : bytes) c = static_cast<char>(~c);
  f.seekp(static_cast<std::streamoff>(offset));
  f.write(bytes.data(), static_cast<std::streamsize>(length));
  ASSERT_TRUE(f) << file;
}

}  // namespace mooncake::testing
