"""Files a command reads or writes for the operator: one set of checks for every command.

Why one module: ``export``, ``import-cuzk``, the engine's ``--record`` and ``--token-file``
and the recording writer each met the same mistakes (an output that is the input, an existing
file replaced without a word, a FIFO that blocks a read for ever, a path longer than the
kernel takes, a file created readable by everyone under ``umask 000``). The rules, here once:

- an output is never an input (compared by device and inode, so a symlink or a hard link to
  the input is caught too) and never replaces an existing file without ``--force``;
- what the product creates is private to the user whatever the umask: files 0600,
  directories 0700 (a replaced file gets 0600 too, so its mode is never widened);
- a file that is read is a regular file (checked on the descriptor, opened without blocking)
  and read only up to a stated size.

A leaf module (it imports nothing of ours); every refusal is a :class:`UsageError` of one line.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from provetop.base.errors import UsageError

FILE_MODE = 0o600  # files the product creates
DIR_MODE = 0o700  # directories the product creates
PATH_MAX = 4095  # bytes of a path the kernel takes (PATH_MAX less the terminating NUL)
NAME_MAX = 255  # bytes of one path component


def check_path(path: str | os.PathLike[str], what: str) -> str:
    """``path`` as a string, or a one-line refusal: empty, a NUL byte, longer than the kernel
    takes (the whole path or one of its names)."""
    text = os.fspath(path)
    if not text.strip():
        raise UsageError(f"{what}: an empty path")
    if "\0" in text:
        raise UsageError(f"{what}: the path holds a NUL byte")
    raw = os.fsencode(text)
    if len(raw) > PATH_MAX:
        raise UsageError(f"{what}: the path is {len(raw)} bytes long (at most {PATH_MAX})")
    longest = max((len(part) for part in raw.split(b"/")), default=0)
    if longest > NAME_MAX:
        raise UsageError(f"{what}: a name in the path is {longest} bytes long (at most {NAME_MAX})")
    return text


def same_file(a: str | os.PathLike[str], b: str | os.PathLike[str]) -> bool:
    """Whether ``a`` and ``b`` are one file (device and inode, links followed); False when
    either does not exist."""
    try:
        sa, sb = os.stat(a), os.stat(b)
    except (OSError, ValueError):
        return False
    return (sa.st_dev, sa.st_ino) == (sb.st_dev, sb.st_ino)


def check_output(
    out: str | os.PathLike[str],
    *,
    inputs: dict[str, str | os.PathLike[str]] | None = None,
    force: bool = False,
    what: str = "-o",
) -> str:
    """Refuse an output path that would destroy something: an input (never, even with
    ``force``; ``inputs`` maps each input's name in words to its path), a directory, an
    existing file or link without ``force``, a missing parent directory, a path the kernel
    cannot take. Returns the path as a string."""
    text = check_path(out, what)
    for name, source in (inputs or {}).items():
        if same_file(source, text):
            raise UsageError(f"{what} {text} is the input {name}; it is never overwritten")
    try:
        info = os.lstat(text)
    except FileNotFoundError:
        info = None
    except OSError as exc:
        raise UsageError(f"{what} {text}: {exc.strerror or exc}") from None
    if info is not None:
        if os.path.isdir(text):
            raise UsageError(f"{what} {text} is a directory; give a file name")
        if not force:
            raise UsageError(f"{what} {text} exists; pass --force to replace it")
        if not stat.S_ISREG(info.st_mode) and not stat.S_ISLNK(info.st_mode):
            raise UsageError(f"{what} {text} is not a regular file; it is never replaced")
    parent = Path(text).parent
    if not parent.is_dir():
        raise UsageError(f"{what} {text}: directory {parent} does not exist")
    return text


def make_private_dirs(path: str | os.PathLike[str]) -> None:
    """Create ``path`` and its missing parents, each 0700 whatever the umask (existing ones
    are left as they are)."""
    p = Path(path)
    missing: list[Path] = []
    while not p.exists() and p != p.parent:
        missing.append(p)
        p = p.parent
    for d in reversed(missing):
        try:
            os.mkdir(d, DIR_MODE)
        except FileExistsError:
            continue
        os.chmod(d, DIR_MODE)  # the umask may have taken bits away, never added: set exactly


def create_private(path: str | os.PathLike[str], *, exclusive: bool = True) -> int:
    """Open a new file for writing, mode 0600 whatever the umask; with ``exclusive`` (the
    default) an existing path (or a link) is refused (``FileExistsError``), never truncated."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW
    flags |= os.O_EXCL if exclusive else os.O_TRUNC
    fd = os.open(path, flags, FILE_MODE)
    try:
        os.fchmod(fd, FILE_MODE)
    except OSError:
        os.close(fd)
        raise
    return fd


def read_regular(path: str | os.PathLike[str], limit: int, what: str) -> bytes:
    """The bytes of a regular file of at most ``limit`` bytes; a one-line refusal for a FIFO,
    a device, a socket, a directory, a larger file or an unreadable one. Opened without
    blocking and checked on the descriptor, so a FIFO never hangs the read."""
    text = check_path(path, what)
    try:
        fd = os.open(text, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError as exc:
        raise UsageError(f"cannot read {what} {text}: {exc.strerror or exc}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise UsageError(f"{what} {text}: {file_kind(info.st_mode)}, not a regular file")
        if info.st_size > limit:
            raise UsageError(
                f"{what} {text}: {info.st_size} bytes, larger than the {limit}-byte limit"
            )
        os.set_blocking(fd, True)
        chunks: list[bytes] = []
        got = 0
        while got <= limit:
            chunk = os.read(fd, min(1 << 16, limit + 1 - got))
            if not chunk:
                break
            chunks.append(chunk)
            got += len(chunk)
        if got > limit:  # grew while being read
            raise UsageError(f"{what} {text}: larger than the {limit}-byte limit")
        return b"".join(chunks)
    except OSError as exc:
        raise UsageError(f"cannot read {what} {text}: {exc.strerror or exc}") from None
    finally:
        os.close(fd)


def file_kind(mode: int) -> str:
    """A file type in words: "is a FIFO", "is a directory", ..."""
    kinds = (
        (stat.S_ISDIR, "is a directory"),
        (stat.S_ISFIFO, "is a FIFO"),
        (stat.S_ISCHR, "is a character device"),
        (stat.S_ISBLK, "is a block device"),
        (stat.S_ISSOCK, "is a socket"),
    )
    for test, words in kinds:
        if test(mode):
            return words
    return "is not a regular file"
