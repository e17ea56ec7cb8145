#pragma once

// Memory for large hash tables that are probed at random (the worker's
// object index, the client's owner cache): from the kernel, with
// MADV_HUGEPAGE, once a table reaches 2 MiB. A random probe into a table of
// millions of entries is then one cache miss instead of a cache miss and a
// TLB miss (whose page walk misses too). The advice matters where the
// machine's transparent huge pages are in "madvise" mode, Debian's default;
// without huge pages the memory works as ordinary pages.
//
// Thread-safety: the functions are safe from any thread.

#include <cstddef>
#include <new>

namespace mooncake {

// Zeroed memory of `bytes`, or null when there is none. Free it with
// FreeHugePageMemory and the same `bytes`.
void* AllocateHugePageMemory(size_t bytes);
void FreeHugePageMemory(void* memory, size_t bytes);

// A std::allocator for containers of such tables (std::vector<Slot,
// HugePageAllocator<Slot>>). Stateless: any two compare equal.
template <typename T>
struct HugePageAllocator {
  using value_type = T;
  HugePageAllocator() = default;
  template <typename U>
  HugePageAllocator(const HugePageAllocator<U>&) {}  // NOLINT: rebinding converts implicitly

  T* allocate(size_t count) {
    void* memory = AllocateHugePageMemory(count * sizeof(T));
    if (memory == nullptr) throw std::bad_alloc();
    return static_cast<T*>(memory);
  }
  void deallocate(T* memory, size_t count) { FreeHugePageMemory(memory, count * sizeof(T)); }

  template <typename U>
  bool operator==(const HugePageAllocator<U>&) const {
    return true;
  }
};

}  // namespace mooncake
