#pragma once

// One-sided RDMA transfers over rdma-core (ibverbs), free of Thrift: the worker
// exchanges RdmaEndpointInfo / RdmaRemoteRegion over its RPCs itself.
//
//   RdmaContext      one opened device port and one protection domain
//   RdmaMemoryRegion a registered buffer (RAII, move-only); remote() is what a
//                    peer needs to READ or WRITE it
//   RdmaQueuePair    one RC queue pair with its own completion queue; after
//                    Connect() it moves bytes with RDMA READ / WRITE and waits
//                    for every completion before returning
//
// Ownership: regions and queue pairs borrow their RdmaContext, which must
// outlive them; a region's memory is owned by the caller and must outlive the
// region. With no RDMA device, RdmaContext::Open fails with kTierNotFound and a
// reason, and nothing else can be created: callers fall back to TCP.
//
// Thread-safety: RdmaContext is immutable after Open, and ibverbs serialises
// registration internally, so Register() may be called from any thread. An
// RdmaMemoryRegion is a value: share it read-only, destroy it once no transfer
// uses it. An RdmaQueuePair is used by one thread at a time (its send queue and
// completion queue are a single pipeline); its mutex serialises Connect/Read/
// Write so concurrent callers queue up instead of stealing each other's
// completions. Use one queue pair per thread for parallel transfers.

#include <array>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "common/status.h"

struct ibv_context;
struct ibv_pd;
struct ibv_mr;
struct ibv_cq;
struct ibv_qp;

namespace mooncake {

// What a peer needs to connect its queue pair to ours.
struct RdmaEndpointInfo {
  uint16_t lid = 0;               // InfiniBand local id; 0 on RoCE
  std::array<uint8_t, 16> gid{};  // all zero: address by LID only
  uint32_t qp_num = 0;
  uint32_t psn = 0;  // initial packet sequence number (24 bits)
  int mtu = 0;       // an ibv_mtu value (1 = 256 B .. 5 = 4096 B)
};

// A registered range a peer may READ or WRITE.
struct RdmaRemoteRegion {
  uint64_t addr = 0;
  uint64_t length = 0;
  uint32_t rkey = 0;
};

// True when [offset, offset + length) lies inside a region of region_length
// bytes; overflow-safe.
bool RdmaRangeFits(uint64_t region_length, uint64_t offset, uint64_t length);

// True for a RoCE v2 GID that carries an IPv4 address (::ffff:a.b.c.d).
bool IsIpv4MappedGid(const std::array<uint8_t, 16>& gid);

// "fe80:0000:...": eight colon-separated groups of four hex digits.
std::string FormatGid(const std::array<uint8_t, 16>& gid);

// A registered memory range. Deregisters on destruction. A default-constructed
// region is empty (valid() is false) and only useful as a placeholder.
class RdmaMemoryRegion {
 public:
  RdmaMemoryRegion() = default;
  ~RdmaMemoryRegion();
  RdmaMemoryRegion(RdmaMemoryRegion&& other) noexcept;
  RdmaMemoryRegion& operator=(RdmaMemoryRegion&& other) noexcept;
  RdmaMemoryRegion(const RdmaMemoryRegion&) = delete;
  RdmaMemoryRegion& operator=(const RdmaMemoryRegion&) = delete;

  bool valid() const { return mr_ != nullptr; }
  void* addr() const { return addr_; }
  uint64_t length() const { return length_; }
  uint32_t lkey() const;
  uint32_t rkey() const;
  // Whether the memory lives on a GPU (registered through GPUDirect).
  bool device_memory() const { return device_memory_; }
  RdmaRemoteRegion remote() const;

 private:
  friend class RdmaContext;
  RdmaMemoryRegion(ibv_mr* mr, void* addr, uint64_t length, bool device_memory)
      : mr_(mr), addr_(addr), length_(length), device_memory_(device_memory) {}
  void Reset();

  ibv_mr* mr_ = nullptr;
  void* addr_ = nullptr;
  uint64_t length_ = 0;
  bool device_memory_ = false;
};

class RdmaContext {
 public:
  // Opens `device_name` ("" = the first device) on `port` (1-based).
  // gid_index -1 picks the first RoCE v2 IPv4-mapped GID, else index 0.
  // Errors: kInvalidParams for a port outside [1, 255], gid_index < -1 or a
  // gid_index beyond the port's table; kTierNotFound when there is no device,
  // the named device is absent, or the port is missing or not ACTIVE;
  // kInternalError when a verbs call fails. `why` gets a one-line reason.
  static Result<std::unique_ptr<RdmaContext>> Open(const std::string& device_name = "",
                                                   int port = 1, int gid_index = -1,
                                                   std::string* why = nullptr);

  // One line on what RDMA hardware this process sees, e.g.
  // "no RDMA device: ibv_get_device_list found 0 devices" or
  // "1 RDMA device(s): mlx5_0 (port 1 ACTIVE, InfiniBand)".
  static std::string ProbeReason();

  ~RdmaContext();
  RdmaContext(const RdmaContext&) = delete;
  RdmaContext& operator=(const RdmaContext&) = delete;

  // Registers [addr, addr + length) for local write and remote read/write.
  // device_memory=true marks GPU memory (GPUDirect through nvidia-peermem or
  // amdgpu); when that fails the result is kTransferFail (logged) and the
  // caller stages through host memory instead. kInvalidParams for a null addr
  // or zero length; kInternalError when host registration fails.
  Result<RdmaMemoryRegion> Register(void* addr, uint64_t length, bool device_memory = false);

