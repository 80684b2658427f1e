"""README.md's PyTorch example runs as written (where torch is installed): the block
after ``<!-- fuse-example: tests/frontend/torch/test_torch_readme.py runs this block -->``."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from torch_cases import quiet_torch_trace

torch = pytest.importorskip("torch")

README = Path(__file__).resolve().parents[3] / "README.md"
MARK = "<!-- fuse-example: tests/frontend/torch/test_torch_readme.py runs this block -->"


def _block() -> tuple[int, str]:
    text = README.read_text()
    start = text.index(MARK)
    match = re.compile(r"```python\n(.*?)```", re.S).search(text, start)
    assert match is not None, "the marked README block is gone"
    return text.count("\n", 0, match.start(1)) + 1, match.group(1)


@pytest.fixture(autouse=True)
def _quiet():
    yield from quiet_torch_trace()


@pytest.mark.slow  # compiles the MLP's cpu kernels (Numba) on a cold cache
def test_the_readme_pytorch_example_runs(tmp_path, monkeypatch, capsys) -> None:
    import fusec.torch as fusec_torch

    line, body = _block()
    monkeypatch.chdir(tmp_path)  # it saves model.pt2 in the working folder
    fusec_torch.reset_stats()
    torch._dynamo.reset()
    code = compile("\n" * (line - 1) + body, str(README), "exec")
    namespace: dict = {}
    exec(code, namespace)
    assert (tmp_path / "model.pt2").is_file()
    assert "'partitions': 1" in capsys.readouterr().out
    want = namespace["model"](torch.randn(2, 64)).shape
    assert namespace["y"].shape == (8, *want[1:])
