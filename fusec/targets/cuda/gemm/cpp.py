"""The CUDA C++ of the Hopper GEMM: one device function per (tile config, layout, epilogue).

The function is the whole block program of a warp-specialised, persistent
GEMM; a Numba ``@cuda.jit`` kernel calls it (``build.py``: the kernel module, the
C++ compiled to LTO-IR by NVRTC) and nvJitLink inlines it there (LTO). It needs no
headers (NVRTC has no C++ standard library): 16-bit conversions, barriers, TMA and
wgmma are inline PTX.

Block program (``threads = 128 * (consumers + 1)``):

* warpgroup 0 is the producer: ``setmaxnreg.dec`` to 40 registers, then one
  thread walks the block's tiles and, per 64-deep K step, waits for a free
  stage (``empty`` mbarrier), announces the stage's bytes on its ``full``
  mbarrier and issues the TMA bulk tensor loads of the A and B tiles
  (128-byte swizzle; out-of-bounds rows/columns/K are zero-filled by TMA, so
  ragged M, N and K need no predication in the main loop);
* warpgroups 1..consumers are consumers: ``setmaxnreg.inc`` to 232 (152 beside
  three: ``ptx.consumer_registers``), each owns
  ``bm / consumers`` rows of the block tile; per K step they wait on ``full``,
  issue 4 ``wgmma.mma_async.m64nBNk16`` per 64-row block reading A and B from
  shared memory through matrix descriptors, keep one wgmma group in flight
  (``wait_group 1``) and release the previous stage on its ``empty`` barrier;
* after the last K step the consumers run the epilogue on their registers:
  ``y = epilogue(acc, row, col, batch)`` (generated C++, see ``Epilogue``),
  rounded to the output type and stored with bounds checks (pairs of
  adjacent columns as one 32/64-bit store when the row length allows).

The grid is persistent (``min(tiles, SMs)`` blocks walk tiles ``blockIdx.x +
i * gridDim.x``) in grouped order: ``group_m`` tile rows at a time, so that
blocks running together reuse A and B tiles from L2.

Opt-in variants (``TileConfig.schedule/epilogue/math``; the default kernel's
source does not change):

* ``schedule="pingpong"`` (CUTLASS's KernelTmaWarpSpecializedPingpong): each
  consumer warpgroup owns whole ``bm x bn`` tiles, alternate ones of the
  block's walk; named barriers 1 and 2 make them take turns on the tensor
  cores (a consumer starts its main loop once the other has issued its own),
  so one's epilogue runs during the other's MMA. The ring of stages is shared
  in tile order; an ``empty`` barrier expects one arrival.
* ``epilogue="smem"``: the epilogue first replaces the accumulators by the
  values to store, then each warp stages 16-row x 128-byte chunks through two
  2 KB shared-memory buffers (128-byte swizzle, ``stmatrix`` for 16-bit
  outputs) and lane 0 stores each with one TMA bulk tensor store (the output's
  tensor map clips the ragged edges); without a map (rows not 16-byte
  aligned) the warp copies the chunk out with masked 16-byte stores.
* ``loop="rolled"`` (with the "smem" epilogue): the accumulators are staged rounded to
  the output type, then each warp applies the epilogue to its staged chunk in place, 16
  bytes of a row per lane and step, in a rolled loop (``gemm_rolled_apply``): the kernel's
  code no longer grows with the tile times the epilogue's length.
* ``vectors="smem"`` (with a LayerNorm prologue): at the head of each tile the
  consumer warpgroup copies the tile's rewrite vectors (c, d of its BN columns, mean
  and rstd of its rows) into its shared-memory region with 16-byte ``cp.async``
  (zero-filled past the edges), which complete during the main loop; the epilogue
  reads them from there (``ld.shared``) instead of loading each element's from global
  memory behind its bounds predicate. Named barrier ``3 + cw`` orders a tile's reads
  before the next tile's copies, and the copies before the reads.
* ``prefetch="tile"``: ``PREFETCH_AHEAD`` K steps before a tile's main loop ends, the
  consumers prefetch into L2 the tile's lines of each epilogue input that has the
  output's shape (a residual): the epilogue's element loads then wait on L2, not DRAM.
* ``split_k`` > 1 (``sk=N``; the heuristic's choice for under-filled problems): the
  blocks walk ``tiles x split_k`` work units, each a tile's share of the K steps; after
  its main loop a unit stores its partial sums to the workspace (``split_ws``) and counts
  itself in on the tile's counter (``split_counters``); the last to arrive adds every
  split's partial in split order and runs the epilogue (``include/fusec/split_k.cuh``).
* ``math="fast"``: the epilogue expression uses ``ex2.approx``,
  ``tanh.approx`` and ``__fdividef`` (``CppExprGenerator(fast_math=True)``)
  where the output is 16-bit.

Operand layouts: A is K-major (row-major M x K) or M-major (stored K x M,
``transpose_a``); B is K-major (stored N x K, ``transpose_b``) or N-major
(stored K x N, the plain ``a @ b``). MN-major operands use wgmma's transpose
bits with the MN-major descriptor (LBO = stride between 64-element chunks,
SBO = stride between 8-row K groups), so no operand is ever copied.

f32 operands (``precision="tf32"``, issue 28) run as tf32: ``wgmma...k8.f32.tf32.tf32``
reads the f32 bit patterns from the same 128-byte swizzled rows (32 values a row, BK =
32, a k8 step 32 bytes into the row, as a k16 step of 16-bit values), accumulating in
f32. wgmma has no transpose for tf32, so both operands must be K-major (A stored M x K,
B stored N x K: ``transpose_b``); the launch first copies an MN-major one K-major.

Float8 operands (issue 31) are read as their codes: ``wgmma...k32.f32.e4m3.e4m3`` (or
e5m2) takes 32 codes of each K-major row a step, from the same 128-byte swizzled rows (128
codes a row, BK = 128; TMA moves them as bytes), accumulating in f32; K-major only, as
tf32. The quantization scales are the epilogue's (the template's plan).

An int4 weight-only B (``GemmSpec.w4``, issue 31's W4A16 past 16 rows): the producer
warpgroup's 128 threads copy the weight's 4-bit codes (packed at load, constant_layouts
"w4gemm"), scales and zero points by ``cp.async`` two K steps ahead into the tail of each
stage and write the stage's B tile dequantized over them, in the layout TMA would have
written (``include/fusec/gemm_w4.cuh``); thread 0 still issues A's TMA loads. No
dequantized copy of the weight is ever stored. With ``W4B.in_registers`` the consumers
dequantize instead, into wgmma's A fragments (the product computed transposed: the weight's
columns as A's rows, the activations' TMA tile as B; ``include/fusec/gemm_w4_rs.cuh``,
codes packed "w4rs"): BN is 64 weight columns a consumer warpgroup, BM (at most 256) rows
of activations, the direct epilogue.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from fusec.environ import switch
from fusec.targets.cuda.epilogue import Epilogue
from fusec.targets.cuda.gemm.config import TileConfig, Variant
from fusec.targets.cuda.headers import ELEMENT_TYPES, enumerators, expand, include, indent_lines
from fusec.targets.cuda.linked import LinkedSpec
from fusec.targets.cuda.ptx import PRODUCER_REGISTERS, consumer_registers, wgmma_rs, wgmma_ss

#: operand types: f32 operands run as tf32 (``precision="tf32"``, a tile with bk = 32),
#: float8 codes (issue 31) on a tile with bk = 128
FP8_DTYPES = ("f8E4M3FN", "f8E5M2")
DTYPES = ("f16", "bf16", "f32", *FP8_DTYPES)
OUT_DTYPES = ("f16", "bf16", "f32", *FP8_DTYPES)
_ELEMENT_BYTES = {"f16": 2, "bf16": 2, "f32": 4, "f8E4M3FN": 1, "f8E5M2": 1}
#: the kernel layer's headers the GEMM stands on (``include/fusec``)
GEMM_HEADERS = ("gemm",)


def element_bytes(dtype: str) -> int:
    """Bytes of one element of an operand or output type."""
    return _ELEMENT_BYTES[dtype]


BIAS_RELU = Epilogue(
    body=(
        "const float b = fs_ld_{dtype}(e0, col);\n"
        "const float t = acc + b;\n"
        "y = t < 0.0f ? 0.0f : t;"
    ),
    extras=("{dtype}",),
    name="bias_relu",
)


def bias_relu(dtype: str) -> Epilogue:
    """The hand-written bias (per column) + relu epilogue of the first experiments."""
    return Epilogue(
        BIAS_RELU.body.format(dtype=dtype),
        tuple(e.format(dtype=dtype) for e in BIAS_RELU.extras),
        "bias_relu",
    )


#: the int4 B's producer warpgroup holds a K step's share of codes, scales and zero points
#: (24 registers) and their addresses while it dequantizes: 72 + 2 x 216 = 3 x 168, as the
#: conv's loading producer (``conv.cpp.LD_PRODUCER_REGISTERS``). (A second producer
#: warpgroup was tried, f7a4fba: ptxas compiles every instruction within 65536 / threads
#: registers whatever ``setmaxnreg`` grants later, so a 512-thread block cannot hold an
#: m64n256 wgmma's 128 accumulators; on 128x128 tiles it ran slower.)
W4_PRODUCER_REGISTERS = 72
#: where a row's scale is: an expression of the row ``n``, the K block ``blk`` and ``N``
#: (``w4.scale_layout``), integers and those names alone
_W4_INDEX = re.compile(r"^[0-9nNblk *+]+$")
#: 16-bit floats with a unit last place whose low 4 mantissa bits take a code
_W4_MAGIC = {"bf16": 0x4300, "f16": 0x6400}


@dataclass(frozen=True)
class W4B:
    """B as a weight's 4-bit codes, dequantized into each stage by the producer warpgroup
    (``gemm_w4.cuh``): scales and zero points per ``block`` values of K (a multiple of
    64: one a K step and row), i4 (stored ``q + 8``) or ui4 codes, a row's scale and zero
    point at ``index`` of their arrays (an expression of ``n``, ``blk`` and ``N``)."""

    block: int
    signed: bool
    index: str
    #: the consumers dequantize into wgmma's A registers (``gemm_w4_rs.cuh``), not the
    #: producer into each B stage
    in_registers: bool = False

    def __post_init__(self) -> None:
        if self.block <= 0 or self.block % 64:
            raise ValueError(f"int4 B: blocks of {self.block} K values, not a multiple of 64")
        if not _W4_INDEX.match(self.index):
            raise ValueError(f"int4 B: scale index {self.index!r}")


@dataclass(frozen=True)
class GemmSpec(LinkedSpec):
    """Everything the generated C++ specialises on."""

    config: TileConfig = field(default_factory=TileConfig)
    dtype: str = "f16"  # A and B element type
    out_dtype: str = "f16"
    a_major: str = "k"  # "k": A is M x K row-major; "m": A is stored K x M
    b_major: str = "k"  # "k": B is stored N x K; "n": B is stored K x N
    batch_a: bool = False  # A has the batch dimension (otherwise it is broadcast)
    batch_b: bool = False
    epilogue: Epilogue = field(default_factory=Epilogue)
    #: B's element type where it differs from A's ``dtype``: float8 codes only (e4m3 x e5m2)
    b_dtype: str = ""
    #: a grouped GEMM (a mixture of experts' projections, ``gemm.cuh``): the row tiles in use
    #: and each one's B batch (its expert) come from a device table (the kernel's ``groups``)
    grouped: bool = False
    #: the gated (SwiGLU) epilogue of a gate/up projection (``gemm.cuh``: gemm_store_gated):
    #: B holds N gate rows, then N up rows (2 N x K, K-major); the output, N wide, is
    #: ``epilogue(silu(gate) * up)``
    swiglu: bool = False
    #: B is a constant of the program (no kernel writes it): the kernel waits for the
    #: kernels before it itself, its producer after issuing the first stages' B loads
    #: (``gemm.cuh``, programmatic dependent launch: ``fusec.targets.cuda.dependent``)
    early_b: bool = False
    #: B is an int4 weight dequantized by the producer (``W4B``), or None
    w4: W4B | None = None

    def __post_init__(self) -> None:
        if self.dtype not in DTYPES or self.out_dtype not in OUT_DTYPES:
            raise ValueError(f"unsupported GEMM types {self.dtype} -> {self.out_dtype}")
        if self.b_dtype and {self.dtype, self.b_dtype} != set(FP8_DTYPES):
            raise ValueError(f"mixed operand types {self.dtype} x {self.b_dtype}: float8 only")
        if self.a_major not in ("k", "m") or self.b_major not in ("k", "n"):
            raise ValueError("a_major is 'k' or 'm', b_major is 'k' or 'n'")
        for extra in self.epilogue.extras:
            if extra not in ("f16", "bf16", "f32"):
                raise ValueError(f"epilogue input type {extra!r}")
        if self.out_dtype in FP8_DTYPES and (
            (self.config.epilogue, self.config.loop) != ("direct", "unrolled")
            or self.epilogue.softmax
        ):
            raise ValueError("float8 codes are stored by the direct epilogue, unrolled")
        if (self.config.ln == "tile") != bool(self.epilogue.ln_affine):
            raise ValueError("ln=tile and the epilogue's gamma/beta slots come together")
        rolled_blockers = self.epilogue.ln_slots or self.epilogue.ln_affine or self.epilogue.softmax
        if self.config.loop == "rolled" and rolled_blockers:
            raise ValueError("loop=rolled: no LayerNorm rewrite or softmax in the epilogue")
        if self.config.ln == "tile" and self.a_major != "k":
            raise ValueError("ln=tile normalises a K-major A")
        if (self.dtype == "f32") != self.config.tf32:
            raise ValueError("f32 operands (tf32 maths) and a tf32 tile (bk=32) come together")
        if self.dtype == "f32" and (self.a_major, self.b_major) != ("k", "k"):
            raise ValueError("tf32 operands are K-major (wgmma has no transpose for them)")
        if (self.dtype in FP8_DTYPES) != self.config.fp8:
            raise ValueError("float8 operands and a float8 tile (bk=128) come together")
        if self.dtype in FP8_DTYPES and (self.a_major, self.b_major) != ("k", "k"):
            raise ValueError("float8 operands are K-major (wgmma has no transpose for them)")
        if self.grouped and grouped_problem(self):
            raise ValueError(f"grouped GEMM: {grouped_problem(self)}")
        if self.swiglu and swiglu_problem(self):
            raise ValueError(f"gated epilogue: {swiglu_problem(self)}")
        if self.early_b and (self.grouped or self.config.ln == "tile"):
            raise ValueError("early B: not with a groups table or ln=tile (read before B)")
        if self.w4 is not None and (problem := w4_problem(self)) is not None:
            raise ValueError(f"int4 B: {problem}")

    PREFIX = "gemm"

    @property
    def threads(self) -> int:
        return self.config.threads

    def cpp_source(self) -> str:
        return expand(generate(self))

    def arg_count(self) -> tuple[int, int]:
        return kernel_arg_count(self)

    @property
    def waits_in_body(self) -> bool:
        """The C++ body calls ``fs_grid_dependency_wait`` itself (early B), so the Numba
        wrapper must not wait first."""
        return self.early_b


def w4_problem(spec: GemmSpec) -> str | None:
    """Why ``spec`` cannot read an int4 B (``GemmSpec.w4``), or None: 16-bit activations,
    B K-major in steps of 64 K (a tile's BN, a multiple of 64, is whole 64-row boxes), one
    batch of it, and none of the variants that load B otherwise (early, gated, grouped) or
    A first (ln=tile)."""
    c = spec.config
    if spec.dtype not in _W4_MAGIC or spec.b_dtype:
        return f"{spec.dtype} activations (f16 or bf16)"
    if spec.b_major != "k" or spec.batch_b or c.bk != 64:
        return "B K-major, not batched, a tile of 64 K"
    if spec.early_b or spec.swiglu or spec.grouped or c.ln == "tile":
        return "not with early B, the gated epilogue, a groups table or ln=tile"
    if spec.w4 is not None and spec.w4.in_registers:
        return registers_problem(spec)
    return None


def registers_tile_problem(c: TileConfig) -> str | None:
    """Why a GEMM whose consumers dequantize an int4 B into registers (``W4B.in_registers``,
    ``gemm_w4_rs.cuh``) cannot run tile ``c``, or None."""
    if c.bn != 64 * c.consumers or c.bm % 16 or c.bm > 256:
        return f"a {c.bm}x{c.bn} tile (64 weight columns a consumer, at most 256 rows)"
    if c.pingpong or c.epilogue != "direct":
        return "the cooperative schedule, the direct epilogue"
    return None


def registers_problem(spec: GemmSpec) -> str | None:
    """Why the consumers cannot dequantize ``spec``'s int4 B into registers
    (``W4B.in_registers``, ``gemm_w4_rs.cuh``), or None."""
    epi = spec.epilogue
    if (problem := registers_tile_problem(spec.config)) is not None:
        return problem
    if spec.a_major != "k" or spec.batch_a or epi.softmax or epi.ln_slots:
        return "activations K-major, one batch, no row softmax or LayerNorm rewrite"
    return None


def grouped_problem(spec: GemmSpec) -> str | None:
    """Why ``spec`` cannot be a grouped GEMM (``GemmSpec.grouped``), or None: its walk is
    the cooperative schedule's over a batched B (one batch an expert) and a plain A, with
    no split of K and no row-wise epilogue state."""
    c, epi = spec.config, spec.epilogue
    if c.pingpong or c.split_k > 1 or c.ln == "tile":
        return "the cooperative schedule, K unsplit, no ln=tile"
    if not spec.batch_b or spec.batch_a:
        return "B batched (one batch an expert), A not"
    if epi.softmax or epi.ln_slots:
        return "no softmax or LayerNorm rewrite in the epilogue"
    return None


#: ``$FUSEC_GEMM_EPILOGUE_ORDER``: how the direct epilogue orders its work, "first" (the
#: default: E over a 64-row block's accumulators, then the stores) or "interleaved" (each
#: column pair's E, then its store: an A/B switch). Interleaved, no load of E can move above
#: the previous store (the compiler cannot rule out that they alias), so each pays its
#: latency in turn: 16 bias loads a thread of a 64x64 tile, one after another (the SASS of
#: BERT-base's batch-1 MLP up + GELU), where the tile's main loop is ~12 K steps.
EPILOGUE_ORDER_ENV = "FUSEC_GEMM_EPILOGUE_ORDER"
#: accumulators a consumer thread has at most for "first": the one-consumer tiles of small
#: problems (64x64, 64x128), one tile a block, where the loads' latency is all exposed; a
#: 128x256 tile's 128 values and their inputs in flight at once spill (ptxas: 716 bytes for
#: bias + GELU + residual), and large problems stage their epilogue (epi=smem) anyway
FIRST_MAX_ACCUMULATORS = 32


def epilogue_first() -> bool:
    """``$FUSEC_GEMM_EPILOGUE_ORDER`` (validated: "first", the default, or "interleaved")."""
    return switch(EPILOGUE_ORDER_ENV, ("first", "interleaved")) == "first"


def swiglu_problem(spec: GemmSpec) -> str | None:
    """Why ``spec`` cannot have the gated epilogue (``GemmSpec.swiglu``), or None."""
    c = spec.config
    if c.pingpong or c.split_k > 1 or c.ln == "tile" or c.epilogue != "direct":
        return "the cooperative schedule, K unsplit, the direct epilogue"
    if spec.b_major != "k" or spec.epilogue.softmax or spec.epilogue.ln_slots:
        return "B K-major (gate rows, then up rows), no softmax or LayerNorm rewrite"
    return None


def _wgmma(spec: GemmSpec) -> str:
    """``Config::mma``: one m64nBNk16 instruction accumulating into ``d`` (BN/2 floats)."""
    trans_a = 1 if spec.a_major == "m" else 0
    trans_b = 1 if spec.b_major == "n" else 0
    text = wgmma_ss("mma", spec.config.bn, spec.dtype, trans_a, trans_b, spec.b_dtype or None)
    return indent_lines(text.strip("\n"), 2)


def _wgmma_rs(spec: GemmSpec) -> str:
    """``Config::mma_rs``: one m64nBMk16 with the weight's A fragments from registers and
    the activations' K-major tile as B (``gemm_w4_rs.cuh``)."""
    return indent_lines(wgmma_rs("mma_rs", spec.config.bm, spec.dtype, 0).strip("\n"), 2) + "\n"


def _ln_tile(spec: GemmSpec) -> bool:
    return spec.config.ln == "tile"


def _staged(spec: GemmSpec) -> bool:
    """The kernel stages its epilogue vectors in shared memory (``vectors="smem"`` and an
    epilogue that has some: the LayerNorm rewrite's)."""
    return spec.config.vectors == "smem" and bool(spec.epilogue.ln_slots)


def _fast_math(spec: GemmSpec) -> bool:
    """The kernel may use hardware approximations (``math="fast"``): only where the result
    is rounded to a 16-bit type or to float8 codes (as ``gemm_spec`` decides for the
    epilogue expression)."""
    return spec.config.math == "fast" and spec.out_dtype in ("f16", "bf16", *FP8_DTYPES)


def _prefetches(spec: GemmSpec) -> bool:
    return spec.config.prefetch == "tile" and bool(spec.epilogue.tile_inputs)


#: K steps before the end of a tile's main loop at which the "tile" prefetch is issued
#: (a 128x256x64 step is ~0.7 us on an H200: a few us ahead of the epilogue).
PREFETCH_AHEAD = 4
_SOFTMAX = {
    "": "fusec::SOFTMAX_NONE",
    "row": "fusec::SOFTMAX_ROW",
    "partials": "fusec::SOFTMAX_PARTIALS",
}


def _config(spec: GemmSpec) -> str:
    """``struct Config``: the compile-time parameters of ``fusec::gemm`` (gemm.cuh), as
    enumerators (a ``static constexpr`` member would be emitted as a global by NVRTC)."""
    c = spec.config
    ints = {
        "BM": c.bm, "BN": c.bn, "BK": c.bk, "STAGES": c.stages, "CONSUMERS": c.consumers,
        "GROUP_M": c.group_m, "WM": c.rows_per_consumer, "A_BYTES": c.a_stage_bytes,
        "B_BYTES": c.b_stage_bytes, "EPI_BYTES": c.epi_bytes if c.epilogue == "smem" else 0,
        "VEC_BYTES": c.vec_bytes, "LN_BYTES": c.ln_bytes,
        "PRODUCER_REGISTERS": _producer_registers(spec),
        "CONSUMER_REGISTERS": consumer_registers(c.consumers, _producer_registers(spec)),
        "PREFETCH_AHEAD": PREFETCH_AHEAD, "SPLIT_K": c.split_k,
    }  # fmt: skip
    flags = {
        "A_K_MAJOR": spec.a_major == "k", "B_K_MAJOR": spec.b_major == "k",
        "BATCH_A": spec.batch_a, "BATCH_B": spec.batch_b, "PINGPONG": c.pingpong,
        "SMEM_EPILOGUE": c.epilogue == "smem", "STAGED": _staged(spec),
        "LN_TILE": _ln_tile(spec), "FAST_MATH": _fast_math(spec), "PREFETCH": _prefetches(spec),
        "ROLLED": c.loop == "rolled", "GROUPED": spec.grouped, "SWIGLU": spec.swiglu,
        "EARLY_B": spec.early_b, "B_W4": _w4_path(spec) == "producer",
        "W4_RS": _w4_path(spec) == "registers",
        "EPILOGUE_FIRST": epilogue_first() and c.acc_registers <= FIRST_MAX_ACCUMULATORS,
    }  # fmt: skip
    int_lines = enumerators([f"{k} = {v}" for k, v in ints.items()])
    flag_lines = enumerators([f"{k} = {int(v)}" for k, v in flags.items()])
    eps = repr(float(spec.epilogue.ln_eps))
    return f"""struct Config {{
  enum : int {{
{int_lines}
  }};
  enum : int {{  // variants (0 or 1)
{flag_lines}
  }};
  enum : int {{ SOFTMAX = {_SOFTMAX[spec.epilogue.softmax]} }};
  static __host__ __device__ constexpr float ln_eps() {{ return {eps}f; }}
  using In = {ELEMENT_TYPES[spec.dtype]};
  using Out = {ELEMENT_TYPES[spec.out_dtype]};
{_w4_members(spec)}{_wgmma(spec)}
}};
"""


def _w4_path(spec: GemmSpec) -> str:
    """Who dequantizes an int4 B: "producer", "registers" (the consumers), or ""."""
    if spec.w4 is None:
        return ""
    return "registers" if spec.w4.in_registers else "producer"


def _producer_registers(spec: GemmSpec) -> int:
    """``setmaxnreg.dec`` of the producer warpgroup (one that dequantizes: more)."""
    return W4_PRODUCER_REGISTERS if _w4_path(spec) == "producer" else PRODUCER_REGISTERS


def _w4_members(spec: GemmSpec) -> str:
    """The int4 B's constants and scale index (``gemm_w4.cuh``), or nothing."""
    w4 = spec.w4
    if w4 is None:
        return ""
    ints = {
        "W4_BLOCK": w4.block, "W4_SIGNED": int(w4.signed), "W4_ZERO_BIAS": 8 * w4.signed,
        "W4_MAGIC": _W4_MAGIC[spec.dtype], "W4_BF16": int(spec.dtype == "bf16"),
    }  # fmt: skip
    return f"""  enum : int {{  // the int4 B (gemm_w4.cuh)
{enumerators([f"{k} = {v}" for k, v in ints.items()])}
  }};
  static __device__ __forceinline__ int w4_index(int n, int blk, int N) {{
    return {w4.index};
  }}
{_wgmma_rs(spec) if w4.in_registers else ""}"""


def _ln_correction(spec: GemmSpec) -> str:
    """The first statement of the epilogue: the LayerNorm rewrite of ``acc``, reading the
    vectors from global memory or from the warpgroup's staged copy (``ln_cols``, ``ln_rows``:
    shared addresses offset so that column ``col``'s c is at ``ln_cols + 4 col``, its d
    ``4 BN`` further, and row ``row``'s (mean, rstd) at ``ln_rows + 8 row``)."""
    epi = spec.epilogue
    if not epi.ln_slots:
        return ""
    stats, cd = epi.ln_slots
    if _staged(spec):
        head = f"""    const float2 ln_s = fs_lds_f32x2(ln_rows + 8u * (u32)row);
    const float ln_mu = ln_s.x;
    const float ln_rstd = ln_s.y;
    const float ln_c = fs_lds_f32(ln_cols + 4u * (u32)col);
    const float ln_d = fs_lds_f32(ln_cols + 4u * (u32)({spec.config.bn} + col));
"""
    else:
        head = f"""    const float ln_mu = fs_ld_f32(e{stats}, 2LL * row);
    const float ln_rstd = fs_ld_f32(e{stats}, 2LL * row + 1);
    const float ln_c = fs_ld_f32(e{cd}, col);
    const float ln_d = fs_ld_f32(e{cd}, {epi.ln_stride}LL + col);
"""
    if not epi.ln_exact:
        return head + "    acc = ln_rstd * (acc - ln_mu * ln_c) + ln_d;\n"
    x, w = epi.ln_exact
    k, n = epi.ln_kn
    exact = (
        f"fusec::gemm_ln_exact<Config::In, {int(spec.b_major == 'n')}>("
        f"e{x}, e{w}, row, col, {k}, {n}, ln_mu, ln_rstd)"
    )
    redo = f"""    acc = ln_rstd * (acc - ln_mu * ln_c) + ln_d;
    if (fusec::gemm_ln_inexact(acc, ln_mu, ln_rstd)) {{
      acc = {exact} + ln_d;
    }}
"""
    return head + redo


def _functor_methods(spec: GemmSpec) -> list[str]:
    """The functor's accessors that the variants read (``gemm.cuh``: E)."""
    epi, methods = spec.epilogue, []
    head = "  __device__ __forceinline__"
    if epi.softmax == "row":
        methods.append(f"""{head} float post(float s, int row, int col, int bat) const {{
    float y;
{indent_lines(epi.post_body, 4)}
    return y;
  }}""")
    if epi.softmax == "partials":
        last = len(epi.extras) - 1
        methods.append(f"{head} float2* partials() const {{ return (float2*)e{last}; }}")
    if _staged(spec):
        stats, cd = epi.ln_slots
        methods.append(f"  enum : int {{ LN_STRIDE = {epi.ln_stride} }};")
        methods.append(f"{head} u64 cd() const {{ return (u64)e{cd}; }}")
        methods.append(f"{head} u64 stats() const {{ return (u64)e{stats}; }}")
    if _ln_tile(spec):
        for name, slot in zip(("gamma", "beta"), epi.ln_affine, strict=True):
            load = f"fs_ld_{epi.extras[slot]}(e{slot}, i)"
            methods.append(f"{head} float {name}(int i) const {{ return {load}; }}")
    if _prefetches(spec):
        methods.append(_prefetch_method(spec))
    return methods


def _prefetch_method(spec: GemmSpec) -> str:
    """``prefetch``: the consumer warpgroup's threads issue ``prefetch.global.L2`` for every
    128-byte line of the rows it will store, in each full-tile epilogue input."""
    loops, c = [], spec.config
    rows = f"pm * {c.bm}" if c.pingpong else f"pm * {c.bm} + cw * {c.rows_per_consumer}"
    for slot in spec.epilogue.tile_inputs:
        es = _ELEMENT_BYTES[spec.epilogue.extras[slot]]
        per, wm, bn = 128 // es, spec.config.rows_per_consumer, spec.config.bn
        loops.append(f"""    for (int i = lt; i < {wm} * ({bn} / {per}); i += 128) {{
      const int row = {rows} + i / ({bn} / {per});
      const int col = pn * {bn} + (i % ({bn} / {per})) * {per};
      if (row < M && col < N)
        fs_prefetch_l2((u64)e{slot} + {es}ull * ((unsigned long long)row * N + col));
    }}""")
    body = "\n".join(loops)
    head = (
        "  __device__ __forceinline__ void prefetch(int lt, int pm, int cw, int pn, int M, int N)"
    )
    return f"""{head} const {{
{body}
  }}"""


def _functor(spec: GemmSpec) -> str:
    """``struct Epilogue``: the epilogue functor (its inputs' pointers, the generated body)."""
    epi = spec.epilogue
    members = "".join(f"  const void* e{k};\n" for k in range(len(epi.extras)))
    staged = " ln_cols, u32 ln_rows" if _staged(spec) else ", u32"
    body = _ln_correction(spec) + indent_lines(epi.body, 4)
    methods = "".join(m + "\n" for m in _functor_methods(spec))
    return f"""struct Epilogue {{
{members}  __device__ __forceinline__ float operator()(float acc, int row, int col, int bat, u32{
        staged
    }) const {{
    float y;
{body}
    return y;
  }}
{methods}}};
"""


def _params(spec: GemmSpec) -> list[str]:
    extras = [f"u64 e{k}" for k in range(len(spec.epilogue.extras))]
    out_map = ["u64 map_out"] if spec.config.epilogue == "smem" else []
    split = ["u64 split_ws", "u64 split_counters"] if spec.config.split_k > 1 else []
    groups = ["u64 groups"] if spec.grouped else []
    w4 = ["u64 w4_scale", "u64 w4_zero"] if spec.w4 else []
    head = ["int* ret", "u64 smem_raw", "u64 map_a", "u64 map_b", "u64 out", *out_map]
    return [*head, *extras, *w4, *split, *groups] + [
        "int M",
        "int N",
        "int K",
        "int batches",
    ]


def kernel_arg_count(spec: GemmSpec) -> tuple[int, int]:
    """(u64, int32) parameters of the kernel: the device function takes the shared-memory
    address, then these (map_a, map_b: B's tensor map, or an int4 B's packed codes, out,
    [map_out: the "smem" epilogue's output tensor map, 0 when the output cannot have one],
    extras..., [int4 B: its scales and zero points], [split-K: its workspace and tile
    counters], [grouped: the groups table], M, N, K, batches)."""
    split = 2 * (spec.config.split_k > 1)
    head = 3 + (spec.config.epilogue == "smem")
    w4 = 2 * (spec.w4 is not None)
    return head + len(spec.epilogue.extras) + w4 + split + spec.grouped, 4


def generate(spec: GemmSpec) -> str:
    """The ``.cu`` source of ``spec``'s device function as the template writes it: the
    kernel layer's ``fusec/gemm.cuh``, the instantiation's ``Config`` and ``Epilogue``,
    and the ``extern "C"`` wrapper (``cpp_source`` inlines the header)."""
    c = spec.config
    variant = f"\n// {c.schedule} schedule, {c.epilogue} epilogue, {c.math} math"
    variant_note = (
        variant * (c.variant != Variant())
        + "\n// LayerNorm normalised in the resident A tiles (ln=tile)" * _ln_tile(spec)
        + f"\n// K split {c.split_k} ways (split-K)" * (c.split_k > 1)
        + "\n// B constant: its first stages loaded before the grid dependency wait" * spec.early_b
    )
    layout = f"A {spec.a_major.upper()}-major, B {spec.b_major.upper()}-major"
    if spec.dtype == "f32":
        layout += ", tf32 Tensor Core maths (precision=tf32)"
    batch = f"batch A {int(spec.batch_a)} B {int(spec.batch_b)}"
    batch += ", grouped (row tiles and their B batch from the groups table)" * spec.grouped
    batch += ", gated: silu(gate) * up of B's two halves" * spec.swiglu
    pointers = ", ".join(f"(const void*)e{k}" for k in range(len(spec.epilogue.extras)))
    map_out = "map_out" if c.epilogue == "smem" else "0"
    split = "split_ws, split_counters" if c.split_k > 1 else "0, 0"
    split += ", groups" if spec.grouped else ""
    split += f"{', 0' * (not spec.grouped)}, w4_scale, w4_zero" if spec.w4 else ""
    types = f"{spec.dtype} x {spec.b_dtype}" if spec.b_dtype else spec.dtype
    if spec.w4:
        codes = "i4" if spec.w4.signed else "ui4"
        types = f"{spec.dtype} x {codes} (blocks of {spec.w4.block}, dequantized by the producer)"
    return f"""// fusec generated Hopper GEMM: {c.text}, {types} -> {spec.out_dtype}
// {layout}, {batch}, epilogue {spec.epilogue.name}{variant_note}
{include("gemm")}
{spec.epilogue.helpers}
{_config(spec)}
{_functor(spec)}
extern "C" __device__ __attribute__((always_inline))
int {spec.function_name}({", ".join(_params(spec))}) {{
  const Epilogue epi{{{pointers}}};
  return fusec::gemm<Config>(epi, smem_raw, map_a, map_b, out, {map_out}, M, N, K, batches,
                             {split});
}}
"""
