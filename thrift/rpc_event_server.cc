#include "thrift/rpc_event_server.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <thrift/TProcessor.h>
#include <thrift/protocol/TBinaryProtocol.h>
#include <thrift/transport/TBufferTransports.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <optional>
#include <string>
#include <utility>

#include "common/log.h"
#include "thrift/rpc_call_site.h"
#include "thrift/rpc_transport.h"

namespace mooncake {

using apache::thrift::TProcessor;
using apache::thrift::protocol::TBinaryProtocolT;
using apache::thrift::protocol::TProtocol;
using apache::thrift::transport::TMemoryBuffer;
using Clock = std::chrono::steady_clock;

namespace {

// A connection's receive buffer starts this small (a small frame and its
// header arrive in one recv) and doubles with the bytes of a larger frame as
// they arrive, never with what a header declares.
constexpr uint32_t kFirstReadBuffer = 16u << 10;
// A receive or reply buffer above this is freed after a frame at most this
// large, so a connection or thread does not pin the memory of its largest
// transfer; back-to-back large frames keep theirs.
constexpr uint32_t kKeptBuffer = 1u << 20;
// Pool threads kept however idle; the others exit after kRetireAfter idle.
constexpr int kMinPoolThreads = 1;
constexpr auto kRetireAfter = std::chrono::seconds(10);
// Ready connections a loop thread takes per wait.
constexpr int kEventsPerWait = 64;
// Bytes a loop thread reads from one connection per turn (one recv may take
// more) before it re-arms it and serves the other ready connections: a peer
// that keeps a partial frame in the buffer (pipelined calls, drained replies)
// would otherwise hold the thread for as long as it sends. Several first-size
// buffers, so a large frame still arrives 64 KiB or more per epoll round, and a
// connection between frames returns after one recv as before.
constexpr uint32_t kBytesPerTurn = 64u << 10;
constexpr int kMinLoopThreads = 2;
constexpr int kMaxLoopThreads = 8;
constexpr uint32_t kFrameHeaderBytes = sizeof(uint32_t);

// A reply buffer's first size (a deferred reply is small: a put's code).
constexpr uint32_t kFirstDeferredReply = 256;

}  // namespace

// What RpcCallMayBlock, RpcHandCallToPool and RpcDeferReply act on.
struct EventCallSite {
  bool on_loop = false;
  bool handed_to_pool = false;
  // The server and connection of the call being answered on this thread.
  RpcEventServer* server = nullptr;
  RpcEventServer::Connection* serving = nullptr;
  std::shared_ptr<DeferredEventReply> deferred;  // taken in this call
};
thread_local EventCallSite call_site;

namespace {

uint32_t ReadBigEndian32(const uint8_t* at) {
  uint32_t bits = 0;
  std::memcpy(&bits, at, sizeof(bits));
  return ntohl(bits);
}

// The method name of a strict binary-protocol call frame; empty when the
// frame does not start like one (the processor will say why).
std::string_view MethodOf(const uint8_t* frame, uint32_t size) {
  constexpr uint32_t kVersionMask = 0xffff0000;
  constexpr uint32_t kVersion1 = 0x80010000;
  if (size < 8 || (ReadBigEndian32(frame) & kVersionMask) != kVersion1) return {};
  uint32_t length = ReadBigEndian32(frame + 4);
  if (length > size - 8) return {};
  return {reinterpret_cast<const char*>(frame + 8), length};
}

// epoll tags of the two descriptors that are not connections.
char listen_tag;
char stop_tag;

std::string PeerOf(int fd) {
  sockaddr_storage address{};
  socklen_t length = sizeof(address);
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) return "unknown";
  char host[INET6_ADDRSTRLEN] = {};
  int port = 0;
  if (address.ss_family == AF_INET) {
    const auto* v4 = reinterpret_cast<const sockaddr_in*>(&address);
    inet_ntop(AF_INET, &v4->sin_addr, host, sizeof(host));
    port = ntohs(v4->sin_port);
  } else if (address.ss_family == AF_INET6) {
    const auto* v6 = reinterpret_cast<const sockaddr_in6*>(&address);
    inet_ntop(AF_INET6, &v6->sin6_addr, host, sizeof(host));
    port = ntohs(v6->sin6_port);
  } else {
    return "unknown";
  }
  return std::string(host) + ":" + std::to_string(port);
}

// A listening, non-blocking socket on host:port (port 0: a free one).
Result<int> Listen(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  std::string service = std::to_string(port);
  int rc = getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &found);
  if (rc != 0) {
    MC_LOG_ERROR("rpc listen failed host={} port={} error=\"{}\"", host, port, gai_strerror(rc));
    return Err(ErrorCode::kRpcFail);
  }
  int last_errno = 0;
  for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
    int fd = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) {
      last_errno = errno;
      continue;
    }
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, a->ai_addr, a->ai_addrlen) == 0 && listen(fd, SOMAXCONN) == 0) {
      freeaddrinfo(found);
      return fd;
    }
    last_errno = errno;
    close(fd);
  }
  freeaddrinfo(found);
  MC_LOG_ERROR("rpc listen failed host={} port={} error=\"{}\"", host, port,
               std::strerror(last_errno));
  return Err(ErrorCode::kRpcFail);
}

