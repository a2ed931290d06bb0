"""Reading a file someone else named (a scanned repository's ``.py`` file, a report given to ``report``): only a
regular file is read, never a FIFO or a device, which could block for ever or never end, and, where the reader
sets a bound, never more than that many bytes."""
from __future__ import annotations

import os
import stat


class NotRegularFile(OSError):
    """A name that is not a regular file (FIFO, socket, device, directory): reading it could block or never end."""


class FileTooLarge(OSError):
    """A regular file larger than its reader accepts."""


_KINDS = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISDIR, "a directory"))


def read_regular_file(path: str, max_bytes: int | None = None) -> bytes:
    """The bytes of ``path`` if it is a regular file (symlinks followed); :class:`NotRegularFile` otherwise, and
    :class:`FileTooLarge` when it holds more than ``max_bytes``.

    Opened non-blocking and checked on the open descriptor, so a FIFO neither blocks the open nor the read,
    even if it replaced a regular file after the directory was listed; at most ``max_bytes + 1`` bytes are
    read, so a file that grows while it is read is refused too.
    """
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            kind = next((name for test, name in _KINDS if test(st.st_mode)), "not a regular file")
            raise NotRegularFile(f"{kind}, not a regular file")
        if max_bytes is not None and st.st_size > max_bytes:
            raise FileTooLarge(f"{st.st_size} bytes, more than the {max_bytes} bytes allowed")
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
        with os.fdopen(fd, "rb") as fh:
            fd = -1
            data = fh.read() if max_bytes is None else fh.read(max_bytes + 1)
    finally:
        if fd != -1:
            os.close(fd)
    if max_bytes is not None and len(data) > max_bytes:
        raise FileTooLarge(f"grew while read to more than the {max_bytes} bytes allowed")
    return data

