"""lit configuration of the FileCheck pass tests (run by tests/passes/test_filecheck.py).

Each ``.mlir`` file holds its input IR, ``// RUN:`` lines piping ``fusec-opt``
into ``filecheck``, and ``// CHECK`` lines that state the fact under test
(which ops end up in which ``ai.fused`` group), not the whole module.
"""

import os
import sys

import lit.formats

config.name = "fusec"  # noqa: F821 - lit provides ``config``
config.test_format = lit.formats.ShTest(execute_external=False)  # noqa: F821
config.suffixes = [".mlir"]  # noqa: F821
config.test_source_root = os.path.dirname(__file__)  # noqa: F821
config.excludes = ["lit.cfg.py"]  # noqa: F821
# fusec-opt and filecheck of the environment running lit come first on PATH
bin_dir = os.path.dirname(sys.executable)
config.environment["PATH"] = bin_dir + os.pathsep + os.environ.get("PATH", "")  # noqa: F821
# "cpu-int8-gemm": the cpu target runs quantized GEMMs on integer codes (AVX-512 VNNI)
try:
    from fusec.targets.cpu.host import target_features

    features = set(target_features().split(","))
    if "+avx512bw" in features and {"+avx512vnni", "+avx512_vnni"} & features:
        config.available_features.add("cpu-int8-gemm")  # noqa: F821
except ImportError:  # fusec not importable here: the tests that need it are unsupported
    pass
