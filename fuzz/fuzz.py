"""Coverage-guided fuzzing of fusec's readers with atheris (``pip install -e '.[fuzz]'``).

    python fuzz/fuzz.py TARGET [libFuzzer options] [CORPUS_DIR ...]

TARGET is one of ``mlir``, ``rules``, ``onnx``, ``npz`` (see ``fuzz/targets.py``
for what each checks). Without a corpus folder, a copy of ``fuzz/corpus/TARGET``
in a scratch folder is used and grown. Useful options: ``-max_total_time=900``
(seconds), ``-timeout=20`` (a hang: one input running longer), ``-rss_limit_mb=3072``
(memory without bound), ``-max_len=65536``. A crash is written as ``crash-*``
in the working folder: minimise it (``-minimize_crash=1 -runs=10000 crash-...``),
move it to ``fuzz/crashes/TARGET/`` and fix it; ``tests/fuzz`` then runs it in CI.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

import atheris

sys.path.insert(0, str(Path(__file__).parent))

import targets  # noqa: E402

#: Modules whose coverage guides the mutations (instrumented after import: fusec is
#: often installed editable, behind an import hook atheris does not see).
INSTRUMENTED = ("fusec", "xdsl", "lark", "onnx")


def _instrument() -> None:
    import types

    for name, module in list(sys.modules.items()):
        if name.split(".")[0] in INSTRUMENTED and isinstance(module, types.ModuleType):
            for value in list(vars(module).values()):
                _instrument_object(value, name)


def _instrument_object(value, module_name: str) -> None:
    import types

    if isinstance(value, types.FunctionType) and value.__module__ == module_name:
        atheris.instrument_func(value)
    elif isinstance(value, type) and value.__module__ == module_name:
        for attribute in list(vars(value).values()):
            function = getattr(attribute, "__func__", attribute)
            if isinstance(function, types.FunctionType):
                atheris.instrument_func(function)


def main() -> None:
    if len(sys.argv) < 2 or sys.argv[1] not in targets.CHECKS:
        sys.exit(f"usage: fuzz.py {{{','.join(targets.CHECKS)}}} [libFuzzer options] [CORPUS ...]")
    name = sys.argv.pop(1)
    check = targets.CHECKS[name]
    targets.quiet()
    targets.warm_up(name)  # import what the check uses, then instrument it
    _instrument()
    if not any(not arg.startswith("-") for arg in sys.argv[1:]):
        work = Path(tempfile.mkdtemp(prefix=f"fusec-corpus-{name}-"))
        for seed in targets.corpus_files(name):
            shutil.copy(seed, work)
        sys.argv.append(str(work))
        print(f"fuzz.py: growing a copy of the {name} corpus in {work}", file=sys.stderr)

    def one_input(data: bytes) -> None:
        check(data)

    custom = {}
    if name == "onnx":  # structure-aware: half the mutations change the parsed model

        def mutator(data: bytes, max_size: int, seed: int) -> bytes:
            if seed % 2 == 0:
                mutated = targets.mutate_onnx(data, seed)
                if mutated is not None and len(mutated) <= max_size:
                    return mutated
            return atheris.Mutate(data, max_size)

        custom["custom_mutator"] = mutator
    atheris.Setup(sys.argv, one_input, **custom)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
