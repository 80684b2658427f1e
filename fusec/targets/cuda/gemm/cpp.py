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
* warpgroups 1..consumers are consumers: ``setmaxnreg.inc`` to 232, each owns
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
* ``math="fast"``: the epilogue expression uses ``ex2.approx``,
  ``tanh.approx`` and ``__fdividef`` (``CppExprGenerator(fast_math=True)``)
  where the output is 16-bit.

Operand layouts: A is K-major (row-major M x K) or M-major (stored K x M,
``transpose_a``); B is K-major (stored N x K, ``transpose_b``) or N-major
(stored K x N, the plain ``a @ b``). MN-major operands use wgmma's transpose
bits with the MN-major descriptor (LBO = stride between 64-element chunks,
SBO = stride between 8-row K groups), so no operand is ever copied.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field

from fusec.targets.cuda.gemm.config import MMA_K, MMA_M, TileConfig, Variant
from fusec.targets.cuda.headers import expand, include
from fusec.targets.cuda.ptx import wgmma_ss

PRODUCER_REGISTERS = 40
CONSUMER_REGISTERS = 232
DTYPES = ("f16", "bf16")
OUT_DTYPES = ("f16", "bf16", "f32")
_ELEMENT_BYTES = {"f16": 2, "bf16": 2, "f32": 4}
#: the kernel layer's headers the GEMM stands on (``include/fusec``)
GEMM_HEADERS = ("common", "barrier", "tma", "wgmma", "shared")


def element_bytes(dtype: str) -> int:
    """Bytes of one element of an operand or output type."""
    return _ELEMENT_BYTES[dtype]


@dataclass(frozen=True)
class Epilogue:
    """The elementwise code applied to each accumulator before the store.

    ``body`` is C++ statements that read ``float acc`` (the f32 dot product),
    ``int row``, ``int col`` (the output element), ``int bat`` (the flat batch
    index) and the extra input pointers ``e0``, ``e1``... (``const void*``,
    element types ``extras``; load them with ``fs_ld_<dtype>(e0, index)``), and
    assign ``float y``. It must come from a generator (never user text).
    ``name`` documents it in the kernel header.
    """

    body: str = "y = acc;"
    extras: tuple[str, ...] = ()
    name: str = "identity"
    helpers: str = ""  # C++ helper definitions the body calls (generated)
    #: "" (store ``y``), "row" (softmax over each output row, which one block tile holds:
    #: N <= BN; ``post_body`` maps ``float s``, the softmax value, to ``y``) or "partials"
    #: (store ``y`` and write each row's per-tile (max, sum of exp) to the last extra,
    #: an f32 buffer of batches x M x tiles_n pairs, for a finalise pass)
    softmax: str = ""
    post_body: str = "y = s;"
    #: The LayerNorm rewrite (FlashNorm) applied to ``acc`` before ``body``: the extra slots
    #: of the row statistics (float2 mean, rstd per row) and of the fold's column vectors
    #: (``c`` at 0, ``d`` at ``ln_stride``, f32), or () without a LayerNorm prologue.
    ln_slots: tuple[int, ...] = ()
    ln_stride: int = 0
    #: ``ln="tile"``: the extra slots of the LayerNorm's gamma and beta (K values each), which
    #: the consumers apply to the resident A tiles before the main loop, and its epsilon;
    #: () otherwise (then ``ln_eps`` is unused)
    ln_affine: tuple[int, ...] = ()
    ln_eps: float = 1e-5
    #: Extra slots read at (row, col) of the output, row-major M x N (a residual): what the
    #: ``prefetch="tile"`` variant brings into L2 before the epilogue.
    tile_inputs: tuple[int, ...] = ()
    #: The conv template's arguments: extra slots the kernel loads itself and passes to the
    #: body as ``float ev<slot>`` (``fs_epilogue``'s parameters): one value per output
    #: channel (index ``k``, e.g. a folded BatchNorm's scale) or one at the output element
    #: (an NCHW tensor of the output's shape: a residual).
    channel_args: tuple[int, ...] = ()
    pixel_args: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if self.softmax not in ("", "row", "partials"):
            raise ValueError(f"epilogue softmax mode {self.softmax!r}")
        if self.softmax == "partials" and (not self.extras or self.extras[-1] != "f32"):
            raise ValueError("the partials epilogue writes to its last extra (f32)")
        if self.ln_slots and (len(self.ln_slots) != 2 or self.ln_stride % 4):
            raise ValueError("ln_slots is (stats, cd); ln_stride a multiple of 4")
        if self.ln_affine and (len(self.ln_affine) != 2 or self.ln_slots):
            raise ValueError("ln_affine is (gamma, beta), and excludes the rewrite's ln_slots")
        if not (math.isfinite(self.ln_eps) and self.ln_eps >= 0.0):
            raise ValueError(f"LayerNorm epsilon {self.ln_eps!r}")


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


@dataclass(frozen=True)
class GemmSpec:
    """Everything the generated C++ specialises on."""

    config: TileConfig = field(default_factory=TileConfig)
    dtype: str = "f16"  # A and B element type
    out_dtype: str = "f16"
    a_major: str = "k"  # "k": A is M x K row-major; "m": A is stored K x M
    b_major: str = "k"  # "k": B is stored N x K; "n": B is stored K x N
    batch_a: bool = False  # A has the batch dimension (otherwise it is broadcast)
    batch_b: bool = False
    epilogue: Epilogue = field(default_factory=Epilogue)

    def __post_init__(self) -> None:
        if self.dtype not in DTYPES or self.out_dtype not in OUT_DTYPES:
            raise ValueError(f"unsupported GEMM types {self.dtype} -> {self.out_dtype}")
        if self.a_major not in ("k", "m") or self.b_major not in ("k", "n"):
            raise ValueError("a_major is 'k' or 'm', b_major is 'k' or 'n'")
        for extra in self.epilogue.extras:
            if extra not in OUT_DTYPES:
                raise ValueError(f"epilogue input type {extra!r}")
        if (self.config.ln == "tile") != bool(self.epilogue.ln_affine):
            raise ValueError("ln=tile and the epilogue's gamma/beta slots come together")
        if self.config.ln == "tile" and self.a_major != "k":
            raise ValueError("ln=tile normalises a K-major A")

    @property
    def key(self) -> str:
        """A short stable hash naming the generated function."""
        text = repr(self).encode()
        return hashlib.sha256(text).hexdigest()[:16]

    @property
    def function_name(self) -> str:
        return f"fusec_gemm_{self.key}"

    @property
    def threads(self) -> int:
        return self.config.threads

    def cpp_source(self) -> str:
        return expand(generate(self))

    def arg_count(self) -> tuple[int, int]:
        return kernel_arg_count(self)


