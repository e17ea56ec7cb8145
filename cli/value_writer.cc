#include "cli/value_writer.h"

#include <algorithm>
#include <cstdio>
#include <span>
#include <sstream>
#include <string>

#include "client/shared_mapping.h"

namespace mooncake::cli {
namespace {

// Reads `size` bytes of `in` into the mapped region, a chunk at a time.
Result<void> CopyInto(SharedMapping& mapping, std::istream& in, uint64_t size,
                      const ProgressFn& progress) {
  std::string buffer;
  for (uint64_t done = 0; done < size;) {
    auto length = static_cast<size_t>(std::min<uint64_t>(kRpcChunkBytes, size - done));
    std::span<std::byte> host = mapping.host_bytes();
    // Host memory is filled in place; device memory through a buffer.
    char* into = host.empty() ? (buffer.resize(length), buffer.data())
                              : reinterpret_cast<char*>(host.data() + done);
    in.read(into, static_cast<std::streamsize>(length));
    if (static_cast<size_t>(in.gcount()) != length) {
      return Err(in.bad() ? ErrorCode::kTransferFail : ErrorCode::kInvalidParams);
    }
    if (host.empty()) {
      auto copied = mapping.CopyIn(done, std::as_bytes(std::span(buffer.data(), length)));
      if (!copied) return copied;
    }
    done += length;
    if (progress) progress(done, size);
  }
  return {};
}

}  // namespace

Result<void> ValueWriter::Write(std::string_view value) {
  if (cmd_.zero_copy) {
    std::istringstream in{std::string(value)};
    return WritePlanned(in, value.size(), {});
  }
  return upsert() ? client_.Upsert(cmd_.key, value, Options())
                  : client_.Put(cmd_.key, value, Options());
}

Result<void> ValueWriter::WriteStream(std::istream& in, uint64_t size, const ProgressFn& progress) {
  if (cmd_.zero_copy) return WritePlanned(in, size, progress);
  return upsert() ? client_.UpsertStream(cmd_.key, in, size, Options(), progress)
                  : client_.PutStream(cmd_.key, in, size, Options(), progress);
}

// Any failure after the plan is granted revokes it, so its space goes back.
Result<void> ValueWriter::WritePlanned(std::istream& in, uint64_t size,
                                       const ProgressFn& progress) {
  auto plan = client_.OpenForWrite(cmd_.key, size, Options(), upsert());
  if (!plan) return Err(plan.error());
  std::string why;
  auto mapping = SharedMapping::Map(plan->memory, plan->offset, size, &why);
  if (!mapping) {
    std::fprintf(stderr, "error: --zero-copy: cannot map %s memory of %s: %s\n", plan->tier.c_str(),
                 plan->node_id.c_str(), why.c_str());
    (void)client_.Revoke(*plan);
    return Err(mapping.error());
  }
  if (auto copied = CopyInto(**mapping, in, size, progress); !copied) {
    (void)client_.Revoke(*plan);
    return copied;
  }
  return client_.Commit(*plan);
}

PutOptions ValueWriter::Options() const {
  PutOptions options;
  options.hard_pin = cmd_.hard_pin;
  options.soft_pin = cmd_.soft_pin;
  options.soft_pin_ttl_ms = cmd_.soft_pin_ttl_ms;
  options.preferred_node = cmd_.node;
  options.preferred_tier = cmd_.tier;
  return options;
}

}  // namespace mooncake::cli
