#pragma once

// The text form of a sharded master directory (docs/sharding.md), apart from
// thrift/master_shards.h so that flag parsers check it without Thrift.
// Thread-safety: a pure function.

#include <string>
#include <string_view>

#include "common/key_slots.h"
#include "common/status.h"

namespace mooncake {

// Parses a shard list: either a slot table "FIRST-LAST=HOST:PORT,..."
// (SlotTable::Parse) or a plain list "HOST:PORT,HOST:PORT,..." that splits
// the slots evenly in the order given. kInvalidParams, with the reason in
// *why (when not null), for anything else or a duplicate plain address.
Result<SlotTable> ParseMasterShards(std::string_view text, std::string* why = nullptr);

}  // namespace mooncake
