"""A picture of the fused graph: ops as nodes, each ``ai.fused`` a cluster coloured by kind.

Three formats, chosen by the output's suffix (``render``):

- ``.dot`` / ``.gv``: Graphviz DOT text, always available.
- ``.svg``: Graphviz's ``dot -Tsvg`` when the ``dot`` binary is installed;
  otherwise a small built-in layered layout (groups stacked by dependency
  depth, ops stacked inside their group), so the file always opens in a
  browser.
- ``.html``: one self-contained page: the SVG inline, a table of the kernels
  and the DOT source.

Every name that comes from the user's program (function, argument and value
names) is escaped for the format it is written into.
"""

from __future__ import annotations

import html
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import networkx as nx
from xdsl.dialects import arith, func
from xdsl.dialects.builtin import ModuleOp, TensorType
from xdsl.ir import Block, BlockArgument, Operation, SSAValue

from fusec.dialect.ops import FusedOp, YieldOp
from fusec.errors import FusecError, SourceLocation

KIND_COLOURS = {
    "conv": "#cfe2ff",
    "matmul": "#d3f4d3",
    "row_reduce": "#ffe3b8",
    "pointwise": "#f2d8f7",
}
OTHER_COLOUR = "#eeeeee"
FORMATS = {".dot": "dot", ".gv": "dot", ".svg": "svg", ".html": "html", ".htm": "html"}


# ------------------------------------------------------------------ the graph


@dataclass
class Node:
    id: str
    title: str
    detail: str
    shape: str = "box"  # box (an op), ellipse (an argument or result), note (a constant)


@dataclass
class Cluster:
    id: str
    kind: str
    label: str
    nodes: list[str] = field(default_factory=list)


@dataclass
class VizGraph:
    """What is drawn: nodes, clusters (kernels), edges (value uses)."""

    title: str
    nodes: dict[str, Node] = field(default_factory=dict)
    clusters: list[Cluster] = field(default_factory=list)
    edges: list[tuple[str, str, str, bool]] = field(default_factory=list)
    """(source, target, label, crosses a kernel boundary)."""

    def cluster_of(self) -> dict[str, Cluster]:
        return {n: c for c in self.clusters for n in c.nodes}


def _type_text(value: SSAValue) -> str:
    t = value.type
    if isinstance(t, TensorType):
        dims = "x".join(str(d) for d in t.get_shape())
        return f"{dims}x{t.get_element_type()}" if dims else str(t.get_element_type())
    return str(t)


def _where(op: Operation) -> str:
    from fusec.ir.diagnostics import location_of

    loc = location_of(op)
    return f"{loc.line}:{loc.col}" if loc is not None and loc.line > 0 else ""


class _Builder:
    """Walks one module and fills a VizGraph."""

    def __init__(self, title: str) -> None:
        self.graph = VizGraph(title)
        self.source: dict[SSAValue, str] = {}  # value -> node producing it
        self.count = 0

    def new_id(self) -> str:
        self.count += 1
        return f"n{self.count}"

    def add_function(self, fn: func.FuncOp) -> None:
        block = fn.body.block
        name = fn.sym_name.data
        for arg in block.args:
            node = self._node(f"%{arg.name_hint or arg.index}", _type_text(arg), "ellipse")
            self.source[arg] = node
        for op in block.ops:
            if isinstance(op, FusedOp):
                self._fused(op)
            elif isinstance(op, func.ReturnOp):
                for i, value in enumerate(op.operands):
                    node = self._node(f"@{name} result {i}", _type_text(value), "ellipse")
                    self._edge(value, node, crosses=True)
            else:
                shape = "note" if isinstance(op, arith.ConstantOp) else "box"
                node = self._op_node(op, shape)
                for value in op.operands:
                    self._edge(value, node, crosses=True)
                for res in op.results:
                    self.source[res] = node

    def _fused(self, fused: FusedOp) -> None:
        index = len(self.graph.clusters)
        body: Block = fused.block
        cluster = Cluster(
            f"cluster_{index}", fused.kind_name, f"kernel #{index}: {fused.kind_name}"
        )
        self.graph.clusters.append(cluster)
        for arg, outer in zip(body.args, fused.inputs, strict=True):
            self.source[arg] = self.source.get(outer, "")
        for op in body.ops:
            if isinstance(op, YieldOp):
                for res, value in zip(fused.results, op.operands, strict=True):
                    self.source[res] = self.source.get(value, "")
                continue
            node = self._op_node(op, "box")
            cluster.nodes.append(node)
            for value in op.operands:
                self._edge(value, node, crosses=isinstance(value, BlockArgument))
            for res in op.results:
                self.source[res] = node

    def _op_node(self, op: Operation, shape: str) -> str:
        result = _type_text(op.results[0]) if op.results else ""
        detail = " ".join(filter(None, [result, _where(op)]))
        return self._node(op.name, detail, shape)

    def _node(self, title: str, detail: str, shape: str) -> str:
        node = self.new_id()
        self.graph.nodes[node] = Node(node, title, detail, shape)
        return node

    def _edge(self, value: SSAValue, target: str, crosses: bool) -> None:
        source = self.source.get(value)
        if source:
            label = _type_text(value) if crosses else ""
            self.graph.edges.append((source, target, label, crosses))


