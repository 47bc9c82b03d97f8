"""C = A . B^T on sm_100a (bf16/f16 in, f32 accumulate in tensor memory, bf16/f16 out): TMA + tcgen05.

One CTA computes a BM x BN tile of C (BM = 128: one tcgen05.mma M=128 tile, row i in TMEM lane i).
Roles (8 warps; warps 2-3 idle):
    warp 0      `load`      one elected thread streams A and B K-slices into an SMEM ring of
                            `stages` stages (TMA, 128B swizzle), completing on `ab_pipe.full`.
    warp 1      `mma`       one elected thread waits for a stage, issues BK/16 tcgen05.mma
                            128 x BN x 16 from SMEM descriptors into the TMEM accumulator, and
                            commits to `ab_pipe.empty[stage]` (the stage is free once those MMAs
                            completed); after the last K tile it commits to `acc_pipe.full`.
    warps 4-7   `epilogue`  wait `acc_pipe.full`, read the accumulator (tcgen05.ld 32x32b: warp
                            4 + q reads TMEM lanes 32q..32q+31, i.e. rows m0 + 32q + lane), convert,
                            store C with predicates.
TMEM: warp 0 allocates `tmem_cols` columns (BN f32 columns, rounded up to a power of two >= 32)
before the roles start and frees them after every role finished (note "TMEM lifetime").
A is [M, K] and B is [N, K] (both K-major, row-major in memory); C is [M, N]. Ragged M, N, K are
handled by TMA zero fill on loads and predicated stores; K and N must be multiples of 8 (TMA needs
16-byte row strides) and K >= 1.

Note "TMEM lifetime": tcgen05.alloc is warp-wide and writes the TMEM address to SMEM; the other
warps may read it after a CTA barrier framed by tcgen05 fences (before_thread_sync on the writer
side, after_thread_sync on the reader side; PTX ISA 9.1 §9.7.16.6.4 "tcgen05.fence"). The same
framing orders the epilogue's last tcgen05.ld before warp 0's tcgen05.dealloc.
"""
from __future__ import annotations

from dataclasses import dataclass

from .. import dsl
from ..dialect import builders as fa4
from ..dsl import ELEM_BYTES, KernelBuilder, Value, const
from .common import tcgen05
from .common.constants import SM100_SMEM_PER_CTA
from .common.fields import ConfigError, check_fields
from .common.load_ring import load_ab_ring
from .common.tmem import tmem_alloc_columns

SWIZZLE_BYTES = 128
MMA_K = 16                 # K of one tcgen05.mma kind::f16
MMA_M = 128
EPI_COLS = 32              # TMEM columns each epilogue thread reads per tcgen05.ld (32x32b.x32)
STORE_ELEMS = 8            # elements of C per 16-byte store
SMEM_LIMIT = SM100_SMEM_PER_CTA  # fa4-plan-smem's sm_100a limit
ALLOC_WARP, LOAD_WARP, MMA_WARP, EPI_WARP = 0, 0, 1, 4
NUM_EPI_WARPS = 4


def tmem_columns(bn: int) -> int:
    """TMEM columns the BN f32 accumulator columns take (tcgen05.alloc: a power of two >= 32)."""
    return tmem_alloc_columns(bn)


@dataclass(frozen=True)
class GemmConfig:
    dtype: str = "bf16"
    bm: int = 128
    bn: int = 256
    bk: int = 64
    stages: int = 4

    def validate(self) -> "GemmConfig":
        """The config, checked: every field of its annotated type (ConfigTypeError), then every value
        (ConfigError, a ValueError)."""
        check_fields(self, {"dtype": ("bf16", "f16")})
        if self.dtype not in ("bf16", "f16"):
            raise ConfigError(f"GEMM dtype must be bf16 or f16, got {self.dtype!r}")
        if self.bm != MMA_M:
            raise ConfigError(f"bm must be {MMA_M} (one tcgen05.mma M={MMA_M} tile per CTA); got {self.bm}")
        if self.bk * ELEM_BYTES[self.dtype] != SWIZZLE_BYTES:
            raise ConfigError(f"bk must span one 128-byte swizzle row ({SWIZZLE_BYTES // ELEM_BYTES[self.dtype]} "
                              f"elements of {self.dtype}); got bk={self.bk}")
        if self.bn % EPI_COLS or not EPI_COLS <= self.bn <= 256:
            raise ConfigError(f"bn must be a multiple of {EPI_COLS} in [{EPI_COLS}, 256] (tcgen05.mma M=128 takes "
                              f"N <= 256; the epilogue reads {EPI_COLS} columns at a time); got {self.bn}")
        if self.stages < 2:
            raise ConfigError(f"need at least 2 pipeline stages, got {self.stages}")
        need = self.stages * (self.bm + self.bn) * self.bk * ELEM_BYTES[self.dtype]
        if need > SMEM_LIMIT:
            raise ConfigError(f"{self.stages} stages of {self.bm}x{self.bk} + {self.bn}x{self.bk} tiles need {need} "
                              f"bytes of SMEM, over the sm_100a limit of {SMEM_LIMIT}; use fewer stages")
        return self

    def key(self) -> dict:
        return {"kernel": "gemm_sm100", **self.__dict__}