int BoundPort(int fd) {
  sockaddr_storage address{};
  socklen_t length = sizeof(address);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) return 0;
  if (address.ss_family == AF_INET6) {
    return ntohs(reinterpret_cast<const sockaddr_in6*>(&address)->sin6_port);
  }
  return ntohs(reinterpret_cast<const sockaddr_in*>(&address)->sin_port);
}

}  // namespace

bool RpcCallMayBlock() { return !call_site.on_loop; }

void RpcHandCallToPool() {
  if (call_site.on_loop) call_site.handed_to_pool = true;
}

// One accepted connection. Its buffer, times and unsent reply belong to the
// thread that holds `mu`: the loop or pool thread serving it, or briefly the
// housekeeper.
struct RpcEventServer::Connection : std::enable_shared_from_this<Connection> {
  explicit Connection(int socket_fd) : fd(socket_fd) {}
  ~Connection() { close(fd); }
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  uint32_t pending() const { return end - begin; }

  const int fd;
  std::mutex mu;
  // Received, not yet answered: [begin, end) of buffer.
  std::unique_ptr<uint8_t[]> buffer;
  uint32_t capacity = 0;
  uint32_t begin = 0;
  uint32_t end = 0;
  // Since when nothing of a frame has been pending (idle timeout) ...
  Clock::time_point quiet_since = Clock::now();
  // ... and since when the pending frame's first bytes are here (frame timeout).
  Clock::time_point frame_since;
  // Set by the housekeeper just before it shuts the socket down.
  std::optional<RpcFault> expired;
  // Waiting for a pool thread: its pending frame is whole, not slow.
  bool handed_off = false;
  // Waiting for a deferred reply: busy, not idle, and armed by nobody.
  bool deferred = false;
  // A reply a loop thread began to send; the pool sends the rest, from
  // unsent_from on.
  std::shared_ptr<TMemoryBuffer> unsent;
  uint32_t unsent_from = 0;
};

// What one thread decodes and encodes with, reused for every frame.
struct RpcEventServer::Worker {
  explicit Worker(bool loop) : on_loop(loop) {
    ResetInput();
    ResetOutput();
  }

  // Fresh protocols. Needed after a frame failed to decode: Thrift counts
  // struct depth in the protocol and a DEPTH_LIMIT exception leaves the
  // count raised (the throwing tracker is never destroyed), so a reused
  // protocol would refuse every later frame.
  void ResetInput() {
    input = std::make_shared<RpcFrameInput>();
    in_protocol = std::make_shared<BoundedBinaryProtocol>(input, input.get());
  }
  // A fresh reply buffer, also when the old one went to a connection.
  void ResetOutput() {
    output = std::make_shared<TMemoryBuffer>(kFirstReadBuffer);
    out_protocol = std::make_shared<TBinaryProtocolT<TMemoryBuffer>>(output);
  }

  const bool on_loop;
  // Replies this thread deferred in its current turn, let go after it (see
  // SettleDeferred).
  std::vector<std::shared_ptr<DeferredEventReply>> parked;
  std::shared_ptr<RpcFrameInput> input;
  std::shared_ptr<TMemoryBuffer> output;
  std::shared_ptr<TProtocol> in_protocol;
  std::shared_ptr<TProtocol> out_protocol;
};

// A call's reply sent after its handler returned (RpcDeferReply). Its state
// changes under its connection's mu: the serving thread holds that mu for
// the whole call, so a Send from another thread waits until the call has
// ended and the reply is parked.
class DeferredEventReply final : public RpcDeferredReply {
 public:
  enum class State {
    kInCall,      // taken, the handler still running
    kSentInCall,  // Send() within the call: the call's reply, sent as usual
    kCancelled,   // Cancel(), or the call failed: answered some other way
    kParked,      // the call ended; the connection waits for Send()
    kDone,        // sent, or its connection closed
  };

