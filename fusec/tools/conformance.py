"""ONNX's own backend node tests, run through fusec: the conformance suite.

The ``onnx`` package ships one small model per operator feature with inputs
and expected outputs (``onnx.backend.test``). For every operator the importer
supports, each of its cases goes import -> ``fusec.compile`` (the default
pipeline) -> execution on the chosen target, and is compared with the expected
outputs the way ``onnx.backend.test.runner`` does: same shape and dtype, then
``assert_allclose`` with the case's tolerances (rtol 1e-3, atol 1e-7; bf16
gets two ulps of rtol). NaN matches only an expected NaN at the same place.

Integer and boolean inputs of a case (axes, shapes, indices, masks) that
have the same value in every data set are baked into the model as
initializers first: fusec compiles float data paths and needs such values to
be constants, which is what they are in a real model.

A case is skipped only when the importer says fusec lacks the feature it
needs (``UnsupportedOnnx``: an attribute value, element type or shape). The
``_expanded`` variants of an operator's cases (its ONNX function body, written
with other operators) are run too: their shape arithmetic is evaluated at
import (constant folding); they are counted as "n/a" when what remains uses an
operator fusec does not compile: they test that operator, not this one.
Anything else that goes wrong is a failure.

A 16-bit float output is compared with an expected output that ONNX's reference computed
with its own rounding (after every op, in float16), while fusec may compute a fused group
in float32 and round once, which puts some elements one 16-bit ulp to the other side of
the expected value. When only the values of such an output differ, the case is judged
against the truth instead (``float64_judged``): the same graph evaluated by
``onnx.reference`` with its 16-bit inputs and outputs widened to float64. It passes when
fusec's output matches the truth at the case's tolerances and is no farther from it than
the expected output, both in its largest error in ulps of the output type and in its
relative L2 error; the result says so (and the ``--all`` table lists such cases). A wrong
result fails this too: it is farther from the truth than ONNX's rounding is.

``--all`` (``run_conformance(all_cases=True)``) measures fusec against the whole
suite instead: every case with a float tensor among its inputs or outputs,
whatever its operator, each counted as

* ``pass``: it ran and every output matched, or (``float64_judged``) a 16-bit output
  missed an expected output that is itself rounded differently, and is at least as
  close as it to a float64 evaluation of the same graph;
* ``refused``: fusec said no with a located diagnostic (an unsupported
  operator, attribute, element type or shape, or any other ``FusecError``);
* ``wrong``: it ran and an output differs (shape, dtype or values): the
  number that must stay 0;
* ``error``: an unexpected exception, a fusec bug.

per operator and in total.
"""

from __future__ import annotations

import contextlib
import functools
import re
import sys
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

from fusec.errors import FusecError
from fusec.frontend.onnx_import import UnsupportedOnnx, import_model, supported_operators

STATUSES = ("passed", "failed", "skipped", "n/a")
#: What ``--all`` counts: every case is exactly one of these (see the module's docstring).
VERDICTS = ("pass", "refused", "wrong", "error")
_EXPANDED = re.compile(r"_expanded(_ver\d+)?$")


@dataclass(frozen=True)
class Case:
    """One ONNX node test: the model and its (inputs, expected outputs) data sets."""

    name: str
    operator: str
    model: onnx.ModelProto
    data_sets: Sequence[tuple[Sequence[np.ndarray], Sequence[np.ndarray]]]
    rtol: float = 1e-3
    atol: float = 1e-7

    @property
    def expanded(self) -> bool:
        return _EXPANDED.search(self.name) is not None


@dataclass(frozen=True)
class CaseResult:
    """``status`` is one of STATUSES; ``feature`` says what a skipped case lacks;
    ``wrong`` marks a failure that is a wrong result, ``internal`` one that is an
    unexpected exception (a fusec bug); any other failure is a located refusal."""

    name: str
    operator: str
    status: str
    detail: str = ""
    feature: str = ""
    wrong: bool = False
    internal: bool = False

    @property
    def verdict(self) -> str:
        """One of VERDICTS."""
        if self.status == "passed":
            return "pass"
        if self.wrong:
            return "wrong"
        if self.internal:
            return "error"
        return "refused"


