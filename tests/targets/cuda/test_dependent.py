"""Programmatic dependent launch (``fusec.targets.cuda.dependent``) without a GPU: the wait
each kernel begins with is the PTX's first instruction touching memory, and which graph
nodes count as fusec's kernels. Every template's kernels begin with it:
``test_cuda_abi.py``; graphs with programmatic edges replayed on the GPU:
``test_cuda_graphs_gpu.py``."""

from __future__ import annotations

import re

import pytest
from cuda_cases import pointwise_broadcast

from fusec.targets.cuda.env import simulator_enabled

pytestmark = pytest.mark.requires_target("cuda")

SOFTMAX = """
func.func @f(%x: tensor<64x256xf16>) -> tensor<64x256xf16> {
  %s = ai.softmax %x {axis = -1 : i64} : tensor<64x256xf16>
  return %s : tensor<64x256xf16>
}
"""


@pytest.mark.skipif(simulator_enabled(), reason="NUMBA_ENABLE_CUDASIM=1: no PTX under it")
@pytest.mark.parametrize("graph", [pointwise_broadcast(64, 128, "f16"), SOFTMAX], ids=["pw", "sm"])
def test_the_wait_comes_before_every_memory_access(graph: str) -> None:
    """``griddepcontrol.wait`` then ``launch_dependents``, ahead of the first global or
    shared access of each kernel entry (for sm_90; no GPU needed)."""
    import fusec

    compiled = fusec.compile(graph, target="cuda", executable=False)
    for _, ptx in compiled.assembly("sm_90"):
        for entry in ptx.split(".entry")[1:]:
            first_access = re.search(r"\b(ld|st|cp\.async|atom|red)\.(global|shared)", entry)
            wait = entry.find("griddepcontrol.wait; griddepcontrol.launch_dependents;")
            assert wait >= 0 and first_access is not None and wait < first_access.start()


@pytest.mark.skipif(simulator_enabled(), reason="NUMBA_ENABLE_CUDASIM=1: no PTX under it")
def test_a_generated_kernels_entry_is_a_fusec_kernel() -> None:
    import fusec
    from fusec.targets.cuda.dependent import is_fusec_kernel

    compiled = fusec.compile(SOFTMAX, target="cuda", executable=False)
    ((_, ptx),) = compiled.assembly("sm_90")
    (entry,) = re.findall(r"\.entry\s+(\w+)", ptx)
    assert is_fusec_kernel(entry), entry


@pytest.mark.parametrize(
    "name, fusec_kernel",
    [
        ("_ZN23_fusec_gemm_0123456789ab6kernelB2v1E", True),  # a linked kernel's wrapper
        ("_ZN2at6native29vectorized_elementwise_kernelILi4EEEviT_", False),  # PyTorch's
        ("_ZN6cudapy8__main__6kernelB2v1E", False),  # a Numba kernel of another module
        ("fusec_gemm_0123", False),  # an extern "C" entry: not a module fusec generated
        ("", False),
    ],
)
def test_only_kernels_of_modules_fusec_generated_count(name: str, fusec_kernel: bool) -> None:
    from fusec.targets.cuda.dependent import is_fusec_kernel

    assert is_fusec_kernel(name) is fusec_kernel


@pytest.mark.parametrize(
    "value, enabled", [("1", True), ("on", True), ("0", False), ("off", False)]
)
def test_fusec_pdl_turns_programmatic_edges_on_and_off(monkeypatch, value: str, enabled: bool):
    from fusec.targets.cuda.dependent import PDL_DEFAULT, pdl_enabled

    monkeypatch.setenv("FUSEC_PDL", value)
    assert pdl_enabled() is enabled
    monkeypatch.delenv("FUSEC_PDL")
    assert pdl_enabled() is (PDL_DEFAULT == "1")


