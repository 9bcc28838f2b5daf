"""Lineage: a networkx graph of which program came from which, with measured rewards.

Nodes are programs (keyed by their canonical text) with attributes `reward` (log of
cuBLAS time over kernel time; None until measured, the worst reward for a failure),
`source` (the policy that proposed it) and `problem`; an edge parent -> child says the
child was derived from the parent (an edit, a mutation, an LLM rewrite). Policies use it
to pick contrastive examples: the best, the worst and the near neighbours of a program.
"""
from __future__ import annotations

import json
from pathlib import Path

import networkx as nx

from ..ir.program import Program, program_fields
from ..ir.text import parse


def field_distance(a: Program, b: Program) -> int:
    """How many IR fields differ between two programs."""
    return sum(getattr(a, f) != getattr(b, f) for f in program_fields())


class Lineage:
    def __init__(self, graph: nx.DiGraph | None = None):
        self.graph = graph if graph is not None else nx.DiGraph()

    def add(self, program: Program, *, source: str, problem: str = "",
            parent: Program | None = None, reward: float | None = None) -> None:
        """Record `program` (again: updates its attributes); link it to `parent` if given."""
        node = str(program)
        attrs = self.graph.nodes[node] if node in self.graph else {}
        self.graph.add_node(node, source=attrs.get("source", source),
                            problem=problem or attrs.get("problem", ""),
                            reward=reward if reward is not None else attrs.get("reward"))
        if parent is not None:
            if str(parent) not in self.graph:
                self.add(parent, source="unknown", problem=problem)
            self.graph.add_edge(str(parent), node)

    def set_reward(self, program: Program, reward: float) -> None:
        self.graph.nodes[str(program)]["reward"] = reward

    def measured(self, problem: str | None = None) -> list[tuple[Program, float]]:
        """(program, reward) for every measured node (of `problem`, if given), best first."""
        rows = [(parse(n), d["reward"]) for n, d in self.graph.nodes(data=True)
                if d.get("reward") is not None and (problem is None or d["problem"] == problem)]
        return sorted(rows, key=lambda r: -r[1])

    def best(self, n: int = 1, problem: str | None = None) -> list[tuple[Program, float]]:
        return self.measured(problem)[:n]

    def worst(self, n: int = 1, problem: str | None = None) -> list[tuple[Program, float]]:
        return self.measured(problem)[::-1][:n]

    def neighbours(self, program: Program, n: int = 3,
                   problem: str | None = None) -> list[tuple[Program, float]]:
        """The `n` measured programs closest to `program` by field distance (itself excluded)."""
        rows = [r for r in self.measured(problem) if r[0] != program]
        return sorted(rows, key=lambda r: (field_distance(program, r[0]), -r[1]))[:n]

    def ancestors(self, program: Program) -> list[Program]:
        return [parse(n) for n in nx.ancestors(self.graph, str(program))]

    def save(self, path: Path) -> None:
        """Write the graph as node-link JSON (atomically)."""
        path = Path(path)
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text(json.dumps(nx.node_link_data(self.graph, edges="edges")))
        tmp.replace(path)

    @classmethod
    def load(cls, path: Path) -> "Lineage":
        data = json.loads(Path(path).read_text())
        return cls(nx.node_link_graph(data, directed=True, edges="edges"))

    def __len__(self) -> int:
        return self.graph.number_of_nodes()
