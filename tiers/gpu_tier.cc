#include "tiers/gpu_tier.h"

#include <spdlog/fmt/fmt.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <new>
#include <utility>
#include <vector>

#include "common/log.h"
#include "common/machine_id.h"

#if defined(MOONCAKE_HAVE_GPU) && MOONCAKE_HAVE_GPU
// On NVIDIA this resolves to the patched copy of HIP's NVIDIA header that
// cmake/HipNvidia.cmake puts first on this file's include path.
#include <hip/hip_runtime_api.h>
#if defined(__HIP_PLATFORM_NVIDIA__)
// HIP's NVIDIA layer is a thin wrapper over the CUDA runtime: the raw CUDA
// error names what HIP 5.2 reports as hipErrorUnknown (see HipErrorText).
#include <cuda_runtime_api.h>
#endif
#define MOONCAKE_GPU_TIER_HIP 1
#else
#define MOONCAKE_GPU_TIER_HIP 0
#endif

#ifndef MOONCAKE_GPU_PLATFORM
#define MOONCAKE_GPU_PLATFORM "unknown"
#endif

namespace mooncake {

bool GpuTier::BuiltWithHip() { return MOONCAKE_GPU_TIER_HIP != 0; }

#if MOONCAKE_GPU_TIER_HIP

namespace {

// Describes `error`, the code a HIP call just returned, and clears the
// runtime's last error (so it is not reported again to an unrelated caller):
// call it once, right after the failure, before other HIP calls that might
// fail too.
//
// HIP 5.2's NVIDIA layer maps every CUDA error it does not know to
// hipErrorUnknown (999): among them 803 (driver/runtime mismatch), 804
// (forward compatibility), 46 (devices unavailable), 34 (stub libcuda) and
// 36. The CUDA runtime's last error still holds the real one, so it is
// appended then.
std::string HipErrorText(hipError_t error) {
#if defined(__HIP_PLATFORM_NVIDIA__)
  const cudaError_t raw = cudaGetLastError();  // reads and clears
#else
  (void)hipGetLastError();
#endif
  std::string text = fmt::format("{} ({}): {}", hipGetErrorName(error), static_cast<int>(error),
                                 hipGetErrorString(error));
#if defined(__HIP_PLATFORM_NVIDIA__)
  if (error == hipErrorUnknown && raw != cudaSuccess && raw != cudaErrorUnknown) {
    text += fmt::format(" [CUDA {} ({}): {}]", cudaGetErrorName(raw), static_cast<int>(raw),
                        cudaGetErrorString(raw));
  }
#endif
  return text;
}

void SetWhy(std::string* why, std::string text) {
  if (why != nullptr) *why = std::move(text);
}

}  // namespace

namespace {

// One transfer at a time: a stream and a pinned staging buffer in two
// halves of kStagingBytes / 2, each with an event recorded after the copy
// that last used it. A tier holds kTransferLanes of them, so that many
// transfers (CPU copies and DMAs) run at once.
struct TransferLane {
  hipStream_t stream = nullptr;
  std::byte* staging = nullptr;
  hipEvent_t half_done[2] = {nullptr, nullptr};

  // One DMA between the arena and registered host memory; waits for it.
  hipError_t DirectCopy(void* dst, const void* src, uint64_t size, hipMemcpyKind kind) {
    hipError_t error = hipMemcpyAsync(dst, src, size, kind, stream);
    hipError_t sync = hipStreamSynchronize(stream);  // even after a failed issue
    return error != hipSuccess ? error : sync;
  }
  // Through the staging halves, the CPU copy of one chunk overlapping the
  // DMA of the other; both drain the stream before they return.
  hipError_t StagedWrite(std::byte* dst, std::span<const std::byte> data);
  hipError_t StagedRead(const std::byte* src, std::span<std::byte> out);
  // What was created; failures are ignored (nothing to do at teardown).
  void Destroy();
};

}  // namespace

struct GpuTier::Device {
  int index = 0;
  void* arena = nullptr;
  TransferLane lanes[kTransferLanes];
  // The arena's IPC handle (bytes of hipIpcMemHandle_t); empty when the
  // runtime cannot export it, and then plan-based writes skip this tier.
  std::string ipc_handle;
  std::atomic<uint64_t> direct_transfers{0};
  std::atomic<uint64_t> staged_transfers{0};

