#include "cli/value_io.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>

namespace mooncake::cli {
namespace {

// Bytes per read while spooling: large enough to keep the copy cheap, small
// enough not to matter for memory.
constexpr size_t kSpoolCopyBytes = 1 << 20;

}  // namespace

std::string SystemError() { return std::strerror(errno); }

OutputFile::OutputFile(std::string path) : path_(std::move(path)) {
  std::error_code ec;
  auto status = std::filesystem::status(path_, ec);
  // /dev/null, a fifo or a device: write straight into it.
  bool special =
      !ec && std::filesystem::exists(status) && !std::filesystem::is_regular_file(status);
  write_path_ = special ? path_ : path_ + ".mooncake-part-" + std::to_string(getpid());
  out_.open(write_path_, std::ios::binary | std::ios::trunc);
}

OutputFile::~OutputFile() {
  if (!committed_ && write_path_ != path_) std::filesystem::remove(write_path_, ignored_);
}

bool OutputFile::Commit() {
  out_.close();
  if (!out_) return false;
  committed_ = true;
  if (write_path_ == path_) return true;
  std::filesystem::rename(write_path_, path_, ignored_);
  return !ignored_;
}

std::optional<uint64_t> StdinSize() {
  struct stat st {};
  if (fstat(STDIN_FILENO, &st) != 0 || !S_ISREG(st.st_mode)) return std::nullopt;
  off_t position = lseek(STDIN_FILENO, 0, SEEK_CUR);
  if (position < 0 || position > st.st_size) return std::nullopt;
  return static_cast<uint64_t>(st.st_size - position);
}

std::expected<SpooledInput, std::string> SpoolToTempFile(std::istream& in,
                                                         const std::string& head) {
  const char* tmpdir = std::getenv("TMPDIR");
  std::string path = std::string(tmpdir && *tmpdir ? tmpdir : "/tmp") + "/mooncake-cli-XXXXXX";
  int fd = mkstemp(path.data());
  if (fd < 0) return std::unexpected("cannot create a spool file: " + SystemError());
  close(fd);
  SpooledInput spooled;
  {
    std::ofstream spool(path, std::ios::binary | std::ios::trunc);
    spool.write(head.data(), static_cast<std::streamsize>(head.size()));
    std::string buffer(kSpoolCopyBytes, '\0');
    while (spool &&
           in.read(buffer.data(), static_cast<std::streamsize>(buffer.size())).gcount() > 0) {
      spool.write(buffer.data(), in.gcount());
    }
    spooled.size = static_cast<uint64_t>(spool.tellp());
    if (!spool || in.bad()) {
      std::filesystem::remove(path);
      return std::unexpected("spooling stdin to " + path + ": " + SystemError());
    }
  }
  spooled.stream.open(path, std::ios::binary);
  // The open stream keeps the data; the name is not needed any more.
  std::filesystem::remove(path);
  return spooled;
}

}  // namespace mooncake::cli