  const std::string& device_name() const { return device_name_; }
  int port() const { return port_; }
  int gid_index() const { return gid_index_; }
  uint16_t lid() const { return lid_; }
  const std::array<uint8_t, 16>& gid() const { return gid_; }
  int active_mtu() const { return active_mtu_; }
  bool is_roce() const { return is_roce_; }
  // The largest message one work request may carry.
  uint64_t max_msg_size() const { return max_msg_size_; }
  int max_qp_wr() const { return max_qp_wr_; }
  int max_cqe() const { return max_cqe_; }
  int max_rd_atomic() const { return max_rd_atomic_; }            // as initiator
  int max_dest_rd_atomic() const { return max_dest_rd_atomic_; }  // as responder

  ibv_context* verbs() const { return context_; }
  ibv_pd* pd() const { return pd_; }

 private:
  RdmaContext() = default;
  Result<void> QueryPort(std::string* why);
  Result<void> PickGid(int requested, std::string* why);

  ibv_context* context_ = nullptr;
  ibv_pd* pd_ = nullptr;
  std::string device_name_;
  int port_ = 1;
  int gid_index_ = 0;
  uint16_t lid_ = 0;
  std::array<uint8_t, 16> gid_{};
  int active_mtu_ = 0;
  bool is_roce_ = false;
  uint64_t max_msg_size_ = 0;
  int max_qp_wr_ = 0;
  int max_cqe_ = 0;
  int max_rd_atomic_ = 0;
  int max_dest_rd_atomic_ = 0;
  int gid_table_length_ = 0;
};

class RdmaQueuePair {
 public:
  // Largest single work request; bigger transfers are split.
  static constexpr uint64_t kMaxChunkBytes = 1ull << 20;
  // Send-queue depth asked for (capped by the device).
  static constexpr int kSendQueueDepth = 128;
  static constexpr std::chrono::milliseconds kDefaultTimeout{10'000};

  // A reset queue pair with its own completion queue, ready for Connect().
  static Result<std::unique_ptr<RdmaQueuePair>> Create(RdmaContext& context);

  ~RdmaQueuePair();
  RdmaQueuePair(const RdmaQueuePair&) = delete;
  RdmaQueuePair& operator=(const RdmaQueuePair&) = delete;

  // What the peer passes to its own Connect().
  RdmaEndpointInfo local() const;

  // INIT -> RTR -> RTS towards `remote`. GID addressing (GRH) when the remote
  // GID is non-zero, LID otherwise. kInvalidParams for a malformed endpoint or
  // a second Connect; kTransferFail when the device refuses a transition.
  Result<void> Connect(const RdmaEndpointInfo& remote);
  bool connected() const;

  // Copies `length` bytes from remote[remote_offset..] into local[local_offset..]
  // (Read) or the other way (Write), waiting for every completion. Both ranges
  // are bounds-checked (kInvalidParams, nothing posted). Any error completion or
  // a timeout returns kTransferFail; the queue pair is then in the error state
  // and every later call fails: create and connect a new one.
  Result<void> Read(const RdmaMemoryRegion& local, uint64_t local_offset,
                    const RdmaRemoteRegion& remote, uint64_t remote_offset, uint64_t length,
                    std::chrono::milliseconds timeout = kDefaultTimeout);
  Result<void> Write(const RdmaMemoryRegion& local, uint64_t local_offset,
                     const RdmaRemoteRegion& remote, uint64_t remote_offset, uint64_t length,
                     std::chrono::milliseconds timeout = kDefaultTimeout);

  int send_queue_depth() const { return depth_; }

 private:
  enum class State { kReset, kConnected, kBroken };
  struct Op;

  RdmaQueuePair(RdmaContext& context, ibv_cq* cq, ibv_qp* qp, int depth, uint32_t psn);
  Result<void> ToInit();
  Result<void> ToRtr(const RdmaEndpointInfo& remote);
  Result<void> ToRts();
  Result<void> Transfer(int opcode, const RdmaMemoryRegion& local, uint64_t local_offset,
                        const RdmaRemoteRegion& remote, uint64_t remote_offset, uint64_t length,
                        std::chrono::milliseconds timeout);
  Result<void> CheckTransfer(const RdmaMemoryRegion& local, uint64_t local_offset,
                             const RdmaRemoteRegion& remote, uint64_t remote_offset,
                             uint64_t length) const;
  Result<void> PostBatch(Op& op, int room);
  Result<int> PollOnce(Op& op);
  void Break(int outstanding);

  RdmaContext& context_;
  ibv_cq* const cq_;
  ibv_qp* const qp_;
  const int depth_;
  const uint32_t psn_;
  const uint64_t chunk_bytes_;
  mutable std::mutex mu_;  // guards state_ and the use of qp_/cq_ by transfers
  State state_ = State::kReset;
};

// Two queue pairs of one context connected to each other: how tests and the
// transfer bench move bytes without a second node. `first` issues the
// transfers in the usual case; both ends work.
struct RdmaLoopbackPair {
  std::unique_ptr<RdmaQueuePair> first;
  std::unique_ptr<RdmaQueuePair> second;
};
Result<RdmaLoopbackPair> ConnectLoopbackPair(RdmaContext& context);

}  // namespace mooncake
