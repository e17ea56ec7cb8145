#include "transport/rdma_transport.h"

#include <infiniband/verbs.h>
#include <spdlog/fmt/fmt.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <random>
#include <string_view>
#include <utility>

#include "common/log.h"

namespace mooncake {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int kAccessFlags =
    IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE;
constexpr int kWantedRdAtomic = 16;
constexpr uint32_t kMax24Bit = 0xffffff;  // QP numbers and PSNs are 24-bit
constexpr int kPollBatch = 16;
// How long a broken queue pair waits for its flushed work requests.
constexpr auto kDrainTimeout = std::chrono::seconds(1);

void SetWhy(std::string* why, std::string text) {
  if (why != nullptr) *why = std::move(text);
}

std::string ErrnoText(int error) {
  return fmt::format("{} (errno {})", std::strerror(error), error);
}

// The device list, freed on scope exit.
struct DeviceList {
  ibv_device** devices = nullptr;
  int count = 0;
  ~DeviceList() {
    if (devices != nullptr) ibv_free_device_list(devices);
  }
};

// ibv_get_device_list returns NULL (ENOSYS) on kernels without RDMA, and an
// empty list where the subsystem exists but no device does.
Result<void> ListDevices(DeviceList& list, std::string* why) {
  errno = 0;
  list.devices = ibv_get_device_list(&list.count);
  if (list.devices == nullptr) {
    const int error = errno;
    SetWhy(why, "no RDMA device: ibv_get_device_list failed: " + ErrnoText(error) +
                    (error == ENOSYS ? ", the kernel has no RDMA support" : ""));
    return Err(ErrorCode::kTierNotFound);
  }
  if (list.count <= 0) {
    SetWhy(why, "no RDMA device: ibv_get_device_list found 0 devices");
    return Err(ErrorCode::kTierNotFound);
  }
  return {};
}

std::string DeviceNames(const DeviceList& list) {
  std::string names;
  for (int i = 0; i < list.count; ++i) {
    names += fmt::format("{}{}", i == 0 ? "" : ", ", ibv_get_device_name(list.devices[i]));
  }
  return names;
}

// The device called `name`, or the first one when `name` is empty.
Result<ibv_device*> FindDevice(const DeviceList& list, const std::string& name, std::string* why) {
  if (name.empty()) return list.devices[0];
  for (int i = 0; i < list.count; ++i) {
    if (name == ibv_get_device_name(list.devices[i])) return list.devices[i];
  }
  SetWhy(why, fmt::format("RDMA device '{}' not found; present: {}", name, DeviceNames(list)));
  return Err(ErrorCode::kTierNotFound);
}

std::string_view LinkLayerName(uint8_t link_layer) {
  return link_layer == IBV_LINK_LAYER_ETHERNET ? "RoCE" : "InfiniBand";
}

// "mlx5_0 (port 1 ACTIVE, InfiniBand)" for one device, every port listed.
std::string DescribeDevice(ibv_device* device) {
  const std::string name = ibv_get_device_name(device);
  ibv_context* context = ibv_open_device(device);
  if (context == nullptr) return fmt::format("{} (cannot open: {})", name, ErrnoText(errno));
  ibv_device_attr attr{};
  std::string ports;
  if (ibv_query_device(context, &attr) == 0) {
    for (int port = 1; port <= attr.phys_port_cnt; ++port) {
      ibv_port_attr port_attr{};
      if (ibv_query_port(context, port, &port_attr) != 0) continue;
      ports +=
          fmt::format("{}port {} {}, {}", ports.empty() ? "" : "; ", port,
                      ibv_port_state_str(port_attr.state), LinkLayerName(port_attr.link_layer));
    }
  }
  ibv_close_device(context);
  return fmt::format("{} ({})", name, ports.empty() ? "no port information" : ports);
}

bool IsZeroGid(const std::array<uint8_t, 16>& gid) {
  return std::all_of(gid.begin(), gid.end(), [](uint8_t b) { return b == 0; });
}

std::array<uint8_t, 16> ToArray(const ibv_gid& gid) {
  std::array<uint8_t, 16> out{};
  std::memcpy(out.data(), gid.raw, out.size());
  return out;
}

uint32_t RandomPsn() { return std::random_device{}() & kMax24Bit; }

}  // namespace

