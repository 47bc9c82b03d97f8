# sm_100a CTA pair down to PTX: the probe kernel of tests/_pair_probe.py (cluster 2 x 1 x 1, one
# m256 n64 k16 MMA over the pair) lowered through every fa4 pass and the upstream conversions. Each
# 2-CTA form is the PTX ISA's (9.7.16.7.1 alloc/relinquish/dealloc, 9.7.16.10.9 mma, 9.7.16.11.1
# commit with multicast, 9.7.9.26 mapa, 9.7.13.4 barrier.cluster).
# RUN: %PYTHON %s | FileCheck %s
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests"))
from _pair_probe import build  # noqa: E402
from fa4mlir import lowering  # noqa: E402

kernel = build(64)
with kernel.module.context:
    ptx, _ = lowering.lower_module(kernel.module, "sm_100a")
print(ptx)

# CHECK: .target sm_100a
# CHECK-LABEL: .visible .entry cta_pair_probe_n64(
# CHECK: tcgen05.alloc.cta_group::2.sync.aligned.shared::cta.b32 [fa4_smem+{{[0-9]+}}], %r{{[0-9]+}};
# CHECK: tcgen05.relinquish_alloc_permit.cta_group::2.sync.aligned;
# CHECK: mov.u32 %[[RANK:r[0-9]+]], %cluster_ctarank;
# CHECK: barrier.cluster.arrive.aligned;
# CHECK-NEXT: barrier.cluster.wait.aligned;
# CHECK: mapa.shared::cluster.u64 %[[REMOTE:rd[0-9]+]], %rd{{[0-9]+}}, 0;
# CHECK: mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%[[REMOTE]]]
# The pair's instruction descriptor: bf16 -> f32, M = 256, N = 64: 0x10100490 = 269485200.
# CHECK: mov.b32 %[[IDESC:r[0-9]+]], 269485200;
# CHECK: tcgen05.mma.cta_group::2.kind::f16{{.*}} [%r{{[0-9]+}}], %rd{{[0-9]+}}, %rd{{[0-9+]+}}, %[[IDESC]], %p{{[0-9]+}};
# CHECK: mov.b16 %[[MASK:rs[0-9]+]], 3;
# CHECK-NEXT: tcgen05.commit.cta_group::2.mbarrier::arrive::one.shared::cluster.multicast::cluster.b64 [fa4_smem+{{[0-9]+}}], %[[MASK]];
# CHECK: barrier.cluster.arrive.aligned;
# CHECK-NEXT: barrier.cluster.wait.aligned;
# CHECK: tcgen05.dealloc.cta_group::2.sync.aligned.b32 %r{{[0-9]+}}, %r{{[0-9]+}};
# CHECK-NOT: cta_group::1
# CHECK: ret;
