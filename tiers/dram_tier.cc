#include "tiers/dram_tier.h"

#include <sys/mman.h>
#include <unistd.h>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23  // Linux 5.14; older headers lack it
#endif

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <new>
#include <string>

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

void UnmapArena(std::byte* base, uint64_t capacity, int fd) {
  munmap(base, capacity);
  if (fd >= 0) close(fd);
}

// MemAvailable from /proc/meminfo in bytes, or 0 when it cannot be read.
uint64_t AvailableMemory() {
  std::ifstream meminfo("/proc/meminfo");
  for (std::string line; std::getline(meminfo, line);) {
    unsigned long long kib = 0;
    if (std::sscanf(line.c_str(), "MemAvailable: %llu kB", &kib) == 1) return kib << 10;
  }
  return 0;
}

// Populating more than the machine has free does not fail the call: the OOM
// killer picks a victim (maybe a neighbour) instead, so refuse up front.
// Cgroup limits are not read here; under one, population may still end in
// ENOMEM (reported) or the cgroup's OOM killer.
bool MemoryFitsArena(const std::string& name, uint64_t capacity) {
  const uint64_t available = AvailableMemory();
  if (available == 0 || capacity <= available) return true;
  MC_LOG_ERROR(
      "dram arena prefault refused tier={} capacity={} mem_available={}: not enough free "
      "memory; lower --dram-capacity or drop --dram-prefault",
      name, capacity, available);
  return false;
}

// Faults in every page for writing; returns 0 or an errno. MADV_POPULATE_WRITE
// reports ENOMEM where touching pages would end in the OOM killer; kernels
// before 5.14 reject it (EINVAL) and get one written byte per page instead.
int PopulateForWrite(std::byte* base, uint64_t capacity) {
  int rc = 0;
  do {
    rc = madvise(base, capacity, MADV_POPULATE_WRITE);
  } while (rc != 0 && errno == EINTR);  // restarts are cheap: done pages are skipped
  if (rc == 0) return 0;
  if (errno != EINVAL) return errno;
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  auto* bytes = reinterpret_cast<volatile unsigned char*>(base);
  for (uint64_t offset = 0; offset < capacity; offset += page) bytes[offset] = 0;
  return 0;
}

// --dram-prefault: the whole arena resident before the worker reports ready.
Result<void> PrefaultArena(const std::string& name, std::byte* base, uint64_t capacity) {
  const auto start = std::chrono::steady_clock::now();
  // Only a hint: 2 MiB pages where THP allows them (anonymous memory follows
  // transparent_hugepage/enabled, the memfd follows shmem_enabled, which is
  // often "never" and makes this a no-op). Fewer faults to populate.
  madvise(base, capacity, MADV_HUGEPAGE);
  if (int error = PopulateForWrite(base, capacity); error != 0) {
    MC_LOG_ERROR("dram arena prefault failed tier={} capacity={} errno={} reason=\"{}\"", name,
                 capacity, error, std::strerror(error));
    return Err(error == ENOMEM ? ErrorCode::kNoAvailableHandle : ErrorCode::kInternalError);
  }
  const auto elapsed = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::steady_clock::now() - start);
  MC_LOG_INFO("dram arena prefaulted tier={} capacity={} ms={}", name, capacity, elapsed.count());
  return {};
}

}  // namespace

Result<std::unique_ptr<DramTier>> DramTier::Create(std::string name, uint64_t capacity,
                                                   DramTierOptions options) {
  if (capacity == 0) return Err(ErrorCode::kInvalidParams);
  if (options.prefault && !MemoryFitsArena(name, capacity)) {
    return Err(ErrorCode::kNoAvailableHandle);
  }
  int fd = -1;
  std::byte* base = MapArena(name, capacity, &fd);
  if (base == nullptr) {
    MC_LOG_ERROR("dram arena mmap failed tier={} capacity={} errno={}", name, capacity, errno);
    return Err(ErrorCode::kInternalError);
  }
  if (options.prefault) {
    if (auto populated = PrefaultArena(name, base, capacity); !populated) {
      UnmapArena(base, capacity, fd);
      return Err(populated.error());
    }
  }
  try {
    auto* tier = new DramTier(std::move(name), base, capacity, fd);
    MC_LOG_INFO("dram tier ready tier={} capacity={} shareable={}", tier->name_, capacity, fd >= 0);
    return std::unique_ptr<DramTier>(tier);
  } catch (...) {
    // The tier never took ownership, so the mapping is ours to undo.
    UnmapArena(base, capacity, fd);
    return Err(ErrorCode::kInternalError);
  }
}

DramTier::DramTier(std::string name, std::byte* base, uint64_t size, int fd)
    : ArenaTier(std::move(name), size, kAlignment), arena_base_(base), arena_fd_(fd) {}

DramTier::~DramTier() { UnmapArena(arena_base_, arena_size_, arena_fd_); }

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
