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

}  // namespace

PyClient::PyClient(std::unique_ptr<Client> client) : client_(std::move(client)) {
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
  std::shared_ptr<Client> last = std::move(client_);
  pybind11::gil_scoped_release nogil;
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
