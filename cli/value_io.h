#pragma once

// The local side of mooncake-cli's values: the file a get writes, the size
// of stdin, and the spool file of a stream whose length is unknown.
//
// Thread-safety: none of these is shared; each command uses its own.

#include <cstdint>
#include <expected>
#include <fstream>
#include <istream>
#include <optional>
#include <string>
#include <system_error>

namespace mooncake::cli {

// strerror(errno): why the last system call failed.
std::string SystemError();

// A file the CLI writes into and, when it is a plain file, moves into place
// only once complete, so a failed get leaves no partial file behind.
// /dev/null, a fifo or a device is written in place. Owns the partial file
// and removes it unless Commit() succeeded.
class OutputFile {
 public:
  explicit OutputFile(std::string path);
  ~OutputFile();
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;

  bool ok() const { return static_cast<bool>(out_); }
  std::ostream& stream() { return out_; }

  // Closes the file and renames it into place; false when either failed.
  bool Commit();

 private:
  std::string path_;
  std::string write_path_;
  std::ofstream out_;
  bool committed_ = false;
  std::error_code ignored_;
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
// first. On failure, why (e.g. "cannot create a spool file: ...").
std::expected<SpooledInput, std::string> SpoolToTempFile(std::istream& in, const std::string& head);

}  // namespace mooncake::cli
