#pragma once

// The bounded wire layer every Thrift endpoint of ours speaks: framed
// transport, strict binary protocol, optional mutual TLS. It decodes only
// what a frame carries:
//
//  * A frame larger than kRpcMaxFrameBytes is refused before any payload is
//    read. The payload buffer grows with the bytes that actually arrive, so a
//    header that declares 16 MiB and then sends 10 bytes costs 64 KiB.
//  * A string, binary or container whose declared size cannot fit in the
//    rest of its frame, or a container of more than kRpcMaxContainerElements,
//    is refused before anything is allocated for it.
//  * Structs nest at most kRpcMaxDepth deep.
//  * A frame that has started must arrive whole within its frame timeout;
//    a connection with no frame for its idle timeout is closed.
//
// A violation throws RpcFaultError (or Thrift's own protocol exception);
// servers count it and close the connection, clients turn it into RPC_FAIL.
// It pulls in Thrift: besides thrift/, only the tools that make a client's
// TLS context or measure the wire (cli/commands.cc, bench/) include it.
//
// Thread-safety: a transport and its protocol belong to one connection and
// are used by one thread at a time. RpcTlsContext is immutable once made and
// shared by any number of threads.

#include <thrift/protocol/TBinaryProtocol.h>
#include <thrift/transport/TBufferTransports.h>
#include <thrift/transport/TTransportException.h>

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "thrift/rpc_limits.h"
#include "thrift/rpc_tls.h"

namespace apache::thrift::transport {
class TSocket;
class TSSLSocketFactory;
}  // namespace apache::thrift::transport

namespace mooncake {

// Thrown by the bounded transport and protocol.
class RpcFaultError : public apache::thrift::transport::TTransportException {
 public:
  RpcFaultError(RpcFault fault, const std::string& message);
  RpcFault fault() const { return fault_; }

 private:
  RpcFault fault_;
};

// When a send that starts now must be done: after `timeout`, or never
// (time_point::max()) for a timeout of 0.
std::chrono::steady_clock::time_point SendDeadline(std::chrono::milliseconds timeout);

// Waits until `fd` may take more bytes: true, or false once `deadline` has
// passed (time_point::max(): no limit). An error on the socket counts as
// writable; the send that follows reports it.
bool AwaitWritable(int fd, std::chrono::steady_clock::time_point deadline);

// Maps an exception that ended a connection to its fault; nullopt for a peer
// that simply hung up between frames, or a server shutting down.
std::optional<RpcFault> ClassifyRpcException(const std::exception& e);

class RpcTlsContext;

// Timeouts of one connection's reads.
struct RpcReadTimeouts {
  // Longest wait for the first byte of a frame (0: forever).
  std::chrono::milliseconds idle{0};
  // Longest time for a started frame to arrive whole (0: forever).
  std::chrono::milliseconds frame{0};
  // Longest time to poll the socket for the next frame, yielding the CPU
  // between tries, before sleeping in recv; only on plain TCP and while the
  // machine has a spare CPU (common/spare_cpu.h). 0: never poll.
  std::chrono::microseconds poll{0};
};

// This process's RpcPollCounts so far.
RpcPollCounts ReadRpcPollCounts();

// Options of the connections a client makes to one server.
struct RpcOptions {
  int connect_timeout_ms = 2000;
  // Large chunk transfers and slow SSD reads must fit inside this.
  int io_timeout_ms = 30000;
  // Longest poll for a reply before sleeping (RpcReadTimeouts::poll).
  int poll_us = kDefaultRpcPollUs;
  // Idle connections kept per server.
  size_t max_idle = 32;
  // Mutual TLS on every connection when set (RpcTlsContext::Create with
  // server=false); plain TCP when null.
  std::shared_ptr<const RpcTlsContext> tls;
};

// What BoundedBinaryProtocol needs of its transport: the bytes of the frame
// being decoded that are still unread.
class RpcFrameSource {
 public:
  virtual uint32_t frame_bytes_left() const = 0;

