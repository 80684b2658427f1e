"""The cuda "experts" group (issue 31) where its kernel does not serve it (f32 experts, which
keep IEEE maths, or rows not 16-byte aligned): PyTorch expert by expert
(``torch_runtime.moe_experts``), checked on torch's CPU tensors against the definition, and
the kernel header that says so."""

from __future__ import annotations

import numpy as np
import pytest
from experts_cases import dense_moe, moe_inputs, moe_text

from fusec.api import parse, run_pipeline
from fusec.targets.cuda.experts import template as experts


@pytest.mark.parametrize(("k", "dtype"), [(1, "f32"), (2, "f32"), (2, "f16")])
def test_torch_experts_are_the_definition(k, dtype):
    torch = pytest.importorskip("torch")
    from fusec.targets.cuda.torch_runtime import moe_experts

    args = moe_inputs(13, 16, 8, 5, k, dtype=dtype, seed=k)
    got = moe_experts(torch, *(torch.from_numpy(np.ascontiguousarray(a)) for a in args))
    assert got.dtype == torch.from_numpy(args[0]).dtype
    want = dense_moe(*args)
    error = np.linalg.norm(got.float().numpy() - want) / np.linalg.norm(want)
    assert error < (1e-2 if dtype == "f16" else 1e-5)


def test_a_token_an_expert_does_not_serve_never_meets_its_values():
    """An expert whose product overflows for a token it does not serve: 0, not NaN."""
    torch = pytest.importorskip("torch")
    from fusec.targets.cuda.torch_runtime import moe_experts

    x, weights, picks, gate_up, down = moe_inputs(4, 8, 4, 3, 1, seed=2)
    picks[:] = 0
    gate_up[1] = 1e30  # expert 1 serves no token
    got = moe_experts(torch, *(torch.from_numpy(a) for a in (x, weights, picks, gate_up, down)))
    assert torch.isfinite(got).all()


def test_the_group_header_says_it_runs_through_pytorch():
    module = parse(moe_text(8, 16, 8, 4, 2))
    run_pipeline(module, "fusec-default")
    (group,) = [op for op in module.walk() if getattr(op, "kind_name", None) == "experts"]
    source = experts.generate(group, "k0").source
    assert "FALLBACK" in source and "IEEE maths through PyTorch" in source
    assert "moe_experts(torch, x0, x1, x2, x3, x4)" in source
