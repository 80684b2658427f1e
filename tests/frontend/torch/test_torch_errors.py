"""What the PyTorch front end refuses, and how it says so: a FusecError naming the
ATen op, the FX node and its input types, located at the user's line."""

from __future__ import annotations

import pytest
from markers import Markers
from torch_cases import quiet_torch_trace

torch = pytest.importorskip("torch")
nn = torch.nn

import fusec  # noqa: E402
from fusec.frontend.torch_fx import UnsupportedTorch, unsupported_reason  # noqa: E402

MARKS = Markers(__file__)


@pytest.fixture(autouse=True)
def _quiet():
    yield from quiet_torch_trace()


class Bessel(nn.Module):
    def forward(self, x):
        y = x * 2
        return torch.special.bessel_j0(y)  # <- bessel


class Transposed(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up = nn.ConvTranspose2d(2, 2, 2, stride=2)

    def forward(self, x):
        return self.up(x)


def test_an_op_without_lowering_names_the_node_at_the_user_line() -> None:
    with MARKS.raises_at("bessel", "no lowering") as info:
        fusec.from_torch(Bessel(), (torch.randn(2, 3),))
    assert isinstance(info.value, UnsupportedTorch)
    assert "aten.special_bessel_j0.default" in info.value.message
    assert "FX node 'special_bessel_j0'" in info.value.message
    assert "f32[2, 3]" in info.value.message


def test_a_transposed_convolution_is_refused_by_its_lowering() -> None:
    with pytest.raises(UnsupportedTorch, match="transposed convolution is not supported"):
        fusec.from_torch(Transposed(), (torch.randn(1, 2, 4, 4),))


def test_the_partitioner_asks_the_lowering_itself() -> None:
    program = torch.export.export(Transposed(), (torch.randn(1, 2, 4, 4),))
    graph = program.run_decompositions().graph
    (conv,) = [n for n in graph.nodes if "convolution" in str(n.target)]
    assert "transposed convolution" in (unsupported_reason(conv) or "")
    relu = torch.export.export(nn.ReLU(), (torch.randn(3),)).run_decompositions().graph
    (node,) = [n for n in relu.nodes if n.op == "call_function"]
    assert unsupported_reason(node) is None


def test_a_training_mode_batch_norm_is_refused_with_the_fix() -> None:
    model = nn.Sequential(nn.Conv2d(2, 2, 1), nn.BatchNorm2d(2)).train()
    with pytest.raises(fusec.FusecError, match=r"mutates its state.*model\.eval\(\)"):
        fusec.from_torch(model, (torch.randn(2, 2, 3, 3),))


def test_a_missing_pt2_file_is_a_located_error(tmp_path) -> None:
    path = tmp_path / "absent.pt2"
    with pytest.raises(fusec.FusecError, match="no such file") as info:
        fusec.from_torch(path)
    assert info.value.location is not None and info.value.location.file == str(path)


def test_a_file_that_is_not_a_program_is_a_located_error(tmp_path) -> None:
    path = tmp_path / "junk.pt2"
    path.write_bytes(b"not a zip archive")
    with pytest.raises(fusec.FusecError, match="cannot read the torch.export program") as info:
        fusec.from_torch(path)
    assert info.value.location is not None and info.value.location.file == str(path)


def test_other_objects_are_refused_by_type() -> None:
    with pytest.raises(fusec.FusecError, match="got dict"):
        fusec.from_torch({"weight": torch.ones(2)})
    with pytest.raises(fusec.FusecError, match="needs example_inputs"):
        fusec.from_torch(nn.ReLU())


def test_a_saved_program_imports_like_the_live_one(tmp_path) -> None:
    model = nn.Sequential(nn.Linear(4, 3), nn.Tanh()).eval()
    x = torch.randn(2, 4)
    program = torch.export.export(model, (x,))
    path = tmp_path / "model.pt2"
    torch.export.save(program, str(path))
    assert str(fusec.from_torch(path)) == str(fusec.from_torch(program))
    got = fusec.reference(fusec.from_torch(path))(x.numpy())
    with torch.no_grad():
        want = model(x).numpy()
    from numerics import assert_close

    assert_close(got, want)


def test_a_lowering_that_disagrees_with_pytorch_is_a_refusal(monkeypatch) -> None:
    """Each result is checked against the type PyTorch recorded for the node."""
    from fusec.dialect import ops as ai
    from fusec.frontend import torch_lowerings
    from fusec.frontend.torch_fx import LOWERINGS

    def wrong(t, node, a):  # a transpose where PyTorch computes a relu
        return t.emit(ai.TransposeOp, t.tensor(a["self"]), perm=(1, 0))

    assert torch_lowerings is not None
    monkeypatch.setitem(LOWERINGS, "relu.default", wrong)
    with pytest.raises(UnsupportedTorch, match=r"gives .*3x2.* but PyTorch computes .*2x3"):
        fusec.from_torch(nn.ReLU(), (torch.randn(2, 3),))


class Overlapping(nn.Module):
    def forward(self, x):
        return torch.as_strided(x + 1, (3, 3), (1, 1))  # <- overlap


def test_an_as_strided_view_that_is_no_reshape_slice_or_transpose_is_refused() -> None:
    with MARKS.raises_at("overlap", "not a reshape, slice or transpose") as info:
        fusec.from_torch(Overlapping(), (torch.randn(4, 5),))
    assert "aten.as_strided.default" in info.value.message
    assert "steps [1, 1]" in info.value.message


class TwoIndices(nn.Module):
    def forward(self, x, i, j):
        return x[i, j]


def test_an_index_outside_its_dim_fails_though_its_flat_position_is_inside() -> None:
    """x[i, j] on a 4x5 input: j = 5 is outside dim 1, though 0 * 5 + 5 is inside the
    merged 20 elements; PyTorch raises, and so does the lookup."""
    x, i = torch.randn(4, 5), torch.tensor([0, 1])
    run = fusec.reference(fusec.from_torch(TwoIndices(), (x, i, torch.tensor([1, 2]))))
    with pytest.raises(IndexError):
        TwoIndices()(x, i, torch.tensor([5, 2]))
    with pytest.raises(fusec.FusecError, match="out of range"):
        run(x.numpy(), i.numpy(), torch.tensor([5, 2]).numpy())
    got = run(x.numpy(), i.numpy(), torch.tensor([-1, 2]).numpy())  # from the end: fine
    assert (got == TwoIndices()(x, i, torch.tensor([-1, 2])).numpy()).all()


def test_a_lowering_that_raises_is_a_refusal_for_the_partitioner(monkeypatch) -> None:
    """Not a FusecError (a bug in a lowering): the node is left to eager, with the
    error in its reason, rather than failing the model."""
    from fusec.frontend import torch_lowerings
    from fusec.frontend.torch_fx import LOWERINGS

    def broken(t, node, a):
        raise KeyError("oops")

    assert torch_lowerings is not None
    monkeypatch.setitem(LOWERINGS, "relu.default", broken)
    graph = torch.export.export(nn.ReLU(), (torch.randn(3),)).run_decompositions().graph
    (node,) = [n for n in graph.nodes if n.op == "call_function"]
    assert "the lowering failed: KeyError: 'oops'" in (unsupported_reason(node) or "")
