"""The CTA-pair (cta_group::2) forms of the fa4 dialect, proven without a Blackwell GPU.

* The pair's kind::f16 shapes and instruction descriptor (passes/lower_mma_sm100.py note "CTA pair").
* The probe kernel of tests/_pair_probe.py (cluster 2 x 1 x 1: TMEM alloc/relinquish/dealloc
  cta_group::2, a remote mbarrier arrive through mapa, one m256 MMA issued by the leader, its commit
  multicast to both CTAs, barrier.cluster) compiles for sm_100a through nvJitLink and through ptxas
  with 0 spills, and its SASS holds the 2-CTA forms: UTCHMMA.2CTA, UTCBAR.2CTA.MULTICAST and the
  2-CTA TMEM allocator (UTCATOMSWS.2CTA), and no 1-CTA MMA or commit. The PTX forms are checked by
  lit_tests/kernels/cta_pair_ptx.py.
The interpreter's and the pipeline verifier's pair models run the probe in tests/test_pair_interpret.py
(its numerics against numpy, seeded protocol bugs); hardware numerics need an sm_100 GPU.
"""
import re

import pytest

from fa4mlir.passes import lower_mma_sm100 as mma
from tests._pair_probe import build


def test_pair_shapes_and_descriptor():
    for m in (128, 256):
        for n in range(32, 257, 32):
            mma.check_shape(m, n, 16, "bf16", "f32", cta_group=2)
    assert mma.instr_desc(m=256, n=128, cta_group=2) == 0x10200490            # M >> 4 = 16 at bit 24
    assert mma.instr_desc(m=256, n=256, cta_group=2, b_major="mn") == 0x10410490
    with pytest.raises(ValueError, match=r"cta_group::2 kind::f16 takes M = 128 or 256 \(the pair's rows\), got 64"):
        mma.check_shape(64, 64, 16, "bf16", "f32", cta_group=2)
    with pytest.raises(ValueError, match=r"cta_group::2 takes N a multiple of 32 in \[32, 256\], got 48"):
        mma.check_shape(256, 48, 16, "bf16", "f32", cta_group=2)
    with pytest.raises(ValueError, match="M = 64 or 128"):              # one CTA: M = 256 is the pair's
        mma.check_shape(256, 64, 16, "bf16", "f32")
    with pytest.raises(ValueError, match="cta_group must be 1 or 2, got 4"):
        mma.check_shape(128, 64, 16, "bf16", "f32", cta_group=4)


@pytest.fixture(scope="module", params=["nvjitlink-lto", "ptxas"])
def artifact(request):
    from fa4mlir import lowering
    from fa4mlir.lowering import CompileOptions
    return lowering.lower(build(64), CompileOptions(cubin_backend=request.param), key="test-cta-pair")


def test_probe_compiles_with_no_spills_and_the_2cta_sass(artifact):
    from fa4mlir.sass import disassemble, find_nvdisasm
    r = artifact.resources
    assert artifact.arch == "sm_100a" and artifact.cluster == (2, 1, 1)
    assert r["spill_stores"] == r["spill_loads"] == r["stack_bytes"] == 0, r
    if find_nvdisasm() is None:
        pytest.skip("nvdisasm is not installed (pip install nvidia-cuda-nvdisasm): cannot read the SASS")
    sass = disassemble(artifact.cubin)
    assert len(re.findall(r"\bUTCHMMA\.2CTA\b", sass)) == 1
    assert not re.search(r"\bUTCHMMA(?!\.2CTA)\b", sass)                  # no 1-CTA MMA
    assert len(re.findall(r"\bUTCBAR\.2CTA\.MULTICAST\b", sass)) == 2         # d full, ab empty
    assert not re.search(r"\bUTCBAR(?!\.2CTA)\b", sass)
    assert re.search(r"\bUTCATOMSWS\.2CTA\.FIND_AND_SET\b", sass)         # the pair's TMEM allocation
    assert re.search(r"\bUCGABAR_ARV\b", sass) and re.search(r"\bUCGABAR_WAIT\b", sass)


def _alloc_only(group: int):
    """One warp allocating, relinquishing and freeing 32 TMEM columns with cta_group `group`."""
    from fa4mlir.dialect import builders as fa4
    from fa4mlir.dsl import KernelBuilder
    kb = KernelBuilder(f"tmem_alloc_g{group}", arch="sm_100a", block=(32, 1, 1), cluster=(group, 1, 1))
    with kb.body():
        slot = kb.smem("tmem_slot", 16, align=16)
        fa4.tmem_alloc(slot, cols=32, cta_group=group)
        fa4.tmem_relinquish(cta_group=group)
        kb.fence("tcgen05_before")
        kb.sync_threads()
        kb.fence("tcgen05_after")
        fa4.tmem_dealloc(kb.load(slot, "i32"), cols=32, cta_group=group)
    return kb.finish()


