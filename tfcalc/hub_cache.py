"""Hugging Face model ids (``org/name``) resolved in the local Hugging Face cache -- never the network.

The cache layout is huggingface_hub's (its file_download.py and constants.py): the cache folder is
HF_HUB_CACHE, else HF_HOME/hub, else XDG_CACHE_HOME/huggingface/hub, else ~/.cache/huggingface/hub;
a model's files live in ``models--{org}--{name}/snapshots/{commit}/``, and ``refs/main`` names the
commit the main branch pointed to when it was downloaded. Pure Python, no network, no torch.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from tfcalc import reading
from tfcalc.errors import InputError, shown, shown_path

# huggingface_hub's repo-id rules (validate_repo_id): letters, digits, '-', '_', '.'; no '--' or '..';
# not starting or ending with '-' or '.'; at most 96 characters
_PART = r"[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?"
_REPO_ID = re.compile(rf"{_PART}/{_PART}")
_COMMIT = re.compile(r"[0-9a-f]{40}")


def is_repo_id(spec: str) -> bool:
    """'org/name' as the Hub writes model ids (a file name with a YAML or JSON suffix is not one)."""
    return (len(spec) <= 96 and _REPO_ID.fullmatch(spec) is not None and "--" not in spec and ".." not in spec
            and not spec.lower().endswith((".json", ".yaml", ".yml", ".safetensors")))


def cache_dirs() -> list[Path]:
    """Where huggingface_hub keeps downloads, in the order it decides it (first that is set)."""
    env = os.environ
    if env.get("HF_HUB_CACHE"):
        return [_expanded("HF_HUB_CACHE")]
    if env.get("HF_HOME"):
        return [_expanded("HF_HOME") / "hub"]
    xdg = env.get("XDG_CACHE_HOME")
    return [(Path(xdg) if xdg else Path.home() / ".cache") / "huggingface" / "hub"]


def _expanded(variable: str) -> Path:
    """$variable as a path, ~ expanded; InputError, one line, for ~nouser (Path.expanduser raises
    RuntimeError for a user that does not exist)."""
    text = os.environ[variable]
    try:
        return Path(text).expanduser()
    except RuntimeError:
        raise InputError(f"{variable}={shown_path(text)}: cannot expand {shown(text.split('/')[0])} "
                         "(no such user); give the folder itself") from None


def _ref(path: Path) -> str:
    """refs/main's commit hash, or '' when the file is missing, unreadable, not a regular file or longer
    than a hash: read through tfcalc.reading (at most 256 bytes; a 12 GiB file was read whole)."""
    try:
        return reading.read_text(path, "ref", limit=256).strip() if path.is_file() else ""
    except InputError:
        return ""


def _tail(text: str, most: int) -> str:
    """text, or its last most characters after '…': an error line holds about 280 (tfcalc.cli.render)."""
    return text if len(text) <= most else "…" + text[-(most - 1):]


def snapshot(repo_id: str) -> Path:
    """The cached snapshot folder of repo_id that holds its config.json: the one refs/main names, else
    the most recently written. InputError, one line saying where it looked and how to get the file."""
    org, name = repo_id.split("/")
    looked = []
    for cache in cache_dirs():
        repo = cache / f"models--{org}--{name}"
        looked.append(str(repo))
        snapshots = repo / "snapshots"
        if not snapshots.is_dir():
            continue
        candidates = []
        ref = repo / "refs" / "main"
        commit = _ref(ref)
        if _COMMIT.fullmatch(commit):
            candidates.append(snapshots / commit)
        candidates += sorted((p for p in snapshots.iterdir() if p.is_dir()), key=lambda p: p.stat().st_mtime,
                             reverse=True)
        for folder in candidates:
            if (folder / "config.json").is_file():
                return folder
    # the advice first and the folders last, cut to their end to fit the line: an error is one line of
    # about 280 characters (tfcalc.cli.render.MAX_MESSAGE), and a long cache path once cut the advice in two
    advice = (f"'{repo_id}' is not in the local Hugging Face cache; tfcalc never downloads: run `huggingface-cli "
              f"download {repo_id} config.json`, set HF_HUB_CACHE or HF_HOME, or give a path")
    raise InputError(f"{advice} (looked in {_tail(', '.join(looked), max(40, 267 - len(advice)))})")
