"""Every fa4 op has a Python builder carrying its semantics; builders check operands and attributes."""
import pytest

from fa4mlir._mlir import ir
from fa4mlir.dialect import OPS, builders, new_context

SKELETON = ('func.func @f(%s: i32, %p: i32, %a: !llvm.ptr<3>) {\n  return\n}')


def test_every_op_has_a_documented_builder():
    for op in OPS:
        fn = getattr(builders, op.name)
        assert fn.__doc__.startswith(f"fa4.{op.name}(")
        assert " ".join(op.doc.split()[:4]) in " ".join(fn.__doc__.split())


def _with_func(body):
    with new_context(), ir.Location.unknown():
        m = ir.Module.parse(SKELETON)
        func = m.body.operations[0]
        block = func.regions[0].blocks[0]
        with ir.InsertionPoint(block.operations[0]):
            body(*block.arguments)
        assert m.operation.verify()
        return str(m)


def test_builders_make_verified_ops_with_source_locations():
    def body(stage, phase, addr):
        builders.consumer_wait(stage, phase, pipe="kv")
        desc = builders.smem_desc(addr, swizzle=128, lbo=16, sbo=1024)
        assert str(desc.type) == "i64"
        tid = builders.thread_idx(dim=0)
        assert str(tid.type) == "i32"
        assert "test_dialect_builders.py" in str(tid.location)
    text = _with_func(body)
    assert '"fa4.consumer_wait"(%arg0, %arg1) {pipe = "kv"}' in text
    assert '"fa4.smem_desc"(%arg2) {lbo = 16 : i64, sbo = 1024 : i64, swizzle = 128 : i64}' in text


def test_builders_reject_bad_calls():
    def body(stage, phase, addr):
        with pytest.raises(TypeError, match=r"missing attributes \['pipe'\]"):
            builders.consumer_wait(stage, phase)
        with pytest.raises(TypeError, match="unknown attributes"):
            builders.consumer_release(stage, pipe="kv", stages=3)
        with pytest.raises(TypeError, match=r"takes operands \(stage, phase\)"):
            builders.consumer_wait(stage, pipe="kv")
        with pytest.raises(TypeError, match="result_types="):
            builders.tmem_load(stage, num=4)
    _with_func(body)
