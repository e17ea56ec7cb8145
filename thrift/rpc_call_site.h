#pragma once

// Where the call being answered runs, for handlers that may have to wait.
//
// The epoll engine (thrift/rpc_event_server.h) answers calls that cannot
// block on a few loop threads, each of which serves many connections in
// turn: a handler that waited there (for a disk, another server) would hold
// up every connection behind it. RpcServerOptions::may_block names the calls
// that always wait; a call that waits only sometimes (a worker's Get, from
// DRAM or from SSD) asks here and, on a loop thread, hands itself over.
//
// A handler that waits only for an answer from elsewhere (a worker's put,
// for its claim at the master) need not hold any thread meanwhile: on the
// epoll engine it takes its call's reply (RpcDeferReply) and sends it later
// from whichever thread has the answer.
//
// Thread-safety: RpcCallMayBlock, RpcHandCallToPool and RpcDeferReply act
// on the calling thread only; an RpcDeferredReply is sent from any thread.

#include <memory>

namespace apache::thrift::protocol {
class TProtocol;
}

namespace mooncake {

// False only on a loop thread of the epoll engine; true on every thread of
// the threaded engine, on the epoll engine's pool, and outside any server.
bool RpcCallMayBlock();

// From a handler on a loop thread, before it has changed anything or written
// any reply: the server discards this call's output and answers the same
// frame again on a pool thread, where RpcCallMayBlock() is true. Anywhere
// else it does nothing.
void RpcHandCallToPool();

// A call's reply, sent after its handler returned. Until it is sent, its
// connection answers no other call, so a connection's replies stay in the
// order of its calls; and the request's frame is gone once the handler
// returns (copy what the reply needs).
class RpcDeferredReply {
 public:
  virtual ~RpcDeferredReply() = default;
  // Where the reply message goes: writeMessageBegin to writeMessageEnd, then
  // the transport's writeEnd and flush, as a processor writes one.
  virtual apache::thrift::protocol::TProtocol& protocol() = 0;
  // Sends what protocol() holds, from any thread, once; the connection then
  // goes on to its next call. A reply dropped unsent closes its connection
  // (its caller would otherwise wait for it forever).
  virtual void Send() = 0;
  // From the handler, before it returns and before Send: the call is
  // answered the usual way after all (through the processor's output, or on
  // the pool after RpcHandCallToPool). Anywhere else it does nothing.
  virtual void Cancel() = 0;
};

// From a handler on a thread of the epoll engine, before it has written any
// reply: the call's reply will go through the returned object. Null where
// replies cannot be deferred (the threaded engine, outside any server); the
// handler then answers as usual. Called twice in one call, the same object.
std::shared_ptr<RpcDeferredReply> RpcDeferReply();

}  // namespace mooncake