@dataclass
class OperatorReport:
    """The results of one operator's cases."""

    operator: str
    results: list[CaseResult] = field(default_factory=list)

    def count(self, status: str) -> int:
        return sum(r.status == status for r in self.results)

    def count_verdict(self, verdict: str) -> int:
        return sum(r.verdict == verdict for r in self.results)

    @property
    def run(self) -> int:
        return self.count("passed") + self.count("failed")


@dataclass
class ConformanceReport:
    target: str
    operators: dict[str, OperatorReport]

    @property
    def results(self) -> list[CaseResult]:
        return [r for op in self.operators.values() for r in op.results]

    def count(self, status: str) -> int:
        return sum(r.status == status for r in self.results)

    def count_verdict(self, verdict: str) -> int:
        return sum(r.verdict == verdict for r in self.results)

    def format_measure(self, verbose: bool = False) -> str:
        """The ``--all`` table: pass / refused / wrong / error per operator and in total,
        then every wrong and error case (and, if verbose, every refusal with its reason)."""
        lines = [
            f"ONNX {onnx.__version__} backend node tests with float data, "
            f"on target '{self.target}'",
            _row("operator", "cases", *VERDICTS),
        ]
        for name, op in sorted(self.operators.items()):
            if op.results:
                lines.append(_row(name, len(op.results), *map(op.count_verdict, VERDICTS)))
        every = self.results
        counts = [self.count_verdict(v) for v in VERDICTS]
        lines.append(_row("total", len(every), *counts))
        share = 100.0 * counts[0] / len(every) if every else 0.0
        lines.append(f"{counts[0]} of {len(every)} cases pass ({share:.1f}%), {counts[2]} wrong")
        judged = [r for r in every if r.feature == "float64_judged"]
        if judged:
            lines.append(
                "passed against float64 (the expected 16-bit output is rounded differently):"
            )
            lines += [f"  {r.operator}: {r.name}: {r.detail}" for r in judged]
        for verdict in ("wrong", "error", "refused") if verbose else ("wrong", "error"):
            chosen = [r for r in every if r.verdict == verdict]
            if chosen:
                lines.append(f"{verdict} cases:")
                lines += [f"  {r.operator}: {r.name}: {r.detail}" for r in chosen]
        return "\n".join(lines) + "\n"

    def format(self, verbose: bool = False) -> str:
        """The per-operator table, then every failure (and, if verbose, every skip)."""
        lines = [
            f"ONNX {onnx.__version__} backend node tests on target '{self.target}'",
            _row("operator", "cases", "run", *STATUSES),
        ]
        for name, op in sorted(self.operators.items()):
            counts = [op.count(s) for s in STATUSES]
            lines.append(_row(name, len(op.results), op.run, *counts))
        every = self.results
        counts = [self.count(s) for s in STATUSES]
        lines.append(_row("total", len(every), counts[0] + counts[1], *counts))
        lines.append("(n/a: an _expanded variant written with operators fusec does not compile)")
        for status in ("failed", "skipped", "n/a") if verbose else ("failed",):
            chosen = [r for r in every if r.status == status]
            if chosen:
                lines.append(f"{status} cases:")
                lines += [f"  {r.operator}: {r.name}: {r.detail}" for r in chosen]
        return "\n".join(lines) + "\n"


def _row(name: str, *cells: object) -> str:
    return f"{name:<20}" + "".join(f" {cell!s:>7}" for cell in cells)


# ------------------------------------------------------------------ the cases


def node_cases(operators: Iterable[str] | None = None) -> list[Case]:
    """The ONNX node test cases of ``operators`` (default: every supported one)."""
    supported = supported_operators()
    wanted = set(supported if operators is None else operators)
    unknown = wanted - set(supported)
    if unknown:
        raise FusecError(
            f"not a supported operator: {', '.join(sorted(unknown))} "
            f"(supported: {', '.join(supported)})"
        )
    loaded = _loaded_cases()
    operator_of = {name: _single_operator(model) for name, model, _, _ in loaded}
    cases = []
    for name, model, data_sets, tolerances in loaded:
        operator = (
            operator_of.get(_EXPANDED.sub("", name))
            if _EXPANDED.search(name)
            else (operator_of[name])
        )
        if operator in wanted:
            cases.append(Case(name, operator, model, data_sets, *tolerances))
    return cases


