# fa4.tmem_copy down to PTX: tcgen05.cp (PTX ISA 9.1, tcgen05.cp) in every shape and multicast form
# fa4-lower-tmem takes, for one CTA (cta_group::1) and for a CTA pair (cta_group::2, FlashMLA's
# 64x128b.warpx2::02_13 that puts Q into TMEM). A kernel uses one cta_group for all its tcgen05 ops.
# RUN: %PYTHON %s | FileCheck %s
from fa4mlir import lowering
from fa4mlir.dialect import builders as fa4
from fa4mlir.dsl import KernelBuilder

FORMS = [("128x256b", None), ("4x256b", None), ("128x128b", None), ("64x128b", "warpx2::02_13"),
         ("64x128b", "warpx2::01_23"), ("32x128b", "warpx4")]


def build(group: int):
    kb = KernelBuilder(f"tmem_copy_g{group}", arch="sm_100a", block=(32, 1, 1), cluster=(group, 1, 1))
    with kb.body():
        src = kb.smem("src", 128 * 32, align=1024)
        slot = kb.smem("tmem_slot", 16, align=16)
        fa4.tmem_alloc(slot, cols=32, cta_group=group)
        kb.fence("tcgen05_before")
        kb.sync_threads()
        kb.fence("tcgen05_after")
        tmem = kb.load(slot, "i32")
        desc = fa4.smem_desc(src, swizzle=128, lbo=16, sbo=1024)
        for shape, multicast in FORMS if group == 1 else FORMS[3:4]:
            extra = {"multicast": multicast} if multicast else {}
            fa4.tmem_copy(tmem, desc, shape=shape, cta_group=group, **extra)
        fa4.tmem_relinquish(cta_group=group)
        fa4.tmem_dealloc(tmem, cols=32, cta_group=group)
    return kb.finish()


for group in (1, 2):
    kernel = build(group)
    with kernel.module.context:
        ptx, _ = lowering.lower_module(kernel.module, "sm_100a")
    print(ptx)

# CHECK-LABEL: .visible .entry tmem_copy_g1(
# CHECK: tcgen05.cp.cta_group::1.128x256b [%r{{[0-9]+}}], %rd{{[0-9]+}};
# CHECK: tcgen05.cp.cta_group::1.4x256b [%r{{[0-9]+}}], %rd{{[0-9]+}};
# CHECK: tcgen05.cp.cta_group::1.128x128b [%r{{[0-9]+}}], %rd{{[0-9]+}};
# CHECK: tcgen05.cp.cta_group::1.64x128b.warpx2::02_13 [%r{{[0-9]+}}], %rd{{[0-9]+}};
# CHECK: tcgen05.cp.cta_group::1.64x128b.warpx2::01_23 [%r{{[0-9]+}}], %rd{{[0-9]+}};
# CHECK: tcgen05.cp.cta_group::1.32x128b.warpx4 [%r{{[0-9]+}}], %rd{{[0-9]+}};
# CHECK-LABEL: .visible .entry tmem_copy_g2(
# CHECK: tcgen05.cp.cta_group::2.64x128b.warpx2::02_13 [%r{{[0-9]+}}], %rd{{[0-9]+}};
# CHECK-NOT: cta_group::1
# CHECK: ret;
