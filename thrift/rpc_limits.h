#pragma once

// The limits every RPC endpoint decodes under, the faults that close a
// connection, and the per-server counters of both. Plain values with no
// Thrift include, so configs and the admin layers can use them.
//
// Thread-safety: constants and plain values.

#include <array>
#include <cstdint>
#include <string_view>

#include "common/status.h"

namespace mooncake {

// Sized from our largest legitimate message, with 2x headroom: a BatchGet
// reply carries at most 2 chunks of data (8 MiB); a BatchPut request at most
// kRpcChunkBytes of values plus 4 MiB of keys; key lists (BatchGetLocation,
// AnnounceKeys) are sliced to at most 4 MiB of key bytes.
inline constexpr uint32_t kRpcMaxFrameBytes = 16u << 20;
static_assert(kRpcMaxFrameBytes >= 3 * kRpcChunkBytes + kRpcChunkBytes / 2);
// Key bytes one request of a key list carries at most (see above).
inline constexpr uint64_t kRpcMaxKeyListBytes = 4ull << 20;
// Elements one list, set or map may declare. Our longest lists are an
// announcement's 8192 keys (worker/master_link.cc) and a BatchGetLocation's
// 4096; a decoded element (a GetResult, say) takes ~200 bytes of memory
// while its wire form may be 5, so the count needs a bound of its own.
inline constexpr int64_t kRpcMaxContainerElements = 16384;
// Our IDL nests structs 3 deep (NodeInfo > TierUsage); skipped unknown
// fields count too.
inline constexpr int kRpcMaxDepth = 16;

// Server defaults; each is a flag of the master and the worker.
// With --rpc-engine threads a connection is one thread: this bounds threads
// and frame buffers.
inline constexpr int kDefaultRpcMaxConnections = 1024;
// Pooled client connections sit idle between calls; the client reconnects
// transparently when one was closed.
inline constexpr int kDefaultRpcIdleTimeoutMs = 120000;
// A started frame must arrive whole within this (16 MiB at 1 MB/s).
inline constexpr int kDefaultRpcReadTimeoutMs = 30000;

// A thread waiting for an RPC frame polls the socket this long before it
// sleeps in recv, while the machine has a spare CPU (--rpc-poll-us,
// ClientConfig::rpc_poll_us): a reply that comes within it costs no sleep and
// no wake-up, which on a virtual machine is most of a small call's latency.
inline constexpr int kDefaultRpcPollUs = 30;
// Polls longer than this are refused: past it a thread spins for a frame that
// is not coming soon.
inline constexpr int kMaxRpcPollUs = 1000;

// How a server waits for its plain-TCP connections (--rpc-engine). TLS
// connections always have a thread each.
enum class RpcEngine : uint8_t {
  // A thread per connection, blocked in recv: the lowest tail latency
  // measured on a small machine, and one thread per idle pooled connection.
  kThreads,
  // A few loop threads on one epoll set answer the calls that cannot block,
  // and a pool as large as the blocking calls in progress answers the rest
  // (thrift/rpc_event_server.h): fewer wake-ups per call, and one thread
  // per call in progress rather than per connection.
  kEpoll,
};

// The connection limits of one RPC server (--max-connections,
// --rpc-idle-timeout-ms, --rpc-read-timeout-ms, --rpc-engine on the master
// and the worker).
struct RpcServerLimits {
  // Served at once; more are accepted, closed at once and counted.
  int max_connections = kDefaultRpcMaxConnections;
  // A connection that starts no frame for this long is closed.
  int idle_timeout_ms = kDefaultRpcIdleTimeoutMs;
  // A frame that has started must arrive whole within this, and a reply
  // must be taken by the peer within this (a peer that never reads would
  // otherwise hold its thread and connection slot for good).
  int read_timeout_ms = kDefaultRpcReadTimeoutMs;
  // Longest poll for the next request before sleeping (--rpc-engine threads,
  // plain TCP; thrift/rpc_transport.h RpcReadTimeouts::poll). 0: never.
  int poll_us = kDefaultRpcPollUs;
  RpcEngine engine = RpcEngine::kThreads;
};

// Why a server closed a connection. kIdleTimeout is housekeeping; the others
// are rejected frames.
enum class RpcFault : uint8_t {
  kFrameTooLarge,   // declared frame size over kRpcMaxFrameBytes (or negative)
  kTruncatedFrame,  // the peer closed the connection inside a frame
  kSlowFrame,       // a frame did not arrive whole within the read timeout
  kSizeLimit,       // a string or container larger than the rest of its frame
  kDepthLimit,      // structs nested deeper than kRpcMaxDepth
  kMalformed,       // anything else the protocol could not decode
  kTlsHandshake,    // no TLS, or no certificate signed by our CA
  kInternal,        // the process failed to handle a frame (e.g. bad_alloc)
  kIdleTimeout,     // nothing sent for the idle timeout
  kSlowReader,      // the peer did not take its reply within the read timeout
};
inline constexpr size_t kRpcFaultCount = 10;

constexpr std::string_view RpcFaultName(RpcFault fault) {
  constexpr std::array<std::string_view, kRpcFaultCount> kNames = {
      "frame_too_large", "truncated_frame", "slow_frame", "size_limit",   "depth_limit",
      "malformed",       "tls_handshake",   "internal",   "idle_timeout", "slow_reader"};
  return kNames[static_cast<size_t>(fault)];
}

// How the waits for an RPC frame went in one process, over all of its
// connections (served and made) since it started (RpcReadTimeouts::poll).
struct RpcPollCounts {
  // Bytes (or the peer's close) came while polling: no sleep, no wake-up.
  uint64_t data = 0;
  // The poll budget ran out, and the thread slept in recv as before.
  uint64_t expired = 0;
  // No CPU was spare, so the thread did not poll.
  uint64_t busy = 0;
};

// A snapshot of one RPC server's connection counters.
struct RpcServerStats {
  int64_t active_connections = 0;
  uint64_t accepted_connections = 0;
  // Connections closed at once because max_connections were being served.
  uint64_t refused_connections = 0;
  // Connections closed, by fault (RpcFault as index).
  std::array<uint64_t, kRpcFaultCount> faults{};
  // The process's polls (all of its connections, not only this server's).
  RpcPollCounts polls;

  uint64_t fault_count(RpcFault fault) const { return faults[static_cast<size_t>(fault)]; }
};

}  // namespace mooncake
