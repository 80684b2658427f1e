"""README.md says what is true: every example command runs, and the op table lists the dialect.

Every command line of the README's fenced ``sh``/``bash`` blocks (``a && b`` chains
split) and every ``python`` block is collected when the tests are, so a command
added to the README is run without anyone editing this file. Each runs from a
scratch folder holding the repository's ``examples/``, ``tools/``, ``fuzz/`` and
``benchmarks/`` (so the README's relative paths work, and files it writes land
there) with the kernel cache in a scratch folder too:

* ``fusec``/``fusec-opt`` lines run in this process through their console-script
  entry points (``[project.scripts]`` in pyproject.toml), with ``--target cpu``
  added to a subcommand that takes a target when the line names none (the cpu
  target, also on a GPU machine); the exit status must be 0;
* ``python SCRIPT ...`` lines run as a subprocess of this interpreter;
* ``python`` blocks run with ``exec``; a name a block uses without defining it
  (a fragment that continues an earlier one) must be one of ``stand_in_names()``.

A file a command reads that the README does not provide gets a small real stand-in
(``STAND_IN_FILES``: ``graph.mlir`` an example graph, ``model.onnx`` a tiny ONNX
model, ``in.npz`` random inputs for ``graph.mlir``). Commands that cannot run here
are in ``NOT_RUN`` with the reason, matched by a regular expression; an entry that
matches no README command fails ``test_not_run_entries_are_used``, so the list
does not outlive its commands. ``SLOW`` marks the costly ones ``slow``.

The op table (section "The `ai` dialect") is checked against the dialect's registry
at test time: every registered ``ai`` op has a row, every row names registered ops,
and every attribute of an op is named in its row.
"""

from __future__ import annotations

import ast
import builtins
import importlib
import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from unittest import mock

import numpy as np
import pytest
from numerics import assert_close

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
#: Folders of the repository the README's commands name by relative path.
LINKED = ("examples", "tools", "fuzz", "benchmarks")
#: The python block ``tests/frontend/tracer/test_tracer_readme.py`` runs (and checks numerically).
RUN_ELSEWHERE_MARK = "<!-- fuse-example:"

#: Commands not run here, by regular expression over the command as written, and why.
NOT_RUN: list[tuple[str, str]] = [
    (r"-m venv\b", "creates a virtualenv: this test runs in the one already installed"),
    (r"\bpip install\b", "installs fusec: the installation under test is already there"),
    (r"(^|\s)(\S*/)?python3? -m pytest\b", "the test suite itself (CI runs it as .ci/run)"),
    (r"(^|\s)pytest\b.*-m fuzz", "the long hypothesis run of the test suite (10x examples)"),
    (
        r"tools/differential_gpu_run\.py .*--target cuda",
        "the cuda differential run: needs an NVIDIA GPU (the lead's device runs)",
    ),
    (
        r"tools/differential_gpu_run\.py .*--target cpu",
        "a 300 s run; a shorter one checks no graph (the workers stop 2 x 15 s before the "
        "wall limit); tests/differential checks the same property on a bounded sample",
    ),
    (
        r"fuzz/fuzz\.py",
        "a 900 s atheris run (the fuzz extra); tests/fuzz runs the corpora and past crashes",
    ),
]

#: Commands marked ``slow``, by regular expression, and why.
SLOW: list[tuple[str, str]] = [
    (r"^fusec conformance\b", "ONNX's node tests of an operator: a kernel compile per case"),
    (
        r"compiled = fusec\.compile\(.*conv",
        "compiles and runs a conv kernel (Winograd and its helpers): 47-70 s of Numba "
        "compiling with a cold kernel cache on the loaded 2-core machine",
    ),
    (
        r"compiled = fusec\.compile\(model\)  # a DynamicCompiledModule",
        "dynamic shapes: a softmax kernel JIT-compiled for each of two shapes, 38 s with a "
        "cold kernel cache on the loaded 2-core machine",
    ),
]

#: Files the README's commands read but do not provide: name -> how the stand-in is made.
STAND_IN_FILES: dict[str, Callable[[Path], None]] = {}


