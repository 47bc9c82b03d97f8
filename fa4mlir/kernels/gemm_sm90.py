"""C = A . B^T on sm_90a (bf16/f16 in, f32 accumulate, bf16/f16 out): TMA ring + wgmma.

Roles (one CTA computes a BM x BN tile of C; 3 warpgroups):
    warpgroup 0  `load`  one elected thread of warp 0 streams A and B K-slices into an SMEM ring
                         of `stages` stages (TMA, 128B swizzle), completing on `ab_pipe.full`.
    warpgroups 1-2 `mma` each owns 64 rows of the tile: waits for a stage, issues BK/16 wgmma
                         m64nBNk16 from SMEM descriptors, keeps one wgmma group in flight, and
                         releases the previous stage once its group retired; then stores C.
Register budgets (setmaxnreg): load 40, mma 232 (40*128 + 232*256 <= 64K).
A is [M, K] and B is [N, K] (both K-major, row-major in memory); C is [M, N]. Ragged M, N, K are
handled by TMA zero fill on loads and predicated stores; K and N must be multiples of 8 (TMA needs
16-byte row strides).
"""
from __future__ import annotations

from dataclasses import dataclass

from .. import dsl
from ..dialect import builders as fa4
from ..dsl import ELEM_BYTES, KernelBuilder, Value, const
from .common.fields import ConfigError, check_fields
from .common.load_ring import load_ab_ring
from .common.wgmma import acc_pair, wait_group

SWIZZLE_BYTES = 128
WGMMA_K = 16


@dataclass(frozen=True)
class GemmConfig:
    dtype: str = "bf16"
    bm: int = 128
    bn: int = 256
    bk: int = 64
    stages: int = 4
    num_consumers: int = 2
    load_regs: int = 40
    mma_regs: int = 232

    def validate(self) -> "GemmConfig":
        """The config, checked: every field of its annotated type (ConfigTypeError), then every value
        (ConfigError, a ValueError)."""
        check_fields(self, {"dtype": ("bf16", "f16")})
        if self.dtype not in ("bf16", "f16"):
            raise ConfigError(f"GEMM dtype must be bf16 or f16, got {self.dtype!r}")
        if self.bm != 64 * self.num_consumers:
            raise ConfigError(f"bm must be 64 x num_consumers (each consumer warpgroup owns 64 rows); "
                              f"got bm={self.bm}, num_consumers={self.num_consumers}")
        if self.bk * ELEM_BYTES[self.dtype] != SWIZZLE_BYTES:
            raise ConfigError(f"bk must span one 128-byte swizzle row ({SWIZZLE_BYTES // ELEM_BYTES[self.dtype]} "
                              f"elements of {self.dtype}); got bk={self.bk}")
        if self.bn % 8 or not 8 <= self.bn <= 256:
            raise ConfigError(f"bn must be a multiple of 8 in [8, 256] (wgmma n); got {self.bn}")
        if self.stages < 2:
            raise ConfigError(f"need at least 2 pipeline stages, got {self.stages}")
        if any(r % 8 or not 24 <= r <= 256 for r in (self.load_regs, self.mma_regs)):
            raise ConfigError(f"setmaxnreg budgets are multiples of 8 in [24, 256], got load_regs={self.load_regs}, "
                              f"mma_regs={self.mma_regs}")
        threads = 128 * (1 + self.num_consumers)
        pool = 65536 // threads // 8 * 8 * threads     # the launch allocation setmaxnreg moves between roles
        if 128 * (self.load_regs + self.num_consumers * self.mma_regs) > pool:
            raise ConfigError(f"register budgets exceed the CTA's launch allocation of {pool} registers: 128 x "
                              f"{self.load_regs} + {128 * self.num_consumers} x {self.mma_regs}; setmaxnreg.inc "
                              f"would wait forever")
        return self

    def key(self) -> dict:
        return {"kernel": "gemm_sm90", **self.__dict__}


@dataclass(frozen=True)
class _Ring:
    """The A/B K-slice ring: its SMEM buffers, its pipeline and the bytes of one stage of each."""
    a_smem: Value
    b_smem: Value
    ab_pipe: dsl.Pipeline
    a_bytes: int
    b_bytes: int


@dataclass(frozen=True)
class _Tile:
    """This CTA's BM x BN tile of C (from row m0, column n0) and the problem size."""
    c_gmem: Value
    m0: Value
    n0: Value
    m_size: Value
    n_size: Value
    num_k_tiles: Value


