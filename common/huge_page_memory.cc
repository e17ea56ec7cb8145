#include "common/huge_page_memory.h"

#include <sys/mman.h>

#include <cstdlib>

namespace mooncake {
namespace {

constexpr size_t kHugePage = size_t{2} << 20;

}  // namespace

void* AllocateHugePageMemory(size_t bytes) {
  if (bytes < kHugePage) return std::calloc(1, bytes == 0 ? 1 : bytes);
  void* memory = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (memory == MAP_FAILED) return nullptr;
  // Advice only: where it is refused, 4 KiB pages serve the same.
  (void)madvise(memory, bytes, MADV_HUGEPAGE);
  return memory;
}

void FreeHugePageMemory(void* memory, size_t bytes) {
  if (memory == nullptr) return;
  if (bytes < kHugePage) {
    std::free(memory);
  } else {
    munmap(memory, bytes);
  }
}

}  // namespace mooncake
