#pragma once

// mooncake.Client's C++ side: PyClient holds the C++ client, and every
// PyClient alive is known, so that the interpreter's exit can close them
// all while it can still run their completions (CloseAllClients).
//
// Thread-safety: every function here needs the GIL, which also guards the
// set of live clients.

#include <pybind11/pybind11.h>

#include <sys/types.h>

#include <memory>

#include "client/client.h"

namespace mooncake::python {

// mooncake.Client. Holds the C++ client by shared_ptr, so close() in one
// thread leaves a call running in another thread its client until it ends;
// whichever thread drops the last reference destroys the client without
// the GIL (the shared_ptr's deleter lets go of it).
// client_ is read and replaced only with the GIL held; the Client itself
// is thread-safe.
class PyClient {
 public:
  explicit PyClient(std::unique_ptr<Client> client);
  // Closes the client: a client collected while calls are in flight must
  // let go of the GIL while they complete, or they would wait for it.
  ~PyClient();
  PyClient(const PyClient&) = delete;
  PyClient& operator=(const PyClient&) = delete;

  // The client; raises mooncake.Error (INVALID_PARAMS) once closed, or in
  // a process forked from the one that made it.
  std::shared_ptr<Client> get();
  // Drops the client. Its destructor completes the asynchronous calls in
  // flight and joins its threads, without the GIL meanwhile.
  void close();
  bool closed() const { return client_ == nullptr || forked(); }

 private:
  // After fork() the child has the parent's connections (sockets shared
  // with the parent: both would read each other's replies) but none of the
  // client's threads. A client made before the fork is let go of without
  // being destroyed (~Client would join threads the child does not have,
  // and close connections the parent still uses): a deliberate leak.
  bool forked() const;
  void Abandon();

  std::shared_ptr<Client> client_;
  pid_t pid_;  // the process that made the client
};

// Set for its scope on a thread that runs Python code for a client (a
// future's completion, done-callbacks included): the last reference to a
// client dropped there is destroyed on another thread, since ~Client joins
// the client's threads, this one among them.
class OnClientThread {
 public:
  OnClientThread() : previous_(active_) { active_ = true; }
  ~OnClientThread() { active_ = previous_; }
  OnClientThread(const OnClientThread&) = delete;
  OnClientThread& operator=(const OnClientThread&) = delete;
  static bool active() { return active_; }

 private:
  static thread_local bool active_;
  bool previous_;
};

// Closes every live client, waits for the clients still being destroyed on
// threads of their own, then closes the GIL gate (python/src/gil.h):
// registered with atexit by the module, since a thread that takes the GIL
// once the interpreter is finalizing is ended mid-call (std::terminate).
void CloseAllClients();

// Registered with pthread_atfork by the module: in a child, the locks of
// the exit hook and of the GIL gate start over (a thread the child does
// not have may have held them).
void ResetAfterForkInChild();

}  // namespace mooncake::python