@dataclass(frozen=True)
class _Ring:
    """The A/B K-slice ring: its SMEM buffers, its pipeline and the bytes of one stage of each."""
    a_smem: Value
    b_smem: Value
    ab_pipe: dsl.Pipeline
    a_bytes: int
    b_bytes: int


@dataclass(frozen=True)
class _Acc:
    """The f32 accumulator in TMEM (BN columns from `tmem`, row i in lane i) and `acc_pipe` (`pipe`),
    which hands it from the MMA thread to the epilogue."""
    tmem: Value
    pipe: dsl.Pipeline


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
    tmem_cols = tmem_columns(cfg.bn)
    threads = 32 * (EPI_WARP + NUM_EPI_WARPS)
    name = f"gemm_sm100_{cfg.dtype}_{cfg.bm}x{cfg.bn}x{cfg.bk}_s{cfg.stages}"
    kb = KernelBuilder(name, arch="sm_100a", block=(threads, 1, 1), config=cfg.key())
    a_desc = kb.param_tma("a_desc", dtype=cfg.dtype, box=(cfg.bk, cfg.bm), swizzle="128B")
    b_desc = kb.param_tma("b_desc", dtype=cfg.dtype, box=(cfg.bk, cfg.bn), swizzle="128B")
    c_gmem = kb.param_ptr("c")
    m_size, n_size, k_size = kb.param_i32("m"), kb.param_i32("n"), kb.param_i32("k")

    with kb.body():
        a_smem = kb.smem("a_smem", cfg.stages * a_tile_bytes)
        b_smem = kb.smem("b_smem", cfg.stages * b_tile_bytes)
        tmem_slot = kb.smem("tmem_slot", 4, align=16)
        ab_pipe = kb.pipeline("ab_pipe", num_stages=cfg.stages, producer="load", consumers=["mma"],
                              producer_arrivals=1, consumer_arrivals=1)
        acc_pipe = kb.pipeline("acc_pipe", num_stages=1, producer="mma", consumers=["epilogue"],
                               producer_arrivals=1, consumer_arrivals=32 * NUM_EPI_WARPS)
        warp = kb.thread_idx(0) // 32
        # 1. warp 0 allocates the accumulator's TMEM columns (address -> tmem_slot)
        with kb.if_(warp.eq(ALLOC_WARP)).then_():
            fa4.tmem_alloc(tmem_slot, cols=tmem_cols)
            fa4.tmem_relinquish()
        kb.pipeline_init()
        # 2. publish the TMEM address to every warp (note "TMEM lifetime")
        kb.fence("tcgen05_before")
        kb.sync_threads()
        kb.fence("tcgen05_after")
        acc = _Acc(kb.load(tmem_slot, "i32"), acc_pipe)
        m0 = kb.block_idx(1) * cfg.bm
        n0 = kb.block_idx(0) * cfg.bn
        num_k_tiles = (k_size + (cfg.bk - 1)) // cfg.bk
        ring = _Ring(a_smem, b_smem, ab_pipe, a_tile_bytes, b_tile_bytes)
        tile = _Tile(c_gmem, m0, n0, m_size, n_size, num_k_tiles)

        with kb.warp_roles():
            with kb.role("load", first_warp=LOAD_WARP, num_warps=1):
                load_ab_ring(kb, cfg, ab_pipe, a_desc, b_desc, a_smem, b_smem, m0, n0, num_k_tiles,
                             a_tile_bytes, b_tile_bytes)
            with kb.role("mma", first_warp=MMA_WARP, num_warps=1):
                _mma_role(kb, cfg, ring, acc, num_k_tiles)
            with kb.role("epilogue", first_warp=EPI_WARP, num_warps=NUM_EPI_WARPS):
                _epilogue_role(kb, cfg, acc, tile)
        # 3. every role is done (the epilogue waited for its TMEM loads): warp 0 frees the columns
        kb.fence("tcgen05_before")
        kb.sync_threads()
        with kb.if_(warp.eq(ALLOC_WARP)).then_():
            kb.fence("tcgen05_after")
            fa4.tmem_dealloc(acc.tmem, cols=tmem_cols)
    return kb.finish()


