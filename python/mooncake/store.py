"""Mooncake Store's Python class on top of mooncake.Client.

Integration code written for Mooncake (vLLM, SGLang, LMCache connectors)
imports ``from mooncake.store import MooncakeDistributedStore``; this module
offers that class with Mooncake's conventions, so such code moves over with
few edits:

* calls return integer codes (0 or a byte count on success, a negative
  ErrorCode on failure) instead of raising; ``get`` returns b"" on failure;
* buffers are given as raw host addresses and sizes (``buffer_ptr``,
  ``size``), as in Mooncake; any buffer-protocol object works too. An
  address is an int, any integer type (a numpy integer) or a ctypes
  pointer or integer (c_void_p), and needs its size (ValueError without
  one); with a buffer object, a size other than 0
  takes its first ``size`` bytes (ValueError if it has fewer). The
  memory must be host memory this process can read or write: a device
  pointer would crash the process (use the GPU tier's open_for_write for
  device-resident data).
* ``register_buffer`` / ``unregister_buffer`` succeed and do nothing: this
  client copies into the caller's memory itself, no registration needed.

What the cluster answers, and a store without a client (before
``setup()``, after ``close()``), come back as codes. A bad argument raises
as in any Python call, as a buffer's own checks do: ValueError (an address
without its size, a size larger than the buffer, a NULL ctypes pointer),
TypeError (not a buffer or address), and for a buffer object whatever its
exporter raises when it cannot be written (``get_into`` of bytes:
BufferError) or is not C-contiguous (BufferError, or ValueError for
numpy arrays).

Calls with no counterpart raise NotImplementedError; docs/python.md lists
them and why.
"""

import ctypes
import operator
import socket

from ._mooncake import Client, Error, error_codes

_CODES = error_codes()
_INVALID_PARAMS = _CODES["INVALID_PARAMS"]


class ReplicateConfig:
    """Mooncake's write options. ``replica_num`` is accepted and ignored:
    one object has one owner node here. ``preferred_segment`` names the
    node to write to (our ``preferred_node``)."""

    def __init__(self):
        self.replica_num = 1
        self.with_soft_pin = False
        self.with_hard_pin = False
        self.preferred_segment = ""
        self.preferred_tier = ""

    def options(self):
        return {
            "hard_pin": bool(self.with_hard_pin),
            "soft_pin": bool(self.with_soft_pin),
            "preferred_node": self.preferred_segment or "",
            "preferred_tier": self.preferred_tier or "",
        }


def _options(config):
    return config.options() if config is not None else {}


# ctypes' simple types holding an integer, and those holding a pointer.
_CTYPES_INTEGERS = frozenset("bBhHiIlLqQ")
_CTYPES_POINTERS = frozenset("PzZ")


def _ctypes_address(ptr):
    """The address a ctypes pointer (c_void_p, c_char_p, POINTER(T)
    instances) or ctypes integer (c_size_t, c_uint64, ...) holds; None when
    `ptr` is none of those. These are buffers too (of the few bytes that
    hold the value), which must never be taken for the memory meant."""
    if isinstance(ptr, ctypes._Pointer):
        address = ctypes.cast(ptr, ctypes.c_void_p).value
    elif isinstance(ptr, ctypes._SimpleCData) and ptr._type_ in _CTYPES_POINTERS:
        address = ctypes.cast(ptr, ctypes.c_void_p).value
    elif isinstance(ptr, ctypes._SimpleCData) and ptr._type_ in _CTYPES_INTEGERS:
        address = ptr.value
    else:
        return None
    if not address:
        raise ValueError("buffer_ptr %r is a NULL pointer" % (ptr,))
    return address


def _address(ptr):
    """`ptr` as an int when it is a host address: an int, any integer type
    (numpy's np.uint64 from ``array.ctypes.data`` arithmetic, ...) defining
    __index__, or a ctypes pointer or integer (``ctypes.c_void_p(addr)``).
    None when it is a buffer-protocol object to read or write in place.
    Numpy integer scalars are 0-d buffers too, and numpy arrays define
    __index__: a 0-d buffer that is an integer is an address, any other
    buffer is a buffer."""
    if isinstance(ptr, int):
        return int(ptr)
    address = _ctypes_address(ptr)
    if address is not None:
        return address
    if not hasattr(type(ptr), "__index__"):
        return None
    try:
        view = memoryview(ptr)
    except TypeError:
        return operator.index(ptr)
    with view:
        if view.ndim != 0:
            return None
    try:
        return operator.index(ptr)
    except TypeError:
        return None