 protected:
  ~RpcFrameSource() = default;
};

// Framed transport over a TSocket (or TSSLSocket) that enforces the frame
// limits above. Writes are TFramedTransport's, except that on a plain socket
// a large write (a value) is not copied into the write buffer: flush sends
// it from the caller's memory, in place between the buffered bytes, with one
// sendmsg. Thrift's generated code flushes before the written objects go
// away (a client's request arguments, a server's result), which this needs.
//
// How a large frame is read:
// * kWhole (servers): it is decoded from a buffer that holds all of it and
//   grows only with the bytes that came, so what a peer merely declares
//   costs nothing. A frame over 64 KiB is buffered in two steps: what came
//   with its header, then the rest at the first read that needs it. Between
//   the two the decoder may instead take a value's bytes from the socket
//   straight into memory of its own (ReceiveValueInto): the worker receives
//   a large Put's value into its tier this way.
// * kAsDecoded (clients, of replies they asked for) for a frame over
//   64 KiB: what came with its header (at least 4 KiB), then the rest as it
//   is decoded; the bytes of a string that reach 16 KiB or more past what
//   is buffered (a value) go from the socket straight into its
//   std::string, with no copy through the frame buffer. The string is
//   sized by its declared length, bounded by the frame limit: acceptable
//   for the answer to one's own request.
// A read takes up to 16 KiB past what it is for (a small frame comes with
// its header in one system call), but only 4 KiB after a frame over 64 KiB,
// so that the next large value goes straight to where it belongs instead
// of mostly through the read-ahead.
class BoundedFramedTransport : public apache::thrift::transport::TFramedTransport,
                               public RpcFrameSource {
 public:
  enum class LargeFrames { kWhole, kAsDecoded };

  BoundedFramedTransport(std::shared_ptr<apache::thrift::transport::TSocket> socket,
                         RpcReadTimeouts timeouts, LargeFrames large = LargeFrames::kWhole);

  // Bytes of the current frame not yet decoded (buffered or still unread).
  uint32_t frame_bytes_left() const override {
    return static_cast<uint32_t>(rBound_ - rBase_) + frame_unread_;
  }
  // Bytes of the current frame in the buffer, not yet decoded.
  uint32_t buffered_bytes() const { return static_cast<uint32_t>(rBound_ - rBase_); }
  // Whether the bytes buffered now stay where they are until the next
  // frame: always with kWhole; with kAsDecoded once the frame's last piece
  // is buffered, as each piece is buffered over the one before.
  bool BufferedBytesLastTheFrame() const {
    return large_frames_ == LargeFrames::kWhole || frame_unread_ == 0;
  }
  // Decodes the next `out.size()` bytes of the frame into `out`: those
  // buffered, then the rest straight from the socket, within the frame's
  // deadline. SIZE_LIMIT past the end of the frame.
  void ReceiveValueInto(std::span<std::byte> out);
  // "ip:port" of the other end, without a name lookup.
  std::string peer() const;
  // The socket's descriptor, to wait for a reply with poll/epoll. A reply
  // is read through this transport, never from the descriptor.
  int socket_fd() const;
  // The system calls that have read this transport's socket, those that
  // found nothing included: what a frame costs in reads.
  uint64_t socket_reads() const { return socket_reads_; }
  // A second transport over the same socket, for a thread that writes while
  // this one reads (thrift/rpc_pipeline.h): the two share no buffer and no
  // message counter, only the socket. Plain TCP only; a TLS session is not
  // safe for a reader and a writer at once.
  std::shared_ptr<BoundedFramedTransport> WriteSide() const;

  void write_virt(const uint8_t* buf, uint32_t len) override;
  void flush() override;
  // Ends a message; bytes of its frame left undecoded are received and
  // dropped, so that the next frame starts where it should.
  uint32_t readEnd() override;

 protected:
  bool readFrame() override;
  // Past the buffered bytes: the rest of the current frame; between
  // messages (after readEnd), the next frame. A message is one frame: one
  // that reads past its frame is refused (SIZE_LIMIT), since the next frame
  // would replace the bytes its values are views of.
  uint32_t readSlow(uint8_t* buf, uint32_t len) override;
  // A string longer than what is buffered: buffers the rest of the frame
  // (kWhole), else leaves the protocol to read it.
  const uint8_t* borrowSlow(uint8_t* buf, uint32_t* len) override;

 private:
  bool ReadHeader(uint32_t* size);
  [[noreturn]] static void ThrowPastFrame();
  // Between frames: polls the socket for up to timeouts_.poll, yielding the
  // CPU between tries, while a CPU is spare. A frame that comes within it is
  // read without this thread sleeping in recv and being woken, which on a
  // virtual machine costs tens of microseconds. The bytes read into `out`
  // (0: the peer closed), or nullopt to wait in a blocking read.
  std::optional<uint32_t> PollForBytes(uint8_t* out, uint32_t room);
  // Receives the next `size` bytes of the current frame into frame_, which
  // grows as they arrive, and makes them the read buffer.
  void BufferFrameBytes(uint32_t size);
  // kWhole: appends the rest of the current frame to what frame_ holds of
  // it, so that the read buffer ends where the frame does.
  void BufferRestOfFrame();
  // Fills frame_ from byte `got` to byte `size` of the current frame's
  // buffered part, growing it as the bytes arrive; makes [0, size) the read
  // buffer with the first `consumed` bytes already decoded.
  void FillFrameBuffer(uint32_t got, uint32_t size, uint32_t consumed);
  // Receives the next `size` bytes of the current frame into `out`: first
  // what an earlier read brought along, then from the socket, within the
  // frame's deadline.
  void ReceiveFrameBytes(uint8_t* out, uint32_t size);
  // Plain TCP, ahead_ drained: one recvmsg of up to `size` bytes into `out`
  // and of what follows them into ahead_. The bytes that went to `out` (at
  // least 1), or nullopt when none came (nothing there with MSG_DONTWAIT,
  // or the socket's timer ran out). kTruncatedFrame when the peer closed.
  std::optional<uint32_t> ReceiveWithReadAhead(uint8_t* out, uint32_t size, int flags);
  // Makes frame_ hold at least `needed` bytes, keeping the first `got`.
  void GrowFrameBuffer(uint32_t size, uint32_t got, uint32_t needed);
  void SetSocketTimeout(std::chrono::milliseconds timeout);

  std::shared_ptr<apache::thrift::transport::TSocket> socket_;
  const RpcReadTimeouts timeouts_;
  const LargeFrames large_frames_;
  // Not TLS: the payload's first read may bypass the socket (see ReadPayload).
  const bool plain_socket_;
  std::chrono::milliseconds socket_timeout_{0};
  std::unique_ptr<uint8_t[]> frame_;
  uint32_t frame_capacity_ = 0;
  // frame_ as it was when BufferRestOfFrame had to grow it, kept for the
  // views into it until the next frame; and whether a growth keeps it.
  std::unique_ptr<uint8_t[]> viewed_buffer_;
  bool keep_viewed_buffer_ = false;
  // Bytes of the current frame still in the socket (or in ahead_), and by
  // when all of them must have arrived.
  uint32_t frame_unread_ = 0;
  std::chrono::steady_clock::time_point frame_deadline_;
  // A frame was read and its message not yet ended (readEnd).
  bool in_message_ = false;
  // Bytes read past what a read was for (a frame's header, or a piece of
  // the frame) and not yet handed on: the rest of the frame, or the start
  // of the next one when a peer pipelines. [begin, end).
  std::unique_ptr<uint8_t[]> ahead_;
  uint32_t ahead_begin_ = 0;
  uint32_t ahead_end_ = 0;
  // How far one read may take bytes ahead: the whole of ahead_
  // (kReadAheadBytes), or less after a large frame (kReadAheadAfterLargeFrame).
  uint32_t read_ahead_;
  uint64_t socket_reads_ = 0;  // socket_reads()
  // Large writes since the last flush, sent from where they are: each goes
  // after the first `at` bytes of the write buffer.
  struct BorrowedWrite {
    uint32_t at;
    const uint8_t* data;
    uint32_t size;
  };
  std::vector<BorrowedWrite> borrowed_;
};

// Strict binary protocol whose reads check declared sizes against the bytes
// left in the frame (Thrift 0.17 checks neither strings nor, without
// overflow, containers).
class BoundedBinaryProtocol
    : public apache::thrift::protocol::TVirtualProtocol<
          BoundedBinaryProtocol,
          apache::thrift::protocol::TBinaryProtocolT<apache::thrift::transport::TTransport>> {
 public:
  explicit BoundedBinaryProtocol(std::shared_ptr<BoundedFramedTransport> transport);
  // Over any transport that is also the RpcFrameSource `frame` (which must
  // outlive this protocol).
  BoundedBinaryProtocol(std::shared_ptr<apache::thrift::transport::TTransport> transport,
                        const RpcFrameSource* frame);

  uint32_t readMessageBegin(std::string& name, apache::thrift::protocol::TMessageType& type,
                            int32_t& seqid);
  uint32_t readString(std::string& str);
  uint32_t readBinary(std::string& str);
  // A binary field as a view of the frame when the frame holds it whole (a
  // server's frames, a reply buffered whole), else read into `storage`.
  // Valid until the transport reads its next frame.
  uint32_t readBinaryView(std::string_view& view, std::string& storage);
  // Memory for a binary field of `size` bytes, or an empty span to decline.
  using PlaceFn = std::function<std::span<std::byte>(uint32_t size)>;
  // readBinaryView, except that a field the frame's buffer does not hold
  // yet may go from the socket straight into memory `place` gives (then
  // `view` shows that memory). Over a transport that cannot (RpcFrameInput)
  // or when `place` declines, it is readBinaryView.
  uint32_t readBinaryPlaced(std::string_view& view, std::string& storage, const PlaceFn& place);
  uint32_t readListBegin(apache::thrift::protocol::TType& elem_type, uint32_t& size);
  uint32_t readSetBegin(apache::thrift::protocol::TType& elem_type, uint32_t& size);
  uint32_t readMapBegin(apache::thrift::protocol::TType& key_type,
                        apache::thrift::protocol::TType& value_type, uint32_t& size);
  // Everything else is the plain binary protocol's.
  using TBinaryProtocolT::readBinary;
  using TBinaryProtocolT::readString;

 private:
  // Throws SIZE_LIMIT unless `count` items of at least `min_bytes` each fit
  // in the rest of the frame.
  void RequireFrameBytes(int64_t count, int64_t min_bytes) const;
  // RequireFrameBytes, and at most kRpcMaxContainerElements.
  void RequireElements(int64_t count, int64_t min_bytes) const;
  // Reads `size` (checked) bytes into `str`.
  void ReadBytesInto(std::string& str, int32_t size);
  // The `size` (checked) bytes of a binary field as a view of the frame, or
  // read into `storage` when the frame does not hold them.
  uint32_t ViewBytes(int32_t size, std::string_view& view, std::string& storage);

  const RpcFrameSource* frame_;
  // The transport when it is a BoundedFramedTransport (readBinaryPlaced).
  BoundedFramedTransport* framed_ = nullptr;
};

// One received frame, decoded in place: the input transport of a server
// that reads frames itself (thrift/rpc_event_server.h).
class RpcFrameInput
    : public apache::thrift::transport::TVirtualTransport<RpcFrameInput,
                                                          apache::thrift::transport::TBufferBase>,
      public RpcFrameSource {
 public:
  RpcFrameInput();
  // Decodes from [data, data + size) next; the bytes must outlive the reads.
  void Observe(uint8_t* data, uint32_t size);
  uint32_t frame_bytes_left() const override { return static_cast<uint32_t>(rBound_ - rBase_); }

  bool isOpen() const override { return true; }

 protected:
  // Past the end of the frame: the message claims more than it carries.
  uint32_t readSlow(uint8_t* buf, uint32_t len) override;
  void writeSlow(const uint8_t* buf, uint32_t len) override;
  const uint8_t* borrowSlow(uint8_t* buf, uint32_t* len) override;
};

// One process's TLS material, loaded once (certificate, key, CA) and shared
// by every connection. Opaque so that OpenSSL stays out of this header.
class RpcTlsContext {
 public:
  // Null (plain TCP) when `settings` are empty. kInvalidParams (with the
  // reason in `*message`) when they are incomplete, a file cannot be read or
  // loaded, or the key does not match the certificate.
  static Result<std::shared_ptr<const RpcTlsContext>> Create(const TlsSettings& settings,
                                                             bool server, std::string* message);
  ~RpcTlsContext();

  apache::thrift::transport::TSSLSocketFactory& factory() const { return *factory_; }

 private:
  RpcTlsContext() = default;
  std::shared_ptr<apache::thrift::transport::TSSLSocketFactory> factory_;
};

// Sends Thrift's own messages (which it prints to stderr otherwise) to our
// log at debug level. Idempotent; every server and client calls it.
void RouteThriftLogsToOurLog();

// Connects to host:port with `options` (TLS when options.tls is set) and
// returns the opened bounded transport. Throws Thrift exceptions on failure;
// RpcChannel turns them into ErrorCodes.
std::shared_ptr<BoundedFramedTransport> OpenClientTransport(const std::string& host, int port,
                                                            const RpcOptions& options);

}  // namespace mooncake
