"""Loops and branches carry trees of DSL values (fa4mlir/dsl/tree.py); deviceless, small IR."""
from __future__ import annotations

from typing import NamedTuple

import pytest

from fa4mlir.dsl import KernelBuilder, PipeState, Value, const, tree


class _Rows(NamedTuple):
    m: tuple
    l: tuple


class _Carry(NamedTuple):
    k: PipeState
    o: Value
    rows: _Rows
    late: tuple


def test_flatten_order_and_statics():
    kb = KernelBuilder("tree_flatten", arch="sm_90a", block=(128, 1, 1))
    with kb.body():
        vals = [const(i) for i in range(7)]
        carry = _Carry(PipeState(vals[0], vals[1], 3), vals[2], _Rows((vals[3], vals[4]), (vals[5], vals[6])), ())
        leaves, shape = tree.flatten(carry)
        assert leaves == vals                      # depth first, in field order
        assert shape.num_leaves == 7
        back = shape.unflatten(leaves)
        assert isinstance(back, _Carry) and isinstance(back.rows, _Rows)
        assert back.k.num_stages == 3              # a static field is kept, not carried
        assert back == carry
        with pytest.raises(ValueError, match="expected 7 values"):
            shape.unflatten(leaves[:-1])


def test_for_carries_named_tuple_and_pipe_state():
    kb = KernelBuilder("tree_for", arch="sm_90a", block=(128, 1, 1))
    n = kb.param_i32("n")
    with kb.body():
        start = _Carry(PipeState(const(0), const(0), 2), const(0.0, "f32"),
                       _Rows((const(1.0, "f32"),) * 2, (const(2.0, "f32"),) * 2), ())
        loop = kb.for_(0, n, 1, carry=start)
        with loop as (j, c):
            assert isinstance(c, _Carry) and isinstance(c.k, PipeState) and c.k.num_stages == 2
            assert all(isinstance(v, Value) for v in tree.leaves(c))
            loop.yield_(c._replace(k=c.k.advance(), o=c.o + 1.0))
        res = loop.results
        assert isinstance(res, _Carry) and isinstance(res.rows.m, tuple) and res.late == ()
        assert [str(v.type) for v in tree.leaves(res)] == ["i32", "i32", "f32", "f32", "f32", "f32", "f32"]
        assert res.k.stage.v.owner.name == "scf.for"
    text = str(kb.finish().module)
    assert "-> (i32, i32, f32, f32, f32, f32, f32)" in text


def test_flat_style_still_works_and_mismatch_is_explained():
    kb = KernelBuilder("tree_flat", arch="sm_90a", block=(128, 1, 1))
    n = kb.param_i32("n")
    with kb.body():
        loop = kb.for_(0, n, 1, carry=(const(0), const(1)))
        with loop as (j, (a, b)):
            loop.yield_(a + j, b)                 # parts as separate arguments
        a, b = loop.results
        with pytest.raises(ValueError, match="expected 2"):
            bad = kb.for_(0, n, 1, carry=(a, b))
            with bad as (_, (x, y)):
                bad.yield_(x)
                pass


def test_if_results_from_type_tree_and_value_template():
    kb = KernelBuilder("tree_if", arch="sm_90a", block=(128, 1, 1))
    n = kb.param_i32("n")
    with kb.body():
        rows = _Rows((const(0.0, "f32"), const(1.0, "f32")), (const(2.0, "f32"), const(3.0, "f32")))
        br = kb.if_(n.lt(4), results=_Rows(("f32", "f32"), (("f32", 4), "f32")))
        with br.then_():
            br.yield_(_Rows(rows.m, (const(0.0, ("f32", 4)), rows.l[1])))
        with br.else_():
            br.yield_(rows.m[0], rows.m[1], const(1.0, ("f32", 4)), rows.l[0])
        assert isinstance(br.results, _Rows) and str(br.results.l[0].type) == "vector<4xf32>"
        like = kb.if_(n.lt(5), results=rows)      # types taken from values
        with like.then_():
            like.yield_(rows)
        with like.else_():
            like.yield_(rows)
        assert isinstance(like.results, _Rows)
    kb.finish()


def test_while_carries_tree():
    kb = KernelBuilder("tree_while", arch="sm_90a", block=(128, 1, 1))
    n = kb.param_i32("n")
    with kb.body():
        loop = kb.while_((const(0), PipeState(const(0), const(0), 2)))
        with loop.before() as (i, s):
            assert isinstance(s, PipeState)
            loop.condition(i.lt(n), (i, s))
        with loop.body() as (i, s):
            loop.yield_((i + 1, s.advance()))
        i, s = loop.results
        assert isinstance(s, PipeState) and s.num_stages == 2
    kb.finish()
