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
// Thread-safety: both act on the calling thread only.

namespace mooncake {

// False only on a loop thread of the epoll engine; true on every thread of
// the threaded engine, on the epoll engine's pool, and outside any server.
bool RpcCallMayBlock();

// From a handler on a loop thread, before it has changed anything or written
// any reply: the server discards this call's output and answers the same
// frame again on a pool thread, where RpcCallMayBlock() is true. Anywhere
// else it does nothing.
void RpcHandCallToPool();

}  // namespace mooncake