def _wgmma(spec: GemmSpec) -> str:
    """``fs_wgmma``: one m64nBNk16 instruction accumulating into ``d`` (BN/2 floats)."""
    trans_a = 1 if spec.a_major == "m" else 0
    trans_b = 1 if spec.b_major == "n" else 0
    return wgmma_ss("fs_wgmma", spec.config.bn, spec.dtype, trans_a, trans_b)


#: Named barrier of consumer warpgroup cw's staged vectors: 3 + cw (1 and 2 are pingpong's).
VECTOR_BARRIER = 3


#: Named barrier of consumer warpgroup cw's normalised A rows (``ln="tile"``): 5 + cw
#: (1 and 2 are pingpong's, 3 + cw the staged vectors').
LN_BARRIER = 5


def _ln_tile(spec: GemmSpec) -> bool:
    return spec.config.ln == "tile"


#: Named barrier of the consumer warpgroups' staged gamma and beta (``ln="tile"``).
LN_AFFINE_BARRIER = 7


def _ln_resident_guard(spec: GemmSpec) -> str:
    """C++ before the block's first ``__syncthreads`` (``ln="tile"``): the whole K must be
    resident; with more K steps than stages the consumers would wait for ever, so the block
    stores nothing (the launcher refuses such a K before it gets here)."""
    if not _ln_tile(spec):
        return ""
    return "  if ((K + BK - 1) / BK > STAGES) return 0;  // ln=tile: K must be resident\n"


def _ln_affine_load(spec: GemmSpec) -> str:
    """C++ at the head of the consumers (``ln="tile"``): their threads copy gamma and beta
    (f32, zero past K) into shared memory (``sg``: gamma, then beta STAGES x BK floats
    further) and meet at a named barrier; every tile of the block reads them. Only the
    consumers wait for these global loads: before the block's ``__syncthreads`` they held
    back the producer's first TMA load by a DRAM round trip."""
    if not _ln_tile(spec):
        return ""
    gamma, beta = spec.epilogue.ln_affine
    gt, bt = (spec.epilogue.extras[slot] for slot in (gamma, beta))
    return f"""    for (int i = tid - 128; i < STAGES * BK; i += 128 * CONSUMERS) {{
      const bool in_row = i < K;
      fs_st_shared1f(sg + 4u * (u32)i, in_row ? fs_ld_{gt}((const void*)e{gamma}, i) : 0.0f);
      fs_st_shared1f(sg + 4u * (u32)(STAGES * BK + i),
                 in_row ? fs_ld_{bt}((const void*)e{beta}, i) : 0.0f);
    }}
    fs_named_sync({LN_AFFINE_BARRIER}, 128 * CONSUMERS);  // gamma and beta staged
"""


def _ln_producer_a_loads(spec: GemmSpec) -> str:
    """C++ at the head of the producer's tile (``ln="tile"``): every K step's A tile first,
    each on its stage's own A barrier (``a_full[s] = bars + 8 (2 STAGES + s)``), so that the
    consumers normalise A while B (four times the bytes at BN = 256) is still landing; the
    stage's ``full`` barrier then counts B alone."""
    if not _ln_tile(spec):
        return ""
    return """          for (int kb = 0; kb < kblocks; ++kb) {  // ln=tile: the A tiles first
            const int s = (it + kb) % STAGES;
            fs_bar_wait(bars + 8 * (STAGES + s), ((u32)((it + kb) / STAGES) & 1u) ^ 1u);
            const u32 a_full = bars + 8 * (2 * STAGES + s);
            fs_bar_expect(a_full, A_BYTES);
            fs_tma_load(sa + s * A_BYTES, map_a, a_full, kb * BK, pm * BM, za);
          }
"""


