"""A program's pipeline dataflow as a networkx graph, for resource accounting and printing.

Nodes are buffers, each with `space` (gmem, smem, reg) and `bytes` (per CTA for
smem, per thread for registers, 0 for global memory, which is not budgeted);
edges are the operations that move data between them (`op`). ir.verify sums
the graph to check shared memory and register budgets, so the accounting lives
in one place and the printed graph is the same one that was checked.
"""
from __future__ import annotations

import networkx as nx

from .arch import HALF_BYTES, SMEM_ROW_PAD_HALFS
from .program import Accum, Epilogue, Layout, Program, Swizzle

F32_BYTES = 4


def _smem_tile_bytes(rows: int, cols: int, swizzle: Swizzle) -> int:
    """Bytes of one rows x cols fp16 tile in shared memory (cols contiguous)."""
    pad = SMEM_ROW_PAD_HALFS if swizzle == Swizzle.PAD else 0
    return rows * (cols + pad) * HALF_BYTES


def build(program: Program, unit_threads: int = 32, layout: Layout = Layout.NN,
          acc: Accum = Accum.F32) -> nx.DiGraph:
    """The dataflow graph of `program` run by units of `unit_threads` threads."""
    t, p = program.tile, program
    threads = p.warps.count * unit_threads
    g = nx.DiGraph(name=p.name, threads=threads)
    b_rows, b_cols = (t.bk, t.bn) if layout == Layout.NN else (t.bn, t.bk)
    g.add_node("A.gmem", space="gmem", bytes=0)
    g.add_node("B.gmem", space="gmem", bytes=0)
    for s in range(p.stages):
        g.add_node(f"A.smem[{s}]", space="smem", bytes=_smem_tile_bytes(t.bm, t.bk, p.swizzle))
        g.add_node(f"B.smem[{s}]", space="smem", bytes=_smem_tile_bytes(b_rows, b_cols, p.swizzle))
        g.add_edge("A.gmem", f"A.smem[{s}]", op="gmem_to_smem")
        g.add_edge("B.gmem", f"B.smem[{s}]", op="gmem_to_smem")
    acc_bytes = F32_BYTES if acc == Accum.F32 else HALF_BYTES
    # per thread: the accumulator tile, and one k-step's A and B fragments
    g.add_node("acc", space="reg", bytes=t.bm * t.bn * acc_bytes // threads)
    g.add_node("A.frag", space="reg", bytes=max(t.bm * 16 * HALF_BYTES // threads, 4))
    g.add_node("B.frag", space="reg", bytes=max(t.bn * 16 * HALF_BYTES // threads, 4))
    for s in range(p.stages):
        g.add_edge(f"A.smem[{s}]", "A.frag", op="smem_to_reg")
        g.add_edge(f"B.smem[{s}]", "B.frag", op="smem_to_reg")
    g.add_edge("A.frag", "acc", op="mma")
    g.add_edge("B.frag", "acc", op="mma")
    last = "acc"
    if p.split_k.slices > 1:
        g.add_node("partials", space="gmem", bytes=0)
        g.add_edge(last, "partials", op=f"split_k_{p.split_k.reduction.value}")
        last = "partials"
    if p.epilogue in (Epilogue.SMEM, Epilogue.TMA):
        # staged through shared memory, reusing no pipeline buffer (conservative)
        g.add_node("C.smem", space="smem", bytes=_smem_tile_bytes(t.bm, t.bn, p.swizzle))
        g.add_edge(last, "C.smem", op="reg_to_smem")
        last = "C.smem"
    g.add_node("C.gmem", space="gmem", bytes=0)
    g.add_edge(last, "C.gmem", op="tma_store" if p.epilogue == Epilogue.TMA else "store")
    return g


def smem_bytes(g: nx.DiGraph) -> int:
    """Shared memory one CTA needs, in bytes."""
    return sum(d["bytes"] for _, d in g.nodes(data=True) if d["space"] == "smem")


def reg_bytes(g: nx.DiGraph, node: str | None = None) -> int:
    """Register bytes per thread (of one node, or of all register nodes)."""
    if node is not None:
        return g.nodes[node]["bytes"]
    return sum(d["bytes"] for _, d in g.nodes(data=True) if d["space"] == "reg")


def describe(g: nx.DiGraph) -> str:
    """A readable listing of the pipeline, one edge a line, in topological order."""
    lines = [f"{g.graph['name']}: {g.graph['threads']} threads, "
             f"{smem_bytes(g)} B smem, {reg_bytes(g)} B regs/thread"]
    for u in nx.topological_sort(g):
        for _, v, d in g.out_edges(u, data=True):
            lines.append(f"  {u} --{d['op']}--> {v}")
    return "\n".join(lines)