  DeferredEventReply(RpcEventServer& server, std::shared_ptr<RpcEventServer::Connection> conn)
      : server_(server),
        conn_(std::move(conn)),
        buffer_(std::make_shared<TMemoryBuffer>(kFirstDeferredReply)),
        protocol_(std::make_shared<TBinaryProtocolT<TMemoryBuffer>>(buffer_)) {
    const uint8_t header_space[kFrameHeaderBytes] = {};
    buffer_->write(header_space, kFrameHeaderBytes);
  }
  ~DeferredEventReply() override {
    // The last holder let it go unsent: the caller would wait for good.
    if (state_.load() == State::kParked) server_.FinishDeferred(*this, /*send=*/false);
    server_.DeferredGone();
  }

  TProtocol& protocol() override { return *protocol_; }

  void Send() override {
    if (call_site.serving == conn_.get() && state_.load() == State::kInCall) {
      // On the serving thread, within the call: the server sends it when
      // the handler returns (and holds the connection's mu meanwhile).
      state_.store(State::kSentInCall);
      return;
    }
    server_.FinishDeferred(*this, /*send=*/true);
  }

  void Cancel() override {
    if (call_site.serving == conn_.get() && state_.load() == State::kInCall) {
      state_.store(State::kCancelled);
      if (call_site.deferred.get() == this) call_site.deferred.reset();
    }
  }

 private:
  friend class RpcEventServer;

  RpcEventServer& server_;
  const std::shared_ptr<RpcEventServer::Connection> conn_;
  std::shared_ptr<TMemoryBuffer> buffer_;
  std::shared_ptr<TProtocol> protocol_;
  std::atomic<State> state_{State::kInCall};
};

std::shared_ptr<RpcDeferredReply> RpcDeferReply() {
  if (call_site.server == nullptr || call_site.serving == nullptr) return nullptr;
  if (!call_site.deferred) {
    call_site.server->DeferredBorn();
    call_site.deferred = std::make_shared<DeferredEventReply>(
        *call_site.server, call_site.serving->shared_from_this());
  }
  return call_site.deferred;
}

Result<std::unique_ptr<RpcEventServer>> RpcEventServer::Start(std::shared_ptr<TProcessor> processor,
                                                              const RpcServerOptions& options,
                                                              std::shared_ptr<RpcGuard> guard) {
  std::unique_ptr<RpcEventServer> server(new RpcEventServer());
  server->processor_ = std::move(processor);
  server->guard_ = std::move(guard);
  server->may_block_ = options.may_block;
  // A connection is in the pool at most once.
  server->max_threads_ = std::max(options.limits.max_connections, 1);

  auto listen_fd = Listen(options.host, options.port);
  if (!listen_fd) return Err(listen_fd.error());
  server->listen_fd_ = *listen_fd;
  server->port_ = BoundPort(server->listen_fd_);
  server->epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  server->stop_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (server->epoll_fd_ < 0 || server->stop_fd_ < 0) {
    MC_LOG_ERROR("rpc server setup failed error=\"{}\"", std::strerror(errno));
    return Err(ErrorCode::kRpcFail);
  }
  // The stop event stays readable, so it wakes every loop thread in turn.
  epoll_event stop{.events = EPOLLIN, .data = {.ptr = &stop_tag}};
  epoll_event accept{.events = EPOLLIN | EPOLLONESHOT, .data = {.ptr = &listen_tag}};
  if (epoll_ctl(server->epoll_fd_, EPOLL_CTL_ADD, server->stop_fd_, &stop) != 0 ||
      epoll_ctl(server->epoll_fd_, EPOLL_CTL_ADD, server->listen_fd_, &accept) != 0) {
    MC_LOG_ERROR("rpc server setup failed error=\"{}\"", std::strerror(errno));
    return Err(ErrorCode::kRpcFail);
  }
  int loops = options.loop_threads;
  if (loops <= 0) {
    loops = std::clamp(static_cast<int>(std::thread::hardware_concurrency()), kMinLoopThreads,
                       kMaxLoopThreads);
  }
  for (int i = 0; i < loops; ++i) {
    server->loops_.emplace_back([raw = server.get()] { raw->LoopMain(); });
  }
  {
    std::lock_guard lock(server->pool_mu_);
    for (int i = 0; i < kMinPoolThreads; ++i) server->StartPoolThreadLocked();
  }
  server->housekeeping_ = std::thread([raw = server.get()] { raw->Housekeeping(); });
  return server;
}

