"""tcgen05.cp (PTX ISA 9.7.16.9.2): an asynchronous copy of a matrix in shared memory, described by a
matrix descriptor `s-desc` (9.7.16.4.1), into tensor memory at `taddr`.

The ISA states the shape as "lane x size" (9.7.16.2.3 "Data Movement Shape": lanes of TMEM, bits
across its columns) and draws the lanes of each form in figures; what this model reads (note "cp
shapes"; the multicast forms copy the source's rows to several warps' lane quarters, as the
qualifiers name them):

    shape                  source rows  lanes that get source row r (TMEM lane base 0)     columns
    128x256b               128          r                                                   8
    128x128b               128          r                                                   4
    64x128b.warpx2::02_13  64           r % 32 + 32 (r // 32) and that + 64 (warps 0,2 | 1,3)  4
    64x128b.warpx2::01_23  64           r % 32 + 64 (r // 32) and that + 32 (warps 0,1 | 2,3)  4
    32x128b.warpx4         32           r + 32 w for each warp quarter w                   4

Each source row is size / 16 16-bit elements (16 for 256b, 8 for 128b) read through the descriptor
exactly as a K-major MMA operand of that many rows and K = size / 16 (tcgen05.smem_operand_addresses:
its swizzle, LBO and SBO; a start address advanced within a swizzle atom as for the MMA's K steps),
and lands in TMEM columns [col, col + size / 32), element pairs packed low half first, as the MMA
reads an A operand from TMEM. FlashMLA's sm_100 sparse prefill copies Q's 64-row tiles this way
(64x128b.warpx2::02_13, one 8-column slice of a 128B-swizzled tile per copy, the descriptor start
advanced 16 bytes and the TMEM column 4 per slice) and then reads them as the A operand of its M = 128
pair MMA (Layout B: each row in both lane halves, ops/pair.py note "pair layouts").

`.cta_group::2`: "the number of CTAs whose Tensor Memory is accessed when a single thread of a single
CTA executes" it (9.7.16.9.2) is the pair; each CTA's TMEM gets the rows of its own shared memory at
the descriptor (the pair's MMA reads its operands the same way), issued by the leader in this model.
The copy runs on the issuing CTA's tensor-core queue in issue order with its MMAs (a later MMA sees
it; tcgen05.commit tracks it), reading SMEM through the async proxy and writing TMEM as the tensor
core, both checked for happens-before. 4x256b and the .b8x16 decompressing formats are Unsupported.
"""
from __future__ import annotations

import numpy as np

from ..faults import Fault, TmemFault, Unsupported
from ..machine import SMEM_BASE
from ..program import PLAIN
from . import pair, semantics

