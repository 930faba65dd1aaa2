"""The README's Python example runs and prints what its comments say; its tour commands parse."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

README = (Path(__file__).resolve().parent.parent / "README.md").read_text(encoding="utf-8")


def test_python_example_prints_what_it_says():
    code = re.search(r"## Python API\n\n```python\n(.*?)```", README, re.S).group(1)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "README.md", "exec"), {})
    printed = out.getvalue().splitlines()
    expected = [line.split("# ", 1)[1].split(",")[0].split(" (")[0] for line in code.splitlines()
                if line.startswith("print(")]
    assert printed[0] == "291648307200" == expected[0]
    assert printed[1] == expected[1] == "gpt2 + n_layer=6 81912576 True"
    assert printed[2] == "13476831232 2147483648" == expected[2]
    assert printed[3] == "137" == expected[3]  # the performance model: 0.85 of 3.35 TB/s and 450 kernels



def test_where_a_change_goes_names_files_that_exist():
    """The worked example of adding an attention kind ("Where a change goes") names the files a reader
    opens: each exists, so the walk-through cannot rot as modules move."""
    section = README.split("## Where a change goes", 1)[1].split("\n## ", 1)[0]
    root = Path(__file__).resolve().parent.parent
    named = set(re.findall(r"`((?:tfcalc/|tests/)?[\w/]+\.py)`", section))
    assert len(named) > 15
    missing = [p for p in named if not any((root / base / p).exists() for base in ("", "tfcalc"))]
    assert not missing, missing
