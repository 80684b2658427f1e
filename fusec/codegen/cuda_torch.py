"""CUDA fallback for "conv" and "matmul" groups: the group's ops through PyTorch on the GPU.

The Tensor Core templates for these kinds are a separate issue. Until then a
conv or matmul group on the ``cuda`` target runs op by op through PyTorch
(cuDNN/cuBLAS for the core, float32 for the fused elementwise ops, on the
caller's stream, zero-copy on the same buffers). It is correct but not fused:
the kernel header says so. Without PyTorch on the machine the launch raises a
FusecError naming the missing package.
"""

from __future__ import annotations

from fusec.codegen import KernelSource, io_specs
from fusec.codegen.cuda_common import Source, body_ops, check_leaves, kernel_name, yielded
from fusec.codegen.expr import TORCH, ExprGenerator, error_at, header
from fusec.dialect import ops as ai
from fusec.dialect.ops import spec_of

_TORCH_DTYPE = {"f16": "torch.float16", "bf16": "torch.bfloat16", "f32": "torch.float32"}


def generate(fused_op: ai.FusedOp, name: str, reason: str | None = None) -> KernelSource:
    """A module whose ``launch`` evaluates the group body with PyTorch on the GPU;
    ``reason`` says why the group's Tensor Core template cannot serve it."""
    name = kernel_name(name)
    ops = body_ops(fused_op)
    results = yielded(fused_op)
    check_leaves(fused_op, [v for op in ops for v in op.operands if v.owner not in ops])
    code = Source([])
    ins = [f"in{k}" for k in range(len(fused_op.inputs))]
    outs = [f"out{k}" for k in range(len(results))]
    code.add(0, f"def launch({', '.join(ins + outs)}, stream=0, sms=132):")
    code.add(1, f'"""Run the group\'s {len(ops)} op(s) with PyTorch on ``stream``."""')
    code.add(1, "torch = _torch()")
    code.add(1, "stream = torch.cuda.ExternalStream(stream_ptr(stream))")
    code.add(1, "with _ieee_fp32(torch), torch.cuda.stream(stream):")
    names = {}
    for k, value in enumerate(fused_op.block.args):
        spec = spec_of(value.type)
        names[value] = f"x{k}"
        code.add(2, f"x{k} = _tensor(torch, in{k}, {_TORCH_DTYPE[spec.dtype]}, {spec.shape!r})")
    for n, op in enumerate(ops):
        names[op.results[0]] = f"v{n}"
        code.add(2, f"v{n} = {_expression(op, [names[v] for v in op.operands])}")
    for k, value in enumerate(results):
        spec = spec_of(value.type)
        code.add(
            2,
            f"_tensor(torch, out{k}, {_TORCH_DTYPE[spec.dtype]}, {spec.shape!r})"
            f".copy_({names[value]})",
        )
    why = (
        f"the Tensor Core template cannot serve it: {reason};"
        if reason
        else "no fused CUDA template for this kind yet (Tensor Core templates: issue 12);"
    )
    notes = [
        f"target: cuda, FALLBACK: {why}",
        "runs the group's ops one by one through PyTorch (cuDNN/cuBLAS) on the GPU, "
        "elementwise ops in float32, on the caller's stream",
    ]
    source = "\n".join(
        [
            header(fused_op, notes=notes),
            "import contextlib",
            "import math",
            "",
            "from fusec.errors import FusecError",
            "from fusec.runtime.cuda import stream_ptr",
            "",
            "",
            "def _torch():",
            "    try:",
            "        import torch",
            "    except ImportError:",
            "        raise FusecError(",
            '            "this conv/matmul group runs through PyTorch on the cuda target "',
            '            "until its Tensor Core template exists: install torch"',
            "        ) from None",
            "    return torch",
            "",
            "",
            "@contextlib.contextmanager",
            "def _ieee_fp32(torch):",
            '    """f32 IR means f32 maths: no TF32 in cuBLAS/cuDNN (on by default for conv)."""',
            "    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32",
            "    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False",
            "    try:",
            "        yield",
            "    finally:",
            "        torch.backends.cuda.matmul.allow_tf32 = saved[0]",
            "        torch.backends.cudnn.allow_tf32 = saved[1]",
            "",
            "",
            "def _tensor(torch, flat, dtype, shape):",
            '    """A torch view (no copy) of a flat device array holding ``dtype`` values."""',
            "    t = torch.as_tensor(flat, device='cuda')",
            "    return (t if dtype == torch.float32 else t.view(dtype)).view(shape)",
            "",
            "",
            code.text(),
            "",
            "KERNELS = []  # no Numba kernels: nothing for --emit ptx",
            "",
        ]
    )
    inputs, outputs = io_specs(fused_op)
    kind = fused_op.kind_name
    return KernelSource(name, kind, "cuda", source, inputs, outputs, array_dtype=None)


def _expression(op, a: list[str]) -> str:
    """PyTorch expression for one op; results of elementwise ops are float32."""
    if isinstance(op, (ai.Conv2DOp, ai.MatmulOp)):  # the core runs in the declared dtype
        dtype = _TORCH_DTYPE[spec_of(op.results[0].type).dtype]
        a = [f"{x}.to({dtype})" for x in a]
    if isinstance(op, ai.Conv2DOp):
        attrs = op.attr_values()
        pads = attrs["padding"]
        if len(pads) == 4 and (pads[0], pads[1]) != (pads[2], pads[3]):
            pad = f"torch.nn.functional.pad({a[0]}, ({pads[1]}, {pads[3]}, {pads[0]}, {pads[2]}))"
            return (
                f"torch.nn.functional.conv2d({pad}, {a[1]}, stride={tuple(attrs['strides'])!r}, "
                f"dilation={tuple(attrs['dilations'])!r}, groups={int(attrs['groups'])})"
            )
        return (
            f"torch.nn.functional.conv2d({a[0]}, {a[1]}, stride={tuple(attrs['strides'])!r}, "
            f"padding={tuple(pads[:2])!r}, dilation={tuple(attrs['dilations'])!r}, "
            f"groups={int(attrs['groups'])})"
        )
    if isinstance(op, ai.MatmulOp):
        lhs = f"{a[0]}.transpose(-1, -2)" if op.attr("transpose_a") else a[0]
        rhs = f"{a[1]}.transpose(-1, -2)" if op.attr("transpose_b") else a[1]
        return f"torch.matmul({lhs}, {rhs})"
    if isinstance(op, ai.LayerNormOp):
        length = spec_of(op.results[0].type).shape[-1]
        return (
            f"torch.nn.functional.layer_norm({a[0]}.float(), ({length},), {a[1]}.float(), "
            f"{a[2]}.float(), {float(op.attr('epsilon'))!r})"
        )
    if isinstance(op, ai.SoftmaxOp):
        return f"torch.softmax({a[0]}.float(), dim={int(op.attr('axis'))})"
    if isinstance(op, ai.AiOp) and op.has_scalar():
        # the op's own scalar semantics, applied elementwise by torch in float32
        return ExprGenerator(language=TORCH).scalar(op, [f"{x}.float()" for x in _broadcast(op, a)])
    raise error_at(op, "has no PyTorch fallback")


def _broadcast(op, a: list[str]) -> list[str]:
    """Operands viewed as numpy broadcasting sees them: a bias along its axis."""
    if isinstance(op, ai.BiasAddOp):
        rank = len(spec_of(op.results[0].type).shape)
        shape = [1] * rank
        shape[op.attr("axis") % rank] = -1
        return [a[0], f"{a[1]}.view({tuple(shape)!r})"]
    return a