def fusion_graph(module: ModuleOp) -> VizGraph:
    """The drawable graph of every function of ``module``."""
    names = [op.sym_name.data for op in module.walk() if isinstance(op, func.FuncOp)]
    builder = _Builder("fusion of " + ", ".join(f"@{n}" for n in names))
    for op in module.walk():
        if isinstance(op, func.FuncOp) and len(op.body.blocks) == 1:
            builder.add_function(op)
    return builder.graph


# ------------------------------------------------------------------- DOT


def dot_string(text: str) -> str:
    """``text`` as a quoted DOT string (backslashes, quotes and newlines escaped)."""
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'


def to_dot(module: ModuleOp) -> str:
    """Graphviz DOT text of the fused graph."""
    graph = fusion_graph(module)
    lines = [
        "digraph fusion {",
        f"  label={dot_string(graph.title)}; labelloc=t; fontname=Helvetica;",
        '  node [fontname=Helvetica, fontsize=10, style=filled, fillcolor="#ffffff"];',
        "  edge [fontname=Helvetica, fontsize=8];",
    ]
    clustered = graph.cluster_of()
    for cluster in graph.clusters:
        colour = KIND_COLOURS.get(cluster.kind, OTHER_COLOUR)
        lines.append(f"  subgraph {cluster.id} {{")
        lines.append(
            f'    label={dot_string(cluster.label)}; style="filled,rounded"; '
            f'fillcolor="{colour}"; color="#555555";'
        )
        lines.extend(f"    {_dot_node(graph.nodes[n])}" for n in cluster.nodes)
        lines.append("  }")
    for node in graph.nodes.values():
        if node.id not in clustered:
            lines.append(f"  {_dot_node(node)}")
    for source, target, label, crosses in graph.edges:
        attrs = [f"label={dot_string(label)}"] if label else []
        attrs.append("penwidth=1.6" if crosses else 'color="#777777"')
        lines.append(f"  {source} -> {target} [{', '.join(attrs)}];")
    lines.append("}")
    return "\n".join(lines) + "\n"


def _dot_node(node: Node) -> str:
    label = dot_string(f"{node.title}\n{node.detail}" if node.detail else node.title)
    fill = "#f7f7f7" if node.shape != "box" else "#ffffff"
    return f'{node.id} [label={label}, shape={node.shape}, fillcolor="{fill}"];'


# ------------------------------------------------------------------- SVG


def to_svg(module: ModuleOp, *, use_dot: bool | None = None) -> str:
    """SVG of the fused graph: Graphviz if installed (and ``use_dot`` is not False)."""
    dot = shutil.which("dot") if use_dot is not False else None
    if use_dot and dot is None:
        raise FusecError("the Graphviz 'dot' program is not installed")
    if dot is not None:
        try:
            done = subprocess.run(
                [dot, "-Tsvg"], input=to_dot(module), capture_output=True, text=True, timeout=60
            )
        except (OSError, subprocess.TimeoutExpired) as err:
            raise FusecError(f"Graphviz 'dot' failed: {err}") from None
        if done.returncode == 0:
            return done.stdout
        raise FusecError(f"Graphviz 'dot' failed: {done.stderr.strip()}")
    return layout_svg(fusion_graph(module))


_CHAR_W, _LINE_H, _PAD = 6.6, 14, 8
_NODE_GAP, _UNIT_GAP, _LAYER_GAP, _CLUSTER_PAD, _CLUSTER_TITLE = 12, 30, 56, 10, 18
_SKIP_ROOM, _DUMMY_W = 30, 12


@dataclass
class _Box:
    """A w x h box; ``_place`` moves its top left corner (x, y) from the origin."""

    w: float
    h: float
    x: float = 0.0
    y: float = 0.0

    @property
    def cx(self) -> float:
        return self.x + self.w / 2