// ---- Free helpers ----

bool RdmaRangeFits(uint64_t region_length, uint64_t offset, uint64_t length) {
  return offset <= region_length && length <= region_length - offset;
}

bool IsIpv4MappedGid(const std::array<uint8_t, 16>& gid) {
  for (int i = 0; i < 10; ++i) {
    if (gid[i] != 0) return false;
  }
  return gid[10] == 0xff && gid[11] == 0xff;
}

std::string FormatGid(const std::array<uint8_t, 16>& gid) {
  std::string out;
  for (size_t i = 0; i < gid.size(); i += 2) {
    out += fmt::format("{}{:02x}{:02x}", i == 0 ? "" : ":", gid[i], gid[i + 1]);
  }
  return out;
}

// ---- RdmaMemoryRegion ----

RdmaMemoryRegion::~RdmaMemoryRegion() { Reset(); }

RdmaMemoryRegion::RdmaMemoryRegion(RdmaMemoryRegion&& other) noexcept
    : mr_(std::exchange(other.mr_, nullptr)),
      addr_(std::exchange(other.addr_, nullptr)),
      length_(std::exchange(other.length_, 0)),
      device_memory_(std::exchange(other.device_memory_, false)) {}

RdmaMemoryRegion& RdmaMemoryRegion::operator=(RdmaMemoryRegion&& other) noexcept {
  if (this != &other) {
    Reset();
    mr_ = std::exchange(other.mr_, nullptr);
    addr_ = std::exchange(other.addr_, nullptr);
    length_ = std::exchange(other.length_, 0);
    device_memory_ = std::exchange(other.device_memory_, false);
  }
  return *this;
}

void RdmaMemoryRegion::Reset() {
  if (mr_ == nullptr) return;
  if (int error = ibv_dereg_mr(mr_); error != 0) {
    MC_LOG_WARN("rdma deregister failed addr={} length={} error={}", addr_, length_,
                ErrnoText(error));
  }
  mr_ = nullptr;
}

uint32_t RdmaMemoryRegion::lkey() const { return mr_ != nullptr ? mr_->lkey : 0; }
uint32_t RdmaMemoryRegion::rkey() const { return mr_ != nullptr ? mr_->rkey : 0; }

RdmaRemoteRegion RdmaMemoryRegion::remote() const {
  return RdmaRemoteRegion{
      .addr = reinterpret_cast<uint64_t>(addr_), .length = length_, .rkey = rkey()};
}

// ---- RdmaContext ----

std::string RdmaContext::ProbeReason() {
  DeviceList list;
  std::string why;
  if (!ListDevices(list, &why)) return why;
  std::string text = fmt::format("{} RDMA device(s):", list.count);
  for (int i = 0; i < list.count; ++i) text += " " + DescribeDevice(list.devices[i]);
  return text;
}

Result<std::unique_ptr<RdmaContext>> RdmaContext::Open(const std::string& device_name, int port,
                                                       int gid_index, std::string* why) {
  if (port < 1 || port > 255) {
    SetWhy(why, fmt::format("rdma port {} out of range [1, 255]", port));
    return Err(ErrorCode::kInvalidParams);
  }
  if (gid_index < -1) {
    SetWhy(why, fmt::format("rdma gid index {} invalid (-1 picks one, else >= 0)", gid_index));
    return Err(ErrorCode::kInvalidParams);
  }
  DeviceList list;
  if (auto listed = ListDevices(list, why); !listed) return Err(listed.error());
  auto device = FindDevice(list, device_name, why);
  if (!device) return Err(device.error());
  std::unique_ptr<RdmaContext> context(new RdmaContext());
  context->device_name_ = ibv_get_device_name(*device);
  context->port_ = port;
  context->context_ = ibv_open_device(*device);
  if (context->context_ == nullptr) {
    SetWhy(why,
           fmt::format("ibv_open_device {} failed: {}", context->device_name_, ErrnoText(errno)));
    return Err(ErrorCode::kInternalError);
  }
  if (auto ok = context->QueryPort(why); !ok) return Err(ok.error());
  if (auto ok = context->PickGid(gid_index, why); !ok) return Err(ok.error());
  context->pd_ = ibv_alloc_pd(context->context_);
  if (context->pd_ == nullptr) {
    SetWhy(why,
           fmt::format("ibv_alloc_pd on {} failed: {}", context->device_name_, ErrnoText(errno)));
    return Err(ErrorCode::kInternalError);
  }
  MC_LOG_INFO("rdma opened device={} port={} link={} lid={} gid_index={} gid={} mtu={}",
              context->device_name_, port, context->is_roce_ ? "RoCE" : "InfiniBand", context->lid_,
              context->gid_index_, FormatGid(context->gid_), context->active_mtu_);
  return context;
}

