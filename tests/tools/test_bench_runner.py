"""The benchmark runners (benchmarks/cpu.py, benchmarks/gpu.py over benchmarks/runner.py).

Every suite is listed and its smoke runs here, on the cpu without a GPU (fusec on the
reference target against the suite's baselines; the gpu suites' cases compiled for the cuda
target, code generation only), and writes a well-formed table; every benchmark script is a
suite of a runner (or one of the shared modules); the results folder keeps one undated
table per benchmark and every table the READMEs and docs cite exists; the device script's
stages and its aliases name scripts that exist.
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCHMARKS = ROOT / "benchmarks"
RESULTS = BENCHMARKS / "results"
sys.path.insert(0, str(BENCHMARKS))

import cpu  # noqa: E402
import gpu  # noqa: E402
import runner  # noqa: E402

#: benchmarks/*.py that are not measurements: the runners and the modules they share
SHARED = {"runner.py", "cpu.py", "gpu.py", "bench_common.py", "stream_timing.py", "floor.py"}
#: the modules a cpu suite's smoke needs beyond fusec's own (the onnx extra)
ONNXRUNTIME = {"vs-ort", "threads", "conv-layers", "conv-transpose", "pool", "launcher"}
SMOKE_NEEDS = {name: "onnxruntime" for name in (*ONNXRUNTIME, "transformers", "models-small")}
SMOKE_NEEDS["quant"] = "ml_dtypes"
RUNNERS = {"cpu": cpu.SUITES, "cuda": gpu.SUITES}
SUITES = [(target, s) for target, suites in RUNNERS.items() for s in suites]
#: gpu suites whose smoke loads the cuda target's runtime (numba-cuda), not only its codegen
NEEDS_NUMBA_CUDA = {"gemm-host-path"}


def smoke_param(target: str, suite: runner.Suite) -> object:
    marks = [pytest.mark.requires_target("cuda")] if suite.name in NEEDS_NUMBA_CUDA else []
    return pytest.param(target, suite, marks=marks, id=f"{target}-{suite.name}")


@pytest.fixture
def same_environment() -> Iterator[None]:
    """Some benchmark scripts set thread variables at import: undo that after the test."""
    saved = dict(os.environ)
    yield
    os.environ.clear()
    os.environ.update(saved)


def benchmark_scripts() -> set[str]:
    """The benchmark scripts of the tree: git's tracked ones (a helper's uncommitted script
    is not yet part of it), every one on disk without git."""
    done = subprocess.run(
        ["git", "ls-files", "benchmarks/*.py"], capture_output=True, text=True, cwd=ROOT
    )
    names = {Path(p).name for p in done.stdout.split()} if done.returncode == 0 else set()
    return (names or {p.name for p in BENCHMARKS.glob("*.py")}) - SHARED


def test_every_script_is_a_suite() -> None:
    scripts = benchmark_scripts()
    registered = {s.script for _, s in SUITES}
    unlisted = scripts - registered
    assert unlisted == set(), (
        f"benchmark scripts that no runner lists: {sorted(unlisted)}; add a Suite to "
        "benchmarks/cpu.py or gpu.py (or make the question an option of an existing suite)"
    )
    assert {s for s in registered if not (BENCHMARKS / s).is_file()} == set()
    for suites in RUNNERS.values():
        names = [s.name for s in suites]
        assert len(names) == len(set(names)), "a suite name used twice in one runner"


@pytest.mark.parametrize("target", sorted(RUNNERS))
def test_list_names_every_suite(target: str) -> None:
    script = "gpu.py" if target == "cuda" else "cpu.py"
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / script), "list"],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
        timeout=60,
    )
    listed = [line.split()[0] for line in done.stdout.splitlines() if line.strip()]
    assert listed == [s.name for s in RUNNERS[target]]


@pytest.mark.parametrize(("target", "suite"), [smoke_param(t, s) for t, s in SUITES])
@pytest.mark.usefixtures("same_environment")
def test_smoke_writes_a_well_formed_table(target: str, suite: runner.Suite, tmp_path: Path) -> None:
    if target == "cpu" and suite.name in SMOKE_NEEDS:
        pytest.importorskip(SMOKE_NEEDS[suite.name])
    stem, _ = runner.smoke(suite, target, tmp_path)
    assert runner.check_table(stem) == []
    data = json.loads(Path(f"{stem}.json").read_text())
    assert data["mode"] == "smoke" and data["target"] == target
    assert data["benchmark"] == (suite.table or suite.name)
    assert all(row.get("status", "ok") in ("ok", "planned") for row in data["rows"])


def test_check_table_finds_what_is_wrong(tmp_path: Path) -> None:
    table = runner.Table("t", "cpu", "smoke", ["case", "ms"], [{"case": "a", "ms": 1.0}])
    stem = table.write(tmp_path / "t")
    assert runner.check_table(stem) == []
    data = json.loads(Path(f"{stem}.json").read_text())
    data["rows"].append({"case": "b"})
    Path(f"{stem}.json").write_text(json.dumps(data))
    problems = runner.check_table(stem)
    assert any("row 1" in p for p in problems)
    assert any("table rows" in p for p in problems)
    Path(f"{stem}.md").unlink()
    assert runner.check_table(stem) == ["t.md is missing"]


def test_run_substitutes_the_folder_and_checks_options(tmp_path: Path) -> None:
    suite = next(s for s in cpu.SUITES if s.name == "threads")
    command = suite.command("pin-off", tmp_path, ["--rounds", "3"])
    assert command[1] == str(BENCHMARKS / "cpu_threads.py")
    assert str(tmp_path) in command and command[-2:] == ["--rounds", "3"]
    assert suite.env["pin-off"] == {"FUSEC_CPU_PIN": "0"}
    with pytest.raises(SystemExit, match="no option 'nope'"):
        suite.command("nope", tmp_path, [])
    done = subprocess.run(
        [
            sys.executable,
            str(BENCHMARKS / "gpu.py"),
            "run",
            "gemm:tf32",
            "--dry-run",
            "--out",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
        timeout=60,
    )
    assert f"$ python benchmarks/gemm_bench.py --out {tmp_path} --tf32" in done.stdout


DATED = re.compile(r"20\d\d-\d\d-\d\d")


def test_results_keep_one_undated_table_per_benchmark() -> None:
    dated = sorted(p.name for p in RESULTS.iterdir() if DATED.search(p.name))
    assert dated == [], "dated results files: keep the latest table under an undated name"


def cited_results() -> set[str]:
    """The results files README.md, docs/ and benchmarks/README.md cite as present (a line
    that points into git history cites an old table on purpose)."""
    cited: set[str] = set()
    pattern = re.compile(r"results/([\w.+-]+\.(?:md|json|jsonl|png|log))")
    for doc in [
        ROOT / "README.md",
        BENCHMARKS / "README.md",
        *sorted((ROOT / "docs").glob("**/*.md")),
    ]:
        for line in doc.read_text().splitlines():
            if "git history" in line or "git show" in line:
                continue
            cited.update(pattern.findall(line))
    # benchmarks/README.md's results section names its tables bare (`gemm.md`)
    text = (BENCHMARKS / "README.md").read_text()
    section = text.split("## results/", 1)[1].split("\n## ", 1)[0]
    bare = re.compile(r"`([\w.+-]+\.(?:md|json|jsonl|png|log))`")
    for line in section.splitlines():
        if "git history" not in line and "git show" not in line:
            cited.update(bare.findall(line))
    return cited


def test_every_cited_results_file_exists() -> None:
    cited = cited_results()
    assert cited, "the READMEs cite no results file: the pattern is stale"
    missing = sorted(name for name in cited if not (RESULTS / name).is_file())
    assert missing == []


def test_device_script_stages_name_existing_scripts(tmp_path: Path) -> None:
    env = os.environ | {"DRY_RUN": "1", "OUT": str(tmp_path)}
    stages = ["all", "gemm", "gemm-variants", "conv-attn", "profile", "zoo", "w4"]
    done = subprocess.run(
        ["bash", str(BENCHMARKS / "device.sh"), *stages],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    named = set(
        re.findall(r"(benchmarks/[\w.]+\.(?:py|sh)|tests/[\w/]+\.(?:py|mlir))", done.stdout)
    )
    assert named, done.stdout
    assert sorted(p for p in named if not (ROOT / p).is_file()) == []
    for stage in stages:
        assert f"=== stage {stage}" in done.stdout
    bad = subprocess.run(
        ["bash", str(BENCHMARKS / "device.sh"), "nope"], capture_output=True, text=True, env=env
    )
    assert bad.returncode == 2 and "unknown stage" in bad.stderr


@pytest.mark.parametrize(
    ("alias", "stage"),
    [
        ("device_all.sh", "all"),
        ("gemm_device_run.sh", "gemm"),
        ("gemm_variants_device.sh", "gemm-variants"),
        ("conv_attn_device.sh", "conv-attn"),
        ("profile_device.sh", "profile"),
    ],
)
def test_old_device_scripts_are_aliases(alias: str, stage: str, tmp_path: Path) -> None:
    env = os.environ | {"DRY_RUN": "1", "OUT": str(tmp_path)}
    done = subprocess.run(
        ["bash", str(BENCHMARKS / alias)], capture_output=True, text=True, env=env, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert f"=== stage {stage}" in done.stdout


@pytest.mark.gpu
def test_gpu_runner_runs_a_suite_on_the_gpu(tmp_path: Path) -> None:
    """`gpu.py run copy` on a GPU: the script runs from the runner, checks every copy kernel
    bit for bit against torch and writes its table (copy.md and copy.json) to --out.

    The suite's exit status also carries its stream checks, which compare CUDA events with
    the wall clock: on a host busy with the GPU lane's other workers a loop's wall clock
    runs late (an H100 lane at 4ed87b4: 1.29 ms of events, 1.56 wall, three tries), so a
    row failing that check alone does not fail this test. Ordering on the caller's stream
    is pinned by tests/targets/cuda/test_cuda_streams_gpu.py."""
    pytest.importorskip("torch")
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / "gpu.py"), "run", "copy", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    output = done.stdout[-2000:] + done.stderr[-2000:]
    assert (tmp_path / "copy.json").exists(), output
    rows = json.loads((tmp_path / "copy.json").read_text())["results"]
    assert rows and all(r["bit_exact"] for r in rows)
    assert all(math.isfinite(r["fusec_ms"]) for r in rows)
    late = [r for r in rows if not r["stream_check_ok"]]
    assert done.returncode == (1 if late else 0), output
    assert (tmp_path / "copy.md").read_text().count("\n|") >= len(rows)


def test_a_full_run_writes_the_results_format(tmp_path: Path) -> None:
    """The scripts that used to print their figures write runner.Table with --out (here
    fusion_scaling.py, the fastest of them, on short chains)."""
    subprocess.run(
        [sys.executable, str(BENCHMARKS / "fusion_scaling.py"), "10", "30", "--out", str(tmp_path)],
        check=True,
        capture_output=True,
        cwd=ROOT,
        timeout=120,
    )
    stem = tmp_path / "fusion-scaling"
    assert runner.check_table(stem) == []
    data = json.loads(Path(f"{stem}.json").read_text())
    assert data["mode"] == "full" and [r["ops"] for r in data["rows"]] == [10, 30]
    assert all(r["kernels"] >= 1 for r in data["rows"])


def test_an_ab_of_two_trees_alternates_the_sides(tmp_path: Path) -> None:
    """--against REV: REV's fusec/ first on PYTHONPATH, then this tree, --pairs times, each
    side's tables in a folder of its own; a suite writing no table under --out is refused."""
    rev = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT
    ).stdout.strip()
    if not rev:
        pytest.skip("not a git checkout")
    command = [sys.executable, str(BENCHMARKS / "cpu.py"), "run", "trace-overhead"]
    command += ["--against", "HEAD", "--pairs", "2", "--dry-run", "--out", str(tmp_path)]
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 4
    assert all(f"FUSEC_COMMIT={rev}" in line for line in lines[::2])
    assert all("PYTHONPATH" not in line for line in lines[1::2])
    for line, side in zip(
        lines, ("ab-" + rev + "-1", "ab-tree-1", "ab-" + rev + "-2", "ab-tree-2"), strict=True
    ):
        assert str(tmp_path / side / "trace-overhead.json") in line
    refused = subprocess.run(
        [
            sys.executable,
            str(BENCHMARKS / "cpu.py"),
            "run",
            "ops",
            "--against",
            "HEAD",
            "--dry-run",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert refused.returncode == 2 and "cannot be A/Bed" in refused.stderr


@pytest.mark.slow
def test_an_ab_runs_the_exported_compiler(tmp_path: Path) -> None:
    """The base side imports the exported fusec/ (not this tree's), the tree side this one:
    both write their tables."""
    command = [sys.executable, str(BENCHMARKS / "cpu.py"), "run", "trace-overhead"]
    command += [
        "--against",
        "HEAD",
        "--out",
        str(tmp_path),
        "--",
        "--calls",
        "20",
        "--repeats",
        "1",
    ]
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    written = sorted(p.parent.name for p in tmp_path.glob("*/trace-overhead.json"))
    assert len(written) == 2 and written[1] == "ab-tree-1"
    for path in tmp_path.glob("*/trace-overhead.json"):
        assert json.loads(path.read_text())["target"] == "cpu"
