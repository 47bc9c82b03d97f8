# sm_100a TMA gather4 down to PTX: the probe kernel of tests/_gather4_probe.py (8 rows, two
# fa4.tma_gather4 of a 64-column x 1-row bf16 box) lowered through every fa4 pass and the upstream
# conversions. Each copy is the .2d .tile::gather4 form of cp.async.bulk.tensor (PTX ISA 9.7.9.25,
# 5.5.3.4): the column coordinate first, then the four row coordinates, completing on the one
# mbarrier of pipeline `rows` and reading the same descriptor and column.
# RUN: %PYTHON %s | FileCheck %s
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests"))
from _gather4_probe import build  # noqa: E402
from fa4mlir import lowering  # noqa: E402

kernel = build(8)
with kernel.module.context:
    ptx, _ = lowering.lower_module(kernel.module, "sm_100a")
print(ptx)

# CHECK: .target sm_100a
# CHECK-LABEL: .visible .entry tma_gather4_probe_r8_c64(
# CHECK: .param .align 64 .b8 tma_gather4_probe_r8_c64_param_0[128]
# CHECK: mov.b64 %[[MAP:rd[0-9]+]], tma_gather4_probe_r8_c64_param_0;
# CHECK: cvta.param.u64 %[[DESC:rd[0-9]+]], %[[MAP]];
# CHECK: cp.async.bulk.tensor.2d.shared::cluster.global.tile::gather4.mbarrier::complete_tx::bytes [%[[DST0:rd[0-9]+]]], [%[[DESC]], {%[[COL:r[0-9]+]], %r{{[0-9]+}}, %r{{[0-9]+}}, %r{{[0-9]+}}, %r{{[0-9]+}}}], [fa4_smem+[[BAR:[0-9]+]]];
# CHECK: cp.async.bulk.tensor.2d.shared::cluster.global.tile::gather4.mbarrier::complete_tx::bytes [%{{rd[0-9]+}}], [%[[DESC]], {%[[COL]], %r{{[0-9]+}}, %r{{[0-9]+}}, %r{{[0-9]+}}, %r{{[0-9]+}}}], [fa4_smem+[[BAR]]];
# CHECK-NOT: cp.async.bulk.tensor
# CHECK: ret;