Result<void> RdmaContext::QueryPort(std::string* why) {
  ibv_device_attr device_attr{};
  if (int error = ibv_query_device(context_, &device_attr); error != 0) {
    SetWhy(why, fmt::format("ibv_query_device {} failed: {}", device_name_, ErrnoText(error)));
    return Err(ErrorCode::kInternalError);
  }
  max_qp_wr_ = device_attr.max_qp_wr;
  max_cqe_ = device_attr.max_cqe;
  max_rd_atomic_ = device_attr.max_qp_init_rd_atom;
  max_dest_rd_atomic_ = device_attr.max_qp_rd_atom;
  ibv_port_attr attr{};
  if (port_ > device_attr.phys_port_cnt || ibv_query_port(context_, port_, &attr) != 0) {
    SetWhy(why, fmt::format("RDMA device {} has no port {} ({} port(s))", device_name_, port_,
                            device_attr.phys_port_cnt));
    return Err(ErrorCode::kTierNotFound);
  }
  if (attr.state != IBV_PORT_ACTIVE) {
    SetWhy(why, fmt::format("port {} of RDMA device {} is {}, not ACTIVE", port_, device_name_,
                            ibv_port_state_str(attr.state)));
    return Err(ErrorCode::kTierNotFound);
  }
  lid_ = attr.lid;
  active_mtu_ = attr.active_mtu;
  is_roce_ = attr.link_layer == IBV_LINK_LAYER_ETHERNET;
  max_msg_size_ = attr.max_msg_sz;
  gid_table_length_ = attr.gid_tbl_len;
  return {};
}

Result<void> RdmaContext::PickGid(int requested, std::string* why) {
  if (requested >= gid_table_length_ && requested > 0) {
    SetWhy(why, fmt::format("rdma gid index {} beyond the GID table of {} port {} ({} entries)",
                            requested, device_name_, port_, gid_table_length_));
    return Err(ErrorCode::kInvalidParams);
  }
  int index = std::max(requested, 0);
  if (requested < 0 && is_roce_) {
    for (int i = 0; i < gid_table_length_; ++i) {
      ibv_gid_entry entry{};
      if (ibv_query_gid_ex(context_, port_, i, &entry, 0) != 0) continue;
      if (entry.gid_type == IBV_GID_TYPE_ROCE_V2 && IsIpv4MappedGid(ToArray(entry.gid))) {
        index = i;
        break;
      }
    }
  }
  ibv_gid gid{};
  if (int error = ibv_query_gid(context_, port_, index, &gid); error != 0) {
    if (requested >= 0 || is_roce_) {
      SetWhy(why, fmt::format("ibv_query_gid {} port {} index {} failed: {}", device_name_, port_,
                              index, ErrnoText(errno)));
      return Err(ErrorCode::kInternalError);
    }
    MC_LOG_WARN("rdma no gid device={} port={}: addressing by lid={}", device_name_, port_, lid_);
  }
  gid_index_ = index;
  gid_ = ToArray(gid);
  return {};
}

