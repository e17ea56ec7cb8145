// A server's large frame read in two steps (BoundedFramedTransport, kWhole):
// what came with the header, then either a value straight from the socket
// into memory the decoder gives (BoundedBinaryProtocol::readBinaryPlaced,
// the worker's Put) or the rest of the frame into its buffer. A
// BoundedFramedTransport reads one end of a Unix stream socket pair; a
// thread writes the frames into the other end. Last, views of a client's
// reply decoded piece by piece (kAsDecoded).
//
// Every wait is bounded (the transport's frame timeout).

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <thrift/transport/TSocket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "tests/test_bytes.h"
#include "thrift/rpc_transport.h"

namespace mooncake {
namespace {

using namespace std::chrono_literals;
using apache::thrift::transport::TSocket;
using testing::Pattern;

// The binary protocol's i32 and binary, and a frame around a payload.
std::string I32(int32_t value) {
  uint32_t wire = htonl(static_cast<uint32_t>(value));
  return std::string(reinterpret_cast<const char*>(&wire), sizeof(wire));
}
std::string Binary(const std::string& bytes) {
  return I32(static_cast<int32_t>(bytes.size())) + bytes;
}
std::string Framed(const std::string& payload) {
  return I32(static_cast<int32_t>(payload.size())) + payload;
}

class PlacedValueTest : public ::testing::Test {
 protected:
  void SetUp() override {
    int ends[2];
    ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, ends), 0);
    reader_fd_ = ends[0];
    writer_ = ends[1];
    transport_ = std::make_shared<BoundedFramedTransport>(
        std::make_shared<TSocket>(reader_fd_), RpcReadTimeouts{.idle = 10s, .frame = 10s},
        LargeFrames());
    in_ = std::make_unique<BoundedBinaryProtocol>(transport_);
  }

  // How the transport reads frames over 64 KiB: a server's way by default.
  virtual BoundedFramedTransport::LargeFrames LargeFrames() const {
    return BoundedFramedTransport::LargeFrames::kWhole;
  }

  void TearDown() override {
    if (sending_.joinable()) sending_.join();
    if (writer_ >= 0) close(writer_);
  }

