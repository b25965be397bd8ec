"""Sim's model of inductor's fusion: which values of a compiled graph are ever written to memory.

Inductor's kernels need real memory, so sim runs the graphs inductor would compile (dynamo's
graph, inductor's decompositions, and inductor's own ``partition_fn``: its joint-graph passes,
such as rewriting a scatter into a constant as a pointwise ``where``, then the min-cut
partitioner with ``compiler="inductor"``, so the saved set is inductor's) op by op under the
tracker (``backend``). Run that way, every
intermediate would be counted, but inductor fuses chains of pointwise ops into one kernel
and keeps their intermediates in registers. ``in_registers(graph)`` is the rule that says
which nodes' values inductor never stores, and ``backend`` runs those nodes inside
``tracker.fused()``, so they and their views are never counted:

- a node that is not pointwise (a matmul, attention, a scatter, a sort, any op inductor calls
  as an extern kernel or a fallback) writes its output, and the values it reads must exist
  in memory: it *stores* them;
- a reduction (sum, amax, ...) writes its (reduced) output, but reads its pointwise producers
  inside its own loop: it stores nothing for them;
- a pointwise op, a cast, a view or a constant is stored only if a graph output (a saved
  activation, a gradient) is it, an op that stores its inputs reads it, a stored view is a
  view of it, or more readers than ``torch._inductor.config.realize_reads_threshold`` read it
  (inductor realizes such a value rather than recompute it in every reader).

What this leaves out, stated rather than tuned: inductor's reuse of a dead buffer for a new
one inside a graph (``# reuse``: it lowers inductor's peak a little further, so sim stays an
upper bound there), its ``realize_opcount_threshold`` (a very long inlined chain is stored),
and the fusion of a pointwise epilogue into a matmul template (off by default outside
max-autotune). Checked against real inductor on cpu: tests/test_sim_fusion.py.
"""
from __future__ import annotations

import operator

import torch

POINTWISE = torch.Tag.pointwise
# lowered by inductor as pointwise loops (indexing, casts, copies, constants) though not tagged
INLINE = {"aten._to_copy", "prims.convert_element_type", "aten.clone", "aten.copy", "aten.copy_",
          "aten.where", "aten.gather", "aten.index", "aten.embedding", "aten.full", "aten.zeros",
          "aten.ones", "aten.scalar_tensor", "aten.iota", "prims.iota", "aten.arange", "aten.full_like",
          "aten.zeros_like", "aten.ones_like", "aten.lift_fresh_copy", "aten.alias", "aten._unsafe_view",
          "prims.broadcast_in_dim", "aten.expand", "aten.view", "aten.reshape"}
REDUCTIONS = {"aten.sum", "aten.amax", "aten.amin", "aten.mean", "aten.prod", "aten.any", "aten.all",
              "aten.argmax", "aten.argmin", "aten.max", "aten.min", "aten.var_mean", "aten.var",
              "prims.sum", "prims.amax", "prims.amin", "prims.var", "prims.xor_sum", "prims.prod"}


def _name(node) -> str:
    return str(getattr(node.target, "overloadpacket", node.target))


def _kind(node) -> str:
    """'inline' (fuses into its readers), 'reduction', or 'stores' (an extern kernel)."""
    if node.op != "call_function":
        return "stores"
    target, name = node.target, _name(node)
    if name in REDUCTIONS:
        return "reduction"
    if target is operator.getitem or name in INLINE or POINTWISE in getattr(target, "tags", ()) \
            or getattr(target, "is_view", False):
        return "inline"
    return "stores"


def _aliases(node) -> bool:
    """The node's value is (a view of) its first input's storage."""
    return node.target is operator.getitem or getattr(node.target, "is_view", False) \
        or _name(node) in ("aten._unsafe_view", "aten.alias", "aten.view", "aten.reshape", "aten.expand")


def in_registers(graph: torch.fx.Graph) -> set:
    """The call_function nodes of ``graph`` whose values inductor keeps in registers."""
    from torch._inductor import config
    outputs: set = set()
    for node in graph.nodes:
        if node.op == "output":
            torch.fx.node.map_arg(node.args, outputs.add)
    stored: set = set()
    for node in reversed(graph.nodes):  # every reader is decided before what it reads
        if node.op != "call_function":
            continue
        if _kind(node) != "inline" or node in outputs or len(node.users) > config.realize_reads_threshold \
                or any((_kind(u) == "stores" and u.op != "output") or (u in stored and _aliases(u))
                       for u in node.users):
            stored.add(node)
    return {n for n in graph.nodes if n.op == "call_function" and n not in stored}


class _Kernels(torch.fx.Interpreter):
    """Runs a compiled graph op by op; the ops inductor fuses run inside ``tracker.fused()``."""

    def __init__(self, gm, tracker):
        super().__init__(gm)
        self.tracker, self.inside = tracker, in_registers(gm.graph)

    def run_node(self, n):
        if n in self.inside:
            with self.tracker.fused():
                return super().run_node(n)
        return super().run_node(n)


def backend(tracker):
    """A torch.compile backend: inductor's graphs, decompositions and partition, run by ``_Kernels``."""
    from torch._dynamo.backends.common import aot_autograd
    from torch._functorch import config as functorch_config

    def compiler(gm, example_inputs):
        kernels = _Kernels(gm, tracker)

        def run(args):
            try:
                return kernels.boxed_run(args)
            finally:
                kernels.env.clear()  # the Interpreter keeps its output node's value: no longer than the call
        run._boxed_call = True
        return run

    def compile_fn(gm, example_inputs, **kwargs):
        from torch._inductor.compile_fx import partition_fn, select_decomp_table
        with functorch_config.patch({"unlift_effect_tokens": True}):  # as aot_eager_decomp_partition
            return aot_autograd(fw_compiler=compiler, bw_compiler=compiler, decompositions=select_decomp_table,
                                partition_fn=partition_fn)(gm, example_inputs)
    return compile_fn
