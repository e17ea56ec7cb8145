#pragma once

// The standard descriptors 0, 1 and 2 of a process started with some of them
// closed (`cmd >&-`, a supervisor or cron wrapper). Left closed, the next
// open(), socket() or memfd_create() takes the lowest free number: the
// worker's DRAM arena became its stdout and log lines were written into
// cached values, and the CLI wrote a value into its connection to the
// master. Every main therefore calls ReopenClosedStdio() first.
//
// Thread-safety: call it before any other thread starts.

namespace mooncake {

// What a closed standard descriptor is reopened on.
enum class ClosedStdioAs {
  // /dev/null: reads see end of file, writes vanish. For servers, whose
  // log output the caller chose to drop by closing stdout.
  kDevNull,
  // An O_PATH descriptor of /dev/null: every read and write fails with
  // EBADF, as on the closed descriptor, yet the number stays taken. For
  // tools whose output is their result (mooncake-cli): a value written to
  // a closed stdout must fail, not vanish.
  kUnusable,
};

// Which of 0, 1 and 2 were closed when ReopenClosedStdio ran.
struct ClosedStdio {
  bool in = false;
  bool out = false;
  bool err = false;
};

// Reopens each of 0, 1 and 2 that is closed as `as` says, so that no file or
// socket the process opens later can get one of those numbers. Call it as
// the first statement of main.
ClosedStdio ReopenClosedStdio(ClosedStdioAs as = ClosedStdioAs::kDevNull);

}  // namespace mooncake