RdmaContext::~RdmaContext() {
  if (pd_ != nullptr) {
    if (int error = ibv_dealloc_pd(pd_); error != 0) {
      MC_LOG_WARN("rdma dealloc pd failed device={} error={} (a region or queue pair outlived it)",
                  device_name_, ErrnoText(error));
    }
  }
  if (context_ != nullptr) ibv_close_device(context_);
}

Result<RdmaMemoryRegion> RdmaContext::Register(void* addr, uint64_t length, bool device_memory) {
  if (addr == nullptr || length == 0) {
    MC_LOG_WARN("rdma register rejected addr={} length={}", addr, length);
    return Err(ErrorCode::kInvalidParams);
  }
  ibv_mr* mr = ibv_reg_mr(pd_, addr, length, kAccessFlags);
  if (mr == nullptr) {
    const int error = errno;
    if (device_memory) {
      MC_LOG_WARN(
          "rdma register of device memory failed device={} addr={} length={} error={}: "
          "GPUDirect needs nvidia-peermem (or amdgpu peer-direct); staging through host memory",
          device_name_, addr, length, ErrnoText(error));
      return Err(ErrorCode::kTransferFail);
    }
    MC_LOG_ERROR("rdma register failed device={} addr={} length={} error={}", device_name_, addr,
                 length, ErrnoText(error));
    return Err(ErrorCode::kInternalError);
  }
  return RdmaMemoryRegion(mr, addr, length, device_memory);
}

// ---- RdmaQueuePair ----

// One Read or Write in progress: what to post next and what is in flight.
struct RdmaQueuePair::Op {
  ibv_wr_opcode opcode;
  uint64_t local_addr;
  uint32_t lkey;
  uint64_t remote_addr;
  uint32_t rkey;
  uint64_t length;
  uint64_t posted = 0;  // bytes handed to the device so far
  int outstanding = 0;  // work requests posted and not yet completed
  uint64_t next_wr_id = 0;
};

Result<std::unique_ptr<RdmaQueuePair>> RdmaQueuePair::Create(RdmaContext& context) {
  const int depth =
      std::max(1, std::min({kSendQueueDepth, context.max_qp_wr(), context.max_cqe()}));
  ibv_cq* cq = ibv_create_cq(context.verbs(), depth, nullptr, nullptr, 0);
  if (cq == nullptr) {
    MC_LOG_ERROR("rdma create cq failed device={} depth={} error={}", context.device_name(), depth,
                 ErrnoText(errno));
    return Err(ErrorCode::kInternalError);
  }
  ibv_qp_init_attr init{};
  init.send_cq = cq;
  init.recv_cq = cq;
  init.qp_type = IBV_QPT_RC;
  init.sq_sig_all = 0;
  init.cap.max_send_wr = depth;
  init.cap.max_recv_wr = 1;
  init.cap.max_send_sge = 1;
  init.cap.max_recv_sge = 1;
  ibv_qp* qp = ibv_create_qp(context.pd(), &init);
  if (qp == nullptr) {
    MC_LOG_ERROR("rdma create qp failed device={} depth={} error={}", context.device_name(), depth,
                 ErrnoText(errno));
    ibv_destroy_cq(cq);
    return Err(ErrorCode::kInternalError);
  }
  return std::unique_ptr<RdmaQueuePair>(new RdmaQueuePair(context, cq, qp, depth, RandomPsn()));
}

RdmaQueuePair::RdmaQueuePair(RdmaContext& context, ibv_cq* cq, ibv_qp* qp, int depth, uint32_t psn)
    : context_(context),
      cq_(cq),
      qp_(qp),
      depth_(depth),
      psn_(psn),
      chunk_bytes_(context.max_msg_size() == 0
                       ? kMaxChunkBytes
                       : std::min<uint64_t>(kMaxChunkBytes, context.max_msg_size())) {}

RdmaQueuePair::~RdmaQueuePair() {
  if (int error = ibv_destroy_qp(qp_); error != 0) {
    MC_LOG_WARN("rdma destroy qp failed qp={} error={}", qp_->qp_num, ErrnoText(error));
  }
  if (int error = ibv_destroy_cq(cq_); error != 0) {
    MC_LOG_WARN("rdma destroy cq failed error={}", ErrnoText(error));
  }
}

