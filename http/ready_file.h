#pragma once

// Ready files tell a supervisor (a script, the integration harness) that a
// server listens and on which ports.
//
// Thread-safety: reentrant; concurrent writers of one path leave one whole
// file (the last rename wins).

#include <span>
#include <string>

#include "common/status.h"

namespace mooncake {

// Writes each port on its own line ("50051\n50050\n") to `path`, atomically:
// the text goes to a temporary file in the same directory that is then
// renamed over `path`, so a reader polling for the file never sees it half
// written. kInvalidParams if the file cannot be created, kInternalError if
// writing or renaming fails.
Result<void> WriteReadyFilePorts(const std::string& path, std::span<const int> ports);

// On a stop: removes `path` if it still holds exactly what
// WriteReadyFilePorts(path, ports) wrote, so a supervisor waiting for the
// file never takes a stopped server's ports for a live one's; a file
// another process wrote since (a new instance given the same path) is left
// alone. True if removed. Not atomic against a writer renaming over the
// file at the same instant (a restart racing its predecessor's exit).
bool RemoveReadyFileIfOurs(const std::string& path, std::span<const int> ports);

}  // namespace mooncake
