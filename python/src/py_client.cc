#include "python/src/py_client.h"

#include <unordered_set>
#include <utility>
#include <vector>

#include "python/src/errors.h"

namespace mooncake::python {
namespace {

// Every PyClient alive. Guarded by the GIL; never destroyed, so that a
// client collected during the interpreter's teardown still finds it.
std::unordered_set<PyClient*>& LiveClients() {
  static auto* clients = new std::unordered_set<PyClient*>();
  return *clients;
}

// The deleter of every shared_ptr<Client>. Whichever thread drops the last
// reference destroys the client, and that can be a Python thread inside a
// call, holding the GIL, whose copy became the last when another thread
// closed the client. ~Client joins the client's threads, and those wait for
// the GIL to complete the futures of calls in flight: the GIL is let go
// meanwhile.
void DestroyClient(Client* client) {
  if (Py_IsInitialized() && PyGILState_Check()) {
    pybind11::gil_scoped_release nogil;
    delete client;
  } else {
    delete client;
  }
}

}  // namespace

PyClient::PyClient(std::unique_ptr<Client> client) : client_(client.release(), &DestroyClient) {
  LiveClients().insert(this);
}

PyClient::~PyClient() {
  LiveClients().erase(this);
  close();
}

std::shared_ptr<Client> PyClient::get() const {
  if (!client_) RaiseError(ErrorCode::kInvalidParams, "the client is closed");
  return client_;
}

void PyClient::close() {
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
}

}  // namespace mooncake::python