def _buffer(ptr, size):
    """What a Mooncake-style (buffer_ptr, size) pair names, as a buffer:

    * a host address (see _address) and its size: a view of the `size`
      bytes there. A size of 0 (or None) is refused: the call would read or
      write nothing at all rather than the memory meant;
    * a buffer-protocol object: all of it when `size` is 0 or None, else its
      first `size` bytes, which it must have.
    """
    address = _address(ptr)
    size = 0 if size is None else operator.index(size)
    if address is None:
        if size == 0:
            return ptr
        view = memoryview(ptr)
        if size < 0 or size > view.nbytes:
            raise ValueError("size %d for a buffer of %d bytes" % (size, view.nbytes))
        return ptr if size == view.nbytes else view.cast("B")[:size]
    if size <= 0:
        raise ValueError("buffer_ptr %#x is a host address: give its size in bytes "
                         "(size=%d)" % (address, size))
    if address <= 0:
        raise ValueError("bad buffer address %#x" % address)
    return (ctypes.c_char * size).from_address(address)


def _per_key(n, call, *args, **kwargs):
    """`call`'s list of one integer per key, or its ErrorCode for each of
    the `n` keys when it raises Error for the whole batch (no client, a
    length mismatch, ...)."""
    try:
        return call(*args, **kwargs)
    except Error as e:
        return [e.code] * n


