"""The README's ``@fusec.fuse`` example works as written (and its result is right)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

README = Path(__file__).resolve().parents[3] / "README.md"


def fuse_example() -> str:
    text = README.read_text()
    match = re.search(r"<!-- fuse-example:.*?-->\n```python\n(.*?)```", text, re.S)
    assert match, "README.md lost its fuse-example block"
    return match.group(1)


def test_readme_fuse_example_runs(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("FUSEC_CACHE_DIR", str(tmp_path))
    scope: dict = {}
    exec(compile(fuse_example(), str(README), "exec"), scope)
    x, w, b, y = (np.asarray(scope[k], dtype=np.float64) for k in "xwby")
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    expected = np.zeros(y.shape)
    for i in range(3):
        for j in range(3):
            window = xp[:, :, i : i + 28, j : j + 28]
            expected += np.einsum("nchw,kc->nkhw", window, w[:, :, i, j])
    expected = np.maximum(expected + b[None, :, None, None], 0)
    assert scope["y"].dtype == np.float16
    assert np.linalg.norm(y - expected) / np.linalg.norm(expected) < 1e-2
    printed = capsys.readouterr().out
    assert "ai.conv2d" in printed and "ai.fused" in printed