RdmaEndpointInfo RdmaQueuePair::local() const {
  return RdmaEndpointInfo{.lid = context_.lid(),
                          .gid = context_.gid(),
                          .qp_num = qp_->qp_num,
                          .psn = psn_,
                          .mtu = context_.active_mtu()};
}

bool RdmaQueuePair::connected() const {
  std::lock_guard lock(mu_);
  return state_ == State::kConnected;
}

Result<void> RdmaQueuePair::Connect(const RdmaEndpointInfo& remote) {
  std::lock_guard lock(mu_);
  if (state_ != State::kReset) {
    MC_LOG_WARN("rdma connect rejected qp={}: already connected or broken", qp_->qp_num);
    return Err(ErrorCode::kInvalidParams);
  }
  const bool has_gid = !IsZeroGid(remote.gid);
  if (remote.qp_num == 0 || remote.qp_num > kMax24Bit || remote.psn > kMax24Bit ||
      remote.mtu < IBV_MTU_256 || remote.mtu > IBV_MTU_4096 ||
      (!has_gid && (context_.is_roce() || remote.lid == 0))) {
    MC_LOG_WARN("rdma connect rejected qp={}: bad remote qp_num={} psn={} mtu={} lid={} gid={}",
                qp_->qp_num, remote.qp_num, remote.psn, remote.mtu, remote.lid,
                FormatGid(remote.gid));
    return Err(ErrorCode::kInvalidParams);
  }
  auto ok = ToInit();
  if (ok) ok = ToRtr(remote);
  if (ok) ok = ToRts();
  if (!ok) {
    state_ = State::kBroken;
    return ok;
  }
  state_ = State::kConnected;
  MC_LOG_DEBUG("rdma connected qp={} remote_qp={} remote_lid={} remote_gid={}", qp_->qp_num,
               remote.qp_num, remote.lid, FormatGid(remote.gid));
  return {};
}

namespace {

Result<void> ModifyQp(ibv_qp* qp, ibv_qp_attr& attr, int mask, std::string_view step) {
  if (int error = ibv_modify_qp(qp, &attr, mask); error != 0) {
    MC_LOG_ERROR("rdma qp transition failed qp={} step={} error={}", qp->qp_num, step,
                 ErrnoText(error));
    return Err(ErrorCode::kTransferFail);
  }
  return {};
}

}  // namespace

Result<void> RdmaQueuePair::ToInit() {
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_INIT;
  attr.pkey_index = 0;
  attr.port_num = static_cast<uint8_t>(context_.port());
  attr.qp_access_flags = kAccessFlags;
  return ModifyQp(qp_, attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS,
                  "init");
}

Result<void> RdmaQueuePair::ToRtr(const RdmaEndpointInfo& remote) {
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_RTR;
  attr.path_mtu = static_cast<ibv_mtu>(std::min(context_.active_mtu(), remote.mtu));
  attr.dest_qp_num = remote.qp_num;
  attr.rq_psn = remote.psn;
  attr.max_dest_rd_atomic =
      static_cast<uint8_t>(std::clamp(context_.max_dest_rd_atomic(), 0, kWantedRdAtomic));
  attr.min_rnr_timer = 12;
  attr.ah_attr.dlid = remote.lid;
  attr.ah_attr.sl = 0;
  attr.ah_attr.src_path_bits = 0;
  attr.ah_attr.port_num = static_cast<uint8_t>(context_.port());
  if (!IsZeroGid(remote.gid)) {
    attr.ah_attr.is_global = 1;
    std::memcpy(attr.ah_attr.grh.dgid.raw, remote.gid.data(), remote.gid.size());
    attr.ah_attr.grh.sgid_index = static_cast<uint8_t>(context_.gid_index());
    attr.ah_attr.grh.hop_limit = 64;
  }
  return ModifyQp(qp_, attr,
                  IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                      IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER,
                  "rtr");
}

