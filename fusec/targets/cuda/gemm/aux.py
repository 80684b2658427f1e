"""The light kernels around the Hopper GEMM: LayerNorm prologue pre-pass, softmax finalise.

Both are generated C++ device functions linked into a Numba kernel exactly like
the GEMM (``build.build`` takes any ``LinkedKernel``), one block program each.

``LayerNormPrep`` serves ``layernorm(x) @ W`` by the exact rewrite (FlashNorm)

    LN(x) @ W = rstd_i * (x @ W' - mu_i * c) + d,  W' = diag(gamma) W,
    c = 1^T W' (column sums of the rounded W'), d = beta @ W,

so the GEMM reads the raw ``x`` through TMA and applies the normalisation in
its epilogue (``rstd * (acc - mu * c[col]) + d[col]``). One launch computes
the row statistics of ``x`` (the blocks after the fold's, ``STAT_ROWS`` rows a
warp, f32 sums shifted by the row's first element so that a large mean does not
cancel) and folds gamma and beta into the weight (the other blocks). With W
stored K x N a warp sums the columns of its 64-row chunk by shuffles and adds
them into ``c`` and ``d`` with 16-byte atomics (atomics into one L2 line
serialise: their count, not the bytes, set the pre-pass's time), which the host
zeroes (``cuMemsetD32Async``) first on the same stream; with W stored N x K
each warp owns a row of W and writes its sums. Since 2026-12-01 the cuda target
leaves a LayerNorm over K >= 1024 before a GEMM at least K wide to a kernel of
its own (``target.layernorm_prologue_problem``): this pre-pass serves the rest.

``SoftmaxFinalise`` completes a long-row softmax after a GEMM whose epilogue
stored the logits (rounded to the output type) and, per row and N tile, the
pair (max, sum of exp(v - max)): one block per row combines the row's pairs
into (M, S), then rewrites the row in place as ``post(exp(v - M) / S)``. The
logits are read once, in their 16-bit form, never as f32.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from fusec.codegen.expr import cpp_literal
from fusec.targets.cuda.headers import ELEMENT_TYPES, expand, include, indent_lines

_HELPERS = include("common", "reduce")

THREADS = 256
FOLD_ROWS = 8  # rows of W a fold lane owns (W stored K x N): all their loads in flight
FOLD_COLS = 32  # columns of W a fold warp owns (W stored K x N): 4 lanes of 8
VECTORS = 4  # 16-byte loads per row a statistics lane issues before it adds the first
STAT_ROWS = 2  # rows of x a statistics warp owns, all their first loads in flight
_DTYPES = ("f16", "bf16")
_ANY = ("f16", "bf16", "f32")


def _key(obj: object) -> str:
    return hashlib.sha256(repr(obj).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class LayerNormPrep:
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

    @property
    def key(self) -> str:
        return _key(self)

    @property
    def function_name(self) -> str:
        return f"fusec_lnprep_{self.key}"

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

    def _fold_k_by_n(self) -> str:
        """W stored K x N: a warp folds 32 columns (4 lanes of 8) of 8 * FOLD_ROWS rows.

        Lane (tx, ty) = (lane % 4, lane / 4) loads 16 bytes of each of the rows ty, ty + 8,
        ..., all before its first store. The column sums of the warp's rows are added
        across ty by shuffles and go to ``cd`` as 16-byte ``red.global.add.v4.f32``: the
        atomics to one cache line serialise in L2, so their count, not the bytes, bounded
        the pre-pass (H200, 2026-12-01: 2x the atomics, +8 us).
        """
        t, g, b = self.dtype, self.gamma_dtype, self.beta_dtype
        r = FOLD_ROWS
        return f"""    const int strips = (N + 255) / 256;
    const int nw = (fb % strips) * 256 + warp * 32;
    if (nw >= N) return 0;
    const int tx = lane % 4, ty = lane / 4;
    const int n0 = nw + tx * 8;
    const int kb = (fb / strips) * {8 * r} + ty;  // this lane's rows: kb + 8 j
    float gm[{r}], bt[{r}], cs[8], ds[8];
#pragma unroll
    for (int c = 0; c < 8; ++c) cs[c] = ds[c] = 0.0f;