def all_node_cases(operators: Iterable[str] | None = None) -> list[Case]:
    """Every case of the node suite with a float tensor (f32, f16, bf16) among its
    inputs or outputs, whether fusec supports its operator or not; only those of
    ``operators`` when given."""
    wanted = None if operators is None else set(operators)
    loaded = _loaded_cases()
    operator_of = {name: _main_operator(model) for name, model, _, _ in loaded}
    cases = []
    for name, model, data_sets, tolerances in loaded:
        if not _has_float_data(model):
            continue
        operator = operator_of.get(_EXPANDED.sub("", name)) or operator_of[name]
        if wanted is None or operator in wanted:
            cases.append(Case(name, operator, model, data_sets, *tolerances))
    if wanted is not None and not cases:
        raise FusecError(
            f"no float case of the node suite has operator {', '.join(sorted(wanted))}"
        )
    return cases


def _main_operator(model: onnx.ModelProto) -> str:
    """The operator a case tests: its only node's, else its first non-Constant node's."""
    nodes = [n for n in model.graph.node if n.op_type != "Constant"] or list(model.graph.node)
    if not nodes:
        return "(no node)"
    node = nodes[0]
    return node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}.{node.op_type}"


def _has_float_data(model: onnx.ModelProto) -> bool:
    values = [*model.graph.input, *model.graph.output]
    return any(_holds_float(v.type) for v in values)


def _holds_float(value_type: onnx.TypeProto) -> bool:
    """True for a float tensor, or a sequence or optional of one."""
    kind = value_type.WhichOneof("value")
    if kind == "tensor_type":
        return value_type.tensor_type.elem_type in _FLOATS
    if kind == "sequence_type":
        return _holds_float(value_type.sequence_type.elem_type)
    if kind == "optional_type":
        return _holds_float(value_type.optional_type.elem_type)
    return False


@functools.cache
def _loaded_cases() -> tuple[tuple[str, onnx.ModelProto, list[Any], tuple[float, float]], ...]:
    """Every node case, loaded once per process (reading them takes ~15 s of CPU)."""
    return tuple(_load(case) for case in _onnx_test_cases())


def _onnx_test_cases() -> list[Any]:
    from onnx.backend.test.loader import load_model_tests

    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")  # the case generators' own numpy warnings
        return load_model_tests(kind="node")


def _load(case: Any) -> tuple[str, onnx.ModelProto, list[Any], tuple[float, float]]:
    """(name, model, data sets, (rtol, atol)): in memory (onnx >= 1.20) or from disk."""
    tolerances = (case.rtol, case.atol)
    if case.model is not None:
        return case.name, case.model, list(case.data_sets or []), tolerances
    directory = Path(case.model_dir)
    model = onnx.load(str(directory / "model.onnx"))
    data_sets = []
    for data_dir in sorted(directory.glob("test_data_set_*")):
        inputs = [_read_tensor(p) for p in sorted(data_dir.glob("input_*.pb"), key=_index)]
        outputs = [_read_tensor(p) for p in sorted(data_dir.glob("output_*.pb"), key=_index)]
        data_sets.append((inputs, outputs))
    return case.name, model, data_sets, tolerances


def _index(path: Path) -> int:
    return int(path.stem.rsplit("_", 1)[1])


def _read_tensor(path: Path) -> onnx.TensorProto:
    tensor = onnx.TensorProto()
    tensor.ParseFromString(path.read_bytes())
    return tensor


def _single_operator(model: onnx.ModelProto) -> str | None:
    nodes = model.graph.node
    if len(nodes) == 1 and nodes[0].domain in ("", "ai.onnx"):
        return nodes[0].op_type
    return None


# ------------------------------------------------------------------ running


#: Called after each case with (cases done, cases in all, the case's result).
Progress = Callable[[int, int, CaseResult], None]


