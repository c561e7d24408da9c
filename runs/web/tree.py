"""Page builder: a run as a tree (Step.parent_id -> Step.source_id), loaded a level at a time.

The structure (a few small columns per step) is read once per run and analysis and kept in
a small per-process cache; previews are read only for the nodes on screen.

Chains are flattened: a node with exactly one child is followed by that child at the same
level, so a linear run (or a parent-linked chain of 100k messages) reads as a list and
nesting appears only where the run branches (sub-agents, parallel calls, span children).

Counts are path-local, as the engine counts them: a node's ×n is how many calls with its
signature its root-to-node path has seen (its ancestors and their earlier children).
"""

from __future__ import annotations

from collections import Counter, OrderedDict
from dataclasses import dataclass

from ..models import Run, Step
from .timeline import hue, step_rows

PAGE = 200
OPEN_BUDGET = 400  # nodes rendered open on first load (branches with findings)
_CACHE: OrderedDict = OrderedDict()
_CACHE_RUNS = 4


class Node:
    __slots__ = (
        "call_sig",
        "children",
        "count",
        "flagged",
        "kind",
        "seq",
        "size",
        "status",
        "tool",
    )

    def __init__(self, seq: int, kind: str, tool: str, status: str, call_sig: str) -> None:
        self.seq = seq
        self.kind = kind
        self.tool = tool
        self.status = status
        self.call_sig = call_sig
        self.children: list[int] = []
        self.count = 1
        self.flagged = False  # this node or a descendant is part of a finding
        self.size = 1  # nodes in the subtree


@dataclass
class TreeIndex:
    nodes: dict[int, Node]
    roots: list[int]


def build_index(rows, flagged: set[int]) -> TreeIndex:
    """Return the tree of (seq, kind, tool, status, call_sig, source_id, parent_id) rows."""
    nodes: dict[int, Node] = {}
    by_source: dict[str, int] = {}
    parents: list[tuple[int, str]] = []
    for seq, kind, tool, status, call_sig, source_id, parent_id in rows:
        nodes[seq] = Node(seq, kind, tool, status, call_sig)
        if source_id and source_id not in by_source:
            by_source[source_id] = seq
        parents.append((seq, parent_id))
    roots = []
    for seq, parent_id in parents:
        parent = by_source.get(parent_id) if parent_id else None
        if parent is None or parent == seq:
            roots.append(seq)
        else:
            nodes[parent].children.append(seq)
    _count_paths(nodes, roots, flagged)
    return TreeIndex(nodes, roots)


def _count_paths(nodes: dict[int, Node], roots: list[int], flagged: set[int]) -> None:
    """Set path-local counts, subtree sizes and flags, depth first without recursion.

    A child's signature stays counted while its later siblings (and their subtrees) are
    visited, and is forgotten when its parent's subtree is done.
    """
    seen: Counter = Counter()
    # Each frame: [seq or None for the top, index of the next child, signatures its children added]
    stack: list[list] = [[None, 0, []]]
    while stack:
        frame = stack[-1]
        children = roots if frame[0] is None else nodes[frame[0]].children
        if frame[1] < len(children):
            child = nodes[children[frame[1]]]
            frame[1] += 1
            if child.call_sig:
                seen[child.call_sig] += 1
                child.count = seen[child.call_sig]
                frame[2].append(child.call_sig)
            child.flagged = child.seq in flagged
            stack.append([child.seq, 0, []])
            continue
        stack.pop()
        for sig in frame[2]:
            seen[sig] -= 1
        if frame[0] is not None and stack and stack[-1][0] is not None:
            node, parent = nodes[frame[0]], nodes[stack[-1][0]]
            parent.size += node.size
            parent.flagged = parent.flagged or node.flagged


def load(run: Run) -> TreeIndex:
    """Return the run's tree index, cached per run and analysis."""
    key = (run.pk, run.analyzed_at, run.step_count)
    if key in _CACHE:
        _CACHE.move_to_end(key)
        return _CACHE[key]
    rows = (
        Step.objects.filter(run=run)
        .order_by("seq")
        .values_list("seq", "kind", "tool", "status", "call_sig", "source_id", "parent_id")
        .iterator(chunk_size=10_000)
    )
    flagged = {
        seq
        for seqs in run.findings.exclude(severity="info").values_list("seqs", flat=True)
        for seq in seqs
    }
    index = build_index(rows, flagged)
    _CACHE[key] = index
    while len(_CACHE) > _CACHE_RUNS:
        _CACHE.popitem(last=False)
    return index


def level(index: TreeIndex, parent: int | None) -> list[int]:
    """Return the seqs shown at one level under parent: children with their chains inline."""
    out = []
    for seq in index.roots if parent is None else index.nodes[parent].children:
        out.append(seq)
        node = index.nodes[seq]
        while len(node.children) == 1:
            node = index.nodes[node.children[0]]
            out.append(node.seq)
    return out


@dataclass
class Row:
    node: Node
    step: Step | None
    children: list[Row] | None  # rendered open; None = load on expand
    more_offset: int | None = None  # for the children list
    hue: int | None = None
    chain_start: bool = False  # a direct child of its parent: a new branch begins here

    @property
    def expandable(self) -> bool:
        return len(self.node.children) > 1


def rows_for(
    run: Run, index: TreeIndex, parent: int | None, offset: int = 0, *, open_flagged: bool = True
) -> tuple[list[Row], int | None]:
    """Return the rows of one level (a page of it) and the offset of the next page."""
    seqs = level(index, parent)
    page = seqs[offset : offset + PAGE]
    more = offset + PAGE if len(seqs) > offset + PAGE else None
    budget = [OPEN_BUDGET]
    rows = _rows(run, index, page, budget, open_flagged)
    return rows, more


def _rows(run: Run, index: TreeIndex, seqs: list[int], budget: list[int], open_flagged: bool):
    budget[0] -= len(seqs)
    steps = {s.seq: s for s in step_rows(run).filter(seq__in=seqs)}
    parents = {child for seq in seqs for child in index.nodes[seq].children}
    rows = []
    for seq in seqs:
        node = index.nodes[seq]
        children = None
        if open_flagged and len(node.children) > 1 and node.flagged and budget[0] > 0:
            sub = level(index, seq)[:PAGE]
            children = _rows(run, index, sub, budget, open_flagged)
        repeated = node.call_sig and node.count > 1
        rows.append(
            Row(
                node=node,
                step=steps.get(seq),
                children=children,
                hue=hue(node.call_sig) if repeated else None,
                chain_start=seq not in parents,
            )
        )
    return rows