def stand_in(name: str) -> Callable[[Callable[[Path], None]], Callable[[Path], None]]:
    def register(make: Callable[[Path], None]) -> Callable[[Path], None]:
        STAND_IN_FILES[name] = make
        return make

    return register


@stand_in("graph.mlir")
def _graph(path: Path) -> None:
    shutil.copyfile(ROOT / "examples" / "elementwise_chain.mlir", path)


@stand_in("in.npz")
def _graph_inputs(path: Path) -> None:
    """Random inputs for ``graph.mlir``, named after its arguments."""
    import fusec
    from fusec.ir.module import entry_function
    from fusec.tools.runner import argument_names, random_inputs

    fn = entry_function(fusec.parse(ROOT / "examples" / "elementwise_chain.mlir"), None)
    np.savez(path, **dict(zip(argument_names(fn), random_inputs(fn, seed=5), strict=True)))


#: The stand-in ONNX model: y = relu(x * w), x (1, 3, 224, 224), w a (3, 1, 1) initializer.
ONNX_INPUT_SHAPE = (1, 3, 224, 224)


@stand_in("model.onnx")
def _onnx_model(path: Path) -> None:
    onnx = pytest.importorskip("onnx", reason="the onnx extra")
    from onnx import TensorProto, helper, numpy_helper

    w = np.random.default_rng(11).standard_normal((3, 1, 1)).astype(np.float32)
    graph = helper.make_graph(
        [
            helper.make_node("Mul", ["x", "w"], ["t"], "scale"),
            helper.make_node("Relu", ["t"], ["y"]),
        ],
        "readme_stand_in",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ONNX_INPUT_SHAPE)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ONNX_INPUT_SHAPE)],
        [numpy_helper.from_array(w, "w")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    onnx.save(model, path)


def stand_in_names() -> dict[str, object]:
    """Names a python block may use without defining them (fragments of a longer
    session): the modules it would have imported and the input ``x`` of the ONNX
    stand-in."""
    import fusec

    x = np.random.default_rng(13).standard_normal(ONNX_INPUT_SHAPE).astype(np.float32)
    return {"np": np, "fusec": fusec, "x": x}


# ---------------------------------------------------------------- the README's examples


@dataclass(frozen=True)
class Example:
    """One command line (language "sh") or one block (language "python") of the README."""

    line: int
    language: str
    text: str
    #: The command's words (quotes removed), for "sh"
    words: tuple[str, ...] = ()

    @property
    def id(self) -> str:
        first = self.text.strip().splitlines()[0]
        return f"README.md:{self.line}: {first[:70]}"


def fenced_blocks(text: str) -> Iterator[tuple[int, str, str, str]]:
    """(line of the block's first body line, language, body, the line before the fence)."""
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        fence = re.match(r"^```(\w*)\s*$", lines[i])
        if not fence:
            i += 1
            continue
        end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
        before = lines[i - 1] if i else ""
        yield i + 2, fence.group(1), "\n".join(lines[i + 1 : end]), before
        i = end + 1


def readme_examples(text: str | None = None) -> list[Example]:
    text = README.read_text() if text is None else text
    examples: list[Example] = []
    for first, language, body, before in fenced_blocks(text):
        if language in ("sh", "bash"):
            for offset, line in enumerate(body.splitlines()):
                argv = shlex.split(line, comments=True)
                for words in _split_chain(argv):
                    examples.append(Example(first + offset, "sh", " ".join(words), tuple(words)))
        elif language == "python" and not before.startswith(RUN_ELSEWHERE_MARK):
            examples.append(Example(first, "python", body))
    return examples


def _split_chain(argv: list[str]) -> list[list[str]]:
    """``a && b`` -> [a, b]; an empty line -> []."""
    commands: list[list[str]] = [[]]
    for word in argv:
        if word == "&&":
            commands.append([])
        else:
            commands[-1].append(word)
    return [c for c in commands if c]


def not_run_reason(example: Example) -> str | None:
    return next((why for pattern, why in NOT_RUN if re.search(pattern, example.text)), None)


def _params() -> list:
    params = []
    for example in readme_examples():
        marks = []
        if (why := not_run_reason(example)) is not None:
            marks.append(pytest.mark.skip(reason=f"not run: {why}"))
        if any(re.search(pattern, example.text) for pattern, _ in SLOW):
            marks.append(pytest.mark.slow)
        params.append(pytest.param(example, id=example.id, marks=marks))
    return params


# ------------------------------------------------------------------- running them


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    """A scratch folder with the repository's folders the README names, the stand-ins
    for the files it does not provide, and a kernel cache folder of its own."""
    work = tmp_path_factory.mktemp("readme")
    for name in LINKED:
        (work / name).symlink_to(ROOT / name, target_is_directory=True)
    return work


@pytest.fixture
def in_workdir(workdir, monkeypatch, tmp_path_factory) -> Path:
    monkeypatch.chdir(workdir)
    cache = tmp_path_factory.getbasetemp() / "readme-cache"
    monkeypatch.setenv("FUSEC_CACHE_DIR", str(cache))
    return workdir


def _needed_files(words: list[str], workdir: Path) -> None:
    for word in words:
        value = word.split("=", 1)[-1]
        if value in STAND_IN_FILES and not (workdir / value).exists():
            STAND_IN_FILES[value](workdir / value)


def _entry_points() -> dict[str, str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return dict(project["scripts"])


def _console_script(name: str) -> Callable[[list[str]], int] | None:
    target = _entry_points().get(name)
    if target is None:
        return None
    module, _, function = target.partition(":")
    return getattr(importlib.import_module(module), function)


def _on_cpu(program: str, args: list[str]) -> list[str]:
    """``--target cpu`` for a ``fusec`` subcommand that takes a target and names none."""
    if program != "fusec" or any(a == "--target" or a.startswith("--target=") for a in args):
        return args
    from fusec.cli import build_parser

    try:
        parsed = build_parser().parse_args(args)
    except SystemExit:  # a bad command: let the run report it
        return args
    return [*args, "--target", "cpu"] if getattr(parsed, "target", None) == "auto" else args


def _run_console_script(main: Callable[[list[str]], int], args: list[str]) -> int:
    with mock.patch.dict(os.environ):  # what a command sets for itself stays its own
        try:
            status = main(args)
        except SystemExit as exit_:  # argparse's usage errors
            status = exit_.code if isinstance(exit_.code, int) else 1
    return int(status or 0)


def _run_shell(example: Example, workdir: Path, capfd) -> None:
    words = list(example.words)
    env = {}
    while words and re.fullmatch(r"[A-Z_][A-Z0-9_]*=\S*", words[0]):
        key, _, value = words.pop(0).partition("=")
        env[key] = value
    # optional parts of a synopsis (`fusec conformance [--op Conv] [-v]`): given
    words = [w.removeprefix("[").removesuffix("]") for w in words]
    program, args = words[0].rsplit("/", 1)[-1], words[1:]
    _needed_files(args, workdir)
    main = _console_script(program)
    if main is not None:
        args = _on_cpu(program, args)
        with mock.patch.dict(os.environ, env):
            status = _run_console_script(main, args)
        out, err = capfd.readouterr()
    elif program in ("python", "python3") and args and not args[0].startswith("-"):
        done = subprocess.run(
            [sys.executable, *args],
            cwd=workdir,
            env={**os.environ, **env},
            capture_output=True,
            text=True,
            timeout=300,
        )
        status, out, err = done.returncode, done.stdout, done.stderr
    else:
        pytest.fail(
            f"{example.id}: no way to run {program!r} here: run it in test_readme.py or "
            "add it to NOT_RUN with the reason"
        )
    assert status == 0, (
        f"{example.id}: exit {status}\n--- stdout\n{out[-3000:]}\n--- stderr\n{err[-3000:]}"
    )


def _unbound_names(source: str) -> set[str]:
    """Names the block reads but neither assigns nor imports (nor are builtins)."""
    tree = ast.parse(source)
    bound: set[str] = set()
    read: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (read if isinstance(node.ctx, ast.Load) else bound).add(node.id)
        elif isinstance(node, ast.alias):
            bound.add((node.asname or node.name).split(".")[0])
        elif isinstance(node, ast.FunctionDef | ast.ClassDef):
            bound.add(node.name)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
    return read - bound - set(dir(builtins))


def _run_python(example: Example, workdir: Path) -> None:
    unbound = _unbound_names(example.text)
    stand_ins = stand_in_names()
    unknown = unbound - set(stand_ins)
    assert not unknown, f"{example.id}: uses {sorted(unknown)} without defining them"
    for name in re.findall(r"""["']([\w.-]+\.(?:onnx|mlir|npz))["']""", example.text):
        _needed_files([name], workdir)
    scope = {k: v for k, v in stand_ins.items() if k in unbound}
    code = compile("\n" * (example.line - 1) + example.text, str(README), "exec")
    exec(code, scope)
    _check_result(example, scope)


def _check_result(example: Example, scope: dict) -> None:
    """The block's result against the reference when it computes both (``y``, ``y_ref``)
    or compiles a module it can be compared through (``module`` called on ``x``)."""
    import fusec

    if "y" in scope and "y_ref" in scope:
        assert_close(scope["y"], scope["y_ref"], what=example.id)
    elif "y" in scope and "module" in scope and "x" in scope:
        expected = fusec.reference(scope["module"])(scope["x"])
        assert_close(scope["y"], expected, what=example.id)


@pytest.mark.parametrize("example", _params())
def test_readme_example_runs(example: Example, in_workdir: Path, capfd) -> None:
    if example.language == "sh":
        _run_shell(example, in_workdir, capfd)
    else:
        _run_python(example, in_workdir)


def test_readme_has_examples_to_run() -> None:
    examples = readme_examples()
    assert sum(e.language == "sh" for e in examples) >= 10
    assert any(e.language == "python" for e in examples)
    runnable = [e for e in examples if not_run_reason(e) is None]
    assert any(e.text.startswith("fusec compile") for e in runnable)


def test_not_run_entries_are_used() -> None:
    examples = readme_examples()
    for pattern, why in NOT_RUN + SLOW:
        assert any(re.search(pattern, e.text) for e in examples), (
            f"no README command matches {pattern!r} ({why}): remove the entry"
        )


def test_commands_are_parsed_as_written() -> None:
    text = "\n".join(
        [
            "```sh",
            "a --x 1 && .venv/bin/fusec compile g.mlir   # comment",
            "",
            "fusec conformance [--op Conv] [-v]",
            "```",
            "<!-- fuse-example: elsewhere -->",
            "```python",
            "print(1)",
            "```",
            "```python",
            "y = f(x)",
            "```",
        ]
    )
    examples = readme_examples(text)
    assert [(e.line, e.language, e.text) for e in examples] == [
        (2, "sh", "a --x 1"),
        (2, "sh", ".venv/bin/fusec compile g.mlir"),
        (4, "sh", "fusec conformance [--op Conv] [-v]"),
        (11, "python", "y = f(x)"),
    ]
    assert _unbound_names("import numpy as np\ny = np.f(x)\ndef g(a):\n    return a") == {"x"}


# ----------------------------------------------------------------------- the op table


def op_table() -> list[tuple[list[str], str]]:
    """The rows of the README's op table: (the ops of the first cell, the syntax cell)."""
    text = README.read_text()
    section = text.split("## The `ai` dialect", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if not line.startswith("| `") or len(cells) < 2:
            continue
        rows.append((re.findall(r"`([\w.]+)`", cells[0]), "|".join(cells[1:])))
    return rows


def _registered_ops() -> dict[str, type]:
    from fusec.dialect import ops as ai

    return {op.name: op for op in (*ai.TENSOR_OPS, ai.FusedOp)}


def test_op_table_lists_every_registered_op() -> None:
    listed = {name for names, _ in op_table() for name in names}
    missing = sorted(set(_registered_ops()) - listed)
    assert not missing, f"README.md's op table has no row for {missing}"


def test_op_table_names_only_registered_ops() -> None:
    registered = set(_registered_ops())
    for names, _ in op_table():
        for name in names:
            assert name in registered or name == "arith.constant", f"{name}: not an ai op"


def test_op_table_names_every_attribute_of_its_ops() -> None:
    """Each op's attributes (IRDL properties) appear in its row, and each ``name =`` the
    row writes is an attribute of one of the row's ops."""
    registered = _registered_ops()
    for names, syntax in op_table():
        ops = [registered[n] for n in names if n in registered and n != "ai.fused"]
        if not ops:
            continue
        declared = {p for op in ops for p in op.get_irdl_definition().properties}
        for op in ops:
            for prop in op.get_irdl_definition().properties:
                assert re.search(rf"\b{prop}\b", syntax), f"{op.name}: its row omits {prop}"
        written = set(re.findall(r"\b(\w+) = ", syntax))
        assert written <= declared, f"{names}: the row writes {sorted(written - declared)}"


# ------------------------------------------------------- what the README says in prose


def test_a_pipeline_without_fuse_is_a_located_error_on_cpu_and_prints_on_reference(capfd):
    """ "A `--pipeline` of your own must leave every op in an `ai.fused` group ...:
    an op outside every group is an error at that op. ... `fusec compile --target
    reference` ... prints the IR after any pipeline, such as `infer-shapes,canonicalize`"."""
    from fusec.cli import main

    graph = str(ROOT / "examples" / "conv_bias_relu.mlir")
    args = ["compile", graph, "--pipeline", "infer-shapes,canonicalize"]
    assert main([*args, "--target", "cpu"]) == 1
    err = capfd.readouterr().err
    assert f"{graph}:2:3: error: 'ai.conv2d' op is outside any ai.fused group" in err
    assert main([*args, "--target", "reference"]) == 0
    out = capfd.readouterr().out
    assert "ai.conv2d" in out and "ai.fused" not in out


def test_the_remarks_the_readme_quotes_are_printed(capfd):
    """Each ``...:LINE:COL: remark: ...`` the README quotes is printed by its commands:
    ``--remarks`` of mlp_block on cpu, of ln_matmul_softmax_large by the rules."""
    from fusec.cli import main

    text = " ".join(README.read_text().split())
    quoted = re.findall(r"`\.\.\.(:\d+:\d+: remark: [^`]*?)(?:; \.\.\.)?`", text)
    assert len(quoted) >= 2, "the README quotes no remarks any more: update this test"
    printed = ""
    for name, target in (("mlp_block", "cpu"), ("ln_matmul_softmax_large", "reference")):
        graph = str(ROOT / "examples" / f"{name}.mlir")
        assert main(["compile", graph, "--remarks", "--target", target]) == 0
        printed += " ".join(capfd.readouterr().err.split()) + " "
    for remark in quoted:
        assert remark in printed, f"README quotes a remark no command prints: {remark}"


def test_the_softmax_tile_limits_the_readme_states():
    """ "256 in `default.rules` (a GPU tile: the reference and cuda targets) but 16384 on
    cpu"."""
    from fusec.passes.fusion.rules import load_rules
    from fusec.target import get_target

    text = " ".join(README.read_text().split())
    default = load_rules().param("softmax_tile_limit")
    cpu = get_target("cpu").rule_params["softmax_tile_limit"]
    assert f"tile limit, {default} in `default.rules`" in text
    assert f"but {cpu} on cpu" in text
    for name in ("reference", "cuda"):
        assert "softmax_tile_limit" not in get_target(name).rule_params


#: The numbers the README writes as words.
NUMBER_WORDS = {"five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9, "ten": 10}


def test_the_cpu_conv_methods_the_readme_counts_are_conv_methods():
    """ "A conv takes one of seven methods (`fusec/targets/cpu/conv/choice.py`, `conv_method`
    ...)": as many as the names ``conv_method`` returns, so that a method added there
    without its line in the README fails here (issue #26: the README named one
    method of five)."""
    import inspect
    import textwrap

    from fusec.targets.cpu.conv import choice

    tree = ast.parse(textwrap.dedent(inspect.getsource(choice.conv_method)))
    methods = {
        node.value
        for ret in ast.walk(tree)
        if isinstance(ret, ast.Return)
        for node in ast.walk(ret)
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
    }
    text = " ".join(README.read_text().split())
    match = re.search(
        r"A conv takes one of (\w+) methods \(`fusec/targets/cpu/conv/choice\.py`", text
    )
    assert match is not None, "the README no longer counts the cpu conv methods: update this"
    assert NUMBER_WORDS.get(match[1]) == len(methods), (
        f"README.md says {match[1]} conv methods; conv_method returns {sorted(methods)}"
    )
