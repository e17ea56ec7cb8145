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

}  // namespace
}  // namespace mooncake
