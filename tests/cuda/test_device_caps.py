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
    small = caps.DeviceCaps("a GPU of 20 SMs", 20)
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