WARP_LANES = 32
# (shape, multicast) -> (source rows, 16-bit elements a row, lanes of source row r)
SHAPES = {
    ("128x256b", ""): (128, 16, lambda r: [r]),
    ("128x128b", ""): (128, 8, lambda r: [r]),
    ("64x128b", "warpx2_02_13"): (64, 8, lambda r: [r, r + 64]),
    ("64x128b", "warpx2_01_23"): (64, 8, lambda r: [r % 32 + 64 * (r // 32), r % 32 + 64 * (r // 32) + 32]),
    ("32x128b", "warpx4"): (32, 8, lambda r: [r + WARP_LANES * w for w in range(4)]),
}


def _inner(attr) -> str:
    text = str(attr)                       # #nvvm.tcgen05_cp_shape<shape_64x128b>
    return text[text.index("<") + 1:text.rindex(">")]


def copy_form(op) -> tuple[str, str]:
    """(shape, multicast) of an nvvm.tcgen05.cp, e.g. ("64x128b", "warpx2_02_13")."""
    shape = _inner(op.attributes["shape"]).removeprefix("shape_")
    multicast = _inner(op.attributes["multicast"]) if "multicast" in op.attributes else ""
    return shape, "" if multicast == "none" else multicast


def execute_copy(cta, t_addr: int, desc: int, form, vc, agent: int) -> None:
    """One tcgen05.cp of `form` into CTA `cta`'s TMEM at `t_addr` from its SMEM at `desc`."""
    from .tcgen05 import smem_operand_addresses, tmem_cells
    rows, k, lanes_of = SHAPES[form]
    lane0, col = (t_addr >> 16) & 0xFFFF, t_addr & 0xFFFF
    if lane0:
        raise TmemFault(f"tcgen05.cp.{form[0]} at TMEM lane {lane0}: this model takes lane 0")
    width = k // 2
    if col + width > cta.tmem_cols:
        raise TmemFault(f"tcgen05.cp.{form[0]} at TMEM column {col} (+{width}) outside CTA rank {cta.rank}'s "
                        f"allocation of {cta.tmem_cols} columns")
    addrs = smem_operand_addresses(desc, rows, k, False)
    if addrs.min() < SMEM_BASE or addrs.max() + 2 > cta.smem.size:
        raise Fault(f"tcgen05.cp source (descriptor {desc:#018x}) reaches outside shared memory")
    what = f"tcgen05.cp.{form[0]} of CTA rank {cta.rank}"
    index = np.stack([addrs, addrs + 1])
    cta.hb.check_async_proxy_read(index, what + " (SMEM)")
    cta.hb.access(cta.hb.smem, index, vc, agent, False, what + " (SMEM)")
    halves = (cta.smem[addrs].astype(np.uint32) | (cta.smem[addrs + 1].astype(np.uint32) << 8))
    words = halves[:, 0::2] | (halves[:, 1::2] << 16)                      # rows x width, low half first
    lanes = np.array([lanes_of(r) for r in range(rows)])                  # rows x copies
    cells = tmem_cells(lanes.reshape(-1), col, width)
    cta.hb.access(cta.hb.tmem, cells, vc, agent, True, what + " (TMEM)")
    cta.tmem[cells] = np.repeat(words, lanes.shape[1], axis=0)
    cta.stats["tmem_copy"] += 1


@semantics("nvvm.tcgen05.cp")
def tmem_copy(p, op, a, r):
    form = copy_form(op)
    if form not in SHAPES:
        raise Unsupported(f"tcgen05.cp.{form[0]}{'.' + form[1] if form[1] else ''}: modelled are "
                          f"{', '.join(s + ('.' + m if m else '') for s, m in SHAPES)}")
    if "srcFormat" in op.attributes or "src_format" in op.attributes:
        raise Unsupported("tcgen05.cp with a decompressing source format (.b6x16_p32 / .b4x16_p64)")
    two = "cta_2" in str(op.attributes["group"]) if "group" in op.attributes else False
    taddr, sdesc = a[0], a[1]

    def run(env, mask, w):
        cta = w.cta
        if two:
            pair.check_leader(w, "tcgen05.cp.cta_group::2")
            ctas = pair.pair(w)
        else:
            ctas = (cta,)
        for lane in np.nonzero(mask)[0]:
            t_addr, desc = int(env[taddr][lane]), int(env[sdesc][lane]) & (2**64 - 1)
            for c in ctas:
                if not c.tmem_cols:
                    raise w.fault(TmemFault, f"tcgen05.cp with no tensor memory allocated in CTA rank {c.rank}")
            issued = cta.hb.issue(w.wid)

            def job(t_addr=t_addr, desc=desc, issued=issued):
                hb = cta.hb
                np.maximum(hb.mma_vc, hb.stamp_async(hb.MMA, issued), out=hb.mma_vc)   # in issue order
                try:
                    for c in ctas:
                        execute_copy(c, t_addr, desc, form, hb.mma_vc, hb.MMA)
                except Fault as exc:
                    raise exc.add_context(warp=w.wid, role=w.role, op="tcgen05.cp (executing)")
            cta.mma_queue.append(job)
    return PLAIN, run


__all__ = ["SHAPES", "copy_form", "execute_copy"]
