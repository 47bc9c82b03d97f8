"""GPU tests of fa4mlir.runtime with small hand-written PTX kernels (no compiler needed).

The driver JIT-compiles PTX passed to cuModuleLoadData, so each artefact's ``cubin`` here holds
PTX text. The kernels check scalar packing, cluster launch + >48 KiB dynamic SMEM, and TMA
descriptor encoding (dims order, strides, swizzle, OOB fill) end to end.
"""

import pytest

from fa4mlir import runtime
from fa4mlir.runtime import Bundle, CudaError, KernelArtifact, ParamSpec, TmaSpec, load, write_bundle

pytestmark = pytest.mark.gpu

PTX = r"""
.version 8.0
.target sm_90a
.address_size 64

.extern .shared .align 16 .b8 dsmem[];

.visible .entry scalars(.param .u64 out, .param .u32 n, .param .f32 scale, .param .s64 bias)
{
  .reg .pred %p;
  .reg .b32 %r<4>;
  .reg .b64 %rd<6>;
  .reg .f32 %f<4>;
  ld.param.u64 %rd1, [out];
  ld.param.u32 %r1, [n];
  ld.param.f32 %f1, [scale];
  ld.param.s64 %rd2, [bias];
  mov.u32 %r2, %tid.x;
  setp.ge.u32 %p, %r2, %r1;
  @%p bra DONE;
  cvt.rn.f32.u32 %f2, %r2;
  mul.f32 %f2, %f2, %f1;
  cvt.rn.f32.s64 %f3, %rd2;
  add.f32 %f2, %f2, %f3;
  cvta.to.global.u64 %rd3, %rd1;
  mul.wide.u32 %rd4, %r2, 4;
  add.u64 %rd5, %rd3, %rd4;
  st.global.f32 [%rd5], %f2;
DONE:
  ret;
}

.visible .entry cluster_smem(.param .u64 out, .param .u32 last)
{
  .reg .pred %p;
  .reg .b32 %r<10>;
  .reg .b64 %rd<8>;
  mov.u32 %r1, %tid.x;
  setp.ne.u32 %p, %r1, 0;
  @%p bra DONE;
  mov.u32 %r2, %ctaid.x;
  mov.u32 %r3, %cluster_ctarank;
  mov.u32 %r4, %clusterid.x;
  mov.u32 %r5, %cluster_nctarank;
  ld.param.u32 %r6, [last];
  mov.u64 %rd1, dsmem;
  cvt.u64.u32 %rd2, %r6;
  add.u64 %rd1, %rd1, %rd2;
  add.u32 %r7, %r2, 1000;
  st.volatile.shared.u32 [%rd1], %r7;
  ld.volatile.shared.u32 %r8, [%rd1];
  ld.param.u64 %rd3, [out];
  cvta.to.global.u64 %rd3, %rd3;
  mul.wide.u32 %rd4, %r2, 16;
  add.u64 %rd3, %rd3, %rd4;
  st.global.v4.u32 [%rd3], {%r3, %r4, %r5, %r8};
DONE:
  ret;
}

.visible .entry tma_copy(.param .align 64 .b8 desc[128], .param .u64 out, .param .u32 c0, .param .u32 c1)
{
  .reg .pred %p;
  .reg .b32 %r<10>;
  .reg .b64 %rd<10>;
  .shared .align 1024 .b8 tile[4096];
  .shared .align 8 .b64 bar;
  ld.param.u64 %rd1, [out];
  cvta.to.global.u64 %rd1, %rd1;
  ld.param.u32 %r1, [c0];
  ld.param.u32 %r2, [c1];
  mov.u32 %r3, %tid.x;
  setp.ne.u32 %p, %r3, 0;
  @%p bra SYNC;
  mbarrier.init.shared::cta.b64 [bar], 1;
  fence.proxy.async.shared::cta;
  mbarrier.arrive.expect_tx.shared::cta.b64 _, [bar], 4096;
  mov.u64 %rd5, desc;
  cvta.param.u64 %rd6, %rd5;
  cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [tile], [%rd6, {%r1, %r2}], [bar];
SYNC:
  bar.sync 0;
WAIT:
  mbarrier.try_wait.parity.shared::cta.b64 %p, [bar], 0;
  @!%p bra WAIT;
  mov.u32 %r4, %r3;
COPY:
  mul.wide.u32 %rd2, %r4, 4;
  mov.u64 %rd3, tile;
  add.u64 %rd3, %rd3, %rd2;
  ld.shared.u32 %r5, [%rd3];
  add.u64 %rd4, %rd1, %rd2;
  st.global.u32 [%rd4], %r5;
  add.u32 %r4, %r4, 128;
  setp.lt.u32 %p, %r4, 1024;
  @%p bra COPY;
  ret;
}
"""

BIG_SMEM_BYTES = 100 * 1024
TILE_ROWS, TILE_COLS = 32, 64  # the tma_copy box, f16: 4096 bytes


def artifact(name, params, block=(128, 1, 1), cluster=(1, 1, 1), smem_bytes=0):
    return KernelArtifact(name=name, arch="sm_90a", cubin=PTX.encode(), block=block, cluster=cluster,
                          smem_bytes=smem_bytes, params=tuple(params), key=f"{name}".ljust(32, "0"))


