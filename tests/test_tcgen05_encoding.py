"""tcgen05 descriptor encodings vs the PTX ISA tables (PTX ISA 9.1, §9.7.16.4 "Matrix Descriptors").

* §9.7.16.4.1 "Shared memory descriptor": 0-13 start >> 4, 16-29 LBO >> 4, 32-45 SBO >> 4, 46-48
  fixed 0b001, 49-51 base offset, 52 LBO mode, 53-60 fixed 0, 61-63 swizzle (0 none, 1 128B with
  32B atom, 2 128B, 4 64B, 6 32B).
* §9.7.16.4.2 "Instruction descriptor", table for .kind::tf32/.kind::f16/.kind::f8f6f4/.kind::i8,
  .kind::f16 column: 0-1 sparsity selector, 2 sparsity, 3 saturate, 4-5 dtype (F16 0, F32 1), 6
  reserved, 7-9 atype and 10-12 btype (F16 0, BF16 1), 13/14 negate A/B, 15/16 transpose A/B
  (0 = K-major), 17-22 N >> 3, 23 reserved, 24-28 M >> 4, 29 reserved, 30-31 max shift (.ws only).
Each test reads fields back with `bits(value, lo, width)` and compares them to the table.
"""
import pytest

from fa4mlir.passes.lower_mma_sm100 import instr_desc, smem_desc, smem_desc_fields


def bits(value: int, lo: int, width: int) -> int:
    return (value >> lo) & ((1 << width) - 1)


# ---- shared memory descriptor (§9.7.16.4.1) ---------------------------------------------------------
@pytest.mark.parametrize("swizzle,code", [(0, 0), (128, 2), (64, 4), (32, 6)])
def test_smem_desc_swizzle_codes(swizzle, code):
    d = smem_desc_fields(swizzle=swizzle, lbo=16, sbo=1024)
    assert bits(d, 61, 3) == code


def test_smem_desc_fields_k_major_sw128():
    addr = 0x1C400  # 1024-aligned tile + 2 K steps of 32 bytes: 0x1C400 + 64
    d = smem_desc(addr + 64, swizzle=128, lbo=16, sbo=1024)
    assert bits(d, 0, 14) == (addr + 64) >> 4          # start address >> 4
    assert bits(d, 14, 2) == 0
    assert bits(d, 16, 14) == 16 >> 4                  # LBO >> 4
    assert bits(d, 30, 2) == 0
    assert bits(d, 32, 14) == 1024 >> 4                # SBO >> 4: 8 rows x 128 B
    assert bits(d, 46, 3) == 0b001                     # fixed constant (descriptor version)
    assert bits(d, 49, 3) == 0                         # base offset: 1024-aligned tiles
    assert bits(d, 52, 1) == 0                         # LBO mode: relative byte offset
    assert bits(d, 53, 8) == 0                         # fixed 0
    assert bits(d, 61, 3) == 2                         # 128B swizzle
    assert d == 0x4000404000010000 | ((addr + 64) >> 4)


def test_smem_desc_start_address_wraps_14_bits():
    # the field holds address bits 4..17 (SMEM addresses < 256 KiB)
    assert bits(smem_desc(0x3FFF0, swizzle=0, lbo=16, sbo=128), 0, 14) == 0x3FFF
    assert bits(smem_desc(0x40000, swizzle=0, lbo=16, sbo=128), 0, 14) == 0


def test_smem_desc_rejects_bad_input():
    with pytest.raises(ValueError, match="swizzle must be one of"):
        smem_desc_fields(swizzle=256, lbo=16, sbo=1024)
    with pytest.raises(ValueError, match="multiples of 16"):
        smem_desc_fields(swizzle=128, lbo=8, sbo=1024)
    with pytest.raises(ValueError, match="does not fit"):
        smem_desc_fields(swizzle=128, lbo=16, sbo=1 << 18)
    with pytest.raises(ValueError, match="16-byte aligned"):
        smem_desc(0x1008, swizzle=128, lbo=16, sbo=1024)


# ---- instruction descriptor (§9.7.16.4.2, .kind::f16) -----------------------------------------------
def test_instr_desc_bf16_f32_128x256_every_field():
    d = instr_desc(m=128, n=256, ab_dtype="bf16", acc_dtype="f32")
    assert bits(d, 0, 2) == 0        # sparsity selector
    assert bits(d, 2, 1) == 0        # dense
    assert bits(d, 3, 1) == 0        # saturate (integer only)
    assert bits(d, 4, 2) == 1        # dtype F32
    assert bits(d, 6, 1) == 0        # reserved
    assert bits(d, 7, 3) == 1        # atype BF16
    assert bits(d, 10, 3) == 1       # btype BF16
    assert bits(d, 13, 1) == 0       # negate A
    assert bits(d, 14, 1) == 0       # negate B
    assert bits(d, 15, 1) == 0       # A K-major (no transpose)
    assert bits(d, 16, 1) == 0       # B K-major
    assert bits(d, 17, 6) == 256 >> 3
    assert bits(d, 23, 1) == 0       # reserved
    assert bits(d, 24, 5) == 128 >> 4
    assert bits(d, 29, 1) == 0       # reserved
    assert bits(d, 30, 2) == 0       # max shift (.ws only)
    assert d == 0x08400490


@pytest.mark.parametrize("ab,acc,a_code,d_code", [("f16", "f16", 0, 0), ("f16", "f32", 0, 1),
                                                  ("bf16", "f32", 1, 1)])
def test_instr_desc_types(ab, acc, a_code, d_code):
    d = instr_desc(m=64, n=64, ab_dtype=ab, acc_dtype=acc)
    assert (bits(d, 4, 2), bits(d, 7, 3), bits(d, 10, 3)) == (d_code, a_code, a_code)


def test_instr_desc_majors_and_negate():
    d = instr_desc(m=128, n=128, a_major="mn", b_major="k", negate_b=True)
    assert (bits(d, 13, 1), bits(d, 14, 1), bits(d, 15, 1), bits(d, 16, 1)) == (0, 1, 1, 0)
    d = instr_desc(m=128, n=128, a_major="k", b_major="mn", negate_a=True)
    assert (bits(d, 13, 1), bits(d, 14, 1), bits(d, 15, 1), bits(d, 16, 1)) == (1, 0, 0, 1)


@pytest.mark.parametrize("m,n", [(64, 8), (64, 256), (128, 16), (128, 112), (128, 256)])
def test_instr_desc_shapes(m, n):
    d = instr_desc(m=m, n=n)
    assert bits(d, 17, 6) << 3 == n
    assert bits(d, 24, 5) << 4 == m


@pytest.mark.parametrize("kw,msg", [
    (dict(m=256, n=128), "M = 64 or 128"),             # M=256 is cta_group::2
    (dict(m=128, n=8), "multiple of 16"),               # M=128 needs N % 16 == 0
    (dict(m=64, n=264), r"\[8, 256\]"),
    (dict(m=128, n=128, k=32), "K = 16"),
    (dict(m=128, n=128, ab_dtype="f8"), "kind::f16 takes"),
    (dict(m=128, n=128, a_major="row"), "majors must be"),
])
def test_instr_desc_rejects(kw, msg):
    with pytest.raises(ValueError, match=msg):
        instr_desc(**kw)
