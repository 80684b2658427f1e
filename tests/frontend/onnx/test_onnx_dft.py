"""ONNX ``DFT`` as one ai.matmul with a constant matrix (``fusec/frontend/onnx_dft.py``):
forward (real and complex input, one- and two-sided, dft_length padding and truncating)
and one-sided inverse against numpy's FFT in float64 and onnx's reference evaluator;
the two-sided inverse's matrix against numpy (it is refused at import: see the module)."""

from __future__ import annotations

import numpy as np
import pytest
from numerics import assert_close
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import fusec
from fusec.errors import FusecError
from fusec.frontend.onnx_dft import _matrix

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

RNG = np.random.default_rng(37)


def _model(shape, opset=20, axis=1, length=None, **attrs):
    inputs = ["x", "length" if length is not None else "", "axis" if opset >= 20 else ""]
    while inputs[-1] == "":
        inputs.pop()
    if opset < 20:
        attrs["axis"] = axis
    node = helper.make_node("DFT", inputs, ["y"], name="dft", **attrs)
    inits = []
    if length is not None:
        inits.append(numpy_helper.from_array(np.array(length, np.int64), "length"))
    if opset >= 20:
        inits.append(numpy_helper.from_array(np.array(axis, np.int64), "axis"))
    graph = helper.make_graph(
        [node],
        "dft",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 9
    return model


CASES = {
    # id: (input shape, _model keywords)
    "real-axis1": ((2, 8, 3, 1), {}),
    "complex-axis2-opset17": ((2, 3, 6, 2), {"opset": 17, "axis": 2}),
    "rfft-odd": ((1, 7, 2, 1), {"onesided": 1}),
    "padded": ((1, 5, 2, 1), {"length": 8}),
    "truncated-complex": ((2, 9, 2), {"length": 6}),
    "irfft-even": ((1, 5, 3, 2), {"inverse": 1, "onesided": 1}),
    "irfft-odd-length": ((1, 5, 2, 2), {"inverse": 1, "onesided": 1, "length": 9}),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_dft_matches_onnx_reference(case):
    shape, keywords = CASES[case]
    x = RNG.standard_normal(shape).astype(np.float32)
    model = _model(shape, **keywords)
    got = fusec.compile(fusec.from_onnx(model), target="reference")(x)
    want = ReferenceEvaluator(model).run(None, {"x": x})[0]
    assert got.shape == want.shape and not np.isnan(got).any()
    assert_close(got, want, tol=1e-4)


def _as_complex(x: np.ndarray) -> np.ndarray:
    return x[..., 0] + 1j * x[..., 1] if x.shape[-1] == 2 else x[..., 0].astype(complex)


@pytest.mark.parametrize(("inverse", "onesided", "c_in"), [(0, 0, 1), (0, 1, 2), (1, 0, 2)])
@pytest.mark.parametrize(("n", "length"), [(8, 8), (5, 7), (9, 6)])
def test_the_matrix_is_the_transform_in_float64(inverse, onesided, c_in, n, length):
    x = RNG.standard_normal((n, c_in))
    y = (_matrix(n, c_in, length, bool(inverse), bool(onesided)) @ x.reshape(-1)).reshape(-1, 2)
    signal = _as_complex(x)
    want = np.fft.ifft(signal, n=length) if inverse else np.fft.fft(signal, n=length)
    if onesided:
        want = want[: length // 2 + 1]
    np.testing.assert_allclose(y[:, 0] + 1j * y[:, 1], want, atol=1e-12)


def test_the_irfft_matrix_is_numpys_irfft():
    x = RNG.standard_normal((6, 2))
    for length in (10, 11, 6):
        y = _matrix(6, 2, length, True, True) @ x.reshape(-1)
        np.testing.assert_allclose(y, np.fft.irfft(_as_complex(x), n=length), atol=1e-12)


@pytest.mark.slow
def test_dft_on_the_cpu_target():
    shape, keywords = CASES["complex-axis2-opset17"]
    x = RNG.standard_normal(shape).astype(np.float32)
    model = _model(shape, **keywords)
    got = fusec.compile(fusec.from_onnx(model), target="cpu")(x)
    assert_close(got, ReferenceEvaluator(model).run(None, {"x": x})[0], tol=1e-4)


def test_the_two_sided_inverse_and_the_last_axis_are_refused():
    with pytest.raises(FusecError, match="two-sided inverse DFT is not enabled"):
        fusec.from_onnx(_model((1, 4, 2), inverse=1))
    with pytest.raises(FusecError, match="not a signal axis"):
        fusec.from_onnx(_model((1, 4, 2), axis=-1))
