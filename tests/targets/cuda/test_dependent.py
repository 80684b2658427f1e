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


@pytest.mark.parametrize("value, enabled", [("", True), ("1", True), ("0", False), ("off", False)])
def test_fusec_pdl_turns_programmatic_edges_off(monkeypatch, value: str, enabled: bool) -> None:
    from fusec.targets.cuda.dependent import pdl_enabled

    monkeypatch.setenv("FUSEC_PDL", value)
    assert pdl_enabled() is enabled
