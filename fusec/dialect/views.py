"""Chains of views (reshapes and transposes) that cancel: canonicalisation patterns.

Exporters write layout round trips: PyTorch's ``k.transpose(-1, -2)`` for a
matmul that the attention recogniser then reads back as ``K`` (a reshape to
``[B*H, S, D]``, a transpose, a reshape back, a transpose), a head split whose
merge restores the rows, a conv layout conversion and its inverse. Each such
op left in the IR is a copy kernel. The patterns here remove them at function
level, for every pipeline (they are the canonicalisation patterns of
``ai.transpose`` and ``ai.reshape``); group bodies are kernels and are left as
they are.

Whether a chain restores row-major order is decided symbolically, without
materialising indices (``restores_order``): the root's flat index is a mixed
radix number over *atoms* (factors of its dimensions); a transpose permutes
dimensions, each a run of atoms, and a reshape regroups the flattened run,
splitting an atom where a new dimension boundary falls inside it. The chain is
the identity on the elements exactly when the final dimensions, flattened, list
the atoms in the root's order.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from itertools import count

from xdsl.dialects import func
from xdsl.ir import Operation, SSAValue
from xdsl.pattern_rewriter import PatternRewriter, RewritePattern


def at_function_level(op: Operation) -> bool:
    """Whether ``op`` is in a function body (not in a kernel's ``ai.fused`` body)."""
    return isinstance(op.parent_op(), func.FuncOp)


def is_view(op: Operation) -> bool:
    from fusec.dialect import ops as ai

    return isinstance(op, ai.ReshapeOp | ai.TransposeOp)


def feeds_attention(value: SSAValue, through: Callable[[Operation], bool]) -> bool:
    """Whether every use of ``value`` leads, through ops that ``through`` accepts, to the
    q, key or v operand of an ``ai.attention`` (a value nothing reads does not)."""
    from fusec.dialect import ops as ai

    seen: set[Operation] = set()

    def leads(value: SSAValue) -> bool:
        uses = list(value.uses)
        if not uses:
            return False
        for use in uses:
            user = use.operation
            if isinstance(user, ai.AttentionOp):
                if use.index > 2:
                    return False
                continue
            if user in seen:
                continue
            if not through(user):
                return False
            seen.add(user)
            if not leads(user.results[0]):
                return False
        return True

    return leads(value)


def view_chain(op: Operation) -> list[Operation]:
    """The function-level views ending at ``op``, outermost last, back to the first value
    that no view defines (``op`` itself must be a view)."""
    chain = [op]
    while True:
        owner = chain[0].operands[0].owner
        if not isinstance(owner, Operation) or not is_view(owner):
            return chain
        if not at_function_level(owner):
            return chain
        chain.insert(0, owner)


class _Atoms:
    """The root's flat index as atoms (mixed radix digits), and the dimensions of the
    current value as runs of atoms, major first."""

    def __init__(self, shape: Sequence[int]) -> None:
        self._ids = count()
        self.size: dict[int, int] = {}
        self.order: list[int] = []
        self.dims: list[list[int]] = []
        for n in shape:
            self.dims.append(self._new_run(n))
        self.order = [a for run in self.dims for a in run]

    def _new_run(self, n: int) -> list[int]:
        if n == 1:
            return []
        atom = next(self._ids)
        self.size[atom] = n
        return [atom]

    def _split(self, atom: int, major: int) -> tuple[int, int]:
        """Split ``atom`` into a major part of size ``major`` and the minor rest, in the
        root's order too."""
        hi, lo = next(self._ids), next(self._ids)
        self.size[hi], self.size[lo] = major, self.size.pop(atom) // major
        at = self.order.index(atom)
        self.order[at : at + 1] = [hi, lo]
        return hi, lo

    def transpose(self, perm: Sequence[int]) -> None:
        self.dims = [self.dims[p] for p in perm]

    def reshape(self, shape: Sequence[int]) -> bool:
        """Regroup the atoms into ``shape``; False when a boundary does not divide an atom
        (the chain is then not recognised)."""
        flat = [a for run in self.dims for a in run]
        flat.reverse()  # popped major first
        dims: list[list[int]] = []
        for n in shape:
            run: list[int] = []
            while n > 1:
                if not flat:
                    return False
                atom = flat.pop()
                size = self.size[atom]
                if size <= n:
                    if n % size:
                        return False
                    run.append(atom)
                    n //= size
                    continue
                if size % n:
                    return False
                hi, lo = self._split(atom, n)
                run.append(hi)
                flat.append(lo)
                n = 1
            dims.append(run)
        self.dims = dims
        return not flat

    def in_root_order(self) -> bool:
        return [a for run in self.dims for a in run] == self.order


def static_shape(value: SSAValue) -> tuple[int, ...] | None:
    """The static shape of a tensor value, or None (a type the ops do not take)."""
    from fusec.dialect.ops import spec_of
    from fusec.errors import FusecError

    try:
        return tuple(spec_of(value.type).shape)
    except FusecError:
        return None


def restores_order(root_shape: Sequence[int], chain: Sequence[Operation]) -> bool:
    """Whether the views of ``chain`` (applied in order to a value of ``root_shape``) leave
    its elements in row-major order: the chain is one reshape of the root."""
    from fusec.dialect import ops as ai

    if 0 in root_shape:
        return False
    atoms = _Atoms(root_shape)
    for view in chain:
        if isinstance(view, ai.TransposeOp):
            atoms.transpose(view.attr("perm"))
            continue
        shape = static_shape(view.results[0])
        if shape is None:
            return False
        if atoms.in_root_order():  # row-major so far: any reshape keeps it so
            atoms = _Atoms(shape)
        elif not atoms.reshape(shape):
            return False
    return atoms.in_root_order()


def _reshaped(root: SSAValue, op: Operation, rewriter: PatternRewriter) -> None:
    """Replace ``op`` by ``root`` under ``op``'s shape (``root`` itself when it has it)."""
    from fusec.dialect import ops as ai

    if root.type == op.results[0].type:
        rewriter.replace(op, [], [root])
        return
    target = static_shape(op.results[0])
    assert target is not None  # restores_order read it
    reshape = ai.ReshapeOp(root, shape=target)
    reshape.location = op.location
    rewriter.replace(op, reshape)


class CollapseViewChain(RewritePattern):
    """A chain of two or more reshapes and transposes that leaves its operand's elements
    in row-major order is one reshape of that operand (or the operand itself): the
    longest such suffix of the views ending at the op is replaced. Function level only."""

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        if not is_view(op) or not at_function_level(op):
            return
        chain = view_chain(op)
        for start in range(len(chain) - 1):
            suffix = chain[start:]
            root = suffix[0].operands[0]
            shape = static_shape(root)
            if shape is not None and restores_order(shape, suffix):
                _reshaped(root, op, rewriter)
                return


class ComposeTransposes(RewritePattern):
    """``transpose(transpose(v, p), q)`` -> ``transpose(v, p o q)``, or ``v`` when that is
    the identity (an NHWC -> NCHW -> NHWC pair cancels). Function level only."""

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        from fusec.dialect import ops as ai

        if not isinstance(op, ai.TransposeOp) or not at_function_level(op):
            return
        inner = op.input.owner
        if not isinstance(inner, ai.TransposeOp) or not at_function_level(inner):
            return
        first, second = inner.attr("perm"), op.attr("perm")
        perm = tuple(first[i] for i in second)
        if perm == tuple(range(len(perm))):
            rewriter.replace(op, [], [inner.input])
            return
        composed = ai.TransposeOp(inner.input, perm=perm)
        composed.location = op.location
        rewriter.replace(op, composed)


class FoldIdentityTranspose(RewritePattern):
    """``transpose(v, [0, 1, ..., n-1])`` is ``v``."""

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        from fusec.dialect import ops as ai

        if not isinstance(op, ai.TransposeOp) or not at_function_level(op):
            return
        perm = tuple(op.attr("perm"))
        if perm == tuple(range(len(perm))):
            rewriter.replace(op, [], [op.input])


class FoldIdentityReshape(RewritePattern):
    """``reshape(v)`` to ``v``'s own shape is ``v``."""

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        from fusec.dialect import ops as ai

        if not isinstance(op, ai.ReshapeOp) or not at_function_level(op):
            return
        if op.input.type == op.output.type:
            rewriter.replace(op, [], [op.input])
