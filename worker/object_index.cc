#include "worker/object_index.h"

#include <sys/mman.h>

#include <cstdlib>

namespace mooncake {
namespace {

constexpr size_t kHugePage = size_t{2} << 20;

}  // namespace

void* AllocateSlotMemory(size_t count, size_t slot_bytes) {
  const size_t bytes = count * slot_bytes;
  if (bytes < kHugePage) return std::calloc(count, slot_bytes);
  // Whole huge pages: the kernel backs an aligned 2 MiB range with one page
  // (the machine's THP mode is often "madvise", which needs the advice).
  void* memory = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (memory == MAP_FAILED) return nullptr;
  (void)madvise(memory, bytes, MADV_HUGEPAGE);  // advice only: 4 KiB pages work too
  return memory;
}

void FreeSlotMemory(void* memory, size_t count, size_t slot_bytes) {
  if (memory == nullptr) return;
  const size_t bytes = count * slot_bytes;
  if (bytes < kHugePage) {
    std::free(memory);
  } else {
    munmap(memory, bytes);
  }
}

}  // namespace mooncake
