"""ONNX's own backend node tests of every supported operator, through fusec.

Each case goes import -> default pipeline -> execution and is compared with
the expected outputs at ONNX's tolerances. The per-operator report is printed
(``pytest -s`` shows it). No case may fail; a skip must name an unsupported
attribute or element type; every supported operator passes at least one case.
"""

from __future__ import annotations

import functools

import pytest

from fusec.frontend.onnx_import import supported_operators
from fusec.tools.conformance import ConformanceReport, node_cases, run_conformance


def _cpu_available() -> bool:
    from fusec.api import resolve_target
    from fusec.errors import FusecError

    try:
        return resolve_target("cpu") == "cpu"
    except FusecError:
        return False


#: Every node test on the reference executor: half a minute; the tests reading the whole
#: report run in the slow lane (the default lane runs the small subsets further down).
@pytest.fixture(scope="module")
def reference_report() -> ConformanceReport:
    report = run_conformance(target="reference")
    print("\n" + report.format())
    return report


#: Cases whose expected outputs fusec misses only by ONNX's 16-bit rounding: the suite's
#: reference rounds after every op in float16, fusec's recognised ai.attention computes in
#: float32 and rounds once. The conformance tool judges them against a float64 evaluation
#: of the same graph (``float64_judgement``); test_rounding_only_cases_are_closer_to_float64
#: checks the same independently on each target: fusec is the closer one.
ROUNDING_ONLY = {"test_attention_4d_causal_fp16"}


def _failed(report: ConformanceReport) -> list:
    return [r for r in report.results if r.status == "failed"]


def _failures(report: ConformanceReport) -> str:
    return "\n".join(f"{r.name}: {r.detail}" for r in _failed(report))


@pytest.mark.slow
def test_no_case_fails_on_the_reference_executor(reference_report):
    assert not _failed(reference_report), _failures(reference_report)


@pytest.mark.slow
@pytest.mark.parametrize("target", ["reference", "cpu"])
@pytest.mark.parametrize("name", sorted(ROUNDING_ONLY))
def test_rounding_only_cases_are_closer_to_float64(name: str, target: str) -> None:
    import numpy as np
    import onnx
    from onnx import numpy_helper
    from onnx.reference import ReferenceEvaluator

    import fusec
    from fusec.tools.conformance import _loaded_cases

    (case,) = [c for c in _loaded_cases() if c[0] == name]
    _, model, data_sets, _ = case
    inputs, outputs = data_sets[0]
    arrays = [numpy_helper.to_array(t) if not isinstance(t, np.ndarray) else t for t in inputs]
    want = [numpy_helper.to_array(t) if not isinstance(t, np.ndarray) else t for t in outputs]
    wide = onnx.ModelProto()
    wide.CopyFrom(model)
    for value in [*wide.graph.input, *wide.graph.output]:
        if value.type.tensor_type.elem_type == onnx.TensorProto.FLOAT16:
            value.type.tensor_type.elem_type = onnx.TensorProto.DOUBLE
    feeds = {v.name: a.astype(np.float64) for v, a in zip(wide.graph.input, arrays, strict=True)}
    truth = ReferenceEvaluator(wide).run(None, feeds)[0]
    got = fusec.compile(fusec.from_onnx(model), target=target)(*arrays)
    got = got[0] if isinstance(got, tuple) else got

    def error(x):
        return float(np.linalg.norm(x.astype(np.float64) - truth) / np.linalg.norm(truth))

    assert not np.isnan(got).any()
    assert error(got) <= error(want[0]) and error(got) < 1e-2, (error(got), error(want[0]))
    from fusec.tools.conformance import all_node_cases, run_case

    (chosen,) = [c for c in all_node_cases(["Attention"]) if c.name == name]
    verdict = run_case(chosen, target)
    assert verdict.status == "passed" and verdict.feature == "float64_judged", verdict
    assert "closer to float64 than the expected one" in verdict.detail


#: Operators none of whose node tests fusec can take (none now). ReduceLogSumExp's float32
#: cases with an empty input run since empty reductions were supported (the rest are float64,
#: tests/frontend/onnx/test_float_ops.py covers it); Trilu's int64 cases since issue 29; CastLike's
#: since its empty ``like`` input (a type, no data) is baked into a constant.
NO_CASE_TO_TAKE: set[str] = set()