RpcEventServer::~RpcEventServer() { Stop(); }

void RpcEventServer::Stop() {
  if (stopping_.exchange(true)) return;
  if (stop_fd_ >= 0) {
    uint64_t one = 1;
    [[maybe_unused]] ssize_t written = write(stop_fd_, &one, sizeof(one));
  }
  {
    // Wakes a reply blocked on a peer that does not read, and tells every
    // peer at once.
    std::lock_guard lock(connections_mu_);
    for (auto& [raw, conn] : connections_) shutdown(conn->fd, SHUT_RDWR);
  }
  {
    std::lock_guard lock(pool_mu_);
    pool_cv_.notify_all();
  }
  {
    std::lock_guard lock(housekeeping_mu_);
    housekeeping_cv_.notify_all();
  }
  if (housekeeping_.joinable()) housekeeping_.join();
  for (auto& loop : loops_) loop.join();
  loops_.clear();
  for (;;) {
    std::unordered_map<std::thread::id, std::thread> threads;
    {
      std::lock_guard lock(pool_mu_);
      threads.swap(threads_);
      finished_.clear();
    }
    if (threads.empty()) break;
    for (auto& [id, thread] : threads) thread.join();
  }
  {
    // No thread of ours can defer a reply now. Each deferred one is sent
    // (into a socket shut down: it fails) or dropped by its holder, both of
    // which reach this server; after this none can.
    std::unique_lock lock(deferred_mu_);
    deferred_cv_.wait(lock, [this] { return live_deferred_ == 0; });
  }
  {
    // Connections still waiting for the pool close with the rest.
    std::lock_guard pool_lock(pool_mu_);
    handed_.clear();
    std::lock_guard lock(connections_mu_);
    connections_.clear();
    active_.store(0, std::memory_order_relaxed);
  }
  for (int* fd : {&listen_fd_, &stop_fd_, &epoll_fd_}) {
    if (*fd >= 0) close(*fd);
    *fd = -1;
  }
}

// Each loop thread: take the ready descriptors, serve them in turn, wait
// again.
void RpcEventServer::LoopMain() {
  call_site.on_loop = true;
  Worker worker(/*loop=*/true);
  epoll_event events[kEventsPerWait];
  for (;;) {
    int ready = epoll_wait(epoll_fd_, events, kEventsPerWait, -1);
    if (ready < 0 && errno == EINTR) continue;
    if (ready < 0) {
      MC_LOG_ERROR("rpc epoll_wait failed error=\"{}\"", std::strerror(errno));
      return;
    }
    for (int i = 0; i < ready; ++i) {
      void* tag = events[i].data.ptr;
      // Connections not yet served stay disarmed; Stop closes them.
      if (tag == &stop_tag) return;
      if (tag == &listen_tag) {
        AcceptAll();
      } else {
        ServeOnLoop(*static_cast<Connection*>(tag), worker);
      }
    }
  }
}

void RpcEventServer::ServeOnLoop(Connection& conn, Worker& worker) {
  Turn turn;
  {
    std::lock_guard lock(conn.mu);
    turn = ServeConnection(conn, worker);
    if (turn == Turn::kHandOff) conn.handed_off = true;
  }
  worker.parked.clear();
  // A deferred reply re-arms its connection (or hands it over) when sent;
  // it may have been, and the connection closed, by now.
  if (turn == Turn::kDeferred) return;
  if (turn == Turn::kHandOff) {
    HandToPool(&conn);
  } else if (turn == Turn::kClose || !Rearm(conn)) {
    Close(&conn);
  }
}

void RpcEventServer::HandToPool(Connection* conn) {
  std::lock_guard lock(pool_mu_);
  handed_.push_back(conn);
  if (available_threads_ < static_cast<int>(handed_.size())) StartPoolThreadLocked();
  pool_cv_.notify_one();
}

void RpcEventServer::StartPoolThreadLocked() {
  if (stopping_.load() || static_cast<int>(threads_.size() - finished_.size()) >= max_threads_) {
    return;
  }
  // Counted available before it runs, so that the connections handed over
  // meanwhile do not each start yet another thread.
  ++available_threads_;
  std::thread thread([this] { PoolMain(); });
  threads_.emplace(thread.get_id(), std::move(thread));
}

