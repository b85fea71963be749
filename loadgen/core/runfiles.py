"""Opening a run folder's files as a crafted folder cannot exploit: the one owner of that policy.

Why: run folders travel as tarballs and issue attachments, so any of their files may be a symbolic link
(to a user's file, to ``/dev/zero``), a FIFO, a device or a sparse file of a terabyte. Every command that
reads a run folder or writes into one (``report``, ``export``, ``repro``, ``check``, ``compare`` and the
run itself) opens its files through here:

- **Reads** take regular files only: a symbolic link (wherever it leads), a FIFO, a device, a socket or a
  folder in a file's place is refused with a ``RunFolderError`` naming it, without reading a byte (a
  FIFO is opened non-blocking, so it cannot hang the reader). A file above its bound is refused the
  same way: ``RECORDS_LIMIT`` (64 GiB) for JSON-lines files, read as a stream (a million 128-token canary
  records, the largest run ``benchmarks/read_speed.py`` makes, are 12.5 GB), ``DOCUMENT_LIMIT`` (64 MiB)
  for a JSON document read whole (``manifest.json``, ``process-*.json``, ``report.json``; a real one is
  kilobytes). A JSON-lines file (``open_lines``) must also have no hole: a file that is appended to has
  none, while a sparse file's hole reads as zeros without a line break and costs no disk (a run folder of a few
  blocks could make a reader read 64 GiB). How long one of its lines may be is its reader's bound
  (``collectors.jsonl.bounded_lines``).
- **Writes** never follow a link: a file is written to a temporary file of an unpredictable name made
  with ``O_CREAT | O_EXCL | O_NOFOLLOW`` beside it, then renamed over it (a reader never sees half a
  file, and a rename replaces a link instead of writing through it). Where a symbolic link or a special
  file already holds the name, the write is refused (``RunFolderError`` naming it). An output folder is
  made fresh, or reused only when it is a real folder holding nothing but files of the names the
  command writes (``output_folder``). Appends (the run's own records and logs) open with
  ``O_NOFOLLOW``.

Errors of the disk itself (``OSError``: full, read-only, no permission) are left to the caller, which
knows what the file was for. Imports nothing else of the project but the error tree.
"""

from __future__ import annotations

import errno
import os
import secrets
import shutil
import stat
from collections.abc import Collection, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

from loadgen.core.errors import RunFolderError

RECORDS_LIMIT = 64 << 30  # bytes of one JSON-lines file (canaries*, background*, engine_metrics*, client_cpu*)
DOCUMENT_LIMIT = 64 << 20  # bytes of one JSON document read whole (manifest.json, process-*.json, report.json)

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_BINARY = getattr(os, "O_BINARY", 0)


def _kind(mode: int) -> str:
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISDIR(mode):
        return "a folder"
    return "not a regular file"


def _refused(path: Path, mode: int, doing: str) -> RunFolderError:
    return RunFolderError(f"{path}: {_kind(mode)}, not a regular file; refused ({doing} only regular files)")


def open_regular(path: Path, *, limit: int = RECORDS_LIMIT, buffering: int = -1) -> BinaryIO:
    """``path`` opened for reading in binary, when it is a regular file of at most ``limit`` bytes.

    A missing file raises ``FileNotFoundError`` as ``open`` does; a link, a special file or a file above the
    bound raises ``RunFolderError`` naming it."""
    path = Path(path)
    before = os.lstat(path)  # FileNotFoundError, as open would
    if not stat.S_ISREG(before.st_mode):
        raise _refused(path, before.st_mode, "a run folder's readers open")
    try:
        fd = os.open(path, os.O_RDONLY | _NOFOLLOW | _NONBLOCK | _CLOEXEC | _BINARY)
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # replaced by a link since the look
            raise _refused(path, stat.S_IFLNK, "a run folder's readers open") from None
        raise
    try:
        now = os.fstat(fd)
        if not stat.S_ISREG(now.st_mode) or (now.st_dev, now.st_ino) != (before.st_dev, before.st_ino):
            raise _refused(path, now.st_mode if not stat.S_ISREG(now.st_mode) else 0, "a run folder's readers open")
        if now.st_size > limit:
            raise RunFolderError(
                f"{path}: {now.st_size:,} bytes, above the {limit:,} a file of this kind may hold in a run folder; "
                "refused (a real run's is far smaller)"
            )
        if _NONBLOCK:
            os.set_blocking(fd, True)
        return os.fdopen(fd, "rb", buffering=buffering)
    except BaseException:
        os.close(fd)
        raise


def open_lines(path: Path, *, buffering: int = -1) -> BinaryIO:
    """``open_regular`` for a JSON-lines file (``RECORDS_LIMIT``), refused where a part of it was never written."""
    fh = open_regular(path, buffering=buffering)
    try:
        size = os.fstat(fh.fileno()).st_size
        hole = _first_hole(fh.fileno(), size)
    except BaseException:
        fh.close()
        raise
    if hole is not None:
        fh.close()
        start, end = hole
        raise RunFolderError(
            f"{path}: bytes {start:,} to {end:,} of its {size:,} were never written (a hole in a sparse file, which "
            f"reads as zeros); a run's files are appended and have none; refused (where a crash left it at the end, "
            f"truncate the file at byte {start:,} to read what comes before)"
        )
    return fh


