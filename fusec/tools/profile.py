"""``fusec profile``: where a compiled program's time goes, kernel by kernel.

``profile(...)`` compiles a graph (or takes a ``CompiledModule``), runs it on
seeded random inputs (or given ones) a few times to warm up, then ``repeat``
times with a launch recorder (``fusec.runtime.launch.LaunchRecorder``): the
program's own per-launch hook, which times every kernel launch on the target's
clock (CUDA events on the call's stream on cuda, ``time.perf_counter`` on the
cpu, where a timed call runs the compiled program split into one segment a kernel,
on the buffers an ordinary call uses: ``fusec.targets.cpu.program``). Each kernel's
time is the median over the repeats.

For every kernel it reports its kind, how it runs (the template, or
``FALLBACK: reason``, as its header says), its share of the kernels' total,
the work its group does (``group_work``) and, where the device's peak numbers
are known (``DEVICE_CAPS``), how close it came to the roofline: the least time
the device could do its FLOPs and move its bytes in, as a percentage of the
time it took.

The gap between the kernels' sum and an ordinary call's wall time is what the
call spends around its kernels (argument checks, buffers, Python, launches,
synchronisation): it is reported, not hidden. Times are medians of calls made
one after another on warm caches (the inputs stay in cache between calls on a
cpu: a model's first call after other work is slower).
"""

from __future__ import annotations

import html
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from xdsl.dialects.builtin import ModuleOp

from fusec.dialect import ops as ai
from fusec.dialect.ops import spec_of
from fusec.dialect.work import op_flops
from fusec.errors import FusecError
from fusec.ir.dtypes import ELEMENT_TYPES
from fusec.ir.module import entry_function

#: Kernels listed in the text table before the rest are summed up as "other".
TOP = 15


# ------------------------------------------------------------------ device peaks


@dataclass(frozen=True)
class DeviceCaps:
    """A device's peak rates: dense matrix FLOP/s by operand type on its matrix units
    (Tensor Cores), FLOP/s of its vector units in float32 (what fused elementwise and
    reduction work computes in), and memory bandwidth in bytes/s."""

    name: str
    matrix_flops: dict[str, float]
    vector_flops: float
    bandwidth: float
    source: str = ""
    #: Words of other models' names that share ``name`` (their peaks differ).
    unlike: tuple[str, ...] = ()

    def matrix_peak(self, dtype: str) -> float:
        return self.matrix_flops.get(dtype, self.vector_flops)


#: Peak numbers by a word of the device's name. H200 SXM: NVIDIA's datasheet, dense
#: (no sparsity); f32 matrix work is IEEE float32 on the CUDA cores (fusec uses TF32
#: for no f32 matmul or conv), so its peak is the vector one.
DEVICE_CAPS: tuple[DeviceCaps, ...] = (
    DeviceCaps(
        "H200",
        {"f16": 989e12, "bf16": 989e12},
        67e12,
        4.8e12,
        "H200 SXM datasheet: 989 TFLOP/s dense f16/bf16 Tensor Core, 67 TFLOP/s f32, "
        "4.8 TB/s HBM3e",
        unlike=("NVL",),  # the H200 NVL (PCIe) has lower peaks
    ),
)


def device_caps(device: str) -> DeviceCaps | None:
    """The peak numbers of the device named ``device``, or None when not known."""
    words = device.split()
    return next(
        (
            caps
            for caps in DEVICE_CAPS
            if caps.name in words and not any(w in words for w in caps.unlike)
        ),
        None,
    )


# ------------------------------------------------------------------ work of a group


@dataclass(frozen=True)
class Work:
    """What one group computes: matrix FLOPs (matmul, conv, attention: two per
    multiply-add, masked positions included) by operand type, other FLOPs (one per
    element an elementwise op writes or a reduction reads; layout ops and casts none),
    and bytes (every input read once, every output written once, in their types)."""

    matrix_flops: dict[str, int] = field(default_factory=dict)
    other_flops: int = 0
    bytes: int = 0

    @property
    def flops(self) -> int:
        return sum(self.matrix_flops.values()) + self.other_flops

    def ideal_seconds(self, caps: DeviceCaps) -> tuple[float, str]:
        """The least time ``caps``' device could do this in, and its bound."""
        compute = sum(f / caps.matrix_peak(t) for t, f in self.matrix_flops.items())
        compute += self.other_flops / caps.vector_flops
        memory = self.bytes / caps.bandwidth
        return (compute, "compute") if compute > memory else (memory, "memory")