// Each pool thread: take a handed-over connection, serve it, wait again.
// Entered counted as available (see StartPoolThreadLocked).
void RpcEventServer::PoolMain() {
  Worker worker(/*loop=*/false);
  std::unique_lock lock(pool_mu_);
  for (;;) {
    if (handed_.empty()) {
      bool woken = pool_cv_.wait_for(lock, kRetireAfter,
                                     [&] { return stopping_.load() || !handed_.empty(); });
      if (stopping_.load()) break;
      const int running = static_cast<int>(threads_.size() - finished_.size());
      if (!woken && running > kMinPoolThreads) {
        finished_.push_back(std::this_thread::get_id());
        break;
      }
      continue;
    }
    Connection* conn = handed_.front();
    handed_.pop_front();
    --available_threads_;
    lock.unlock();
    ServeInPool(*conn, worker);
    lock.lock();
    ++available_threads_;
  }
  --available_threads_;
}

void RpcEventServer::ServeInPool(Connection& conn, Worker& worker) {
  Turn turn = Turn::kClose;
  {
    std::lock_guard lock(conn.mu);
    conn.handed_off = false;
    bool sent = true;
    if (conn.unsent) {
      uint8_t* reply = nullptr;
      uint32_t length = 0;
      conn.unsent->getBuffer(&reply, &length);
      sent = SendAll(conn, reply + conn.unsent_from, length - conn.unsent_from);
      conn.unsent.reset();
    }
    // Then what the loop left whole; the loop reads whatever comes next.
    if (sent) turn = AnswerWholeFrames(conn, worker);
  }
  worker.parked.clear();
  if (turn == Turn::kDeferred) return;  // see ServeOnLoop
  // A pool thread never hands over: it may wait.
  if (turn != Turn::kWait || !Rearm(conn)) Close(&conn);
}

void RpcEventServer::JoinFinishedThreads() {
  std::vector<std::thread> done;
  {
    std::lock_guard lock(pool_mu_);
    for (auto id : finished_) {
      auto it = threads_.find(id);
      if (it == threads_.end()) continue;
      done.push_back(std::move(it->second));
      threads_.erase(it);
    }
    finished_.clear();
  }
  // A finished thread is past its last use of this server.
  for (auto& thread : done) thread.join();
}

void RpcEventServer::AcceptAll() {
  for (;;) {
    int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      // Out of descriptors or memory, say. The connection stays in the
      // backlog, and a listener armed again now would be reported at once,
      // for ever: housekeeping arms it on its next round instead.
      MC_LOG_WARN("rpc accept failed port={} error=\"{}\"; accepting again shortly", port_,
                  std::strerror(errno));
      accept_paused_.store(true, std::memory_order_release);
      return;
    }
    if (stopping_.load() || !guard_->Admit(active_.load(std::memory_order_relaxed))) {
      close(fd);
      continue;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    auto conn = std::make_shared<Connection>(fd);
    Connection* raw = conn.get();
    {
      std::lock_guard lock(connections_mu_);
      connections_.emplace(raw, std::move(conn));
      active_.fetch_add(1, std::memory_order_relaxed);
    }
    epoll_event event{.events = EPOLLIN | EPOLLRDHUP | EPOLLONESHOT, .data = {.ptr = raw}};
    if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &event) != 0) Close(raw);
  }
  ArmListener();
}

void RpcEventServer::ArmListener() {
  epoll_event accept{.events = EPOLLIN | EPOLLONESHOT, .data = {.ptr = &listen_tag}};
  epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, listen_fd_, &accept);
}

bool RpcEventServer::Rearm(Connection& conn) {
  epoll_event event{.events = EPOLLIN | EPOLLRDHUP | EPOLLONESHOT, .data = {.ptr = &conn}};
  return epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, conn.fd, &event) == 0;
}

void RpcEventServer::Close(Connection* conn) {
  epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, conn->fd, nullptr);
  std::shared_ptr<Connection> owned;
  {
    std::lock_guard lock(connections_mu_);
    auto it = connections_.find(conn);
    if (it == connections_.end()) return;  // Stop cleared it
    owned = std::move(it->second);
    connections_.erase(it);
    active_.fetch_sub(1, std::memory_order_relaxed);
  }
  // The descriptor closes here, after no one can find the connection (or
  // once its last deferred reply is gone).
}