#pragma unroll
    for (int j = 0; j < {r}; ++j) {{
      const int k = kb + 8 * j;
      gm[j] = k < K ? fs_ld_{g}((const void*)gamma, k) : 0.0f;
      bt[j] = k < K ? fs_ld_{b}((const void*)beta, k) : 0.0f;
    }}
    if ((N % 8) == 0 && ((w | wout) % 16) == 0) {{
      uint4 v[{r}];
#pragma unroll
      for (int j = 0; j < {r}; ++j) {{
        const int k = kb + 8 * j;
        v[j] = k < K && n0 < N ? __ldg((const uint4*)((const u16*)w + (long long)k * N + n0))
                               : make_uint4(0u, 0u, 0u, 0u);
      }}
#pragma unroll
      for (int j = 0; j < {r}; ++j) {{
        const int k = kb + 8 * j;
        if (k >= K || n0 >= N) break;
        const u32 in[4] = {{v[j].x, v[j].y, v[j].z, v[j].w}};
        u32 out[4];
#pragma unroll
        for (int h = 0; h < 4; ++h) {{
          const float w0 = fs_cvt_{t}(in[h] & 0xFFFFu), w1 = fs_cvt_{t}(in[h] >> 16);
          const u32 q0 = fs_bits_{t}(gm[j] * w0), q1 = fs_bits_{t}(gm[j] * w1);
          out[h] = q0 | (q1 << 16);
          cs[2 * h] += fs_cvt_{t}(q0);
          cs[2 * h + 1] += fs_cvt_{t}(q1);
          ds[2 * h] += bt[j] * w0;
          ds[2 * h + 1] += bt[j] * w1;
        }}
        *(uint4*)((u16*)wout + (long long)k * N + n0) = make_uint4(out[0], out[1], out[2], out[3]);
      }}
    }} else {{
      // Ragged or unaligned: one column at a time, still every row's load ahead of its use.
#pragma unroll
      for (int c = 0; c < 8; ++c) {{
        if (n0 + c >= N) break;
        float wv[{r}];
#pragma unroll
        for (int j = 0; j < {r}; ++j) {{
          const int k = kb + 8 * j;
          wv[j] = k < K ? fs_ld_{t}((const void*)w, (long long)k * N + n0 + c) : 0.0f;
        }}
#pragma unroll
        for (int j = 0; j < {r}; ++j) {{
          const int k = kb + 8 * j;
          if (k >= K) break;
          const u16 q = fs_bits_{t}(gm[j] * wv[j]);
          ((u16*)wout)[(long long)k * N + n0 + c] = q;
          cs[c] += fs_cvt_{t}(q);
          ds[c] += bt[j] * wv[j];
        }}
      }}
    }}