def _nbytes(value: Any) -> int:
    spec = spec_of(value.type)
    return math.prod(spec.shape) * ELEMENT_TYPES[spec.dtype].itemsize


def group_work(group: ai.FusedOp) -> Work:
    """The work of one ``ai.fused`` group (see ``Work``)."""
    matrix: dict[str, int] = {}
    other = 0
    for op in group.block.ops:
        flops, dtype = op_flops(op)
        if dtype is None:
            other += flops
        else:
            matrix[dtype] = matrix.get(dtype, 0) + flops
    moved = sum(_nbytes(v) for v in group.inputs) + sum(_nbytes(r) for r in group.results)
    return Work(matrix, other, moved)


# ------------------------------------------------------------------ how a kernel runs


def how_it_runs(kernel: Any) -> str:
    """How a kernel computes its group, as its header says: ``FALLBACK: reason`` for a
    group a target's fallback runs, else the template's notes (cpu boilerplate left
    out), e.g. ``template: pointwise; layout: ...``."""
    if kernel.remark is not None:
        return f"FALLBACK: {kernel.remark.reason}"
    notes = _header_notes(kernel.source)
    fallback = next((n for n in notes if "FALLBACK:" in n), None)
    if fallback is not None:
        return "FALLBACK: " + fallback.split("FALLBACK:", 1)[1].strip().rstrip(";")
    shown = []
    for note in notes:
        if note.startswith("cpu: arrays are flat float32"):
            continue  # every cpu kernel's
        if note.startswith("target: "):
            note = note.split(",", 1)[1].strip() if "," in note else note
        shown.append(note.rstrip(";"))
    return "; ".join(shown) or f"template: {kernel.kind}"


def _header_notes(source: str) -> list[str]:
    """What a kernel's source says of its method: the comment right above a kernel's
    decorator (cpu templates), then its header's notes (``fusec.codegen.expr.header``:
    the leading comment lines after the ops and the I/O types)."""
    lines = []
    for line in source.splitlines()[:40]:
        if not line.startswith("#"):
            break
        lines.append(line[1:].strip())
    notes = [n for n in lines[2:] if not n.startswith(("inputs", "outputs"))]
    # a cpu template describes its method in a comment right above the kernel's decorator
    text = source.splitlines()
    above = [
        line[1:].strip()
        for line, after in zip(text, text[1:], strict=False)
        if line.startswith("# ") and after.startswith("@")
    ]
    return above + notes


# ------------------------------------------------------------------ the result


@dataclass
class KernelProfile:
    """One kernel's measurements: median seconds over the repeats and its work."""

    name: str
    kind: str
    how: str
    seconds: float
    work: Work
    share: float = 0.0
    ideal: tuple[float, str] | None = None

    @property
    def flop_rate(self) -> float:
        return self.work.flops / self.seconds if self.seconds > 0 else 0.0

    @property
    def byte_rate(self) -> float:
        return self.work.bytes / self.seconds if self.seconds > 0 else 0.0

    @property
    def roofline(self) -> float | None:
        """Percent of the device roofline: the ideal time over the measured time."""
        if self.ideal is None or self.seconds <= 0:
            return None
        return 100.0 * self.ideal[0] / self.seconds