  // Lanes not in use, as indexes into `lanes`.
  std::mutex lanes_mu;
  std::condition_variable lane_freed;
  std::vector<int> free_lanes;

  // Pinned buffers for ReadLent, and those not lent out.
  std::byte* read_buffers[kReadBuffers] = {};
  std::mutex read_buffers_mu;
  std::vector<int> free_read_buffers;

  // Host ranges pinned by RegisterHostRange, unregistered at teardown.
  mutable std::mutex ranges_mu;
  std::vector<std::span<std::byte>> registered;

  bool InRegisteredRange(const std::byte* data, uint64_t size) const {
    std::lock_guard lock(ranges_mu);
    return std::ranges::any_of(registered, [&](std::span<std::byte> range) {
      return data >= range.data() && size <= range.size() &&
             static_cast<uint64_t>(data - range.data()) <= range.size() - size;
    });
  }

  // A free lane, waiting for one while all are busy; back with Release.
  TransferLane& Acquire(int* lane) {
    std::unique_lock lock(lanes_mu);
    lane_freed.wait(lock, [&] { return !free_lanes.empty(); });
    *lane = free_lanes.back();
    free_lanes.pop_back();
    return lanes[*lane];
  }
  void Release(int lane) {
    {
      std::lock_guard lock(lanes_mu);
      free_lanes.push_back(lane);
    }
    lane_freed.notify_one();
  }

  // Runs `copy(lane)` on a free lane with this device selected, and counts
  // it as a direct or a staged transfer.
  template <typename Copy>
  hipError_t OnLane(bool direct, Copy&& copy) {
    if (hipError_t error = hipSetDevice(index); error != hipSuccess) return error;
    int lane = 0;
    hipError_t error = copy(Acquire(&lane));
    Release(lane);
    ++(direct ? direct_transfers : staged_transfers);
    return error;
  }

