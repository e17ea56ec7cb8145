"""Python client of the Mooncake tiered cache: a binding of mooncake::Client.

    import mooncake
    client = mooncake.Client(master="127.0.0.1:50051", local_node="w1")
    client.put("k", b"value")
    assert client.get("k") == b"value"

Errors raise ``mooncake.Error`` (``.code``: the ErrorCode number, ``.name``:
its name). Batch calls answer one entry per key instead: a value, or an
``Error`` instance for that key. The Mooncake-named calls (``is_exist``,
``batch_is_exist``, ``batch_put_from``, ``batch_upsert_from``,
``batch_get_into``) answer integer codes as Mooncake's do, and
``mooncake.store.MooncakeDistributedStore`` offers Mooncake's class itself.
See docs/python.md.
"""

import enum as _enum

from ._mooncake import (  # noqa: F401  (re-exported)
    RPC_CHUNK_BYTES,
    Client,
    Error,
    MemoryRegion,
    ObjectPlacement,
    WritePlan,
    error_codes,
    error_name,
    max_key_bytes,
    set_log_level,
)
from ._mooncake import __version__  # noqa: F401

# Every ErrorCode by name, e.g. ErrorCode.OBJECT_NOT_FOUND == -704; compare
# with Error.code or with the integers the Mooncake-named calls return.
ErrorCode = _enum.IntEnum("ErrorCode", error_codes())
ErrorCode.__module__ = __name__

__all__ = [
    "Client",
    "Error",
    "ErrorCode",
    "MemoryRegion",
    "ObjectPlacement",
    "WritePlan",
    "RPC_CHUNK_BYTES",
    "error_name",
    "error_codes",
    "max_key_bytes",
    "set_log_level",
]
