"""The "Supported model types" table of docs/models.md is the code's registry, row for row: every type tfcalc reads
(tfcalc.hf_config.SUPPORTED_MODEL_TYPES) has a row that says what is built, and a row for a type the
registry lacks must say it is in progress -- so the page can neither miss a type nor claim one."""

from __future__ import annotations

import re
from pathlib import Path

from tfcalc.hf_config import SUPPORTED_MODEL_TYPES

PAGE = (Path(__file__).resolve().parent.parent / "docs" / "models.md").read_text(encoding="utf-8")


def _rows() -> dict[str, str]:
    section = re.search(r"## Supported model types\n(.*?)\n## ", PAGE, re.S)
    assert section, "docs/models.md has no '## Supported model types' section"
    rows = {}
    for line in section.group(1).splitlines():
        m = re.match(r"\| `([a-z0-9_]+)` \|(.*)\|\s*$", line)
        if m and m.group(1) != "model_type":  # the header row
            assert m.group(1) not in rows, f"two rows for {m.group(1)}"
            rows[m.group(1)] = m.group(2)
    return rows


def test_every_supported_type_has_a_built_row():
    rows = _rows()
    missing = sorted(set(SUPPORTED_MODEL_TYPES) - set(rows))
    assert not missing, f"supported model types missing from the table in docs/models.md: {missing}"
    stale = sorted(t for t in SUPPORTED_MODEL_TYPES if "in progress" in rows[t].split("|")[0])
    assert not stale, f"supported, yet docs/models.md says in progress: {stale}"


def test_a_row_outside_the_registry_says_in_progress():
    claimed = sorted(t for t, row in _rows().items() if t not in SUPPORTED_MODEL_TYPES and "in progress" not in row)
    assert not claimed, f"docs/models.md lists types tfcalc does not read: {claimed}"

