#pragma once

// mooncake.Client.get_async and put_async (Client::GetAsync, PutAsync):
// each returns a concurrent.futures.Future at once, which a client thread
// completes later, taking the GIL for it. asyncio code awaits
// asyncio.wrap_future(future).
//
// Thread-safety: binding needs the GIL; the completions take it themselves.

#include <pybind11/pybind11.h>

#include "python/src/py_client.h"

namespace mooncake::python {

void BindAsyncCalls(pybind11::class_<PyClient>& c);

}  // namespace mooncake::python
