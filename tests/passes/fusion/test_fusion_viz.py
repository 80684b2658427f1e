"""The picture of the fused graph: DOT always, SVG with or without Graphviz, HTML."""

from __future__ import annotations

import shutil
import xml.etree.ElementTree as ET
from html.parser import HTMLParser

import pytest
from conftest import EXAMPLES

import fusec
from fusec.cli import main
from fusec.errors import FusecError
from fusec.tools.viz import KIND_COLOURS, dot_string, render, to_dot, to_html, to_svg

SVG = "{http://www.w3.org/2000/svg}"

# A function name a browser would run if it were spliced into HTML unescaped.
HOSTILE = """
func.func @"<script>alert(1)</script>"(%x: tensor<4x4xf32>) -> tensor<4x4xf32> {
  %r = ai.relu %x : tensor<4x4xf32>
  return %r : tensor<4x4xf32>
}
"""


def _fused(name: str):
    return fusec.compile(EXAMPLES / f"{name}.mlir", target="reference").module


def test_dot_has_one_coloured_cluster_per_kernel():
    text = to_dot(_fused("ln_matmul_softmax_large"))
    assert text.count("subgraph cluster_") == 2
    assert f'fillcolor="{KIND_COLOURS["matmul"]}"' in text
    assert f'fillcolor="{KIND_COLOURS["row_reduce"]}"' in text
    assert text.count("ai.layernorm") == 1 and text.count("ai.softmax") == 1


def test_dot_strings_are_escaped():
    assert dot_string('a"b\\c\nd') == '"a\\"b\\\\c\\nd"'


def test_builtin_svg_is_valid_and_shows_every_kernel():
    module = _fused("resnet_block")
    root = ET.fromstring(to_svg(module, use_dot=False))
    assert root.tag == f"{SVG}svg"
    clusters = [g for g in root.iter(f"{SVG}g") if g.get("class") == "cluster"]
    assert [g.get("data-kind") for g in clusters] == ["conv", "conv"]
    texts = [t.text for t in root.iter(f"{SVG}text")]
    assert texts.count("ai.conv2d") == 2 and texts.count("ai.relu") == 2


@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz 'dot' is not installed")
def test_graphviz_svg_is_valid():
    root = ET.fromstring(to_svg(_fused("attention"), use_dot=True).encode())
    assert root.tag == f"{SVG}svg"
    titles = [t.text for t in root.iter(f"{SVG}title")]
    assert sum(1 for t in titles if t and t.startswith("cluster_")) == 2


def test_html_is_one_self_contained_page():
    page = to_html(_fused("two_consumers"), use_dot=False)

    class Collect(HTMLParser):
        tags: list[str] = []
        links: list[str] = []

        def handle_starttag(self, tag, attrs):
            self.tags.append(tag)
            self.links += [v for k, v in attrs if k in ("src", "href") and v]

    parser = Collect()
    parser.feed(page)
    assert page.startswith("<!DOCTYPE html>")
    assert "svg" in parser.tags and parser.tags.count("tr") == 4  # header + 3 kernels
    assert parser.links == []  # nothing loaded from elsewhere


@pytest.mark.parametrize("use_dot", [False, None])
def test_user_names_are_escaped(use_dot):
    module = fusec.compile(HOSTILE, target="reference").module
    for text in (to_html(module, use_dot=use_dot), to_svg(module, use_dot=use_dot)):
        assert "<script>" not in text
        assert "&lt;script&gt;" in text
    ET.fromstring(to_svg(module, use_dot=False))


def test_render_picks_the_format_by_suffix():
    module = _fused("conv_bias_relu")
    assert render(module, "g.dot").startswith("digraph")
    assert "<svg" in render(module, "g.svg")
    assert render(module, "g.html").startswith("<!DOCTYPE html>")
    with pytest.raises(FusecError, match="use a .svg, .dot or .html file"):
        render(module, "g.png")


@pytest.mark.parametrize("suffix", ["svg", "dot", "html"])
def test_cli_viz_writes_the_picture(tmp_path, suffix):
    out = tmp_path / f"graph.{suffix}"
    assert main(["viz", str(EXAMPLES / "mlp_block.mlir"), "-o", str(out)]) == 0
    text = out.read_text()
    assert text.count("ai.layernorm") >= 1
    assert text.count("cluster") >= 2


def test_cli_viz_errors_are_diagnostics(tmp_path, capsys):
    assert main(["viz", str(EXAMPLES / "mlp_block.mlir"), "-o", str(tmp_path / "g.png")]) == 1
    assert "g.png: error: cannot tell the picture format" in capsys.readouterr().err
    assert main(["viz", str(tmp_path / "absent.mlir"), "-o", str(tmp_path / "g.svg")]) == 1
    assert "absent.mlir: error: no such file" in capsys.readouterr().err
