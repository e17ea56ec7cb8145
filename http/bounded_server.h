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
//  * admits at most max_connections at a time, being served or waiting for
//    a thread; one more is answered 503 and closed at once, on the accept
//    thread, so idle clients pile up neither fds nor queued work;
//  * reads the request head (request line and headers) itself: it must end
//    in a blank line within max_head_bytes, and within head_timeout of the
//    accept, else 431 or 408 and the connection is closed;
//  * drops any Range header from that head: httplib 0.11 would apply the
//    ranges to every response itself, without limit (many overlapping ranges
//    multiplied the body in memory); the full body is answered instead;
//  * only then lets httplib parse and route the request, from that buffer and
//    then the socket, the whole request due within request_timeout of the
//    accept and the whole response taken within write_timeout;
//  * serves one request per connection, so no later request on it escapes
//    these bounds.
//
// Thread-safety: construct and configure (the httplib setters) before
// listening. process_and_close_socket runs on the accept thread, Serve on
// the pool's threads; connections_ is atomic, pool_ is set by new_task_queue
// on the accept thread before its first accept.

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <memory>

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

  // After a bind: httplib listens with a backlog of 5, so a burst of a few
  // more connects (a scrape, some curls, a flood being refused) has SYNs
  // dropped and retried a second later. False if not bound or refused.
  bool SetListenBacklog(int backlog);

 private:
  // Called by httplib on the accept thread for each accepted socket (our
  // task queue runs it in place): admits it to the pool or refuses it.
  bool process_and_close_socket(socket_t sock) override;
  // Reads the head, hands the request to httplib, closes the socket.
  void Serve(socket_t sock, std::chrono::steady_clock::time_point accepted);
  // True once stop() closed the listening socket.
  bool stopping() const { return svr_sock_ == INVALID_SOCKET; }

  const ConnectionLimits limits_;
  std::unique_ptr<httplib::ThreadPool> pool_;
  std::atomic<size_t> connections_{0};  // admitted and not yet closed
};

}  // namespace mooncake