class _GraphDriver:
    """A stand-in for ``cuda.bindings.driver`` over a graph of named nodes: kernels (their
    mangled entries) and a memcpy; ``refuse`` makes ``cuGraphAddDependencies`` of a
    programmatic edge fail (an older driver)."""

    def __init__(self, nodes: dict[int, str | None], edges: list[tuple[int, int]]) -> None:
        from types import SimpleNamespace

        self.nodes = nodes
        self.edges = {pair: 0 for pair in edges}  # (from, to) -> type
        self.refuse = False
        self.CUgraphDependencyType = SimpleNamespace(
            CU_GRAPH_DEPENDENCY_TYPE_DEFAULT=0, CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC=1
        )
        self.CUgraphNodeType = SimpleNamespace(CU_GRAPH_NODE_TYPE_KERNEL=0)
        self.CU_GRAPH_KERNEL_NODE_PORT_PROGRAMMATIC = 1
        self.CUgraphEdgeData = lambda: SimpleNamespace(type=0, from_port=0, to_port=0)

    def cuGraphGetEdges(self, graph, count):  # noqa: N802 (the driver's names)
        from types import SimpleNamespace

        if not count:
            return 0, None, None, None, len(self.edges)
        pairs = list(self.edges)
        data = [SimpleNamespace(type=self.edges[p], from_port=0, to_port=0) for p in pairs]
        return 0, [a for a, _ in pairs], [b for _, b in pairs], data, len(pairs)

    def cuGraphNodeGetType(self, node):  # noqa: N802
        return 0, 0 if self.nodes[node] is not None else 9

    def cuGraphKernelNodeGetParams(self, node):  # noqa: N802
        from types import SimpleNamespace

        return 0, SimpleNamespace(func=node, kern=0)

    def cuFuncGetName(self, func):  # noqa: N802
        return 0, self.nodes[func].encode()

    def cuGraphRemoveDependencies(self, graph, sources, targets, data, n):  # noqa: N802
        del self.edges[(sources[0], targets[0])]
        return (0,)

    def cuGraphAddDependencies(self, graph, sources, targets, data, n):  # noqa: N802
        if self.refuse and data[0].type == 1:
            return (1,)
        self.edges[(sources[0], targets[0])] = data[0].type
        return (0,)


def _patched(monkeypatch, driver: _GraphDriver) -> None:
    import cuda.bindings

    monkeypatch.setattr(cuda.bindings, "driver", driver)


#: a (fusec kernel) -> b (fusec kernel) -> c (PyTorch's kernel); a -> m (a memcpy) -> b
NODES = {
    1: "_ZN14_fusec_kernel06kernelB2v1E",
    2: "_ZN23_fusec_gemm_0123456789ab6kernelB2v1E",
    3: "_ZN2at6native29vectorized_elementwise_kernelILi4EEEviT_",
    4: None,
}
EDGES = [(1, 2), (2, 3), (1, 4), (4, 2)]


def test_only_edges_between_fusec_kernels_become_programmatic(monkeypatch) -> None:
    pytest.importorskip("cuda.bindings")
    from fusec.targets.cuda.dependent import programmatic_edges

    driver = _GraphDriver(NODES, EDGES)
    _patched(monkeypatch, driver)
    assert programmatic_edges(object()) == 1
    assert driver.edges == {(1, 2): 1, (2, 3): 0, (1, 4): 0, (4, 2): 0}


def test_a_refused_programmatic_edge_is_put_back_as_it_was(monkeypatch) -> None:
    pytest.importorskip("cuda.bindings")
    from fusec.targets.cuda import dependent

    driver = _GraphDriver(NODES, EDGES)
    driver.refuse = True
    _patched(monkeypatch, driver)
    monkeypatch.setattr(dependent, "_warned", [])
    with pytest.warns(RuntimeWarning, match="plain edges"):
        assert dependent.programmatic_edges(object()) == 0
    assert driver.edges == dict.fromkeys(EDGES, 0)  # no dependency lost


def _specs(graph: str, kind: str) -> list:
    import fusec

    compiled = fusec.compile(graph, target="cuda", executable=False)
    return [spec for kernel in compiled.kernels if kernel.kind == kind for spec in kernel.specs]


