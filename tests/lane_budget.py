"""The default lane's time budget: what does not fit a file's share runs in the slow lane.

``tests/lane_durations.json`` holds each test's measured wall time in seconds (cold
kernel caches, one pytest process on the 2-core machine CI runs on). At collection
(``conftest.pytest_collection_modifyitems``, before ``-m`` deselects), the tests of the
default lane (not already ``slow`` or ``gpu``) are taken file by file in collection
order: a test stays in the default lane while its file's measured total stays within
``budget(file)`` and is marked ``slow`` otherwise, so ``python -m pytest -m slow`` runs
it. A test passed over does not stop the next, cheaper one, so every file keeps a spread
of its tests in the default lane; the lane's length is bounded by data, not by the
machine's load at collection; and a test with no measurement counts ``UNMEASURED_S``
(a new test joins the default lane until it is measured, if its file has room).

Regenerate the data after a change of the suite's costs, on an idle machine with an
empty kernel cache::

    FUSEC_CACHE_DIR=$(mktemp -d) python -m pytest -m "not gpu" -p no:cacheprovider \\
        --junitxml=/tmp/all.xml
    python tests/lane_budget.py /tmp/all.xml
"""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from collections.abc import Iterable
from pathlib import Path

DATA = Path(__file__).with_name("lane_durations.json")
#: Seconds of a file's measured tests the default lane runs at most.
FILE_BUDGET_S = 4.0
#: Files whose share differs: the ones that cover most ground per second.
FILE_BUDGET_OVERRIDES_S = {
    "tests/architecture/test_architecture.py": 60.0,  # mypy and import contracts: all or nothing
    "tests/targets/cpu/test_cpu_blocked.py": 25.0,  # every cpu conv and GEMM method
    "tests/differential/test_edge_cases.py": 20.0,  # NaN/Inf through every path
    "tests/targets/cpu/test_cpu_row_reduce.py": 10.0,
    "tests/targets/cpu/test_cpu_kinds.py": 10.0,
    "tests/targets/cpu/test_cpu_program.py": 45.0,  # the compiled launcher: counts and networks
    "tests/test_readme.py": 10.0,
    "tests/frontend/tracer/test_tracer_readme.py": 20.0,
    "tests/targets/cpu/test_quantization_cpu.py": 20.0,  # bit-exact quantization kernels (issue 31)
    "tests/tools/test_bench_runner.py": 30.0,  # every benchmark suite's smoke (issue 27)
    "tests/targets/cuda/test_dependent.py": 12.0,  # what may run before a kernel's wait
}
#: The cost a test without a measurement is counted at.
UNMEASURED_S = 0.5


def budget(path: str) -> float:
    return FILE_BUDGET_OVERRIDES_S.get(path, FILE_BUDGET_S)


def load() -> dict[str, float]:
    return json.loads(DATA.read_text()) if DATA.exists() else {}


def over_budget(nodeids: Iterable[str], durations: dict[str, float]) -> set[str]:
    """The ids, of tests in the default lane in collection order, that do not fit."""
    spent: dict[str, float] = {}
    over = set()
    for nodeid in nodeids:
        path = nodeid.split("::", 1)[0]
        cost = durations.get(nodeid, UNMEASURED_S)
        if spent.get(path, 0.0) + cost > budget(path):
            over.add(nodeid)
        else:
            spent[path] = spent.get(path, 0.0) + cost
    return over


def from_junit(paths: Iterable[str]) -> dict[str, float]:
    """Test id -> seconds from pytest's JUnit XML reports (``--junitxml``)."""
    durations: dict[str, float] = {}
    for path in paths:
        for case in ET.parse(path).getroot().iter("testcase"):
            module = case.get("classname", "")
            if not module:  # a report entry of no test file (a collection-time skip)
                continue
            parts = module.split(".")
            # classname is "tests.dir.test_file" or "tests.dir.test_file.TestClass"
            for cut in range(len(parts), 0, -1):
                candidate = Path(*parts[:cut]).with_suffix(".py")
                if candidate.exists():
                    rest = parts[cut:]
                    nodeid = "::".join([candidate.as_posix(), *rest, case.get("name", "")])
                    durations[nodeid] = round(float(case.get("time", 0.0)), 3)
                    break
    return durations


if __name__ == "__main__":
    measured = from_junit(sys.argv[1:])
    DATA.write_text(json.dumps(dict(sorted(measured.items())), indent=0) + "\n")
    print(f"{len(measured)} tests, {sum(measured.values()):.0f} s in all -> {DATA}")