def run_conformance(
    operators: Iterable[str] | None = None,
    *,
    target: str = "auto",
    all_cases: bool = False,
    progress: Progress | None = None,
) -> ConformanceReport:
    """Run the node tests of ``operators`` (default: all supported) on ``target``; with
    ``all_cases``, every float case of the suite (of ``operators``, when given)."""
    from fusec.api import resolve_target

    concrete = resolve_target(target)
    if all_cases:
        cases = all_node_cases(operators)
        chosen = sorted({case.operator for case in cases})
    else:
        chosen = sorted(supported_operators() if operators is None else set(operators))
        cases = node_cases(chosen)
    report = ConformanceReport(concrete, {op: OperatorReport(op) for op in chosen})
    for done, case in enumerate(cases, 1):
        outcome = run_case(case, target)
        report.operators[case.operator].results.append(outcome)
        if progress is not None:
            progress(done, len(cases), outcome)
    return report


@contextlib.contextmanager
def shown_progress(enabled: bool = True) -> Iterator[Progress]:
    """A Progress showing the cases done on stderr with the running pass / refused /
    wrong / error counts (a bar on a terminal, plain lines otherwise: ``Meter``)."""
    from fusec.tools.progress import Meter

    counts = dict.fromkeys(VERDICTS, 0)
    meter: Meter | None = None

    def report(done: int, total: int, outcome: CaseResult) -> None:
        nonlocal meter
        if meter is None:  # the number of cases is known once they are loaded
            meter = Meter("conformance cases", total, enabled=enabled)
        counts[outcome.verdict] += 1
        meter.advance(", ".join(f"{v} {n}" for v, n in counts.items()))

    try:
        yield report
    finally:
        if meter is not None:
            meter.close()


def run_case(case: Case, target: str = "auto") -> CaseResult:
    """Import, compile and run one case; compare every output of every data set."""
    from fusec.api import compile as fusec_compile

    def result(status: str, detail: str = "", feature: str = "", **kind: bool) -> CaseResult:
        return CaseResult(case.name, case.operator, status, detail, feature, **kind)

    model, data_sets = bake_constant_inputs(case.model, case.data_sets)
    try:
        module = import_model(model)
    except UnsupportedOnnx as err:
        if case.expanded and err.feature == "operator":
            return result("n/a", f"the expanded form needs: {err.format()}", "operator")
        if err.feature == "operator":  # a node test whose node fusec does not import
            return result("failed", f"import: {err.format()}")
        return result("skipped", err.message, err.feature)
    except FusecError as err:
        return result("failed", f"import: {err.format()}")
    except Exception as err:  # a bug in the importer: report it, keep going
        return result(
            "failed", f"import: internal error: {type(err).__name__}: {err}", internal=True
        )
    judged = ""
    try:
        compiled = fusec_compile(module, target=target)
        for inputs, expected in data_sets:
            arrays = [_as_array(a) for a in inputs]
            with np.errstate(all="ignore"):
                got = compiled(*arrays)
            got = got if isinstance(got, tuple) else (got,)
            wanted = [_as_array(e) for e in expected]
            problem = compare_outputs(got, wanted, case.rtol, case.atol)
            if problem and _values_differ(got, wanted):
                verdict = float64_judgement(model, arrays, got, wanted, case.rtol, case.atol)
                judged, problem = (verdict, None) if verdict else (judged, problem)
            if problem:
                return result("failed", problem, wrong=True)
    except FusecError as err:
        return result("failed", err.format())
    except Exception as err:  # a bug in fusec: report it as a failure, keep going
        return result("failed", f"internal error: {type(err).__name__}: {err}", internal=True)
    return result("passed", judged, "float64_judged" if judged else "")


_FLOATS = (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16)


