"""The device the cuda tiles are chosen for is resolved once (``caps.resolve_device``) and
written into the IR by ``tile-gemm``: with ``--sms`` given, the generated code is the
same on every machine; without it, it follows the machine's GPU."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import pytest

from fusec.cli import main
from fusec.targets.cuda import caps

HERE = Path(__file__).parent / "filecheck"
#: a GEMM and a conv whose tiles depend on the SM count (20 SMs vs an H200's 132)
GRAPHS = [HERE / "tile_gemm_1024.mlir", HERE / "conv_layout_resnet.mlir"]


def _emit(path: Path, *options: str) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        code = main(["compile", str(path), "--target", "cuda", "--emit", "all", *options])
    assert code == 0
    return out.getvalue()


def _on_machine(monkeypatch, device: caps.DeviceCaps | None) -> None:
    """Pretend this machine has ``device`` (None: no usable GPU)."""
    monkeypatch.setattr(caps, "probe_device", lambda: device)


@pytest.mark.parametrize("path", GRAPHS, ids=lambda p: p.stem)
def test_given_sms_the_kernels_are_the_same_on_every_machine(path: Path, monkeypatch) -> None:
    small = caps.DeviceCaps("a GPU of 8 SMs", 8)  # (the graphs' few tiles fill 20 SMs too)
    _on_machine(monkeypatch, None)
    without_gpu = _emit(path, "--sms", "132")
    _on_machine(monkeypatch, small)
    assert _emit(path, "--sms", "132") == without_gpu
    # without --sms the tiles follow the machine's GPU: the same test would see it
    assert _emit(path) != without_gpu


def test_resolve_device() -> None:
    assert caps.resolve_device(sms=66) == caps.DeviceCaps("66 SMs, sm_90a (given)", 66)
    assert caps.resolve_device(arch="sm_90a").sms == caps.H200.sms
    with pytest.raises(ValueError, match="positive"):
        caps.resolve_device(sms=-1)


def test_sms_must_be_positive(capsys) -> None:
    with pytest.raises(SystemExit) as raised:
        main(["compile", str(GRAPHS[0]), "--sms", "0"])
    assert raised.value.code == 2
    assert "expected a positive whole number" in capsys.readouterr().err


def _record_a_tile_for(path: Path, device: caps.DeviceCaps) -> None:
    """A ``fusec tune`` record for ``path``'s GEMM group on ``device``: a tile the
    heuristic does not choose."""
    import fusec
    from fusec.dialect import ops as ai
    from fusec.targets.cuda.gemm import template, tuning
    from fusec.targets.cuda.gemm.config import TileConfig

    compiled = fusec.compile(path, target="cuda", executable=False)
    (group,) = [op for op in compiled.module.walk() if isinstance(op, ai.FusedOp)]
    key = tuning.problem_key(group, template.plan(group), device)
    tuning.record(key, TileConfig(256, 128, 64, 4, 2, 8), {"256x128x64 s4 c2 g8": 0.1})


def test_emit_cuda_is_the_same_on_every_machine_and_cache(tmp_path, monkeypatch) -> None:
    """``--emit cuda --arch sm_90 --sms 132``: byte-identical with no GPU, on a GPU of 20
    SMs, and on an H200 whose kernel cache holds a ``fusec tune`` record for the group
    (read only with ``--tuned``: the records are an explicit input)."""
    monkeypatch.setenv("FUSEC_CACHE_DIR", str(tmp_path))
    path = HERE / "tile_gemm_4096.mlir"
    argv = ("--emit", "cuda", "--arch", "sm_90", "--sms", "132")

    def emit(*options: str) -> str:
        out = io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
            code = main(["compile", str(path), "--target", "cuda", *options])
        assert code == 0
        return out.getvalue()

    _on_machine(monkeypatch, None)
    without_gpu = emit(*argv)
    assert "wgmma" in without_gpu
    _on_machine(monkeypatch, caps.DeviceCaps("a GPU of 20 SMs", 20))
    assert emit(*argv) == without_gpu
    h200 = caps.DeviceCaps("NVIDIA H200", 132)
    _on_machine(monkeypatch, h200)
    _record_a_tile_for(path, h200)
    assert emit(*argv) == without_gpu
    assert emit(*argv, "--tuned") != without_gpu  # the record, when asked for


def test_the_tile_pass_never_asks_the_machine(monkeypatch) -> None:
    """``tile-gemm`` without ``sms`` tiles for an H200 on any machine: only
    ``fusec.compile`` resolves the device (once), and hands the pass its SM count."""
    import fusec

    def probe() -> caps.DeviceCaps:
        raise AssertionError("the pass probed the machine")

    path = HERE / "tile_gemm_1024.mlir"
    pipeline = "fusec-default,tile-gemm"
    _on_machine(monkeypatch, None)
    on_no_gpu = fusec.compile(path, target="reference", pipeline=pipeline).ir
    monkeypatch.setattr(caps, "probe_device", probe)
    assert fusec.compile(path, target="reference", pipeline=pipeline).ir == on_no_gpu
    given = fusec.compile(path, target="cuda", executable=False, sms=132)
    assert 'choice = "heuristic"' in given.ir
