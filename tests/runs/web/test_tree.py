"""The run tree: parents, chains shown flat, path-local counts."""

from runs.web import tree


def rows(*specs):
    """specs: (seq, source_id, parent_id, call_sig)."""
    return [(seq, "tool_call", "t", "ok", sig, sid, pid) for seq, sid, pid, sig in specs]


def test_a_chain_of_single_children_is_one_level():
    index = tree.build_index(rows((0, "a", "", "x"), (1, "b", "a", "x"), (2, "c", "b", "x")), set())
    assert tree.level(index, None) == [0, 1, 2]
    assert [index.nodes[s].count for s in (0, 1, 2)] == [1, 2, 3]


def test_sibling_subtrees_count_their_own_calls():
    index = tree.build_index(
        rows(
            (0, "r", "", "p"),
            (1, "a", "r", "x"),
            (2, "a2", "a", "x"),
            (3, "b", "r", "y"),
            (4, "b2", "b", "x"),
        ),
        flagged={2},
    )
    assert tree.level(index, None) == [0]
    assert tree.level(index, 0) == [1, 2, 3, 4]  # two chains under the branch point
    assert index.nodes[2].count == 2
    assert index.nodes[4].count == 2  # sees x at seq 1 (its parent's earlier sibling), not 2
    assert index.nodes[0].flagged and index.nodes[1].flagged and not index.nodes[3].flagged
    assert index.nodes[0].size == 5


def test_a_missing_parent_makes_a_root():
    index = tree.build_index(rows((0, "a", "ghost", ""), (1, "b", "", "")), set())
    assert index.roots == [0, 1]