  // Writes `bytes` from another thread (a frame may exceed the socket's
  // buffer), then closes the writing end when `then_close`.
  void Send(std::string bytes, bool then_close = false) {
    sending_ = std::thread([this, bytes = std::move(bytes), then_close] {
      size_t sent = 0;
      while (sent < bytes.size()) {
        ssize_t n = send(writer_, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
        if (n <= 0) break;
        sent += static_cast<size_t>(n);
      }
      if (then_close) shutdown(writer_, SHUT_WR);
    });
  }

  // Waits, at most ten seconds, until `bytes` lie unread in the reading end.
  // False if they do not: the socket's buffer holds less, and the reading
  // end is shut so that the writer stops instead of waiting for a reader.
  bool AllQueued(size_t bytes) {
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    int queued = 0;
    while (ioctl(reader_fd_, FIONREAD, &queued) == 0 && static_cast<size_t>(queued) < bytes &&
           std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(1ms);
    }
    if (static_cast<size_t>(queued) >= bytes) return true;
    shutdown(reader_fd_, SHUT_RDWR);
    return false;
  }

  std::string ReadKey() {
    std::string key;
    in_->readString(key);
    return key;
  }

  int reader_fd_ = -1;
  int writer_ = -1;
  std::thread sending_;
  std::shared_ptr<BoundedFramedTransport> transport_;
  std::unique_ptr<BoundedBinaryProtocol> in_;
};

TEST_F(PlacedValueTest, AValueBeyondTheFirstPieceGoesFromTheSocketIntoThePlacedMemoryExact) {
  const std::string value = Pattern(300 << 10, 1);
  Send(Framed(Binary("key") + Binary(value) + I32(7)) + Framed(Binary("next")));
  EXPECT_EQ(ReadKey(), "key");
  std::vector<std::byte> memory;
  uint32_t asked = 0;
  std::string_view view;
  std::string storage;
  in_->readBinaryPlaced(view, storage, [&](uint32_t size) {
    asked = size;
    memory.resize(size);
    return std::span<std::byte>(memory);
  });
  EXPECT_EQ(asked, value.size());
  EXPECT_EQ(view.data(), reinterpret_cast<const char*>(memory.data())) << "shows the placed bytes";
  EXPECT_TRUE(view == value);
  EXPECT_TRUE(storage.empty());
  int32_t after = 0;
  in_->readI32(after);
  EXPECT_EQ(after, 7) << "the frame goes on after the value";
  transport_->readEnd();
  EXPECT_EQ(ReadKey(), "next") << "the next frame starts where it should";
}

TEST_F(PlacedValueTest, ALargeFrameAfterALargeOneTakesTwoReads) {
  // After a large frame, reads take little ahead (the next value should go
  // straight into place). The header's read still brings the next frame's
  // first piece (its key) with it, and one more read takes the rest of the
  // value into place: the first piece once cost a read of its last four
  // bytes.
  const std::string first = Pattern(100 << 10, 2);
  const std::string second = Pattern(100 << 10, 3);
  for (const auto& [key, value, tail] :
       {std::tuple{"first", &first, 7}, std::tuple{"second", &second, 8}}) {
    // As a caller sends its next call once answered: the whole frame waits
    // in the socket, and nothing after it.
    const std::string frame = Framed(Binary(key) + Binary(*value) + I32(tail));
    Send(frame);
    ASSERT_TRUE(AllQueued(frame.size())) << "the socket cannot hold one frame";
    sending_.join();
    const uint64_t reads_before = transport_->socket_reads();
    EXPECT_EQ(ReadKey(), key);
    std::vector<std::byte> memory;
    std::string_view view;
    std::string storage;
    in_->readBinaryPlaced(view, storage, [&](uint32_t size) {
      memory.resize(size);
      return std::span<std::byte>(memory);
    });
    int32_t after = 0;
    in_->readI32(after);
    transport_->readEnd();
    EXPECT_TRUE(view == *value);
    EXPECT_EQ(after, tail);
    EXPECT_EQ(transport_->socket_reads() - reads_before, 2u) << key;
  }
}

TEST_F(PlacedValueTest, AValueThatCameWithTheHeaderIsNeverPlaced) {
  const std::string value = Pattern(2 << 10, 2);
  Send(Framed(Binary("key") + Binary(value)));
  EXPECT_EQ(ReadKey(), "key");
  std::string_view view;
  std::string storage;
  bool asked = false;
  in_->readBinaryPlaced(view, storage, [&](uint32_t) {
    asked = true;
    return std::span<std::byte>();
  });
  EXPECT_FALSE(asked) << "buffered already: a view costs nothing";
  EXPECT_TRUE(view == value);
  EXPECT_TRUE(storage.empty());
}

TEST_F(PlacedValueTest, ADeclinedPlacementViewsTheValueInTheWholeFrame) {
  const std::string value = Pattern(300 << 10, 3);
  Send(Framed(Binary("key") + Binary(value) + I32(9)));
  EXPECT_EQ(ReadKey(), "key");
  std::string_view view;
  std::string storage;
  in_->readBinaryPlaced(view, storage, [](uint32_t) { return std::span<std::byte>(); });
  EXPECT_TRUE(view == value);
  EXPECT_TRUE(storage.empty()) << "a view of the frame's buffer, not a copy";
  int32_t after = 0;
  in_->readI32(after);
  EXPECT_EQ(after, 9);
}

TEST_F(PlacedValueTest, ViewsTakenBeforeTheRestOfTheFrameCameStayValid) {
  // A batch's first values are views of the first piece; the read that
  // needs the rest of the frame grows the buffer.
  std::vector<std::string> values;
  std::string payload;
  for (int i = 0; i < 8; ++i) {
    values.push_back(Pattern(1 << 10, 10 + i));
    payload += Binary(values.back());
  }
  const std::string large = Pattern(1 << 20, 20);
  payload += Binary(large);
  Send(Framed(payload));
  std::vector<std::string_view> views(values.size());
  std::string storage;
  for (auto& view : views) in_->readBinaryView(view, storage);
  std::string_view last;
  in_->readBinaryView(last, storage);
  EXPECT_TRUE(last == large);
  for (size_t i = 0; i < values.size(); ++i) EXPECT_TRUE(views[i] == values[i]) << i;
}

TEST_F(PlacedValueTest, AValueCutShortByACloseIsATruncatedFrame) {
  const std::string value = Pattern(300 << 10, 4);
  const std::string whole = Framed(Binary("key") + Binary(value));
  Send(whole.substr(0, whole.size() / 2), /*then_close=*/true);
  EXPECT_EQ(ReadKey(), "key");
  std::vector<std::byte> memory;
  std::string_view view;
  std::string storage;
  try {
    in_->readBinaryPlaced(view, storage, [&](uint32_t size) {
      memory.resize(size);
      return std::span<std::byte>(memory);
    });
    FAIL() << "half a value was taken for a whole one";
  } catch (const RpcFaultError& e) {
    EXPECT_EQ(e.fault(), RpcFault::kTruncatedFrame);
  }
  EXPECT_EQ(memory.size(), value.size()) << "placed before the bytes ran out";
}

TEST_F(PlacedValueTest, AValueDeclaredPastItsFrameIsRefusedBeforeAnythingIsPlaced) {
  std::string payload = Binary("key") + I32(1 << 20) + std::string(100 << 10, 'x');
  Send(Framed(payload));
  EXPECT_EQ(ReadKey(), "key");
  bool asked = false;
  std::string_view view;
  std::string storage;
  EXPECT_THROW(in_->readBinaryPlaced(view, storage,
                                     [&](uint32_t) {
                                       asked = true;
                                       return std::span<std::byte>();
                                     }),
               apache::thrift::protocol::TProtocolException);
  EXPECT_FALSE(asked);
}

// A message is one frame. One that reads on past its frame (a peer that
// split a put over two frames) is refused: the next frame would replace
// the buffer that the first frame's views point into. Between messages
// (after readEnd) the next frame is read as usual.
TEST_F(PlacedValueTest, AMessageThatReadsPastItsFrameIsRefused) {
  const std::string value = Pattern(100, 5);
  Send(Framed(Binary("key") + Binary(value)) + Framed(Binary("next")) +
       Framed(std::string(4096, '\0')));
  EXPECT_EQ(ReadKey(), "key");
  std::string_view view;
  std::string storage;
  in_->readBinaryView(view, storage);
  EXPECT_TRUE(view == value);
  transport_->readEnd();
  EXPECT_EQ(ReadKey(), "next");  // the next message, in the next frame
  int32_t past = 0;
  EXPECT_THROW(in_->readI32(past), apache::thrift::protocol::TProtocolException);
  EXPECT_EQ(past, 0);
}

// A client's reply over 64 KiB is decoded piece by piece (kAsDecoded), and
// each piece is buffered over the one before: a view of an earlier piece
// would change under its reader. Such fields are copied; a reply that is
// buffered whole is still viewed.
class AsDecodedViewTest : public PlacedValueTest {
 protected:
  BoundedFramedTransport::LargeFrames LargeFrames() const override {
    return BoundedFramedTransport::LargeFrames::kAsDecoded;
  }
};

TEST_F(AsDecodedViewTest, AFieldOfAnEarlierPieceKeepsItsBytesWhenLaterPiecesArrive) {
  // Seven 10 KiB fields after the first: each is read through the buffer
  // (less than 16 KiB past it), so later pieces refill it from its start.
  const std::string first = Pattern(100, 4);
  std::string payload = Binary(first);
  for (int i = 0; i < 7; ++i) payload += Binary(Pattern(10 << 10, 10 + i));
  ASSERT_GT(payload.size(), 64u << 10) << "the frame must be read in pieces";
  Send(Framed(payload));
  std::string_view view;
  std::string storage;
  in_->readBinaryView(view, storage);
  for (int i = 0; i < 7; ++i) {
    std::string field;
    in_->readBinary(field);
    ASSERT_EQ(field, Pattern(10 << 10, 10 + i)) << "field " << i;
  }
  EXPECT_TRUE(view == first) << "the first field's bytes changed under its view";
}

TEST_F(AsDecodedViewTest, AReplyBufferedWholeIsViewedNotCopied) {
  const std::string value = Pattern(8 << 10, 5);
  Send(Framed(Binary(value) + I32(3)));
  std::string_view view;
  std::string storage;
  in_->readBinaryView(view, storage);
  EXPECT_TRUE(view == value);
  EXPECT_TRUE(storage.empty()) << "a view of the buffered frame, not a copy";
}

}  // namespace
}  // namespace mooncake
