#include "python/src/async_calls.h"

#include <Python.h>

#if defined(__GLIBCXX__)
#include <cxxabi.h>
#endif

#include <exception>
#include <new>
#include <string>
#include <utility>

#include "python/src/buffer_view.h"
#include "python/src/convert.h"
#include "python/src/errors.h"
#include "python/src/gil.h"
#include "python/src/py_client.h"

namespace py = pybind11;

namespace mooncake::python {
namespace {

// A Future a client thread completes. The completion owns one reference to
// it, taken here with the GIL and given back with the GIL when it runs, so
// that no Python object is touched without the GIL. Every asynchronous call
// of Client completes exactly once (at the latest when the Client is
// destroyed), so the reference is never lost.
class PendingFuture {
 public:
  // GIL held. The future is marked running: the call is on its way and
  // cannot be cancelled, so completing it never fails.
  PendingFuture() {
    py::object future = py::module_::import("concurrent.futures").attr("Future")();
    future.attr("set_running_or_notify_cancel")();
    future_ = future.release().ptr();
  }

  // The Python side's handle: a new reference, GIL held.
  py::object future() const { return py::reinterpret_borrow<py::object>(future_); }

  // On a client thread: takes the GIL and completes the future through
  // `complete(future)`. Once the exit hook has closed the GIL gate no
  // thread may take the GIL (it would be ended there, mid-call); the hook
  // closes every client before that, so only a client kept alive by a call
  // still running in a daemon thread can get here, and then the future is
  // left as it is.
  //
  // The user's done-callbacks run here, and may drop the last reference to
  // the client (or close it): OnClientThread, declared first so that it
  // also covers the future's release at the end, has the client destroyed
  // on another thread then.
  template <typename Fn>
  void Complete(Fn&& complete) const {
    OnClientThread client_thread;
    AcquireGilUnlessExiting gil;
    if (!gil.acquired()) return;
    py::object future = py::reinterpret_steal<py::object>(future_);
    // Nothing may leave: the client's thread would std::terminate. A value
    // that cannot be converted (MemoryError for a large get's bytes), or
    // any other error before the future is completed, becomes the future's
    // exception; after (a done-callback raising a BaseException, which
    // concurrent.futures does not catch) it is reported as unraisable.
    try {
      complete(future);
      return;
    } catch (py::error_already_set& e) {
      e.restore();
#if defined(__GLIBCXX__)
    } catch (abi::__forced_unwind&) {
      throw;
#endif
    } catch (const std::bad_alloc&) {
      PyErr_NoMemory();
    } catch (const std::exception& e) {
      PyErr_SetString(PyExc_RuntimeError, e.what());
    } catch (...) {
      PyErr_SetString(PyExc_RuntimeError, "mooncake: an unknown C++ exception");
    }
    FailWithTheErrorSet(future.ptr());
  }

 private:
  // The Python error set now becomes `future`'s exception if it is still
  // pending, else (or if that fails) is reported as unraisable. GIL held.
  static void FailWithTheErrorSet(PyObject* future) noexcept {
    PyObject* type = nullptr;
    PyObject* value = nullptr;
    PyObject* traceback = nullptr;
    PyErr_Fetch(&type, &value, &traceback);
    PyErr_NormalizeException(&type, &value, &traceback);
    if (traceback != nullptr && value != nullptr) PyException_SetTraceback(value, traceback);
    PyObject* done = PyObject_CallMethod(future, "done", nullptr);
    const int is_done = done != nullptr ? PyObject_IsTrue(done) : -1;
    Py_XDECREF(done);
    if (is_done == 0 && value != nullptr) {
      PyObject* set = PyObject_CallMethod(future, "set_exception", "O", value);
      if (set != nullptr) {
        Py_DECREF(set);
        Py_XDECREF(type);
        Py_XDECREF(value);
        Py_XDECREF(traceback);
        return;
      }
      PyErr_WriteUnraisable(future);  // set_exception's own error
    } else if (is_done < 0) {
      PyErr_Clear();
    }
    PyErr_Restore(type, value, traceback);
    PyErr_WriteUnraisable(future);
  }

  PyObject* future_ = nullptr;  // one owned reference, until Complete
};

py::object GetAsync(PyClient& self, const std::string& key) {
  auto client = self.get();
  PendingFuture pending;
  py::object future = pending.future();
  {
    ReleaseGil nogil;
    client->GetAsync(key, [pending, key](Result<ObjectValue> value) {
      pending.Complete([&](py::object& f) {
        if (value) {
          f.attr("set_result")(NewBytes(value->data));
        } else {
          f.attr("set_exception")(MakeError(value.error(), Describe("get", key)));
        }
      });
    });
  }
  return future;
}

py::object PutAsync(PyClient& self, const std::string& key, py::handle value, bool hard_pin,
                    bool soft_pin, int64_t soft_pin_ttl_ms, std::string preferred_node,
                    std::string preferred_tier) {
  auto client = self.get();
  // The value is copied now: the caller may change its buffer once this
  // returns.
  std::string bytes(ValueView(value).bytes());
  PutOptions options{hard_pin, soft_pin, soft_pin_ttl_ms, std::move(preferred_node),
                     std::move(preferred_tier)};
  PendingFuture pending;
  py::object future = pending.future();
  {
    ReleaseGil nogil;
    client->PutAsync(
        key, std::move(bytes),
        [pending, key](Result<void> result) {
          pending.Complete([&](py::object& f) {
            if (result) {
              f.attr("set_result")(py::none());
            } else {
              f.attr("set_exception")(MakeError(result.error(), Describe("put", key)));
            }
          });
        },
        options);
  }
  return future;
}

}  // namespace

void BindAsyncCalls(py::class_<PyClient>& c) {
  c.def("get_async", &GetAsync, py::arg("key"),
        "Starts a get; returns a concurrent.futures.Future of the object's bytes (its "
        "exception: mooncake.Error). A client thread completes it; keep done-callbacks short.")
      .def("put_async", &PutAsync, py::arg("key"), py::arg("value"), py::kw_only(),
           py::arg("hard_pin") = false, py::arg("soft_pin") = false, py::arg("soft_pin_ttl_ms") = 0,
           py::arg("preferred_node") = "", py::arg("preferred_tier") = "",
           "Starts a put (the value is copied first); returns a concurrent.futures.Future of "
           "None. Puts in flight together leave as one batch.");
}

}  // namespace mooncake::python
