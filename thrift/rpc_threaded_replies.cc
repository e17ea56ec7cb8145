#include "thrift/rpc_threaded_replies.h"

#include <arpa/inet.h>
#include <sys/socket.h>
#include <thrift/protocol/TBinaryProtocol.h>
#include <thrift/transport/TBufferTransports.h>

#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <utility>

#include "thrift/rpc_guard.h"
#include "thrift/rpc_transport.h"

namespace mooncake {

using apache::thrift::protocol::TBinaryProtocolT;
using apache::thrift::protocol::TProtocol;
using apache::thrift::transport::TMemoryBuffer;

namespace {

constexpr uint32_t kFrameHeaderBytes = sizeof(uint32_t);
// A deferred reply is small: a put's code.
constexpr uint32_t kFirstReplyBytes = 256;

}  // namespace

// One deferred reply, shared by its handle (what the handler holds) and its
// connection's thread.
struct ThreadedReplyState {
  enum class State {
    kInCall,       // taken, the handler still running
    kSentInCall,   // Send() within the call: written through the call's output
    kCancelled,    // Cancel(): the call is answered as usual
    kDropped,      // let go unsent within the call: the connection closes
    kOutstanding,  // the call ended; the reply is still to come
    kDone,         // sent (sent_ok), or the connection shut down
  };

  ThreadedReplyState(int socket_fd, std::shared_ptr<RpcGuard> rpc_guard)
      : fd(socket_fd),
        guard(std::move(rpc_guard)),
        buffer(std::make_shared<TMemoryBuffer>(kFirstReplyBytes)),
        protocol(std::make_shared<TBinaryProtocolT<TMemoryBuffer>>(buffer)) {
    const uint8_t header_space[kFrameHeaderBytes] = {};
    buffer->write(header_space, kFrameHeaderBytes);
  }

  // mu held: the whole frame into the socket without waiting, or the
  // connection shut down (a peer whose socket takes no more than this does
  // not read its replies).
  void SendLocked() {
    uint8_t* data = nullptr;
    uint32_t size = 0;
    buffer->getBuffer(&data, &size);
    uint32_t size_bits = htonl(size - kFrameHeaderBytes);
    std::memcpy(data, &size_bits, sizeof(size_bits));
    uint32_t sent = 0;
    int error = 0;
    while (sent < size) {
      ssize_t n = ::send(fd, data + sent, size - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n > 0) {
        sent += static_cast<uint32_t>(n);
      } else if (n < 0 && errno == EINTR) {
        continue;
      } else {
        error = n < 0 ? errno : 0;
        break;
      }
    }
    sent_ok = sent == size;
    if (!sent_ok) {
      if (error == EAGAIN || error == EWOULDBLOCK) {
        guard->Record(RpcFault::kSlowReader, PeerOfSocket(fd),
                      "the peer did not take a deferred reply");
      }
      // Part of a frame went, or none: the stream is done with either way;
      // the connection's thread sees it closed.
      ::shutdown(fd, SHUT_RDWR);
    }
    FinishLocked();
  }
  void FinishLocked() {
    state = State::kDone;
    cv.notify_all();
  }

  const int fd;
  const std::shared_ptr<RpcGuard> guard;
  const std::shared_ptr<TMemoryBuffer> buffer;
  const std::shared_ptr<TProtocol> protocol;
  std::mutex mu;
  std::condition_variable cv;
  State state = State::kInCall;  // guarded by mu
  bool sent_ok = false;          // guarded by mu
};

namespace {

thread_local ThreadedReplies this_thread_replies;

}  // namespace

// What the handler holds. Its end unsent ends the connection: the caller
// would wait for the reply for good.
class ThreadedDeferredReply final : public RpcDeferredReply {
 public:
  explicit ThreadedDeferredReply(std::shared_ptr<ThreadedReplyState> state)
      : state_(std::move(state)) {}
  ~ThreadedDeferredReply() override {
    std::lock_guard lock(state_->mu);
    using State = ThreadedReplyState::State;
    if (state_->state == State::kInCall) {
      state_->state = State::kDropped;
    } else if (state_->state == State::kOutstanding) {
      ::shutdown(state_->fd, SHUT_RDWR);
      state_->FinishLocked();
    }
  }

