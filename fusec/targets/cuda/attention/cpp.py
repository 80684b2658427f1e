"""The CUDA C++ of the fused attention kernel: ``softmax(Q K^T * scale [+ causal]) V``
(an ``ai.attention`` whose mask is none or causal; the scale is a constant of the kernel).

One block computes ``BM = 128`` query rows of one (batch, head): FlashAttention's
online softmax on the Hopper core (FA3's structure without its intra-warpgroup
pipelining), as one ``extern "C"`` device function in the shape of the GEMM's:

* warpgroup 0, thread 0 (the producer, 40 registers) loads the block's Q tile
  once and then, per ``BN = 128`` keys, the K and V tiles into a two-stage
  ring (TMA, 128-byte swizzle; K and V have their own ``full``/``empty``
  mbarriers so that Q K^T can start before V has landed);
* two consumer warpgroups own 64 query rows each: ``S = Q K^T`` by
  ``wgmma.m64n128k16`` from shared memory; in registers, ``S * scale * log2 e``,
  the causal / ragged-key mask, the running row maximum (quad shuffles), the
  rescale of the running sum and of O, ``P = exp2(S - m)``; then
  ``O += P V`` by ``wgmma.m64n{DV}k16`` with P as the A operand *in
  registers*: the accumulator fragment of S, packed to 16-bit pairs, is
  exactly the A fragment of the next wgmma (no shared-memory round trip);
* at the end O / l is rounded once and stored (rows past the sequence are
  not stored). The S x S scores never leave the registers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from fusec.targets.cuda.gemm.cpp import CONSUMER_REGISTERS, PRODUCER_REGISTERS
from fusec.targets.cuda.headers import expand
from fusec.targets.cuda.linked import content_key
from fusec.targets.cuda.ptx import HELPERS, wgmma_rs, wgmma_ss

BM = 128  # query rows per block: 2 consumer warpgroups x 64
BN = 128  # keys per step
KV_STAGES = 2
THREADS = 384
HEAD_DIMS = (64, 128)
DTYPES = ("f16", "bf16")
_PACK = {"f16": "fs_pack_f16", "bf16": "fs_pack_bf16"}


@dataclass(frozen=True)
class AttentionSpec:
    """Everything the attention kernel specialises on (all sizes are constants)."""

    batch: int  # flattened batch x heads
    sq: int  # query length
    sk: int  # key length
    d: int  # Q/K head size
    dv: int  # V head size
    dtype: str = "f16"
    out_dtype: str = "f16"
    scale: float = 1.0  # the scores' factor (``ai.attention``'s scale)
    causal: bool = False
    nan_to_zero: bool = False  # a NaN probability is 0 (``ai.attention``'s nan_to_zero)

    def __post_init__(self) -> None:
        why = problem(self)
        if why:
            raise ValueError(why)

    @property
    def key(self) -> str:
        return content_key(self)

    @property
    def function_name(self) -> str:
        return f"fusec_attn_{self.key}"

    @property
    def threads(self) -> int:
        return THREADS

    def cpp_source(self) -> str:
        return expand(generate(self))

    def arg_count(self) -> tuple[int, int]:
        """(u64, int32) kernel parameters: map_q, map_k, map_v, out."""
        return 4, 0

    @property
    def q_blocks(self) -> int:
        return -(-self.sq // BM)

    @property
    def grid(self) -> int:
        return self.q_blocks * self.batch

    @property
    def smem_bytes(self) -> int:
        q = BM * self.d * 2
        kv = KV_STAGES * BN * (self.d + self.dv) * 2
        return q + kv + 8 * (1 + 4 * KV_STAGES) + 1024

    @property
    def flops(self) -> int:
        full = 2 * self.batch * self.sq * self.sk * (self.d + self.dv)
        return full // 2 if self.causal else full


def problem(spec: AttentionSpec) -> str | None:
    """Why the kernel cannot serve ``spec`` (None when it can)."""
    if spec.dtype not in DTYPES:
        return f"{spec.dtype} attention: the kernel takes f16 or bf16"
    if spec.out_dtype not in ("f16", "bf16", "f32"):
        return f"output type {spec.out_dtype}"
    if spec.d not in HEAD_DIMS or spec.dv not in HEAD_DIMS:
        return f"head sizes {spec.d}/{spec.dv}: the kernel takes 64 or 128"
    if not math.isfinite(spec.scale):
        return f"scale {spec.scale}: not a finite number"
    if spec.causal and spec.sq != spec.sk:
        return "a causal mask with different query and key lengths"
    if min(spec.batch, spec.sq, spec.sk) < 1:
        return "an empty dimension"
    return None


def generate(spec: AttentionSpec) -> str:
    """The ``.cu`` source of ``spec``'s device function."""
    s_regs = BN // 2
    o_regs = spec.dv // 2
    pack = _PACK[spec.dtype]
    scale_log2 = float(spec.scale) * 1.4426950408889634  # a number: no user text in the C++
    mask = " + causal mask" if spec.causal else ""
    return f"""// fusec generated fused attention: softmax(Q K^T * scale{mask}) V
// batch {spec.batch}, {spec.sq} queries x {spec.sk} keys, head {spec.d}/{spec.dv}, {spec.dtype},
// scale {spec.scale!r}
{HELPERS}
{wgmma_ss("fs_wgmma_qk", BN, spec.dtype, 0, 0)}
{wgmma_rs("fs_wgmma_pv", spec.dv, spec.dtype, 1)}
#define BM {BM}
#define BN {BN}
#define SQ {spec.sq}
#define SK {spec.sk}
#define D {spec.d}
#define DV {spec.dv}
#define QB {spec.q_blocks}
#define NKV {-(-spec.sk // BN)}
#define KV_STAGES {KV_STAGES}
#define CAUSAL {int(spec.causal)}
#define NAN_TO_ZERO {int(spec.nan_to_zero)}
#define Q_BYTES (BM * D * 2)
#define K_BYTES (BN * D * 2)
#define V_BYTES (BN * DV * 2)

static __device__ __forceinline__ float fs_exp2(float x) {{
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}}
// 1/x to 1 ulp without the IEEE slow path (a called subroutine)
static __device__ __forceinline__ float fs_rcp(float x) {{
  float y;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}}
static __device__ __forceinline__ float fs_shfl_xor(float v, int mask) {{
  return __shfl_xor_sync(0xffffffffu, v, mask);
}}

extern "C" __device__ __attribute__((always_inline))
int {spec.function_name}(int* ret, u64 smem_raw, u64 map_q, u64 map_k, u64 map_v, u64 out) {{
  const u32 base = (fs_smem((const void*)smem_raw) + 1023u) & ~1023u;
  const u32 sq = base;
  const u32 sk = sq + Q_BYTES;
  const u32 sv = sk + KV_STAGES * K_BYTES;
  // barriers: q_full, k_full[s], v_full[s], k_empty[s], v_empty[s]
  const u32 q_full = sv + KV_STAGES * V_BYTES;
  const u32 k_full = q_full + 8;
  const u32 v_full = k_full + 8 * KV_STAGES;
  const u32 k_empty = v_full + 8 * KV_STAGES;
  const u32 v_empty = k_empty + 8 * KV_STAGES;
  const int tid = threadIdx.x;
  const int wg = tid / 128;
  const int qb = blockIdx.x % QB;
  const int bh = blockIdx.x / QB;
  // causal: keys up to the block's last query row
  const int nkv = CAUSAL ? min(NKV, ((qb + 1) * BM + BN - 1) / BN) : NKV;
  if (tid == 0) {{
    fs_bar_init(q_full, 1);
    for (int s = 0; s < KV_STAGES; ++s) {{
      fs_bar_init(k_full + 8 * s, 1);
      fs_bar_init(v_full + 8 * s, 1);
      fs_bar_init(k_empty + 8 * s, 2);
      fs_bar_init(v_empty + 8 * s, 2);
    }}
    fs_bar_init_fence();
  }}
  __syncthreads();
  if (wg == 0) {{
    asm volatile("setmaxnreg.dec.sync.aligned.u32 {PRODUCER_REGISTERS};" ::: "memory");
    if (tid == 0) {{
      fs_prefetch_map(map_q);
      fs_prefetch_map(map_k);
      fs_prefetch_map(map_v);
      fs_bar_expect(q_full, Q_BYTES);
#pragma unroll
      for (int c = 0; c < D / 64; ++c)
        fs_tma_load(sq + c * (BM * 128), map_q, q_full, c * 64, qb * BM, bh);
      for (int j = 0; j < nkv; ++j) {{
        const int st = j % KV_STAGES;
        const u32 phase = ((u32)(j / KV_STAGES) & 1u) ^ 1u;
        fs_bar_wait(k_empty + 8 * st, phase);
        fs_bar_expect(k_full + 8 * st, K_BYTES);
#pragma unroll
        for (int c = 0; c < D / 64; ++c)
          fs_tma_load(sk + st * K_BYTES + c * (BN * 128), map_k, k_full + 8 * st,
                       c * 64, j * BN, bh);
        fs_bar_wait(v_empty + 8 * st, phase);
        fs_bar_expect(v_full + 8 * st, V_BYTES);
#pragma unroll
        for (int c = 0; c < DV / 64; ++c)
          fs_tma_load(sv + st * V_BYTES + c * (BN * 128), map_v, v_full + 8 * st,
                       c * 64, j * BN, bh);
      }}
    }}
  }} else {{
    asm volatile("setmaxnreg.inc.sync.aligned.u32 {CONSUMER_REGISTERS};" ::: "memory");
    const int cw = wg - 1;
    const int lt = tid % 128;
    const int warp = lt / 32;
    const int lane = lt % 32;
    const float sl2 = {scale_log2!r}f;  // scale * log2(e): the softmax in base 2
    const float NEG_INF = __int_as_float(0xff800000);
    // this thread's two rows (h = 0, 1) of the 64-row slice: 16 warp + lane/4 + 8 h
    const int row0 = qb * BM + cw * 64 + warp * 16 + lane / 4;
    float o[{o_regs}];
#pragma unroll
    for (int i = 0; i < {o_regs}; ++i) o[i] = 0.0f;
    float m_run[2] = {{NEG_INF, NEG_INF}};
    float l_run[2] = {{0.0f, 0.0f}};
    fs_bar_wait(q_full, 0u);
    const u32 q_base = sq + (u32)(cw * 64 * 128);
    for (int j = 0; j < nkv; ++j) {{
      const int st = j % KV_STAGES;
      const u32 phase = (u32)(j / KV_STAGES) & 1u;
      float s[{s_regs}];
      fs_bar_wait(k_full + 8 * st, phase);
      const u32 k_base = sk + st * K_BYTES;
      fs_wg_fence();
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {{
        const u32 off = (u32)((kk % 4) * 32);
        fs_wgmma_qk(s, fs_desc(q_base + (u32)((kk / 4) * (BM * 128)) + off, 16u, 1024u),
                    fs_desc(k_base + (u32)((kk / 4) * (BN * 128)) + off, 16u, 1024u), kk != 0);
      }}
      fs_wg_commit();
      fs_wg_wait<0>();
#pragma unroll
      for (int i = 0; i < {s_regs}; ++i) fs_fence_reg(s[i]);
      if (lt == 0) fs_bar_arrive(k_empty + 8 * st);
      // scores in base 2; keys past the end (and, causal, after the query) are -inf
      const bool edge = (j + 1) * BN > SK || (CAUSAL && (j + 1) * BN > qb * BM + cw * 64);
      float mx[2] = {{m_run[0], m_run[1]}};
#pragma unroll
      for (int i = 0; i < {s_regs}; ++i) {{
        float v = s[i] * sl2;
        if (edge) {{
          const int col = j * BN + 8 * (i / 4) + 2 * (lane % 4) + (i % 2);
          const int row = row0 + 8 * ((i / 2) % 2);
          if (col >= SK || (CAUSAL && col > row)) v = NEG_INF;
        }}
        s[i] = v;
        mx[(i / 2) % 2] = fmaxf(mx[(i / 2) % 2], v);
      }}
      float corr[2], shift[2], sum[2];
#pragma unroll
      for (int h = 0; h < 2; ++h) {{
        mx[h] = fmaxf(mx[h], fs_shfl_xor(mx[h], 1));
        mx[h] = fmaxf(mx[h], fs_shfl_xor(mx[h], 2));
        shift[h] = mx[h] == NEG_INF ? 0.0f : mx[h];  // a fully masked row stays 0
        corr[h] = fs_exp2(m_run[h] - shift[h]);
        m_run[h] = mx[h];
        sum[h] = 0.0f;
      }}
#pragma unroll
      for (int i = 0; i < {s_regs}; ++i) {{
        const float p = fs_exp2(s[i] - shift[(i / 2) % 2]);
        s[i] = p;
        sum[(i / 2) % 2] += p;
      }}
#pragma unroll
      for (int h = 0; h < 2; ++h) l_run[h] = l_run[h] * corr[h] + sum[h];
#pragma unroll
      for (int i = 0; i < {o_regs}; ++i) o[i] *= corr[(i / 2) % 2];
      // O += P V: the S accumulator fragment, packed, is the A fragment of m64k16 slice kk
      u32 pa[BN / 16][4];
#pragma unroll
      for (int kk = 0; kk < BN / 16; ++kk)
#pragma unroll
        for (int e = 0; e < 4; ++e) pa[kk][e] = {pack}(s[8 * kk + 2 * e], s[8 * kk + 2 * e + 1]);
      fs_bar_wait(v_full + 8 * st, phase);
      const u32 v_base = sv + st * V_BYTES;
      fs_wg_fence();
#pragma unroll
      for (int kk = 0; kk < BN / 16; ++kk)
        fs_wgmma_pv(o, pa[kk], fs_desc(v_base + (u32)(kk * 2048), (u32)(BN * 128), 1024u), 1);
      fs_wg_commit();
      fs_wg_wait<0>();
#pragma unroll
      for (int i = 0; i < {o_regs}; ++i) fs_fence_reg(o[i]);
      if (lt == 0) fs_bar_arrive(v_empty + 8 * st);
    }}
    // O / l, l summed over the quad of lanes that share the row
#pragma unroll
    for (int h = 0; h < 2; ++h) {{
      float l = l_run[h];
      l += fs_shfl_xor(l, 1);
      l += fs_shfl_xor(l, 2);
      const float inv = l > 0.0f ? fs_rcp(l) : 0.0f;
      // nan_to_zero: a NaN sum means a NaN or infinite score in the row, which makes every
      // probability of the row NaN (the row maximum is NaN) and the graph sets them to 0.
      const bool zero_row = NAN_TO_ZERO && !(l == l);
      const int row = row0 + 8 * h;
      if (row < SQ) {{
        const long long base_o = ((long long)bh * SQ + row) * DV;
#pragma unroll
        for (int q = 0; q < DV / 8; ++q) {{
          const int col = 8 * q + 2 * (lane % 4);
          fs_st2_{spec.out_dtype}((void*)out, base_o + col,
                                  zero_row ? 0.0f : o[4 * q + 2 * h] * inv,
                                  zero_row ? 0.0f : o[4 * q + 2 * h + 1] * inv);
        }}
      }}
    }}
  }}
  return 0;
}}
"""
