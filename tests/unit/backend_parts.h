#pragma once

// The TieredCacheBackend's parts (worker/object_table.h, mover.h,
// write_path.h, maintenance.h) wired together as the backend wires them,
// but without it, over DRAM tiers and an in-memory directory: a part's test
// drives that part directly and looks at the object table.
//
// Thread-safety: as the parts; helpers ending in "Locked" are not used, the
// helpers here take the lock themselves.

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "tests/unit/in_memory_directory.h"
#include "tiers/dram_tier.h"
#include "worker/backend_context.h"
#include "worker/maintenance.h"
#include "worker/mover.h"
#include "worker/object_table.h"
#include "worker/write_path.h"

namespace mooncake::testing {

inline std::vector<std::unique_ptr<CacheTier>> DramTiers(const std::vector<uint64_t>& capacities) {
  std::vector<std::unique_ptr<CacheTier>> tiers;
  for (size_t t = 0; t < capacities.size(); ++t) {
    tiers.push_back(std::move(DramTier::Create("t" + std::to_string(t), capacities[t]).value()));
  }
  return tiers;
}

// A peer that takes every object (or refuses with `error`) and keeps the
// bytes it was sent. kNotOwner stands for the master's refusal of the
// hand-over (another node owns the key).
class FakePeers : public PeerTransfer {
 public:
  Result<std::string> Transfer(const std::string& key, uint64_t size, uint64_t version,
                               const ObjectOptions& options, const ObjectSource& source,
                               const std::string& target, bool dram_only) override {
    calls++;
    last_target = target;
    last_dram_only = dram_only;
    if (error) return Err(*error);
    std::string bytes(size, '\0');
    auto out = std::as_writable_bytes(std::span(bytes.data(), bytes.size()));
    if (auto read = source.read(0, out); !read) return Err(read.error());
    received[key] = bytes;
    return target.empty() ? std::string("node-b") : target;
  }

  std::optional<ErrorCode> error;
  int calls = 0;
  std::string last_target;
  bool last_dram_only = false;
  std::map<std::string, std::string> received;
};

struct BackendParts {
  explicit BackendParts(const std::vector<uint64_t>& capacities, BackendOptions options = {})
      : ctx(DramTiers(capacities), &directory, options) {}

  // Stores a complete, owned object directly in the table (and claims it),
  // as if a write had published it in tier `tier`.
  void AddComplete(const std::string& key, const std::string& value, size_t tier,
                   ObjectOptions options = {}) {
    CacheTier& where = *ctx.tiers[tier];
    auto allocation = std::make_shared<Allocation>(&where, where.Allocate(value.size()).value());
    auto bytes = std::as_bytes(std::span(value.data(), value.size()));
    EXPECT_TRUE(where.Write(allocation->location, 0, bytes));
    EXPECT_TRUE(directory.Claim(key));
    std::lock_guard lock(ctx.mu);
    Object object;
    object.id = table.NextObjectId();
    object.allocation = std::move(allocation);
    object.size = value.size();
    object.version = table.NextVersion();
    object.options = options;
    table.Emplace(key, std::move(object), ObjectState::kComplete, tier, /*published=*/true,
                  SteadyClock::now());
  }

  // The bytes of `key`'s object, or "" when it is absent.
  std::string Read(const std::string& key) {
    AllocationPtr allocation;
    uint64_t size = 0;
    {
      std::lock_guard lock(ctx.mu);
      const Object* object = table.Find(key);
      if (object == nullptr || !object->allocation) return "";
      allocation = object->allocation;
      size = object->size;
    }
    std::string value(size, '\0');
    auto out = std::as_writable_bytes(std::span(value.data(), value.size()));
    EXPECT_TRUE(allocation->tier->Read(allocation->location, 0, out));
    return value;
  }

  // The record's lifecycle state, kRemoved when there is none.
  ObjectState StateOf(const std::string& key) {
    std::lock_guard lock(ctx.mu);
    const Object* object = table.Find(key);
    return object == nullptr ? ObjectState::kRemoved : object->state();
  }
  // The record's tier; -1 when there is none.
  int TierOf(const std::string& key) {
    std::lock_guard lock(ctx.mu);
    const Object* object = table.Find(key);
    return object == nullptr ? -1 : static_cast<int>(object->tier());
  }
  // Runs `f(object)` under the lock on the record of `key`, which must exist.
  template <typename F>
  void With(const std::string& key, F f) {
    std::lock_guard lock(ctx.mu);
    Object* object = table.Find(key);
    ASSERT_NE(object, nullptr) << key;
    f(*object);
  }

  InMemoryDirectory directory;
  BackendContext ctx;
  ObjectTable table{ctx.tiers.size()};
  Mover mover{ctx, table};
  WorkQueue work{ctx};
  WritePath writer{ctx, table, mover, work};
  Maintenance maintenance{work, writer, mover};
};

}  // namespace mooncake::testing
