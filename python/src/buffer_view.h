#pragma once

// BufferView: a contiguous view of a Python buffer-protocol object
// (bytes, bytearray, memoryview, numpy array, mmap, ...) held for the length
// of one call. Holding the export is what makes it safe to release the GIL:
// while it lasts, a bytearray cannot be resized and a numpy array's memory
// cannot be freed by another thread.
//
// ValueView: the bytes of a value to write, from a buffer or a str (stored
// as UTF-8).
//
// Thread-safety: create and destroy them with the GIL held; between the
// two, their bytes may be read or written without the GIL.

#include <Python.h>
#include <pybind11/pybind11.h>

#include <cstddef>
#include <span>
#include <string_view>

namespace mooncake::python {

class BufferView {
 public:
  // Raises, as a Python exception, the exporter's error: TypeError (not a
  // buffer); for a buffer that is not C-contiguous, or read-only when
  // `writable`, BufferError (bytes, memoryview, ...) or ValueError (numpy:
  // "ndarray is not C-contiguous", "buffer source array is read-only").
  BufferView(pybind11::handle object, bool writable) {
    int flags = PyBUF_C_CONTIGUOUS | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(object.ptr(), &view_, flags) != 0) {
      throw pybind11::error_already_set();
    }
    held_ = true;
  }
  ~BufferView() {
    if (held_) PyBuffer_Release(&view_);
  }
  BufferView(BufferView&& other) noexcept : view_(other.view_), held_(other.held_) {
    other.held_ = false;
  }
  BufferView(const BufferView&) = delete;
  BufferView& operator=(const BufferView&) = delete;
  BufferView& operator=(BufferView&&) = delete;

  size_t size() const { return static_cast<size_t>(view_.len); }
  std::span<char> writable() const { return {static_cast<char*>(view_.buf), size()}; }
  std::string_view bytes() const { return {static_cast<const char*>(view_.buf), size()}; }

 private:
  Py_buffer view_{};
  bool held_ = false;
};

// A value to write: any buffer-protocol object, or a str (stored as UTF-8).
class ValueView {
 public:
  explicit ValueView(pybind11::handle object)
      : encoded_(pybind11::isinstance<pybind11::str>(object)
                     ? pybind11::object(pybind11::reinterpret_steal<pybind11::object>(
                           PyUnicode_AsUTF8String(object.ptr())))
                     : pybind11::object()),
        view_(Source(object), /*writable=*/false) {}
  std::string_view bytes() const { return view_.bytes(); }

 private:
  pybind11::handle Source(pybind11::handle object) const {
    if (!pybind11::isinstance<pybind11::str>(object)) return object;
    if (!encoded_) throw pybind11::error_already_set();
    return encoded_;
  }
  pybind11::object encoded_;  // keeps the UTF-8 copy of a str alive
  BufferView view_;
};

}  // namespace mooncake::python
