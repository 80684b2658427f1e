"""What the exported models contain: operators, attributes and element types.

    python tests/frontend/onnx/models/survey.py [FILE.onnx ...]     # default: every model here

Prints one markdown section per file (the README's survey is this output).
"""

from __future__ import annotations

import sys
from collections import Counter, defaultdict
from pathlib import Path

import onnx
from onnx import TensorProto, helper

HERE = Path(__file__).resolve().parent


def attribute_text(value: object) -> str:
    if isinstance(value, onnx.TensorProto):
        return f"{TensorProto.DataType.Name(value.data_type)}{list(value.dims)}"
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, list):
        return str(tuple(value))
    return str(value)


def dims_text(info: onnx.ValueInfoProto) -> str:
    return ",".join(d.dim_param or str(d.dim_value) for d in info.type.tensor_type.shape.dim)


def survey(path: Path) -> str:
    model = onnx.load(str(path))
    graph = model.graph
    opset = next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))
    ops = Counter(node.op_type for node in graph.node)
    attrs: dict[str, set[str]] = defaultdict(set)
    for node in graph.node:
        for attr in node.attribute:
            value = attribute_text(helper.get_attribute_value(attr))
            attrs[f"{node.op_type}.{attr.name}"].add(value)
    dtypes = Counter(TensorProto.DataType.Name(t.data_type) for t in graph.initializer)
    inputs = ", ".join(f"{i.name}[{dims_text(i)}]" for i in graph.input)
    lines = [
        f"### {path.name}",
        f"opset {opset}, {len(graph.node)} nodes, {len(graph.initializer)} initializers "
        f"({', '.join(f'{k} {v}' for k, v in sorted(dtypes.items()))}); inputs {inputs}",
        "",
        "operators: " + ", ".join(f"{op} {n}" for op, n in sorted(ops.items())),
        "",
        "attributes: "
        + "; ".join(f"{key} {{{', '.join(sorted(v))}}}" for key, v in sorted(attrs.items())),
        "",
    ]
    return "\n".join(lines)


def main() -> int:
    paths = [Path(p) for p in sys.argv[1:]] or sorted(HERE.glob("*.onnx"))
    print("\n".join(survey(p) for p in paths))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