@pytest.mark.slow
@pytest.mark.parametrize("operator", supported_operators())
def test_every_supported_operator_passes_its_cases(reference_report, operator):
    report = reference_report.operators[operator]
    assert not _failed(report), _failures(report)
    if operator in NO_CASE_TO_TAKE:
        assert report.count("skipped") == len(report.results)
        assert {r.feature for r in report.results} & {"shape", "dtype"}
        return
    assert report.count("passed") >= 1, [(r.name, r.detail) for r in report.results]


@pytest.mark.slow
def test_skips_name_an_unsupported_attribute_or_dtype(reference_report):
    for result in reference_report.results:
        if result.status == "skipped":
            assert result.feature in ("attribute", "dtype", "shape"), result
            assert result.detail, result
        if result.status == "n/a":
            assert "_expanded" in result.name and result.feature == "operator", result


def test_every_case_is_counted_once():
    cases = node_cases(["Gemm", "Relu"])
    assert {c.operator for c in cases} == {"Gemm", "Relu"}
    assert len({c.name for c in cases}) == len(cases)
    assert "test_relu" in {c.name for c in cases}


def _sixteen_bit_model():
    """y = x * s + t in float16: ONNX's reference rounds after the Mul, float64 does not."""
    from onnx import TensorProto, helper

    f16 = TensorProto.FLOAT16
    nodes = [helper.make_node("Mul", ["x", "s"], ["m"]), helper.make_node("Add", ["m", "t"], ["y"])]
    inputs = [helper.make_tensor_value_info(n, f16, (64,)) for n in ("x", "s", "t")]
    graph = helper.make_graph(
        nodes, "fma", inputs, [helper.make_tensor_value_info("y", f16, (64,))]
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])


def test_a_sixteen_bit_output_is_judged_against_float64_only_when_closer():
    """The float64 judgement passes an output at least as close to the truth as the
    expected one (here: the correctly rounded truth against ONNX's twice-rounded values),
    and fails one an ulp farther at one element, one with a NaN, one that misses the
    truth at the tolerances."""
    import numpy as np

    from fusec.tools.conformance import float64_judgement

    rng = np.random.default_rng(5)
    x, s, t = (rng.uniform(0.5, 2.0, 64).astype(np.float16) for _ in range(3))
    truth = x.astype(np.float64) * s + t
    expected = (x * s) + t  # numpy rounds the product to float16 first, as ONNX's does
    best = truth.astype(np.float16)
    assert not np.array_equal(best, expected)  # the two roundings differ somewhere
    model = _sixteen_bit_model()
    judge = functools.partial(float64_judgement, model, [x, s, t], rtol=1e-3, atol=1e-7)
    assert "closer to float64 than the expected one" in judge([best], [expected])
    worst = int(np.argmax(np.abs(expected - truth) / np.spacing(expected)))
    away = np.float16(np.inf if expected[worst] > truth[worst] else -np.inf)
    farther = best.copy()  # one element an ulp beyond the expected output's worst error
    farther[worst] = np.nextafter(expected[worst], away)
    assert judge([farther], [expected]) == ""
    nan = best.copy()
    nan[3] = np.nan
    assert judge([nan], [expected]) == ""
    assert judge([best * np.float16(1.01)], [expected]) == ""


def test_a_wrong_result_fails(monkeypatch):
    """The comparison can fail: a kernel that computes the wrong thing is caught."""
    import fusec.frontend.onnx_elementwise as onnx_elementwise
    from fusec.dialect import ops as ai

    monkeypatch.setitem(onnx_elementwise._UNARY, "Relu", ai.SigmoidOp)
    report = run_conformance(["Relu"], target="reference")
    assert report.operators["Relu"].count("failed") == 1
    assert "differs" in next(r.detail for r in report.results if r.status == "failed")


@pytest.mark.slow  # a kernel compile per case: minutes
@pytest.mark.skipif(not _cpu_available(), reason="the cpu target is not available")
def test_the_cpu_target_passes_the_same_cases(reference_report):
    report = run_conformance(target="cpu")
    print("\n" + report.format())
    refused = cpu_refusals(report)
    assert not [r for r in _failed(report) if r.name not in refused], _failures(report)
    passed = {r.name for r in report.results if r.status == "passed"}
    assert passed | refused == {r.name for r in reference_report.results if r.status == "passed"}


