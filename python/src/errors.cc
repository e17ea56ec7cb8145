#include "python/src/errors.h"

#include <pybind11/eval.h>

#include <cstdint>
#include <string>

namespace py = pybind11;

namespace mooncake::python {
namespace {

// The class object, created once by DefineErrors. Deliberately never
// released: the interpreter may outlive any C++ destructor order.
PyObject* g_error_class = nullptr;

// Every code status.h knows, found by asking the C++ side rather than by a
// second list here that could fall out of step with it.
py::dict ErrorCodes() {
  py::dict codes;
  for (int32_t value = -9999; value <= 0; ++value) {
    ErrorCode code = ErrorCodeFromInt(value);
    if (static_cast<int32_t>(code) != value) continue;
    codes[py::str(std::string(ToString(code)))] = value;
  }
  return codes;
}

// Python source of the exception class: plain Python, so it pickles, prints
// and subclasses like any other exception.
constexpr const char* kErrorSource = R"py(
class Error(Exception):
    """A failed Mooncake call.

    ``code`` is the Mooncake ErrorCode number (negative, e.g. -704) and
    ``name`` its name (``"OBJECT_NOT_FOUND"``); ``message`` says which call
    failed on which key.
    """

    def __init__(self, code, message=""):
        super().__init__(code, message)
        self.code = int(code)
        self.name = error_name(self.code)
        self.message = message

    def __str__(self):
        text = "%s (%d)" % (self.name, self.code)
        return text + ": " + self.message if self.message else text

    def __repr__(self):
        return "mooncake.Error(%s, %r)" % (self.name, self.message)

Error.__module__ = "mooncake"
)py";

}  // namespace

void DefineErrors(py::module_& m) {
  m.def(
      "error_name",
      [](int32_t code) {
        ErrorCode known = ErrorCodeFromInt(code);
        if (static_cast<int32_t>(known) != code) return std::string("UNKNOWN_ERROR");
        return std::string(ToString(known));
      },
      py::arg("code"), "The Mooncake name of an ErrorCode number, or 'UNKNOWN_ERROR'.");
  m.def("error_codes", &ErrorCodes, "Every ErrorCode as a dict {name: number}.");
  py::exec(kErrorSource, m.attr("__dict__"));
  g_error_class = m.attr("Error").ptr();
  Py_INCREF(g_error_class);
}

py::object MakeError(ErrorCode code, std::string_view what) {
  py::handle cls(g_error_class);
  // "replace": a key cut short in Describe may end inside a UTF-8 sequence.
  auto message = py::reinterpret_steal<py::str>(
      PyUnicode_DecodeUTF8(what.data(), static_cast<Py_ssize_t>(what.size()), "replace"));
  if (!message) throw py::error_already_set();
  return cls(static_cast<int32_t>(code), message);
}

void RaiseError(ErrorCode code, std::string_view what) {
  py::object error = MakeError(code, what);
  PyErr_SetObject(g_error_class, error.ptr());
  throw py::error_already_set();
}

std::string Describe(std::string_view op, std::string_view key) {
  constexpr size_t kShown = 80;
  std::string text(op);
  text += " '";
  text += key.substr(0, kShown);
  if (key.size() > kShown) text += "...";
  text += "'";
  return text;
}

}  // namespace mooncake::python