#pragma unroll
    for (int c = 0; c < 8; ++c) {{
#pragma unroll
      for (int o = 4; o < 32; o *= 2) {{
        cs[c] += __shfl_xor_sync(0xffffffffu, cs[c], o);
        ds[c] += __shfl_xor_sync(0xffffffffu, ds[c], o);
      }}
    }}
    if (ty != 0 || n0 >= N) return 0;
    float* csum = (float*)cd + n0;
    float* dsum = (float*)cd + ((N + 3) & ~3) + n0;
    if (n0 + 8 <= N && (N % 4) == 0) {{
      fs_red4(csum, cs[0], cs[1], cs[2], cs[3]);
      fs_red4(csum + 4, cs[4], cs[5], cs[6], cs[7]);
      fs_red4(dsum, ds[0], ds[1], ds[2], ds[3]);
      fs_red4(dsum + 4, ds[4], ds[5], ds[6], ds[7]);
    }} else {{
#pragma unroll
      for (int c = 0; c < 8; ++c) {{
        if (n0 + c < N) {{
          atomicAdd(csum + c, cs[c]);
          atomicAdd(dsum + c, ds[c]);
        }}
      }}
    }}
    return 0;"""

    def _fold_n_by_k(self) -> str:
        """W stored N x K: a warp folds a row of W, ``VECTORS`` 16-byte loads per lane in flight."""
        t, g, b = self.dtype, self.gamma_dtype, self.beta_dtype
        return f"""    const int n = fb * {THREADS // 32} + warp;
    if (n >= N) return 0;
    const u16* wr = (const u16*)w + (long long)n * K;
    u16* qr = (u16*)wout + (long long)n * K;
    float cs = 0.0f, ds = 0.0f;
    if ((K % 8) == 0 && ((w | wout) % 16) == 0) {{
      for (int base = 0; base < K; base += {256 * VECTORS}) {{
        uint4 v[{VECTORS}];
#pragma unroll
        for (int j = 0; j < {VECTORS}; ++j) {{
          const int k = base + (lane + 32 * j) * 8;
          v[j] = k < K ? __ldg((const uint4*)(wr + k)) : make_uint4(0u, 0u, 0u, 0u);
        }}
#pragma unroll
        for (int j = 0; j < {VECTORS}; ++j) {{
          const int k = base + (lane + 32 * j) * 8;
          if (k >= K) break;
          const u32 in[4] = {{v[j].x, v[j].y, v[j].z, v[j].w}};
          u32 out[4];
#pragma unroll
          for (int h = 0; h < 4; ++h) {{
            const float w0 = fs_cvt_{t}(in[h] & 0xFFFFu), w1 = fs_cvt_{t}(in[h] >> 16);
            const u32 q0 = fs_bits_{t}(fs_ld_{g}((const void*)gamma, k + 2 * h) * w0);
            const u32 q1 = fs_bits_{t}(fs_ld_{g}((const void*)gamma, k + 2 * h + 1) * w1);
            out[h] = q0 | (q1 << 16);
            cs += fs_cvt_{t}(q0) + fs_cvt_{t}(q1);
            ds += fs_ld_{b}((const void*)beta, k + 2 * h) * w0
                + fs_ld_{b}((const void*)beta, k + 2 * h + 1) * w1;
          }}
          *(uint4*)(qr + k) = make_uint4(out[0], out[1], out[2], out[3]);
        }}
      }}
    }} else {{
      for (int k = lane; k < K; k += 32) {{
        const float wv = fs_cvt_{t}(__ldg(wr + k));
        const u16 q = fs_bits_{t}(fs_ld_{g}((const void*)gamma, k) * wv);
        qr[k] = q;
        cs += fs_cvt_{t}(q);
        ds += fs_ld_{b}((const void*)beta, k) * wv;
      }}
    }}
    cs = fs_warp_sum(cs);
    ds = fs_warp_sum(ds);
    if (lane == 0) {{
      ((float*)cd)[n] = cs;
      ((float*)cd)[((N + 3) & ~3) + n] = ds;
    }}
    return 0;"""

    def cpp_source(self) -> str:
        return expand(self.generate())

    def generate(self) -> str:
        """The C++ as the template writes it: includes of the kernel layer, then the kernel."""
        t, g, b = self.dtype, self.gamma_dtype, self.beta_dtype
        fold = self._fold_k_by_n() if self.b_major == "n" else self._fold_n_by_k()
        scaled = f"{cpp_literal(self.epsilon)} * xs * xs"
        floor = f"fmaxf({scaled}, 1.17549435e-38f)" if self.epsilon > 0 else scaled
        return f"""// fusec generated LayerNorm prologue pre-pass ({t}, gamma {g}, beta {b}, W {
            self.b_major.upper()
        }-major)
{_HELPERS}
// Adds the 8 values of v, shifted, to the sums (the same order as one value at a time).
static __device__ __forceinline__ void fs_add8_{t}(uint4 v, float shift, float& s1, float& s2) {{
  const u32 words[4] = {{v.x, v.y, v.z, v.w}};
#pragma unroll
  for (int j = 0; j < 4; ++j) {{
    const float lo = fs_cvt_{t}(words[j] & 0xFFFFu) - shift;
    const float hi = fs_cvt_{t}(words[j] >> 16) - shift;
    s1 += lo + hi;
    s2 += lo * lo + hi * hi;
  }}
}}
static __device__ __forceinline__ float fs_warp_max(float v) {{
#pragma unroll
  for (int o = 16; o > 0; o /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}}
// A row of huge finite values overflows the shifted sums (bf16 +-1e20: the squares),
// where the float64 reference is finite: the warp (uniform: the sums are butterflies)
// takes them again, of x times a power of 2 near 1 / max|x| (exact and normal), from
// global memory; the mean and rstd come back to x's scale (eps scaled alike, floored:
// var is 0 only for a constant row). Other rows: xs = 1, the same values bit for bit.
// NaN or Inf in a row: NaN statistics either way (fmaxf drops a NaN; the sums keep it).
static __device__ __forceinline__ void fs_finish_stats(u64 stats, int row, int K, float shift,
                                                       float s1, float s2, int lane,
                                                       const u16* xr) {{
  s1 = fs_warp_sum(s1);
  s2 = fs_warp_sum(s2);
  float xs = 1.0f;
  float ixs = 1.0f;  // 1 / xs, exact (a power of 2): no division's slow-path call
  float eps = {cpp_literal(self.epsilon)};
  if (!(fabsf(s1) <= 3.40282347e+38f && s2 <= 3.40282347e+38f)) {{
    float top = 0.0f;
    for (int k = lane; k < K; k += 32) top = fmaxf(top, fabsf(fs_cvt_{t}(__ldg(xr + k))));
    top = fs_warp_max(top);
    if (top <= 3.40282347e+38f) {{
      // ldexpf(1, 1 - ilogbf(top)) for a normal top, from its exponent bits: the library
      // calls were an outlined CALL in the pre-pass (test_fused_variant_cubin)
      const int e = (__float_as_int(top) >> 23) & 0xff;  // top overflowed sums: e >= 64
      xs = __int_as_float((255 - e) << 23);
      ixs = __int_as_float((e - 1) << 23);
      eps = {floor};
      const float scaled_shift = shift * xs;
      s1 = 0.0f;
      s2 = 0.0f;
      for (int k = lane; k < K; k += 32) {{
        const float f = fs_cvt_{t}(__ldg(xr + k)) * xs - scaled_shift;
        s1 += f;
        s2 += f * f;
      }}
      s1 = fs_warp_sum(s1);
      s2 = fs_warp_sum(s2);
    }}
  }}
  if (lane == 0) {{
    const float dm = __fdividef(s1, (float)K);
    const float var = fmaxf(__fdividef(s2, (float)K) - dm * dm, 0.0f);
    const float rstd = rsqrtf(var + eps) * xs;
    ((float2*)stats)[row] = make_float2((shift * xs + dm) * ixs, rstd);
  }}
}}

extern "C" __device__ __attribute__((always_inline)) int {self.function_name}(
    int* ret, u64 smem, u64 x, u64 gamma, u64 beta, u64 w, u64 wout, u64 stats, u64 cd,
    int M, int K, int N, int fold_blocks) {{
  const int tid = threadIdx.x;
  const int warp = tid / 32;
  const int lane = tid % 32;
  // The fold blocks come first: they are few and loop over K, so they start at once and
  // run beside the statistics blocks instead of after them.
  if ((int)blockIdx.x < fold_blocks) {{
    const int fb = (int)blockIdx.x;
{fold}
  }}
  // A warp owns STAT_ROWS rows and issues every first load of all of them before it adds:
  // the fold's registers leave room for one block per SM, so the bytes in flight that
  // hide the memory latency come from each warp, not from many resident warps.
  const int row0 = (((int)blockIdx.x - fold_blocks) * {THREADS // 32} + warp) * {STAT_ROWS};
  if (row0 >= M) return 0;
  if ((K % 8) == 0 && (x % 16) == 0) {{
    // 16 bytes per lane per load; the shift (the row's first element) comes from lane 0's
    // first load by a shuffle, not from a load of its own that the others would wait behind.
    uint4 v[{STAT_ROWS}][{VECTORS}];
#pragma unroll
    for (int r = 0; r < {STAT_ROWS}; ++r) {{
      const u16* xr = (const u16*)x + (long long)(row0 + r) * K;
#pragma unroll
      for (int j = 0; j < {VECTORS}; ++j) {{
        const int k = (lane + 32 * j) * 8;
        v[r][j] = row0 + r < M && k < K ? __ldg((const uint4*)(xr + k))
                                        : make_uint4(0u, 0u, 0u, 0u);
      }}
    }}
#pragma unroll
    for (int r = 0; r < {STAT_ROWS}; ++r) {{
      const int row = row0 + r;
      if (row >= M) break;
      const u16* xr = (const u16*)x + (long long)row * K;
      const float shift = fs_cvt_{t}(__shfl_sync(0xffffffffu, v[r][0].x, 0) & 0xFFFFu);
      float s1 = 0.0f, s2 = 0.0f;
#pragma unroll
      for (int j = 0; j < {VECTORS}; ++j) {{
        if ((lane + 32 * j) * 8 < K) fs_add8_{t}(v[r][j], shift, s1, s2);
      }}
      for (int k = (lane + 32 * {VECTORS}) * 8; k < K; k += 256) {{
        fs_add8_{t}(__ldg((const uint4*)(xr + k)), shift, s1, s2);
      }}
      fs_finish_stats(stats, row, K, shift, s1, s2, lane, xr);
    }}
  }} else {{
    for (int row = row0; row < min(row0 + {STAT_ROWS}, M); ++row) {{
      const u16* xr = (const u16*)x + (long long)row * K;
      const float shift = fs_cvt_{t}(__ldg(xr));
      float s1 = 0.0f, s2 = 0.0f;
      for (int k = lane; k < K; k += 32) {{
        const float f = fs_cvt_{t}(__ldg(xr + k)) - shift;
        s1 += f;
        s2 += f * f;
      }}
      fs_finish_stats(stats, row, K, shift, s1, s2, lane, xr);
    }}
  }}
  return 0;
}}
"""


@dataclass(frozen=True)
class SoftmaxFinalise:
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

    @property
    def key(self) -> str:
        return _key(self)

    @property
    def function_name(self) -> str:
        return f"fusec_smfin_{self.key}"

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
