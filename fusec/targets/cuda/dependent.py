"""Programmatic dependent launch (PDL): a kernel of a recorded program starts while the
kernel before it finishes, instead of after it.

At batch 1 a model's CUDA graph replays 50-120 kernels of a few microseconds each, and a
kernel's launch, block dispatch and set-up sit between the end of one kernel and the work of
the next. Hopper lets a graph edge between two kernel nodes be *programmatic*: the second
kernel is launched as soon as every block of the first has started and signalled, and its
blocks wait, on the GPU, for the first kernel's completion before they touch memory.

* ``grid_dependency_wait()`` is the first statement of every kernel fusec generates (Numba
  kernels and the Numba wrappers of the linked C++ ones): ``griddepcontrol.wait`` (until the
  kernels this one depends on have completed and their writes are visible; at once when it
  was not launched as a dependent) then ``griddepcontrol.launch_dependents`` (the kernel
  after this one may launch now: its blocks take the SMs this one leaves free and wait in
  turn). Since every read and write comes after the wait, a dependent kernel sees what the
  kernel before it wrote and never overwrites what that one still reads; at most two
  kernels are in flight. Under Numba's CUDA simulator it does nothing.
* ``programmatic_edges(graph)`` turns the edges of a captured graph between two fusec kernel
  nodes into programmatic ones (``CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC`` from the
  upstream node's ``CU_GRAPH_KERNEL_NODE_PORT_PROGRAMMATIC``); edges to or from copies,
  memsets and kernels of other libraries stay as they are. ``instantiate(graph)`` applies it
  (unless ``FUSEC_PDL=0``; ``PDL_DEFAULT``) and instantiates: the whole-program graphs
  (``graphs.DriverCapture``) and ``CudaProgram.capture`` go through it.

A fusec kernel is one whose module fusec named (``_fusec_*``: the kernel cache's modules and
the linked kernels' wrappers), as Numba's mangled entry names say
(``_ZN<len>_fusec_<module><len><function>...``); a test checks that every template's
kernels begin with the wait.
"""

from __future__ import annotations

import re
from typing import Any

from fusec.environ import getenv
from fusec.errors import FusecError
from fusec.targets.cuda.env import numba_cuda, simulator_enabled

#: The mangled entry of a kernel in a module fusec generated.
FUSEC_ENTRY = re.compile(r"_ZN\d+_fusec_")


def helper_names() -> list[str]:
    """The names this module gives generated kernels (through ``fusec.targets.cuda.abi``)."""
    return ["grid_dependency_wait"]


#: ``FUSEC_PDL``'s value when unset: on. H100, one call (2026-12-06): the Llama-style
#: decoder at batch 1, 49 kernels, compiled twice and recorded with and without, 0.4436 ->
#: 0.4358 ms a call (events around one call, median of 41 alternating rounds) and 0.3965
#: -> 0.3832 ms a call in bursts of 20; the whole GPU lane (1112 tests) passed with it on
#: (``benchmarks/results/models-gpu.md``; ``benchmarks/profile_zoo.py --variant
#: FUSEC_PDL=0`` repeats the A/B).
PDL_DEFAULT = "1"


def pdl_enabled() -> bool:
    """Whether ``FUSEC_PDL`` (default ``PDL_DEFAULT``) asks for programmatic edges: 1 (or
    on/true/yes); 0 (or off/false/no) keeps plain edges."""
    return getenv("FUSEC_PDL", PDL_DEFAULT).strip().lower() not in ("0", "off", "false", "no", "")


def _make_sim() -> dict[str, Any]:
    def grid_dependency_wait() -> None:
        return None  # the simulator runs one kernel at a time

    return {"grid_dependency_wait": grid_dependency_wait}


#: The wait, then the trigger: the Numba kernels' ``grid_dependency_wait`` and the C++
#: kernels' ``fs_grid_dependency_wait`` (``include/fusec/common.cuh``; a test keeps the two
#: texts one).
WAIT_PTX = "griddepcontrol.wait; griddepcontrol.launch_dependents;"


def _make_gpu() -> dict[str, Any]:
    from fusec.targets.cuda.rawmove import statement

    wait = statement("grid_dependency_wait", WAIT_PTX)
    return {"grid_dependency_wait": wait}


