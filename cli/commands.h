#pragma once

// Runs a parsed mooncake-cli command against the cluster: results on stdout,
// one error line on stderr, and the exit code of docs/design.md,
// "Interfaces and exit codes".

#include "cli/cli_args.h"

namespace mooncake::cli {

// Returns the process exit code.
int RunCommand(const CliCommand& command);

}  // namespace mooncake::cli