def _ln_tile_prologue(spec: GemmSpec) -> str:
    """C++ at the head of a consumer's tile (``ln="tile"``): wait until every K step's A
    tile has landed (the ring holds them all; B may still be in flight), then normalise the
    warpgroup's WM rows of the A tiles in place. ``128 / WM`` threads share a row (a
    quad-lane pair: ``shfl.xor``), each reading its chunks of 8 values per stage through
    the 128-byte swizzle (16-byte chunk c of row r is at r * 128 + ((c ^ r % 8) << 4)).
    Exact two passes over the resident row: the mean, then the mean squared deviation
    (columns past K, zero-filled by TMA, left out: only a K step that crosses K checks its
    columns); then x <- (x - mean) * rstd * gamma + beta, rounded to the operand type
    (gamma and beta are 0 past K: those columns stay 0). A proxy fence and the
    warpgroup's named barrier make the writes visible to its wgmma (async proxy).

    One warp per scheduler runs this, so its speed is its instruction-level parallelism:
    the K steps are unrolled (up to STAGES, all loads in flight) and the sums go to eight
    partial sums (one per value of a 16-byte chunk), not one chain of 4-cycle adds per
    value (the pass was a quarter of the LN(8192x256) -> GEMM -> softmax kernel)."""
    if not _ln_tile(spec):
        return ""
    dt = spec.dtype
    tpr = 128 // spec.config.rows_per_consumer
    chunks = 8 // tpr
    shuffles = "".join(
        f"        {{var}} += __shfl_xor_sync(0xffffffffu, {{var}}, {o});\n"
        for o in (1, 2, 4)[: tpr.bit_length() - 1]
    )
    eps = repr(float(spec.epilogue.ln_eps))
    each_chunk = f"""#pragma unroll
        for (int kb = 0; kb < STAGES; ++kb) {{
          if (kb >= kblocks) break;
          const u32 a_row = sa + (u32)((it + kb) % STAGES) * A_BYTES + row_at;
#pragma unroll
          for (int c = 0; c < {chunks}; ++c) {{
            const int chunk = part * {chunks} + c;
            const u32 at = a_row + ((((u32)chunk) ^ swz) << 4);
            const uint4 v = fs_ld_shared4(at);
            const u32 w[4] = {{v.x, v.y, v.z, v.w}};"""
    unpack = f"""#pragma unroll
            for (int e = 0; e < 4; ++e) {{
              float lo, hi;
              fs_unpack_{dt}(w[e], lo, hi);"""
    total = "((p[0] + p[1]) + (p[2] + p[3])) + ((p[4] + p[5]) + (p[6] + p[7]))"
    maxima = "".join(
        f"          top = fmaxf(top, __shfl_xor_sync(0xffffffffu, top, {o}));\n"
        for o in (1, 2, 4)[: tpr.bit_length() - 1]
    )
    most = "3.40282347e+38f"  # FLT_MAX (NVRTC has no INFINITY): finite <=> |v| <= it
    overflowed = f"!(fabsf(mean) <= {most} && ssd <= {most})"
    floor = "fmaxf(eps, 1.17549435e-38f)" if spec.epilogue.ln_eps > 0 else "eps"

    def statistics(scaled: bool) -> str:
        """The two passes: ``mean`` and ``ssd`` of the row (times ``xs``, ``scaled``)."""
        scale = "              lo *= xs;\n              hi *= xs;\n" if scaled else ""
        return f"""#pragma unroll
        for (int i = 0; i < 8; ++i) p[i] = 0.0f;
{each_chunk}
{unpack}
{scale}              p[2 * e] += lo;  // zero past K
              p[2 * e + 1] += hi;
            }}
          }}
        }}
        sum = {total};
{shuffles.format(var="sum")}        mean = sum / (float)K;
#pragma unroll
        for (int i = 0; i < 8; ++i) p[i] = 0.0f;
{each_chunk}
            const bool inside = kb * BK + BK <= K;  // uniform: only the last K step checks
{unpack}
{scale}              const int col = kb * BK + chunk * 8 + 2 * e;
              const float dl = inside || col < K ? lo - mean : 0.0f;
              const float dh = inside || col + 1 < K ? hi - mean : 0.0f;
              p[2 * e] = fmaf(dl, dl, p[2 * e]);
              p[2 * e + 1] = fmaf(dh, dh, p[2 * e + 1]);
            }}
          }}
        }}
        ssd = {total};
{shuffles.format(var="ssd")}"""

    return f"""      for (int kb = 0; kb < kblocks; ++kb)  // ln=tile: the whole K of the tile
        fs_bar_wait(bars + 8 * (2 * STAGES + (it + kb) % STAGES), (u32)((it + kb) / STAGES) & 1u);
      {{
        const int lr = cw * WM + lt / {tpr};  // the row of the block tile this thread reads
        const int part = lt % {tpr};
        const u32 row_at = (u32)lr * 128u;
        const u32 swz = (u32)(lr % 8);
        float p[8];
        float sum, mean, ssd;
{statistics(False)}
        // A row of huge finite values (bf16 3e38) overflows the float32 sums, where the
        // float64 reference is finite: such a row takes them again, of x / 2^ilogb(max|x|)
        // ((x - mean) * rstd does not change with the scale but for eps, scaled alike and
        // floored: var is 0 only for a constant row, whose deviations are exactly 0). The
        // whole warp takes the branch (its shuffles need every lane): a row that did not
        // overflow keeps xs = 1 and gets the same sums again. NaN or Inf: NaN either way.
        float xs = 1.0f;
        float eps = {eps}f;
        const bool huge = {overflowed};
        if (__any_sync(0xffffffffu, huge)) {{
          float top = 0.0f;  // fmaxf drops a NaN: the sums keep it
{each_chunk}
{unpack}
              top = fmaxf(top, fmaxf(fabsf(lo), fabsf(hi)));
            }}
          }}
        }}
{maxima}          if (huge && top <= {most}) {{
            xs = ldexpf(1.0f, 1 - ilogbf(top));  // a power of 2 (exact scaling), normal
            eps = {eps}f * xs * xs;
            eps = {floor};
          }}
{statistics(True)}
        }}
        const float rstd = rsqrtf(ssd / (float)K + eps);
#pragma unroll
        for (int kb = 0; kb < STAGES; ++kb) {{
          if (kb >= kblocks) break;
          const u32 a_row = sa + (u32)((it + kb) % STAGES) * A_BYTES + row_at;
          uint4 v[{chunks}];  // the K step's loads first: the stores below would order them
          float4 gb[{chunks}][4];
#pragma unroll
          for (int c = 0; c < {chunks}; ++c) {{
            const int chunk = part * {chunks} + c;
            v[c] = fs_ld_shared4(a_row + ((((u32)chunk) ^ swz) << 4));
            const u32 g_at = sg + 4u * (u32)(kb * BK + chunk * 8);
            gb[c][0] = fs_ld_shared4f(g_at);
            gb[c][1] = fs_ld_shared4f(g_at + 16u);
            gb[c][2] = fs_ld_shared4f(g_at + 4u * STAGES * BK);
            gb[c][3] = fs_ld_shared4f(g_at + 4u * STAGES * BK + 16u);
          }}
#pragma unroll
          for (int c = 0; c < {chunks}; ++c) {{
            const int chunk = part * {chunks} + c;
            const u32 w[4] = {{v[c].x, v[c].y, v[c].z, v[c].w}};
            const float4 g0 = gb[c][0], g1 = gb[c][1], b0 = gb[c][2], b1 = gb[c][3];
            const float g[8] = {{g0.x, g0.y, g0.z, g0.w, g1.x, g1.y, g1.z, g1.w}};
            const float b[8] = {{b0.x, b0.y, b0.z, b0.w, b1.x, b1.y, b1.z, b1.w}};
            u32 y[4];
{unpack}
              y[e] = fs_pack_{dt}(fmaf(fmaf(lo, xs, -mean) * rstd, g[2 * e], b[2 * e]),
                                  fmaf(fmaf(hi, xs, -mean) * rstd, g[2 * e + 1], b[2 * e + 1]));
            }}
            fs_st_shared4(a_row + ((((u32)chunk) ^ swz) << 4), y[0], y[1], y[2], y[3]);
          }}
        }}
        fs_fence_async_smem();  // the generic-proxy writes before the wgmma's async-proxy reads
      }}
      fs_named_sync({LN_BARRIER} + cw, 128);  // every row of the warpgroup normalised
"""


def _staged(spec: GemmSpec) -> bool:
    """The kernel stages its epilogue vectors in shared memory (``vectors="smem"`` and an
    epilogue that has some: the LayerNorm rewrite's)."""
    return spec.config.vectors == "smem" and bool(spec.epilogue.ln_slots)


def _ln_correction(spec: GemmSpec) -> str:
    """The first statement of ``fs_epilogue``: the LayerNorm rewrite of ``acc``, reading the
    vectors from global memory or from the warpgroup's staged copy (``ln_cols``, ``ln_rows``:
    shared addresses offset so that column ``col``'s c is at ``ln_cols + 4 col``, its d
    ``4 BN`` further, and row ``row``'s (mean, rstd) at ``ln_rows + 8 row``)."""
    epi = spec.epilogue
    if not epi.ln_slots:
        return ""
    stats, cd = epi.ln_slots
    if _staged(spec):
        return """  const float2 ln_s = fs_lds_f32x2(ln_rows + 8u * (u32)row);
  acc = ln_s.y * (acc - ln_s.x * fs_lds_f32(ln_cols + 4u * (u32)col)) +
        fs_lds_f32(ln_cols + 4u * (u32)(BN + col));
"""
    return f"""  const float ln_mu = fs_ld_f32(e{stats}, 2LL * row);
  const float ln_rstd = fs_ld_f32(e{stats}, 2LL * row + 1);
  acc = ln_rstd * (acc - ln_mu * fs_ld_f32(e{cd}, col)) + fs_ld_f32(e{cd}, {epi.ln_stride}LL + col);
"""


