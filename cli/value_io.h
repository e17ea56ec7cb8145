#pragma once

// The local side of mooncake-cli's values: the file a get writes, the size
// of stdin, and the spool file of a stream whose length is unknown.
//
// Thread-safety: none of these is shared; each command uses its own.

#include <sys/types.h>

#include <cstdint>
#include <expected>
#include <fstream>
#include <istream>
#include <memory>
#include <optional>
#include <ostream>
#include <streambuf>
#include <string>
#include <vector>

#include "common/signals.h"

namespace mooncake::cli {

// strerror(errno): why the last system call failed.
std::string SystemError();

// A std::streambuf that writes to a file descriptor it does not own: what
// std::ofstream cannot do with a descriptor opened O_EXCL or duplicated from
// stdout. With `seekable` (a file of our own, written from its start) it
// seeks, so a read that restarts can rewrite what it wrote; otherwise
// tellp() is -1, as on a pipe, and such a read fails instead.
class FdOutputBuffer : public std::streambuf {
 public:
  FdOutputBuffer();
  void set_fd(int fd, bool seekable) {
    fd_ = fd;
    seekable_ = seekable;
  }
  // The errno of the first write that failed; 0 while none has.
  int error() const { return error_; }
  // Empties the file (ftruncate to 0) just before the first byte is written
  // to it, not now: a read that fails before any data arrives leaves the
  // file as it was.
  void truncate_before_first_write() { truncate_pending_ = true; }
  // Whether that truncation is still to come.
  bool truncate_pending() const { return truncate_pending_; }
  // Does the pending truncation now, if any; false, with errno set, when
  // ftruncate failed.
  bool TruncateIfPending();

 protected:
  int_type overflow(int_type ch) override;
  std::streamsize xsputn(const char* data, std::streamsize size) override;
  int sync() override;
  pos_type seekoff(off_type offset, std::ios_base::seekdir dir,
                   std::ios_base::openmode which) override;
  pos_type seekpos(pos_type position, std::ios_base::openmode which) override;

 private:
  // Writes out what is buffered; false, with errno set, when that failed.
  bool Drain();
  // Writes all of `data` after any pending truncation; keeps the errno of
  // a failure in error_.
  bool Write(const char* data, size_t size);

  int fd_ = -1;
  bool seekable_ = false;
  int error_ = 0;
  bool truncate_pending_ = false;
  std::vector<char> buffer_;
};

// The file `get -o PATH` writes. A regular file (PATH with its symlinks
// followed, so a link stays a link and its target gets the value) is written
// beside itself and renamed over the old one only once complete, so a failed
// get leaves no partial file behind; a file it replaces keeps its mode (and,
// where allowed, its owner). Anything else is written in place: /dev/null, a
// fifo, a device, and an open file named through /proc (/dev/stdout,
// /dev/fd/N, /proc/self/fd/N), which is this process's own descriptor
// however the shell redirected it. Owns the partial file and removes it
// unless Commit() succeeded.
//
// A regular file whose directory is not writable (no file can be created
// beside it) but which is itself writable is written in place, as `> PATH`
// would: it is emptied only when the first bytes arrive, so a get that fails
// before (a missing key) still leaves it untouched, and partly_written()
// says when a failure came later.
class OutputFile {
 public:
  explicit OutputFile(std::string path);
  ~OutputFile();
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;

  // False when the file could not be opened; problem() says why.
  bool ok() const { return fd_ >= 0; }
  // Why the file could not be opened, e.g. "cannot write PATH: Permission
  // denied"; empty when it was.
  const std::string& problem() const { return problem_; }
  // Whether an existing file was emptied and written in place (its
  // directory is not writable) and is not complete: true after a failure.
  bool partly_written() const {
    return in_place_fallback_ && !committed_ && !buffer_.truncate_pending();
  }
  std::ostream& stream() { return out_; }
  // Why a write to stream() failed (strerror of its errno).
  std::string write_error() const;

  // Empties the file for another try; false when it cannot be (it is
  // written in place) or that failed.
  bool Rewind();

  // Flushes and closes the file and renames it into place; false, with
  // errno set, when any of that failed.
  bool Commit();

 private:
  void Open(const std::string& path);

  std::string target_;      // where the value ends up: PATH, symlinks followed
  std::string write_path_;  // the partial file beside target_; empty when in place
  // Removes write_path_ if SIGINT, SIGTERM or SIGHUP ends the process
  // before Commit() or the destructor does.
  std::optional<RemoveOnStopSignal> part_guard_;
  std::string problem_;             // why the open failed
  bool in_place_fallback_ = false;  // a regular file written in place
  int fd_ = -1;
  FdOutputBuffer buffer_;
  std::ostream out_{&buffer_};
  bool committed_ = false;
};

// A file under $TMPDIR (or /tmp) with no name, which vanishes with this
// object: a value is written through stream() and read back with Read(),
// so a large one never sits in memory.
class ScratchFile {
 public:
  // On failure, why (e.g. "cannot create a scratch file in /tmp: ...").
  static std::expected<std::unique_ptr<ScratchFile>, std::string> Create();
  ~ScratchFile();
  ScratchFile(const ScratchFile&) = delete;
  ScratchFile& operator=(const ScratchFile&) = delete;

  // Seekable, from offset 0 of the file.
  std::ostream& stream() { return out_; }
  // Empties the file for another try; false, with errno set, on failure.
  bool Rewind();
  // Flushes stream() and reads up to `size` bytes from `offset`; the number
  // read (0 at the end), or -1 with errno set.
  ssize_t Read(uint64_t offset, char* into, size_t size);

 private:
  explicit ScratchFile(int fd);

  int fd_;
  FdOutputBuffer buffer_;
  std::ostream out_{&buffer_};
};

// The size left to read on stdin when it is a plain file; nullopt for pipes.
std::optional<uint64_t> StdinSize();

// A stream copied to a temporary file, open for reading; the file's name is
// already removed, so the data lives as long as `stream`.
struct SpooledInput {
  std::ifstream stream;
  uint64_t size = 0;
};

// Copies `head` and then the rest of `in` into a file under $TMPDIR (or
// /tmp). The protocol needs a value's size up front and the CLI must never
// hold a large value in memory, so a stream of unknown length goes to disk
// first. On failure, why (e.g. "cannot create a spool file in /tmp: ...").
std::expected<SpooledInput, std::string> SpoolToTempFile(std::istream& in, const std::string& head);

}  // namespace mooncake::cli
