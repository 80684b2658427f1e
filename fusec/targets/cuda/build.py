"""Building a linked kernel (the GEMM, the conv, attention, the relayout copy, the GEMM's
auxiliary kernels): the Numba ``@cuda.jit`` kernel, its linked C++ and the cubin.

The kernel is a Numba CUDA kernel whose body calls the generated C++ device
function (``cpp.generate``) declared with ``cuda.declare_device(link=...)``.
Numba's own dispatcher cannot cache kernels with linked code on disk
(``Cannot pickle CUDACodeLibrary with linking files``), so fusec links the
kernel itself, exactly as Numba does with LTO, and caches the cubin:

1. the Numba kernel is compiled to LTO-IR (``numba.cuda.compile(...,
   output="ltoir")``, with ``launch_bounds=(threads, 1)``: ``setmaxnreg``
   only works when the kernel has a register cap at entry);
2. the C++ is compiled to LTO-IR by NVRTC for ``sm_90a`` (wgmma and
   setmaxnreg are sm_90a-only);
3. nvJitLink links both with LTO into a cubin for ``sm_90a``, which inlines
   the device function into the kernel (same SASS as a plain nvcc build).

The cubin goes into fusec's blob cache, keyed by the generated sources and
the tool versions. None of this needs a GPU, so CPU-only CI compiles every
variant, reads ptxas's report (``verbose``) and fails on a ptxas warning that
wgmma was serialised.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Protocol

from fusec.errors import FusecError

ARCH = "sm_90a"
#: ptxas says this when it had to serialise wgmma (a silent ~2x slowdown): a build error.
_SERIALISED = re.compile(r"wgmma[^\n]*serializ|serializ[^\n]*wgmma", re.IGNORECASE)


class LinkedKernel(Protocol):
    """What ``build`` needs of a kernel whose body is generated C++ (``cpp.GemmSpec``, the
    auxiliary kernels of ``fusec.targets.cuda.gemm.aux``)."""

    @property
    def key(self) -> str: ...

    @property
    def function_name(self) -> str: ...

    @property
    def threads(self) -> int: ...

    def cpp_source(self) -> str:
        """The ``.cu`` source defining ``extern "C" __device__ int function_name(int* ret,
        u64 smem, <arg_count()[0] u64>, <arg_count()[1] int>)``."""

    def arg_count(self) -> tuple[int, int]:
        """(u64, int32) kernel parameters, after the shared-memory address."""

    @property
    def waits_in_body(self) -> bool:
        """The C++ body waits for the kernels before it (``fs_grid_dependency_wait``), not
        the Numba wrapper."""


@dataclass(frozen=True)
class Build:
    """A linked kernel: its cubin, the linker's report and the entry's mangled name."""

    spec: LinkedKernel
    cubin: bytes
    log: str
    cpp_source: str
    python_source: str


def python_source(spec: LinkedKernel, cu_path: str) -> str:
    """The Numba kernel module for ``spec``: one ``@cuda.jit``-able function ``kernel``."""
    n64, n32 = spec.arg_count()
    params = [f"p{k}" for k in range(n64)] + [f"i{k}" for k in range(n32)]
    sig_types = ", ".join(["types.uint64"] * (n64 + 1) + ["types.int32"] * n32)  # + smem
    if spec.waits_in_body:
        wait = "# the body waits for the kernels before it (fs_grid_dependency_wait)"
    else:
        wait = "grid_dependency_wait()  # (the kernels before it: done)"
    return f'''"""Numba kernel of fusec {spec.function_name}."""
from numba import cuda, types

from fusec.targets.cuda.dependent import grid_dependency_wait
from fusec.targets.cuda.intrinsics import shared_address

body = cuda.declare_device(
    "{spec.function_name}", types.int32({sig_types}), link={cu_path!r}
)


def kernel({", ".join(params)}):
    {wait}
    smem = cuda.shared.array(0, dtype=types.uint8)
    body(shared_address(smem), {", ".join(params)})
'''


def kernel_signature(spec: LinkedKernel) -> str:
    n64, n32 = spec.arg_count()
    return "void(" + ", ".join(["uint64"] * n64 + ["int32"] * n32) + ")"


def build(spec: LinkedKernel, cache: Any = None) -> Build:
    """The linked cubin of ``spec`` (from the blob cache when it was built before)."""
    from fusec.runtime.cache import cache_key, default_cache
    from fusec.runtime.source_digest import kernel_layer_digest
    from fusec.targets.cuda.env import cuda_support

    reason = cuda_support()
    if reason is not None:
        raise FusecError(f"cannot build the GEMM kernel: {reason}")
    cache = cache if cache is not None else default_cache()
    source = spec.cpp_source()
    versions = _tool_versions()
    # the Numba wrapper calls the kernel layer's Python intrinsics: their digest too
    layer = kernel_layer_digest("cuda")
    key = cache_key(source, python_source(spec, "<cu>"), ARCH, versions, layer, "gemm-cubin")
    logs: list[str] = []

    def link() -> bytes:
        cubin, log = _link(spec, source, cache)
        logs.append(log)
        return cubin

    cubin = cache.get_or_build(key, link)
    log_key = cache_key(key, "log")
    log = cache.get_or_build(log_key, lambda: (logs[0] if logs else "").encode()).decode()
    return Build(spec, cubin, log, source, python_source(spec, "<cu>"))


def ptx(spec: LinkedKernel) -> str:
    """PTX of the generated C++ for sm_90a (NVRTC alone: no driver, no GPU needed)."""
    from cuda.bindings import nvrtc

    source = spec.cpp_source().encode()
    err, program = nvrtc.nvrtcCreateProgram(source, f"{spec.function_name}.cu".encode(), 0, [], [])
    _nvrtc_check(nvrtc, err)
    options = [b"-arch=sm_90a", b"-rdc=true", b"-std=c++17"]
    (err,) = nvrtc.nvrtcCompileProgram(program, len(options), options)
    if int(err) != 0:
        _, size = nvrtc.nvrtcGetProgramLogSize(program)
        log = b" " * size
        nvrtc.nvrtcGetProgramLog(program, log)
        raise FusecError(f"NVRTC rejected the generated GEMM: {log.decode(errors='replace')}")
    err, size = nvrtc.nvrtcGetPTXSize(program)
    _nvrtc_check(nvrtc, err)
    text = b" " * size
    (err,) = nvrtc.nvrtcGetPTX(program, text)
    _nvrtc_check(nvrtc, err)
    nvrtc.nvrtcDestroyProgram(program)
    return text.rstrip(b"\x00").decode()


def _nvrtc_check(nvrtc, err) -> None:
    if int(err) != 0:
        raise FusecError(f"NVRTC error {err}")


def _tool_versions() -> str:
    from cuda.bindings import nvjitlink, nvrtc

    err, major, minor = nvrtc.nvrtcVersion()
    return f"nvrtc {major}.{minor} nvjitlink {nvjitlink.version()}"


def linked_ptx(spec: LinkedKernel, cache: Any = None) -> str:
    """PTX of the whole kernel after link-time optimisation (the Numba kernel with the C++
    inlined), as nvJitLink hands it to ptxas: what ``--emit ptx`` shows. No GPU needed."""
    from fusec.runtime.cache import cache_key, default_cache
    from fusec.runtime.source_digest import kernel_layer_digest

    cache = cache if cache is not None else default_cache()
    source = spec.cpp_source()
    layer = kernel_layer_digest("cuda")
    key = cache_key(source, python_source(spec, "<cu>"), ARCH, _tool_versions(), layer, "gemm-ptx")
    ptx = cache.get_or_build(key, lambda: _link(spec, source, cache, "ptx")[0])
    return ptx.replace(b"\x00", b"").decode()


def _link(spec: LinkedKernel, source: str, cache: Any, output: str = "cubin") -> tuple[bytes, str]:
    try:
        from cuda.core import Linker, LinkerOptions, ObjectCode, Program, ProgramOptions
    except ImportError:  # cuda-core < 1.0
        from cuda.core.experimental import (
            Linker,
            LinkerOptions,
            ObjectCode,
            Program,
            ProgramOptions,
        )

    from fusec.targets.cuda.env import numba_cuda

    cuda = numba_cuda()
    name = spec.function_name
    options = ProgramOptions(
        name=f"{name}.cu",
        arch=ARCH,
        relocatable_device_code=True,
        link_time_optimization=True,
        std="c++17",
    )
    try:
        cu_ltoir = Program(source, "c++", options=options).compile("ltoir")
    except Exception as err:  # a generator bug: show NVRTC's message
        raise FusecError(f"NVRTC rejected the generated GEMM {name}: {err}") from None
    namespace = _kernel_namespace(spec, source, cache)
    kernel_ltoir, _ = cuda.compile(
        namespace["kernel"],
        kernel_signature(spec),
        device=False,
        cc=(9, 0),
        output="ltoir",
        abi="numba",
        launch_bounds=(spec.threads, 1),
    )
    extra = {"ptx": True} if output == "ptx" else {}  # (the cubin path as in older cuda-core)
    link_options = LinkerOptions(
        name=name,
        arch=ARCH,
        link_time_optimization=True,
        verbose=True,
        optimization_level=3,
        **extra,
    )
    linker = Linker(
        ObjectCode.from_ltoir(kernel_ltoir, name="kernel"), cu_ltoir, options=link_options
    )
    try:
        result = linker.link(output)
    except Exception as err:
        raise FusecError(f"nvJitLink could not link GEMM {name}: {err}") from None
    log = linker.get_info_log() or ""
    if _SERIALISED.search(log):
        raise FusecError(f"ptxas serialised wgmma in GEMM {name}:\n{log}")
    return bytes(result.code), log


def _kernel_namespace(spec: LinkedKernel, source: str, cache: Any) -> dict:
    """Execute the Numba kernel module; its ``.cu`` is written to ``<cache>/gemm/`` for
    ``declare_device(link=...)`` (used if the kernel is ever launched through Numba)."""
    from fusec.runtime.cache import _atomic_write

    path = cache.root / "gemm" / f"{spec.function_name}.cu"
    try:
        if not path.exists() or path.read_text() != source:
            _atomic_write(path, source.encode(), exclusive=False)
    except OSError as err:
        raise FusecError(f"cannot write the GEMM source under {cache.root}: {err}") from None
    namespace: dict = {"__name__": f"_fusec_{spec.function_name}"}
    code = python_source(spec, str(path))
    exec(compile(code, f"<fusec gemm {spec.function_name}>", "exec"), namespace)
    return namespace
