"""The light kernels around the Hopper GEMM: LayerNorm prologue pre-pass, softmax finalise.

Both are generated C++ device functions linked into a Numba kernel exactly like
the GEMM (``build.build`` takes any ``LinkedKernel``), one block program each.

``LayerNormPrep`` serves ``layernorm(x) @ W`` by the exact rewrite (FlashNorm)

    LN(x) @ W = rstd_i * (x @ W' - mu_i * c) + d,  W' = diag(gamma) W,
    c = 1^T W' (column sums of the rounded W'), d = beta @ W,

so the GEMM reads the raw ``x`` through TMA and applies the normalisation in
its epilogue (``rstd * (acc - mu * c[col]) + d[col]``). The rewrite is exact in real
numbers only: a row whose mean is large against its spread (a constant row) cancels
its digits in ``acc - mu * c``, and a bf16 row of huge values (3e38) overflows ``x .
W'``; the epilogue takes such elements again as ``sum_k (x_k - mu) rstd W'_kc + d``
from global memory (``gemm.cuh``: ``gemm_ln_inexact``, ``gemm_ln_exact``; issue #26),
so it reads x and W' too. One launch computes
the row statistics of ``x`` (the blocks after the fold's, ``STAT_ROWS`` rows a
warp, f32 sums shifted by the row's first element so that a large mean does not
cancel) and folds gamma and beta into the weight (the other blocks). With W
stored K x N a warp sums the columns of its 64-row chunk by shuffles and adds
them into ``c`` and ``d`` with 16-byte atomics (atomics into one L2 line
serialise: their count, not the bytes, set the pre-pass's time), which the host
zeroes (``cuMemsetD32Async``) first on the same stream; with W stored N x K
each warp owns a row of W and writes its sums. The cuda target leaves a LayerNorm
over K >= 768 before a GEMM at least K wide to a kernel of its own
(``template.layernorm_prologue_problem``): this pre-pass serves the rest.

``SoftmaxFinalise`` completes a long-row softmax after a GEMM whose epilogue
stored the logits (rounded to the output type) and, per row and N tile, the
pair (max, sum of exp(v - max)): one block per row combines the row's pairs
into (M, S), then rewrites the row in place as ``post(exp(v - M) / S)``. The
logits are read once, in their 16-bit form, never as f32.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from fusec.targets.cuda.cpp_expr import cpp_literal
from fusec.targets.cuda.headers import ELEMENT_TYPES, expand, include, indent_lines
from fusec.targets.cuda.linked import LinkedSpec

THREADS = 256
FOLD_ROWS = 8  # rows of W a fold lane owns (W stored K x N): all their loads in flight
FOLD_COLS = 32  # columns of W a fold warp owns (W stored K x N): 4 lanes of 8
VECTORS = 4  # 16-byte loads per row a statistics lane issues before it adds the first
STAT_ROWS = 2  # rows of x a statistics warp owns, all their first loads in flight
_DTYPES = ("f16", "bf16")
_ANY = ("f16", "bf16", "f32")


@dataclass(frozen=True)
class LayerNormPrep(LinkedSpec):
    """Row statistics of x and the gamma/beta fold of W for ``LN(x) @ W`` (module docstring).

    Kernel parameters: x, gamma, beta, w, w_folded, stats (float2 per row: mean,
    rstd), cd (f32: c at 0, d at N rounded up to 4); M (rows of x), K, N, fold_blocks
    (the first blocks fold W, the others compute the statistics).
    """

    dtype: str  # x and W
    gamma_dtype: str
    beta_dtype: str
    b_major: str  # "n": W stored K x N; "k": W stored N x K
    epsilon: float

    def __post_init__(self) -> None:
        if self.dtype not in _DTYPES or {self.gamma_dtype, self.beta_dtype} - set(_ANY):
            raise ValueError("LayerNorm prologue types")
        if self.b_major not in ("n", "k"):
            raise ValueError("b_major is 'n' or 'k'")

    PREFIX = "lnprep"

    threads = THREADS

    def arg_count(self) -> tuple[int, int]:
        return 7, 4

    @staticmethod
    def stat_blocks(m: int) -> int:
        return -(-m // (THREADS // 32 * STAT_ROWS))

    def fold_blocks(self, k: int, n: int) -> int:
        if self.b_major == "n":
            return -(-n // (THREADS // 32 * FOLD_COLS)) * -(-k // (8 * FOLD_ROWS))
        return -(-n // (THREADS // 32))

    def cpp_source(self) -> str:
        return expand(self.generate())

    def generate(self) -> str:
        """The C++ as the template writes it: the kernel layer's ``layernorm_prep.cuh``, the
        instantiation's ``Config`` and the ``extern "C"`` wrapper."""
        t, g, b = self.dtype, self.gamma_dtype, self.beta_dtype
        ints = {
            "THREADS": THREADS, "FOLD_ROWS": FOLD_ROWS, "VECTORS": VECTORS,
            "STAT_ROWS": STAT_ROWS, "W_K_BY_N": int(self.b_major == "n"),
        }  # fmt: skip
        enumerators = ", ".join(f"{k} = {v}" for k, v in ints.items())
        return f"""// fusec generated LayerNorm prologue pre-pass ({t}, gamma {g}, beta {b}, W {
            self.b_major.upper()
        }-major)
{include("layernorm_prep")}
struct Config {{
  enum : int {{ {enumerators} }};
  static __host__ __device__ constexpr float eps() {{ return {cpp_literal(self.epsilon)}; }}
  using X = {ELEMENT_TYPES[t]};
  using Gamma = {ELEMENT_TYPES[g]};
  using Beta = {ELEMENT_TYPES[b]};
}};

extern "C" __device__ __attribute__((always_inline)) int {self.function_name}(
    int* ret, u64 smem, u64 x, u64 gamma, u64 beta, u64 w, u64 wout, u64 stats, u64 cd,
    int M, int K, int N, int fold_blocks) {{
  return fusec::layernorm_prep<Config>(x, gamma, beta, w, wout, stats, cd, M, K, N, fold_blocks);
}}
"""


