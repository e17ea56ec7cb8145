#pragma once

// BufferView: a contiguous view of a Python buffer-protocol object
// (bytes, bytearray, memoryview, numpy array, mmap, ...) held for the length
// of one call. Holding the export is what makes it safe to release the GIL:
// while it lasts, a bytearray cannot be resized and a numpy array's memory
// cannot be freed by another thread.
//
// Thread-safety: create and destroy it with the GIL held; between the two,
// data() may be read or written without the GIL.

#include <Python.h>
#include <pybind11/pybind11.h>

#include <cstddef>
#include <span>
#include <string_view>

namespace mooncake::python {

class BufferView {
 public:
  // Raises TypeError (not a buffer) or BufferError (not C-contiguous, or
  // read-only when `writable`) as a Python exception.
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

}  // namespace mooncake::python
