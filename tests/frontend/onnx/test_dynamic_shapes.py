"""Dynamic shapes (issue 29): a model with symbolic dimensions (``dim_param``) compiles
without ``--input-shape``; the compiled module specializes once per new set of input
shapes, up to a bound, and matches onnxruntime at every shape.

The default lane runs the specializations on the reference target (the import, the
whole pipeline and the numpy executor, per shape); the cpu target, whose kernels take
seconds each to JIT, runs in the slow lane, as does the second process that finds every
kernel in the disk cache."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from dynamic_models import encoder, encoder_feeds, mlp
from numerics import assert_close
from onnx import TensorProto, helper
from onnx_nets import make_model, random, run_onnxruntime, tensor

import fusec
from fusec.cli import main
from fusec.frontend.onnx_dynamic import DynamicModel
from fusec.runtime.specialize import DynamicCompiledModule, specialization_bound

RNG = np.random.default_rng(29)
SHAPES = [(1, 5), (2, 7), (3, 4)]  # (batch, seq)


class Compiles:
    """An ``after_pass`` hook that tells how many modules the pipeline ran on."""

    def __init__(self) -> None:
        self.modules: dict[int, object] = {}

    def __call__(self, _name: str, module: object) -> None:
        self.modules[id(module)] = module  # kept alive: ids stay unique

    @property
    def count(self) -> int:
        return len(self.modules)


def _compile(model, target: str = "reference", **kwargs):
    hook = Compiles()
    dynamic = fusec.from_onnx(model)
    assert isinstance(dynamic, DynamicModel)
    compiled = fusec.compile(dynamic, target=target, after_pass=hook, **kwargs)
    assert isinstance(compiled, DynamicCompiledModule)
    return compiled, hook


def _run_encoder(compiled, model, batch: int, seq: int) -> None:
    feeds = encoder_feeds(RNG, batch, seq)
    out = compiled(feeds["input_ids"], feeds["attention_mask"])
    assert out.shape == (batch, seq, 32)
    assert_close(out, run_onnxruntime(model, feeds)[0], what=f"batch={batch} seq={seq}")


# ------------------------------------------------------------ three shapes, one compile


def test_encoder_runs_at_three_shapes_each_compiled_once():
    model = encoder()
    compiled, hook = _compile(model)
    for batch, seq in SHAPES:
        _run_encoder(compiled, model, batch, seq)
    assert hook.count == 3
    assert [s.dims for s in compiled.specializations] == [{"batch": b, "seq": s} for b, s in SHAPES]
    first = [s.compiled for s in compiled.specializations]
    for batch, seq in reversed(SHAPES):  # shapes seen before compile nothing
        _run_encoder(compiled, model, batch, seq)
    assert hook.count == 3 and [s.compiled for s in compiled.specializations] == first
    (spec,) = [s for s in compiled.specializations if s.dims == {"batch": 2, "seq": 7}]
    assert spec.shapes == {"input_ids": (2, 7), "attention_mask": (2, 7)}
    assert "tensor<2x7xi64>" in spec.compiled.ir and spec.describe() == "batch=2, seq=7"


def test_mlp_batches_on_the_reference_target():
    model = mlp()
    compiled, hook = _compile(model)
    for batch in (1, 4, 9, 4):
        x = random(RNG, batch, 16)
        assert_close(compiled(x), run_onnxruntime(model, {"x": x})[0])
    assert hook.count == 3 and len(compiled.specializations) == 3


def test_reference_runs_the_imported_ir_per_shape():
    model = encoder()
    ref = fusec.reference(fusec.from_onnx(model))
    assert isinstance(ref, DynamicCompiledModule)
    for batch, seq in SHAPES[:2]:
        _run_encoder(ref, model, batch, seq)
    assert [s.compiled.target for s in ref.specializations] == ["reference"] * 2
    assert "ai.fused" not in ref.specializations[0].compiled.ir  # no pass ran


def test_specialize_compiles_ahead_of_the_call():
    compiled, hook = _compile(mlp())
    ahead = compiled.specialize((6, 16))
    assert hook.count == 1 and "tensor<6x16xf32>" in ahead.ir
    x = random(RNG, 6, 16)
    assert_close(compiled(x), ahead(x))
    assert hook.count == 1


# ------------------------------------------------------------ the symbolic signature


def test_the_symbolic_signature_keeps_the_names():
    dynamic = fusec.from_onnx(encoder())
    assert isinstance(dynamic, DynamicModel)
    assert dynamic.symbols == ["batch", "seq"]
    text = str(dynamic)
    assert "func.func private @encoder(tensor<?x?xi64>, tensor<?x?xi64>)" in text
    assert 'ai.dims = {input_ids = ["batch", "seq"], attention_mask = ["batch", "seq"]}' in text
    assert 'ai.result_dims = {hidden = ["batch", "seq", 32 : i64]}' in text
    with pytest.raises(fusec.FusecError, match="dynamic shapes are not supported"):
        fusec.parse(text)  # a declaration to read, not IR to compile


def test_input_shapes_fix_the_dims_they_share_by_name():
    """Fixing input_ids fixes batch and seq, so attention_mask too: a static import."""
    model = encoder()
    module = fusec.from_onnx(model, input_shapes={"input_ids": (2, 3)})
    assert not isinstance(module, DynamicModel)
    assert "%attention_mask: tensor<2x3xi64>" in str(module)
    feeds = encoder_feeds(RNG, 2, 3)
    out = fusec.compile(module, target="reference")(*feeds.values())
    assert_close(out, run_onnxruntime(model, feeds)[0])


def test_input_shapes_that_disagree_on_a_name_are_an_error():
    with pytest.raises(fusec.FusecError, match="dimension 'seq' both 3 and 4"):
        fusec.from_onnx(encoder(), input_shapes={"input_ids": (2, 3), "attention_mask": (2, 4)})


def _concat_model(dims_x, dims_y) -> onnx.ModelProto:
    node = helper.make_node("Concat", ["x", "y"], ["z"], axis=0)
    return make_model(
        [node], [tensor("x", dims_x), tensor("y", dims_y)], [tensor("z", ("n", 4))], []
    )


def test_unnamed_dims_are_not_tied():
    compiled, hook = _compile(_concat_model(("", 4), ("", 4)))
    assert str(compiled.model).count('"?"') == 2
    assert compiled.model.dynamic_dims() == "dynamic dimensions unnamed ones (x[0], y[0])"
    x, y = random(RNG, 2, 4), random(RNG, 3, 4)
    np.testing.assert_array_equal(compiled(x, y), np.concatenate([x, y]))
    assert compiled.specializations[0].dims == {}
    assert compiled.specializations[0].describe() == "x: 2x4, y: 3x4"


def test_an_input_without_a_shape_takes_any_rank():
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, None)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    compiled, hook = _compile(model)
    assert "tensor<*xf32>" in compiled.signature
    for shape in ((3,), (2, 5)):
        x = random(RNG, *shape)
        np.testing.assert_array_equal(compiled(x), np.maximum(x, 0))
    assert hook.count == 2


# ------------------------------------------------------------ shapes that do not fit


@pytest.mark.parametrize(
    ("ids", "mask", "message"),
    [
        (
            (2, 5),
            (2, 6),
            "argument #1 'attention_mask' has shape 2x6: dimension 'seq' is 6 "
            "at axis 1 but 5 in 'input_ids' (axis 1)",
        ),
        ((2, 5), (3, 5), "dimension 'batch' is 3 at axis 0 but 2 in 'input_ids' (axis 0)"),
        (
            (2, 5, 1),
            (2, 5),
            "argument #0 'input_ids' has shape 2x5x1 of rank 3, expected "
            "rank 2 (input_ids: batch x seq (i64))",
        ),
        ((0, 5), (0, 5), "argument #0 'input_ids' of shape 0x5 has a zero-size dimension"),
    ],
)
def test_shapes_that_break_the_signature_are_errors(ids, mask, message):
    compiled, hook = _compile(encoder())
    with pytest.raises(fusec.FusecError) as info:
        compiled(np.zeros(ids, np.int64), np.ones(mask, np.int64))
    assert message in info.value.message and info.value.message.startswith("@encoder: ")
    assert hook.count == 0 and compiled.specializations == []


def test_a_static_dim_that_does_not_match_is_an_error():
    compiled, hook = _compile(mlp())
    with pytest.raises(fusec.FusecError, match=r"has shape 2x15: size 15 at axis 1, expected 16"):
        compiled(random(RNG, 2, 15))
    with pytest.raises(fusec.FusecError, match=r"@mlp takes 1 arguments \(x\), got 2"):
        compiled(random(RNG, 2, 16), random(RNG, 2, 16))
    assert hook.count == 0


def test_a_shape_the_graph_cannot_take_is_the_importers_located_error():
    """A Reshape to a fixed [4, 4] takes batch 4 only: batch 2 fails at the node, and
    nothing is kept."""
    shape = onnx.numpy_helper.from_array(np.array([4, 4], np.int64), "fixed")
    node = helper.make_node("Reshape", ["x", "fixed"], ["y"], name="fixed_reshape")
    model = make_model([node], [tensor("x", ("batch", 4))], [tensor("y", (4, 4))], [shape])
    compiled, hook = _compile(model)
    with pytest.raises(fusec.FusecError) as info:
        compiled(random(RNG, 2, 4))
    assert info.value.format().startswith('<onnx>: node "fixed_reshape": error: Reshape')
    assert compiled.specializations == []
    x = random(RNG, 4, 4)
    np.testing.assert_array_equal(compiled(x), x)
    assert hook.count == 1


def test_weights_as_args_follow_the_dynamic_inputs():
    model = mlp()
    dynamic = fusec.from_onnx(model, weights_as_args=True)
    assert "(tensor<?x16xf32>, tensor<16x32xf32>, tensor<32xf32>, tensor<32x8xf32>)" in str(dynamic)
    compiled = fusec.compile(dynamic, target="reference")
    weights = [onnx.numpy_helper.to_array(t) for t in model.graph.initializer]
    with pytest.raises(fusec.FusecError, match=r"'w2' has shape 8x32: size 8 at axis 0"):
        compiled(random(RNG, 2, 16), *weights[:2], weights[2].T)
    with pytest.raises(fusec.FusecError, match=r"@mlp takes 4 arguments \(x, w1, b1, w2\)"):
        compiled(random(RNG, 2, 16))
    for batch in (2, 5):
        x = random(RNG, batch, 16)
        assert_close(compiled(x, *weights), run_onnxruntime(model, {"x": x})[0])
    assert [s.dims for s in compiled.specializations] == [{"batch": 2}, {"batch": 5}]


# ------------------------------------------------------------ the bound


def test_past_the_bound_is_an_error_that_says_how_to_raise_it():
    compiled, hook = _compile(mlp(), max_specializations=2)
    for batch in (1, 2):
        compiled(random(RNG, batch, 16))
    with pytest.raises(fusec.FusecError) as info:
        compiled(random(RNG, 3, 16))
    message = info.value.message
    assert "input shapes batch=3 would be specialization 3, past the bound of 2" in message
    assert "(compiled: batch=1; batch=2)" in message
    assert "max_specializations=N" in message and "FUSEC_MAX_SPECIALIZATIONS=N" in message
    assert hook.count == 2
    compiled(random(RNG, 2, 16))  # a compiled shape still runs


def test_the_bound_defaults_to_8_and_reads_the_environment(monkeypatch):
    monkeypatch.delenv("FUSEC_MAX_SPECIALIZATIONS", raising=False)
    assert specialization_bound() == 8
    monkeypatch.setenv("FUSEC_MAX_SPECIALIZATIONS", "1")
    compiled, _ = _compile(mlp())
    assert compiled.max_specializations == 1
    assert (
        fusec.compile(
            fusec.from_onnx(mlp()), target="reference", max_specializations=3
        ).max_specializations
        == 3
    )  # the argument wins
    monkeypatch.setenv("FUSEC_MAX_SPECIALIZATIONS", "many")
    with pytest.raises(fusec.FusecError, match="FUSEC_MAX_SPECIALIZATIONS='many': expected"):
        _compile(mlp())
    with pytest.raises(fusec.FusecError, match="max_specializations=0: expected"):
        _compile(mlp(), max_specializations=0)
    with pytest.raises(fusec.FusecError, match="models with dynamic dimensions only"):
        fusec.compile(
            str(Path(__file__).parents[3] / "examples" / "elementwise_chain.mlir"),
            target="reference",
            max_specializations=2,
        )


def test_a_dynamic_module_has_no_single_ir():
    compiled, _ = _compile(mlp())
    for attribute in ("ir", "kernels", "module", "program"):
        with pytest.raises(
            fusec.FusecError,
            match=rf"@mlp has dynamic dimensions \(batch\): "
            rf"it has one {attribute} per set of input shapes",
        ):
            getattr(compiled, attribute)
    assert repr(compiled) == (
        "DynamicCompiledModule(entry=@mlp, target='reference', specializations=0/8)"
    )


# ------------------------------------------------------------ the command line


def _save(tmp_path, model, name="model.onnx") -> Path:
    path = tmp_path / name
    onnx.save(model, str(path))
    return path


def test_import_prints_the_symbolic_signature(tmp_path, capsys):
    path = _save(tmp_path, encoder())
    assert main(["import", str(path)]) == 0
    captured = capsys.readouterr()
    assert 'ai.dims = {input_ids = ["batch", "seq"]' in captured.out
    assert captured.err.startswith(
        f"{path}: dynamic dimensions 'batch' (input_ids[0], attention_mask[0]), 'seq' "
        "(input_ids[1], attention_mask[1]): the body is imported for each set of input shapes"
    )


def test_run_specializes_for_the_npz_shapes(tmp_path, capsys):
    model = encoder()
    path = _save(tmp_path, model)
    feeds = encoder_feeds(RNG, 2, 6)
    np.savez(tmp_path / "in.npz", **feeds)
    out = tmp_path / "out.npz"
    args = ["run", str(path), "--inputs", str(tmp_path / "in.npz"), "--target", "reference"]
    assert main([*args, "-o", str(out), "--check", "--quiet"]) == 0
    assert "PASS" in capsys.readouterr().out
    assert_close(np.load(out)["result0"], run_onnxruntime(model, feeds)[0])


@pytest.mark.parametrize("command", ["run", "compile"])
def test_run_and_compile_without_shapes_say_how(tmp_path, capsys, command):
    path = _save(tmp_path, encoder())
    extra = ["--random-inputs"] if command == "run" else []
    assert main([command, str(path), *extra]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"{path}: error: dynamic dimensions 'batch' (input_ids[0]")
    assert "--input-shape input_ids=NxN --input-shape attention_mask=NxN" in err
    assert ("--inputs FILE.npz" in err) == (command == "run")


def test_profile_of_a_dynamic_model_needs_inputs(tmp_path):
    path = _save(tmp_path, mlp())
    for source in (str(path), fusec.compile(fusec.from_onnx(path), target="cpu")):
        with pytest.raises(fusec.FusecError, match=r"@mlp has dynamic dimensions \(batch\): give"):
            fusec.profile(source, target="cpu")


# ------------------------------------------------------------ the cpu target


@pytest.mark.slow  # a JIT compile of the kernels
def test_profile_of_a_dynamic_model_times_the_inputs_shape(tmp_path):
    path = _save(tmp_path, mlp())
    result = fusec.profile(str(path), target="cpu", inputs=[random(RNG, 5, 16)], repeat=2)
    assert result.kernels and "5x16" in result.table()


@pytest.mark.slow  # a JIT compile per kernel per shape
def test_encoder_on_the_cpu_target_at_three_shapes():
    model = encoder()
    compiled, hook = _compile(model, target="cpu")
    for batch, seq in [*SHAPES, SHAPES[0]]:
        _run_encoder(compiled, model, batch, seq)
    assert hook.count == 3 and len(compiled.specializations) == 3
    assert all(s.compiled.target == "cpu" for s in compiled.specializations)


# In a fresh process: the mlp at three batches on the cpu; what the kernel cache did.
CHILD = r"""
import json, sys
import numpy as np
sys.path[:0] = sys.argv[1:3]
import fusec
from dynamic_models import mlp
from onnx_nets import run_onnxruntime
from fusec.runtime.cache import default_cache