def test_interpreter_runs_the_pair_allocation():
    """The pair's alloc/relinquish/dealloc run in both CTAs of a cluster (interpret/cluster.py), the
    one-CTA forms in one CTA; a launch that splits a cluster is refused."""
    from fa4mlir.interpret import kernel as ik
    ctas = ik.load(_alloc_only(2)).launch((2, 1, 1), {})
    assert [c.rank for c in ctas] == [0, 1]
    assert all(c.tmem_cols == 0 and c.stats["warp_ops"] > 0 for c in ctas)   # allocated, freed (else ExitFault)
    with pytest.raises(ValueError, match="run whole clusters"):
        ik.load(_alloc_only(2)).launch((2, 1, 1), {}, ctas=[(0, 0, 0)])
    (cta,) = ik.load(_alloc_only(1)).launch((1, 1, 1), {})
    assert cta.tmem_cols == 0 and cta.stats["warp_ops"] > 0


def _tmem_copy(group: int, forms):
    """One warp copying SMEM to TMEM (fa4.tmem_copy -> tcgen05.cp) in each of `forms` (shape, multicast)."""
    from fa4mlir.dialect import builders as fa4
    from fa4mlir.dsl import KernelBuilder
    kb = KernelBuilder(f"tmem_copy_g{group}_{len(forms)}", arch="sm_100a", block=(32, 1, 1), cluster=(group, 1, 1))
    with kb.body():
        src = kb.smem("src", 128 * 32, align=1024)
        slot = kb.smem("tmem_slot", 16, align=16)
        fa4.tmem_alloc(slot, cols=32, cta_group=group)
        kb.fence("tcgen05_before")
        kb.sync_threads()
        kb.fence("tcgen05_after")
        tmem = kb.load(slot, "i32")
        desc = fa4.smem_desc(src, swizzle=128, lbo=16, sbo=1024)
        for shape, multicast in forms:
            fa4.tmem_copy(tmem, desc, shape=shape, cta_group=group, **({"multicast": multicast} if multicast else {}))
        fa4.tmem_relinquish(cta_group=group)
        fa4.tmem_dealloc(tmem, cols=32, cta_group=group)
    return kb.finish()


def test_tmem_copy_forms_compile_to_utccp():
    """tcgen05.cp in every shape fa4-lower-tmem takes assembles (ptxas) and shows as UTCCP in the SASS;
    the pair's 64x128b.warpx2::02_13 (FlashMLA's Q into TMEM) as UTCCP.T.S.2CTA.2x64dp128bit_lw02_lw13.
    The interpreter has no tcgen05.cp yet (its SMEM source layout per shape is not modelled)."""
    from fa4mlir import lowering
    from fa4mlir.lowering import CompileOptions
    from fa4mlir.sass import disassemble, find_nvdisasm
    forms = [("128x256b", None), ("4x256b", None), ("128x128b", None), ("64x128b", "warpx2::02_13"),
             ("64x128b", "warpx2::01_23"), ("32x128b", "warpx4")]
    one = lowering.lower(_tmem_copy(1, forms), CompileOptions(cubin_backend="ptxas"), key="test-tmem-copy-1")
    pair = lowering.lower(_tmem_copy(2, forms[3:4]), CompileOptions(cubin_backend="ptxas"), key="test-tmem-copy-2")
    assert one.resources["spill_stores"] == pair.resources["spill_stores"] == 0
    if find_nvdisasm() is None:
        pytest.skip("nvdisasm is not installed: cannot read the SASS")
    sass = disassemble(one.cubin)
    for form in ("4dp256bit", "128dp128bit", "2x64dp128bit_lw02_lw13", "2x64dp128bit_lw01_lw23", "4x32dp128bit"):
        assert re.search(rf"\bUTCCP\.T\.S\.{form}\b", sass), form
    assert len(re.findall(r"\bUTCCP\.T\.S\b", sass)) >= 6
    assert re.search(r"\bUTCCP\.T\.S\.2CTA\.2x64dp128bit_lw02_lw13\b", disassemble(pair.cubin))


def test_tmem_copy_rejects_a_shape_without_its_multicast():
    from fa4mlir import lowering
    kernel = _tmem_copy(1, [("64x128b", None)])
    with kernel.module.context, pytest.raises(lowering.CompileError, match=r"tmem_copy shape '64x128b' with multicast ''"):
        lowering.lower_module(kernel.module, "sm_100a")