def _node_size(node: Node) -> tuple[float, float]:
    width = max(len(node.title), len(node.detail)) * _CHAR_W + 2 * _PAD
    lines = 2 if node.detail else 1
    return max(width, 60.0), lines * _LINE_H + 2 * _PAD - 2


@dataclass
class _Layout:
    """Sugiyama-style: units (kernels, lone nodes) in layers, long edges through dummies."""

    graph: VizGraph
    units: dict[str, list[str]] = field(default_factory=dict)
    boxes: dict[str, _Box] = field(default_factory=dict)  # nodes, units and dummies
    links: dict[tuple[str, str], list[str]] = field(default_factory=dict)  # unit edge -> labels
    routes: dict[tuple[str, str], list[str]] = field(default_factory=dict)  # unit edge -> dummies
    width: float = 0.0
    height: float = 0.0


def layout_svg(graph: VizGraph) -> str:
    """A self-contained SVG drawn without Graphviz: a layered layout of the kernels.

    Kernels and lone nodes are stacked in layers by dependency depth, ordered in
    a layer by the mean position of their producers; an edge that spans several
    layers passes through a reserved gap in each, so no edge crosses a box.
    """
    lay = _Layout(graph)
    clustered = graph.cluster_of()
    for cluster in graph.clusters:
        lay.units[cluster.id] = list(cluster.nodes)
    for node in graph.nodes:
        if node not in clustered:
            lay.units[node] = [node]
    unit_of = {n: u for u, ns in lay.units.items() for n in ns}
    for source, target, label, _ in graph.edges:
        key = (unit_of[source], unit_of[target])
        if key[0] != key[1]:
            labels = lay.links.setdefault(key, [])
            if label and label not in labels:
                labels.append(label)
    _size_units(lay, {c.id for c in graph.clusters})
    _place(lay)
    return _svg_document(lay)


def _size_units(lay: _Layout, cluster_ids: set[str]) -> None:
    for node in lay.graph.nodes.values():
        lay.boxes[node.id] = _Box(*_node_size(node))
    for unit, members in lay.units.items():
        w = max(lay.boxes[n].w for n in members)
        h = sum(lay.boxes[n].h for n in members) + _NODE_GAP * (len(members) - 1)
        if unit in cluster_ids:
            for n in members:  # one column: every op of a kernel equally wide
                lay.boxes[n].w = w
            w = max(w + 2 * _CLUSTER_PAD + _SKIP_ROOM, 160.0)
            h += 2 * _CLUSTER_PAD + _CLUSTER_TITLE
        lay.boxes[unit] = _Box(w, h)


def _place(lay: _Layout) -> None:
    dag = nx.DiGraph()
    dag.add_nodes_from(lay.units)
    dag.add_edges_from(lay.links)
    depth = {u: i for i, gen in enumerate(nx.topological_generations(dag)) for u in gen}
    layers: list[list[str]] = [[] for _ in range(max(depth.values(), default=-1) + 1)]
    preds: dict[str, list[str]] = {u: list(dag.predecessors(u)) for u in lay.units}
    for unit in sorted(lay.units, key=_natural):
        layers[depth[unit]].append(unit)
    for source, target in sorted(lay.links, key=lambda k: (_natural(k[0]), _natural(k[1]))):
        chain, previous = [], source
        for level in range(depth[source] + 1, depth[target]):
            dummy = f"d{len(lay.boxes)}"
            lay.boxes[dummy] = _Box(_DUMMY_W, 0)
            layers[level].append(dummy)
            preds[dummy] = [previous]
            chain.append(dummy)
            previous = dummy
        lay.routes[(source, target)] = chain
        if chain:
            preds[target] = [chain[-1] if p == source else p for p in preds[target]]
    y, width = 44.0, 0.0
    for layer in layers:
        layer.sort(key=lambda u: _mean(lay.boxes[p].cx for p in preds[u]))
        x = 20.0
        height = max((lay.boxes[u].h for u in layer), default=0.0)
        for unit in layer:
            box = lay.boxes[unit]
            box.x, box.y = x, y
            if unit in lay.units:
                _place_members(lay, unit)
            else:
                box.h = height  # a dummy is a vertical channel through the layer
            x += box.w + _UNIT_GAP
        width = max(width, x)
        y += height + _LAYER_GAP
    lay.width, lay.height = width + 20, y


def _mean(values) -> float:
    values = list(values)
    return sum(values) / len(values) if values else 0.0


def _natural(unit: str) -> tuple[int, int, str]:
    digits = "".join(ch for ch in unit if ch.isdigit())
    return (0 if unit.startswith("cluster") else 1, int(digits) if digits else 0, unit)