def _early_weight_cases() -> dict[str, tuple[str, str]]:
    from conv_cases import resnet_block_constant_weights
    from cuda_cases import decoder_mlp

    return {
        "gemm": ("matmul", decoder_mlp(16, 256)),
        "conv": ("conv", resnet_block_constant_weights(1, 64, 14)),
    }


#: ``griddepcontrol.wait``s in the PTX of a kernel that waits in its body, at least: the
#: consumers', the producer's other threads' and thread 0's after its early loads (the
#: conv's last two may come out as one, after the branch of thread 0's loads)
BODY_WAITS = {"gemm": 3, "conv": 2}


@pytest.mark.skipif(simulator_enabled(), reason="NUMBA_ENABLE_CUDASIM=1: no PTX under it")
@pytest.mark.parametrize("case", ["gemm", "conv"])
def test_a_kernel_reading_constant_weights_loads_them_before_its_wait(
    monkeypatch, case: str
) -> None:
    """Weights a program constant (no kernel writes them), read as given: the C++ body
    waits (every path: the consumers', the producer's), its producer after issuing the
    weights' first stages; the Numba wrapper does not wait. (Which loads come before the
    producer's wait: ``test_only_the_weights_are_loaded_before_the_wait``.)"""
    pytest.importorskip("cuda.bindings")
    from fusec.targets.cuda.build import ptx, python_source

    monkeypatch.setenv("FUSEC_EARLY_WEIGHTS", "on")
    kind, graph = _early_weight_cases()[case]
    specs = [s for s in _specs(graph, kind) if s.waits_in_body]
    assert len(specs) == 2, _specs(graph, kind)
    for spec in specs:
        assert "grid_dependency_wait()" not in python_source(spec, "<cu>")
        text = ptx(spec)
        waits = [m.start() for m in re.finditer(r"griddepcontrol\.wait", text)]
        loads = [m.start() for m in re.finditer(r"cp\.async\.bulk\.tensor", text)]
        assert len(waits) >= BODY_WAITS[case], waits
        assert loads and waits[0] < loads[0] < waits[-1], (waits, loads)
        first_access = re.search(r"\b(ld|st|atom|red)(\.\w+)*\.global|wgmma\.mma_async", text)
        assert first_access is not None and waits[0] < first_access.start()


def _between(text: str, start: str, end: str) -> str:
    head = text.index(start)
    return text[head : text.index(end, head)]


def test_only_the_weights_are_loaded_before_the_wait() -> None:
    """The kernel layer's early paths (no NVRTC needed): the GEMM producer's pre-loop
    issues B's loads alone, then waits; the conv's weights alone; every other thread waits
    before its first access (the consumers first thing after taking their registers)."""
    from fusec.targets.cuda.dependent import WAIT_PTX
    from fusec.targets.cuda.headers import INCLUDE_DIR

    root = INCLUDE_DIR / "fusec"
    common = (root / "common.cuh").read_text()
    assert f'asm volatile("{WAIT_PTX}" ::: "memory");' in common  # the Numba kernels' text
    gemm = (root / "gemm.cuh").read_text()
    head = "if constexpr (C::EARLY_B) {\n          if (blockIdx.x < units)"
    early = _between(gemm, head, "int it = 0;")
    assert "gemm_load_b<C>(sb + i * B_BYTES, map_b" in early and "map_a" not in early
    assert early.rstrip().endswith("fs_grid_dependency_wait();\n        }")
    producer = _between(gemm, "fs_setmaxnreg_dec<C::PRODUCER_REGISTERS>();", "if (tid == 0) {")
    assert "if (tid != 0) fs_grid_dependency_wait();" in producer
    consumer = _between(gemm, "fs_consumer_thread<C::CONSUMER_REGISTERS>(wg, tid);", "float acc[")
    assert "if constexpr (C::EARLY_B) fs_grid_dependency_wait();" in consumer
    conv = (root / "conv.cuh").read_text()
    early = _between(conv, "conv_early_weights(u32 sa, u32 bars, u64 map_w) {", "return early;")
    loads = re.findall(r"fs_tma_load\(([^;]*)\);", early)
    assert len(loads) == 1 and "map_w" in loads[0]
    assert early.rstrip().endswith("fs_grid_dependency_wait();")
    producer = _between(conv, "fs_setmaxnreg_dec<C::PRODUCER_REGISTERS>();", "CONV_INPUT_LD) {")
    assert "if (tid != 0) fs_grid_dependency_wait();" in producer
    consumer = _between(conv, "fs_consumer_thread<C::CONSUMER_REGISTERS>(wg, tid);", "float acc[")
    assert "if constexpr (C::EARLY_W) fs_grid_dependency_wait();" in consumer