@dataclass
class Profile:
    """Per-kernel times of one program (``profile``); ``table()`` and ``html()`` show it.

    ``kernel_seconds`` is the sum of the kernels' medians; ``timed_seconds`` the
    median whole timed call on the clock that timed the kernels (on a GPU: events,
    the launches queued back to back); ``host_seconds`` the median time the host
    took to issue a timed call; ``plain_seconds`` the median wall time of an
    ordinary call (no recorder; on cuda as it normally runs, CUDA graphs included)
    with its results ready.
    """

    entry: str
    target: str
    device: str
    repeat: int
    warmup: int
    kernels: list[KernelProfile]
    kernel_seconds: float
    timed_seconds: float
    host_seconds: float
    plain_seconds: float
    caps: DeviceCaps | None
    notes: list[str]
    module: ModuleOp

    @property
    def overhead_seconds(self) -> float:
        """An ordinary call's time around its kernels: launch and Python overhead."""
        return self.plain_seconds - self.kernel_seconds

    def sorted_kernels(self) -> list[KernelProfile]:
        return sorted(self.kernels, key=lambda k: (-k.seconds, k.name))

    def table(self, top: int = TOP) -> str:
        """The text report: header, the ``top`` kernels by time and "other", totals."""
        return _text_table(self, top)

    def html(self, top: int | None = None) -> str:
        """One self-contained page: the table beside the fusion graph."""
        return _html_page(self, top)

    def to_dict(self) -> dict[str, Any]:
        """The measurements as plain data (JSON-ready)."""
        return {
            "entry": self.entry,
            "target": self.target,
            "device": self.device,
            "repeat": self.repeat,
            "warmup": self.warmup,
            "kernel_seconds": self.kernel_seconds,
            "timed_seconds": self.timed_seconds,
            "host_seconds": self.host_seconds,
            "plain_seconds": self.plain_seconds,
            "notes": list(self.notes),
            "kernels": [
                {
                    "name": k.name,
                    "kind": k.kind,
                    "how": k.how,
                    "seconds": k.seconds,
                    "share": k.share,
                    "flops": k.work.flops,
                    "bytes": k.work.bytes,
                    "roofline_percent": k.roofline,
                    "bound": k.ideal[1] if k.ideal else None,
                }
                for k in self.kernels
            ],
        }


# ------------------------------------------------------------------ measuring


def profile(
    source: Any,
    *,
    target: str = "auto",
    pipeline: str | None = None,
    entry: str | None = None,
    inputs: str | Path | Sequence[np.ndarray] | None = None,
    seed: int = 0,
    repeat: int = 20,
    warmup: int = 3,
) -> Profile:
    """Time every kernel of ``source`` (a ``CompiledModule`` or ``DynamicCompiledModule``,
    a module, IR text or a path; an .onnx model is imported first) on ``inputs`` (an
    .npz path or arrays; default: standard-normal arrays drawn with ``seed``; needed for
    dynamic dimensions): ``warmup`` ordinary calls, then ``repeat`` timed ones; medians
    per kernel (see the module docstring)."""
    from fusec.api import CompiledModule
    from fusec.tools.runner import load_inputs, random_inputs

    if isinstance(repeat, bool) or not isinstance(repeat, int) or repeat < 1:
        raise FusecError(f"--repeat must be a positive number of calls, got {repeat}")
    if isinstance(warmup, bool) or not isinstance(warmup, int) or warmup < 0:
        raise FusecError(f"--warmup must be 0 or more calls, got {warmup}")
    from fusec.runtime.specialize import DynamicCompiledModule

    compiled = (
        source
        if isinstance(source, CompiledModule | DynamicCompiledModule)
        else _compile(source, target, pipeline, entry)
    )
    compiled = _specialized(compiled, inputs)
    program = compiled.program
    if program is None:
        raise FusecError(
            "this module was compiled without a runtime (executable=False): compile it "
            "again to profile it"
        )
    if not hasattr(program, "launch_recorder"):
        raise FusecError(
            f"target '{compiled.target}' runs no kernels to profile (give cpu or cuda)"
        )
    fn = entry_function(compiled.module, compiled.entry)
    if inputs is None:
        arrays = random_inputs(fn, seed)
    elif isinstance(inputs, (str, Path)):
        arrays = load_inputs(fn, inputs)
    else:
        arrays = list(inputs)
    return _measure(compiled, program, arrays, repeat, warmup)


def _compile(source: Any, target: str, pipeline: str | None, entry: str | None) -> Any:
    from fusec.api import compile as fusec_compile
    from fusec.api import from_onnx

    if isinstance(source, (str, Path)) and str(source).lower().endswith(".onnx"):
        source = from_onnx(source)
    return fusec_compile(source, target=target, pipeline=pipeline, entry=entry)


