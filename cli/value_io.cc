#include "cli/value_io.h"

#include <fcntl.h>
#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>
#include <random>

#include "common/signals.h"

namespace mooncake::cli {
namespace {

// Bytes per read while spooling: large enough to keep the copy cheap, small
// enough not to matter for memory.
constexpr size_t kSpoolCopyBytes = 1 << 20;

// Bytes FdOutputBuffer gathers before a write(2).
constexpr size_t kOutputBufferBytes = 1 << 16;

// Symlinks followed before giving up; the kernel's own limit (ELOOP).
constexpr int kMaxSymlinks = 40;

// Writes all of `data`, retrying short writes and EINTR.
bool WriteAll(int fd, const char* data, size_t size) {
  while (size > 0) {
    ssize_t wrote = write(fd, data, size);
    if (wrote < 0 && errno == EINTR) continue;
    if (wrote == 0) errno = EIO;  // no progress and no errno: say so
    if (wrote <= 0) return false;
    data += wrote;
    size -= static_cast<size_t>(wrote);
  }
  return true;
}

// Where `get -o PATH` writes: PATH with every symlink followed.
struct OutputTarget {
  std::string path;
  bool in_place = false;                // not a regular file: written into
  std::optional<struct stat> replaced;  // the regular file already there
  int own_fd = -1;                      // >= 0: PATH names this descriptor of ours
};

// A symlink in /proc (/proc/self/fd/1, where /dev/stdout leads) names an
// open file, not a path: "pipe:[123]", or a file the shell opened, which
// only writing through the link reaches, never a file put beside it.
bool IsProcLink(const std::filesystem::path& link) {
  struct statfs fs {};
  std::filesystem::path dir = link.has_parent_path() ? link.parent_path() : ".";
  return statfs(dir.c_str(), &fs) == 0 && fs.f_type == PROC_SUPER_MAGIC;
}

// N when `link` is /proc/self/fd/N (or /proc/PID/fd/N with our PID): the
// descriptor is duplicated rather than reopened, so the write lands where
// writing to it would (after `>>`, at the end) and a socket works too.
int OwnDescriptor(const std::filesystem::path& link) {
  std::filesystem::path dir = link.parent_path();
  auto is_own_fd_dir = [](const std::filesystem::path& d) {
    std::string process = d.parent_path().filename();
    return d.filename() == "fd" && d.parent_path().parent_path() == "/proc" &&
           (process == "self" || process == "thread-self" || process == std::to_string(getpid()));
  };
  if (!is_own_fd_dir(dir)) {
    // Reached through another link (/dev/fd is /proc/self/fd): the
    // directory it resolves to decides.
    std::error_code ec;
    dir = std::filesystem::canonical(dir, ec);
    if (ec || !is_own_fd_dir(dir)) return -1;
  }
  std::string name = link.filename();
  int fd = -1;
  auto [end, ec] = std::from_chars(name.data(), name.data() + name.size(), fd);
  return ec == std::errc() && end == name.data() + name.size() ? fd : -1;
}

OutputTarget ResolveOutput(const std::string& path) {
  std::filesystem::path current = path;
  for (int links = 0; links <= kMaxSymlinks; ++links) {
    struct stat st {};
    // Absent (a dangling link's target too): a new file. Another error is
    // reported by the open that follows.
    if (lstat(current.c_str(), &st) != 0) return {current, false, std::nullopt};
    if (S_ISREG(st.st_mode)) return {current, false, st};
    if (!S_ISLNK(st.st_mode)) return {current, true, std::nullopt};
    if (IsProcLink(current)) return {current, true, std::nullopt, OwnDescriptor(current)};
    std::error_code ec;
    std::filesystem::path next = std::filesystem::read_symlink(current, ec);
    if (ec) return {current, true, std::nullopt};
    current = next.is_absolute() ? next : current.parent_path() / next;
  }
  return {path, true, std::nullopt};  // the open fails with ELOOP
}

// Creates a file `stem.XXXXXXXX` (random hex) that did not exist before
// (O_EXCL: never another file, nor a planted symlink; a random name, so no
// one can plant them all ahead), with `flags` and `mode`; its name goes to
// `name`. The name is registered in `guard` once the file is made, so a
// SIGINT, SIGTERM or SIGHUP from then on removes it, and never removes a
// file that was someone else's. -1 with errno set when no file could be
// made.
int CreateNamedFile(const std::string& stem, int flags, mode_t mode, std::string& name,
                    std::optional<RemoveOnStopSignal>& guard) {
  std::random_device random;
  for (int attempt = 0; attempt < 100; ++attempt) {
    char suffix[9];
    std::snprintf(suffix, sizeof(suffix), "%08x", static_cast<unsigned>(random()));
    name = stem + "." + suffix;
    int fd = open(name.c_str(), flags | O_CREAT | O_EXCL | O_CLOEXEC, mode);
    if (fd >= 0) {
      guard.emplace(name);
      return fd;
    }
    if (errno != EEXIST) return -1;
  }
  return -1;
}

// The stem of the part file for `target`: `target` with `suffix` added,
// its file name cut short (at a UTF-8 character's start) so that the name
// CreateNamedFile makes, 9 bytes longer, still fits the directory's
// NAME_MAX: a target of 240 bytes or more, which `> FILE` takes, failed
// with "File name too long".
std::string PartFileStem(const std::string& target, const std::string& suffix) {
  const size_t slash = target.rfind('/');
  const size_t base_start = slash == std::string::npos ? 0 : slash + 1;
  const std::string dir = slash == std::string::npos ? "." : target.substr(0, slash + 1);
  long name_max = pathconf(dir.c_str(), _PC_NAME_MAX);
  if (name_max <= 0) name_max = NAME_MAX;
  const size_t room = static_cast<size_t>(name_max);
  const size_t added = suffix.size() + 9;  // "." and eight hex digits
  size_t base_size = target.size() - base_start;
  if (base_size + added > room) {
    base_size = room > added ? room - added : 0;
    while (base_size > 0 &&
           (static_cast<unsigned char>(target[base_start + base_size]) & 0xC0) == 0x80) {
      --base_size;
    }
  }
  return target.substr(0, base_start + base_size) + suffix;
}

// Creates a file beside `target` (see CreateNamedFile).
int CreatePartFile(const std::string& target, std::string& name,
                   std::optional<RemoveOnStopSignal>& guard) {
  const std::string suffix = ".mooncake-part-" + std::to_string(getpid());
  return CreateNamedFile(PartFileStem(target, suffix), O_WRONLY, 0666, name, guard);
}

// $TMPDIR, else /tmp.
std::string TempDir() {
  const char* tmpdir = std::getenv("TMPDIR");
  return tmpdir && *tmpdir ? tmpdir : "/tmp";
}

// A new file in `dir`, open for reading and writing, mode 0600 (see
// CreateNamedFile); its name goes to `name`. The caller removes the name as
// soon as it can and then releases `guard`.
int CreateTempFile(const std::string& dir, std::string& name,
                   std::optional<RemoveOnStopSignal>& guard) {
  return CreateNamedFile(dir + "/mooncake-cli-" + std::to_string(getpid()), O_RDWR, 0600, name,
                         guard);
}

}  // namespace

std::string SystemError() { return std::strerror(errno); }

FdOutputBuffer::FdOutputBuffer() : buffer_(kOutputBufferBytes) {
  setp(buffer_.data(), buffer_.data() + buffer_.size());
}

bool FdOutputBuffer::TruncateIfPending() {
  if (!truncate_pending_) return true;
  if (ftruncate(fd_, 0) != 0) return false;
  truncate_pending_ = false;
  return true;
}

bool FdOutputBuffer::Write(const char* data, size_t size) {
  if (size == 0) return true;
  bool wrote = TruncateIfPending() && WriteAll(fd_, data, size);
  if (!wrote && error_ == 0) error_ = errno;
  return wrote;
}

bool FdOutputBuffer::Drain() {
  bool wrote = Write(pbase(), static_cast<size_t>(pptr() - pbase()));
  setp(buffer_.data(), buffer_.data() + buffer_.size());
  return wrote;
}

FdOutputBuffer::int_type FdOutputBuffer::overflow(int_type ch) {
  if (!Drain()) return traits_type::eof();
  if (!traits_type::eq_int_type(ch, traits_type::eof())) {
    *pptr() = traits_type::to_char_type(ch);
    pbump(1);
  }
  return traits_type::not_eof(ch);
}

std::streamsize FdOutputBuffer::xsputn(const char* data, std::streamsize size) {
  if (static_cast<size_t>(size) < buffer_.size()) return std::streambuf::xsputn(data, size);
  // A chunk of a value: straight to the file, not through the buffer.
  if (!Drain() || !Write(data, static_cast<size_t>(size))) return 0;
  return size;
}

int FdOutputBuffer::sync() { return Drain() ? 0 : -1; }

FdOutputBuffer::pos_type FdOutputBuffer::seekoff(off_type offset, std::ios_base::seekdir dir,
                                                 std::ios_base::openmode which) {
  if (!seekable_ || !(which & std::ios_base::out) || !Drain()) return pos_type(off_type(-1));
  int whence = dir == std::ios_base::beg   ? SEEK_SET
               : dir == std::ios_base::cur ? SEEK_CUR
                                           : SEEK_END;
  off_t at = lseek(fd_, static_cast<off_t>(offset), whence);
  return at < 0 ? pos_type(off_type(-1)) : pos_type(static_cast<off_type>(at));
}

FdOutputBuffer::pos_type FdOutputBuffer::seekpos(pos_type position, std::ios_base::openmode which) {
  return seekoff(off_type(position), std::ios_base::beg, which);
}

OutputFile::OutputFile(std::string path) {
  Open(path);
  // Only a partial file of our own starts at 0 and holds nothing else; a
  // seek on stdout after `>>`, say, would write the value twice.
  buffer_.set_fd(fd_, !write_path_.empty());
  if (in_place_fallback_) buffer_.truncate_before_first_write();
  if (fd_ < 0) out_.setstate(std::ios::badbit);
}

void OutputFile::Open(const std::string& path) {
  OutputTarget target = ResolveOutput(path);
  target_ = target.path;
  if (target.own_fd >= 0) {
    fd_ = fcntl(target.own_fd, F_DUPFD_CLOEXEC, 0);
    return;
  }
  if (target.in_place) {
    fd_ = open(target_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
    if (fd_ < 0) problem_ = "cannot write " + path + ": " + SystemError();
    return;
  }
  fd_ = CreatePartFile(target_, write_path_, part_guard_);
  if (fd_ < 0) {
    const int saved = errno;
    std::string dir = std::filesystem::path(target_).parent_path();
    if (dir.empty()) dir = ".";
    write_path_.clear();
    if (target.replaced && (saved == EACCES || saved == EPERM)) {
      // The directory is closed to us, the file perhaps not: write it in
      // place, as `> PATH` would, emptied when the first bytes arrive.
      fd_ = open(target_.c_str(), O_WRONLY | O_CLOEXEC);
      if (fd_ >= 0) {
        in_place_fallback_ = true;
        return;
      }
      problem_ = "cannot write " + path + ": " + SystemError();
      return;
    }
    if (target.replaced || saved == ENOENT || saved == ENOTDIR) {
      problem_ = "cannot write " + path + ": " + std::strerror(saved);
    } else {
      problem_ = "cannot create " + path + " in " + dir + ": " + std::strerror(saved);
    }
    errno = saved;
    return;
  }
  if (!target.replaced) return;
  // The replacement keeps the old file's owner (where we may: root, or our
  // own group) and then its mode; chown first, as it may clear setuid bits.
  const struct stat& old = *target.replaced;
  if (fchown(fd_, old.st_uid, old.st_gid) != 0) {
    // Not permitted: the file becomes ours, as any rewrite by copy would.
  }
  if (fchmod(fd_, old.st_mode & 07777) != 0) {
    int saved = errno;
    close(fd_);
    unlink(write_path_.c_str());
    part_guard_.reset();
    fd_ = -1;
    problem_ = "cannot give " + write_path_ + " the mode of " + path + ": " + std::strerror(saved);
    write_path_.clear();
    errno = saved;
  }
}

bool OutputFile::Rewind() {
  if (fd_ < 0 || write_path_.empty()) return false;
  out_.clear();
  out_.seekp(0);
  return out_ && ftruncate(fd_, 0) == 0;
}

std::string OutputFile::write_error() const {
  return buffer_.error() != 0 ? std::strerror(buffer_.error()) : SystemError();
}

OutputFile::~OutputFile() {
  if (fd_ >= 0) close(fd_);
  if (!committed_ && !write_path_.empty()) unlink(write_path_.c_str());
  // part_guard_ is released after the unlink: a signal in between removes
  // a name that is gone already, which is harmless.
}

bool OutputFile::Commit() {
  if (fd_ < 0) return false;
  out_.flush();
  // A value always has bytes, but an in-place file must not keep its old
  // contents whatever came.
  bool written = out_ && buffer_.TruncateIfPending();
  int saved = errno;
  bool closed = close(fd_) == 0;
  fd_ = -1;
  if (!written) errno = saved;
  if (!written || !closed) return false;
  if (!write_path_.empty() && rename(write_path_.c_str(), target_.c_str()) != 0) return false;
  committed_ = true;
  part_guard_.reset();
  return true;
}

std::expected<std::unique_ptr<ScratchFile>, std::string> ScratchFile::Create() {
  const std::string dir = TempDir();
  std::string path;
  std::optional<RemoveOnStopSignal> guard;
  int fd = CreateTempFile(dir, path, guard);
  if (fd < 0)
    return std::unexpected("cannot create a scratch file in " + dir + ": " + SystemError());
  // The open descriptor keeps the data; nobody else needs the name.
  unlink(path.c_str());
  return std::unique_ptr<ScratchFile>(new ScratchFile(fd));
}

ScratchFile::ScratchFile(int fd) : fd_(fd) { buffer_.set_fd(fd_, /*seekable=*/true); }

ScratchFile::~ScratchFile() { close(fd_); }

bool ScratchFile::Rewind() {
  out_.clear();
  out_.seekp(0);
  return out_ && ftruncate(fd_, 0) == 0;
}

ssize_t ScratchFile::Read(uint64_t offset, char* into, size_t size) {
  if (!out_.flush()) return -1;
  ssize_t got;
  do {
    got = pread(fd_, into, size, static_cast<off_t>(offset));
  } while (got < 0 && errno == EINTR);
  return got;
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
  const std::string dir = TempDir();
  std::string path;
  std::optional<RemoveOnStopSignal> guard;
  int fd = CreateTempFile(dir, path, guard);
  if (fd < 0) return std::unexpected("cannot create a spool file in " + dir + ": " + SystemError());
  // The read end is opened before a byte is written and the name removed at
  // once: a stream that runs for minutes (Ctrl-C on `producer | put K -`)
  // never leaves a named copy of itself behind, whatever ends the process.
  SpooledInput spooled;
  spooled.stream.open(path, std::ios::binary);
  const int open_error = errno;
  unlink(path.c_str());
  guard.reset();
  if (!spooled.stream.is_open()) {
    close(fd);
    return std::unexpected("cannot read back the spool file " + path + ": " +
                           std::strerror(open_error));
  }
  FdOutputBuffer buffer;
  buffer.set_fd(fd, /*seekable=*/true);
  std::ostream spool(&buffer);
  spool.write(head.data(), static_cast<std::streamsize>(head.size()));
  uint64_t size = head.size();
  std::string chunk(kSpoolCopyBytes, '\0');
  while (spool && in.read(chunk.data(), static_cast<std::streamsize>(chunk.size())).gcount() > 0) {
    spool.write(chunk.data(), in.gcount());
    size += static_cast<uint64_t>(in.gcount());
  }
  spool.flush();
  const bool read_failed = in.bad();
  const int read_error = errno;
  close(fd);
  if (!spool) {
    return std::unexpected("spooling the input to " + dir + ": " +
                           std::strerror(buffer.error() != 0 ? buffer.error() : EIO));
  }
  if (read_failed) {
    return std::unexpected("reading the input: " + std::string(std::strerror(read_error)));
  }
  spooled.size = size;
  return spooled;
}

}  // namespace mooncake::cli
