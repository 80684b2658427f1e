"""Inline-PTX building blocks shared by the generated Hopper kernels (gemm, conv, attention).

The kernel layer's headers (``include/fusec``) hold the static part; the wgmma
instructions of any N, with A from shared memory (``wgmma_ss``) or from registers
(``wgmma_rs``), are generated here, each as a member of its instantiation's ``Config``:
an asm statement's operand count (N/2 accumulators) cannot be a C++ template parameter.
Everything is generated from integers and fixed names, never from user text.
"""

from __future__ import annotations

#: The warp-specialised kernels' register split (``setmaxnreg``): the producer warpgroup
#: gives registers up, the consumers take them (40 + 2 x 232 = 3 x 168 per thread).
PRODUCER_REGISTERS = 40
CONSUMER_REGISTERS = 232
#: the registers of one SM, all of which one block of these kernels takes (one block an SM)
_REGISTER_FILE = 65536


def consumer_registers(consumers: int, producer: int = PRODUCER_REGISTERS) -> int:
    """What ``setmaxnreg.inc`` gives each consumer thread beside a producer warpgroup of
    ``producer`` registers (40 by default): ``CONSUMER_REGISTERS`` for one or two consumer
    warpgroups, what the register file leaves for three (152: 40 x 128 + 152 x 384 <=
    65536; 232 would never be granted and the warpgroups would wait for it forever)."""
    share = (_REGISTER_FILE // 128 - producer) // consumers // 8 * 8  # setmaxnreg: x8
    return min(CONSUMER_REGISTERS, share)


#: the wgmma operand type of an operand element type: f32 operands run as tf32 (the
#: instruction reads the f32 bit patterns and uses 10 of their 23 mantissa bits); float8
#: operands (issue 31) are read as their codes, e4m3 or e5m2
WGMMA_TYPE = {
    "f16": "f16",
    "bf16": "bf16",
    "f32": "tf32",
    "f8E4M3FN": "e4m3",
    "f8E5M2": "e5m2",
}
#: K of one wgmma instruction, by operand type: 32 bytes of each K-major row
WGMMA_K = {"f16": 16, "bf16": 16, "f32": 8, "f8E4M3FN": 32, "f8E5M2": 32}
#: the wgmma operand types read K-major only: the instruction has no transpose for them
K_MAJOR_ONLY = ("tf32", "e4m3", "e5m2")


def wgmma_ss(
    name: str, n: int, dtype: str, trans_a: int, trans_b: int, b_dtype: str | None = None
) -> str:
    """``name(float* d, u64 desc_a, u64 desc_b, int scale_d)``: one wgmma.m64n{n}k16 (k8 for
    f32 operands, run as tf32; k32 for float8 codes) with both operands in shared memory,
    accumulating into ``d`` (n/2 floats). tf32 and float8 operands are K-major only: wgmma
    has no transpose for them. ``b_dtype``: B's type where it differs from A's (float8
    only: e4m3 x e5m2)."""
    count = n // 2
    regs = ", ".join(f"%{i}" for i in range(count))
    outs = ", ".join(f'"+f"(d[{i}])' for i in range(count))
    kind = WGMMA_TYPE[dtype]
    kind_b = WGMMA_TYPE[b_dtype or dtype]
    if kind_b != kind and {kind, kind_b} != {"e4m3", "e5m2"}:
        raise ValueError(f"wgmma mixes float8 types only, not {kind} x {kind_b}")
    if kind in K_MAJOR_ONLY and (trans_a or trans_b):
        raise ValueError(f"{kind} wgmma reads K-major operands only (no transpose)")
    trans = "" if kind in K_MAJOR_ONLY else f", {trans_a}, {trans_b}"
    return f"""
static __device__ __forceinline__ void {name}(float* d, u64 da, u64 db, int scale_d) {{
  asm volatile(
    "{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{count + 2}, 0;\\n"
    "wgmma.mma_async.sync.aligned.m64n{n}k{WGMMA_K[dtype]}.f32.{kind}.{kind_b} "
    "{{{regs}}}, %{count}, %{count + 1}, p, 1, 1{trans};\\n}}\\n"
    : {outs}
    : "l"(da), "l"(db), "r"(scale_d));
}}
"""


def wgmma_rs(name: str, n: int, dtype: str, trans_b: int) -> str:
    """``name(float* d, const u32* a, u64 desc_b, int scale_d)``: one wgmma.m64n{n}k16 with
    A from registers (4 x 32-bit: the m64k16 fragment of this thread, the layout of an
    m16n8k16 A fragment per warp) and B in shared memory."""
    count = n // 2
    regs = ", ".join(f"%{i}" for i in range(count))
    outs = ", ".join(f'"+f"(d[{i}])' for i in range(count))
    a_regs = ", ".join(f"%{count + i}" for i in range(4))
    kind = WGMMA_TYPE[dtype]
    return f"""
static __device__ __forceinline__ void {name}(float* d, const u32* a, u64 db, int scale_d) {{
  asm volatile(
    "{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{count + 5}, 0;\\n"
    "wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{kind}.{kind} "
    "{{{regs}}}, {{{a_regs}}}, %{count + 4}, p, 1, 1, {trans_b};\\n}}\\n"
    : {outs}
    : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(scale_d));
}}
"""