def _first_hole(fd: int, size: int) -> tuple[int, int] | None:
    """Where the file's first hole starts and ends (a file system that does not tell: None)."""
    seek_hole, seek_data = getattr(os, "SEEK_HOLE", None), getattr(os, "SEEK_DATA", None)
    if seek_hole is None or seek_data is None or not size:
        return None
    try:
        start = os.lseek(fd, 0, seek_hole)
        if start >= size:
            return None
        try:
            end = os.lseek(fd, start, seek_data)
        except OSError:  # ENXIO: no data after it, the hole runs to the end
            end = size
        return start, end
    except OSError:
        return None
    finally:
        os.lseek(fd, 0, os.SEEK_SET)


def read_regular(path: Path, *, limit: int = DOCUMENT_LIMIT) -> bytes:
    """The bytes of a regular file of at most ``limit`` bytes (``open_regular``'s rules)."""
    with open_regular(path, limit=limit) as fh:
        return fh.read(limit + 1)[:limit]


def regular_size(path: Path, *, limit: int = RECORDS_LIMIT) -> int:
    """The size of a regular file of at most ``limit`` bytes (``open_regular``'s rules)."""
    with open_regular(path, limit=limit, buffering=0) as fh:
        return os.fstat(fh.fileno()).st_size


def _in_the_way(path: Path) -> None:
    """Refuse a name held by anything but a regular file: a write replaces a file, never a link or a device."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISREG(st.st_mode):
        raise _refused(path, st.st_mode, "a write replaces")


def _temporary(path: Path, mode: int) -> tuple[int, Path]:
    """A new file beside ``path`` with a name nobody could guess, made with ``O_EXCL``: never a planted one."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC | _BINARY
    for _ in range(100):
        tmp = path.with_name(f".{path.name}.{secrets.token_hex(8)}.tmp")
        try:
            return os.open(tmp, flags, mode), tmp
        except FileExistsError:
            continue
    raise FileExistsError(errno.EEXIST, "no free temporary name", str(path.parent))


@contextmanager
def writing(path: Path, *, mode: int = 0o666) -> Iterator[BinaryIO]:
    """A binary file to write ``path``'s new content into; renamed over ``path`` when the block ends without
    an exception (removed otherwise). ``mode`` as ``open``'s (the umask applies): ``0o777`` for a script."""
    path = Path(path)
    _in_the_way(path)
    fd, tmp = _temporary(path, mode)
    try:
        with os.fdopen(fd, "wb") as fh:
            yield fh
        _in_the_way(path)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_file(path: Path, data: bytes | str, *, mode: int = 0o666) -> None:
    """Write ``data`` (text as UTF-8) to ``path`` atomically, never through a link (``writing``)."""
    with writing(path, mode=mode) as fh:
        fh.write(data.encode("utf-8") if isinstance(data, str) else data)


def copy_file(source: Path, target: Path) -> None:
    """Copy a regular file (no bound: a log) to ``target`` atomically, never through a link (``writing``)."""
    with open_regular(source, limit=1 << 62) as src, writing(target) as dst:
        shutil.copyfileobj(src, dst, 1 << 20)


def open_append(path: Path) -> BinaryIO:
    """``path`` opened to append bytes, unbuffered, created where missing; a link or special file in its
    place is refused (``RunFolderError``)."""
    path = Path(path)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | _NOFOLLOW | _NONBLOCK | _CLOEXEC | _BINARY, 0o666)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise _refused(path, stat.S_IFLNK, "appends open") from None
        if exc.errno in (errno.ENXIO, errno.EISDIR):  # a FIFO nobody reads, a folder
            raise _refused(path, os.lstat(path).st_mode, "appends open") from None
        raise
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise _refused(path, st.st_mode, "appends open")
    if _NONBLOCK:
        os.set_blocking(fd, True)
    return os.fdopen(fd, "ab", buffering=0)


def output_folder(path: Path, names: Collection[str] | None = None) -> Path:
    """The folder ``path``, made (with its parents) when missing. An existing one must be a real folder, not
    a link; with ``names``, it may hold only regular files of those names (what an earlier run of the same
    command wrote, replaced file by file); anything else in it is refused (``RunFolderError`` naming it)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        path.mkdir()
        return path
    except FileExistsError:
        pass
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode):
        raise RunFolderError(f"{path}: {_kind(st.st_mode)} where the output folder goes; refused")
    if names is not None:
        for entry in sorted(os.scandir(path), key=lambda e: e.name):
            if entry.name not in names or not entry.is_file(follow_symlinks=False):
                raise RunFolderError(
                    f"{path}: already holds {entry.name!r}, which this command does not write; refused "
                    "(remove the folder or choose another)"
                )
    return path