SCALARS = artifact("scalars", [ParamSpec("out", "ptr"), ParamSpec("n", "i32"), ParamSpec("scale", "f32"),
                               ParamSpec("bias", "i64")])
CLUSTER_SMEM = artifact("cluster_smem", [ParamSpec("out", "ptr"), ParamSpec("last", "i32")],
                        cluster=(2, 1, 1), smem_bytes=BIG_SMEM_BYTES)


def tma_artifact(swizzle):
    spec = TmaSpec("f16", box=(TILE_COLS, TILE_ROWS), swizzle=swizzle, oob_fill="zero")
    return artifact("tma_copy", [ParamSpec("x_desc", "tma", spec), ParamSpec("out", "ptr"),
                                 ParamSpec("c0", "i32"), ParamSpec("c1", "i32")])


@pytest.fixture(scope="module")
def torch(require_arch):
    require_arch(9)
    torch = pytest.importorskip("torch")
    torch.zeros(1, device="cuda")  # initialise torch's context first: the runtime shares it
    return torch


def test_scalar_params_through_a_bundle(torch, tmp_path):
    kernel = load(Bundle.open(write_bundle(tmp_path, [SCALARS])).find(name="scalars"))
    out = torch.zeros(128, dtype=torch.float32, device="cuda")
    kernel.launch(1, [out, 100, 0.5, -3])
    torch.cuda.synchronize()
    want = torch.arange(128, dtype=torch.float32, device="cuda") * 0.5 - 3
    want[100:] = 0
    assert torch.equal(out, want)


def test_cluster_launch_and_large_dynamic_smem(torch):
    kernel = runtime.load(CLUSTER_SMEM)
    out = torch.zeros((4, 4), dtype=torch.int32, device="cuda")
    kernel.launch((4, 1, 1), [out, BIG_SMEM_BYTES - 4], stream=torch.cuda.current_stream())
    torch.cuda.synchronize()
    cta = torch.arange(4, device="cuda", dtype=torch.int32)
    want = torch.stack([cta % 2, cta // 2, torch.full_like(cta, 2), cta + 1000], dim=1)
    assert torch.equal(out, want), out


def unswizzle_128b(tile):
    """Undo the 128B swizzle of a (rows, 64) f16 tile: 16-byte chunk j of row r sits at j ^ (r % 8)."""
    rows = tile.shape[0]
    chunks = tile.reshape(rows, 8, 8)
    out = chunks.clone()
    for r in range(rows):
        for j in range(8):
            out[r, j] = chunks[r, j ^ (r % 8)]
    return out.reshape(rows, 64)


class CaiOnly:
    """Exposes a tensor only through __cuda_array_interface__."""

    def __init__(self, t):
        self.__cuda_array_interface__ = t.__cuda_array_interface__


class DlpackOnly:
    """Exposes a tensor only through __dlpack__."""

    def __init__(self, t):
        self.t = t

    def __dlpack__(self, stream=None):
        return self.t.__dlpack__()

    def __dlpack_device__(self):
        return self.t.__dlpack_device__()


@pytest.mark.parametrize("wrap", [lambda t: t, CaiOnly, DlpackOnly], ids=["torch", "cai", "dlpack"])
@pytest.mark.parametrize("swizzle", ["none", "128B"])
@pytest.mark.parametrize("c0, c1", [(8, 16), (160, 80)])  # the second box runs past both edges
def test_tma_descriptor_loads_the_right_box(torch, swizzle, c0, c1, wrap):
    kernel = runtime.load(tma_artifact(swizzle))
    storage = torch.randn((100, 256), device="cuda").to(torch.float16)
    x = storage[:, :200]  # row stride 512 bytes, not the row length: checks the stride encoding
    out = torch.empty((TILE_ROWS, TILE_COLS), dtype=torch.float16, device="cuda")
    torch.cuda.synchronize()
    kernel.launch(1, [wrap(x), wrap(out), c0, c1])
    torch.cuda.synchronize()
    got = unswizzle_128b(out) if swizzle == "128B" else out
    want = torch.zeros_like(out)
    part = x[c1:c1 + TILE_ROWS, c0:c0 + TILE_COLS]
    want[:part.shape[0], :part.shape[1]] = part
    assert torch.equal(got, want)


def test_misaligned_tensor_is_rejected_before_launch(torch):
    kernel = runtime.load(tma_artifact("none"))
    x = torch.zeros((64, 200), dtype=torch.float16, device="cuda")
    out = torch.empty((TILE_ROWS, TILE_COLS), dtype=torch.float16, device="cuda")
    with pytest.raises(ValueError, match="16-byte aligned"):
        kernel.launch(1, [x[:, 1:], out, 0, 0])


def test_bad_launch_raises_cuda_error(torch):
    kernel = runtime.load(artifact("scalars", SCALARS.params, block=(4096, 1, 1)))
    out = torch.zeros(128, dtype=torch.float32, device="cuda")
    with pytest.raises(CudaError) as info:
        kernel.launch(1, [out, 1, 1.0, 0])
    assert info.value.kernel == "scalars" and info.value.call == "cuLaunchKernel"
    assert info.value.error_name.startswith("CUDA_ERROR_")
