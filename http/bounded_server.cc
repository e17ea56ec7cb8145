#include "http/bounded_server.h"

#include <netdb.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "common/log.h"
#include "http/admin_server.h"

namespace mooncake {
namespace {

using Clock = std::chrono::steady_clock;

// How often a wait for a slow client's head checks whether the server stops,
// so Stop() does not wait out head_timeout.
constexpr auto kStopCheck = std::chrono::milliseconds(100);

// Milliseconds until `deadline` for poll(), rounded up so a wait never ends
// just before it; 0 once it passed; at most `cap`.
int PollMs(Clock::time_point deadline, std::chrono::milliseconds cap) {
  auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now());
  return static_cast<int>(std::clamp(left, std::chrono::milliseconds(0), cap).count());
}

// Waits until `sock` has `events` (or an error or hang-up, which the next
// read or write reports) or `deadline` passes; false on the deadline.
bool WaitFor(socket_t sock, short events, Clock::time_point deadline) {
  for (;;) {
    pollfd p{sock, events, 0};
    int ready = poll(&p, 1, PollMs(deadline, std::chrono::hours(1)));
    if (ready > 0) return true;
    if (ready == 0 || errno != EINTR) return false;
  }
}

// A whole response in the admin API's JSON error shape, written before
// httplib has parsed anything. Sent once without blocking: a refused or
// timed-out client gets no more of this thread's time than that.
void SendErrorAndForget(socket_t sock, int status, std::string_view reason, std::string_view code,
                        std::string_view message) {
  const std::string body = HttpResponse::Error(status, code, message).body;
  const std::string reply =
      "HTTP/1.1 " + std::to_string(status) + " " + std::string(reason) +
      "\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
      "\r\nConnection: close\r\n\r\n" + body;
  (void)send(sock, reply.data(), reply.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
}

void CloseSocket(socket_t sock) {
  shutdown(sock, SHUT_RDWR);
  close(sock);
}

enum class HeadOutcome { kPartial, kComplete, kTooLarge, kClosed };

// Reads what `sock` has ready, without waiting, onto `*head` until it holds
// a blank line ("\r\n\r\n", the end of the headers): kComplete; or
// `max_bytes` arrived without one: kTooLarge; or the peer closed or failed:
// kClosed; else kPartial (nothing more to read now). What follows the blank
// line (a body's start) stays in `*head` too.
HeadOutcome ReadHeadPart(socket_t sock, size_t max_bytes, std::string* head) {
  for (;;) {
    const size_t len = head->size();
    if (len >= max_bytes) return HeadOutcome::kTooLarge;
    head->resize(max_bytes);
    ssize_t n = recv(sock, head->data() + len, max_bytes - len, MSG_DONTWAIT);
    head->resize(len + static_cast<size_t>(std::max<ssize_t>(n, 0)));
    if (n > 0) {
      const size_t from = len < 3 ? 0 : len - 3;  // a blank line split across reads
      if (head->find("\r\n\r\n", from) != std::string::npos) return HeadOutcome::kComplete;
      continue;
    }
    if (n == 0) return HeadOutcome::kClosed;
    if (errno == EINTR) continue;
    return errno == EAGAIN || errno == EWOULDBLOCK ? HeadOutcome::kPartial : HeadOutcome::kClosed;
  }
}

// Removes every "Range:" header line from the request head in `*head` (the
// bytes up to and including its blank line; what follows is left as it is).
// The admin API serves small generated documents and has no use for byte
// ranges, and httplib 0.11 applies them itself after the route answered:
// any number of ranges, overlaps allowed, each copied into one
// multipart/byteranges string, so an 8 KiB `Range: bytes=0-,0-,...` made
// one request allocate the body some 2,700 times. RFC 9110 14.2 lets a server
// ignore Range, so the full body is answered (200) as if none was sent.
void StripRangeHeaders(std::string* head) {
  const size_t end = head->find("\r\n\r\n");
  if (end == std::string::npos) return;
  std::string out;
  out.reserve(head->size());
  size_t pos = 0;
  const size_t head_end = end + 2;  // through the last header line's CRLF
  while (pos < head_end) {
    size_t eol = head->find('\n', pos);
    eol = eol == std::string::npos || eol >= head_end ? head_end : eol + 1;
    std::string_view line(head->data() + pos, eol - pos);
    constexpr std::string_view kName = "range:";
    bool is_range = pos != 0 && line.size() >= kName.size();
    for (size_t i = 0; is_range && i < kName.size(); ++i) {
      is_range = std::tolower(static_cast<unsigned char>(line[i])) == kName[i];
    }
    if (!is_range) out.append(line);
    pos = eol;
  }
  out.append(*head, head_end, std::string::npos);
  *head = std::move(out);
}

void AddressOf(socket_t sock, bool peer, std::string& ip, int& port) {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  auto* sa = reinterpret_cast<sockaddr*>(&addr);
  if ((peer ? getpeername(sock, sa, &len) : getsockname(sock, sa, &len)) != 0) return;
  char host[NI_MAXHOST], service[NI_MAXSERV];
  if (getnameinfo(sa, len, host, sizeof(host), service, sizeof(service),
                  NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
    return;
  }
  ip = host;
  port = std::atoi(service);
}

// One admitted connection as httplib reads and writes it: first the bytes
// ReadHead took, then the socket. Every read waits only until one deadline
// for the whole request; every write until one deadline for the whole
// response, set by its first write (a handler's own time does not count).
class DeadlineStream : public httplib::Stream {
 public:
  DeadlineStream(socket_t sock, std::string head, Clock::time_point read_deadline,
                 std::chrono::milliseconds write_timeout)
      : sock_(sock),
        head_(std::move(head)),
        read_deadline_(read_deadline),
        write_timeout_(write_timeout) {}

  bool is_readable() const override {
    return pos_ < head_.size() || WaitFor(sock_, POLLIN, read_deadline_);
  }
  bool is_writable() const override { return WaitFor(sock_, POLLOUT, WriteDeadline()); }

  ssize_t read(char* ptr, size_t size) override {
    if (pos_ < head_.size()) {
      size_t n = std::min(size, head_.size() - pos_);
      std::memcpy(ptr, head_.data() + pos_, n);
      pos_ += n;
      return static_cast<ssize_t>(n);
    }
    return Retry(POLLIN, read_deadline_, [&] { return recv(sock_, ptr, size, MSG_DONTWAIT); });
  }

  ssize_t write(const char* ptr, size_t size) override {
    return Retry(POLLOUT, WriteDeadline(),
                 [&] { return send(sock_, ptr, size, MSG_NOSIGNAL | MSG_DONTWAIT); });
  }

  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    AddressOf(sock_, /*peer=*/true, ip, port);
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    AddressOf(sock_, /*peer=*/false, ip, port);
  }
  socket_t socket() const override { return sock_; }

 private:
  Clock::time_point WriteDeadline() const {
    if (!write_deadline_) write_deadline_ = Clock::now() + write_timeout_;
    return *write_deadline_;
  }

  // Runs the non-blocking `io` until it moves bytes, reaches EOF or fails;
  // -1 once `deadline` passes while the socket is not ready.
  template <typename Io>
  ssize_t Retry(short events, Clock::time_point deadline, Io io) {
    for (;;) {
      if (!WaitFor(sock_, events, deadline)) return -1;
      ssize_t n = io();
      if (n >= 0) return n;
      if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return -1;
    }
  }

  const socket_t sock_;
  const std::string head_;
  size_t pos_ = 0;  // bytes of head_ already read
  const Clock::time_point read_deadline_;
  const std::chrono::milliseconds write_timeout_;
  mutable std::optional<Clock::time_point> write_deadline_;
};

// httplib's accept loop hands each accepted socket to its task queue. This
// one runs the task in place, on the accept thread, so BoundedServer decides
// there whether to admit or refuse it; httplib's own pool would queue every
// socket, without bound, until a thread is free.
class RunInPlace : public httplib::TaskQueue {
 public:
  RunInPlace(httplib::TaskQueue* pool, std::function<void()> before_shutdown)
      : pool_(pool), before_shutdown_(std::move(before_shutdown)) {}
  void enqueue(std::function<void()> fn) override { fn(); }
  // Called once the accept loop ended: stops the head reader, then serves
  // what was handed to the pool and joins it.
  void shutdown() override {
    before_shutdown_();
    pool_->shutdown();
  }

 private:
  httplib::TaskQueue* pool_;
  std::function<void()> before_shutdown_;
};

// The numeric address of `sock`'s peer ("" if unknown): connections without
// a whole head are shed per peer.
std::string PeerOf(socket_t sock) {
  std::string ip;
  int port = 0;
  AddressOf(sock, /*peer=*/true, ip, port);
  return ip;
}

}  // namespace

BoundedServer::BoundedServer(ConnectionLimits limits) : limits_(limits) {
  new_task_queue = [this] {
    pool_ = std::make_unique<httplib::ThreadPool>(std::max<size_t>(1, limits_.threads));
    wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (wake_fd_ < 0) {
      MC_LOG_ERROR("admin server cannot create its wake-up eventfd: {}", std::strerror(errno));
    } else {
      reader_ = std::thread([this] { ReadHeads(); });
    }
    return new RunInPlace(pool_.get(), [this] { StopHeadReader(); });
  };
}

BoundedServer::~BoundedServer() {
  StopHeadReader();
  if (wake_fd_ >= 0) close(wake_fd_);
}

bool BoundedServer::SetListenBacklog(int backlog) {
  const socket_t sock = svr_sock_;
  return sock != INVALID_SOCKET && ::listen(sock, backlog) == 0;
}

void BoundedServer::Wake() {
  const uint64_t one = 1;
  (void)!write(wake_fd_, &one, sizeof(one));
}

void BoundedServer::StopHeadReader() {
  {
    std::lock_guard lock(mu_);
    if (stop_reader_) return;
    stop_reader_ = true;
  }
  if (!reader_.joinable()) return;
  Wake();
  reader_.join();
}

bool BoundedServer::process_and_close_socket(socket_t sock) {
  const auto accepted = Clock::now();
  {
    std::lock_guard lock(mu_);
    // The reader takes arrivals at once; a backlog this long means it is
    // not running (or stopping).
    if (reader_.joinable() && !stop_reader_ && incoming_.size() < limits_.max_connections) {
      incoming_.push_back({sock, accepted});
      Wake();
      return true;
    }
  }
  Refuse(sock);
  return false;
}

void BoundedServer::Refuse(socket_t sock) {
  MC_LOG_DEBUG("admin connection refused connections={} max={}", connections_.load(),
               limits_.max_connections);
  SendErrorAndForget(sock, 503, "Service Unavailable", "SERVICE_UNAVAILABLE",
                     "too many admin connections at once (max " +
                         std::to_string(limits_.max_connections) + "); retry");
  CloseSocket(sock);
}

void BoundedServer::ReadHeads() {
  std::vector<Pending> pending;  // oldest first
  std::vector<pollfd> fds;
  for (;;) {
    fds.assign(1, pollfd{wake_fd_, POLLIN, 0});
    auto wake_at = Clock::now() + kStopCheck;
    for (const Pending& p : pending) {
      fds.push_back({p.sock, POLLIN, 0});
      wake_at = std::min(wake_at, p.accepted + limits_.head_timeout);
    }
    poll(fds.data(), fds.size(), PollMs(wake_at, kStopCheck));
    uint64_t drained = 0;
    (void)!read(wake_fd_, &drained, sizeof(drained));
    std::vector<Incoming> arrived;
    bool stop = false;
    {
      std::lock_guard lock(mu_);
      arrived.swap(incoming_);
      stop = stop_reader_;
    }
    if (stop || stopping()) {
      // Stopping: nothing more is admitted or read. Until StopHeadReader
      // (right after the accept loop ends) the loop keeps closing arrivals.
      for (const Incoming& in : arrived) CloseSocket(in.sock);
      for (const Pending& p : pending) CloseSocket(p.sock);
      connections_.fetch_sub(pending.size());
      pending.clear();
      if (stop) return;
      continue;
    }
    // Read what came on the connections already admitted, before the new
    // ones may shed any.
    const auto now = Clock::now();
    std::vector<Pending> still;
    still.reserve(pending.size());
    for (size_t i = 0; i < pending.size(); ++i) {
      Pending& p = pending[i];
      HeadOutcome outcome = fds[i + 1].revents != 0
                                ? ReadHeadPart(p.sock, limits_.max_head_bytes, &p.head)
                                : HeadOutcome::kPartial;
      switch (outcome) {
        case HeadOutcome::kComplete:
          Dispatch(std::move(p));
          continue;
        case HeadOutcome::kTooLarge:
          MC_LOG_DEBUG("admin request head over the limit max_bytes={}", limits_.max_head_bytes);
          SendErrorAndForget(
              p.sock, 431, "Request Header Fields Too Large", "REQUEST_HEADER_FIELDS_TOO_LARGE",
              "request line and headers over " + std::to_string(limits_.max_head_bytes) +
                  " bytes");
          break;
        case HeadOutcome::kPartial:
          if (now < p.accepted + limits_.head_timeout) {
            still.push_back(std::move(p));
            continue;
          }
          MC_LOG_DEBUG("admin request head timed out timeout_ms={}", limits_.head_timeout.count());
          SendErrorAndForget(p.sock, 408, "Request Timeout", "REQUEST_TIMEOUT",
                             "request line and headers did not arrive within " +
                                 std::to_string(limits_.head_timeout.count()) + " ms");
          break;
        case HeadOutcome::kClosed:
          break;
      }
      CloseSocket(p.sock);
      connections_.fetch_sub(1);
    }
    pending.swap(still);
    for (const Incoming& in : arrived) Admit(in, pending);
  }
}

void BoundedServer::Admit(const Incoming& in, std::vector<Pending>& pending) {
  if (connections_.load() >= limits_.max_connections) {
    if (pending.empty()) {  // every admitted connection sent a whole request
      Refuse(in.sock);
      return;
    }
    // Room for the newcomer: the peer holding the most connections without
    // a whole request loses its oldest one. A flood of idle connections
    // thus sheds its own, and a client that sends its request at once (a
    // probe, a scrape) is admitted and served.
    std::map<std::string_view, size_t> per_peer;
    size_t most = 0;
    for (const Pending& p : pending) most = std::max(most, ++per_peer[p.peer]);
    auto victim = std::find_if(pending.begin(), pending.end(),
                               [&](const Pending& p) { return per_peer[p.peer] == most; });
    MC_LOG_DEBUG("admin connection without a request shed peer={} connections={} max={}",
                 victim->peer, connections_.load(), limits_.max_connections);
    SendErrorAndForget(victim->sock, 503, "Service Unavailable", "SERVICE_UNAVAILABLE",
                       "too many admin connections at once (max " +
                           std::to_string(limits_.max_connections) +
                           "); this one had sent no whole request yet and was closed to make "
                           "room; retry");
    CloseSocket(victim->sock);
    pending.erase(victim);
    connections_.fetch_sub(1);
  }
  connections_.fetch_add(1);
  pending.push_back({in.sock, in.accepted, {}, PeerOf(in.sock)});
}

void BoundedServer::Dispatch(Pending&& p) {
  pool_->enqueue([this, sock = p.sock, accepted = p.accepted, head = std::move(p.head)]() mutable {
    Serve(sock, std::move(head), accepted);
    connections_.fetch_sub(1);
  });
}

void BoundedServer::Serve(socket_t sock, std::string head, Clock::time_point accepted) {
  if (!stopping()) {
    StripRangeHeaders(&head);
    DeadlineStream stream(sock, std::move(head), accepted + limits_.request_timeout,
                          limits_.write_timeout);
    bool closed = false;
    process_request(stream, /*close_connection=*/true, closed, nullptr);
  }
  CloseSocket(sock);
}

}  // namespace mooncake