def _specialized(compiled: Any, inputs: str | Path | Sequence[np.ndarray] | None) -> Any:
    """A dynamic module's specialization for the shapes of ``inputs`` (an ordinary
    CompiledModule as it is): only inputs tell which shapes to profile."""
    from fusec.runtime.specialize import DynamicCompiledModule, shape_of
    from fusec.tools.runner import npz_argument_shapes

    if not isinstance(compiled, DynamicCompiledModule):
        return compiled
    if inputs is None:
        raise FusecError(
            f"@{compiled.entry} has dynamic dimensions ({', '.join(compiled.model.symbols)}): "
            "give inputs (arrays or an .npz file): their shapes choose what is compiled"
        )
    if isinstance(inputs, (str, Path)):
        shapes = npz_argument_shapes(inputs, compiled.model.argument_names)
    else:
        shapes = [shape_of(a) for a in inputs]
    return compiled.specialize(*shapes)


def _measure(compiled: Any, program: Any, arrays: list, repeat: int, warmup: int) -> Profile:
    recorder = program.launch_recorder()
    args = recorder.inputs(arrays)
    warmup = max(1, warmup)  # the first call compiles (or loads) the kernels
    for _ in range(warmup):  # and fills caches (and records CUDA graphs)
        recorder.time_plain(program, args)
    recorder.time_call(program, args)  # the recorder's own first use (its kernel, events)
    calls, plain = [], []
    for _ in range(repeat):  # alternated: a drift of the machine's speed hits both alike
        calls.append(recorder.time_call(program, args))
        plain.append(recorder.time_plain(program, args))
    per_launch: dict[str, list[float]] = {}
    for call in calls:
        for label, seconds in call.launches:
            per_launch.setdefault(label, []).append(seconds)
    device = recorder.device()
    caps = device_caps(device)
    kernels = _kernel_profiles(compiled, program, per_launch, caps)
    total = sum(k.seconds for k in kernels)
    for k in kernels:
        k.share = 100.0 * k.seconds / total if total > 0 else 0.0
    notes = recorder.notes(program)
    timed = statistics.median(c.total for c in calls)
    if total > timed * 1.05 + 5e-6:  # a span outside the call, or clocks disagree
        notes.append(
            f"the kernels' medians add up to {_ms(total)}, more than the whole timed "
            f"call ({_ms(timed)}): the per-launch times are not trustworthy"
        )
    plain_median = statistics.median(plain)
    device_clock = any(c.total != c.host for c in calls)  # events, not the host's clock
    if device_clock and timed > 1.10 * plain_median + 20e-6:
        notes.append(
            f"the whole timed call took {_ms(timed)} on the device's clock, more than an "
            f"ordinary call's wall time ({_ms(plain_median)}): the device clock and the wall "
            "clock disagree, the per-launch times are not trustworthy"
        )
    if caps is None:
        notes.append(f"no peak numbers for '{device}': no roofline column")
    return Profile(
        compiled.entry,
        compiled.target,
        device,
        repeat,
        warmup,
        kernels,
        total,
        timed,
        statistics.median(c.host for c in calls),
        plain_median,
        caps,
        notes,
        compiled.module,
    )


def _kernel_profiles(
    compiled: Any, program: Any, per_launch: dict[str, list[float]], caps: DeviceCaps | None
) -> list[KernelProfile]:
    """One entry per kernel, in launch order (the launches are the entry function's
    ``ai.fused`` groups in order; a view is no kernel and is left out)."""
    groups = [
        op
        for op in entry_function(compiled.module, compiled.entry).body.block.ops
        if isinstance(op, ai.FusedOp)
    ]
    if len(groups) != len(program.launches):
        raise AssertionError("the program's launches are not the entry's ai.fused groups")
    kernels = []
    for group, launch in zip(groups, program.launches, strict=True):
        if launch.is_view:
            continue
        times = per_launch.get(launch.label)
        if not times:
            raise AssertionError(f"{launch.label} was never timed")
        work = group_work(group)
        kernel = launch.kernel
        seconds = statistics.median(times)
        ideal = work.ideal_seconds(caps) if caps is not None else None
        kernels.append(
            KernelProfile(kernel.name, kernel.kind, how_it_runs(kernel), seconds, work, ideal=ideal)
        )
    return kernels


# ------------------------------------------------------------------ the text table