def _place_members(lay: _Layout, unit: str) -> None:
    box, members = lay.boxes[unit], lay.units[unit]
    cluster = members != [unit]
    x = box.x + (_CLUSTER_PAD if cluster else 0)
    y = box.y + (_CLUSTER_PAD + _CLUSTER_TITLE if cluster else 0)
    for n in members:
        lay.boxes[n].x, lay.boxes[n].y = x, y
        y += lay.boxes[n].h + _NODE_GAP


def _svg_document(lay: _Layout) -> str:
    e, graph = html.escape, lay.graph
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{lay.width:.0f}" '
        f'height="{lay.height:.0f}" viewBox="0 0 {lay.width:.0f} {lay.height:.0f}" '
        'font-family="Helvetica, Arial, sans-serif">',
        '<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" '
        'markerHeight="7" orient="auto-start-reverse"><path d="M 0 0 L 10 5 L 0 10 z" '
        'fill="#333"/></marker></defs>',
        f"<title>{e(graph.title)}</title>",
        f'<text x="20" y="26" font-size="15" font-weight="bold">{e(graph.title)}</text>',
    ]
    for cluster in graph.clusters:
        box = lay.boxes[cluster.id]
        colour = KIND_COLOURS.get(cluster.kind, OTHER_COLOUR)
        out.append(
            f'<g class="cluster" data-kind="{e(cluster.kind)}"><rect x="{box.x:.1f}" '
            f'y="{box.y:.1f}" width="{box.w:.1f}" height="{box.h:.1f}" rx="8" '
            f'fill="{colour}" stroke="#555"/><text x="{box.x + 8:.1f}" y="{box.y + 17:.1f}" '
            f'font-size="11" font-weight="bold">{e(cluster.label)}</text></g>'
        )
    out.extend(_unit_edges(lay))
    clustered = graph.cluster_of()
    for source, target, _, _ in graph.edges:
        if source in clustered and clustered.get(target) is clustered[source]:
            out.append(_inner_edge(lay.boxes[source], lay.boxes[target]))
    out.extend(_svg_node(node, lay.boxes[node.id]) for node in graph.nodes.values())
    out.append("</svg>")
    return "\n".join(out) + "\n"


def _unit_edges(lay: _Layout) -> list[str]:
    """Edges between units, spread along the boxes' bottom and top sides."""
    outs: dict[str, list[tuple[str, tuple[str, str]]]] = {}
    ins: dict[str, list[tuple[str, tuple[str, str]]]] = {}
    for key, chain in lay.routes.items():
        first, last = (chain[0], chain[-1]) if chain else (key[1], key[0])
        outs.setdefault(key[0], []).append((first, key))
        ins.setdefault(key[1], []).append((last, key))
    start, end = _ports(lay, outs, bottom=True), _ports(lay, ins, bottom=False)
    drawn = []
    for key, chain in lay.routes.items():
        points = [start[key]]
        for dummy in chain:
            box = lay.boxes[dummy]
            points += [(box.cx, box.y), (box.cx, box.y + box.h)]
        points.append(end[key])
        # Label only kernel outputs: the tensors that go through memory between kernels
        # (an argument's type is already written in its node).
        label = " ".join(lay.links[key]) if key[0] not in lay.graph.nodes else ""
        drawn.append(_path(points, label))
    return drawn


def _ports(lay: _Layout, sides: dict[str, list[tuple[str, tuple[str, str]]]], bottom: bool):
    ports = {}
    for unit, edges in sides.items():
        box = lay.boxes[unit]
        edges.sort(key=lambda item: lay.boxes[item[0]].cx)
        for i, (_, key) in enumerate(edges):
            x = box.x + box.w * (i + 1) / (len(edges) + 1)
            ports[key] = (x, box.y + box.h if bottom else box.y)
    return ports


def _path(points: list[tuple[float, float]], label: str) -> str:
    d = f"M {points[0][0]:.1f} {points[0][1]:.1f}"
    for (x1, y1), (x2, y2) in zip(points, points[1:], strict=False):
        if abs(x1 - x2) < 0.5:
            d += f" L {x2:.1f} {y2:.1f}"
        else:
            mid = (y1 + y2) / 2
            d += f" C {x1:.1f} {mid:.1f} {x2:.1f} {mid:.1f} {x2:.1f} {y2:.1f}"
    parts = [
        f'<path d="{d}" fill="none" stroke="#222" stroke-width="1.5" marker-end="url(#arrow)"/>'
    ]
    if label:
        (x1, y1), (x2, y2) = points[-2], points[-1]
        parts.append(
            f'<text x="{(x1 + x2) / 2 + 4:.1f}" y="{(y1 + y2) / 2 + 3:.1f}" font-size="9" '
            f'fill="#333">{html.escape(label)}</text>'
        )
    return '<g class="edge">' + "".join(parts) + "</g>"


