"""Read-only input arrays (np.frombuffer, ONNX initialisers) run without copies or errors."""

import numpy as np
import pytest

import fusec
from fusec.dialect.ops import spec_of
from fusec.ir.dtypes import numpy_dtype
from fusec.ir.module import entry_function


@pytest.mark.parametrize("example", ["elementwise_chain", "mlp_block", "resnet_block"])
def test_read_only_inputs_match_the_reference(example: str) -> None:
    path = f"examples/{example}.mlir"
    compiled = fusec.compile(path, target="cpu")
    rng = np.random.default_rng(7)
    args = []
    for param in entry_function(compiled.module).function_type.inputs.data:
        spec = spec_of(param)
        array = rng.standard_normal(spec.shape).astype(numpy_dtype(spec.dtype))
        array.setflags(write=False)
        args.append(array)
    out = compiled(*args)
    ref = fusec.reference(path)(*args)
    outs = out if isinstance(out, tuple) else (out,)
    refs = ref if isinstance(ref, tuple) else (ref,)
    for got, want in zip(outs, refs, strict=True):
        got64, want64 = np.asarray(got, np.float64), np.asarray(want, np.float64)
        assert not np.isnan(got64).any()
        err = np.linalg.norm(got64 - want64) / np.linalg.norm(want64)
        assert err < (1e-4 if got.dtype == np.float32 else 1e-2)
