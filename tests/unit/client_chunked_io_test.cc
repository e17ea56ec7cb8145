// The sinks and sources of chunked transfers (client/client_chunked_io.h),
// without a cluster: what a read leaves in memory or in a stream when it
// restarts because the object was replaced, and how the write side reads a
// value or a stream chunk by chunk. The transfers themselves run against real
// workers in tests/integration.

#include "client/client_chunked_io.h"

#include <gtest/gtest.h>

#include <sstream>
#include <stdexcept>
#include <streambuf>
#include <string>

namespace mooncake {
namespace {

// An output buffer that cannot seek (like a pipe): tellp() answers -1.
class UnseekableBuf : public std::streambuf {
 public:
  std::string data;

 protected:
  int_type overflow(int_type ch) override {
    if (!traits_type::eq_int_type(ch, traits_type::eof()))
      data.push_back(traits_type::to_char_type(ch));
    return traits_type::not_eof(ch);
  }
};

// An input buffer whose device fails: reading from it sets badbit.
class FailingBuf : public std::streambuf {
 protected:
  int_type underflow() override { throw std::runtime_error("device error"); }
};

// ---- Read sinks ----

TEST(ClientChunkedIoTest, StringSinkCollectsTheValue) {
  std::string out = "stale";
  ReadSink sink = StringSink(out);
  ASSERT_TRUE(sink.begin(5));
  EXPECT_TRUE(out.empty());
  ASSERT_TRUE(sink.write("ab"));
  ASSERT_TRUE(sink.write("cde"));
  EXPECT_EQ(out, "abcde");
}

TEST(ClientChunkedIoTest, StringSinkDropsTheOldVersionOnRestart) {
  std::string out;
  ReadSink sink = StringSink(out);
  ASSERT_TRUE(sink.begin(6));
  ASSERT_TRUE(sink.write("old-"));
  ASSERT_TRUE(sink.begin(3));  // the object was replaced mid-read
  ASSERT_TRUE(sink.write("new"));
  EXPECT_EQ(out, "new");
}

// The size a reply names is the worker's word: a wrong one (a bug, or a
// peer that lies) must neither make the client allocate for it nor throw out
// of the read.
TEST(ClientChunkedIoTest, StringSinkReservesOnlyWhatArrivingBytesCanJustify) {
  std::string out;
  ReadSink sink = StringSink(out);
  ASSERT_TRUE(sink.begin(1ull << 45));  // 32 TiB, as a reply may claim
  EXPECT_LE(out.capacity(), 64ull << 20);
  ASSERT_TRUE(sink.write("abc"));
  EXPECT_EQ(out, "abc");
  auto impossible = sink.begin(UINT64_MAX);
  ASSERT_FALSE(impossible);
  EXPECT_EQ(impossible.error(), ErrorCode::kNoAvailableHandle);
}

TEST(ClientChunkedIoTest, StreamSinkWritesAfterWhatTheStreamHeld) {
  std::stringstream out;
  out << "hdr:";
  StreamSink stream(out);
  ReadSink sink = stream.Sink();
  ASSERT_TRUE(sink.begin(6));
  ASSERT_TRUE(sink.write("abc"));
  ASSERT_TRUE(sink.write("def"));
  EXPECT_EQ(out.str(), "hdr:abcdef");
}

TEST(ClientChunkedIoTest, StreamSinkRestartRewritesFromItsStart) {
  std::stringstream out;
  out << "hdr:";
  StreamSink stream(out);
  ReadSink sink = stream.Sink();
  ASSERT_TRUE(sink.begin(8));
  ASSERT_TRUE(sink.write("old-data"));
  // A new version at least as long overwrites every byte written so far.
  ASSERT_TRUE(sink.begin(9));
  ASSERT_TRUE(sink.write("NEW-DATA!"));
  EXPECT_EQ(out.str(), "hdr:NEW-DATA!");
}

TEST(ClientChunkedIoTest, StreamSinkRestartFailsWhenTheNewVersionIsShorter) {
  std::stringstream out;
  StreamSink stream(out);
  ReadSink sink = stream.Sink();
  ASSERT_TRUE(sink.begin(8));
  ASSERT_TRUE(sink.write("old-data"));
  // Bytes past the new end could not be taken back.
  auto restarted = sink.begin(4);
  ASSERT_FALSE(restarted);
  EXPECT_EQ(restarted.error(), ErrorCode::kTransferFail);
}

TEST(ClientChunkedIoTest, StreamSinkRestartFailsOnAnUnseekableStream) {
  UnseekableBuf buf;
  std::ostream out(&buf);
  StreamSink stream(out);
  ReadSink sink = stream.Sink();
  ASSERT_TRUE(sink.begin(3));  // nothing written yet: nothing to take back
  ASSERT_TRUE(sink.write("abc"));
  out.flush();
  EXPECT_EQ(buf.data, "abc");
  auto restarted = sink.begin(3);
  ASSERT_FALSE(restarted);
  EXPECT_EQ(restarted.error(), ErrorCode::kTransferFail);
}

TEST(ClientChunkedIoTest, StreamSinkWriteFailureIsTransferFail) {
  std::ostream out(nullptr);  // badbit: every write fails
  StreamSink stream(out);
  ReadSink sink = stream.Sink();
  ASSERT_TRUE(sink.begin(3));
  auto written = sink.write("abc");
  ASSERT_FALSE(written);
  EXPECT_EQ(written.error(), ErrorCode::kTransferFail);
}

// ---- Write sources ----

TEST(ClientChunkedIoTest, SlicesOfCopiesTheAskedRange) {
  const std::string value = "hello chunked world";
  ChunkSource source = SlicesOf(value);
  std::string buffer = "leftover";
  ASSERT_TRUE(source(6, 7, buffer));
  EXPECT_EQ(buffer, "chunked");
  ASSERT_TRUE(source(14, 5, buffer));
  EXPECT_EQ(buffer, "world");
}

TEST(ClientChunkedIoTest, ReadExactlyReadsChunksInTurn) {
  std::istringstream in("abcdefgh");
  std::string buffer;
  ASSERT_TRUE(ReadExactly(in, 3, buffer));
  EXPECT_EQ(buffer, "abc");
  ASSERT_TRUE(ReadExactly(in, 5, buffer));
  EXPECT_EQ(buffer, "defgh");
}

TEST(ClientChunkedIoTest, ReadExactlyCallsAShortStreamAWrongSize) {
  std::istringstream in("abc");
  std::string buffer;
  auto read = ReadExactly(in, 4, buffer);
  ASSERT_FALSE(read);
  EXPECT_EQ(read.error(), ErrorCode::kInvalidParams);
}

TEST(ClientChunkedIoTest, ReadExactlyCallsAFailingStreamATransferFailure) {
  FailingBuf buf;
  std::istream in(&buf);
  std::string buffer;
  auto read = ReadExactly(in, 4, buffer);
  ASSERT_FALSE(read);
  EXPECT_EQ(read.error(), ErrorCode::kTransferFail);
}

}  // namespace
}  // namespace mooncake