def _stage_vectors(spec: GemmSpec) -> str:
    """C++ at the head of a consumer's tile: after its warpgroup has finished reading the
    previous tile's vectors (named barrier), each thread issues 16-byte ``cp.async`` copies
    of the tile's c and d (BN columns) and (mean, rstd) pairs (its WM rows) into the
    warpgroup's region; chunks past N or M are zero-filled and never read. The copies
    complete during the main loop (``_await_vectors`` waits before the epilogue)."""
    if not _staged(spec):
        return ""
    stats, cd = spec.epilogue.ln_slots
    stride = spec.epilogue.ln_stride
    return f"""      fs_named_sync({VECTOR_BARRIER} + cw, 128);  // the previous tile's are read
      const int vcol0 = pn * BN;
      const int vrow0 = {_rows(spec)};
      for (int i = lt; i < BN / 2 + WM / 2; i += 128) {{
        int first, left, per;  // chunk i: 4 columns of c or of d, or 2 rows' statistics
        u64 src;
        if (i < BN / 2) {{
          const int half = i / (BN / 4);
          first = vcol0 + 4 * (i % (BN / 4));
          left = N - first;
          per = 4;
          src = e{cd} + 4ull * (unsigned long long)((long long)half * {stride} + first);
        }} else {{
          first = vrow0 + 2 * (i - BN / 2);
          left = M - first;
          per = 8;
          src = e{stats} + 8ull * (unsigned long long)first;
        }}
        const u32 bytes = (u32)(left <= 0 ? 0 : (left >= 16 / per ? 16 : left * per));
        fs_cp16(sv_mine + 16u * (u32)i, bytes ? src : e{cd}, bytes);
      }}
      fs_cp_commit();
      const u32 ln_cols = sv_mine - 4u * (u32)vcol0;
      const u32 ln_rows = sv_mine + 8u * BN - 8u * (u32)vrow0;
"""


def _await_vectors(spec: GemmSpec) -> str:
    """Before the epilogue: this thread's copies done, then every thread's (barrier)."""
    if not _staged(spec):
        return ""
    return f"""      fs_cp_wait_all();
      fs_named_sync({VECTOR_BARRIER} + cw, 128);  // every thread's copies have landed
"""


#: K steps before the end of a tile's main loop at which the "tile" prefetch is issued
#: (a 128x256x64 step is ~0.7 us on an H200: a few us ahead of the epilogue).
PREFETCH_AHEAD = 4


def _prefetch_tile(spec: GemmSpec) -> str:
    """C++ in the main loop (``prefetch="tile"``): at K step ``kblocks - PREFETCH_AHEAD``
    (or the first), the consumer warpgroup's threads issue ``prefetch.global.L2`` for
    every 128-byte line of the rows it will store, in each full-tile epilogue input."""
    if spec.config.prefetch != "tile" or not spec.epilogue.tile_inputs:
        return ""
    lines = []
    for slot in spec.epilogue.tile_inputs:
        es = _ELEMENT_BYTES[spec.epilogue.extras[slot]]
        per_line = 128 // es
        lines.append(f"""          for (int i = lt; i < WM * (BN / {per_line}); i += 128) {{
            const int row = {_rows(spec)} + i / (BN / {per_line});
            const int col = pn * BN + (i % (BN / {per_line})) * {per_line};
            if (row < M && col < N)
              fs_prefetch_l2(e{slot} + {es}ull * ((unsigned long long)row * N + col));
          }}""")
    body = "\n".join(lines)
    return f"""        if (kb == (kblocks > {PREFETCH_AHEAD} ? kblocks - {PREFETCH_AHEAD} : 0)) {{
{body}
        }}
"""


NEG_INF = "__int_as_float(0xff800000)"


def _frag(m: str = "m", q: str = "q", e: str = "e") -> str:
    """The accumulator register of element ``e`` of column pair ``q`` in row half ``h``."""
    return f"acc[{m}][4 * {q} + 2 * h + {e}]"


def _post_function(spec: GemmSpec, extras_params: str) -> str:
    """``fs_post``: the ops after a row softmax (only in the "row" softmax epilogue)."""
    if spec.epilogue.softmax != "row":
        return ""
    body = "\n".join("  " + line for line in spec.epilogue.post_body.splitlines())
    return f"""static __device__ __forceinline__ float fs_post(float s, int row, int col,
                                                int bat{extras_params}) {{
  float y;
{body}
  return y;
}}
"""


def _rows(spec: GemmSpec) -> str:
    """The first row of the consumer's accumulators: its share of the block tile
    (cooperative) or the tile's first row (pingpong: the warpgroup owns the tile)."""
    return "pm * BM" if spec.config.pingpong else "pm * BM + cw * WM"


def _fragment_loops(spec: GemmSpec) -> str:
    """The loops over a consumer thread's accumulator rows, defining ``row``."""
    mi = spec.config.rows_per_consumer // MMA_M
    return f"""#pragma unroll
      for (int m = 0; m < {mi}; ++m) {{
#pragma unroll
        for (int h = 0; h < 2; ++h) {{
          const int row = {_rows(spec)} + m * 64 + warp * 16 + (lane / 4) + 8 * h;
"""


def _fast_math(spec: GemmSpec) -> bool:
    """The kernel may use hardware approximations (``math="fast"``): only where the result
    is rounded to a 16-bit type (as ``gemm_spec`` decides for the epilogue expression)."""
    return spec.config.math == "fast" and spec.out_dtype in ("f16", "bf16")


