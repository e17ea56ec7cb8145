#include "thrift/rpc_transport.h"

#include <arpa/inet.h>
#include <poll.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <thrift/TConfiguration.h>
#include <thrift/TOutput.h>
#include <thrift/protocol/TProtocolException.h>
#include <thrift/transport/TSSLSocket.h>
#include <thrift/transport/TSocket.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <csignal>
#include <cstring>
#include <exception>
#include <mutex>
#include <new>

#include "common/log.h"
#include "common/spare_cpu.h"
#include "thrift/rpc_settings.h"

namespace mooncake {
namespace {

using apache::thrift::TConfiguration;
using apache::thrift::protocol::TMessageType;
using apache::thrift::protocol::TProtocolException;
using apache::thrift::protocol::TType;
using apache::thrift::transport::TSocket;
using apache::thrift::transport::TSSLException;
using apache::thrift::transport::TSSLSocket;
using apache::thrift::transport::TSSLSocketFactory;
using apache::thrift::transport::TTransportException;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// RpcPollCounts, process-wide.
std::atomic<uint64_t> polls_with_data{0};
std::atomic<uint64_t> polls_expired{0};
std::atomic<uint64_t> polls_busy{0};

// A frame's buffer starts this small and doubles as its bytes arrive.
constexpr uint32_t kFirstFrameBuffer = 64u << 10;
// A connection keeps a buffer up to this size between frames; a larger one
// is freed when a smaller frame comes, so an idle pooled connection does not
// pin the memory of its largest transfer.
constexpr uint32_t kKeptFrameBuffer = 1u << 20;
// Bytes one read may take past what it is for (a frame's header, or a piece
// of the frame): a small frame arrives with its header in one system call,
// and the end of a call with its value. Fixed per connection, so what a peer
// sends ahead costs at most this much.
constexpr uint32_t kReadAheadBytes = 16u << 10;
// A reply decoded as it arrives (kAsDecoded): a string that reaches this far
// past what is buffered is read from the socket straight into place.
constexpr uint32_t kDirectReadBytes = kReadAheadBytes;
// A large frame buffers first what came with its header, and at least this
// much: enough for a call's name, key and options, which our clients send
// before the value (thrift/value_calls.h), or for a reply's head.
constexpr uint32_t kMinFirstPiece = 4u << 10;
// After a large frame, reads take only this much ahead: the next frame is
// likely large too, and its value should go from the socket straight to
// where it belongs (a tier's space, the caller's string), not through the
// read-ahead and the frame buffer: with the full read-ahead, 16 KiB of each
// 64 KiB value were copied twice more. The first small frame after a large
// one pays one more read for it.
constexpr uint32_t kReadAheadAfterLargeFrame = kMinFirstPiece;

std::shared_ptr<TConfiguration> BoundedConfiguration() {
  static const auto config = std::make_shared<TConfiguration>(
      static_cast<int>(kRpcMaxFrameBytes), static_cast<int>(kRpcMaxFrameBytes), kRpcMaxDepth);
  return config;
}

// Smallest encoding of one value of `type` in the binary protocol.
int64_t MinWireBytes(TType type) {
  switch (type) {
    case apache::thrift::protocol::T_BOOL:
    case apache::thrift::protocol::T_BYTE:
    case apache::thrift::protocol::T_STRUCT:  // at least its stop byte
      return 1;
    case apache::thrift::protocol::T_I16:
      return 2;
    case apache::thrift::protocol::T_I32:
    case apache::thrift::protocol::T_STRING:  // its length
      return 4;
    case apache::thrift::protocol::T_I64:
    case apache::thrift::protocol::T_DOUBLE:
      return 8;
    case apache::thrift::protocol::T_SET:
    case apache::thrift::protocol::T_LIST:  // element type + count
      return 5;
    case apache::thrift::protocol::T_MAP:  // key type + value type + count
      return 6;
    default:
      throw TProtocolException(TProtocolException::INVALID_DATA, "unknown element type");
  }
}

// OpenSSL writes with send() without MSG_NOSIGNAL (plain TSocket passes it),
// so a TLS peer that hung up would kill a process that still has SIGPIPE's
// default action, a CLI or a serving framework, instead of failing a call.
// A handler the process installed itself is left alone.
void IgnoreSigpipeIfDefault() {
  struct sigaction current {};
  if (sigaction(SIGPIPE, nullptr, &current) == 0 && current.sa_handler == SIG_DFL) {
    std::signal(SIGPIPE, SIG_IGN);
  }
}

// A write at least this large is sent from the caller's memory instead of
// being copied into the frame buffer (BoundedFramedTransport::flush). Safe
// because every writer flushes before the memory it wrote from goes away
// (the generated code and thrift/value_calls.cc). 4 KiB, a page and a
// typical KV block, rather than larger: a batch reply of 4 KiB values then
// leaves the worker straight from its arena, and a 4 KiB copy costs more
// than the iovec that replaces it (measured: about 15 % less worker CPU per
// key in BatchGets of 16 x 4 KiB).
constexpr uint32_t kBorrowedWriteBytes = 4u << 10;

// Sends every byte of `pieces`, all of them within `timeout` (0: no limit).
// The limit is on the whole frame, not on each wait: a peer that takes a
// few bytes at a time must not hold the sender (and what the reply pins)
// for longer than the timeout.
void SendPieces(int fd, std::vector<iovec>& pieces, milliseconds timeout) {
  const Clock::time_point deadline = SendDeadline(timeout);
  size_t first = 0;
  while (first < pieces.size()) {
    msghdr message{};
    message.msg_iov = pieces.data() + first;
    message.msg_iovlen = std::min<size_t>(pieces.size() - first, IOV_MAX);
    ssize_t sent = sendmsg(fd, &message, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (sent < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        if (!AwaitWritable(fd, deadline)) {
          throw TTransportException(TTransportException::TIMED_OUT,
                                    "the peer did not take the whole frame in time");
        }
        continue;
      }
      throw TTransportException(TTransportException::NOT_OPEN, "send failed", errno);
    }
    auto left = static_cast<size_t>(sent);
    while (first < pieces.size() && left >= pieces[first].iov_len) {
      left -= pieces[first].iov_len;
      ++first;
    }
    if (left > 0) {
      pieces[first].iov_base = static_cast<uint8_t*>(pieces[first].iov_base) + left;
      pieces[first].iov_len -= left;
    }
  }
}

bool IsTimeout(const TTransportException& e) {
  return e.getType() == TTransportException::TIMED_OUT;
}

}  // namespace

Clock::time_point SendDeadline(milliseconds timeout) {
  return timeout.count() > 0 ? Clock::now() + timeout : Clock::time_point::max();
}

bool AwaitWritable(int fd, Clock::time_point deadline) {
  for (;;) {
    int wait_ms = -1;
    if (deadline != Clock::time_point::max()) {
      auto left = std::chrono::ceil<milliseconds>(deadline - Clock::now()).count();
      if (left <= 0) return false;
      wait_ms = static_cast<int>(std::min<int64_t>(left, INT_MAX));
    }
    pollfd waiting{.fd = fd, .events = POLLOUT, .revents = 0};
    int ready = poll(&waiting, 1, wait_ms);
    // Writable, or an error that the next send reports.
    if (ready > 0 || (ready < 0 && errno != EINTR)) return true;
  }
}

RpcFaultError::RpcFaultError(RpcFault fault, const std::string& message)
    : TTransportException(TTransportException::CORRUPTED_DATA, message), fault_(fault) {}

std::optional<RpcFault> ClassifyRpcException(const std::exception& e) {
  if (const auto* fault = dynamic_cast<const RpcFaultError*>(&e)) return fault->fault();
  if (dynamic_cast<const TSSLException*>(&e)) return RpcFault::kTlsHandshake;
  if (const auto* transport = dynamic_cast<const TTransportException*>(&e)) {
    switch (transport->getType()) {
      case TTransportException::END_OF_FILE:
      case TTransportException::INTERRUPTED:
      case TTransportException::NOT_OPEN:
        return std::nullopt;  // the peer hung up, or we are stopping
      case TTransportException::TIMED_OUT:
        // Reads time out as RpcFaultError: a plain timeout is a send.
        return RpcFault::kSlowReader;
      default:
        return RpcFault::kMalformed;
    }
  }
  if (const auto* protocol = dynamic_cast<const TProtocolException*>(&e)) {
    switch (protocol->getType()) {
      case TProtocolException::SIZE_LIMIT:
        return RpcFault::kSizeLimit;
      case TProtocolException::DEPTH_LIMIT:
        return RpcFault::kDepthLimit;
      default:
        return RpcFault::kMalformed;
    }
  }
  if (dynamic_cast<const apache::thrift::TException*>(&e)) return RpcFault::kMalformed;
  return RpcFault::kInternal;
}

// ---- BoundedFramedTransport ----

BoundedFramedTransport::BoundedFramedTransport(std::shared_ptr<TSocket> socket,
                                               RpcReadTimeouts timeouts, LargeFrames large)
    : TFramedTransport(socket, BoundedConfiguration()),
      socket_(std::move(socket)),
      timeouts_(timeouts),
      large_frames_(large),
      plain_socket_(dynamic_cast<TSSLSocket*>(socket_.get()) == nullptr),
      read_ahead_(kReadAheadBytes) {
  setMaxFrameSize(kRpcMaxFrameBytes);
  SetSocketTimeout(timeouts_.idle);
}

int BoundedFramedTransport::socket_fd() const { return socket_->getSocketFD(); }

std::shared_ptr<BoundedFramedTransport> BoundedFramedTransport::WriteSide() const {
  return std::make_shared<BoundedFramedTransport>(socket_, timeouts_, large_frames_);
}

std::string BoundedFramedTransport::peer() const {
  try {
    return socket_->getPeerAddress() + ":" + std::to_string(socket_->getPeerPort());
  } catch (const std::exception&) {
    return "unknown";  // called while handling another failure: never throw
  }
}

void BoundedFramedTransport::SetSocketTimeout(milliseconds timeout) {
  if (timeout == socket_timeout_) return;
  socket_->setRecvTimeout(static_cast<int>(timeout.count()));
  socket_timeout_ = timeout;
}

bool BoundedFramedTransport::readFrame() {
  uint32_t size = 0;
  if (!ReadHeader(&size)) return false;
  frame_unread_ = size;
  frame_deadline_ = Clock::now() + timeouts_.frame;
  // Thrift counts decoded bytes against the message size; one frame is one
  // message.
  resetConsumedMessageSize();
  resetConsumedMessageSize(size);
  in_message_ = true;
  viewed_buffer_.reset();  // the last frame's views are gone
  if (frame_capacity_ > kKeptFrameBuffer && size <= kKeptFrameBuffer) {
    frame_.reset();
    frame_capacity_ = 0;
  }
  const bool large = size > kFirstFrameBuffer;
  read_ahead_ = large ? kReadAheadAfterLargeFrame : kReadAheadBytes;
  BufferFrameBytes(large ? std::max(ahead_end_ - ahead_begin_, kMinFirstPiece) : size);
  return true;
}

uint32_t BoundedFramedTransport::readSlow(uint8_t* buf, uint32_t len) {
  if (frame_unread_ == 0) {
    if (in_message_) ThrowPastFrame();
    return TFramedTransport::readSlow(buf, len);  // the next message's frame
  }
  if (large_frames_ == LargeFrames::kWhole) {
    // The rest of the frame, then the fast path (which, asked for more than
    // the frame holds, comes back here and is refused).
    BufferRestOfFrame();
    return TBufferBase::read(buf, len);
  }
  // What is buffered first (readSlow runs when it is not enough) ...
  uint32_t buffered = static_cast<uint32_t>(rBound_ - rBase_);
  if (buffered > 0) std::memcpy(buf, rBase_, buffered);
  rBase_ = rBound_;
  uint32_t need = len - buffered;
  uint32_t from_frame = std::min(need, frame_unread_);
  if (from_frame >= kDirectReadBytes) {
    // ... then a value's bytes straight into their destination, ...
    ReceiveFrameBytes(buf + buffered, from_frame);
  } else {
    // ... or the next piece of the frame through the buffer.
    BufferFrameBytes(std::min(frame_unread_, kFirstFrameBuffer));
    std::memcpy(buf + buffered, rBase_, from_frame);
    rBase_ += from_frame;
  }
  if (from_frame == need) return len;
  ThrowPastFrame();
}

void BoundedFramedTransport::ThrowPastFrame() {
  // TFramedTransport would read on into the next frame, which replaces the
  // buffer that views of this message's values point into.
  throw TProtocolException(TProtocolException::SIZE_LIMIT, "message reads past its frame");
}

const uint8_t* BoundedFramedTransport::borrowSlow(uint8_t* buf, uint32_t* len) {
  // kAsDecoded reads a large string from the socket instead (readSlow).
  if (large_frames_ != LargeFrames::kWhole || frame_unread_ == 0) {
    return TFramedTransport::borrowSlow(buf, len);
  }
  BufferRestOfFrame();
  return TBufferBase::borrow(buf, len);  // null past the frame: the protocol's to refuse
}

void BoundedFramedTransport::ReceiveValueInto(std::span<std::byte> out) {
  if (out.size() > frame_bytes_left()) {
    throw TProtocolException(TProtocolException::SIZE_LIMIT,
                             "declared size exceeds the rest of the frame");
  }
  const auto size = static_cast<uint32_t>(out.size());
  checkReadBytesAvailable(size);
  auto* into = reinterpret_cast<uint8_t*>(out.data());
  uint32_t buffered = std::min(size, buffered_bytes());
  std::memcpy(into, rBase_, buffered);
  rBase_ += buffered;
  if (size > buffered) ReceiveFrameBytes(into + buffered, size - buffered);
}

uint32_t BoundedFramedTransport::readEnd() {
  // One frame is one message: what it did not decode is dropped.
  uint8_t drop[4096];
  while (frame_unread_ > 0) {
    ReceiveFrameBytes(drop, std::min<uint32_t>(frame_unread_, sizeof(drop)));
  }
  rBase_ = rBound_;
  in_message_ = false;
  return TFramedTransport::readEnd();
}

bool BoundedFramedTransport::ReadHeader(uint32_t* size) {
  SetSocketTimeout(timeouts_.idle);
  if (!ahead_) ahead_ = std::make_unique_for_overwrite<uint8_t[]>(kReadAheadBytes);
  while (ahead_end_ - ahead_begin_ < sizeof(uint32_t)) {
    uint32_t have = ahead_end_ - ahead_begin_;
    if (ahead_begin_ > 0) {
      std::memmove(ahead_.get(), ahead_.get() + ahead_begin_, have);
      ahead_begin_ = 0;
      ahead_end_ = have;
    }
    uint8_t* into = ahead_.get() + ahead_end_;
    // One read takes the header and, usually, the whole frame after it; a
    // large frame's first piece (kMinFirstPiece after the header) too, or it
    // would cost a read of its last four bytes.
    uint32_t room = std::min(kReadAheadBytes - ahead_end_,
                             read_ahead_ + static_cast<uint32_t>(sizeof(uint32_t)));
    std::optional<uint32_t> polled;
    if (have == 0) polled = PollForBytes(into, room);
    uint32_t n = 0;
    if (polled) {
      n = *polled;
    } else {
      try {
        ++socket_reads_;
        n = socket_->read(into, room);
      } catch (const TTransportException& e) {
        if (!IsTimeout(e)) throw;
        if (have == 0)
          throw RpcFaultError(RpcFault::kIdleTimeout, "no frame within the idle timeout");
        throw RpcFaultError(RpcFault::kSlowFrame, "frame header did not arrive in time");
      }
    }
    if (n == 0) {
      if (have == 0) return false;  // a clean close between frames
      throw RpcFaultError(RpcFault::kTruncatedFrame, "connection closed inside a frame header");
    }
    ahead_end_ += n;
  }
  uint32_t declared_bits = 0;
  std::memcpy(&declared_bits, ahead_.get() + ahead_begin_, sizeof(declared_bits));
  ahead_begin_ += sizeof(declared_bits);
  auto declared = static_cast<int32_t>(ntohl(declared_bits));
  if (declared < 0 || static_cast<uint32_t>(declared) > kRpcMaxFrameBytes) {
    throw RpcFaultError(RpcFault::kFrameTooLarge, "frame of " + std::to_string(declared) +
                                                      " bytes, limit " +
                                                      std::to_string(kRpcMaxFrameBytes));
  }
  *size = static_cast<uint32_t>(declared);
  return true;
}

std::optional<uint32_t> BoundedFramedTransport::PollForBytes(uint8_t* out, uint32_t room) {
  if (timeouts_.poll.count() <= 0 || !plain_socket_) return std::nullopt;
  const auto deadline = Clock::now() + timeouts_.poll;
  const int fd = socket_->getSocketFD();
  while (true) {
    // Spinning is free only on a CPU nobody else wants, checked before each
    // try: a long poll (the master's) must not hold a CPU that threads
    // began to queue for meanwhile.
    if (!SpareCpuNow()) {
      polls_busy.fetch_add(1, std::memory_order_relaxed);
      return std::nullopt;
    }
    ++socket_reads_;
    ssize_t n = recv(fd, out, room, MSG_DONTWAIT);
    if (n >= 0) {
      polls_with_data.fetch_add(1, std::memory_order_relaxed);
      return static_cast<uint32_t>(n);
    }
    // A real error is the blocking read's to report, as it would have.
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return std::nullopt;
    if (Clock::now() >= deadline) {
      polls_expired.fetch_add(1, std::memory_order_relaxed);
      return std::nullopt;
    }
    sched_yield();
  }
}

void BoundedFramedTransport::GrowFrameBuffer(uint32_t size, uint32_t got, uint32_t needed) {
  while (frame_capacity_ < needed) {
    // Grow with what arrived, never with what was declared.
    uint32_t capacity = std::min(size, std::max(kFirstFrameBuffer, 2 * frame_capacity_));
    capacity = std::max(capacity, needed);
    auto bigger = std::make_unique_for_overwrite<uint8_t[]>(capacity);
    if (got > 0) std::memcpy(bigger.get(), frame_.get(), got);
    if (keep_viewed_buffer_ && !viewed_buffer_) viewed_buffer_ = std::move(frame_);
    frame_ = std::move(bigger);
    frame_capacity_ = capacity;
  }
}

void BoundedFramedTransport::BufferFrameBytes(uint32_t size) { FillFrameBuffer(0, size, 0); }

void BoundedFramedTransport::BufferRestOfFrame() {
  // frame_ holds the frame from its start (kWhole), less any value taken
  // by ReceiveValueInto, whose place in the buffer is then never read.
  auto end = static_cast<uint32_t>(rBound_ - frame_.get());
  auto consumed = static_cast<uint32_t>(rBase_ - frame_.get());
  // The decoder may hold views of the bytes buffered so far (a batch's
  // values): should frame_ grow, its old buffer stays until the next frame.
  keep_viewed_buffer_ = true;
  FillFrameBuffer(end, end + frame_unread_, consumed);
  keep_viewed_buffer_ = false;
}

void BoundedFramedTransport::FillFrameBuffer(uint32_t got, uint32_t size, uint32_t consumed) {
  // The buffer grows only once what it holds has arrived: with the bytes a
  // peer sent, never with what it merely declared.
  while (got < size) {
    if (got == frame_capacity_) GrowFrameBuffer(size, got, got + 1);
    uint32_t piece = std::min(size, frame_capacity_) - got;
    ReceiveFrameBytes(frame_.get() + got, piece);
    got += piece;
  }
  setReadBuffer(frame_.get(), size);
  rBase_ += consumed;
}

void BoundedFramedTransport::ReceiveFrameBytes(uint8_t* out, uint32_t size) {
  // What an earlier read brought along (bounded by kReadAheadBytes).
  uint32_t got = std::min(size, ahead_end_ - ahead_begin_);
  if (got > 0) {
    std::memcpy(out, ahead_.get() + ahead_begin_, got);
    ahead_begin_ += got;
  }
  bool tried_without_waiting = false;
  while (got < size) {
    if (!tried_without_waiting && plain_socket_) {
      // Usually the rest is in the socket buffer already: a non-blocking
      // read takes it without re-arming the socket's timer (two setsockopt
      // calls a frame otherwise).
      tried_without_waiting = true;
      if (auto n = ReceiveWithReadAhead(out + got, size - got, MSG_DONTWAIT)) {
        got += *n;
        continue;
      }
    }
    if (timeouts_.frame.count() > 0) {
      auto left = std::chrono::duration_cast<milliseconds>(frame_deadline_ - Clock::now());
      if (left.count() <= 0) {
        throw RpcFaultError(RpcFault::kSlowFrame, "frame did not arrive within the frame timeout");
      }
      // Only a frame that needs several reads pays for re-arming the timer.
      SetSocketTimeout(std::max(left, milliseconds(1)));
    }
    std::optional<uint32_t> n;
    if (plain_socket_) {
      n = ReceiveWithReadAhead(out + got, size - got, 0);
    } else {
      try {
        ++socket_reads_;
        n = socket_->read(out + got, size - got);
      } catch (const TTransportException& e) {
        if (!IsTimeout(e)) throw;
      }
      if (n == 0u) {
        throw RpcFaultError(RpcFault::kTruncatedFrame, "connection closed inside a frame");
      }
    }
    if (!n) {
      throw RpcFaultError(RpcFault::kSlowFrame, "frame did not arrive within the frame timeout");
    }
    got += *n;
  }
  frame_unread_ -= size;
}

std::optional<uint32_t> BoundedFramedTransport::ReceiveWithReadAhead(uint8_t* out, uint32_t size,
                                                                     int flags) {
  // The caller took what ahead_ held first, so it is empty: what comes
  // after these bytes (the end of a call after its value, the next frame's
  // header) lands there in the same system call, not in another.
  ahead_begin_ = 0;
  ahead_end_ = 0;
  iovec pieces[2] = {{out, size}, {ahead_.get(), read_ahead_}};
  msghdr message{};
  message.msg_iov = pieces;
  message.msg_iovlen = ahead_ ? 2 : 1;
  while (true) {
    ++socket_reads_;
    ssize_t n = recvmsg(socket_->getSocketFD(), &message, flags);
    if (n > 0) {
      if (static_cast<size_t>(n) <= size) return static_cast<uint32_t>(n);
      ahead_end_ = static_cast<uint32_t>(n - size);
      return size;
    }
    // A reset is a close, as TSocket::read takes it.
    if (n == 0 || errno == ECONNRESET) {
      throw RpcFaultError(RpcFault::kTruncatedFrame, "connection closed inside a frame");
    }
    if (errno == EINTR) continue;
    // Nothing yet (MSG_DONTWAIT), or the socket's receive timer ran out.
    if (errno == EAGAIN || errno == EWOULDBLOCK) return std::nullopt;
    throw TTransportException(TTransportException::UNKNOWN, "recv failed", errno);
  }
}

void BoundedFramedTransport::write_virt(const uint8_t* buf, uint32_t len) {
  if (len < kBorrowedWriteBytes || !plain_socket_) {
    TFramedTransport::write(buf, len);
    return;
  }
  borrowed_.push_back({static_cast<uint32_t>(wBase_ - wBuf_.get()), buf, len});
}

void BoundedFramedTransport::flush() {
  // A TLS session writes through its own socket (and borrows nothing); on
  // plain TCP the frame is sent here, within one deadline for the whole
  // frame (SendPieces).
  if (!plain_socket_) {
    TFramedTransport::flush();
    return;
  }
  if (borrowed_.empty() && wBase_ == wBuf_.get() + sizeof(uint32_t)) return;  // nothing written
  // The frame: the write buffer (its first 4 bytes reserved for the size)
  // with the borrowed writes spliced in where they were made.
  const auto buffered = static_cast<uint32_t>(wBase_ - wBuf_.get());
  uint64_t payload = buffered - sizeof(uint32_t);
  std::vector<iovec> pieces;
  pieces.reserve(2 * borrowed_.size() + 1);
  uint32_t from = 0;
  for (const BorrowedWrite& write : borrowed_) {
    if (write.at > from) pieces.push_back({wBuf_.get() + from, write.at - from});
    pieces.push_back({const_cast<uint8_t*>(write.data), write.size});
    payload += write.size;
    from = write.at;
  }
  if (buffered > from) pieces.push_back({wBuf_.get() + from, buffered - from});
  if (payload > kRpcMaxFrameBytes) {
    borrowed_.clear();
    wBase_ = wBuf_.get() + sizeof(uint32_t);
    throw TTransportException(TTransportException::BAD_ARGS, "frame over the frame limit");
  }
  const uint32_t size_bits = htonl(static_cast<uint32_t>(payload));
  std::memcpy(wBuf_.get(), &size_bits, sizeof(size_bits));
  // As TFramedTransport does: the buffer is clean before the write can throw.
  borrowed_.clear();
  wBase_ = wBuf_.get() + sizeof(uint32_t);
  SendPieces(socket_->getSocketFD(), pieces, timeouts_.frame);
}

// ---- BoundedBinaryProtocol ----

BoundedBinaryProtocol::BoundedBinaryProtocol(std::shared_ptr<BoundedFramedTransport> transport)
    : TVirtualProtocol(transport), frame_(transport.get()), framed_(transport.get()) {}

BoundedBinaryProtocol::BoundedBinaryProtocol(
    std::shared_ptr<apache::thrift::transport::TTransport> transport, const RpcFrameSource* frame)
    : TVirtualProtocol(std::move(transport)), frame_(frame) {}

void BoundedBinaryProtocol::RequireElements(int64_t count, int64_t min_bytes) const {
  if (count > kRpcMaxContainerElements) {
    throw TProtocolException(TProtocolException::SIZE_LIMIT,
                             "container of " + std::to_string(count) + " elements, limit " +
                                 std::to_string(kRpcMaxContainerElements));
  }
  RequireFrameBytes(count, min_bytes);
}

void BoundedBinaryProtocol::RequireFrameBytes(int64_t count, int64_t min_bytes) const {
  if (count < 0) throw TProtocolException(TProtocolException::NEGATIVE_SIZE);
  // count < 2^31 and min_bytes <= 8: no overflow in 64 bits.
  if (count * min_bytes > static_cast<int64_t>(frame_->frame_bytes_left())) {
    throw TProtocolException(TProtocolException::SIZE_LIMIT,
                             "declared size exceeds the rest of the frame");
  }
}

uint32_t BoundedBinaryProtocol::readMessageBegin(std::string& name, TMessageType& type,
                                                 int32_t& seqid) {
  int32_t header = 0;
  uint32_t bytes = readI32(header);
  // Strict framing only: every writer of ours, and Thrift's Python, sends
  // the version word.
  if (header >= 0 || (header & static_cast<int32_t>(VERSION_MASK)) != VERSION_1) {
    throw TProtocolException(TProtocolException::BAD_VERSION, "bad version identifier");
  }
  type = static_cast<TMessageType>(header & 0x000000ff);
  bytes += readString(name);
  bytes += readI32(seqid);
  return bytes;
}

void BoundedBinaryProtocol::ReadBytesInto(std::string& str, int32_t size) {
  // Thrift's readStringBody zero-fills a string it cannot borrow whole from
  // the buffer (a value read as it arrives) before reading into it. Read
  // straight into uninitialised space instead. An exception may not leave
  // resize_and_overwrite's callback: it is carried out of it.
  std::exception_ptr failure;
  str.resize_and_overwrite(static_cast<size_t>(size), [&](char* data, size_t) -> size_t {
    try {
      trans_->readAll(reinterpret_cast<uint8_t*>(data), static_cast<uint32_t>(size));
      return static_cast<size_t>(size);
    } catch (...) {
      failure = std::current_exception();
      return 0;
    }
  });
  if (failure) std::rethrow_exception(failure);
}

uint32_t BoundedBinaryProtocol::readString(std::string& str) {
  int32_t size = 0;
  uint32_t bytes = readI32(size);
  RequireFrameBytes(size, 1);
  ReadBytesInto(str, size);
  return bytes + static_cast<uint32_t>(size);
}

uint32_t BoundedBinaryProtocol::readBinary(std::string& str) { return readString(str); }

uint32_t BoundedBinaryProtocol::readBinaryView(std::string_view& view, std::string& storage) {
  int32_t size = 0;
  uint32_t bytes = readI32(size);
  RequireFrameBytes(size, 1);
  return bytes + ViewBytes(size, view, storage);
}

uint32_t BoundedBinaryProtocol::readBinaryPlaced(std::string_view& view, std::string& storage,
                                                 const PlaceFn& place) {
  if (framed_ == nullptr) return readBinaryView(view, storage);
  int32_t size = 0;
  uint32_t bytes = readI32(size);
  RequireFrameBytes(size, 1);
  const auto length = static_cast<uint32_t>(size);
  if (length > framed_->buffered_bytes()) {
    std::span<std::byte> into = place(length);
    if (into.size() == length) {
      framed_->ReceiveValueInto(into);
      view = std::string_view(reinterpret_cast<const char*>(into.data()), into.size());
      return bytes + length;
    }
  }
  return bytes + ViewBytes(size, view, storage);
}

uint32_t BoundedBinaryProtocol::ViewBytes(int32_t size, std::string_view& view,
                                          std::string& storage) {
  uint32_t available = static_cast<uint32_t>(size);
  // A view must last until the next frame: not so for a piece of a reply
  // decoded as it arrives, which the next piece overwrites.
  const bool may_view = framed_ == nullptr || framed_->BufferedBytesLastTheFrame();
  const uint8_t* here = size > 0 && may_view ? trans_->borrow(nullptr, &available) : nullptr;
  if (here != nullptr) {
    view = std::string_view(reinterpret_cast<const char*>(here), static_cast<size_t>(size));
    trans_->consume(static_cast<uint32_t>(size));
  } else {
    ReadBytesInto(storage, size);
    view = storage;
  }
  return static_cast<uint32_t>(size);
}

uint32_t BoundedBinaryProtocol::readListBegin(TType& elem_type, uint32_t& size) {
  int8_t type = 0;
  int32_t count = 0;
  uint32_t bytes = readByte(type) + readI32(count);
  elem_type = static_cast<TType>(type);
  RequireElements(count, MinWireBytes(elem_type));
  size = static_cast<uint32_t>(count);
  return bytes;
}

uint32_t BoundedBinaryProtocol::readSetBegin(TType& elem_type, uint32_t& size) {
  return readListBegin(elem_type, size);
}

uint32_t BoundedBinaryProtocol::readMapBegin(TType& key_type, TType& value_type, uint32_t& size) {
  int8_t key = 0;
  int8_t value = 0;
  int32_t count = 0;
  uint32_t bytes = readByte(key) + readByte(value) + readI32(count);
  key_type = static_cast<TType>(key);
  value_type = static_cast<TType>(value);
  RequireElements(count, MinWireBytes(key_type) + MinWireBytes(value_type));
  size = static_cast<uint32_t>(count);
  return bytes;
}

// ---- RpcFrameInput ----

RpcFrameInput::RpcFrameInput() : TVirtualTransport(BoundedConfiguration()) {}

void RpcFrameInput::Observe(uint8_t* data, uint32_t size) {
  setReadBuffer(data, size);
  setWriteBuffer(nullptr, 0);
  // One frame is one message, as in BoundedFramedTransport::readFrame.
  resetConsumedMessageSize();
  resetConsumedMessageSize(size);
}

uint32_t RpcFrameInput::readSlow(uint8_t* /*buf*/, uint32_t /*len*/) {
  throw TTransportException(TTransportException::END_OF_FILE, "read past the end of the frame");
}

void RpcFrameInput::writeSlow(const uint8_t* /*buf*/, uint32_t /*len*/) {
  throw TTransportException(TTransportException::BAD_ARGS, "a received frame is read-only");
}

const uint8_t* RpcFrameInput::borrowSlow(uint8_t* /*buf*/, uint32_t* /*len*/) { return nullptr; }

// ---- TLS ----

RpcTlsContext::~RpcTlsContext() = default;

Result<std::shared_ptr<const RpcTlsContext>> RpcTlsContext::Create(const TlsSettings& settings,
                                                                   bool server,
                                                                   std::string* message) {
  if (auto valid = ValidateTlsSettings(settings, message); !valid) return Err(valid.error());
  if (!settings.enabled()) return nullptr;
  IgnoreSigpipeIfDefault();
  std::shared_ptr<RpcTlsContext> context(new RpcTlsContext());
  try {
    auto factory = std::make_shared<TSSLSocketFactory>(apache::thrift::transport::SSLTLS);
    factory->server(server);
    // Both sides present a certificate and require one signed by the CA.
    factory->authenticate(true);
    factory->loadCertificate(settings.cert_file.c_str());
    factory->loadPrivateKey(settings.key_file.c_str());
    factory->loadTrustedCertificates(settings.ca_file.c_str());
    context->factory_ = std::move(factory);
  } catch (const std::exception& e) {
    if (message) *message = e.what();
    return Err(ErrorCode::kInvalidParams);
  }
  return std::shared_ptr<const RpcTlsContext>(std::move(context));
}

void RouteThriftLogsToOurLog() {
  static std::once_flag once;
  std::call_once(once, [] {
    apache::thrift::GlobalOutput.setOutputFunction(
        [](const char* msg) { MC_LOG_DEBUG("thrift msg=\"{}\"", msg); });
  });
}

RpcPollCounts ReadRpcPollCounts() {
  return {.data = polls_with_data.load(std::memory_order_relaxed),
          .expired = polls_expired.load(std::memory_order_relaxed),
          .busy = polls_busy.load(std::memory_order_relaxed)};
}

std::shared_ptr<BoundedFramedTransport> OpenClientTransport(const std::string& host, int port,
                                                            const RpcOptions& options) {
  RouteThriftLogsToOurLog();
  std::shared_ptr<TSocket> socket;
  if (options.tls) {
    socket = options.tls->factory().createSocket(host, port);
  } else {
    socket = std::make_shared<TSocket>(host, port);
  }
  socket->setConnTimeout(options.connect_timeout_ms);
  socket->setSendTimeout(options.io_timeout_ms);
  socket->setNoDelay(true);
  // A client waits for its reply as long as the call may take; one timeout
  // serves both the wait and the frame. A reply's value goes straight into
  // its string.
  auto transport = std::make_shared<BoundedFramedTransport>(
      socket,
      RpcReadTimeouts{.idle = milliseconds(options.io_timeout_ms),
                      .frame = milliseconds(options.io_timeout_ms),
                      .poll = std::chrono::microseconds(options.poll_us)},
      BoundedFramedTransport::LargeFrames::kAsDecoded);
  transport->open();
  return transport;
}

}  // namespace mooncake
