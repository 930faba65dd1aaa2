"""Writing a file the user named (a snapshot) so that nothing of theirs is ever lost or replaced by mistake.

Pure Python. The rules, and why:

- ``-`` is stdout, and so is any path that is this process's stdout (``/dev/stdout``, ``/dev/fd/1``,
  ``/proc/self/fd/1``, or the very file stdout is redirected to): the caller prints instead of writing.
  Renaming a file over ``/dev/stdout`` would replace the system's symlink and print nothing.
- a symlink is followed: the file it points to is rewritten, and the link stays a link (replacing the
  link by a file would leave its target stale).
- a regular file is replaced atomically: the new text goes to a temporary file beside it, is flushed
  to disk, and is renamed over the old one, so a crash or a signal leaves the old file or the new one,
  never half of one. The old file's permissions (and, as root, its owner) are kept.
- anything else -- a character or block device, a FIFO, a socket, a directory -- is refused, never
  replaced: renaming over ``/dev/null`` would put a regular file in its place.
- a file the same command reads is never written over (``refuse_inputs``): ``tfcalc snapshot m.yaml -o m.yaml``
  would replace the model it counts by its counts. Files are compared as the file system sees them (device
  and inode of what the path resolves to), so a symlink or a hard link to an input is refused as the input
  itself is; an input folder (a Hugging Face model folder, the presets) stands for the files tfcalc reads
  in it (``config.json``, ``*.safetensors``, ``*.safetensors.index.json``, ``*.yaml``, ``*.yml``), not for
  the rest of it (a snapshot written there before may be written again). Checked before any work starts.
- the temporary file is removed on any failure and on any exception, KeyboardInterrupt and the
  Terminated that tfcalc's SIGTERM handler raises included.
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

from tfcalc.errors import InputError, shown_path
from tfcalc.reading import special_kind

STDOUT = "-"


def is_stdout(path: str | Path) -> bool:
    """True for '-' and for a path that is the file this process's stdout writes to."""
    if str(path) == STDOUT:
        return True
    try:
        named, out = os.stat(path), os.fstat(1)
    except (OSError, ValueError):
        return False
    return (named.st_dev, named.st_ino) == (out.st_dev, out.st_ino)


def target_of(path: str | Path) -> Path:
    """The regular file that writing path rewrites: path itself, or the end of its symlinks. InputError
    when that is a special file or a folder."""
    target = Path(os.path.realpath(path))
    try:
        mode = os.stat(target).st_mode
    except FileNotFoundError:
        return target  # a new file (or a dangling link's target): created
    except OSError as e:
        raise InputError(f"{shown_path(path)}: cannot write there ({e.strerror or e})") from None
    kind = special_kind(mode)
    if kind is not None:
        via = f" (a link to {shown_path(target)})" if target != Path(path).absolute() else ""
        raise InputError(f"{shown_path(path)}{via}: cannot write there, it is {kind}: tfcalc writes regular files "
                         "(or stdout, with -o -) and never replaces anything else")
    return target


_READ_SUFFIXES = (".yaml", ".yml", ".safetensors", ".safetensors.index.json")


def _identity(path: str | Path) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    return st.st_dev, st.st_ino


def _read_files(given: str | Path) -> list[Path]:
    """The files tfcalc reads for an input path: the file, or a folder's files of the kinds it reads."""
    path = Path(given)
    try:
        if not path.is_dir():
            return [path]
        return [p for p in path.iterdir() if p.name.lower().endswith(_READ_SUFFIXES) or p.name == "config.json"]
    except (OSError, ValueError):
        return []


def refuse_inputs(path: str | Path, inputs, option: str) -> None:
    """InputError, one line naming option, when writing path would write over one of the files that inputs
    (paths given to the same command, files or folders; None and names that are not paths skipped) name:
    the same file by any name, a symlink's target or a hard link (device and inode)."""
    if is_stdout(path):
        return
    out = _identity(target_of(path))
    if out is None:  # a new file: no input can be it
        return
    for given in inputs:
        if given is None:
            continue
        for file in _read_files(given):
            if _identity(file) == out:
                same = "" if Path(file) == Path(path) else f" (as {shown_path(file)})"
                raise InputError(f"{option} {shown_path(path)}: that is a file this command reads{same}; writing "
                                 "there would replace it, so give another file")


def _mode_and_owner(path: Path) -> tuple[int, tuple[int, int] | None]:
    """The existing file's permissions and owner, or what a plain open() would give under the umask."""
    try:
        st = path.stat()
        return stat.S_IMODE(st.st_mode), (st.st_uid, st.st_gid)
    except FileNotFoundError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask, None


def write_atomic(path: str | Path, text: str | bytes) -> Path:
    """Write text (or bytes: a plot) to path by the rules of the module docstring; returns the file written
    (the symlink's target). InputError, one line, when it cannot be written; the old file is then intact."""
    target = target_of(path)
    where = shown_path(path)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    except OSError as e:
        raise InputError(f"{where}: cannot write there ({e.strerror or e})") from None
    try:
        mode, owner = _mode_and_owner(target)
        binary = isinstance(text, bytes)
        with os.fdopen(fd, "wb" if binary else "w", **({} if binary else {"encoding": "utf-8"})) as f:
            os.fchmod(f.fileno(), mode)  # mkstemp makes 0600 files; the snapshot keeps the old file's mode
            if owner is not None and os.geteuid() == 0:
                os.fchown(f.fileno(), *owner)  # as root, do not take over the user's file
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException as e:  # KeyboardInterrupt and SIGTERM's Terminated too: no temporary file left
        Path(tmp).unlink(missing_ok=True)
        if isinstance(e, OSError):  # disk full, a directory in the way, permissions
            raise InputError(f"{where}: cannot write ({e.strerror or e}); the old file, if any, is intact") from None
        raise
    return target