def _softmax_statistics(spec: GemmSpec, extras_args: str) -> str:
    """Pass 1 (the row's values, -inf outside the matrix, into the accumulators, and their
    maximum ``mx`` over the quad) and pass 2 (``sum`` of exp(v - shift)) of a softmax
    epilogue; in the "row" mode pass 2 leaves exp(v - shift) in the accumulators.

    ``dense`` (a live row of a tile inside the matrix's columns: every tile but the edges)
    takes pass 1 without a bounds check per element: the selects were a fifth of the
    LN -> GEMM -> softmax kernel's epilogue. With ``math="fast"`` the exponential is one
    FMA and ``ex2.approx`` (2^(v log2 e - shift log2 e), as flash attention computes it:
    the error of the folded shift is |shift| 2^-24 in the exponent)."""
    out = spec.out_dtype
    partials = spec.epilogue.softmax == "partials"
    value = (
        f"fs_to_{out}(fs_epilogue({_frag()}, row, col, pz{extras_args}))"
        if partials
        else f"fs_epilogue({_frag()}, row, col, pz{extras_args})"
    )
    columns = """#pragma unroll
            for (int q = 0; q < BN / 8; ++q) {
#pragma unroll
              for (int e = 0; e < 2; ++e) {
                const int col = pn * BN + q * 8 + 2 * (lane % 4) + e;"""
    if _fast_math(spec):
        shift = "const float shift = mx == {neg} ? 0.0f : mx * L2E;  // in log2 units"
        p = f"fs_ex2(fmaf({_frag()}, L2E, -shift))"
    else:
        shift = "const float shift = mx == {neg} ? 0.0f : mx;"
        p = f"expf({_frag()} - shift)"
    return f"""          const bool live = row < M;
          const bool dense = live && pn * BN + BN <= N;
          float mx = {NEG_INF};
          if (dense) {{
{columns}
                const float v = {value};
                {_frag()} = v;
                mx = fmaxf(mx, v);
              }}
            }}
          }} else {{
{columns}
                float v = {NEG_INF};
                if (live && col < N) v = {value};
                {_frag()} = v;
                mx = fmaxf(mx, v);
              }}
            }}
          }}
          mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
          mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
          {shift.format(neg=NEG_INF)}
          float sum = 0.0f;
#pragma unroll
          for (int q = 0; q < BN / 8; ++q) {{
#pragma unroll
            for (int e = 0; e < 2; ++e) {{
              const float p = {p};
              {"" if partials else _frag() + " = p;"}
              sum += p;
            }}
          }}
          sum += __shfl_xor_sync(0xffffffffu, sum, 1);
          sum += __shfl_xor_sync(0xffffffffu, sum, 2);
"""


def _compute_section(spec: GemmSpec, extras_args: str) -> str:
    """C++ of the "smem" epilogue's first half in the softmax modes: the row statistics,
    with the accumulators replaced in place by what the store half needs. Accumulators
    outside the matrix keep what they hold (0: TMA zero-fills A and B there; -inf or 0
    here): nothing stores them. Without a softmax the store half computes each chunk just
    before staging it (``_chunk_compute``).

    In the "partials" mode the accumulators keep the rounded logits and the quad's first
    lane writes the row's (max, sum of exp) pair of the tile, as in the direct epilogue.
    In the "row" mode they are replaced by ``fs_post`` of the softmax (chunk by chunk in
    the store half, as without a softmax, spilled more).
    """
    head = _fragment_loops(spec)
    tail = "        }\n      }\n"
    mode = spec.epilogue.softmax
    if not mode:
        return ""  # computed chunk by chunk in the store half (_chunk_compute)
    body = _softmax_statistics(spec, extras_args)
    if mode == "partials":
        last = len(spec.epilogue.extras) - 1
        body += f"""          if (live && lane % 4 == 0) {{
            const int tiles_n = (N + BN - 1) / BN;
            ((float2*)e{last})[((long long)pz * M + row) * tiles_n + pn] = make_float2(mx, sum);
          }}
"""
        return head + body + tail
    body += f"""          const float inv = __fdividef(1.0f, sum);  // sum >= 1: exp(0) is a term
          if (dense) {{
#pragma unroll
            for (int q = 0; q < BN / 8; ++q) {{
              const int col = pn * BN + q * 8 + 2 * (lane % 4);
              {_frag(e="0")} = fs_post({_frag(e="0")} * inv, row, col, pz{extras_args});
              {_frag(e="1")} = fs_post({_frag(e="1")} * inv, row, col + 1, pz{extras_args});
            }}
          }} else if (live) {{
#pragma unroll
            for (int q = 0; q < BN / 8; ++q) {{
              const int col = pn * BN + q * 8 + 2 * (lane % 4);
              if (col < N) {{
                {_frag(e="0")} = fs_post({_frag(e="0")} * inv, row, col, pz{extras_args});
              }}
              if (col + 1 < N) {{
                {_frag(e="1")} = fs_post({_frag(e="1")} * inv, row, col + 1, pz{extras_args});
              }}
            }}
          }}
"""
    return head + body + tail


def _chunk_compute(spec: GemmSpec, extras_args: str, octets: int) -> str:
    """C++ replacing the accumulators of chunk ``ch`` of block ``m`` (``octets`` column
    octets, both row halves) by ``fs_epilogue`` of them, just before they are staged
    (only without a softmax: the softmax modes compute theirs in ``_compute_section``).

    Chunk by chunk, so that only one chunk's epilogue inputs are in flight (the whole
    tile's spilled), and straight-line in interior tiles (all but the edges): a bounds
    check per element is a branch, which serialised the elements (each one's loads, then
    its exponential and division, one after the other). Edge tiles check each element.
    """
    frag0, frag1 = _frag(q="q", e="0"), _frag(q="q", e="1")
    half = octets // 2
    f0 = f"fs_epilogue({frag0}, row, col, pz{extras_args})"
    f1 = f"fs_epilogue({frag1}, row, col + 1, pz{extras_args})"
    return f"""          if (interior) {{
#pragma unroll
            for (int o = 0; o < {octets}; ++o) {{
              if (o == {half}) __syncwarp();  // keeps half a chunk's loads in flight at most
#pragma unroll
              for (int h = 0; h < 2; ++h) {{
                const int q = ch * {octets} + o;
                const int row = {_rows(spec)} + m * 64 + warp * 16 + (lane / 4) + 8 * h;
                const int col = pn * BN + q * 8 + 2 * (lane % 4);
                {frag0} = {f0};
                {frag1} = {f1};
              }}
            }}
          }} else {{
#pragma unroll
            for (int o = 0; o < {octets}; ++o) {{
#pragma unroll
              for (int h = 0; h < 2; ++h) {{
                const int q = ch * {octets} + o;
                const int row = {_rows(spec)} + m * 64 + warp * 16 + (lane / 4) + 8 * h;
                const int col = pn * BN + q * 8 + 2 * (lane % 4);
                if (row < M && col < N) {{
                  {frag0} = {f0};
                }}
                if (row < M && col + 1 < N) {{
                  {frag1} = {f1};
                }}
              }}
            }}
          }}
"""


