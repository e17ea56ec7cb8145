#include "tiers/dram_tier.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <new>

#include "common/log.h"
#include "common/machine_id.h"

namespace mooncake {

namespace {

// A memfd-backed arena, so producers on this node can map the same pages
// (plan-based writes). Falls back to an anonymous private mapping, which
// works the same for the worker but cannot be shared: fd is then -1.
std::byte* MapArena(const std::string& name, uint64_t capacity, int* fd) {
  *fd = memfd_create(("mooncake-" + name).c_str(), MFD_CLOEXEC);
  if (*fd >= 0 && ftruncate(*fd, static_cast<off_t>(capacity)) != 0) {
    MC_LOG_WARN("dram arena memfd resize failed tier={} errno={}", name, errno);
    close(*fd);
    *fd = -1;
  }
  void* base =
      *fd >= 0 ? mmap(nullptr, capacity, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, *fd, 0)
               : MAP_FAILED;
  if (base == MAP_FAILED) {
    if (*fd >= 0) close(*fd);
    *fd = -1;
    base = mmap(nullptr, capacity, PROT_READ | PROT_WRITE,
                MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  }
  return base == MAP_FAILED ? nullptr : static_cast<std::byte*>(base);
}

}  // namespace

Result<std::unique_ptr<DramTier>> DramTier::Create(std::string name, uint64_t capacity) {
  if (capacity == 0) return Err(ErrorCode::kInvalidParams);
  int fd = -1;
  std::byte* base = MapArena(name, capacity, &fd);
  if (base == nullptr) {
    MC_LOG_ERROR("dram arena mmap failed tier={} capacity={} errno={}", name, capacity, errno);
    return Err(ErrorCode::kInternalError);
  }
  try {
    auto* tier = new DramTier(std::move(name), base, capacity, fd);
    MC_LOG_INFO("dram tier ready tier={} capacity={} shareable={}", tier->name_, capacity, fd >= 0);
    return std::unique_ptr<DramTier>(tier);
  } catch (...) {
    // The tier never took ownership, so the mapping is ours to undo.
    munmap(base, capacity);
    if (fd >= 0) close(fd);
    return Err(ErrorCode::kInternalError);
  }
}

DramTier::DramTier(std::string name, std::byte* base, uint64_t size, int fd)
    : ArenaTier(std::move(name), size, kAlignment), arena_base_(base), arena_fd_(fd) {}

DramTier::~DramTier() {
  munmap(arena_base_, arena_size_);
  if (arena_fd_ >= 0) close(arena_fd_);
}

Result<SharedRegion> DramTier::ExportRegion() const {
  if (arena_fd_ < 0) return Err(ErrorCode::kTierNotFound);
  // Another process of the same user opens the memfd through procfs; the
  // kernel checks it may inspect this process, so other users cannot.
  return SharedRegion{
      .kind = SharedRegion::Kind::kHostFile,
      .path = "/proc/" + std::to_string(getpid()) + "/fd/" + std::to_string(arena_fd_),
      .size = arena_size_,
      .machine_id = MachineId()};
}

Result<void> DramTier::Write(const TierLocation& location, uint64_t offset,
                             std::span<const std::byte> data) {
  if (!InBounds(location, offset, data.size())) return Err(ErrorCode::kInvalidParams);
  if (!data.empty()) std::memcpy(arena_base_ + location.offset + offset, data.data(), data.size());
  return {};
}

Result<void> DramTier::Read(const TierLocation& location, uint64_t offset,
                            std::span<std::byte> out) const {
  if (!InBounds(location, offset, out.size())) return Err(ErrorCode::kInvalidParams);
  if (!out.empty()) std::memcpy(out.data(), arena_base_ + location.offset + offset, out.size());
  return {};
}

}  // namespace mooncake
