"""Safety net for refactoring the cuda target's C++ generators: the PTX of every linked kernel
the tests and graphs produce, hashed, so that a change of the generators' text (moving C++
into headers) can be shown not to change any kernel.

    python tools/cuda_ptx_check.py collect   # record the specs the tests and graphs make
    python tools/cuda_ptx_check.py hash      # NVRTC PTX of each spec -> tools/cuda_ptx_hashes.json
    python tools/cuda_ptx_check.py check     # compile again, compare with the stored hashes
    python tools/cuda_ptx_check.py check 2 GemmSpec   # 2 processes, the GemmSpec kernels only
    python tools/cuda_ptx_check.py check 2 GemmSpec,ConvSpec 8   # every 8th of those

``collect`` runs the cuda template tests that make specs (GEMM, its auxiliary kernels, conv,
attention, the relayout copy) with every spec class's ``cpp_source`` wrapped to record the
spec (its ``repr``, which evaluates back to an equal spec) and the cubin builds stubbed out
(only the specs matter, not the tests' verdicts), and compiles the example, golden and
FileCheck graphs for the cuda target. The specs go to ``tools/cuda_ptx_specs.json``.

``hash`` and ``check`` compile each spec's source as ``build.ptx`` does (NVRTC, ``-arch=sm_90a
-rdc=true -std=c++17``, no ``-lineinfo``: the PTX has no ``.file``/``.loc`` lines) and hash
the PTX; comment lines (``//``: the compiler's banner) are dropped before hashing. No GPU
is needed. With ``FUSEC_PTX_CANONICAL=1`` the virtual registers are renamed in order of
first appearance before hashing (two PTX texts that differ only in register numbers hash
alike) and ``FUSEC_PTX_HASHES`` names the file to write or compare with.

The stored hashes are the kernels after the moves of issue 27 (git has the earlier
files and the commit messages say what changed): the GEMM into ``gemm.cuh`` (against the
generator before it 7 GEMM kernels identical up to register numbering, 8 ln=tile ones with
two independent register moves in the other order); LN-prep into ``layernorm_prep.cuh``
(3 kernels: loop strength reduction picks the other of two equal-stride pointers);
attention, the relayout copy, the direct conv and the softmax finalise byte-identical;
the implicit-GEMM conv into ``conv.cuh`` (127 kernels: 12 byte-identical, 115 identical
up to register numbering). Recorded again (``collect``, ``hash``: 252 kernels) at 8cc7e71:
spec classes had gained fields since (their ``repr``, hence every name, had changed), so
``check`` matched no stored name (and a partial check raised a KeyError). Recorded again at
ae6554a (291 kernels: 278 specs from the tests, 13 from the graphs): e3c371c's folded-GEMM row
view and the heuristic's 128x192 and three-consumer tiles (bdb6c5c) had changed the specs
the graphs make. Recorded again (297 kernels) with the GEMM's ``loop`` variant (``TileConfig``
gained a field, so every GEMM's name changed): the 62 stored GEMM specs compiled at the
commit before and after give the same PTX but for the function's name.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SPECS = ROOT / "tools" / "cuda_ptx_specs.json"
HASHES = Path(os.environ.get("FUSEC_PTX_HASHES", ROOT / "tools" / "cuda_ptx_hashes.json"))

#: the test files whose bodies construct specs (the gpu ones skip before they do)
TEST_FILES = [
    "tests/targets/cuda/test_gemm_build.py",
    "tests/targets/cuda/test_gemm_variants.py",
    "tests/targets/cuda/test_gemm_vectors.py",
    "tests/targets/cuda/test_gemm_ln_tile.py",
    "tests/targets/cuda/test_gemm_host.py",
    "tests/targets/cuda/test_conv_build.py",
    "tests/targets/cuda/test_conv_layout.py",
    "tests/targets/cuda/test_conv_patchify.py",
    "tests/targets/cuda/test_attention_build.py",
    "tests/targets/cuda/test_linked_launch.py",
    "tests/targets/cuda/test_cuda_codegen.py",
    "tests/targets/cuda/test_tile_gemm.py",
]
GRAPH_GLOBS = [
    "examples/*.mlir",
    "tests/passes/golden/*.mlir",
    "tests/targets/cuda/filecheck/*.mlir",
]


def spec_classes() -> dict[str, type]:
    """Every class whose ``cpp_source`` is a linked kernel's C++, and the dataclasses their
    ``repr`` mentions, by name (the namespace ``repr`` evaluates in)."""
    from fusec.targets.cuda.attention import cpp as attention
    from fusec.targets.cuda.conv import config as conv_config
    from fusec.targets.cuda.conv import cpp as conv
    from fusec.targets.cuda.conv import transpose
    from fusec.targets.cuda.gemm import aux, config
    from fusec.targets.cuda.gemm import cpp as gemm

    return {
        "GemmSpec": gemm.GemmSpec,
        "Epilogue": gemm.Epilogue,
        "TileConfig": config.TileConfig,
        "LayerNormPrep": aux.LayerNormPrep,
        "SoftmaxFinalise": aux.SoftmaxFinalise,
        "AttentionSpec": attention.AttentionSpec,
        "ConvSpec": conv.ConvSpec,
        "DirectConvSpec": conv.DirectConvSpec,
        "ConvGeometry": conv_config.ConvGeometry,
        "ConvTile": conv_config.ConvTile,
        "RelayoutSpec": transpose.RelayoutSpec,
        "TransposeTiling": transpose.TransposeTiling,
    }


KERNEL_CLASSES = (
    "GemmSpec",
    "LayerNormPrep",
    "SoftmaxFinalise",
    "AttentionSpec",
    "ConvSpec",
    "DirectConvSpec",
    "RelayoutSpec",
)


class Recorder:
    """A pytest plugin (and a context for graph compiles) recording every spec whose C++
    is generated, with the builds stubbed out."""

    def __init__(self) -> None:
        self.specs: set[str] = set()
        classes = spec_classes()
        for name in KERNEL_CLASSES:
            self._wrap(classes[name])
        self._stub_builds()

    def _wrap(self, cls: type) -> None:
        original = cls.cpp_source  # type: ignore[attr-defined]
        specs = self.specs

        def cpp_source(spec: Any) -> str:
            specs.add(repr(spec))
            return original(spec)

        cls.cpp_source = cpp_source  # type: ignore[attr-defined]

    @staticmethod
    def _stub_builds() -> None:
        from fusec.errors import FusecError
        from fusec.targets.cuda import build

        def refuse(spec: Any, *args: Any, **kwargs: Any) -> Any:
            spec.cpp_source()
            raise FusecError("cuda_ptx_check collect: builds are stubbed out")

        build.build = refuse  # type: ignore[assignment]
        build.ptx = refuse  # type: ignore[assignment]
        build.linked_ptx = refuse  # type: ignore[assignment]


def collect() -> None:
    import pytest

    recorder = Recorder()
    pytest.main(["-q", "-p", "no:cacheprovider", "-m", "not gpu", *TEST_FILES], plugins=[recorder])
    before = len(recorder.specs)
    _compile_graphs()
    print(f"{before} specs from the tests, {len(recorder.specs) - before} more from graphs")
    SPECS.write_text(json.dumps(sorted(recorder.specs), indent=0) + "\n")
    print(f"{len(recorder.specs)} specs -> {SPECS.relative_to(ROOT)}")


def _compile_graphs() -> None:
    import fusec

    for pattern in GRAPH_GLOBS:
        for path in sorted(ROOT.glob(pattern)):
            if path.name.endswith(".expected.mlir"):
                continue
            try:
                compiled = fusec.compile(path.read_text(), target="cuda", executable=False)
                for kernel in compiled.kernels:
                    for _, text in kernel.extra_sources:
                        assert text
            except Exception as err:  # a graph the cuda target refuses: no spec to record
                print(f"{path.relative_to(ROOT)}: {type(err).__name__}: {err}"[:200])


_REGISTER = re.compile(r"%(r|rd|f|fd|p|rs|h|hh)(\d+)\b")
_FUNCTION = re.compile(r"^\s*(?:\.(?:visible|weak|extern)\s+)*\.(?:entry|func)\b")


def canonical(lines: list[str]) -> str:
    """The PTX with its virtual registers renamed in order of first appearance in each
    function (registers are per function: a module holds the conv's copy kernels beside its
    device function) and their declarations dropped: equal for two PTX texts that differ
    only in register numbers."""
    names: dict[str, str] = {}
    counts: dict[str, int] = {}

    def rename(match: re.Match[str]) -> str:
        if match.group(0) not in names:
            kind = match.group(1)
            counts[kind] = counts.get(kind, 0) + 1
            names[match.group(0)] = f"%{kind}#{counts[kind]}"
        return names[match.group(0)]

    out = []
    for line in lines:
        if _FUNCTION.match(line):
            names.clear()
            counts.clear()
        if ".reg ." not in line:
            out.append(_REGISTER.sub(rename, line))
    return "\n".join(out)


def _ptx_hash(spec_repr: str) -> tuple[str, str, str]:
    """(function name, sha256 of the PTX without comment lines, error or ""); with the
    environment variable FUSEC_PTX_CANONICAL set, of the PTX with registers renamed."""
    from cuda.bindings import nvrtc

    spec = eval(spec_repr, {"__builtins__": {}}, spec_classes())  # noqa: S307 (our own file)
    source = spec.cpp_source().encode()
    name = spec.function_name
    _, program = nvrtc.nvrtcCreateProgram(source, f"{name}.cu".encode(), 0, [], [])
    options = [b"-arch=sm_90a", b"-rdc=true", b"-std=c++17"]
    (err,) = nvrtc.nvrtcCompileProgram(program, len(options), options)
    if int(err) != 0:
        _, size = nvrtc.nvrtcGetProgramLogSize(program)
        log = b" " * size
        nvrtc.nvrtcGetProgramLog(program, log)
        return name, "", log.decode(errors="replace")[:2000]
    _, size = nvrtc.nvrtcGetPTXSize(program)
    text = b" " * size
    nvrtc.nvrtcGetPTX(program, text)
    nvrtc.nvrtcDestroyProgram(program)
    lines = text.rstrip(b"\x00").decode().splitlines()
    kept = [line for line in lines if not line.lstrip().startswith("//")]
    assert not any(line.lstrip().startswith((".file", ".loc")) for line in kept)
    text = canonical(kept) if os.environ.get("FUSEC_PTX_CANONICAL") else "\n".join(kept)
    return name, hashlib.sha256(text.encode()).hexdigest(), ""


def _hash_all(jobs: int, only: str = "", every: int = 1) -> dict[str, str]:
    prefixes = tuple(only.split(","))
    specs = [s for s in json.loads(SPECS.read_text()) if s.startswith(prefixes)][::every]
    results: dict[str, str] = {}
    with ProcessPoolExecutor(jobs) as pool:
        for (name, digest, error), spec in zip(pool.map(_ptx_hash, specs), specs, strict=True):
            if error:
                print(f"NVRTC rejected {name}: {spec[:200]}\n{error}")
                digest = "error"
            results[name] = digest
    return results


def specs_by_name() -> dict[str, str]:
    classes = spec_classes()
    specs = json.loads(SPECS.read_text())
    return {eval(s, {"__builtins__": {}}, classes).function_name: s for s in specs}  # noqa: S307


def main(argv: list[str]) -> int:
    command = argv[1] if len(argv) > 1 else "check"
    jobs = int(argv[2]) if len(argv) > 2 else 2
    only = argv[3] if len(argv) > 3 else ""  # spec class names (a,b): check only those
    every = int(argv[4]) if len(argv) > 4 else 1  # and of them every n-th
    if command == "collect":
        collect()
        return 0
    if command == "hash":
        hashes = _hash_all(jobs, only, every)
        HASHES.write_text(json.dumps(hashes, indent=1, sort_keys=True) + "\n")
        print(f"{len(hashes)} kernels hashed -> {HASHES}")
        return 1 if "error" in hashes.values() else 0
    if command == "check":
        got = _hash_all(jobs, only, every)
        want = json.loads(HASHES.read_text())
        if only or every > 1:
            want = {name: want[name] for name in got if name in want}
        differ = sorted(name for name in want if got.get(name) != want[name])
        print(f"{len(want)} kernels checked, {len(want) - len(differ)} identical PTX")
        for name in differ:
            print(f"  DIFFERS: {name} {specs_by_name().get(name, '')[:160]}")
        unknown = sorted(set(got) - set(want))
        if unknown:
            # a spec class gained a field (its repr, hence its name, changed): the stored
            # specs and hashes are of other names; record them again (collect, hash)
            print(f"  {len(unknown)} specs have no stored hash (the specs' names changed?):")
            print(f"  {', '.join(unknown[:8])}: run collect and hash at a commit you trust")
        return 1 if differ or set(got) != set(want) else 0
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