def _inner_edge(a: _Box, b: _Box) -> str:
    """An edge inside one kernel: straight down to the next op, else around the right."""
    if b.y - (a.y + a.h) <= _NODE_GAP + 0.5:
        d = f"M {a.cx:.1f} {a.y + a.h:.1f} L {b.cx:.1f} {b.y:.1f}"
    else:
        side = a.x + a.w + _SKIP_ROOM - 6
        ya, yb = a.y + a.h / 2, b.y + b.h / 2
        d = (
            f"M {a.x + a.w:.1f} {ya:.1f} C {side:.1f} {ya:.1f} {side:.1f} {yb:.1f} "
            f"{b.x + b.w:.1f} {yb:.1f}"
        )
    return (
        f'<g class="edge"><path d="{d}" fill="none" stroke="#777" stroke-width="1" '
        'marker-end="url(#arrow)"/></g>'
    )


def _svg_node(node: Node, box: _Box) -> str:
    e = html.escape
    fill = "#ffffff" if node.shape == "box" else "#f7f7f7"
    rx = box.h / 2 if node.shape == "ellipse" else 4
    texts = [
        f'<text x="{box.cx:.1f}" y="{box.y + _PAD + 10:.1f}" font-size="10" '
        f'text-anchor="middle">{e(node.title)}</text>'
    ]
    if node.detail:
        texts.append(
            f'<text x="{box.cx:.1f}" y="{box.y + _PAD + 10 + _LINE_H:.1f}" font-size="9" '
            f'fill="#555" text-anchor="middle">{e(node.detail)}</text>'
        )
    return (
        f'<g class="node"><rect x="{box.x:.1f}" y="{box.y:.1f}" width="{box.w:.1f}" '
        f'height="{box.h:.1f}" rx="{rx:.1f}" fill="{fill}" stroke="#333"/>{"".join(texts)}</g>'
    )


# ------------------------------------------------------------------- HTML


def to_html(module: ModuleOp, *, use_dot: bool | None = None) -> str:
    """One self-contained page: the SVG inline, a table of kernels, the DOT source."""
    e = html.escape
    graph = fusion_graph(module)
    svg = to_svg(module, use_dot=use_dot)
    svg = svg[svg.find("<svg") :]  # drop Graphviz's XML prologue and doctype
    rows = []
    for i, cluster in enumerate(graph.clusters):
        ops = ", ".join(graph.nodes[n].title for n in cluster.nodes)
        colour = KIND_COLOURS.get(cluster.kind, OTHER_COLOUR)
        rows.append(
            f'<tr><td>#{i}</td><td style="background:{colour}">{e(cluster.kind)}</td>'
            f"<td>{e(ops)}</td></tr>"
        )
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>{e(graph.title)}</title>
<style>
body {{ font-family: Helvetica, Arial, sans-serif; margin: 1.5em; }}
table {{ border-collapse: collapse; margin-bottom: 1em; }}
td, th {{ border: 1px solid #bbb; padding: 0.2em 0.6em; text-align: left; }}
.graph {{ overflow: auto; border: 1px solid #ddd; }}
pre {{ background: #f6f6f6; padding: 0.6em; overflow: auto; }}
</style>
</head>
<body>
<h1>{e(graph.title)}</h1>
<p>{len(graph.clusters)} kernel(s); each cluster is one <code>ai.fused</code> group,
coloured by kind. Bold edges cross kernels (the value goes through memory).</p>
<table><tr><th>kernel</th><th>kind</th><th>ops</th></tr>
{chr(10).join(rows)}
</table>
<div class="graph">
{svg}</div>
<details><summary>Graphviz DOT source</summary>
<pre>{e(to_dot(module))}</pre>
</details>
</body>
</html>
"""


def picture_format(path: str) -> str:
    """'dot', 'svg' or 'html' from the suffix of ``path``; a FusecError otherwise."""
    fmt = FORMATS.get(Path(path).suffix.lower())
    if fmt is None:
        raise FusecError(
            f"cannot tell the picture format from '{path}': use a .svg, .dot or .html file",
            SourceLocation(path, 0, 0),
        )
    return fmt


def render(module: ModuleOp, path: str) -> str:
    """The picture for output file ``path``: DOT, SVG or HTML by its suffix."""
    fmt = picture_format(path)
    if fmt == "dot":
        return to_dot(module)
    if fmt == "svg":
        return to_svg(module)
    return to_html(module)
