"""Finding a checkpoint's safetensors files and reading their headers -- never their tensor data.

A checkpoint is given as a ``.safetensors`` file, a folder holding ``model.safetensors.index.json`` (a
sharded checkpoint: the index maps every tensor name to the shard that holds it), or a folder holding
one or more ``*.safetensors`` files. Headers are read with two bounded reads (the 8-byte length, then
the JSON: never the whole file, which a mapping would take into the address space) and validated as the
safetensors library validates them (header size, JSON, dtypes, offsets contiguous within the file), one
line on any hostile file. Pickled checkpoints (``pytorch_model.bin``) are refused: loading them would
run code.

Every problem is one InputError line naming the file.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

from tfcalc import reading
from tfcalc.errors import InputError, shown, shown_path

INDEX = "model.safetensors.index.json"
MAX_INDEX_BYTES = 64 * 2**20  # an index lists names and shard files: megabytes at most, even for 1T models
# bytes per element of each safetensors dtype (safetensors' Dtype enum)
DTYPE_BYTES = {
    "BOOL": 1, "U8": 1, "I8": 1, "F8_E5M2": 1, "F8_E4M3": 1, "F8_E8M0": 1, "I16": 2, "U16": 2, "F16": 2,
    "BF16": 2, "I32": 4, "U32": 4, "F32": 4, "I64": 8, "U64": 8, "F64": 8,
}


@dataclass(frozen=True)
class TensorInfo:
    name: str
    shape: tuple[int, ...]
    dtype: str  # safetensors' name: F32, BF16, ...
    file: str  # the file (within the checkpoint folder) that holds it

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        # sub-byte formats (F4) are not in the table: counted at one byte per element
        return self.numel * DTYPE_BYTES.get(self.dtype, 1)


@dataclass(frozen=True)
class CheckpointFiles:
    folder: Path  # where config.json is looked for
    files: tuple[Path, ...]  # the safetensors files, in order
    tensors: tuple[TensorInfo, ...]  # every tensor of every file, in file order

    @property
    def by_name(self) -> dict[str, TensorInfo]:
        return {t.name: t for t in self.tensors}


def is_checkpoint(path: Path) -> bool:
    """A .safetensors file, or a folder (a model folder, maybe sharded)."""
    return path.suffix.lower() == ".safetensors" or path.is_dir()


def find(path: str | Path) -> tuple[Path, tuple[Path, ...], dict[str, str] | None]:
    """(folder, safetensors files, the index's weight map or None) for a file or a model folder."""
    path = Path(path)
    if reading.checkpoint_entry(path) == "a regular file":
        if path.suffix.lower() != ".safetensors":
            raise InputError(f"{path}: not a .safetensors file")
        return path.parent, (path,), None
    if (path / INDEX).exists():  # read by tfcalc.reading, which refuses anything but a regular file
        weight_map = _read_index(path / INDEX)
        shards = tuple(path / name for name in dict.fromkeys(weight_map.values()))
        for shard in shards:
            if not shard.is_file():
                raise InputError(f"{path / INDEX}: names shard '{shard.name}', which is not in {path}")
        return path, shards, weight_map
    files = tuple(sorted(p for p in path.glob("*.safetensors") if p.is_file()))
    if not files:
        pickled = sorted(p.name for p in path.glob("*.bin"))
        hint = ""
        if pickled:
            hint = (f" (only {', '.join(pickled)}: pickled weights, which tfcalc does not open since loading them runs "
                    "code; convert them to safetensors, or pass the config.json to count the config alone)")
        raise InputError(f"{path}: no .safetensors file and no {INDEX}{hint}")
    return path, files, None


def _read_index(path: Path) -> dict[str, str]:
    """The weight map of a sharded checkpoint's index: {tensor name: shard file name in the same folder}."""
    data = reading.read_json(path, "index", MAX_INDEX_BYTES)  # a regular file, bounded, no duplicate keys
    weight_map = data.get("weight_map") if isinstance(data, dict) else None
    if not isinstance(weight_map, dict) or not weight_map:
        raise InputError(f"{path}: no 'weight_map' object of tensor names and shard files")
    for name, shard in weight_map.items():
        if not isinstance(shard, str) or not shard:
            raise InputError(f"{path}: 'weight_map' entry {shown(name)} must name a shard file; got {shown(shard)}")
        # a shard is a file beside the index: no folder, no parent (a hostile index could point anywhere)
        if shard != Path(shard).name or shard in (".", "..") or "\\" in shard:
            raise InputError(f"{path}: shard {shown(shard)} of {shown(name)} is not a file name in the "
                             "checkpoint's folder")
    return weight_map


def read_headers(path: str | Path) -> CheckpointFiles:
    """Every tensor's name, shape and dtype, from the headers only (no tensor data is read)."""
    folder, files, weight_map = find(path)
    tensors: list[TensorInfo] = []
    seen: dict[str, Path] = {}
    for file in files:
        for info in _header(file):
            if info.name in seen:
                raise InputError(f"{shown_path(file)}: tensor {shown(info.name)} is also in {seen[info.name].name}")
            seen[info.name] = file
            tensors.append(info)
    if weight_map is not None:
        for name, shard in weight_map.items():
            if seen.get(name, Path()).name != shard:
                raise InputError(f"{folder / INDEX}: tensor {shown(name)} is not in its shard {shown(shard)}")
    return CheckpointFiles(folder, files, tuple(tensors))


def _readable(file: Path) -> None:
    """InputError naming why the file cannot be opened (Permission denied, ...): safetensors' own error
    says "No such file or directory" for a file that is there but unreadable."""
    try:
        os.close(os.open(file, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0)))
    except OSError as e:
        raise InputError(f"{shown_path(file)}: cannot be read ({e.strerror or e})") from None