  TProtocol& protocol() override { return *state_->protocol; }

  void Send() override {
    using State = ThreadedReplyState::State;
    std::lock_guard lock(state_->mu);
    if (OnItsCallsThread()) {
      if (state_->state == State::kInCall) state_->state = State::kSentInCall;
      return;
    }
    // From another thread: at once, even before the call has ended: the
    // connection's thread writes nothing while its reply is deferred.
    if (state_->state == State::kInCall || state_->state == State::kOutstanding) {
      state_->SendLocked();
    }
  }

  void Cancel() override {
    std::lock_guard lock(state_->mu);
    if (OnItsCallsThread() && state_->state == ThreadedReplyState::State::kInCall) {
      state_->state = ThreadedReplyState::State::kCancelled;
      this_thread_replies.out_->set_discard_writes(false);  // the usual reply goes
    }
  }

 private:
  bool OnItsCallsThread() const {
    return this_thread_replies.in_call_ && this_thread_replies.current_ == state_;
  }

  const std::shared_ptr<ThreadedReplyState> state_;
};

ThreadedReplies& ThreadedReplies::ForThisThread() { return this_thread_replies; }

bool ThreadedReplies::AwaitOutstanding() {
  if (!outstanding_) return true;
  bool sent = false;
  {
    std::unique_lock lock(outstanding_->mu);
    outstanding_->cv.wait(lock, [&] {
      return outstanding_->state == ThreadedReplyState::State::kDone;
    });
    sent = outstanding_->sent_ok;
  }
  outstanding_.reset();
  return sent;
}

void ThreadedReplies::BeginCall(BoundedFramedTransport& in, BoundedFramedTransport* out,
                                std::shared_ptr<RpcGuard> guard) {
  in_call_ = true;
  may_defer_ = in.plain_socket() && out != nullptr;
  fd_ = in.socket_fd();
  out_ = out;
  if (guard_ != guard) guard_ = std::move(guard);
}

std::shared_ptr<RpcDeferredReply> ThreadedReplies::DeferCurrentCall() {
  if (!in_call_ || !may_defer_ || fd_ < 0) return nullptr;
  if (auto handle = current_handle_.lock()) return handle;  // asked twice
  if (current_) return nullptr;  // taken and let go already: no second one
  current_ = std::make_shared<ThreadedReplyState>(fd_, guard_);
  auto handle = std::make_shared<ThreadedDeferredReply>(current_);
  current_handle_ = handle;
  out_->set_discard_writes(true);  // the processor's own reply is not the call's
  return handle;
}

bool ThreadedReplies::EndCall(TProtocol& out, bool keep) {
  in_call_ = false;
  if (out_ != nullptr) out_->set_discard_writes(false);
  out_ = nullptr;
  std::shared_ptr<ThreadedReplyState> deferred = std::move(current_);
  current_.reset();
  current_handle_.reset();
  if (!deferred) return keep;
  using State = ThreadedReplyState::State;
  std::unique_lock lock(deferred->mu);
  switch (deferred->state) {
    case State::kCancelled:
    case State::kDone:  // sent from another thread already
      return keep && (deferred->state != State::kDone || deferred->sent_ok);
    case State::kDropped:
      return false;
    case State::kSentInCall: {
      lock.unlock();
      uint8_t* data = nullptr;
      uint32_t size = 0;
      deferred->buffer->getBuffer(&data, &size);
      auto& transport = *out.getTransport();
      transport.write(data + kFrameHeaderBytes, size - kFrameHeaderBytes);
      transport.writeEnd();
      transport.flush();
      return keep;
    }
    case State::kInCall:
      if (!keep) {
        // The connection closes: a later Send has nowhere to go.
        deferred->state = State::kDropped;
        return false;
      }
      deferred->state = State::kOutstanding;
      outstanding_ = std::move(deferred);
      return true;
    case State::kOutstanding:
      break;  // not before the call ends
  }
  return keep;
}

}  // namespace mooncake