  ~Device() {
    // Best effort: nothing useful can be done with a failure at teardown.
    // HipErrorText runs before the log call: it clears the error even if a
    // build compiled the log statement out.
    if (hipError_t error = hipSetDevice(index); error != hipSuccess) {
      const std::string text = HipErrorText(error);
      MC_LOG_WARN("vram teardown cannot select device={} error={}", index, text);
    }
    for (TransferLane& lane : lanes) lane.Destroy();
    for (std::byte* buffer : read_buffers) {
      if (buffer != nullptr) (void)hipHostFree(buffer);
    }
    for (std::span<std::byte> range : registered) (void)hipHostUnregister(range.data());
    if (arena != nullptr) {
      if (hipError_t error = hipFree(arena); error != hipSuccess) {
        const std::string text = HipErrorText(error);
        MC_LOG_WARN("vram arena free failed device={} error={}", index, text);
      }
    }
    (void)hipGetLastError();  // ignored failures above must not reach a later caller
  }
};

void TransferLane::Destroy() {
  if (stream != nullptr) {
    (void)hipStreamSynchronize(stream);
    (void)hipStreamDestroy(stream);
  }
  for (hipEvent_t event : half_done) {
    if (event != nullptr) (void)hipEventDestroy(event);
  }
  if (staging != nullptr) (void)hipHostFree(staging);
}

Result<int> GpuTier::DeviceCount() {
  int count = 0;
  if (hipGetDeviceCount(&count) != hipSuccess) {
    (void)hipGetLastError();  // ProbeReason() asks again and describes it
    return Err(ErrorCode::kTierNotFound);
  }
  return count;
}

std::string GpuTier::ProbeReason() {
  int count = 0;
  hipError_t error = hipGetDeviceCount(&count);
  if (error != hipSuccess) {
    // HipErrorText also clears the error.
    return fmt::format("no usable HIP device ({} platform): hipGetDeviceCount failed with {}",
                       MOONCAKE_GPU_PLATFORM, HipErrorText(error));
  }
  if (count <= 0) {
    return fmt::format("no HIP device ({} platform): hipGetDeviceCount returned 0",
                       MOONCAKE_GPU_PLATFORM);
  }
  std::string text =
      fmt::format("{} HIP device(s) on the {} platform:", count, MOONCAKE_GPU_PLATFORM);
  for (int i = 0; i < count; ++i) {
    hipDeviceProp_t prop{};
    if (hipError_t e = hipGetDeviceProperties(&prop, i); e == hipSuccess) {
      text += fmt::format(" [{}] {} ({} MiB)", i, prop.name,
                          static_cast<uint64_t>(prop.totalGlobalMem) >> 20);
    } else {
      text += fmt::format(" [{}] (properties unavailable: {})", i, HipErrorText(e));
    }
  }
  return text;
}

Result<std::unique_ptr<GpuTier>> GpuTier::Create(std::string name, uint64_t capacity,
                                                 int device_index, std::string* why) {
  if (capacity == 0) {
    SetWhy(why, "vram capacity must be > 0");
    return Err(ErrorCode::kInvalidParams);
  }
  auto count = DeviceCount();
  if (!count || *count <= 0) {
    SetWhy(why, ProbeReason());
    return Err(ErrorCode::kTierNotFound);
  }
  if (device_index < 0 || device_index >= *count) {
    SetWhy(why, fmt::format("gpu device index {} out of range: {} device(s) present", device_index,
                            *count));
    return Err(ErrorCode::kInvalidParams);
  }

  // Every failure below releases what was obtained through ~Device.
  // `error_text` is HipErrorText of the failure (which cleared it).
  auto fail_with = [&](std::string_view call, const std::string& error_text) {
    std::string text = fmt::format("{} on device {} failed: {}", call, device_index, error_text);
    MC_LOG_ERROR("vram tier {} cannot open: {}", name, text);
    SetWhy(why, std::move(text));
    return Err(ErrorCode::kInternalError);
  };
  auto fail = [&](std::string_view call, hipError_t error) {
    return fail_with(call, HipErrorText(error));
  };

  std::unique_ptr<Device> device;
  try {
    device = std::make_unique<Device>();
  } catch (const std::bad_alloc&) {
    SetWhy(why, "out of host memory");
    return Err(ErrorCode::kInternalError);
  }
  device->index = device_index;
  if (hipError_t e = hipSetDevice(device_index); e != hipSuccess) return fail("hipSetDevice", e);
  if (hipError_t e = hipMalloc(&device->arena, capacity); e != hipSuccess) {
    device->arena = nullptr;
    // Described before hipMemGetInfo, which could overwrite the last error.
    const std::string error_text = HipErrorText(e);
    size_t free_bytes = 0;
    size_t total_bytes = 0;
    std::string call = fmt::format("hipMalloc({} bytes)", capacity);
    if (hipMemGetInfo(&free_bytes, &total_bytes) == hipSuccess) {
      call += fmt::format(" with {} of {} bytes free", free_bytes, total_bytes);
    } else {
      (void)hipGetLastError();
    }
    return fail_with(call, error_text);
  }
  for (TransferLane& lane : device->lanes) {
    if (hipError_t e = hipStreamCreateWithFlags(&lane.stream, hipStreamNonBlocking);
        e != hipSuccess) {
      lane.stream = nullptr;
      return fail("hipStreamCreateWithFlags", e);
    }
    for (hipEvent_t& event : lane.half_done) {
      if (hipError_t e = hipEventCreateWithFlags(&event, hipEventDisableTiming); e != hipSuccess) {
        event = nullptr;
        return fail("hipEventCreateWithFlags", e);
      }
    }
    void* staging = nullptr;
    if (hipError_t e = hipHostMalloc(&staging, kStagingBytes, hipHostMallocDefault);
        e != hipSuccess) {
      return fail(fmt::format("hipHostMalloc({} bytes)", kStagingBytes), e);
    }
    lane.staging = static_cast<std::byte*>(staging);
  }
  for (std::byte*& buffer : device->read_buffers) {
    void* pinned = nullptr;
    if (hipError_t e = hipHostMalloc(&pinned, kStagingBytes, hipHostMallocDefault);
        e != hipSuccess) {
      return fail(fmt::format("hipHostMalloc({} bytes)", kStagingBytes), e);
    }
    buffer = static_cast<std::byte*>(pinned);
  }
  hipIpcMemHandle_t ipc{};
  const hipError_t ipc_error = hipIpcGetMemHandle(&ipc, device->arena);
  if (ipc_error != hipSuccess) {
    const std::string text = HipErrorText(ipc_error);
    MC_LOG_WARN("vram arena cannot be exported for IPC tier={} error={}", name, text);
  }

  try {
    // Inside the try: these may throw bad_alloc as well.
    for (int lane = 0; lane < kTransferLanes; ++lane) device->free_lanes.push_back(lane);
    for (int b = 0; b < kReadBuffers; ++b) device->free_read_buffers.push_back(b);
    if (ipc_error == hipSuccess) {
      device->ipc_handle.assign(reinterpret_cast<const char*>(&ipc), sizeof(ipc));
    }
    std::unique_ptr<GpuTier> tier(
        new GpuTier(std::move(name), device_index, capacity, std::move(device)));
    MC_LOG_INFO("vram tier ready tier={} device={} capacity={} platform={}", tier->name_,
                device_index, capacity, MOONCAKE_GPU_PLATFORM);
    return tier;
  } catch (const std::bad_alloc&) {
    // `device` may have been moved into the failed constructor's argument;
    // either way its destructor has released the HIP resources.
    SetWhy(why, "out of host memory");
    return Err(ErrorCode::kInternalError);
  }
}

GpuTier::GpuTier(std::string name, int device_index, uint64_t size, std::unique_ptr<Device> device)
    : ArenaTier(std::move(name), size, kAlignment),
      device_index_(device_index),
      device_(std::move(device)) {}

GpuTier::~GpuTier() = default;

void* GpuTier::device_base() const { return device_->arena; }

Result<SharedRegion> GpuTier::ExportRegion() const {
  if (device_->ipc_handle.empty()) return Err(ErrorCode::kTierNotFound);
  // machine_id: SharedMapping::Map refuses a region from another machine,
  // and a region without one.
  return SharedRegion{.kind = SharedRegion::Kind::kDeviceIpc,
                      .ipc_handle = device_->ipc_handle,
                      .device_index = device_index_,
                      .size = arena_size_,
                      .machine_id = MachineId()};
}

Result<void> GpuTier::RegisterHostRange(std::span<std::byte> range, std::string* why) {
  Device& d = *device_;
  // Held through the registration, so two overlapping calls cannot both pass
  // the check; transfers only wait for it in InRegisteredRange.
  std::lock_guard lock(d.ranges_mu);
  const bool overlaps = std::ranges::any_of(d.registered, [&](std::span<std::byte> other) {
    return range.data() < other.data() + other.size() && other.data() < range.data() + range.size();
  });
  if (range.empty() || overlaps) {
    SetWhy(why, range.empty() ? "an empty host range" : "overlaps a registered host range");
    return Err(ErrorCode::kInvalidParams);
  }
  hipError_t error = hipSetDevice(d.index);
  // Portable: the pinning holds for every device's context, not just this one.
  if (error == hipSuccess) {
    error = hipHostRegister(range.data(), range.size(), hipHostRegisterPortable);
  }
  if (error != hipSuccess) {
    std::string text = fmt::format("hipHostRegister({} bytes) on device {} failed: {}",
                                   range.size(), d.index, HipErrorText(error));
    MC_LOG_ERROR("vram tier {} cannot pin host memory: {}", name_, text);
    SetWhy(why, std::move(text));
    return Err(ErrorCode::kTransferFail);
  }
  d.registered.push_back(range);
  MC_LOG_INFO("vram tier {} pinned host memory bytes={} for direct transfers", name_, range.size());
  return {};
}

uint64_t GpuTier::direct_transfers() const { return device_->direct_transfers.load(); }

uint64_t GpuTier::staged_transfers() const { return device_->staged_transfers.load(); }

hipError_t TransferLane::StagedWrite(std::byte* dst, std::span<const std::byte> data) {
  constexpr uint64_t kHalf = GpuTier::kStagingBytes / 2;
  hipError_t error = hipSuccess;
  uint64_t done = 0;
  for (int chunk = 0; error == hipSuccess && done < data.size(); ++chunk) {
    const int half = chunk & 1;
    const uint64_t n = std::min<uint64_t>(kHalf, data.size() - done);
    std::byte* stage = staging + half * kHalf;
    // This half was last read by the DMA issued two chunks ago.
    if (chunk >= 2 && (error = hipEventSynchronize(half_done[half])) != hipSuccess) break;
    std::memcpy(stage, data.data() + done, n);
    error = hipMemcpyAsync(dst + done, stage, n, hipMemcpyHostToDevice, stream);
    if (error == hipSuccess) error = hipEventRecord(half_done[half], stream);
    done += n;
  }
  // Always drain the stream, so no copy outlives the lock or this call.
  hipError_t sync = hipStreamSynchronize(stream);
  return error != hipSuccess ? error : sync;
}

hipError_t TransferLane::StagedRead(const std::byte* src, std::span<std::byte> out) {
  constexpr uint64_t kHalf = GpuTier::kStagingBytes / 2;
  // A chunk copied into a staging half but not yet handed to `out`.
  struct Pending {
    uint64_t out_offset = 0;
    uint64_t size = 0;
    bool active = false;
  };
  Pending pending[2];
  auto drain = [&](int half) -> hipError_t {
    if (!pending[half].active) return hipSuccess;
    if (hipError_t e = hipEventSynchronize(half_done[half]); e != hipSuccess) return e;
    std::memcpy(out.data() + pending[half].out_offset, staging + half * kHalf, pending[half].size);
    pending[half].active = false;
    return hipSuccess;
  };
  hipError_t error = hipSuccess;
  uint64_t done = 0;
  int chunk = 0;
  for (; error == hipSuccess && done < out.size(); ++chunk) {
    const int half = chunk & 1;
    const uint64_t n = std::min<uint64_t>(kHalf, out.size() - done);
    // Hand the chunk that used this half two steps ago to the caller while
    // the previous chunk's DMA is still running.
    if ((error = drain(half)) != hipSuccess) break;
    error = hipMemcpyAsync(staging + half * kHalf, src + done, n, hipMemcpyDeviceToHost, stream);
    if (error == hipSuccess) error = hipEventRecord(half_done[half], stream);
    if (error == hipSuccess) pending[half] = {.out_offset = done, .size = n, .active = true};
    done += n;
  }
  // The older of the two outstanding chunks sits in the half `chunk` would use.
  if (error == hipSuccess) error = drain(chunk & 1);
  if (error == hipSuccess) error = drain((chunk + 1) & 1);
  hipError_t sync = hipStreamSynchronize(stream);
  return error != hipSuccess ? error : sync;
}

Result<void> GpuTier::Write(const TierLocation& location, uint64_t offset,
                            std::span<const std::byte> data) {
  if (!InBounds(location, offset, data.size())) return Err(ErrorCode::kInvalidParams);
  if (data.empty()) return {};
  Device& d = *device_;
  auto* dst = static_cast<std::byte*>(d.arena) + location.offset + offset;
  const bool direct = d.InRegisteredRange(data.data(), data.size());
  hipError_t error = d.OnLane(direct, [&](TransferLane& lane) {
    return direct ? lane.DirectCopy(dst, data.data(), data.size(), hipMemcpyHostToDevice)
                  : lane.StagedWrite(dst, data);
  });
  return Transferred(error, "write", location.offset + offset, data.size());
}

Result<void> GpuTier::Read(const TierLocation& location, uint64_t offset,
                           std::span<std::byte> out) const {
  if (!InBounds(location, offset, out.size())) return Err(ErrorCode::kInvalidParams);
  if (out.empty()) return {};
  Device& d = *device_;
  const auto* src = static_cast<const std::byte*>(d.arena) + location.offset + offset;
  const bool direct = d.InRegisteredRange(out.data(), out.size());
  hipError_t error = d.OnLane(direct, [&](TransferLane& lane) {
    return direct ? lane.DirectCopy(out.data(), src, out.size(), hipMemcpyDeviceToHost)
                  : lane.StagedRead(src, out);
  });
  return Transferred(error, "read", location.offset + offset, out.size());
}

namespace {

// A read buffer of the tier's, lent until destroyed.
class LentReadBuffer : public LentBytes {
 public:
  LentReadBuffer(std::mutex& mu, std::vector<int>& free, int index, const std::byte* data,
                 uint64_t size)
      : mu_(mu), free_(free), index_(index), bytes_(data, size) {}
  ~LentReadBuffer() override {
    std::lock_guard lock(mu_);
    free_.push_back(index_);
  }
  std::span<const std::byte> bytes() const override { return bytes_; }