def bake_constant_inputs(
    model: onnx.ModelProto, data_sets: Sequence[tuple[Sequence[Any], Sequence[Any]]]
) -> tuple[onnx.ModelProto, list[tuple[list[Any], Sequence[Any]]]]:
    """The model with its non-float inputs that are equal in every data set turned into
    initializers, and the data sets without them; so are the float inputs that are an
    operator's parameters rather than data (``PARAMETER_INPUTS``: Resize's scales, Pad's
    constant_value), which are constants in real models, and the empty float inputs
    (CastLike's ``like``: no data, only a type)."""
    inputs = list(model.graph.input)
    parameters = _parameter_inputs(model)
    constant = []
    for index, info in enumerate(inputs):
        if info.type.WhichOneof("value") != "tensor_type" or not data_sets:
            continue  # sequences, maps, optionals stay inputs
        if any(index >= len(ins) or isinstance(ins[index], list | tuple) for ins, _ in data_sets):
            continue
        values = [_as_array(ins[index]) for ins, _ in data_sets]
        data = not all(v.size == 0 for v in values)
        if info.type.tensor_type.elem_type in _FLOATS and info.name not in parameters and data:
            continue
        if all(v.dtype == values[0].dtype and np.array_equal(v, values[0]) for v in values):
            constant.append((index, numpy_helper.from_array(values[0], info.name)))
    if not constant:
        return model, [(list(i), o) for i, o in data_sets]
    baked = onnx.ModelProto()
    baked.CopyFrom(model)
    drop = {index for index, _ in constant}
    del baked.graph.input[:]
    baked.graph.input.extend(info for k, info in enumerate(inputs) if k not in drop)
    baked.graph.initializer.extend(tensor for _, tensor in constant)
    sets = [([a for k, a in enumerate(ins) if k not in drop], outs) for ins, outs in data_sets]
    return baked, sets


#: (operator, formal input): float inputs that parameterise the operator (shapes,
#: scales, a padding value, OneHot's depth) rather than carry data.
PARAMETER_INPUTS = {
    ("Resize", "roi"), ("Resize", "scales"), ("Upsample", "scales"), ("Pad", "constant_value"),
    ("OneHot", "depth"), ("Dropout", "ratio"),
}  # fmt: skip


def _parameter_inputs(model: onnx.ModelProto) -> set[str]:
    """Names of the graph values that feed a ``PARAMETER_INPUTS`` input of a node."""
    found = set()
    for node in model.graph.node:
        try:
            schema = onnx.defs.get_schema(node.op_type, domain=node.domain)
        except onnx.defs.SchemaError:
            continue
        formal = [p.name for p in schema.inputs]
        for position, name in enumerate(node.input):
            role = formal[min(position, len(formal) - 1)] if formal else ""
            if name and (node.op_type, role) in PARAMETER_INPUTS:
                found.add(name)
    return found


def _as_array(value: Any) -> np.ndarray:
    """A fresh writable array (``to_array`` gives read-only views of the proto's bytes)."""
    if isinstance(value, onnx.TensorProto):
        value = numpy_helper.to_array(value)
    return np.array(value, copy=True)


def compare_outputs(
    got: Sequence[np.ndarray], expected: Sequence[np.ndarray], rtol: float, atol: float
) -> str | None:
    """None if ``got`` matches ``expected`` as ONNX's runner checks it, else what differs."""
    if len(got) != len(expected):
        return f"{len(got)} outputs, expected {len(expected)}"
    for index, (out, ref) in enumerate(zip(got, expected, strict=True)):
        out = np.asarray(out)
        if out.shape != ref.shape:
            return f"output {index} has shape {out.shape}, expected {ref.shape}"
        if out.dtype != ref.dtype:
            return f"output {index} has dtype {out.dtype}, expected {ref.dtype}"
        tol = max(rtol, 2.0**-6) if ref.dtype.name == "bfloat16" else rtol
        try:
            np.testing.assert_allclose(
                out.astype(np.float64), ref.astype(np.float64), rtol=tol, atol=atol
            )
        except AssertionError as err:
            summary = " ".join(str(err).split())[:300]
            return f"output {index} differs: {summary}"
    return None


_SIXTEEN_BITS = {"float16": 10, "bfloat16": 7}  # the explicit mantissa bits


def _values_differ(got: Sequence[np.ndarray], expected: Sequence[np.ndarray]) -> bool:
    """Whether the outputs have the expected count, shapes and dtypes, one of them a
    16-bit float (so only values differ, and float64 may judge them)."""
    return len(got) == len(expected) and all(
        np.asarray(g).shape == e.shape and np.asarray(g).dtype == e.dtype
        for g, e in zip(got, expected, strict=True)
    ) and any(e.dtype.name in _SIXTEEN_BITS for e in expected)  # fmt: skip