class MooncakeDistributedStore:
    """Mooncake's MooncakeDistributedStore, backed by mooncake.Client."""

    def __init__(self):
        self._client = None

    def setup(self, local_hostname="", metadata_server="", global_segment_size=0,
              local_buffer_size=0, protocol="tcp", rdma_devices="",
              master_server_addr="127.0.0.1:50051", *, local_node="", **client_options):
        """Connects to the master. `metadata_server`, the segment and buffer
        sizes are Mooncake transfer-engine settings and are ignored here:
        memory is provided by the workers. protocol="rdma" turns on RDMA
        reads where a device is usable ("auto"). Returns 0 or an ErrorCode."""
        if protocol == "rdma":
            client_options.setdefault("rdma", "auto")
            if rdma_devices:
                client_options.setdefault("rdma_device", rdma_devices.split(",")[0])
        try:
            self._client = Client(master=master_server_addr, local_node=local_node,
                                  **client_options)
            return 0
        except Error as e:
            return e.code

    def init_all(self, protocol, device_name, mount_segment_size=0):
        """Mooncake's all-in-one setup for a local cluster; connects to the
        default master."""
        return self.setup(protocol=protocol, rdma_devices=device_name)

    @property
    def client(self):
        """The mooncake.Client underneath, for calls Mooncake lacks. Raises
        Error (INVALID_PARAMS) before setup() and after close(); the
        Mooncake calls return INVALID_PARAMS (get: b"") then."""
        if self._client is None:
            raise Error(_INVALID_PARAMS, "no client: setup() was not called, or close() was")
        return self._client

    def close(self):
        if self._client is not None:
            self._client.close()
            self._client = None
        return 0

    def _code(self, method, *args, **kwargs):
        """0 when client.`method`(...) succeeds, its ErrorCode when it
        raises Error (INVALID_PARAMS without a client)."""
        try:
            getattr(self.client, method)(*args, **kwargs)
            return 0
        except Error as e:
            return e.code

    # ---- single objects ------------------------------------------------

    def put(self, key, value, config=None):
        return self._code("put", key, value, **_options(config))

    def put_from(self, key, buffer_ptr, size=0, config=None):
        return self._code("put_from", key, _buffer(buffer_ptr, size), **_options(config))

    def upsert(self, key, value, config=None):
        return self._code("upsert", key, value, **_options(config))

    def upsert_from(self, key, buffer_ptr, size=0, config=None):
        return self._code("upsert_from", key, _buffer(buffer_ptr, size),
                     **_options(config))

    def get(self, key):
        try:
            return self.client.get(key)
        except Error:
            return b""

    def get_into(self, key, buffer_ptr, size=0):
        try:
            return self.client.get_into(key, _buffer(buffer_ptr, size))
        except Error as e:
            return e.code

    def get_size(self, key):
        try:
            return int(self.client.inspect(key)["size"])
        except Error as e:
            return e.code

    def is_exist(self, key):
        try:
            return self.client.is_exist(key)
        except Error as e:
            return e.code

    def remove(self, key, force=False):
        return self._code("remove", key, force)

    # ---- batches -------------------------------------------------------

    def batch_is_exist(self, keys):
        keys = list(keys)
        return _per_key(len(keys), lambda: self.client.batch_is_exist(keys))

    def batch_put_from(self, keys, buffer_ptrs, sizes=None, config=None):
        keys = list(keys)
        buffers = self._buffers(keys, buffer_ptrs, sizes)
        if buffers is None:
            return [_INVALID_PARAMS] * len(keys)
        return _per_key(len(keys),
                        lambda: self.client.batch_put_from(keys, buffers, **_options(config)))

    def batch_upsert_from(self, keys, buffer_ptrs, sizes=None, config=None):
        keys = list(keys)
        buffers = self._buffers(keys, buffer_ptrs, sizes)
        if buffers is None:
            return [_INVALID_PARAMS] * len(keys)
        return _per_key(len(keys),
                        lambda: self.client.batch_upsert_from(keys, buffers, **_options(config)))

    def batch_get_into(self, keys, buffer_ptrs, sizes=None):
        keys = list(keys)
        buffers = self._buffers(keys, buffer_ptrs, sizes)
        if buffers is None:
            return [_INVALID_PARAMS] * len(keys)
        return _per_key(len(keys), lambda: self.client.batch_get_into(keys, buffers))

    def put_batch(self, keys, values, config=None):
        """Mooncake's put_batch: 0 when every value was stored, else the
        first failure's code (INVALID_PARAMS when the lengths differ)."""
        return self._write_batch(False, keys, values, config)

    def upsert_batch(self, keys, values, config=None):
        return self._write_batch(True, keys, values, config)

    def _write_batch(self, upsert, keys, values, config):
        try:
            client = self.client
            call = client.batch_upsert if upsert else client.batch_put
            results = call(list(keys), list(values), **_options(config))
        except Error as e:
            return e.code
        return next((r.code for r in results if isinstance(r, Error)), 0)

    def get_batch(self, keys):
        """Mooncake's get_batch: bytes per key, b"" where the read failed."""
        keys = list(keys)
        try:
            values = self.client.batch_get(keys)
        except Error:
            return [b""] * len(keys)
        return [b"" if isinstance(v, Error) else v for v in values]

    @staticmethod
    def _buffers(keys, buffer_ptrs, sizes):
        if len(buffer_ptrs) != len(keys) or (sizes is not None and len(sizes) != len(keys)):
            return None
        if sizes is None:
            sizes = [None] * len(keys)
        return [_buffer(p, s) for p, s in zip(buffer_ptrs, sizes)]

    # ---- memory registration -------------------------------------------

    def register_buffer(self, buffer_ptr, size):
        """Nothing to register: reads and writes copy through this process."""
        return 0

    def unregister_buffer(self, buffer_ptr):
        return 0

    def batch_register_buffer(self, buffer_ptrs, sizes):
        return [0] * len(buffer_ptrs)

    def get_hostname(self):
        return socket.gethostname()

    # ---- no counterpart --------------------------------------------------

    def remove_by_regex(self, regex, force=False):
        raise NotImplementedError(
            "remove_by_regex: the master keeps no key index to match against; "
            "remove keys by name (batch_remove)")

    def remove_all(self, force=False):
        raise NotImplementedError(
            "remove_all: the master keeps no key index; remove keys by name (batch_remove)")

    def get_buffer(self, key):
        raise NotImplementedError(
            "get_buffer: no client-side allocator; use get_into with your own buffer")

    def batch_get_buffer(self, keys):
        raise NotImplementedError(
            "batch_get_buffer: no client-side allocator; use batch_get_into")
