#pragma once

// Letting go of the GIL and taking it again without ever having a thread
// ended mid-call by the interpreter's exit.
//
// Once Python finalizes, a thread that takes the GIL is ended on the spot
// (PyThread_exit_thread, a pthread_exit before Python 3.14): its C++ frames
// are unwound by force, and through py::gil_scoped_release's noexcept
// destructor that is std::terminate. A daemon thread inside any call when
// the program ends would abort the process (exit status 134, a core file).
//
// So every place of the binding that takes the GIL goes through a gate the
// exit hook closes (CloseGilGate) before Python finalizes:
//  * ReleaseGil, around calls that talk to the cluster: a Python thread that
//    returns from its call after the gate closed is parked for good, without
//    the GIL (as Python 3.14 does itself); the process exits around it.
//  * AcquireGilUnlessExiting, on the client's own threads (completing a
//    future): after the gate closed it takes nothing, and the future is
//    left as it is.
// The hook waits, without the GIL, for the threads already past the gate,
// so none is still waiting for the GIL when Python finalizes.
//
// Thread-safety: ReleaseGil needs the GIL to be made; AcquireGilUnlessExiting
// must be made without it. CloseGilGate needs the GIL.

#include <pybind11/pybind11.h>

#include <optional>

namespace mooncake::python {

// Lets go of the GIL for its scope (what py::gil_scoped_release does).
class ReleaseGil {
 public:
  ReleaseGil();
  ~ReleaseGil();
  ReleaseGil(const ReleaseGil&) = delete;
  ReleaseGil& operator=(const ReleaseGil&) = delete;

 private:
  PyThreadState* state_;
};

// Takes the GIL for its scope (py::gil_scoped_acquire), unless the
// interpreter is exiting: acquired() says which.
class AcquireGilUnlessExiting {
 public:
  AcquireGilUnlessExiting();
  ~AcquireGilUnlessExiting();
  AcquireGilUnlessExiting(const AcquireGilUnlessExiting&) = delete;
  AcquireGilUnlessExiting& operator=(const AcquireGilUnlessExiting&) = delete;
  bool acquired() const { return gil_.has_value(); }

 private:
  std::optional<pybind11::gil_scoped_acquire> gil_;
};

// At the module's import, GIL held.
void InitGilGate();

// The exit hook's last step, GIL held: from now on no thread but this one
// takes the GIL through the gate; returns once the threads already past it
// have had the GIL and let go of it.
void CloseGilGate();

// Whether the interpreter is finalizing (Py_IsFinalizing).
bool InterpreterFinalizing();

// In a child process after fork(): the gate's lock may have been held by a
// thread the child does not have; it starts over, open.
void ResetGilGateAfterFork();

}  // namespace mooncake::python