RpcEventServer::Turn RpcEventServer::ServeConnection(Connection& conn, Worker& worker) {
  uint32_t read_this_turn = 0;
  for (;;) {
    if (!conn.buffer) {
      conn.buffer = std::make_unique_for_overwrite<uint8_t[]>(kFirstReadBuffer);
      conn.capacity = kFirstReadBuffer;
    }
    if (conn.end == conn.capacity) {
      if (conn.begin > 0) {
        std::memmove(conn.buffer.get(), conn.buffer.get() + conn.begin, conn.pending());
        conn.end = conn.pending();
        conn.begin = 0;
      } else {
        // A frame larger than the buffer, whose header is here (the buffer
        // holds more than one): grow with what arrived, up to the frame.
        uint32_t whole = ReadBigEndian32(conn.buffer.get()) + kFrameHeaderBytes;
        uint32_t capacity = std::min(whole, 2 * conn.capacity);
        auto bigger = std::make_unique_for_overwrite<uint8_t[]>(capacity);
        std::memcpy(bigger.get(), conn.buffer.get(), conn.end);
        conn.buffer = std::move(bigger);
        conn.capacity = capacity;
      }
    }
    ssize_t n = recv(conn.fd, conn.buffer.get() + conn.end, conn.capacity - conn.end, MSG_DONTWAIT);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return Turn::kWait;
    if (n <= 0) {
      // The peer hung up or reset, or the housekeeper shut the socket down.
      if (conn.expired) {
        guard_->Record(*conn.expired, PeerOf(conn.fd),
                       *conn.expired == RpcFault::kSlowFrame
                           ? "frame did not arrive within the frame timeout"
                           : "no frame within the idle timeout");
      } else if (n == 0 && conn.pending() > 0) {
        guard_->Record(RpcFault::kTruncatedFrame, PeerOf(conn.fd),
                       "connection closed inside a frame");
      }
      return Turn::kClose;
    }
    if (conn.pending() == 0) conn.frame_since = Clock::now();
    conn.end += static_cast<uint32_t>(n);
    read_this_turn += static_cast<uint32_t>(n);
    Turn turn = AnswerWholeFrames(conn, worker);
    if (turn != Turn::kWait) return turn;
    // Between frames: wait for the next. Inside one: take what else is here,
    // up to this turn's share. The rest is reported again as soon as it is
    // re-armed (EPOLLIN is level-triggered), behind the connections already
    // ready.
    if (conn.pending() == 0 || read_this_turn >= kBytesPerTurn) return Turn::kWait;
  }
}

RpcEventServer::Turn RpcEventServer::AnswerWholeFrames(Connection& conn, Worker& worker) {
  while (conn.pending() >= kFrameHeaderBytes) {
    auto declared = static_cast<int32_t>(ReadBigEndian32(conn.buffer.get() + conn.begin));
    if (declared < 0 || static_cast<uint32_t>(declared) > kRpcMaxFrameBytes) {
      guard_->Record(RpcFault::kFrameTooLarge, PeerOf(conn.fd),
                     ("frame of " + std::to_string(declared) + " bytes, limit " +
                      std::to_string(kRpcMaxFrameBytes))
                         .c_str());
      return Turn::kClose;
    }
    auto size = static_cast<uint32_t>(declared);
    if (conn.pending() - kFrameHeaderBytes < size) break;
    uint8_t* frame = conn.buffer.get() + conn.begin + kFrameHeaderBytes;
    if (worker.on_loop && (!may_block_ || may_block_(MethodOf(frame, size)))) {
      return Turn::kHandOff;
    }
    Answer answer = AnswerFrame(conn, worker, frame, size);
    if (answer == Answer::kFailed) return Turn::kClose;
    if (answer == Answer::kHandOff) return Turn::kHandOff;  // the same frame, again
    conn.begin += kFrameHeaderBytes + size;
    if (conn.pending() > 0) {
      conn.frame_since = Clock::now();
    } else {
      conn.begin = conn.end = 0;
      conn.quiet_since = Clock::now();
      if (conn.capacity > kKeptBuffer && size <= kKeptBuffer) {
        conn.buffer.reset();
        conn.capacity = 0;
      }
    }
    if (answer == Answer::kReplyUnsent) return Turn::kHandOff;
    if (answer == Answer::kDeferred) return Turn::kDeferred;
  }
  return Turn::kWait;
}