def _si(value: float, unit: str = "") -> str:
    """``value`` with an SI prefix: 1.23 G, 456 M, 7.89 k."""
    for factor, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= factor:
            return f"{value / factor:.3g} {prefix}{unit}"
    return f"{value:.3g} {unit}".rstrip()


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3f} ms"


def _row(k: KernelProfile, width: int) -> list[str]:
    how = k.how if len(k.how) <= width else k.how[: width - 3] + "..."
    roof = f"{k.roofline:.0f}% {k.ideal[1]}" if k.roofline is not None and k.ideal else "-"
    return [
        k.name,
        k.kind,
        how,
        f"{k.seconds * 1e6:.1f}",
        f"{k.share:.1f}%",
        _si(k.work.flops),
        _si(k.work.bytes, "B"),
        _si(k.flop_rate),
        _si(k.byte_rate, "B/s"),
        roof,
    ]


_COLUMNS = [
    "kernel",
    "kind",
    "how it runs",
    "us",
    "share",
    "FLOP",
    "bytes",
    "FLOP/s",
    "rate",
    "roofline",
]


def _text_table(p: Profile, top: int) -> str:
    ranked = p.sorted_kernels()
    shown, rest = ranked[:top], ranked[top:]
    rows = [_row(k, 44) for k in shown]
    if rest:
        seconds = sum(k.seconds for k in rest)
        share = sum(k.share for k in rest)
        flops = sum(k.work.flops for k in rest)
        moved = sum(k.work.bytes for k in rest)
        rows.append(
            [
                "other",
                f"{len(rest)} kernels",
                "",
                f"{seconds * 1e6:.1f}",
                f"{share:.1f}%",
                _si(flops),
                _si(moved, "B"),
                "",
                "",
                "",
            ]
        )
    widths = [max(len(c), *(len(r[i]) for r in rows)) for i, c in enumerate(_COLUMNS)]
    right = {3, 4, 5, 6, 7, 8, 9}

    def line(cells: list[str]) -> str:
        parts = [
            c.rjust(w) if i in right else c.ljust(w)
            for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        ]
        return "  ".join(parts).rstrip()

    out = [
        f"profile of @{p.entry} on target '{p.target}' ({p.device}): {len(p.kernels)} kernel(s), "
        f"medians of {p.repeat} timed call(s) after {p.warmup} warm-up call(s)",
        line(_COLUMNS),
        *(line(r) for r in rows),
        "",
        *_fallbacks(ranked),
        *_totals(p),
    ]
    if p.caps is not None:
        out.append(f"roofline: {p.caps.source}")
    out += [f"note: {n}" for n in p.notes]
    return "\n".join(out) + "\n"


def _fallbacks(ranked: Sequence[KernelProfile]) -> list[str]:
    """Every kernel on a fallback, with its whole reason (the table cuts it short)."""
    lines = [
        f"{k.name} ({k.kind}, {k.share:.1f}%): {k.how}"
        for k in ranked
        if k.how.startswith("FALLBACK")
    ]
    if not lines:
        return []
    seconds = sum(k.seconds for k in ranked if k.how.startswith("FALLBACK"))
    share = sum(k.share for k in ranked if k.how.startswith("FALLBACK"))
    head = f"{len(lines)} kernel(s) on a fallback, {_ms(seconds)} ({share:.1f}%):"
    return [head, *(f"  {line}" for line in lines), ""]


def _totals(p: Profile) -> list[str]:
    gap = p.overhead_seconds
    pct = 100.0 * gap / p.plain_seconds if p.plain_seconds > 0 else 0.0
    lines = [
        f"kernels (sum of medians):  {_ms(p.kernel_seconds)}",
        f"timed call (whole):        {_ms(p.timed_seconds)}",
    ]
    if abs(p.host_seconds - p.timed_seconds) > 1e-9:
        lines.append(f"host issuing a timed call: {_ms(p.host_seconds)}")
    if gap >= 0:
        lines.append(
            f"ordinary call (wall):      {_ms(p.plain_seconds)}; {_ms(gap)} ({pct:.1f}%) of it "
            "outside the kernels: launch/Python overhead"
        )
    else:  # the kernels were timed in other calls than the ordinary ones
        lines.append(
            f"ordinary call (wall):      {_ms(p.plain_seconds)}, less than the kernels' sum "
            "(the calls' times vary more than the overhead: repeat more)"
        )
    return lines