def _mma_role(kb, cfg, ring: _Ring, acc: _Acc, num_k_tiles: Value):
    sbo = 8 * SWIZZLE_BYTES              # 8 rows of one 128-byte swizzle atom
    kstep_bytes = MMA_K * ELEM_BYTES[cfg.dtype]
    ab_pipe = ring.ab_pipe
    with kb.if_(kb.elect_one()).then_():
        loop = kb.for_(0, num_k_tiles, 1, carry=ab_pipe.initial_state())
        with loop as (kt, s):
            # 1. wait for K tile kt
            ab_pipe.consumer_wait(s)
            # 2. issue its BK/16 MMAs; the first MMA of the tile overwrites D (enable-input-d = 0)
            a_base = kb.gep(ring.a_smem, s.stage * ring.a_bytes, "i8")
            b_base = kb.gep(ring.b_smem, s.stage * ring.b_bytes, "i8")
            for kk in range(cfg.bk // MMA_K):
                a_d = fa4.smem_desc(kb.gep(a_base, kk * kstep_bytes, "i8"), swizzle=SWIZZLE_BYTES, lbo=16, sbo=sbo)
                b_d = fa4.smem_desc(kb.gep(b_base, kk * kstep_bytes, "i8"), swizzle=SWIZZLE_BYTES, lbo=16, sbo=sbo)
                accumulate = kt.ne(0) if kk == 0 else const(1, "i1")
                tcgen05.mma(a_d, b_d, accumulate, acc.tmem, m=cfg.bm, n=cfg.bn, k=MMA_K, ab_dtype=cfg.dtype)
            # 3. free the stage once these MMAs completed
            ab_pipe.mma_commit(s, side="empty")
            loop.yield_(s.advance())
        # 4. the accumulator is complete once every MMA issued so far completed (acquire: the
        #    epilogue is done with the previous use of the accumulator; never blocks on one tile)
        acc_state = acc.pipe.initial_state()
        acc.pipe.producer_acquire(acc_state)
        acc.pipe.mma_commit(acc_state, side="full")


def _epilogue_role(kb, cfg, acc: _Acc, tile: _Tile):
    t = kb.thread_idx(0) - 32 * EPI_WARP
    quarter = t // 32                    # TMEM lanes 32*quarter .. +31 belong to this warp
    row = tile.m0 + t
    row_ok = row.lt(tile.m_size)
    lane_addr = acc.tmem + ((quarter * 32) << 16)   # TMEM address: lane in bits 31-16, column in 15-0
    row_ptr = kb.gep(tile.c_gmem, row.to("i64") * tile.n_size.to("i64"), cfg.dtype)
    s0 = acc.pipe.initial_state()
    # 1. wait until the MMA warp committed the finished accumulator
    acc.pipe.consumer_wait(s0)
    kb.fence("tcgen05_after")
    for chunk in range(cfg.bn // EPI_COLS):
        # 2. read 32 f32 columns of this thread's row, wait for the load
        bits = tcgen05.tmem_load(lane_addr + chunk * EPI_COLS, EPI_COLS)
        fa4.tmem_wait(kind="ld")
        acc_f32 = bits.bitcast(("f32", EPI_COLS))
        # 3. convert and store 16-byte groups (N is a multiple of 8: a group is all in or all out)
        for g in range(EPI_COLS // STORE_ELEMS):
            col = tile.n0 + (chunk * EPI_COLS + g * STORE_ELEMS)
            with kb.if_(row_ok & col.lt(tile.n_size)).then_():
                group = [acc_f32[g * STORE_ELEMS + i] for i in range(STORE_ELEMS)]
                vals = dsl.vec(*group).to((cfg.dtype, STORE_ELEMS))
                kb.store(vals, kb.gep(row_ptr, col.to("i64"), cfg.dtype), align=16)
    # 4. hand the accumulator back (a multi-tile schedule would reuse it after this)
    acc.pipe.consumer_release(s0)
