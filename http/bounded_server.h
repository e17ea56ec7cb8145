#pragma once

// An httplib::Server that bounds what one client can make it hold before
// httplib parses a request. Internal to http/ (AdminServer uses it); it
// includes httplib, so no public header includes this one.
//
// Debian's compiled cpp-httplib 0.11.4 reads a request line or a header line
// into a buffer that grows until the line ends and checks its length only
// then, accepts any number of headers, applies its read timeout to each read
// rather than to the request, and queues every accepted socket for its pool
// without bound. All of that happens before any handler runs. BoundedServer
// takes each accepted socket over (Server::process_and_close_socket is
// virtual in this version) and:
//  * hands it to one head-reader thread, which reads the request heads
//    (request line and headers) of every admitted connection at once with
//    poll(): a head must end in a blank line within max_head_bytes, and
//    within head_timeout of the accept, else 431 or 408 and the connection
//    is closed. Only a connection whose whole head arrived reaches the
//    pool's threads, so idle or slow clients hold no thread, and a probe
//    that sends its request at once is served at once;
//  * admits at most max_connections at a time (heads being read, or
//    requests waiting for or being served). When full, a newcomer takes
//    the place of the oldest connection, of the peer with the most of them,
//    that has not sent a whole head yet (answered 503 and closed); only when
//    every admitted connection sent a whole request is the newcomer
//    answered 503 and closed. So a flood of idle connections sheds its own
//    and /livez and /readyz stay answerable;
//  * drops any Range header from that head: httplib 0.11 would apply the
//    ranges to every response itself, without limit (many overlapping ranges
//    multiplied the body in memory); the full body is answered instead;
//  * only then lets httplib parse and route the request, from that buffer and
//    then the socket, the whole request due within request_timeout of the
//    accept and the whole response taken within write_timeout;
//  * serves one request per connection, so no later request on it escapes
//    these bounds.
//
// A client that sends a whole head and then trickles a body still holds a
// pool thread until request_timeout; with an admin token, a mutating request
// without it is answered 401 before its body is read (AdminServer).
//
// Thread-safety: construct and configure (the httplib setters) before
// listening. process_and_close_socket runs on the accept thread and passes
// sockets to the reader thread through incoming_ (mu_); ReadHeads owns the
// connections still reading their heads; Serve runs on the pool's threads.
// connections_ is atomic; pool_, wake_fd_ and reader_ are set by
// new_task_queue on the accept thread before its first accept.

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace mooncake {

struct ConnectionLimits {
  size_t max_connections = 64;
  size_t max_head_bytes = 16 << 10;
  std::chrono::milliseconds head_timeout{2000};
  std::chrono::milliseconds request_timeout{5000};
  std::chrono::milliseconds write_timeout{5000};
  size_t threads = 4;
};

class BoundedServer : public httplib::Server {
 public:
  explicit BoundedServer(ConnectionLimits limits);
  ~BoundedServer() override;

  // After a bind: httplib listens with a backlog of 5, so a burst of a few
  // more connects (a scrape, some curls, a flood being refused) has SYNs
  // dropped and retried a second later. False if not bound or refused.
  bool SetListenBacklog(int backlog);

 private:
  using Clock = std::chrono::steady_clock;
  struct Incoming {
    socket_t sock;
    Clock::time_point accepted;
  };
  struct Pending {
    socket_t sock;
    Clock::time_point accepted;
    std::string head;  // read so far
    std::string peer;  // numeric address
  };

  // Called by httplib on the accept thread for each accepted socket (our
  // task queue runs it in place): hands it to the head reader.
  bool process_and_close_socket(socket_t sock) override;
  // The head reader's loop: admits arrivals, reads heads, hands whole ones
  // to the pool, closes timed-out, oversized and closed ones.
  void ReadHeads();
  void Admit(const Incoming& in, std::vector<Pending>& pending);
  void Dispatch(Pending&& p);
  // Answers 503 and closes.
  void Refuse(socket_t sock);
  // Lets httplib parse and answer the request whose head is `head`, closes.
  void Serve(socket_t sock, std::string head, Clock::time_point accepted);
  void Wake();
  // Idempotent; closes every connection still reading its head.
  void StopHeadReader();
  // True once stop() closed the listening socket.
  bool stopping() const { return svr_sock_ == INVALID_SOCKET; }

  const ConnectionLimits limits_;
  std::unique_ptr<httplib::ThreadPool> pool_;
  // Admitted (heads being read, and requests queued or served), not yet closed.
  std::atomic<size_t> connections_{0};
  int wake_fd_ = -1;  // eventfd: arrivals and stop
  std::thread reader_;
  std::mutex mu_;
  std::vector<Incoming> incoming_;  // guarded by mu_, as is the flag below
  bool stop_reader_ = false;
};

}  // namespace mooncake