#: Operators whose ai ops the cpu target refuses by name (their ``UNSUPPORTED``): none
#: since the cpu target computes the quantized element types (issue 31).
CPU_REFUSED_OPERATORS: set[str] = set()


def cpu_refusals(report: ConformanceReport) -> set[str]:
    """The failed cases of ``CPU_REFUSED_OPERATORS`` whose error is the target's refusal."""
    return {
        r.name
        for r in report.results
        if r.status == "failed"
        and r.operator in CPU_REFUSED_OPERATORS
        and "is not supported on target 'cpu'" in r.detail
    }


@pytest.mark.slow  # ~20 s: a kernel compile per case
@pytest.mark.skipif(not _cpu_available(), reason="the cpu target is not available")
def test_the_cpu_target_passes_every_quantization_case_the_reference_passes():
    """QuantizeLinear / DequantizeLinear (int8, uint8, float8, per tensor, axis and block)
    run as cpu kernels (issue 31): the cases the reference target passes pass on cpu."""
    operators = ["QuantizeLinear", "DequantizeLinear"]
    report = run_conformance(operators, target="cpu")
    assert not _failed(report), _failures(report)
    passed = {r.name for r in report.results if r.status == "passed"}
    reference = run_conformance(operators, target="reference")
    on_reference = {r.name for r in reference.results if r.status == "passed"}
    assert len(on_reference) >= 12 and passed == on_reference


# ------------------------------------------------------------ --all: the suite as the measure


def test_all_cases_include_operators_fusec_lacks_as_refusals():
    """``all_cases`` counts every float case, an unsupported operator's as refused
    with the importer's reason, never as passed or wrong."""
    report = run_conformance(["Relu", "GRU"], target="reference", all_cases=True)
    gru = report.operators["GRU"]
    assert len(gru.results) >= 3
    assert {r.verdict for r in gru.results} == {"refused"}
    assert all("GRU" in r.detail and "unsupported operator" in r.detail for r in gru.results)
    assert report.operators["Relu"].count_verdict("pass") >= 1
    table = report.format_measure()
    assert "wrong" in table.splitlines()[1] and "GRU" in table
    assert f"of {len(report.results)} cases pass" in table


def test_all_cases_count_a_wrong_result_as_wrong(monkeypatch):
    import fusec.frontend.onnx_elementwise as onnx_elementwise
    from fusec.dialect import ops as ai

    monkeypatch.setitem(onnx_elementwise._UNARY, "Relu", ai.SigmoidOp)
    report = run_conformance(["Relu"], target="reference", all_cases=True)
    assert report.operators["Relu"].count_verdict("wrong") == 1
    assert "wrong cases:" in report.format_measure()


def test_the_cli_measures_all_cases(capsys, monkeypatch):
    from fusec.cli import main

    monkeypatch.setattr("fusec.tools.progress.DELAY_S", 0.0)  # show even short work
    assert main(["conformance", "--all", "--op", "GRU", "--target", "reference"]) == 0
    captured = capsys.readouterr()
    assert "GRU" in captured.out and "refused" in captured.out
    assert "fusec: conformance cases: 1/" in captured.err  # progress, per case, on stderr


def test_an_empty_float_input_is_baked_and_a_float_data_input_is_not():
    """CastLike's ``like`` input has no data, only a type: it becomes an initializer (fusec
    has no empty tensors), while a float input carrying data stays an input."""
    import numpy as np
    from onnx import TensorProto, helper

    from fusec.tools.conformance import bake_constant_inputs

    node = helper.make_node("CastLike", ["x", "like"], ["y"])
    graph = helper.make_graph(
        [node],
        "castlike",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, (3,)),
            helper.make_tensor_value_info("like", TensorProto.FLOAT16, (0,)),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT16, (3,))],
    )
    x = np.array([1.5, -2.0, 3.25], dtype=np.float32)
    like = np.empty((0,), dtype=np.float16)
    baked, sets = bake_constant_inputs(helper.make_model(graph), [([x, like], [x])])
    assert [i.name for i in baked.graph.input] == ["x"]
    assert [t.name for t in baked.graph.initializer] == ["like"]
    assert len(sets[0][0]) == 1 and sets[0][0][0] is x
