"""Reading the user's files without trusting them: config files (YAML, config.json) and snapshots.

Pure Python (no torch, typer or rich). What a hostile or mistaken file must not do, and how each is met:

- hang or exhaust memory by size: ``/dev/zero``, a FIFO that never closes, a 24 MB YAML that takes a
  minute to parse. The file is opened without blocking (a FIFO opens at once), checked through its open
  descriptor to be a regular file (so a path swapped after a check cannot slip through), and read up to
  a limit plus one byte: a file past the limit is refused, whatever its size claims (``/proc`` files
  claim 0).
- crash the parser by nesting: ``[[[[...]]]]`` 100,000 deep makes json raise RecursionError; it is one
  line here, and parsed data nested deeper than ``MAX_DEPTH`` is refused before anything walks it.
- say two things at once: a key given twice in a JSON object (last wins, silently) is refused.
- carry numbers past what Python converts: an integer of more than 4,300 digits raises ValueError in
  ``int()``; refused in one line.

Every refusal is an InputError naming the file, with the user's values cut short (tfcalc.errors.shown).
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

from tfcalc.errors import InputError, shown, shown_path

MAX_CONFIG_BYTES = 1 << 20  # a config is a few KB; Hugging Face's largest (label maps) some 100 KB
MAX_SNAPSHOT_BYTES = 64 << 20  # every preset's figures take ~0.5 MB; room for thousands of user models
MAX_DEPTH = 64  # configs and snapshots nest 3 or 4 levels; Python's recursion stops near 1,000

_KINDS = {stat.S_IFCHR: "a character device", stat.S_IFBLK: "a block device", stat.S_IFIFO: "a FIFO (named pipe)",
          stat.S_IFSOCK: "a socket", stat.S_IFDIR: "a directory"}


def special_kind(mode: int) -> str | None:
    """'a character device', 'a FIFO (named pipe)', ... for a file that is not a regular one; None for a
    regular file."""
    return None if stat.S_ISREG(mode) else _KINDS.get(stat.S_IFMT(mode), "not a regular file")


def entry_kind(path: str | Path) -> str | None:
    """'a regular file', 'a directory', or what special_kind calls anything else; None for a missing path
    or a name no file can have (too long, a NUL byte). One stat, which never raises."""
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):
        return None
    return special_kind(mode) or "a regular file"


def checkpoint_entry(path: str | Path) -> str:
    """entry_kind of a checkpoint named by the user: a regular file or a directory; InputError, one line,
    for a missing path and for a special file (a FIFO would block the header read; a device has none)."""
    kind = entry_kind(path)
    if kind is None:
        raise InputError(f"{shown_path(path)}: no such file or folder")
    if kind not in ("a regular file", "a directory"):
        raise InputError(f"{shown_path(path)}: is {kind}, not a checkpoint; tfcalc reads regular files only")
    return kind


def read_text(path: str | Path, kind: str, limit: int = MAX_CONFIG_BYTES) -> str:
    """The text of a regular file of at most limit bytes (UTF-8); InputError, one line, otherwise."""
    where = shown_path(path)
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0))
    except FileNotFoundError:
        raise InputError(f"{where}: no such file") from None
    except IsADirectoryError:
        raise InputError(f"{where}: is a directory, not a {kind} file") from None
    except (OSError, ValueError) as e:  # permissions, a name too long, a NUL byte in the name
        raise InputError(f"{where}: cannot be read ({getattr(e, 'strerror', None) or e})") from None
    what = special_kind(os.fstat(fd).st_mode)  # the file opened, not the name: no swap in between
    if what is not None:
        os.close(fd)
        if what == "a directory":
            raise InputError(f"{where}: is a directory, not a {kind} file")
        raise InputError(f"{where}: is {what}, not a {kind} file; tfcalc reads regular files only")
    with os.fdopen(fd, "rb") as f:
        try:
            data = f.read(limit + 1)
        except OSError as e:
            raise InputError(f"{where}: cannot be read ({e.strerror or e})") from None
    if len(data) > limit:
        raise InputError(f"{where}: larger than {limit >> 20} MiB, too large for a {kind} file")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise InputError(f"{where}: not UTF-8 text (byte {e.start})") from None


def check_depth(data: Any, where: str, limit: int = MAX_DEPTH) -> None:
    """InputError when data nests lists and dicts deeper than limit (walked without recursion)."""
    stack = [(data, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (list, dict)):
            if depth > limit:
                raise InputError(f"{where}: nested more than {limit} levels deep")
            stack.extend((x, depth + 1) for x in (item.values() if isinstance(item, dict) else item))


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise InputError(f"the key {shown(key)} is given twice in one object")
        out[key] = value
    return out


def parse_json(text: str, where: str) -> Any:
    """JSON text -> data, refusing duplicate keys, runaway nesting and unconvertible numbers (one line)."""
    try:
        data = json.loads(text, object_pairs_hook=_no_duplicates)
    except json.JSONDecodeError as e:
        raise InputError(f"{where}: not valid JSON at line {e.lineno}, column {e.colno}: {e.msg}") from None
    except InputError as e:
        raise InputError(f"{where}: {e}") from None
    except RecursionError:
        raise InputError(f"{where}: nested too deeply to read (more than {MAX_DEPTH} levels are refused)") from None
    except ValueError as e:  # an integer past Python's 4,300-digit conversion limit
        raise InputError(f"{where}: a number too long to read ({' '.join(str(e).split())[:80]})") from None
    check_depth(data, where)
    return data


def read_json(path: str | Path, kind: str, limit: int = MAX_CONFIG_BYTES) -> Any:
    return parse_json(read_text(path, kind, limit), shown_path(path))