def build(cfg: GemmConfig = GemmConfig()) -> dsl.KernelIR:
    cfg.validate()
    eb = ELEM_BYTES[cfg.dtype]
    a_tile_bytes, b_tile_bytes = cfg.bm * cfg.bk * eb, cfg.bn * cfg.bk * eb
    threads = 128 * (1 + cfg.num_consumers)
    name = f"gemm_sm90_{cfg.dtype}_{cfg.bm}x{cfg.bn}x{cfg.bk}_s{cfg.stages}"
    kb = KernelBuilder(name, arch="sm_90a", block=(threads, 1, 1), config=cfg.key())
    a_desc = kb.param_tma("a_desc", dtype=cfg.dtype, box=(cfg.bk, cfg.bm), swizzle="128B")
    b_desc = kb.param_tma("b_desc", dtype=cfg.dtype, box=(cfg.bk, cfg.bn), swizzle="128B")
    c_gmem = kb.param_ptr("c")
    m_size, n_size, k_size = kb.param_i32("m"), kb.param_i32("n"), kb.param_i32("k")

    with kb.body():
        a_smem = kb.smem("a_smem", cfg.stages * a_tile_bytes)
        b_smem = kb.smem("b_smem", cfg.stages * b_tile_bytes)
        ab_pipe = kb.pipeline("ab_pipe", num_stages=cfg.stages, producer="load", consumers=["mma"],
                              producer_arrivals=1, consumer_arrivals=cfg.num_consumers)
        kb.pipeline_init()
        m0 = kb.block_idx(1) * cfg.bm
        n0 = kb.block_idx(0) * cfg.bn
        num_k_tiles = (k_size + (cfg.bk - 1)) // cfg.bk
        ring = _Ring(a_smem, b_smem, ab_pipe, a_tile_bytes, b_tile_bytes)
        tile = _Tile(c_gmem, m0, n0, m_size, n_size, num_k_tiles)

        with kb.warp_roles():
            with kb.role("load", first_warp=0, num_warps=1, regs=cfg.load_regs):
                load_ab_ring(kb, cfg, ab_pipe, a_desc, b_desc, a_smem, b_smem, m0, n0, num_k_tiles,
                             a_tile_bytes, b_tile_bytes)
            with kb.role("mma", first_warp=4, num_warps=4 * cfg.num_consumers, regs=cfg.mma_regs):
                _mma_role(kb, cfg, ring, tile)
    return kb.finish()


def issue_mmas(kb, cfg, ring: _Ring, stage: Value, a_row_bytes: Value, acc: Value) -> Value:
    """acc += A[stage] B[stage]^T for this warpgroup's 64 rows (from a_row_bytes into the A stage):
    bk / 16 wgmma m64n{bn}k16 from SMEM descriptors, committed as one group."""
    true = const(1, "i1")
    a_base = kb.gep(ring.a_smem, stage * ring.a_bytes + a_row_bytes, "i8")
    b_base = kb.gep(ring.b_smem, stage * ring.b_bytes, "i8")
    sbo = 8 * SWIZZLE_BYTES  # 8 rows of one 128-byte swizzle atom
    kstep_bytes = WGMMA_K * ELEM_BYTES[cfg.dtype]
    fa4.mma_fence()
    for kk in range(cfg.bk // WGMMA_K):
        a_d = fa4.smem_desc(kb.gep(a_base, kk * kstep_bytes, "i8"), swizzle=128, lbo=16, sbo=sbo)
        b_d = fa4.smem_desc(kb.gep(b_base, kk * kstep_bytes, "i8"), swizzle=128, lbo=16, sbo=sbo)
        acc = Value(fa4.mma(a_d, b_d, true, [acc], result_types=[acc.type], m=64, n=cfg.bn, k=WGMMA_K,
                            a_source="smem", ab_dtype=cfg.dtype, acc_dtype="f32"))
    fa4.mma_commit_group()
    return acc


def _mma_role(kb, cfg, ring: _Ring, tile: _Tile):
    ab_pipe = ring.ab_pipe
    tid = kb.thread_idx(0)
    consumer = tid // 128 - 1              # 0 .. num_consumers-1
    a_row_bytes = consumer * (64 * cfg.bk * ELEM_BYTES[cfg.dtype])
    is_leader = (tid % 128).eq(0)         # one arrival per consumer warpgroup on empty[]
    acc = const(0.0, ("f32", cfg.bn // 2))
    s0 = ab_pipe.initial_state()
    # 1. first K tile: wait, issue, keep its group in flight
    ab_pipe.consumer_wait(s0)
    acc = issue_mmas(kb, cfg, ring, s0.stage, a_row_bytes, acc)
    loop = kb.for_(1, tile.num_k_tiles, 1, carry=(s0.advance(), s0.stage, acc))
    with loop as (_, (s, prev_stage, acc_in)):
        # 2. wait for K tile j, issue its wgmmas
        ab_pipe.consumer_wait(s)
        acc_j = issue_mmas(kb, cfg, ring, s.stage, a_row_bytes, acc_in)
        # 3. tile j-1's group has retired once at most one group is pending: free its stage
        acc_j = wait_group(acc_j, pending=1)
        with kb.if_(is_leader).then_():
            ab_pipe.consumer_release(dsl.PipeState(prev_stage, s.phase, cfg.stages))
        loop.yield_(s.advance(), s.stage, acc_j)
    _, last_stage, acc = loop.results
    acc = wait_group(acc, pending=0)
    with kb.if_(is_leader).then_():
        ab_pipe.consumer_release(dsl.PipeState(last_stage, const(0), cfg.stages))
    _store_c(kb, cfg, acc, tile, tile.m0 + consumer * 64, tid % 128)


def _store_c(kb, cfg, acc, tile: _Tile, row0, t):
    """Store the m64nBN accumulator fragment (common/wgmma.py: thread t holds rows
    16*(t/32) + (t%32)/4 (+8) and column pairs 8*j + 2*(t%4))."""
    warp, lane = t // 32, t % 32
    r_lo = row0 + warp * 16 + lane // 4
    c_base = tile.n0 + (lane % 4) * 2
    n64 = tile.n_size.to("i64")
    for j in range(cfg.bn // 8):
        col = c_base + j * 8
        col_ok = col.lt(tile.n_size)
        for half in (0, 1):
            row = r_lo + half * 8
            ok = row.lt(tile.m_size) & col_ok
            with kb.if_(ok).then_():
                i = acc_pair(j, half)
                pair = dsl.vec(acc[i], acc[i + 1]).to((cfg.dtype, 2))
                ptr = kb.gep(tile.c_gmem, row.to("i64") * n64 + col.to("i64"), cfg.dtype)
                kb.store(pair, ptr, align=4)
