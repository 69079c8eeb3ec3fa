"""The channel between the harness and a sandboxed submission: fixed message kinds, each a size-capped JSON header on
a socket, its arrays as raw bytes in a shared-memory arena whose dtype, shape and extent the reader checks.

Nothing is unpickled: what the child sends is data, checked before use. Written by hand because multiprocessing's
``Connection`` unpickles what it receives and no maintained library frames JSON with shared-memory arrays.
"""

from __future__ import annotations

import fcntl
import json
import math
import mmap
import os
import socket
import time

import numpy as np

from dataset_builder import faults
from harness.errors import HarnessError

MAX_HEADER_BYTES = 1 << 20
ARENA_BYTES = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")  # the machine's memory: no message holds more
MAX_DIMS = 4
MAX_DEPTH = 8
ALIGN = 64
DTYPES = frozenset({"<f2", "<f4", "<f8", "|i1", "|u1", "<i2", "<u2", "<i4", "<u4", "<i8", "<u8", "|b1"})
KINDS = frozenset(
    {"ready", "load", "loaded", "batch", "answer", "extract", "extracted", "states", "ok", "error", "oom", "exit"}
)


class Malformed(HarnessError):
    """The other side broke the protocol."""

    def __init__(self, why: str):
        super().__init__(f"the submission's process sent a malformed message ({why}); nothing is written")


class Timeout(HarnessError):
    """No whole message came in time."""


