#pragma once

// put and upsert of one value: through the client's put RPCs, or with
// --zero-copy through a write plan, where the bytes go straight into the
// owner's memory and only the plan and the commit cross the network.
//
// Thread-safety: not thread-safe; one command drives one writer. Holds
// references to the command and the client, which must outlive it.

#include <cstdint>
#include <istream>
#include <string_view>

#include "cli/cli_args.h"
#include "client/client.h"

namespace mooncake::cli {

class ValueWriter {
 public:
  ValueWriter(const CliCommand& cmd, Client& client) : cmd_(cmd), client_(client) {}

  // put never overwrites; upsert creates or replaces. Same sources for both.
  Result<void> Write(std::string_view value);
  // Writes exactly `size` bytes read from `in`; `progress` may be empty.
  Result<void> WriteStream(std::istream& in, uint64_t size, const ProgressFn& progress);

 private:
  Result<void> WritePlanned(std::istream& in, uint64_t size, const ProgressFn& progress);
  PutOptions Options() const;
  bool upsert() const { return cmd_.kind == CommandKind::kUpsert; }

  const CliCommand& cmd_;
  Client& client_;
};

}  // namespace mooncake::cli