RpcEventServer::Answer RpcEventServer::AnswerFrame(Connection& conn, Worker& worker, uint8_t* frame,
                                                   uint32_t size) {
  worker.input->Observe(frame, size);
  TMemoryBuffer& output = *worker.output;
  output.resetBuffer();
  const uint8_t header_space[kFrameHeaderBytes] = {};
  output.write(header_space, kFrameHeaderBytes);
  call_site.handed_to_pool = false;
  call_site.server = this;
  call_site.serving = &conn;
  bool processed = false;
  try {
    processed = processor_->process(worker.in_protocol, worker.out_protocol, nullptr);
  } catch (const std::exception& e) {
    // A frame it could not decode, or anything a handler let escape (even
    // bad_alloc): this connection closes, the server goes on.
    if (auto fault = ClassifyRpcException(e)) guard_->Record(*fault, PeerOf(conn.fd), e.what());
  }
  call_site.serving = nullptr;
  std::shared_ptr<DeferredEventReply> deferred = std::exchange(call_site.deferred, nullptr);
  if (!processed || call_site.handed_to_pool) {
    // Whatever the handler wrote is dropped with the next frame, and a
    // reply it deferred is answered otherwise (kCancelled: its Send does
    // nothing).
    if (deferred) deferred->state_.store(DeferredEventReply::State::kCancelled);
    if (!processed) {
      worker.ResetInput();
      return Answer::kFailed;
    }
    call_site.handed_to_pool = false;
    return Answer::kHandOff;
  }
  if (deferred) return SettleDeferred(conn, worker, std::move(deferred));
  return SendReply(conn, worker, worker.output);
}

RpcEventServer::Answer RpcEventServer::SendReply(Connection& conn, Worker& worker,
                                                 std::shared_ptr<TMemoryBuffer>& output) {
  uint8_t* reply = nullptr;
  uint32_t length = 0;
  output->getBuffer(&reply, &length);
  if (length <= kFrameHeaderBytes) return Answer::kDone;  // a oneway call: no reply
  if (worker.on_loop) {
    Answer sent = SendOrKeep(conn, output);
    if (!worker.output) worker.ResetOutput();  // it went with the connection
    if (sent != Answer::kDone) return sent;
  } else {
    uint32_t size_bits = htonl(length - kFrameHeaderBytes);
    std::memcpy(reply, &size_bits, sizeof(size_bits));
    if (!SendAll(conn, reply, length)) return Answer::kFailed;
  }
  if (output && output->getBufferSize() > kKeptBuffer && length <= kKeptBuffer) {
    output->resetBuffer(kFirstReadBuffer);
  }
  return Answer::kDone;
}

RpcEventServer::Answer RpcEventServer::SettleDeferred(
    Connection& conn, Worker& worker, std::shared_ptr<DeferredEventReply> deferred) {
  using State = DeferredEventReply::State;
  State state = deferred->state_.load();
  if (state == State::kCancelled) return SendReply(conn, worker, worker.output);
  if (state == State::kSentInCall) {
    deferred->state_.store(State::kDone);
    return SendReply(conn, worker, deferred->buffer_);
  }
  if (deferred.use_count() == 1) {
    // Taken and let go within the call: no reply will ever come.
    deferred->state_.store(State::kDone);
    return Answer::kFailed;
  }
  deferred->state_.store(State::kParked);
  conn.deferred = true;
  // Let go once this thread has let go of the connection's mu: if every
  // other holder dropped it meanwhile, its destructor takes that mu.
  worker.parked.push_back(std::move(deferred));
  return Answer::kDeferred;
}

void RpcEventServer::FinishDeferred(DeferredEventReply& deferred, bool send) {
  Connection& conn = *deferred.conn_;
  enum class Next { kRearm, kPool, kClose } next = Next::kRearm;
  {
    std::lock_guard lock(conn.mu);
    if (deferred.state_.load() != DeferredEventReply::State::kParked) return;
    deferred.state_.store(DeferredEventReply::State::kDone);
    conn.deferred = false;
    Answer sent = send ? SendOrKeep(conn, deferred.buffer_) : Answer::kFailed;
    if (sent == Answer::kFailed) {
      next = Next::kClose;
    } else {
      // The idle and frame timeouts count from the reply, not from the call
      // that waited for it.
      auto now = Clock::now();
      conn.quiet_since = now;
      if (conn.pending() > 0) conn.frame_since = now;
      if (sent == Answer::kReplyUnsent || HasWholeFrame(conn)) {
        // The pool finishes the reply, or answers the frames that came
        // meanwhile (pipelined calls): a loop would wait for bytes that are
        // already here.
        conn.handed_off = true;
        next = Next::kPool;
      }
    }
  }
  if (next == Next::kPool) {
    HandToPool(&conn);
  } else if (next == Next::kClose || !Rearm(conn)) {
    Close(&conn);
  }
}

