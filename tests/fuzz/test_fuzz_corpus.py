"""The fuzzers' corpora and every crash they found, run through their checks (no atheris).

``fuzz/targets.py`` says what each check asserts; ``fuzz/README.md`` how to
fuzz. A file in ``fuzz/crashes/TARGET/`` is an input that once crashed fusec
(a traceback, a hang, unbounded memory): it must now pass.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[2] / "fuzz"))

import targets  # noqa: E402

CASES = [
    pytest.param(name, path, id=f"{name}-{kind}-{path.name}")
    for name in targets.CHECKS
    for kind, files in (("corpus", targets.corpus_files), ("crash", targets.crash_files))
    for path in files(name)
]


def test_every_target_has_a_corpus():
    for name in targets.CHECKS:
        assert targets.corpus_files(name), f"fuzz/corpus/{name} is empty: run fuzz/seed.py"


#: Seconds one input may take (the fuzzers' -timeout): longer is a hang.
DEADLINE = 20

CHILD = """
import sys
sys.path.insert(0, sys.argv[1])
import targets
targets.quiet()
targets.CHECKS[sys.argv[2]](open(sys.argv[3], "rb").read())
"""


@pytest.mark.parametrize(("name", "path"), CASES)
def test_input_is_accepted_or_refused_with_a_located_error(name, path, monkeypatch):
    monkeypatch.setenv("FUSEC_MEMORY_LIMIT", "2G")
    if path.parent.parent.name == "corpus":
        targets.CHECKS[name](path.read_bytes())
        return
    # a past crash may be a hang inside C code (a regex): a process with a time limit
    try:
        done = subprocess.run(
            [sys.executable, "-c", CHILD, str(targets.ROOT), name, str(path)],
            capture_output=True,
            text=True,
            timeout=DEADLINE + 10,  # + the interpreter's start
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"{path.name}: still running after {DEADLINE} s: a hang")
    assert done.returncode == 0, done.stderr[-3000:]


# ------------------------------------------- structure-aware ONNX mutations (bounded)

#: Mutants per ONNX corpus model in CI (the fuzzer makes millions): fixed seeds, so a
#: failure reappears as it was.
MUTANTS = 16


@pytest.mark.parametrize("path", targets.corpus_files("onnx"), ids=lambda p: p.name)
def test_mutated_onnx_models_are_imported_or_refused_with_a_located_error(path, monkeypatch):
    import onnx

    monkeypatch.setenv("FUSEC_MEMORY_LIMIT", "2G")
    data = path.read_bytes()
    changed = 0
    for seed in range(MUTANTS):
        mutant = targets.mutate_onnx(data, seed)
        assert mutant is not None, "a readable model stays readable"
        onnx.ModelProto.FromString(mutant)
        changed += mutant != data
        targets.check_onnx(mutant)
    assert changed >= MUTANTS // 2, "the mutator changed too few models"
    assert targets.mutate_onnx(b"\xff not a protobuf", 0) is None
