#include "python/src/gil.h"

#include <Python.h>
#include <unistd.h>

#include <condition_variable>
#include <cstddef>
#include <mutex>

namespace mooncake::python {
namespace {

struct Gate {
  std::mutex mu;
  std::condition_variable idle;
  bool closed = false;
  unsigned long exiting_thread = 0;  // the thread that closed it: still let through
  size_t passing = 0;                // threads past the gate, not done with the GIL yet
};

// Never destroyed: threads parked at exit, or the client's threads, may
// still look at it while the process exits. Replaced (the old one leaked)
// in a child after fork().
Gate* g_gate = new Gate();

// The thread that runs Python's finalization (Py_FinalizeEx runs on the
// main thread): never parked, even by the fallback below. Set once, by
// InitGilGate.
unsigned long g_main_thread = 0;

// How many times this thread is past the gate: a call made from inside a
// scope that passed it (a future's done-callback calling the client, on
// the thread completing the future) must pass again even once the gate is
// closed, or it would park while its outer scope still counts as passing,
// and the exit hook would wait for that scope for ever.
thread_local size_t t_passing = 0;

// True when this thread may take the GIL; it then counts as passing until
// Leave(). `me` is PyThread_get_thread_ident().
bool Enter(unsigned long me) {
  Gate& g = *g_gate;
  std::lock_guard lock(g.mu);
  if (t_passing == 0) {
    if (g.closed && me != g.exiting_thread) return false;
    // Finalizing without the exit hook having run (an embedder's
    // Py_FinalizeEx without atexit): best effort.
    if (!g.closed && InterpreterFinalizing() && me != g_main_thread) return false;
  }
  ++g.passing;
  ++t_passing;
  return true;
}

void Leave() {
  Gate& g = *g_gate;
  std::lock_guard lock(g.mu);
  --t_passing;
  if (--g.passing == 0) g.idle.notify_all();
}

[[noreturn]] void ParkForever() {
  for (;;) pause();
}

}  // namespace

bool InterpreterFinalizing() {
#if PY_VERSION_HEX >= 0x030D0000
  return Py_IsFinalizing();
#else
  return _Py_IsFinalizing();
#endif
}

ReleaseGil::ReleaseGil() : state_(PyEval_SaveThread()) {}

ReleaseGil::~ReleaseGil() {
  if (!Enter(PyThread_get_thread_ident())) ParkForever();
  PyEval_RestoreThread(state_);
  Leave();
}

AcquireGilUnlessExiting::AcquireGilUnlessExiting() {
  if (!Enter(PyThread_get_thread_ident())) return;
  gil_.emplace();
}

AcquireGilUnlessExiting::~AcquireGilUnlessExiting() {
  if (!gil_) return;
  gil_.reset();  // lets go of the GIL (and of this thread's state)
  Leave();
}

void CloseGilGate() {
  Gate& g = *g_gate;
  {
    std::lock_guard lock(g.mu);
    g.closed = true;
    g.exiting_thread = PyThread_get_thread_ident();
  }
  // The threads past the gate wait for the GIL (or hold it, completing a
  // future): let them have it and finish.
  PyThreadState* state = PyEval_SaveThread();
  {
    std::unique_lock lock(g.mu);
    g.idle.wait(lock, [&g] { return g.passing == 0; });
  }
  PyEval_RestoreThread(state);
}

void InitGilGate() {
  namespace py = pybind11;
  g_main_thread =
      py::module_::import("threading").attr("main_thread")().attr("ident").cast<unsigned long>();
}

void ResetGilGateAfterFork() { g_gate = new Gate(); }

}  // namespace mooncake::python