bool RpcEventServer::HasWholeFrame(const Connection& conn) {
  if (conn.pending() < kFrameHeaderBytes) return false;
  uint32_t declared = ReadBigEndian32(conn.buffer.get() + conn.begin);
  return conn.pending() - kFrameHeaderBytes >= declared;
}

void RpcEventServer::DeferredBorn() {
  std::lock_guard lock(deferred_mu_);
  ++live_deferred_;
}

void RpcEventServer::DeferredGone() {
  std::lock_guard lock(deferred_mu_);
  if (--live_deferred_ == 0) deferred_cv_.notify_all();
}

RpcEventServer::Answer RpcEventServer::SendOrKeep(Connection& conn,
                                                  std::shared_ptr<TMemoryBuffer>& reply) {
  uint8_t* data = nullptr;
  uint32_t size = 0;
  reply->getBuffer(&data, &size);
  uint32_t size_bits = htonl(size - kFrameHeaderBytes);
  std::memcpy(data, &size_bits, sizeof(size_bits));
  uint32_t sent = 0;
  while (sent < size) {
    ssize_t n = send(conn.fd, data + sent, size - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      sent += static_cast<uint32_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      // The reply buffer goes with the connection.
      conn.unsent = std::move(reply);
      conn.unsent_from = sent;
      return Answer::kReplyUnsent;
    }
    return Answer::kFailed;  // the peer is gone
  }
  return Answer::kDone;
}

bool RpcEventServer::SendAll(Connection& conn, const uint8_t* data, size_t size) {
  // One deadline for the whole rest of the reply: a peer that takes a few
  // bytes at a time must not hold this thread, or what the reply pins, for
  // longer than the read timeout.
  const Clock::time_point deadline = SendDeadline(guard_->timeouts().frame);
  while (size > 0) {
    ssize_t n = send(conn.fd, data, size, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      data += n;
      size -= static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (AwaitWritable(conn.fd, deadline)) continue;
      guard_->Record(RpcFault::kSlowReader, PeerOf(conn.fd),
                     "the peer did not take its reply within the read timeout");
    }
    return false;  // otherwise the peer is gone
  }
  return true;
}

void RpcEventServer::Housekeeping() {
  const auto& timeouts = guard_->timeouts();
  auto shortest = std::chrono::milliseconds(1000);
  for (auto timeout : {timeouts.idle, timeouts.frame}) {
    if (timeout.count() > 0) shortest = std::min(shortest, timeout);
  }
  // Checked four times a timeout: a connection closes at most a quarter
  // late.
  auto period =
      std::clamp(shortest / 4, std::chrono::milliseconds(5), std::chrono::milliseconds(250));
  std::unique_lock lock(housekeeping_mu_);
  while (!stopping_.load()) {
    housekeeping_cv_.wait_for(lock, period);
    if (stopping_.load()) break;
    CloseExpired(Clock::now());
    JoinFinishedThreads();
    if (accept_paused_.exchange(false, std::memory_order_acq_rel)) ArmListener();
  }
}

void RpcEventServer::CloseExpired(Clock::time_point now) {
  const auto& timeouts = guard_->timeouts();
  std::lock_guard lock(connections_mu_);
  for (auto& [raw, conn] : connections_) {
    // A connection being served, or waiting for the pool, is busy, not idle.
    std::unique_lock serving(conn->mu, std::try_to_lock);
    if (!serving.owns_lock() || conn->expired || conn->handed_off || conn->deferred) continue;
    if (conn->pending() == 0 && timeouts.idle.count() > 0 &&
        now - conn->quiet_since >= timeouts.idle) {
      conn->expired = RpcFault::kIdleTimeout;
    } else if (conn->pending() > 0 && timeouts.frame.count() > 0 &&
               now - conn->frame_since >= timeouts.frame) {
      conn->expired = RpcFault::kSlowFrame;
    } else {
      continue;
    }
    // Its serving thread sees the end of the stream, counts the fault and
    // closes the connection.
    shutdown(conn->fd, SHUT_RDWR);
  }
}

}  // namespace mooncake