@pytest.mark.parametrize("why", ["runtime weights", "switch off"])
@pytest.mark.parametrize("case", ["gemm", "conv"])
def test_a_kernel_whose_weights_a_kernel_may_write_waits_first(
    monkeypatch, case: str, why: str
) -> None:
    pytest.importorskip("cuda.bindings")
    from conv_cases import resnet_basic

    from fusec.targets.cuda.build import ptx, python_source

    kind, graph = _early_weight_cases()[case]
    monkeypatch.setenv("FUSEC_EARLY_WEIGHTS", "on")
    if why == "switch off":
        monkeypatch.setenv("FUSEC_EARLY_WEIGHTS", "off")
    elif case == "gemm":  # the weights as arguments
        graph = """
func.func @f(%x: tensor<16x256xf16>, %w: tensor<256x512xf16>) -> tensor<16x512xf16> {
  %h = ai.matmul %x, %w : tensor<16x256xf16> * tensor<256x512xf16>
  return %h : tensor<16x512xf16>
}
"""
    else:
        graph = resnet_basic(1, 64, 14, 14)
    specs = _specs(graph, kind)
    assert specs
    for spec in specs:
        assert not spec.waits_in_body
        assert "grid_dependency_wait()" in python_source(spec, "<cu>")
        assert "EARLY_B = 1" not in spec.cpp_source() and "EARLY_W = 1" not in spec.cpp_source()
        assert "griddepcontrol" not in ptx(spec)  # (the early path folds away)


def test_a_gemm_reading_a_copy_of_its_constant_weights_waits_first(monkeypatch) -> None:
    """A LayerNorm prologue folds gamma into a copy of W (the pre-pass kernel writes it):
    the GEMM reads that copy, so it waits first, however constant W is."""
    from cuda_cases import constant_dense

    monkeypatch.setenv("FUSEC_EARLY_WEIGHTS", "on")
    x, v, w = "tensor<256x512xf16>", "tensor<512xf16>", "tensor<512x512xf16>"
    graph = f"""
func.func @f(%x: {x}, %g: {v}, %b: {v}) -> {x} {{
  %w = arith.constant {constant_dense((512, 512), 3)}
  %n = ai.layernorm %x, %g, %b : {x} * {v} * {v}
  %h = ai.matmul %n, %w : {x} * {w}
  return %h : {x}
}}
"""
    (gemm,) = [s for s in _specs(graph, "matmul") if type(s).__name__ == "GemmSpec"]
    assert not gemm.early_b and not gemm.waits_in_body


@pytest.mark.parametrize("value, early", [("on", True), ("off", False), ("", None)])
def test_fusec_early_weights_switch(monkeypatch, value: str, early) -> None:
    """Unset: ``EARLY_WEIGHTS_DEFAULT``; a bad value is a named error."""
    from cuda_cases import decoder_mlp

    from fusec.environ import SwitchError
    from fusec.targets.cuda.linked import EARLY_WEIGHTS_DEFAULT

    monkeypatch.setenv("FUSEC_EARLY_WEIGHTS", value)
    want = (EARLY_WEIGHTS_DEFAULT == "on") if early is None else early
    specs = _specs(decoder_mlp(16, 256), "matmul")
    assert specs and all(s.early_b is want for s in specs)
    monkeypatch.setenv("FUSEC_EARLY_WEIGHTS", "sometimes")
    with pytest.raises(SwitchError, match="FUSEC_EARLY_WEIGHTS"):
        _specs(decoder_mlp(16, 256), "matmul")
