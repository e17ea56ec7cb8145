#include "common/units.h"

#include <gtest/gtest.h>

namespace mooncake {
namespace {

TEST(ParseByteSize, AcceptsBinaryAndDecimalSuffixes) {
  EXPECT_EQ(ParseByteSize("4096").value(), 4096u);
  EXPECT_EQ(ParseByteSize("64MiB").value(), 64ull << 20);
  EXPECT_EQ(ParseByteSize("64M").value(), 64ull << 20);
  EXPECT_EQ(ParseByteSize("1gib").value(), 1ull << 30);
  EXPECT_EQ(ParseByteSize("4KB").value(), 4000u);
  EXPECT_EQ(ParseByteSize("1 GB").value(), 1000000000u);
}

TEST(ParseByteSize, RejectsGarbageAndOverflow) {
  EXPECT_FALSE(ParseByteSize("").has_value());
  EXPECT_FALSE(ParseByteSize("MiB").has_value());
  EXPECT_FALSE(ParseByteSize("12 parsecs").has_value());
  EXPECT_FALSE(ParseByteSize("-5").has_value());
  EXPECT_FALSE(ParseByteSize("99999999999TiB").has_value());
  EXPECT_EQ(ParseByteSize("x").error(), ErrorCode::kInvalidParams);
}

TEST(FormatBytes, PicksReadableUnit) {
  EXPECT_EQ(FormatBytes(512), "512 B");
  EXPECT_EQ(FormatBytes(1536), "1.5 KiB");
  EXPECT_EQ(FormatBytes(3ull << 30), "3.0 GiB");
}

TEST(FormatBytes, MovesUpAUnitRatherThanPrint1024) {
  EXPECT_EQ(FormatBytes((1ull << 20) - 1), "1.0 MiB");
  EXPECT_EQ(FormatBytes(1ull << 60), "1.0 EiB");
}

// --help prints defaults with FormatByteSize: what it prints must be
// accepted back (it printed "256.0 MiB", which ParseByteSize refuses).
TEST(FormatByteSize, IsExactAndReadBackByParseByteSize) {
  EXPECT_EQ(FormatByteSize(256ull << 20), "256MiB");
  EXPECT_EQ(FormatByteSize(1ull << 30), "1GiB");
  EXPECT_EQ(FormatByteSize(1000), "1000");
  EXPECT_EQ(FormatByteSize(5ull << 50), "5120TiB");
  for (uint64_t bytes :
       std::initializer_list<uint64_t>{0ull, 1ull, 1000ull, 4096ull, 256ull << 20, (1ull << 30) + 1,
                                       3ull << 40, 5ull << 50, UINT64_MAX}) {
    auto parsed = ParseByteSize(FormatByteSize(bytes));
    ASSERT_TRUE(parsed) << FormatByteSize(bytes);
    EXPECT_EQ(*parsed, bytes) << FormatByteSize(bytes);
  }
}

}  // namespace
}  // namespace mooncake