Result<void> RdmaQueuePair::ToRts() {
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_RTS;
  attr.timeout = 14;
  attr.retry_cnt = 7;
  attr.rnr_retry = 7;
  attr.sq_psn = psn_;
  attr.max_rd_atomic =
      static_cast<uint8_t>(std::clamp(context_.max_rd_atomic(), 0, kWantedRdAtomic));
  return ModifyQp(qp_, attr,
                  IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                      IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC,
                  "rts");
}

Result<void> RdmaQueuePair::Read(const RdmaMemoryRegion& local, uint64_t local_offset,
                                 const RdmaRemoteRegion& remote, uint64_t remote_offset,
                                 uint64_t length, std::chrono::milliseconds timeout) {
  return Transfer(IBV_WR_RDMA_READ, local, local_offset, remote, remote_offset, length, timeout);
}

Result<void> RdmaQueuePair::Write(const RdmaMemoryRegion& local, uint64_t local_offset,
                                  const RdmaRemoteRegion& remote, uint64_t remote_offset,
                                  uint64_t length, std::chrono::milliseconds timeout) {
  return Transfer(IBV_WR_RDMA_WRITE, local, local_offset, remote, remote_offset, length, timeout);
}

Result<void> RdmaQueuePair::CheckTransfer(const RdmaMemoryRegion& local, uint64_t local_offset,
                                          const RdmaRemoteRegion& remote, uint64_t remote_offset,
                                          uint64_t length) const {
  if (state_ != State::kConnected) {
    MC_LOG_WARN("rdma transfer rejected qp={}: {}", qp_->qp_num,
                state_ == State::kReset ? "not connected" : "broken by an earlier failure");
    return Err(state_ == State::kReset ? ErrorCode::kInvalidParams : ErrorCode::kTransferFail);
  }
  const bool remote_wraps = remote.addr > UINT64_MAX - remote.length;
  if (!local.valid() || remote_wraps || !RdmaRangeFits(local.length(), local_offset, length) ||
      !RdmaRangeFits(remote.length, remote_offset, length)) {
    MC_LOG_WARN(
        "rdma transfer out of bounds qp={} local_length={} local_offset={} remote_length={} "
        "remote_offset={} length={}",
        qp_->qp_num, local.length(), local_offset, remote.length, remote_offset, length);
    return Err(ErrorCode::kInvalidParams);
  }
  return {};
}

Result<void> RdmaQueuePair::Transfer(int opcode, const RdmaMemoryRegion& local,
                                     uint64_t local_offset, const RdmaRemoteRegion& remote,
                                     uint64_t remote_offset, uint64_t length,
                                     std::chrono::milliseconds timeout) {
  std::lock_guard lock(mu_);
  if (auto ok = CheckTransfer(local, local_offset, remote, remote_offset, length); !ok) return ok;
  Op op{.opcode = static_cast<ibv_wr_opcode>(opcode),
        .local_addr = reinterpret_cast<uint64_t>(local.addr()) + local_offset,
        .lkey = local.lkey(),
        .remote_addr = remote.addr + remote_offset,
        .rkey = remote.rkey,
        .length = length};
  const auto deadline = Clock::now() + timeout;
  while (op.posted < op.length || op.outstanding > 0) {
    if (op.posted < op.length && op.outstanding < depth_) {
      if (auto ok = PostBatch(op, depth_ - op.outstanding); !ok) {
        Break(op.outstanding);
        return ok;
      }
    }
    auto polled = PollOnce(op);
    if (!polled) {
      Break(op.outstanding);
      return Err(polled.error());
    }
    if (*polled == 0 && Clock::now() > deadline) {
      MC_LOG_ERROR("rdma transfer timed out qp={} timeout_ms={} length={} outstanding={}",
                   qp_->qp_num, timeout.count(), length, op.outstanding);
      Break(op.outstanding);
      return Err(ErrorCode::kTransferFail);
    }
  }
  return {};
}