def is_fusec_kernel(name: str) -> bool:
    """Whether the mangled entry ``name`` is a kernel of a module fusec generated."""
    return bool(FUSEC_ENTRY.match(name))


def programmatic_edges(graph: Any) -> int:
    """Make every edge of ``graph`` (a ``CUgraph``, not instantiated) from one fusec kernel
    node to another programmatic; the number of edges changed. A driver or binding that
    cannot (no edge data before CUDA 12.3) leaves the graph as it was and says so once
    (``RuntimeWarning``): an edge is re-added as it was when its programmatic form is
    refused, so the graph never loses a dependency."""
    from cuda.bindings import driver as drv

    from fusec.targets.cuda.adapters import _check

    fusec_node: dict[int, bool] = {}  # a node ends several edges: ask the driver once

    def is_fusec_node(node: Any) -> bool:
        if int(node) not in fusec_node:
            fusec_node[int(node)] = is_fusec_kernel(_kernel_name(drv, node) or "")
        return fusec_node[int(node)]

    try:
        edges = [
            (source, target, edge)
            for source, target, edge in _edges(drv, graph)
            if int(edge.type) == int(drv.CUgraphDependencyType.CU_GRAPH_DEPENDENCY_TYPE_DEFAULT)
            and is_fusec_node(source)
            and is_fusec_node(target)
        ]
    except (FusecError, AttributeError, TypeError, ValueError) as err:
        _warn_once(f"cannot read the graph's edges ({err})")
        return 0
    programmatic = drv.CUgraphEdgeData()
    programmatic.from_port = drv.CU_GRAPH_KERNEL_NODE_PORT_PROGRAMMATIC
    programmatic.type = drv.CUgraphDependencyType.CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC
    changed = 0
    for source, target, edge in edges:
        _check(drv.cuGraphRemoveDependencies(graph, [source], [target], [edge], 1))
        try:
            _check(drv.cuGraphAddDependencies(graph, [source], [target], [programmatic], 1))
        except FusecError as err:
            _check(drv.cuGraphAddDependencies(graph, [source], [target], [edge], 1))
            _warn_once(f"the driver refused a programmatic edge ({err})")
            break
        changed += 1
    return changed


def _edges(drv: Any, graph: Any) -> list[tuple[Any, Any, Any]]:
    """(from node, to node, edge data) of every edge of ``graph``."""
    from fusec.targets.cuda.adapters import _check

    *_, count = _check(drv.cuGraphGetEdges(graph, 0))
    if not count:
        return []
    sources, targets, data, count = _check(drv.cuGraphGetEdges(graph, count))
    return list(zip(sources[:count], targets[:count], data[:count], strict=True))


_warned: list[str] = []


def _warn_once(problem: str) -> None:
    import warnings

    if not _warned:
        _warned.append(problem)
        message = f"fusec: {problem}; CUDA graphs keep plain edges between kernels"
        warnings.warn(message, RuntimeWarning, stacklevel=3)


def instantiate(graph: Any) -> Any:
    """The executable graph of captured ``graph``, its fusec kernels chained by programmatic
    edges (``programmatic_edges``) where ``pdl_enabled()``."""
    from cuda.bindings import driver as drv

    from fusec.targets.cuda.adapters import _check

    if pdl_enabled():
        programmatic_edges(graph)
    return _check(drv.cuGraphInstantiate(graph, 0))


def _kernel_name(drv: Any, node: Any) -> str | None:
    """The mangled entry name of kernel node ``node``; None for another kind of node."""
    from fusec.targets.cuda.adapters import _check

    kind = _check(drv.cuGraphNodeGetType(node))
    if int(kind) != int(drv.CUgraphNodeType.CU_GRAPH_NODE_TYPE_KERNEL):
        return None
    params = _check(drv.cuGraphKernelNodeGetParams(node))
    if int(params.func):
        name = _check(drv.cuFuncGetName(params.func))
    elif int(params.kern):
        name = _check(drv.cuKernelGetName(params.kern))
    else:
        return None
    return name.decode() if isinstance(name, bytes) else str(name)


numba_cuda()  # prepared before numba.cuda's extending API is touched
globals().update(_make_sim() if simulator_enabled() else _make_gpu())
__all__ = [*helper_names(), "instantiate", "is_fusec_kernel", "pdl_enabled", "programmatic_edges"]
