// common/huge_page_memory.h: tables below and above 2 MiB get zeroed,
// writable memory, and a vector with HugePageAllocator grows across the
// boundary keeping its elements.

#include "common/huge_page_memory.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

namespace mooncake {
namespace {

TEST(HugePageMemoryTest, SmallAndLargeBlocksAreZeroedAndWritable) {
  for (size_t bytes : {size_t{64}, size_t{2} << 20, (size_t{8} << 20) + 4096}) {
    auto* memory = static_cast<unsigned char*>(AllocateHugePageMemory(bytes));
    ASSERT_NE(memory, nullptr) << bytes;
    for (size_t i = 0; i < bytes; i += 4093) ASSERT_EQ(memory[i], 0) << bytes << " at " << i;
    EXPECT_EQ(memory[bytes - 1], 0);
    std::memset(memory, 0xab, bytes);
    EXPECT_EQ(memory[bytes - 1], 0xab);
    FreeHugePageMemory(memory, bytes);
  }
  FreeHugePageMemory(nullptr, 1 << 20);  // nothing to free: no effect
}

TEST(HugePageMemoryTest, AVectorGrowsAcrossTheHugePageSizeKeepingItsElements) {
  std::vector<uint64_t, HugePageAllocator<uint64_t>> values;
  constexpr uint64_t kCount = 1 << 20;  // 8 MiB at the end
  for (uint64_t i = 0; i < kCount; ++i) values.push_back(i * 3);
  for (uint64_t i = 0; i < kCount; i += 997) ASSERT_EQ(values[i], i * 3) << i;
  values.assign(16, 7);
  values.shrink_to_fit();
  EXPECT_EQ(values.back(), 7u);
}

}  // namespace
}  // namespace mooncake
