#pragma once

// Deferred replies (RpcDeferReply, thrift/rpc_call_site.h) on the threaded
// engine, over plain TCP (thrift/ only).
//
// A connection's thread that deferred a call's reply goes back to reading the
// connection: it sleeps in recv until the peer sends again, which a caller
// that waits for each reply does only after the reply came. The reply is
// sent by whichever thread has the answer, straight into the socket and
// without waiting; a reply is a few dozen bytes, which the socket's buffer
// takes unless the peer has stopped reading its replies, and such a peer's
// connection is shut down (counted as a slow reader). The connection's next
// call is answered only after the reply has gone, so replies keep the order
// of the calls, and the connection closes only after it has gone too.
//
// So a worker's put costs its connection's thread one wake-up (its request)
// instead of two (its request, then its claim's answer from the master).
// TLS connections never defer: their bytes go through the TLS session, which
// only the connection's thread may use.
//
// Thread-safety: ThreadedReplies belongs to one connection's thread (one per
// connection on this engine); a deferred reply is sent from any thread.

#include <memory>

#include "thrift/rpc_call_site.h"

namespace apache::thrift::protocol {
class TProtocol;
}

namespace mooncake {

class BoundedFramedTransport;
class RpcGuard;
struct ThreadedReplyState;

class ThreadedReplies {
 public:
  // The calling thread's (a connection's thread).
  static ThreadedReplies& ForThisThread();

  // Whether a reply of an earlier call has still to be sent.
  bool has_outstanding() const { return outstanding_ != nullptr; }
  // Waits until the earlier call's reply has gone; false if it could not be
  // sent (the connection was shut down: close it).
  bool AwaitOutstanding();

  // Around one call the processor answers, read from `in` and answered
  // through `out`: RpcDeferReply may defer it (over plain TCP only), and
  // then what the processor writes to `out` is dropped.
  void BeginCall(BoundedFramedTransport& in, BoundedFramedTransport* out,
                 std::shared_ptr<RpcGuard> guard);
  // After it, with whether the processor would go on: sends a reply sent
  // within the call through `out`, keeps one still to come as outstanding.
  // False when the connection must close (a deferred reply dropped unsent).
  // Throws what writing to `out` throws.
  bool EndCall(apache::thrift::protocol::TProtocol& out, bool keep);

  // RpcDeferReply on this engine: null outside a call that may defer.
  std::shared_ptr<RpcDeferredReply> DeferCurrentCall();

 private:
  friend class ThreadedDeferredReply;

  bool in_call_ = false;
  bool may_defer_ = false;
  int fd_ = -1;
  BoundedFramedTransport* out_ = nullptr;  // during a call
  std::shared_ptr<RpcGuard> guard_;
  std::shared_ptr<ThreadedReplyState> current_;      // deferred in this call
  std::weak_ptr<RpcDeferredReply> current_handle_;   // what the handler holds
  std::shared_ptr<ThreadedReplyState> outstanding_;  // an earlier call's, unsent
};

}  // namespace mooncake