@dataclass(frozen=True)
class SoftmaxFinalise(LinkedSpec):
    """Second pass of a long-row softmax (module docstring).

    Kernel parameters: out (the logits, rewritten in place), partials (float2 per
    row and N tile), then the post-softmax ops' extra inputs; M, N, tiles_n,
    batches. ``post_body`` is generated C++ mapping ``float s`` (the softmax
    value) at (bat, row, col) to ``float y``, reading ``e0, e1...``.
    """

    out_dtype: str
    post_body: str = "y = s;"
    extras: tuple[str, ...] = ()
    helpers: str = ""
    name: str = "softmax"

    PREFIX = "smfin"

    threads = THREADS

    def arg_count(self) -> tuple[int, int]:
        return 2 + len(self.extras), 4

    def cpp_source(self) -> str:
        return expand(self.generate())

    def generate(self) -> str:
        """The C++ as the template writes it: the kernel layer's ``softmax_finalise.cuh``,
        the ``Post`` functor (the post-softmax ops) and the ``extern "C"`` wrapper."""
        n = len(self.extras)
        members = "".join(f"  const void* e{k};\n" for k in range(n))
        params = "".join(f", u64 e{k}" for k in range(n))
        pointers = ", ".join(f"(const void*)e{k}" for k in range(n))
        out = ELEMENT_TYPES[self.out_dtype]
        return f"""// fusec generated softmax finalise ({self.out_dtype}), then: {self.name}
{include("softmax_finalise")}
{self.helpers}
struct Post {{
{members}  __device__ __forceinline__ float operator()(float s, int row, int col, int bat) const {{
    float y;
{indent_lines(self.post_body, 4)}
    return y;
  }}
}};

extern "C" __device__ __attribute__((always_inline)) int {self.function_name}(
    int* ret, u64 smem, u64 out, u64 partials{params}, int M, int N, int tiles_n, int batches) {{
  const Post post{{{pointers}}};
  return fusec::softmax_finalise<{out}>(post, out, partials, M, N, tiles_n, batches);
}}
"""


TRANSPOSE_TILE = 32  # a block transposes one 32 x 32 tile through shared memory


@dataclass(frozen=True)
class TransposeF32(LinkedSpec):
    """The K-major copy of an f32 B stored K x N for the tf32 GEMM (``precision="tf32"``:
    wgmma reads tf32 operands K-major only): ``[batches][R][C] -> [batches][C][R]``, one
    32 x 32 tile a block through padded shared memory (coalesced reads and writes).

    Kernel parameters: src, dst; R (rows of src: K), C (its columns: N), batches. The grid
    is ``blocks(R, C, batches)``, THREADS threads a block (8 rows of 32 lanes)."""

    PREFIX = "tf32bt"
    #: The element the copy moves (C++), its bytes, and what the copy is for.
    ELEMENT: ClassVar[str] = "float"
    ELEMENT_BYTES: ClassVar[int] = 4
    PURPOSE: ClassVar[str] = "f32: the K-major copy of a tf32 GEMM operand (precision=tf32)"

    threads = THREADS

    def arg_count(self) -> tuple[int, int]:
        return 2, 3

    @staticmethod
    def blocks(rows: int, cols: int, batches: int) -> int:
        tile = TRANSPOSE_TILE
        return -(-rows // tile) * -(-cols // tile) * batches

    def cpp_source(self) -> str:
        return expand(self.generate())

    def generate(self) -> str:
        """The C++ as the template writes it: the kernel layer's ``transpose_f32.cuh`` (32
        x 32 tiles through a padded shared tile) and the ``extern "C"`` wrapper."""
        return f"""// fusec generated transpose [batches][R][C] -> [batches][C][R] of {self.PURPOSE}
{include("transpose_f32")}
extern "C" __device__ __attribute__((always_inline)) int {self.function_name}(
    int* ret, u64 smem, u64 src, u64 dst, int R, int C, int batches) {{
  fusec::transpose_elements<{self.ELEMENT}, {TRANSPOSE_TILE}, {THREADS}>(src, dst, R, C);
  return 0;
}}
"""


@dataclass(frozen=True)
class TransposeCodes(TransposeF32):
    """``TransposeF32`` of float8 codes (bytes): the K-major copy of a float8 GEMM operand
    stored MN-major (A K x M, B K x N) at run time; wgmma reads float8 K-major only."""

    PREFIX = "fp8t"
    ELEMENT: ClassVar[str] = "unsigned char"
    ELEMENT_BYTES: ClassVar[int] = 1
    PURPOSE: ClassVar[str] = "float8 codes: the K-major copy of a float8 GEMM operand"
