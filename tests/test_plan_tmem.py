"""fa4-plan-tmem planning math (PTX ISA 9.1 §9.7.16.7.1: tcgen05.alloc takes a power of two in
[32, 512] columns; §9.7.16.1: 512 columns per CTA) and the attribute it sets on the kernel."""
import pytest

from fa4mlir.passes.plan_tmem import TMEM_COLUMNS, check_alloc, plan


@pytest.mark.parametrize("cols", [32, 64, 128, 256, 512])
def test_legal_allocations(cols):
    check_alloc(cols)
    assert plan([cols]) == cols


@pytest.mark.parametrize("cols", [0, 16, 31, 48, 96, 300, 1024, -32])
def test_illegal_allocations(cols):
    with pytest.raises(ValueError, match="power of two in \\[32, 512\\]"):
        check_alloc(cols)


def test_total_within_512():
    assert plan([]) == 0
    assert plan([256, 128, 128]) == TMEM_COLUMNS
    with pytest.raises(ValueError, match="544 TMEM columns .*over the 512"):
        plan([512, 32])


def test_sm100_gemm_records_tmem_cols():
    from fa4mlir.kernels import gemm_sm100
    from fa4mlir.passes import registry
    from fa4mlir.passes._util import kernel_func
    from fa4mlir._mlir import ir
    k = gemm_sm100.build(gemm_sm100.GemmConfig(bn=96, stages=2))
    with k.module.context:
        registry.run_passes(k.module, registry.fa4_stage("sm_100a"))
        func = kernel_func(k.module.operation)
        assert ir.IntegerAttr(func.attributes["fa4.tmem_cols"]).value == 128  # 96 f32 columns -> 128