class Arena:
    """A shared-memory file that one side writes arrays into and the other reads them from. Its creator (the harness)
    gives it its ``size`` (the sandbox's: a quarter of its memory limit; sparse: a page costs memory once touched, by
    either side), and seals it against growing, shrinking and further seals: neither side can pull pages from under
    the other's mapping (a SIGBUS), stop the other from writing, or make the other map more than it chose to read. Each
    side maps only what it writes or reads; a mapping that fails is one line naming ``what`` the arena carries
    (``cannot map the answer (...)``)."""

    def __init__(self, fd: int | None = None, what: str = "message", size: int = ARENA_BYTES):
        if fd is None:
            fd = os.memfd_create("cood-arena", os.MFD_ALLOW_SEALING)
            os.ftruncate(fd, size)
            fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL)
        self.fd, self.size, self.view, self.what = fd, os.fstat(fd).st_size, None, what
        self.last = (0, 0)  # the extent of the last message written

    def write(self, arrays: list[np.ndarray]) -> list[list]:
        """Place ``arrays`` in the arena, clear of the last message's where they fit (see :meth:`beside`); return
        their ``[dtype, shape, offset]``."""
        sizes = []
        for array in arrays:
            if array.dtype.str not in DTYPES:
                raise HarnessError(f"cannot send an array of dtype {array.dtype}")
            sizes.append(_aligned(array.nbytes))
        if sum(sizes) > self.size:
            raise HarnessError(
                f"arrays of {sum(sizes)} bytes do not fit the {self.size}-byte shared memory (a quarter of the memory "
                "limit: raise --memory-limit, or lower --batch-size)"
            )
        start = end = self._start(sum(sizes))
        specs = []
        for array, size in zip(arrays, sizes):
            specs.append([array.dtype.str, list(array.shape), end])
            end += size
        if end and (self.view is None or len(self.view) < end):
            self.close_view()
            self.view = self._map(end, writable=True)
        for array, (_, _, offset) in zip(arrays, specs):
            np.frombuffer(self.view, dtype=array.dtype, count=array.size, offset=offset).reshape(array.shape)[...] = (
                array
            )
        self.last = (start, end)
        return specs

    def _start(self, nbytes: int) -> int:
        """Where a message of ``nbytes`` goes: before the last one if it fits there, else after it, else at 0."""
        first, end = self.last
        start = 0 if nbytes <= first else end
        return start if start + nbytes <= self.size else 0

    def beside(self, nbytes: int) -> bool:
        """Whether a message of ``nbytes`` written now would leave the last one whole: the harness sends the next
        batch before the child has read the last only then (:meth:`ChildForward.launch
        <harness.runtime.isolation.ChildForward.launch>`)."""
        first, end = self.last
        start = self._start(_aligned(nbytes))
        return start + nbytes <= first or start >= end

    def read(self, specs, budget: int) -> list[np.ndarray]:
        """Private copies of the arrays ``specs`` describes, once every spec is checked against the arena and their
        bytes together against ``budget`` (what the reader expects at most): nothing is mapped or copied before."""
        if not isinstance(specs, list):
            raise Malformed("the array table is not a list")
        checked, total = [], 0
        for spec in specs:
            if not (
                isinstance(spec, list)
                and len(spec) == 3
                and spec[0] in DTYPES
                and isinstance(spec[1], list)
                and len(spec[1]) <= MAX_DIMS
                and all(_count(n) for n in spec[1])
                and _count(spec[2])
            ):
                raise Malformed(f"bad array entry {str(spec)[:80]}")
            dtype, shape, offset = np.dtype(spec[0]), tuple(spec[1]), spec[2]
            nbytes = math.prod(shape) * dtype.itemsize
            total += nbytes
            if total > budget:
                raise Malformed(f"its arrays hold at least {total} bytes, more than the {budget} bytes expected")
            if offset + nbytes > self.size:
                raise Malformed(
                    f"an array of {nbytes} bytes at offset {offset} lies outside the {self.size}-byte arena"
                )
            checked.append((dtype, shape, offset, nbytes))
        extent = max((offset + nbytes for _, _, offset, nbytes in checked), default=0)
        if extent == 0:
            return [np.zeros(shape, dtype) for dtype, shape, _, _ in checked]
        with self._map(extent, writable=False) as view:
            return [
                np.frombuffer(view, dtype=dtype, count=math.prod(shape), offset=offset).reshape(shape).copy()
                for dtype, shape, offset, _ in checked
            ]

    def _map(self, length: int, writable: bool) -> mmap.mmap:
        try:
            if not writable:
                faults.point(f"map-{self.what}")  # a test's fault: the harness's own mapping of an answer failing
            return mmap.mmap(self.fd, length, prot=mmap.PROT_READ | (mmap.PROT_WRITE if writable else 0))
        except OSError as exc:
            raise HarnessError(f"cannot map the {self.what} ({length} bytes): {exc.strerror or exc}") from exc

    def close_view(self) -> None:
        if self.view is not None:
            self.view.close()
            self.view = None

    def close(self) -> None:
        self.close_view()
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def _aligned(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def _count(value) -> bool:
    return type(value) is int and 0 <= value < 1 << 40


def pack(tree, arrays: list[np.ndarray]):
    """``tree`` as JSON-ready data, each numpy array replaced by ``{"$array": i}`` and appended to ``arrays``."""
    if isinstance(tree, np.ndarray):
        arrays.append(tree if tree.flags.c_contiguous else tree.copy(order="C"))  # ascontiguousarray would make 0-d 1-d
        return {"$array": len(arrays) - 1}
    if isinstance(tree, dict):
        return {str(k): pack(v, arrays) for k, v in tree.items()}
    if isinstance(tree, (list, tuple)):
        return [pack(v, arrays) for v in tree]
    if isinstance(tree, np.generic):
        return tree.item()
    return tree


def unpack(tree, arrays: list[np.ndarray], depth: int = 0):
    """The inverse of :func:`pack`, refusing trees nested deeper than ``MAX_DEPTH`` and references to no array."""
    if depth > MAX_DEPTH:
        raise Malformed(f"its body is nested deeper than {MAX_DEPTH}")
    if isinstance(tree, dict):
        if set(tree) == {"$array"}:
            index = tree["$array"]
            if type(index) is not int or not 0 <= index < len(arrays):
                raise Malformed(f"it refers to array {index!r} of {len(arrays)}")
            return arrays[index]
        return {k: unpack(v, arrays, depth + 1) for k, v in tree.items()}
    if isinstance(tree, list):
        return [unpack(v, arrays, depth + 1) for v in tree]
    return tree


class Channel:
    """One side's end: messages out through ``out``'s arena, in through ``into``'s."""

    def __init__(self, sock: socket.socket, out: Arena, into: Arena):
        self.sock, self.out, self.into = sock, out, into

    def send(self, kind: str, body=None) -> None:
        arrays: list[np.ndarray] = []
        tree = pack(body, arrays)
        header = json.dumps({"kind": kind, "body": tree, "arrays": self.out.write(arrays)}).encode()
        if len(header) > MAX_HEADER_BYTES:
            raise HarnessError(f"a '{kind}' message's header is {len(header)} bytes, more than {MAX_HEADER_BYTES}")
        self.sock.sendall(len(header).to_bytes(4, "big") + header)

    def receive(self, timeout: float | None = None, budget: int = ARENA_BYTES) -> tuple[str, object]:
        """The next message's kind and body; :class:`Timeout` when it does not come whole within ``timeout`` seconds,
        ``EOFError`` when the other side closed, :class:`Malformed` when it breaks the protocol or its arrays hold more
        than ``budget`` bytes (the harness gives what the answer it waits for can hold)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        length = int.from_bytes(self._exactly(4, deadline), "big")
        if length > MAX_HEADER_BYTES:
            raise Malformed(f"a header of {length} bytes, more than {MAX_HEADER_BYTES}")
        try:
            header = json.loads(self._exactly(length, deadline))
        except (UnicodeDecodeError, ValueError, RecursionError) as exc:
            raise Malformed("its header is not JSON") from exc
        if not isinstance(header, dict) or set(header) != {"kind", "body", "arrays"} or header["kind"] not in KINDS:
            raise Malformed(f"an unknown header {str(header)[:80]}")
        return header["kind"], unpack(header["body"], self.into.read(header["arrays"], budget))

    def _exactly(self, count: int, deadline: float | None) -> bytes:
        data = bytearray()
        while len(data) < count:
            self.sock.settimeout(None if deadline is None else max(deadline - time.monotonic(), 1e-3))
            try:
                chunk = self.sock.recv(count - len(data))
            except TimeoutError as exc:
                raise Timeout("no answer in time") from exc
            if not chunk:
                raise EOFError("the channel is closed")
            data += chunk
        return bytes(data)

    def close(self) -> None:
        self.sock.close()
        self.out.close()
        self.into.close()