def _smem_store_section(spec: GemmSpec, extras_args: str) -> str:
    """C++ of the "smem" epilogue's second half: each warp's accumulators (16 rows of each
    64-row block) go through a 2 KB staging buffer of 16 rows x 128 bytes, one TMA store
    box, in the 128-byte swizzle (16-byte chunk k of row r at chunk k ^ (r % 8): the 8
    rows a stmatrix or a v2 store writes land in distinct banks).

    Two buffers per warp alternate: before refilling one, lane 0 waits until the store
    issued from it two chunks ago has read it (``cp.async.bulk.wait_group.read 1``).
    16-bit outputs are packed in pairs and written by ``stmatrix`` (four 8x8 matrices: the
    accumulator fragment of two column octets in both row halves); f32 by 8-byte stores.
    Each writer fences its writes for the async proxy, the warp syncs, and lane 0 issues
    the TMA store (out-of-bounds rows and columns are clipped by the tensor map). Without a
    map (an output whose rows are not 16-byte aligned) the warp copies the buffer out
    itself: 16 bytes per lane, coalesced, masked at the edges.
    """
    c = spec.config
    mi = c.rows_per_consumer // MMA_M
    es = _ELEMENT_BYTES[spec.out_dtype]
    cw_cols = 128 // es  # columns of one staged chunk
    chunks = c.bn // cw_cols
    compute, interior = "", ""
    if not spec.epilogue.softmax:
        compute = _chunk_compute(spec, extras_args, cw_cols // 8)
        interior = f"      const bool interior = {_rows(spec)} + WM <= M && pn * BN + BN <= N;\n"
    if es == 2:
        pack = f"fs_pack_{spec.out_dtype}"
        write = f"""#pragma unroll
          for (int p = 0; p < 4; ++p) {{  // column octets 2p, 2p + 1 of the chunk
            const int mat = lane / 8;
            const int r = (lane % 8) + 8 * (mat % 2);
            const int k = 2 * p + mat / 2;
            const int q = ch * 8 + 2 * p;
            fs_stmatrix4(buf + (u32)(r * 128 + ((k ^ (r % 8)) << 4)),
                         {pack}(acc[m][4 * q + 0], acc[m][4 * q + 1]),
                         {pack}(acc[m][4 * q + 2], acc[m][4 * q + 3]),
                         {pack}(acc[m][4 * q + 4], acc[m][4 * q + 5]),
                         {pack}(acc[m][4 * q + 6], acc[m][4 * q + 7]));
          }}
"""
    else:
        write = """#pragma unroll
          for (int qq = 0; qq < 4; ++qq) {
#pragma unroll
            for (int h = 0; h < 2; ++h) {
              const int r = lane / 4 + 8 * h;
              const int k = 2 * qq + (lane % 4) / 2;
              const int q = ch * 4 + qq;
              fs_st_shared2(buf + (u32)(r * 128 + ((k ^ (r % 8)) << 4) + (lane % 2) * 8),
                            acc[m][4 * q + 2 * h], acc[m][4 * q + 2 * h + 1]);
            }
          }
"""
    return f"""{interior}#pragma unroll
      for (int m = 0; m < {mi}; ++m) {{
#pragma unroll
        for (int ch = 0; ch < {chunks}; ++ch, ++epi_it) {{
{compute}          const u32 buf = se + (u32)(((cw * 4 + warp) * 2 + (epi_it & 1)) * 2048);
          if (lane == 0) fs_bulk_wait_read<1>();
          __syncwarp();
{write}          fs_fence_async_smem();
          __syncwarp();
          const int row0 = {_rows(spec)} + m * 64 + warp * 16;
          const int col0 = pn * BN + ch * {cw_cols};
          if (map_out != 0) {{
            if (lane == 0) {{
              fs_tma_store(map_out, buf, col0, row0, pz);
              fs_bulk_commit();
            }}
          }} else {{
            const long long out_base = (long long)pz * M * N;
#pragma unroll
            for (int i = 0; i < 4; ++i) {{
              const int r = i * 4 + lane / 8;
              const int k = lane % 8;
              const int row = row0 + r;
              const int col = col0 + k * {16 // es};
              if (row < M && col < N) {{
                const uint4 v = fs_ld_shared4(buf + (u32)(r * 128 + ((k ^ (r % 8)) << 4)));
                fs_st16<{es}>((void*)out, out_base + (long long)row * N + col, v, N - col);
              }}
            }}
          }}
        }}
      }}
"""


def _store_section(spec: GemmSpec, extras_args: str) -> str:
    """C++ of the consumers' epilogue: accumulators -> ``fs_epilogue`` -> stores.

    Accumulator j of m64 block m holds row 16 warp + lane/4 + 8 ((j/2)%2) and
    column 8 (j/4) + 2 (lane%4) + j%2 of that block, so the 4 lanes of a quad
    hold one row's BN columns of the tile: row statistics (softmax) need two
    ``shfl.xor`` steps (1, 2) and no shared memory.
    """
    out = spec.out_dtype
    head = f"""      const long long out_base = (long long)pz * M * N;
      const bool pairs = (N % 2) == 0;
{_fragment_loops(spec)}"""
    tail = "        }\n      }\n"
    if not spec.epilogue.softmax:
        body = f"""          if (row < M) {{
            const long long row_base = out_base + (long long)row * N;
#pragma unroll
            for (int q = 0; q < BN / 8; ++q) {{
              const int col = pn * BN + q * 8 + 2 * (lane % 4);
              if (col < N) {{
                const float y0 = fs_epilogue({_frag(e="0")}, row, col, pz{extras_args});
                if (pairs) {{
                  const float y1 = fs_epilogue({_frag(e="1")}, row, col + 1, pz{extras_args});
                  fs_st2_{out}((void*)out, row_base + col, y0, y1);
                }} else {{
                  fs_st_{out}((void*)out, row_base + col, y0);
                  if (col + 1 < N) {{
                    const float y1 = fs_epilogue({_frag(e="1")}, row, col + 1, pz{extras_args});
                    fs_st_{out}((void*)out, row_base + col + 1, y1);
                  }}
                }}
              }}
            }}
          }}
"""
        return head + body + tail
    partials = spec.epilogue.softmax == "partials"
    body = _softmax_statistics(spec, extras_args)
    if partials:
        last = len(spec.epilogue.extras) - 1
        body += f"""          if (live) {{
            const long long row_base = out_base + (long long)row * N;
            if (lane % 4 == 0) {{
              const int tiles_n = (N + BN - 1) / BN;
              ((float2*)e{last})[((long long)pz * M + row) * tiles_n + pn] = make_float2(mx, sum);
            }}
#pragma unroll
            for (int q = 0; q < BN / 8; ++q) {{
              const int col = pn * BN + q * 8 + 2 * (lane % 4);
              if (col < N) {{
                if (pairs) {{
                  fs_st2_{out}((void*)out, row_base + col, {_frag(e="0")}, {_frag(e="1")});
                }} else {{
                  fs_st_{out}((void*)out, row_base + col, {_frag(e="0")});
                  if (col + 1 < N) fs_st_{out}((void*)out, row_base + col + 1, {_frag(e="1")});
                }}
              }}
            }}
          }}
"""
        return head + body + tail
    body += f"""          const float inv = __fdividef(1.0f, sum);  // sum >= 1: exp(0) is a term
          if (live) {{
            const long long row_base = out_base + (long long)row * N;
#pragma unroll
            for (int q = 0; q < BN / 8; ++q) {{
              const int col = pn * BN + q * 8 + 2 * (lane % 4);
              if (col < N) {{
                const float s0 = {_frag(e="0")} * inv;
                const float y0 = fs_post(s0, row, col, pz{extras_args});
                if (pairs) {{
                  const float s1 = {_frag(e="1")} * inv;
                  const float y1 = fs_post(s1, row, col + 1, pz{extras_args});
                  fs_st2_{out}((void*)out, row_base + col, y0, y1);
                }} else {{
                  fs_st_{out}((void*)out, row_base + col, y0);
                  if (col + 1 < N) {{
                    const float s1 = {_frag(e="1")} * inv;
                    fs_st_{out}((void*)out, row_base + col + 1,
                                fs_post(s1, row, col + 1, pz{extras_args}));
                  }}
                }}
              }}
            }}
          }}
"""
    return head + body + tail


def _tile_loop(spec: GemmSpec) -> str:
    """The head of a consumer's persistent loop over tiles (and its ring position ``it``).

    Cooperative: every consumer walks every tile of the block (``it`` counts all K steps).
    Pingpong: consumer ``cw`` takes the block's tiles ``cw, cw + 2, ...`` (``local``); the
    producer fills the ring tile after tile, so the ring position of a tile's first K step
    is ``local * kblocks``. A consumer starts a main loop only after the other has issued
    its previous one (named barrier ``1 + cw``, which the other arrives at): so the two
    alternate on the tensor cores, and a consumer never waits on a ring phase more than
    one ahead of the producer's (mbarrier parities would alias).
    """
    smem = spec.config.epilogue == "smem"
    counter = "    int epi_it = 0;  // staged chunks so far: the staging buffer's parity\n" * smem
    if not spec.config.pingpong:
        return (
            counter
            + """    int it = 0;
    for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
      int pm, pn, pz;
      fs_tile(t, tiles_m, tiles_n, pm, pn, pz);"""
        )
    return (
        counter
        + """    int local = cw;
    for (int t = blockIdx.x + cw * gridDim.x; t < tiles; t += 2 * gridDim.x, local += 2) {
      int pm, pn, pz;
      fs_tile(t, tiles_m, tiles_n, pm, pn, pz);
      int it = local * kblocks;
      if (local > 0) fs_named_sync(1 + cw, 256);  // wait for the tensor cores' turn"""
    )


def _params(spec: GemmSpec) -> list[str]:
    extras = [f"u64 e{k}" for k in range(len(spec.epilogue.extras))]
    out_map = ["u64 map_out"] if spec.config.epilogue == "smem" else []
    return ["int* ret", "u64 smem_raw", "u64 map_a", "u64 map_b", "u64 out", *out_map, *extras] + [
        "int M",
        "int N",
        "int K",
        "int batches",
    ]


def kernel_arg_count(spec: GemmSpec) -> tuple[int, int]:
    """(u64, int32) parameters of the kernel: the device function takes the shared-memory
    address, then these (map_a, map_b, out, [map_out: the "smem" epilogue's output tensor
    map, 0 when the output cannot have one], extras..., M, N, K, batches)."""
    return 3 + (spec.config.epilogue == "smem") + len(spec.epilogue.extras), 4


def generate(spec: GemmSpec) -> str:
    """The complete ``.cu`` source of ``spec``'s device function."""
    c = spec.config
    name = spec.function_name
    ks = c.bk // MMA_K
    mi = c.rows_per_consumer // MMA_M
    half = c.bn // 2
    extras_args = "".join(f", (const void*)e{k}" for k in range(len(spec.epilogue.extras)))
    extras_params = "".join(f", const void* e{k}" for k in range(len(spec.epilogue.extras)))
    staged = _staged(spec)
    if staged:  # the staged vectors' shared addresses (``_stage_vectors``)
        extras_args += ", ln_cols, ln_rows"
        extras_params += ", u32 ln_cols, u32 ln_rows"
    a_load = (
        "fs_tma_load(a_dst, map_a, full, kb * BK, pm * BM, za);"
        if spec.a_major == "k"
        else "for (int c = 0; c < BM / 64; ++c)\n"
        "            fs_tma_load(a_dst + c * 8192, map_a, full, pm * BM + c * 64, kb * BK, za);"
    )
    b_load = (
        "fs_tma_load(b_dst, map_b, full, kb * BK, pn * BN, zb);"
        if spec.b_major == "k"
        else "for (int c = 0; c < BN / 64; ++c)\n"
        "            fs_tma_load(b_dst + c * 8192, map_b, full, pn * BN + c * 64, kb * BK, zb);"
    )
    # K-major: rows of 128 bytes, 8-row groups 1024 bytes apart (SBO), a K step of 16 is +32 bytes.
    # MN-major: 64-element chunks of BK rows (8192 bytes apart: LBO), 8-row K groups 1024 bytes
    # apart (SBO), a K step of 16 rows is +2048 bytes.
    a_desc = (
        "fs_desc(a_base + (u32)(row_blk * 128 + kk * 32), 16u, 1024u)"
        if spec.a_major == "k"
        else "fs_desc(a_base + (u32)((row_blk / 64) * 8192 + kk * 2048), 8192u, 1024u)"
    )
    b_desc = (
        "fs_desc(b_base + (u32)(kk * 32), 16u, 1024u)"
        if spec.b_major == "k"
        else "fs_desc(b_base + (u32)(kk * 2048), 8192u, 1024u)"
    )
    out = spec.out_dtype
    epilogue_body = _ln_correction(spec) + "\n".join(
        "  " + line for line in spec.epilogue.body.splitlines()
    )
    pingpong, smem = c.pingpong, c.epilogue == "smem"
    helpers = include(*GEMM_HEADERS)
    variant_note = f"\n// {c.schedule} schedule, {c.epilogue} epilogue, {c.math} math" * (
        c.variant != Variant()
    ) + "\n// LayerNorm normalised in the resident A tiles (ln=tile)" * _ln_tile(spec)
    layout_lines = ""
    free = "sb + STAGES * B_BYTES"
    if smem:
        layout_lines += f"  const u32 se = {free};  // the epilogue's staging: 2 x 2 KB per warp\n"
        free = f"se + {c.epi_bytes}"
    if c.vec_bytes:
        layout_lines += (
            f"  const u32 sv = {free};  // staged epilogue vectors: 8 (BN + WM) B per consumer\n"
        )
        free = f"sv + {c.vec_bytes}"
    if c.ln_bytes:
        layout_lines += f"  const u32 sg = {free};  // ln=tile: gamma, beta (f32, STAGES x BK)\n"
        free = f"sg + {c.ln_bytes}"
    layout_lines += (
        f"  const u32 bars = {free};  // full[s] = bars + 8 s, empty[s] = bars + 8 (STAGES + s)\n"
    )
    if _ln_tile(spec):
        layout_lines += "  // ln=tile: a_full[s] = bars + 8 (2 STAGES + s), full[s] counts B only\n"
    if _ln_tile(spec):  # the producer loaded the tile's A stages first (_ln_producer_a_loads)
        stage_loads = f"""          fs_bar_expect(full, B_BYTES);
          const u32 b_dst = sb + s * B_BYTES;
          {b_load}"""
        a_full_init = "\n      fs_bar_init(bars + 8 * (2 * STAGES + s), 1);  // ln=tile: a_full[s]"
    else:
        stage_loads = f"""          const u32 phase = (u32)(it / STAGES) & 1u;
          fs_bar_wait(bars + 8 * (STAGES + s), phase ^ 1u);
          fs_bar_expect(full, A_BYTES + B_BYTES);
          const u32 a_dst = sa + s * A_BYTES;
          const u32 b_dst = sb + s * B_BYTES;
          {a_load}
          {b_load}"""
        a_full_init = ""
    tile_loop = _tile_loop(spec) + ("\n" + _stage_vectors(spec).rstrip("\n") if staged else "")
    mine = "    const u32 sv_mine = sv + (u32)cw * (8u * (BN + WM));\n" if staged else ""
    hand_over = (
        "      if (t + gridDim.x < tiles) fs_named_arrive(2 - cw, 256);  // the other's turn\n"
        if pingpong
        else ""
    )
    epilogue_section = (
        _compute_section(spec, extras_args) + _smem_store_section(spec, extras_args)
        if smem
        else _store_section(spec, extras_args)
    )
    consumer_end = (
        "    if (lane == 0) fs_bulk_wait<0>();  // every TMA store done\n" if smem else ""
    )
    layout = f"A {spec.a_major.upper()}-major, B {spec.b_major.upper()}-major"
    batch = f"batch A {int(spec.batch_a)} B {int(spec.batch_b)}"
    return f"""// fusec generated Hopper GEMM: {c.text}, {spec.dtype} -> {out}
// {layout}, {batch}, epilogue {spec.epilogue.name}{variant_note}
{helpers}
{_wgmma(spec)}
#define BM {c.bm}
#define BN {c.bn}
#define BK {c.bk}
#define STAGES {c.stages}
#define CONSUMERS {c.consumers}
#define GROUP_M {c.group_m}
#define WM {c.rows_per_consumer}
#define A_BYTES {c.a_stage_bytes}
#define B_BYTES {c.b_stage_bytes}

{spec.epilogue.helpers}
static __device__ __forceinline__ float fs_epilogue(float acc, int row, int col,
                                                   int bat{extras_params}) {{
  float y;
{epilogue_body}
  return y;
}}

{_post_function(spec, extras_params)}
// Tile t of the persistent walk -> (pm, pn, pz), grouped GROUP_M tile rows at a time.
static __device__ __forceinline__ void fs_tile(int t, int tiles_m, int tiles_n,
                                               int& pm, int& pn, int& pz) {{
  const int per_batch = tiles_m * tiles_n;
  pz = t / per_batch;
  const int r = t - pz * per_batch;
  const int group = GROUP_M * tiles_n;
  const int first = (r / group) * GROUP_M;
  const int rows = min(tiles_m - first, GROUP_M);
  const int w = r % group;
  pm = first + w % rows;
  pn = w / rows;
}}

extern "C" __device__ __attribute__((always_inline)) int {name}({", ".join(_params(spec))}) {{
  const u32 base = (fs_smem((const void*)smem_raw) + 1023u) & ~1023u;
  const u32 sa = base;
  const u32 sb = base + STAGES * A_BYTES;
{layout_lines}  const int tid = threadIdx.x;
  const int wg = tid / 128;
  if (tid == 0) {{
    for (int s = 0; s < STAGES; ++s) {{
      fs_bar_init(bars + 8 * s, 1);
      fs_bar_init(bars + 8 * (STAGES + s), {"1" if pingpong else "CONSUMERS"});{a_full_init}
    }}
    fs_bar_init_fence();
  }}
{_ln_resident_guard(spec)}  __syncthreads();
  const int tiles_m = (M + BM - 1) / BM;
  const int tiles_n = (N + BN - 1) / BN;
  const int tiles = tiles_m * tiles_n * batches;
  const int kblocks = (K + BK - 1) / BK;
  if (wg == 0) {{
    asm volatile("setmaxnreg.dec.sync.aligned.u32 {PRODUCER_REGISTERS};" ::: "memory");
    if (tid == 0) {{
      fs_prefetch_map(map_a);
      fs_prefetch_map(map_b);
      int it = 0;
      for (int t = blockIdx.x; t < tiles; t += gridDim.x) {{
        int pm, pn, pz;
        fs_tile(t, tiles_m, tiles_n, pm, pn, pz);
        const int za = {"pz" if spec.batch_a else "0"};
        const int zb = {"pz" if spec.batch_b else "0"};
{_ln_producer_a_loads(spec)}        for (int kb = 0; kb < kblocks; ++kb, ++it) {{
          const int s = it % STAGES;
          const u32 full = bars + 8 * s;
{stage_loads}
        }}
      }}
    }}
  }} else {{
    asm volatile("setmaxnreg.inc.sync.aligned.u32 {CONSUMER_REGISTERS};" ::: "memory");
    const int cw = wg - 1;
    const int lt = tid % 128;
    const int warp = lt / 32;
    const int lane = lt % 32;
{mine}{_ln_affine_load(spec)}    float acc[{mi}][{half}];
{tile_loop}
{_ln_tile_prologue(spec)}      for (int kb = 0; kb < kblocks; ++kb, ++it) {{
        const int s = it % STAGES;
        fs_bar_wait(bars + 8 * s, (u32)(it / STAGES) & 1u);
        const u32 a_base = sa + s * A_BYTES;
        const u32 b_base = sb + s * B_BYTES;
        fs_wg_fence();
#pragma unroll
        for (int kk = 0; kk < {ks}; ++kk) {{
#pragma unroll
          for (int m = 0; m < {mi}; ++m) {{
            const int row_blk = {"" if pingpong else "cw * WM + "}m * 64;
            fs_wgmma(acc[m], {a_desc}, {b_desc}, (kb | kk) != 0);
          }}
        }}
        fs_wg_commit();
{_prefetch_tile(spec)}        if (kb > 0) {{
          fs_wg_wait<1>();
          if (lt == 0) fs_bar_arrive(bars + 8 * (STAGES + (it - 1) % STAGES));
        }}
      }}
{hand_over}      fs_wg_wait<0>();
      if (lt == 0) fs_bar_arrive(bars + 8 * (STAGES + (it - 1) % STAGES));
#pragma unroll
      for (int m = 0; m < {mi}; ++m)
#pragma unroll
        for (int j = 0; j < {half}; ++j) fs_fence_reg(acc[m][j]);
{_await_vectors(spec)}{epilogue_section}
    }}
{consumer_end}  }}
  return 0;
}}
"""
