#pragma once

// SharedMapping: maps a worker's memory tier into this process, for
// producers of plan-based writes and for device readers on the worker's own
// node (Client::OpenForWrite, Client::GetLocation). The DRAM arena is mapped
// with mmap from the path the worker exports; the VRAM arena is opened with
// hipIpcOpenMemHandle. Only the pages of the requested range are mapped for
// host memory, so a producer cannot touch other objects by accident.
//
// The IPC handle of a VRAM arena cannot be opened by the process that
// exported it: the producer must be another process than the worker (which
// it always is).
//
// Thread-safety: CopyIn/CopyOut on one mapping may run concurrently for
// disjoint ranges; the object itself is not copied or moved.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "client/client.h"
#include "common/status.h"

namespace mooncake {

class SharedMapping {
 public:
  // Maps [offset, offset + length) of `region`. kInvalidParams for an empty
  // or out-of-range request or a kNone region; kTierNotFound when the region
  // is device memory and this build or machine has no HIP device;
  // kTransferFail when the OS or runtime refuses (a worker on another node,
  // another user, a dead worker). `why` receives a one-line reason.
  static Result<std::unique_ptr<SharedMapping>> Map(const MemoryRegionHandle& region,
                                                    uint64_t offset, uint64_t length,
                                                    std::string* why = nullptr);
  ~SharedMapping();
  SharedMapping(const SharedMapping&) = delete;
  SharedMapping& operator=(const SharedMapping&) = delete;

  uint64_t length() const { return length_; }
  bool on_device() const { return device_base_ != nullptr; }
  // Host mappings: the range itself, ready for memcpy or for filling in
  // place. Empty for device mappings.
  std::span<std::byte> host_bytes() const;
  // Device mappings: a device pointer to the start of the range (use it in
  // kernels or device copies on `device_index`); null for host mappings.
  void* device_pointer() const;

  // Copies host bytes into [offset, offset + data.size()) of the range, or
  // out of it, whichever memory the range is.
  Result<void> CopyIn(uint64_t offset, std::span<const std::byte> data);
  Result<void> CopyOut(uint64_t offset, std::span<std::byte> out) const;

 private:
  SharedMapping() = default;
  bool InRange(uint64_t offset, uint64_t len) const;

  // Host: the page-aligned mapping and where the range starts in it.
  void* map_base_ = nullptr;
  uint64_t map_length_ = 0;
  std::byte* host_range_ = nullptr;
  // Device: the opened arena and the range's device address.
  void* device_base_ = nullptr;
  std::byte* device_range_ = nullptr;
  int device_index_ = -1;
  uint64_t length_ = 0;
};

}  // namespace mooncake
