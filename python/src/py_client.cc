#include "python/src/py_client.h"

#include <unistd.h>

#include <condition_variable>
#include <cstddef>
#include <mutex>
#include <string>
#include <system_error>
#include <thread>
#include <unordered_set>
#include <utility>
#include <vector>

#include "common/log.h"
#include "python/src/errors.h"
#include "python/src/gil.h"

namespace mooncake::python {
namespace {

// Every PyClient alive. Guarded by the GIL; never destroyed, so that a
// client collected during the interpreter's teardown still finds it.
std::unordered_set<PyClient*>& LiveClients() {
  static auto* clients = new std::unordered_set<PyClient*>();
  return *clients;
}

// Clients being destroyed on threads of their own (DestroyElsewhere): the
// exit hook waits for them, so that none is still running when the process
// exits. Never destroyed, like LiveClients.
struct Destructions {
  std::mutex mu;
  std::condition_variable done;
  size_t running = 0;
};

// Replaced (the old one leaked) in a child after fork().
Destructions* g_destructions = new Destructions();

Destructions& ClientDestructions() { return *g_destructions; }

void DestroyElsewhere(Client* client) {
  Destructions& d = ClientDestructions();
  {
    std::lock_guard lock(d.mu);
    ++d.running;
  }
  try {
    std::thread([client, &d] {
      delete client;
      std::lock_guard lock(d.mu);
      --d.running;
      d.done.notify_all();
    }).detach();
  } catch (const std::system_error& e) {
    // No thread to be had: leaking the client beats aborting the process.
    MC_LOG_ERROR(
        "mooncake python: a client dropped on its own thread is leaked, no thread to "
        "destroy it on reason=\"{}\"",
        e.what());
    std::lock_guard lock(d.mu);
    --d.running;
    d.done.notify_all();
  }
}

// The deleter of every shared_ptr<Client>. Whichever thread drops the last
// reference destroys the client, and that can be a Python thread inside a
// call, holding the GIL, whose copy became the last when another thread
// closed the client. ~Client joins the client's threads, and those wait for
// the GIL to complete the futures of calls in flight: the GIL is let go
// meanwhile.
//
// On one of the client's own threads (running a completion: a done-callback
// that held the last reference to the client, or closed it) ~Client would
// join the very thread it runs on, and std::terminate: the client is then
// destroyed on a thread of its own instead.
void DestroyClient(Client* client) {
  if (OnClientThread::active()) {
    DestroyElsewhere(client);
    return;
  }
  if (Py_IsInitialized() && PyGILState_Check()) {
    ReleaseGil nogil;
    delete client;
  } else {
    delete client;
  }
}

}  // namespace

thread_local bool OnClientThread::active_ = false;

PyClient::PyClient(std::unique_ptr<Client> client)
    : client_(client.release(), &DestroyClient), pid_(getpid()) {
  LiveClients().insert(this);
}

PyClient::~PyClient() {
  LiveClients().erase(this);
  close();
}

std::shared_ptr<Client> PyClient::get() {
  if (forked()) {
    Abandon();
    RaiseError(ErrorCode::kInvalidParams,
               "the client was made in process " + std::to_string(pid_) +
                   " and this is process " + std::to_string(getpid()) +
                   ", forked from it: its connections are the parent's; make a new "
                   "mooncake.Client in this process");
  }
  if (!client_) RaiseError(ErrorCode::kInvalidParams, "the client is closed");
  return client_;
}

bool PyClient::forked() const { return getpid() != pid_; }

void PyClient::Abandon() {
  if (client_) new std::shared_ptr<Client>(std::move(client_));  // never destroyed
}

void PyClient::close() {
  if (forked()) {
    Abandon();
    return;
  }
  if (!client_) return;
  // When this is the last reference, the deleter lets go of the GIL while
  // the client is destroyed.
  std::shared_ptr<Client> last = std::move(client_);
  last.reset();
}

void CloseAllClients() {
  // close() lets go of the GIL, so the set may change meanwhile: close a copy.
  std::vector<PyClient*> open(LiveClients().begin(), LiveClients().end());
  for (PyClient* client : open) {
    if (LiveClients().contains(client)) client->close();
  }
  // Clients dropped on their own threads complete their calls in flight
  // on another one, which may need the GIL meanwhile.
  Destructions& d = ClientDestructions();
  {
    ReleaseGil nogil;
    std::unique_lock lock(d.mu);
    d.done.wait(lock, [&d] { return d.running == 0; });
  }
  // Last: a thread still inside a call (a daemon thread: Python does not
  // join those) is parked when it returns, instead of taking the GIL
  // while Python finalizes, which would end it by force mid-call.
  CloseGilGate();
}

void ResetAfterForkInChild() {
  g_destructions = new Destructions();
  ResetGilGateAfterFork();
}

}  // namespace mooncake::python