def float64_judgement(
    model: onnx.ModelProto,
    inputs: Sequence[np.ndarray],
    got: Sequence[np.ndarray],
    expected: Sequence[np.ndarray],
    rtol: float,
    atol: float,
) -> str:
    """Why ``got`` passes against a float64 evaluation of ``model`` although it misses the
    16-bit ``expected`` outputs (see the module's docstring), or "" when it does not: a
    graph that does not widen, an output farther from the truth than the expected one,
    or one that misses the truth at the tolerances."""
    truth = _float64_truth(model, inputs)
    if truth is None or len(truth) != len(got):
        return ""
    notes = []
    for index, (out, want, true) in enumerate(zip(got, expected, truth, strict=True)):
        out = np.asarray(out)
        if want.dtype.name not in _SIXTEEN_BITS:
            if compare_outputs([out], [want], rtol, atol):
                return ""
            continue
        if np.shape(true) != out.shape or np.isnan(out).any() or not np.isfinite(true).all():
            return ""
        try:
            np.testing.assert_allclose(out.astype(np.float64), true, rtol=rtol, atol=atol)
        except AssertionError:
            return ""
        mine, theirs = (_errors(v, true, want.dtype.name) for v in (out, want))
        if mine[0] > theirs[0] or mine[1] > theirs[1]:
            return ""
        notes.append(
            f"output {index} is closer to float64 than the expected one (max {mine[0]:.2f} vs "
            f"{theirs[0]:.2f} ulps, relative L2 {mine[1]:.2e} vs {theirs[1]:.2e})"
        )
    return "; ".join(notes)


def _errors(value: np.ndarray, truth: np.ndarray, dtype: str) -> tuple[float, float]:
    """(the largest error in ulps of ``dtype`` at the true value, the relative L2 error)."""
    bits = _SIXTEEN_BITS[dtype]
    smallest_normal = 2.0**-14 if dtype == "float16" else 2.0**-126
    scale = np.maximum(np.abs(truth), smallest_normal)
    ulp = np.exp2(np.floor(np.log2(scale)) - bits)
    error = np.abs(value.astype(np.float64) - truth)
    norm = float(np.linalg.norm(truth))
    return float((error / ulp).max()), float(np.linalg.norm(error) / norm) if norm else 0.0


def _float64_truth(model: onnx.ModelProto, inputs: Sequence[np.ndarray]) -> list | None:
    """``model`` run by onnx.reference with its 16-bit inputs, outputs and initializers in
    float64; None for a graph that does not widen so (a Cast or CastLike fixes a type
    inside it, or a value's type is declared 16-bit) or that the evaluator cannot run."""
    from onnx.reference import ReferenceEvaluator

    sixteen = (onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16)
    graph = model.graph
    if any(n.op_type in ("Cast", "CastLike") or n.attribute and any(
        a.HasField("t") for a in n.attribute) for n in graph.node):  # fmt: skip
        return None
    if any(v.type.tensor_type.elem_type in sixteen for v in graph.value_info):
        return None
    wide = onnx.ModelProto()
    wide.CopyFrom(model)
    for value in [*wide.graph.input, *wide.graph.output]:
        if value.type.tensor_type.elem_type in sixteen:
            value.type.tensor_type.elem_type = onnx.TensorProto.DOUBLE
    for k, tensor in enumerate(wide.graph.initializer):
        if tensor.data_type in sixteen:
            array = numpy_helper.to_array(tensor).astype(np.float64)
            wide.graph.initializer[k].CopyFrom(numpy_helper.from_array(array, tensor.name))
    feeds = {
        info.name: a.astype(np.float64) if a.dtype.name in _SIXTEEN_BITS else a
        for info, a in zip(wide.graph.input, inputs, strict=True)
    }
    try:
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            return [
                np.asarray(v, dtype=np.float64) for v in ReferenceEvaluator(wide).run(None, feeds)
            ]
    except Exception:  # an operator the evaluator has no float64 kernel for: not judged
        return None


def measure_all(
    operators: Iterable[str] | None = None,
    *,
    target: str = "auto",
    verbose: bool = False,
    quiet: bool = False,
) -> bool:
    """``fusec conformance --all``: run every float case (progress on stderr unless
    ``quiet``), print the pass / refused / wrong / error table on stdout; False when a
    case is wrong or errs."""
    with shown_progress(not quiet) as progress:
        report = run_conformance(operators, target=target, all_cases=True, progress=progress)
    sys.stdout.write(report.format_measure(verbose=verbose))
    return report.count_verdict("wrong") == 0 and report.count_verdict("error") == 0