 private:
  std::mutex& mu_;
  std::vector<int>& free_;
  const int index_;
  const std::span<const std::byte> bytes_;
};

}  // namespace

Result<std::unique_ptr<LentBytes>> GpuTier::ReadLent(const TierLocation& location, uint64_t offset,
                                                     uint64_t size) const {
  if (!InBounds(location, offset, size)) return Err(ErrorCode::kInvalidParams);
  if (size == 0 || size > kStagingBytes) return Err(ErrorCode::kNoAvailableHandle);
  Device& d = *device_;
  std::unique_ptr<LentBytes> lent;
  std::byte* buffer = nullptr;
  {
    std::lock_guard lock(d.read_buffers_mu);
    if (d.free_read_buffers.empty()) return Err(ErrorCode::kNoAvailableHandle);
    const int index = d.free_read_buffers.back();
    buffer = d.read_buffers[index];
    try {  // given back by ~LentReadBuffer from here on, however this returns
      lent = std::make_unique<LentReadBuffer>(d.read_buffers_mu, d.free_read_buffers, index, buffer,
                                              size);
    } catch (const std::bad_alloc&) {
      return Err(ErrorCode::kInternalError);
    }
    d.free_read_buffers.pop_back();
  }
  const auto* src = static_cast<const std::byte*>(d.arena) + location.offset + offset;
  hipError_t error = d.OnLane(/*direct=*/true, [&](TransferLane& lane) {
    return lane.DirectCopy(buffer, src, size, hipMemcpyDeviceToHost);
  });
  if (auto read = Transferred(error, "read", location.offset + offset, size); !read) {
    return Err(read.error());
  }
  return lent;
}

Result<void> GpuTier::Transferred(int error, std::string_view op, uint64_t arena_offset,
                                  uint64_t size) const {
  if (error == hipSuccess) return {};
  const std::string text = HipErrorText(static_cast<hipError_t>(error));
  MC_LOG_ERROR("vram {} failed tier={} offset={} size={} error={}", op, name_, arena_offset, size,
               text);
  return Err(ErrorCode::kTransferFail);
}

#else  // !MOONCAKE_GPU_TIER_HIP

#ifndef MOONCAKE_GPU_DISABLED_REASON
#define MOONCAKE_GPU_DISABLED_REASON "cmake/HipNvidia.cmake was not included"
#endif

// Never instantiated: Create always fails in a build without HIP.
struct GpuTier::Device {};

Result<int> GpuTier::DeviceCount() { return Err(ErrorCode::kTierNotFound); }

std::string GpuTier::ProbeReason() {
  return std::string("built without HIP: ") + MOONCAKE_GPU_DISABLED_REASON;
}

Result<std::unique_ptr<GpuTier>> GpuTier::Create(std::string /*name*/, uint64_t capacity,
                                                 int /*device_index*/, std::string* why) {
  if (why != nullptr) {
    *why = capacity == 0 ? std::string("vram capacity must be > 0") : ProbeReason();
  }
  return Err(capacity == 0 ? ErrorCode::kInvalidParams : ErrorCode::kTierNotFound);
}

GpuTier::GpuTier(std::string name, int device_index, uint64_t size, std::unique_ptr<Device> device)
    : ArenaTier(std::move(name), size, kAlignment),
      device_index_(device_index),
      device_(std::move(device)) {}

GpuTier::~GpuTier() = default;

void* GpuTier::device_base() const { return nullptr; }

Result<SharedRegion> GpuTier::ExportRegion() const { return Err(ErrorCode::kTierNotFound); }

Result<void> GpuTier::Write(const TierLocation&, uint64_t, std::span<const std::byte>) {
  return Err(ErrorCode::kInternalError);
}

Result<void> GpuTier::Read(const TierLocation&, uint64_t, std::span<std::byte>) const {
  return Err(ErrorCode::kInternalError);
}

Result<void> GpuTier::RegisterHostRange(std::span<std::byte>, std::string* why) {
  if (why != nullptr) *why = ProbeReason();
  return Err(ErrorCode::kTierNotFound);
}

Result<std::unique_ptr<LentBytes>> GpuTier::ReadLent(const TierLocation&, uint64_t,
                                                     uint64_t) const {
  return Err(ErrorCode::kInternalError);
}

uint64_t GpuTier::direct_transfers() const { return 0; }
uint64_t GpuTier::staged_transfers() const { return 0; }

#endif  // MOONCAKE_GPU_TIER_HIP

}  // namespace mooncake