# ------------------------------------------------------------------ the HTML page


def _html_page(p: Profile, top: int | None) -> str:
    from fusec.tools.viz import to_dot, to_svg

    e = html.escape
    ranked = p.sorted_kernels()
    shown = ranked if top is None else ranked[:top]
    head = "".join(f"<th>{e(c)}</th>" for c in _COLUMNS)
    body = []
    for k in shown:
        cells = _row(k, 10_000)
        css = ' class="fallback"' if k.how.startswith("FALLBACK") else ""
        tds = "".join(f"<td{css if i == 2 else ''}>{e(c)}</td>" for i, c in enumerate(cells))
        body.append(f'<tr id="{e(k.name)}">{tds}</tr>')
    if len(shown) < len(ranked):
        rest = ranked[len(shown) :]
        body.append(
            f"<tr><td>other</td><td>{len(rest)} kernels</td><td></td>"
            f"<td>{sum(k.seconds for k in rest) * 1e6:.1f}</td>"
            f"<td>{sum(k.share for k in rest):.1f}%</td><td colspan=5></td></tr>"
        )
    graph, how_drawn = _graph_svg(p.module, to_svg)
    graph = _timed_clusters(graph, p.kernels)
    totals = "".join(f"<li>{e(line)}</li>" for line in _totals(p))
    notes = "".join(f"<li>{e(n)}</li>" for n in p.notes)
    roof = f"<p>Roofline: {e(p.caps.source)}.</p>" if p.caps is not None else ""
    title = f"fusec profile of @{p.entry} on {p.target} ({p.device})"
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>{e(title)}</title>
<style>
body {{ font-family: Helvetica, Arial, sans-serif; margin: 1.5em; }}
.side {{ display: flex; gap: 1.5em; align-items: flex-start; }}
.side > div {{ overflow: auto; }}
table {{ border-collapse: collapse; font-size: 0.85em; }}
td, th {{ border: 1px solid #bbb; padding: 0.2em 0.5em; text-align: left; vertical-align: top; }}
.fallback {{ color: #a00; }}
.graph {{ border: 1px solid #ddd; max-width: 50vw; }}
pre {{ background: #f6f6f6; padding: 0.6em; overflow: auto; }}
</style>
</head>
<body>
<h1>{e(title)}</h1>
<p>{len(p.kernels)} kernel(s), medians of {p.repeat} timed call(s) after {p.warmup} warm-up
call(s); kernels sorted by time. The graph's clusters are the kernels (<code>kernel #i</code> is
<code>ki</code>).</p>
<ul>{totals}</ul>
{roof}
<div class="side">
<div><table><tr>{head}</tr>
{chr(10).join(body)}
</table></div>
<div class="graph">{graph}</div>
</div>
<p>{e(how_drawn)}</p>
<ul>{notes}</ul>
<details><summary>Graphviz DOT source of the fusion graph</summary>
<pre>{e(to_dot(p.module))}</pre>
</details>
</body>
</html>
"""


def _timed_clusters(svg: str, kernels: Sequence[KernelProfile]) -> str:
    """The graph's cluster titles (``kernel #i: kind``, as ``fusec.tools.viz`` writes
    them) with the kernel's time and share appended."""
    for k in kernels:
        title = f">kernel #{k.name[1:]}: {html.escape(k.kind)}"
        timed = f"{title}, {k.seconds * 1e6:.1f} us ({k.share:.1f}%)"
        svg = svg.replace(f"{title}</text>", f"{timed}</text>", 1)
    return svg


def _graph_svg(module: ModuleOp, to_svg: Any) -> tuple[str, str]:
    """The fusion graph as inline SVG, and how it was drawn."""
    import shutil

    svg = to_svg(module)
    svg = svg[svg.find("<svg") :]  # Graphviz's XML prologue and doctype dropped
    if shutil.which("dot"):
        return svg, "Fusion graph drawn by Graphviz dot."
    return svg, (
        "Fusion graph drawn by fusec's own layered layout: Graphviz 'dot' is not "
        "installed (its DOT text is below)."
    )
