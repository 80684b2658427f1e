"""The experts of a mixture-of-experts layer (``ai.moe_experts``, issue 31) on the cuda target.

A Mixtral-style layer routes each of T tokens to K of E experts; expert e computes
``down[e] @ (silu(g) * u)`` with ``g, u`` the halves of ``gate_up[e] @ x``, and the token's
output is the routing-weighted sum over its K experts. The kernel runs it as vLLM's
fused MoE does, in five launches on the caller's stream with no host synchronisation (so
inside a CUDA graph too):

1. ``moe_route`` (one block): the P = T x K (token, slot) pairs counted per expert and
   sorted by expert into groups of rows, each expert's group padded to the GEMMs' row
   tile BM, so that every BM-row tile of the sorted rows belongs to one expert; the
   *groups table* (the row tiles in use, each tile's expert), each pair's row, each
   row's token and routing weight;
2. ``moe_gather``: the tokens' rows of x in that order (zeros on padding rows);
3. the **grouped GEMM** of the gate/up projection: the Hopper GEMM (``gemm.cuh``) with
   ``GemmSpec.grouped``: its persistent walk covers the row tiles in use (read from the
   table), and each tile's B tile comes from its expert's slice of the stacked weights
   (a 3-D tensor map, z = the tile's expert): one launch for all experts; with
   ``GemmSpec.swiglu`` its epilogue is the SwiGLU (a tile's BN columns are BN / 2 gate
   columns and the same columns' up values, B's two halves), so it stores
   ``h = silu(g) * u`` rounded to x's type (the reference's rounding);
   ``$FUSEC_MOE_SWIGLU=kernel`` stores g and u instead and ``moe_swiglu`` makes h (one
   launch more, an A/B switch);
4. the grouped GEMM of the down projection, the routing weight of each row in its
   epilogue, f32 rows;
5. ``moe_combine``: each token's K rows summed in slot order, rounded to x's type.

Each expert's weights are read once per projection, and only the routed rows are
multiplied (plus at most BM - 1 padding rows an expert). ``cpp`` holds the light kernels'
specs (``include/fusec/moe.cuh``), ``launcher`` the launch sequence and its scratch,
``template`` the plan (16-bit x and weights, rows 16-byte aligned; otherwise PyTorch runs
the layer, ``torch_runtime.moe_experts``) and the kernel module.
"""
