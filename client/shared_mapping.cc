#include "client/shared_mapping.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string_view>

#include "common/log.h"
#include "common/machine_id.h"

#if defined(MOONCAKE_HAVE_GPU)
#include <hip/hip_runtime_api.h>
#endif

namespace mooncake {
namespace {

void SetWhy(std::string* why, std::string text) {
  if (why != nullptr) *why = std::move(text);
}

// A /proc/<pid>/fd/<n> path outlives nothing: if the worker died, the pid
// may now be another process and the fd another file. Map only a memfd the
// worker named as its arena, of the advertised size.
Result<void> CheckIsArena(int fd, const MemoryRegionHandle& region) {
  char target[256] = {};
  ssize_t n = readlink(region.path.c_str(), target, sizeof(target) - 1);
  struct stat st {};
  if (n <= 0 ||
      std::string_view(target, static_cast<size_t>(n)).rfind("/memfd:mooncake-", 0) != 0 ||
      fstat(fd, &st) != 0 || static_cast<uint64_t>(st.st_size) != region.region_size) {
    return Err(ErrorCode::kTransferFail);
  }
  return {};
}

}  // namespace

Result<std::unique_ptr<SharedMapping>> SharedMapping::Map(const MemoryRegionHandle& region,
                                                          uint64_t offset, uint64_t length,
                                                          std::string* why) {
  if (region.kind == MemoryRegionHandle::Kind::kNone) {
    SetWhy(why, "the object's tier cannot be mapped (read it with Get)");
    return Err(ErrorCode::kInvalidParams);
  }
  if (length == 0 || offset > region.region_size || length > region.region_size - offset) {
    SetWhy(why, "range outside the region");
    return Err(ErrorCode::kInvalidParams);
  }
  if (region.machine_id != MachineId()) {
    SetWhy(why, "the region belongs to a worker on another machine");
    return Err(ErrorCode::kInvalidParams);
  }
  std::unique_ptr<SharedMapping> mapping(new SharedMapping());
  mapping->length_ = length;
  if (region.kind == MemoryRegionHandle::Kind::kHostFile) {
    int fd = open(region.path.c_str(), O_RDWR | O_CLOEXEC);
    if (fd < 0) {
      SetWhy(why, "open " + region.path + ": " + std::strerror(errno));
      return Err(ErrorCode::kTransferFail);
    }
    if (auto checked = CheckIsArena(fd, region); !checked) {
      close(fd);
      SetWhy(why, region.path + " is not the worker's arena (the worker restarted?)");
      return Err(checked.error());
    }
    // mmap wants a page-aligned file offset: map from the page that holds
    // the range's first byte.
    const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
    const uint64_t start = offset / page * page;
    mapping->map_length_ = offset - start + length;
    void* base = mmap(nullptr, mapping->map_length_, PROT_READ | PROT_WRITE, MAP_SHARED, fd,
                      static_cast<off_t>(start));
    int mmap_errno = errno;
    close(fd);  // the mapping keeps the memory alive
    if (base == MAP_FAILED) {
      SetWhy(why, "mmap " + region.path + ": " + std::strerror(mmap_errno));
      return Err(ErrorCode::kTransferFail);
    }
    mapping->map_base_ = base;
    mapping->host_range_ = static_cast<std::byte*>(base) + (offset - start);
    return mapping;
  }
#if defined(MOONCAKE_HAVE_GPU)
  hipIpcMemHandle_t handle{};
  if (region.ipc_handle.size() != sizeof(handle)) {
    SetWhy(why, "malformed IPC handle");
    return Err(ErrorCode::kInvalidParams);
  }
  std::memcpy(&handle, region.ipc_handle.data(), sizeof(handle));
  int count = 0;
  if (hipGetDeviceCount(&count) != hipSuccess || region.device_index < 0 ||
      region.device_index >= count) {
    (void)hipGetLastError();
    SetWhy(why, "no HIP device " + std::to_string(region.device_index) + " in this process");
    return Err(ErrorCode::kTierNotFound);
  }
  if (hipError_t e = hipSetDevice(region.device_index); e != hipSuccess) {
    (void)hipGetLastError();
    SetWhy(why, std::string("hipSetDevice: ") + hipGetErrorString(e));
    return Err(ErrorCode::kTransferFail);
  }
  void* base = nullptr;
  if (hipError_t e = hipIpcOpenMemHandle(&base, handle, hipIpcMemLazyEnablePeerAccess);
      e != hipSuccess) {
    (void)hipGetLastError();
    SetWhy(why, std::string("hipIpcOpenMemHandle: ") + hipGetErrorString(e));
    return Err(ErrorCode::kTransferFail);
  }
  mapping->device_base_ = base;
  mapping->device_range_ = static_cast<std::byte*>(base) + offset;
  mapping->device_index_ = region.device_index;
  return mapping;
#else
  SetWhy(why, "device memory, but this build has no HIP");
  return Err(ErrorCode::kTierNotFound);
#endif
}

SharedMapping::~SharedMapping() {
  if (map_base_ != nullptr) munmap(map_base_, map_length_);
#if defined(MOONCAKE_HAVE_GPU)
  if (device_base_ != nullptr) {
    (void)hipSetDevice(device_index_);
    if (hipError_t e = hipIpcCloseMemHandle(device_base_); e != hipSuccess) {
      MC_LOG_WARN("hipIpcCloseMemHandle failed error={}", hipGetErrorString(e));
    }
  }
#endif
}

std::span<std::byte> SharedMapping::host_bytes() const {
  if (host_range_ == nullptr) return {};
  return {host_range_, length_};
}

void* SharedMapping::device_pointer() const { return device_range_; }

bool SharedMapping::InRange(uint64_t offset, uint64_t len) const {
  return offset <= length_ && len <= length_ - offset;
}

Result<void> SharedMapping::CopyIn(uint64_t offset, std::span<const std::byte> data) {
  if (!InRange(offset, data.size())) return Err(ErrorCode::kInvalidParams);
  if (data.empty()) return {};
  if (host_range_ != nullptr) {
    std::memcpy(host_range_ + offset, data.data(), data.size());
    return {};
  }
#if defined(MOONCAKE_HAVE_GPU)
  (void)hipSetDevice(device_index_);
  hipError_t e = hipMemcpy(device_range_ + offset, data.data(), data.size(), hipMemcpyHostToDevice);
  // From pageable memory hipMemcpy may return before the DMA has landed; the
  // producer commits right after this, and the worker must see the bytes.
  if (e == hipSuccess) e = hipStreamSynchronize(nullptr);
  if (e != hipSuccess) {
    (void)hipGetLastError();
    MC_LOG_WARN("plan copy to device failed error={}", hipGetErrorString(e));
    return Err(ErrorCode::kTransferFail);
  }
  return {};
#else
  return Err(ErrorCode::kTierNotFound);
#endif
}

Result<void> SharedMapping::CopyOut(uint64_t offset, std::span<std::byte> out) const {
  if (!InRange(offset, out.size())) return Err(ErrorCode::kInvalidParams);
  if (out.empty()) return {};
  if (host_range_ != nullptr) {
    std::memcpy(out.data(), host_range_ + offset, out.size());
    return {};
  }
#if defined(MOONCAKE_HAVE_GPU)
  (void)hipSetDevice(device_index_);
  if (hipError_t e =
          hipMemcpy(out.data(), device_range_ + offset, out.size(), hipMemcpyDeviceToHost);
      e != hipSuccess) {
    MC_LOG_WARN("placement copy from device failed error={}", hipGetErrorString(e));
    return Err(ErrorCode::kTransferFail);
  }
  return {};
#else
  return Err(ErrorCode::kTierNotFound);
#endif
}

}  // namespace mooncake
