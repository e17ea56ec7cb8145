#pragma once

// A device-memory (VRAM) tier over the HIP runtime API: one device arena
// (a single hipMalloc) carved up by the same ArenaAllocator as the DRAM tier,
// so objects cost no device allocation and the whole arena is exported once
// for IPC (ExportRegion) to producers and readers in other processes.
//
// Transfers run on kTransferLanes lanes, each a non-blocking stream with a
// pinned host staging buffer (hipHostMalloc), so that many Reads and Writes
// proceed at once and a large one does not hold up the small ones behind it.
// Write copies the caller's bytes into its lane's staging buffer and issues
// hipMemcpyAsync host-to-device, Read the reverse; the buffer is split in
// two halves so the CPU copy of one chunk overlaps the DMA of the previous
// one. Both return only once the stream is drained, so the caller's span may
// be reused immediately.
//
// ReadLent reads by one DMA into one of kReadBuffers pinned buffers of the
// tier's and lends it to the caller: the worker's Get writes its reply from
// there instead of copying out of a staging buffer first.
//
// Host memory registered with the tier (RegisterHostRange: the worker
// registers its DRAM arena under --dram-pin-for-vram) skips the staging
// buffer: a Write from it or a Read into it is one DMA, at the pinned copy
// rate rather than that of a CPU copy plus a DMA (on an H100, 64 MiB moved
// at about 50 GB/s pinned against 11 GB/s staged: bench/ --workload vram).
//
// The HIP platform is chosen at configure time (cmake/HipNvidia.cmake: HIP's
// NVIDIA headers over the CUDA runtime, or libamdhip64 on AMD); whether a
// device exists is a run-time question (DeviceCount()). A build without HIP
// still has this class: Create and DeviceCount fail with kTierNotFound and
// ProbeReason() says why. HIP headers stay out of this header (pimpl), so
// only gpu_tier.cc needs the HIP include path.
//
// Thread-safety: Allocate/Free/accounting are serialised by the allocator's
// mutex. Read/Write take a free lane (waiting while all kTransferLanes are
// busy) and give it back when done; the backend's rule still holds that no
// Write/Free races on one location (see cache_tier.h). DeviceCount and
// ProbeReason may be called from any thread. The tier sets the calling
// thread's current device (hipSetDevice) in Create, Read and Write.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "common/status.h"
#include "tiers/arena_tier.h"

namespace mooncake {

class GpuTier : public ArenaTier {
 public:
  // Every allocation is rounded to this many bytes (what device copies and
  // later IPC consumers like best; hipMalloc itself aligns to at least 256).
  static constexpr uint64_t kAlignment = 256;
  // Size of each lane's pinned host staging buffer (two halves of 2 MiB).
  static constexpr uint64_t kStagingBytes = 4ull << 20;
  // Pinned buffers ReadLent reads into (a reply is written from one while
  // it is held), each kStagingBytes.
  static constexpr int kReadBuffers = 8;
  // Transfers that run at once (each lane: a stream and a staging buffer).
  // On an H100 behind a worker serving 16 client threads, 4 lanes against
  // one took 1 MiB gets from 5.0k to 13.1k/s and 64 KiB gets from 24k to
  // 108k/s (README, "Benchmarks").
  static constexpr int kTransferLanes = 4;

  // Opens device `device_index` and allocates an arena of `capacity` bytes
  // (> 0) on it, plus the transfer lanes and the pinned read buffers.
  // Errors:
  //   kTierNotFound   no device answers: built without HIP, the runtime
  //                   reports an error (no driver, no GPU) or zero devices.
  //                   A worker treats this as "run without a VRAM tier".
  //   kInvalidParams  capacity 0, or device_index outside [0, DeviceCount()).
  //   kInternalError  the device exists but a HIP call failed (e.g. the
  //                   arena does not fit in free device memory).
  // On failure `why` (when not null) receives a one-line reason.
  static Result<std::unique_ptr<GpuTier>> Create(std::string name, uint64_t capacity,
                                                 int device_index, std::string* why = nullptr);

  // Number of HIP devices. kTierNotFound when built without HIP or when the
  // runtime reports an error (HIP on a machine without a GPU or driver
  // answers with an error, not 0); ProbeReason() has the details.
  static Result<int> DeviceCount();
  // A one-line, human-readable account of device availability: why no device
  // can be used ("built without HIP: ...", "hipGetDeviceCount failed: ..."),
  // or how many were found and on which platform.
  static std::string ProbeReason();
  // True when this build has a HIP platform (not whether a device exists).
  static bool BuiltWithHip();

  ~GpuTier() override;
  GpuTier(const GpuTier&) = delete;
  GpuTier& operator=(const GpuTier&) = delete;

  TierKind kind() const override { return TierKind::kVram; }
  // Copy-in/copy-out through the staging buffer; kTransferFail when a HIP
  // copy or synchronisation fails, kInvalidParams when out of bounds.
  Result<void> Write(const TierLocation& location, uint64_t offset,
                     std::span<const std::byte> data) override;
  Result<void> Read(const TierLocation& location, uint64_t offset,
                    std::span<std::byte> out) const override;
  // Into one of kReadBuffers pinned buffers of kStagingBytes, by one DMA.
  Result<std::unique_ptr<LentBytes>> ReadLent(const TierLocation& location, uint64_t offset,
                                              uint64_t size) const override;
  // The arena's IPC handle (hipIpcGetMemHandle, taken once at Create), for
  // producers and readers in other processes on this node. kTierNotFound
  // when the runtime could not export it.
  Result<SharedRegion> ExportRegion() const override;

  // Pins `range` for this device (hipHostRegister), so that every Write from
  // and Read into memory inside it is one DMA that skips the staging buffer.
  // For long-lived memory, such as the DRAM tier's arena: every page of the
  // range becomes resident and unswappable until this tier is destroyed,
  // which unregisters it, so the range must outlive the tier. Errors:
  //   kInvalidParams  an empty range, or one overlapping a registered range.
  //   kTransferFail   the runtime refused (not enough lockable memory, a
  //                   mapping it cannot pin); `why` says what it answered.
  Result<void> RegisterHostRange(std::span<std::byte> range, std::string* why = nullptr);
  // How many Write and Read calls moved by DMA straight from or into a
  // registered range or a read buffer (ReadLent), and how many went through
  // the staging buffer.
  uint64_t direct_transfers() const;
  uint64_t staged_transfers() const;

  // The device arena (a device pointer: never dereference it on the host),
  // owned by this tier for its whole lifetime; for IPC export and direct
  // device-to-device placement. Object at `location` starts at
  // device_base() + location.offset.
  void* device_base() const;
  uint64_t arena_size() const { return arena_size_; }
  int device_index() const { return device_index_; }

 private:
  // HIP handles (arena, transfer lanes), the registered host ranges and the
  // transfer counts.
  struct Device;

  GpuTier(std::string name, int device_index, uint64_t size, std::unique_ptr<Device> device);
  // The result of a Read or Write: kTransferFail, logged, unless `error`
  // (a hipError_t) is success.
  Result<void> Transferred(int error, std::string_view op, uint64_t arena_offset,
                           uint64_t size) const;

  const int device_index_;
  const std::unique_ptr<Device> device_;
};

}  // namespace mooncake