MAX_HEADER_BYTES = 100_000_000  # the safetensors format's own limit on the JSON header (safetensors/src/tensor.rs)


def _header(file: Path) -> list[TensorInfo]:
    """The file's tensors from its header alone: an 8-byte little-endian length, then that many bytes of
    JSON -- read with two bounded reads, never by mapping the file (a shard larger than the address space
    left failed with MemoryError), and checked as safetensors checks it: each tensor's dtype, shape and
    data offsets, the offsets contiguous and within the file."""
    _readable(file)
    try:
        with open(file, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            head = f.read(8)
            n = int.from_bytes(head, "little") if len(head) == 8 else -1
            if n < 2:  # the words of safetensors' own errors, which the tests and users know
                return _invalid(file, "header too small")
            if n > MAX_HEADER_BYTES or 8 + n > size:
                return _invalid(file, f"header too large: {n:,} bytes in a file of {size:,}")
            text = f.read(n)
    except OSError as e:
        raise InputError(f"{shown_path(file)}: cannot be read ({e.strerror or e})") from None
    return _tensors(file, text, size - 8 - n)


def _invalid(file: Path, why: str):
    raise InputError(f"{shown_path(file)}: not a valid safetensors file ({why})")


def _tensors(file: Path, text: bytes, data: int) -> list[TensorInfo]:
    """The header's tensors, in the file's order of their data; ``data``: the bytes after the header."""
    import json

    def pairs(items):
        keys = [k for k, _ in items]
        if len(set(keys)) != len(keys):
            _invalid(file, "a key is given twice in the header")
        return dict(items)

    try:
        header = json.loads(text.decode("utf-8"), object_pairs_hook=pairs)
    except (UnicodeDecodeError, ValueError, RecursionError):
        return _invalid(file, "invalid JSON in header")
    if not isinstance(header, dict):
        return _invalid(file, "the header is not a JSON object")
    out, spans = [], []
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        if not isinstance(entry, dict):
            return _invalid(file, f"tensor {shown(name)} is not an object")
        dtype, shape, offsets = entry.get("dtype"), entry.get("shape"), entry.get("data_offsets")
        if not isinstance(dtype, str) or dtype not in DTYPE_BYTES:
            return _invalid(file, f"tensor {shown(name)} has dtype {shown(dtype)}")
        if not isinstance(shape, list) or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0
                                                  for d in shape):
            return _invalid(file, f"tensor {shown(name)} has shape {shown(shape)}")
        if not (isinstance(offsets, list) and len(offsets) == 2 and all(isinstance(o, int) and not isinstance(o, bool)
                                                                        for o in offsets)
                and 0 <= offsets[0] <= offsets[1]
                and offsets[1] - offsets[0] == math.prod(shape) * DTYPE_BYTES[dtype]):
            return _invalid(file, f"tensor {shown(name)} has data offsets {shown(offsets)} that do not fit its "
                                  "shape and dtype in the file")
        spans.append((offsets[0], offsets[1]))
        out.append((offsets[0], TensorInfo(name, tuple(shape), dtype, file.name)))
    spans.sort()
    ends = [0] + [b for _, b in spans]
    if any(a != e for (a, _), e in zip(spans, ends, strict=False)) or ends[-1] != data:
        return _invalid(file, "the data is not fully covered by the tensors' offsets, or they overlap")
    return [info for _, info in sorted(out, key=lambda x: x[0])]
