# sm_100a .cta_group::2 TMA loads down to PTX: the probe kernel of tests/_pair_gather_probe.py (cluster
# 2 x 1 x 1; each CTA loads its A rows with fa4.tma_load and gathers its B rows with fa4.tma_gather4,
# both cta_group 2) lowered through every fa4 pass and the upstream conversions. Each copy is the
# .cta_group::2 form of cp.async.bulk.tensor (PTX ISA 9.7.9.25) completing on the pair leader's
# kv.full[stage]: the local barrier mapped by mapa.shared::cluster (9.7.9.26) to rank
# %cluster_ctarank & ~1 (lower_tma.py note "pair loads"); the pair commit (producer_commit cta_group
# 2) arrives with the pair's bytes (2 x (128 x 64 + 32 x 64) x 2 = 40960) in the leader only.
# RUN: %PYTHON %s | FileCheck %s
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests"))
from _pair_gather_probe import build  # noqa: E402
from fa4mlir import lowering  # noqa: E402

kernel = build(256, 64)
with kernel.module.context:
    ptx, _ = lowering.lower_module(kernel.module, "sm_100a")
print(ptx)

# CHECK: .target sm_100a
# CHECK-LABEL: .visible .entry pair_gather_probe_m256_n64(
# CHECK: mov.u32 %[[RANK:r[0-9]+]], %cluster_ctarank;
# CHECK: and.b32 %[[LEADER:r[0-9]+]], %[[RANK]], -2;
# CHECK: mapa.shared::cluster.u64 %[[BAR:rd[0-9]+]], %rd{{[0-9]+}}, %[[LEADER]];
# CHECK: cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.cta_group::2 [%rd{{[0-9]+}}], [%rd{{[0-9]+}}, {%r{{[0-9]+}}, %r{{[0-9]+}}}], [%[[BAR]]];
# CHECK-COUNT-8: cp.async.bulk.tensor.2d.shared::cluster.global.tile::gather4.mbarrier::complete_tx::bytes.cta_group::2 [%rd{{[0-9]+}}], [%rd{{[0-9]+}}, {%r{{[0-9]+}}, %r{{[0-9]+}}, %r{{[0-9]+}}, %r{{[0-9]+}}, %r{{[0-9]+}}}], [%[[BAR]]];
# CHECK: @%p{{[0-9]+}} bra
# CHECK: mov.b32 %[[TX:r[0-9]+]], 40960;
# CHECK-NEXT: mbarrier.arrive.expect_tx.shared.b64 %rd{{[0-9]+}}, [fa4_smem+{{[0-9]+}}], %[[TX]];
# CHECK: tcgen05.mma.cta_group::2.kind::f16
# CHECK: tcgen05.commit.cta_group::2.mbarrier::arrive::one.shared::cluster.multicast::cluster.b64
# CHECK-NOT: cta_group::1
# CHECK: ret;