Result<void> RdmaQueuePair::PostBatch(Op& op, int room) {
  std::array<ibv_sge, kSendQueueDepth> sges{};
  std::array<ibv_send_wr, kSendQueueDepth> wrs{};
  const uint64_t left_wrs = (op.length - op.posted + chunk_bytes_ - 1) / chunk_bytes_;
  const int count = static_cast<int>(std::min<uint64_t>(room, left_wrs));
  uint64_t offset = op.posted;
  for (int i = 0; i < count; ++i) {
    const uint64_t bytes = std::min(chunk_bytes_, op.length - offset);
    sges[i] = ibv_sge{
        .addr = op.local_addr + offset, .length = static_cast<uint32_t>(bytes), .lkey = op.lkey};
    wrs[i].wr_id = op.next_wr_id++;
    wrs[i].next = i + 1 < count ? &wrs[i + 1] : nullptr;
    wrs[i].sg_list = &sges[i];
    wrs[i].num_sge = 1;
    wrs[i].opcode = op.opcode;
    wrs[i].send_flags = IBV_SEND_SIGNALED;
    wrs[i].wr.rdma.remote_addr = op.remote_addr + offset;
    wrs[i].wr.rdma.rkey = op.rkey;
    offset += bytes;
  }
  ibv_send_wr* bad = nullptr;
  if (int error = ibv_post_send(qp_, wrs.data(), &bad); error != 0) {
    const int accepted = bad != nullptr ? static_cast<int>(bad - wrs.data()) : 0;
    op.outstanding += accepted;
    MC_LOG_ERROR("rdma post failed qp={} posted={} of {} error={}", qp_->qp_num, accepted, count,
                 ErrnoText(error));
    return Err(ErrorCode::kTransferFail);
  }
  op.outstanding += count;
  op.posted = offset;
  return {};
}

Result<int> RdmaQueuePair::PollOnce(Op& op) {
  std::array<ibv_wc, kPollBatch> wcs{};
  const int n = ibv_poll_cq(cq_, kPollBatch, wcs.data());
  if (n < 0) {
    MC_LOG_ERROR("rdma poll cq failed qp={} result={}", qp_->qp_num, n);
    return Err(ErrorCode::kTransferFail);
  }
  op.outstanding -= n;
  for (int i = 0; i < n; ++i) {
    if (wcs[i].status != IBV_WC_SUCCESS) {
      MC_LOG_ERROR("rdma completion failed qp={} status={} ({}) vendor_err={:#x} wr_id={}",
                   qp_->qp_num, ibv_wc_status_str(wcs[i].status), static_cast<int>(wcs[i].status),
                   wcs[i].vendor_err, wcs[i].wr_id);
      return Err(ErrorCode::kTransferFail);
    }
  }
  return n;
}

// Moves the queue pair to ERR so the device flushes what is still queued, then
// drains those completions: once it returns, the device no longer touches the
// caller's buffers (unless the drain itself timed out, which is logged).
void RdmaQueuePair::Break(int outstanding) {
  state_ = State::kBroken;
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_ERR;
  if (int error = ibv_modify_qp(qp_, &attr, IBV_QP_STATE); error != 0) {
    MC_LOG_WARN("rdma qp to error state failed qp={} error={}", qp_->qp_num, ErrnoText(error));
  }
  const auto deadline = Clock::now() + kDrainTimeout;
  std::array<ibv_wc, kPollBatch> wcs{};
  while (outstanding > 0 && Clock::now() < deadline) {
    const int n = ibv_poll_cq(cq_, kPollBatch, wcs.data());
    if (n < 0) break;
    outstanding -= n;
  }
  if (outstanding > 0) {
    MC_LOG_WARN("rdma qp drain incomplete qp={} outstanding={}", qp_->qp_num, outstanding);
  }
}

Result<RdmaLoopbackPair> ConnectLoopbackPair(RdmaContext& context) {
  auto first = RdmaQueuePair::Create(context);
  if (!first) return Err(first.error());
  auto second = RdmaQueuePair::Create(context);
  if (!second) return Err(second.error());
  if (auto ok = (*first)->Connect((*second)->local()); !ok) return Err(ok.error());
  if (auto ok = (*second)->Connect((*first)->local()); !ok) return Err(ok.error());
  return RdmaLoopbackPair{.first = std::move(*first), .second = std::move(*second)};
}

}  // namespace mooncake