model = mlp()
compiled = fusec.compile(fusec.from_onnx(model), target="cpu")
rng = np.random.default_rng(0)
worst = 0.0
for batch in (1, 3, 5):
    x = rng.standard_normal((batch, 16)).astype(np.float32)
    ref = run_onnxruntime(model, {"x": x})[0]
    worst = max(worst, float(np.abs(compiled(x) - ref).max() / np.abs(ref).max()))
cache = default_cache()
dispatchers = [getattr(m, n) for m in cache._modules.values() for n in dir(m)
               if hasattr(getattr(m, n), "stats")]
print(json.dumps({
    "worst": worst,
    "specializations": len(compiled.specializations),
    "misses": sum(sum(d.stats.cache_misses.values()) for d in dispatchers),
    "written": cache.stats["module_files_written"],
}))
"""


def _child(cache_dir: Path) -> dict:
    tests = Path(__file__).parent
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(tests), str(tests.parent)],
        env=dict(os.environ, FUSEC_CACHE_DIR=str(cache_dir)),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.slow  # processes of their own, cpu JIT
def test_a_second_process_compiles_no_kernel(tmp_path):
    first = _child(tmp_path)
    assert first["worst"] < 1e-4 and first["specializations"] == 3
    assert first["written"] > 0 and first["misses"] > 0
    second = _child(tmp_path)
    assert second["worst"] < 1e-4 and second["specializations"] == 3
    assert second["written"] == 0 and second["misses"] == 0
