#pragma once

// The one Python exception type of the package, mooncake.Error, and the
// conversion of Result errors into it at the binding's boundary: C++ code
// below the binding returns ErrorCode, never throws; only the binding
// raises.
//
// Thread-safety: every function here needs the GIL.

#include <pybind11/pybind11.h>

#include <string>
#include <string_view>

#include "common/status.h"

namespace mooncake::python {

// Defines mooncake.Error (an Exception subclass with .code and .name) and
// error_name()/error_codes() in `m`. Call once, from the module's init.
void DefineErrors(pybind11::module_& m);

// An Error instance for `code`; `what` says which call failed on what
// ("get 'key'"). Returned, not raised: batch calls put it in their lists.
pybind11::object MakeError(ErrorCode code, std::string_view what);

// Raises mooncake.Error (as a C++ exception pybind11 passes on to Python).
[[noreturn]] void RaiseError(ErrorCode code, std::string_view what);

// "op 'key'" for messages; long keys are shortened.
std::string Describe(std::string_view op, std::string_view key);

}  // namespace mooncake::python
