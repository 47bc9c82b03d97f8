"""The sm_90a attention forward kernel, compiled here (no GPU) for every entry of the 'attention'
and 'attention-fa4-pieces' bundle sets with that entry's environment (whole-program ptxas), keeps
its promises:

* no spills and no stack frame; setmaxnreg honoured (ptxas did not drop it, C7504) and the PTX
  moves the producer to `load_regs` and the consumers to `mma_regs`;
* SMEM is what the tiles need: Q + the K and V rings + the pipelines' mbarriers, within the
  config's own budget (AttnConfig.smem_bytes, validated <= 227 KiB);
* P.V takes P from registers: each `fa4.mma` with a_source="regs" is one
  wgmma.mma_async.m64n{D}k16 with four A registers and imm-trans-b 1 (V is MN-major), and the
  SASS holds them as HGMMA R, R, gdesc.tnspB with no local-memory traffic;
* the kernel's parameters are the launch contract attention_sm90_config.launch_args fills;
* FlashAttention-4's softmax pieces appear only where the config asks for them: with
  exp2_poly_stride k, 1 in k of the softmax's exp2 leave the SFU (fewer ex2.approx than the same
  config without the polynomial, one round-to-integer add of 1.5 * 2^23 for each that left, and no
  float-to-int conversion, which would issue to the SFU's pipe); with rescale_threshold > 0, O's
  rescale sits behind a vote.sync.any and a bra.uni (fa4.scale_if_uniform), and the KV loops keep
  their wgmma descriptors in uniform registers. Of the default kernels, D256's and D128
  non-causal's one-tile-per-CTA kernel use the lazy rescale (attention_sm90_config.KNOBS); none
  uses the polynomial.

Compiles go through lowering.lower (no kernel cache); the stage dumps land in a
temporary directory. About 2 s per config, 35-40 s for the file.
"""
import dataclasses
import re
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from fa4mlir import compiler, kernel_sets, kernels, lowering
from fa4mlir.attention import AttnProblem
from fa4mlir.kernels.attention_sm90_config import LAUNCH_PARAMS, launch_args
from fa4mlir.passes._util import attr, ops_named
from fa4mlir.passes.plan_smem import MBARRIER_BYTES, SMEM_LIMIT
from fa4mlir.runtime import DTYPES, TensorInfo, tma_encoding
from fa4mlir.sass import disassemble, find_nvdisasm, wgmma_loops, wgmma_waits

_PIECES_SET = kernel_sets.SETS["attention-fa4-pieces"]()
ENTRIES = kernel_sets.SETS["attention"]() + _PIECES_SET + kernel_sets.tile_variants()
# the attention-fa4-pieces entries (polynomial exp2 and lazy rescale on default tiles)
PIECES = [i for i, e in enumerate(ENTRIES) if e in _PIECES_SET]
WGMMA_K = 16
# The launch contract as written out here, independently of the table the kernel declares from
# (attention_sm90_config.LAUNCH_PARAMS): (name, kind) in PTX order.
PARAMS = [("q", "tma"), ("k", "tma"), ("v", "tma"), ("o", "tma"), ("lse", "ptr"), ("batch", "i32"),
          ("heads", "i32"), ("seqlen_q", "i32"), ("seqlen_k", "i32"), ("scale_log2", "f32"),
          *((f"{n}_{part}", "i32") for n in ("group", "tiles", "heads") for part in ("mul", "shr")),
          ("section_shift", "i32"), ("rest_mul", "i32"), ("rest_shr", "i32")]

pytestmark = pytest.mark.skipif(lowering.find_ptxas() is None,
                                reason="no ptxas (pip install nvidia-cuda-nvcc): the attention set compiles with it")


@dataclass
class Compiled:
    cfg: object
    resources: dict
    smem_bytes: int
    params: tuple
    cubin: bytes = field(repr=False)
    ptx: str = field(repr=False)
    num_regs_mma: int        # fa4.mma ops with A from registers in the built kernel
    pipe_stages: list        # num_stages of every fa4.pipeline


_COMPILED: dict = {}


def compile_entry(entry: tuple, tmp_path_factory) -> Compiled:
    """Build and lower a kernel-set entry (name, config[, compile-option overrides]) with the options
    the compiler resolves for it (once per session)."""
    name, cfg, *overrides = entry
    options = compiler.resolve_options(name, debug=False, **(overrides[0] if overrides else {}))
    index = (name, cfg, options)
    if index not in _COMPILED:
        dump = tmp_path_factory.mktemp("attention")
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("FA4MLIR_DUMP_DIR", str(dump))
            kir = kernels.module(name).build(cfg)
            fa4_ir = kir.module.operation
            num_regs_mma = sum(attr(op, "a_source") == "regs" for op in ops_named(fa4_ir, "fa4.mma"))
            pipe_stages = [attr(op, "num_stages") for op in ops_named(fa4_ir, "fa4.pipeline")]
            art = lowering.lower(kir, options, key=f"test-{kir.name}")
        (ptx_path,) = Path(dump).glob("*/*-ptx.ptx")
        _COMPILED[index] = Compiled(cfg, art.resources, art.smem_bytes, art.params, art.cubin,
                                    ptx_path.read_text(), num_regs_mma, pipe_stages)
    return _COMPILED[index]


def _id(entry) -> str:
    cfg = entry[1]
    tiles = "" if cfg.bm == 128 else f"-{cfg.bm}x{cfg.bn}"
    dims = f"d{cfg.head_dim}" + (f"v{cfg.head_dim_v}" if cfg.head_dim_v else "")
    return f"{cfg.dtype}-{dims}-{'causal' if cfg.causal else 'full'}{tiles}{cfg.name_suffix()}"


@pytest.fixture(scope="module", params=range(len(ENTRIES)), ids=[_id(e) for e in ENTRIES])
def compiled(request, tmp_path_factory) -> Compiled:
    return compile_entry(ENTRIES[request.param], tmp_path_factory)


def test_no_spills_and_no_stack(compiled):
    r = compiled.resources
    assert (r["spill_stores"], r["spill_loads"], r["stack_bytes"]) == (0, 0, 0), r
    assert not r["wgmma_serialized"], r   # ptxas would make each wgmma wait for the last: no overlap
    assert r["threads"] == compiled.cfg.threads == 128 * (1 + compiled.cfg.bm // 64)  # producer + consumers


def test_setmaxnreg_is_honoured(compiled):
    r, cfg = compiled.resources, compiled.cfg
    assert r["cubin_backend"] == "ptxas" and not r["setmaxnreg_ignored"], r
    found = re.findall(r"setmaxnreg\.(inc|dec)\.sync\.aligned\.u32\s+(\d+);", compiled.ptx)
    assert sorted(set(found)) == [("dec", str(cfg.producer_regs)), ("inc", str(cfg.consumer_regs))], found


def test_smem_is_the_tiles_plus_the_barriers(compiled):
    """Q (bm x D; two of them and O's own tile, bm x Dv, when persistent) + K and V rings (stages x bn x D
    and x Dv) + 2 mbarriers per pipeline stage; every buffer is a multiple of the planner's 1024-byte
    alignment, so no padding."""
    cfg = compiled.cfg
    row_bytes, v_row = cfg.head_dim * DTYPES[cfg.dtype][0], cfg.dim_v * DTYPES[cfg.dtype][0]
    tile_bytes = (cfg.bm * row_bytes * (2 if cfg.persistent else 1) + (cfg.bm * v_row if cfg.persistent else 0)
                  + cfg.stages * cfg.bn * (row_bytes + v_row))
    barrier_bytes = 2 * MBARRIER_BYTES * sum(compiled.pipe_stages)
    assert compiled.resources["smem_bytes"] == compiled.smem_bytes == tile_bytes + barrier_bytes
    assert compiled.smem_bytes <= cfg.smem_bytes() <= 227 * 1024 == SMEM_LIMIT["sm_90a"]


def _register_a_wgmmas(ptx: str) -> list[re.Match]:
    """wgmma.mma_async lines whose A operand is a register list ({d..}, {%r..}, b-desc, ...)."""
    return list(re.finditer(r"wgmma\.mma_async\.sync\.aligned\.m64n(\d+)k16\.f32\.(\w+)\.\w+\s+\{[^}]*\},\s*"
                            r"\{%r\d+, %r\d+, %r\d+, %r\d+\},\s*%rd\d+,\s*p,\s*1,\s*1,\s*(\d);", ptx))


def test_pv_takes_p_from_registers(compiled):
    cfg = compiled.cfg
    found = _register_a_wgmmas(compiled.ptx)
    assert compiled.num_regs_mma > 0 and compiled.num_regs_mma % (cfg.bn // WGMMA_K) == 0, \
        f"each P.V is bn/16 = {cfg.bn // WGMMA_K} K-steps; the kernel has {compiled.num_regs_mma} register-A MMAs"
    assert len(found) == compiled.num_regs_mma
    assert {(int(m[1]), m[2], m[3]) for m in found} == {(cfg.dim_v, cfg.dtype, "1")}, \
        "register-A wgmma must be m64n{dim_v}k16 of the config dtype with imm-trans-b 1 (V is MN-major)"


def test_params_are_the_launch_contract(compiled):
    cfg = compiled.cfg
    assert [(p.name, p.kind) for p in compiled.params] == PARAMS == list(LAUNCH_PARAMS)
    # launch_args (what flash_attn_func passes) fills every one by name: tensors by name here.
    problem = AttnProblem(2, 1000, 300, 8, 2, cfg.head_dim, cfg.dtype, cfg.causal, 0.125, head_dim_v=cfg.head_dim_v)
    args = launch_args(cfg, problem, {n: n for n in ("q", "k", "v", "o", "lse")})
    assert list(args) == [p.name for p in compiled.params]
    for p, a in zip(compiled.params, args.values()):
        if p.kind in ("tma", "ptr"):
            assert a == p.name, (p, a)
        else:
            assert type(a) is {"i32": int, "f32": float}[p.kind], (p, a)
    batch, seqlen, heads = 2, 1000, 8
    for p in compiled.params:
        if p.kind == "tma":  # q, k, v, o are [B, S, H, D] tensors of the config dtype (v, o: D = dim_v)
            d = cfg.dim_v if p.name in ("v", "o") else cfg.head_dim
            shape, strides = (batch, seqlen, heads, d), (seqlen * heads * d, heads * d, d, 1)
            assert p.tma.dtype == cfg.dtype
            enc = tma_encoding(p.tma, TensorInfo(0x7F0000000000, shape, strides, cfg.dtype, "cuda"), p.name)
            assert enc.global_dims == tuple(reversed(shape))


def _sass(cubin: bytes) -> str:
    """The SASS of a cubin; skips the test without nvdisasm."""
    if find_nvdisasm() is None:
        pytest.skip("nvdisasm not installed (pip install nvidia-cuda-nvdisasm)")
    return disassemble(cubin)


def test_sass_holds_register_a_hgmma_and_no_local_memory(tmp_path_factory):
    index = next(i for i, (_, c, *_) in enumerate(ENTRIES) if (c.dtype, c.head_dim, c.causal) == ("bf16", 128, False))
    c = compile_entry(ENTRIES[index], tmp_path_factory)
    sass = _sass(c.cubin)
    d, bn = c.cfg.head_dim, c.cfg.bn
    register_a = re.findall(rf"HGMMA\.64x{d}x16\.F32\.BF16 R\d+, R\d+, gdesc\[UR\d+\]\.tnspB", sass)
    assert len(register_a) == c.num_regs_mma, "every P.V wgmma: A in registers, B (V) transposed"
    assert re.search(rf"HGMMA\.64x{bn}x16\.F32\.BF16 R\d+, gdesc\[UR\d+\]", sass), "S = Q.K^T from SMEM"
    local = re.findall(r"\b(?:LDL|STL)\b[.\w]*", sass)
    assert not local, f"local-memory traffic in the SASS: {local[:5]}"


# ---- FlashAttention-4's softmax pieces --------------------------------------------------------------
def _count(pattern: str, ptx: str) -> int:
    return len(re.findall(pattern, ptx))


def test_default_kernels_use_neither_piece(compiled):
    """No rounding add without the polynomial, no vote without the lazy rescale, and the default
    configs ask for the lazy rescale only where KNOBS does (D256)."""
    from fa4mlir.kernels.attention_sm90_config import KNOBS, default_configs
    cfg = compiled.cfg
    if cfg in default_configs(cfg.dtype, cfg.head_dim, cfg.causal, head_dim_v=cfg.head_dim_v):
        assert cfg.exp2_poly_stride == 0, "the polynomial exp2 is opt-in"
        knobs = [KNOBS.get((cfg.head_dim, cfg.causal, short), {}) for short in (False, True)]
        assert cfg.rescale_threshold in [k.get("rescale_threshold", 0.0) for k in knobs]
    if cfg.exp2_poly_stride == 0:
        assert _count(ROUND_ADD, compiled.ptx) == 0, "no rounding add without the polynomial exp2"
    if cfg.rescale_threshold == 0:
        assert _count(r"vote\.sync\.any", compiled.ptx) == 0, "no vote without lazy rescale"


@pytest.fixture(scope="module", params=PIECES, ids=[_id(ENTRIES[i]) for i in PIECES])
def pieces(request, tmp_path_factory) -> tuple[Compiled, Compiled]:
    """(the fa4-pieces entry, the same config with exp2_poly_stride = 0), both compiled."""
    name, cfg, *overrides = ENTRIES[request.param]
    no_poly = (name, dataclasses.replace(cfg, exp2_poly_stride=0), *overrides)
    return compile_entry(ENTRIES[request.param], tmp_path_factory), compile_entry(no_poly, tmp_path_factory)


def test_pieces_set_is_on_default_tiles():
    from fa4mlir.kernels.attention_sm90_config import default_config
    assert len(PIECES) == 3
    for i in PIECES:
        cfg = ENTRIES[i][1]
        assert cfg.exp2_poly_stride >= 2 and cfg.rescale_threshold > 0
        default = default_config(cfg.dtype, cfg.head_dim, cfg.causal)
        assert dataclasses.replace(cfg, exp2_poly_stride=0, rescale_threshold=default.rescale_threshold) == default


# the polynomial's round-to-integer add: x + 1.5 * 2^23 (kernels/common/softmax.py, ROUND_MAGIC)
ROUND_ADD = r"add\.rn\.f32\s+%r\d+, %r\d+, 0f4B400000;"


def test_poly_takes_one_in_stride_softmax_exps_off_the_sfu(pieces):
    """Every softmax instance (the peeled block 0, the unmasked and the masked loop) computes bn / 2
    p's and 2 alphas per thread with exp2; the polynomial takes 1 in k of the p's, each with one
    rounding add of 1.5 * 2^23 and no cvt (floor / float-to-int conversions issue to the SFU's pipe
    on sm_90, which would undo the point). The alphas stay on the SFU."""
    poly, base = pieces
    cfg = poly.cfg
    k, n_s = cfg.exp2_poly_stride, cfg.bn // 2
    ex2_poly, ex2_base = _count(r"ex2\.approx", poly.ptx), _count(r"ex2\.approx", base.ptx)
    rounds = _count(ROUND_ADD, poly.ptx)
    print(f"{_id((None, cfg, None))}: ex2.approx {ex2_poly} (without the polynomial {ex2_base}), "
          f"rounding adds {rounds}")
    assert ex2_base % (n_s + 2) == 0, f"{ex2_base} ex2 is not a whole number of softmaxes of {n_s} + 2"
    instances = ex2_base // (n_s + 2)
    assert instances >= 2
    p_base, p_poly = instances * n_s, ex2_poly - 2 * instances
    assert ex2_poly < ex2_base
    assert p_poly / p_base == pytest.approx(1 - 1 / k, abs=0.02), (p_poly, p_base)
    assert rounds == p_base - p_poly, "one polynomial (one rounding add) for each softmax exp that left the SFU"
    assert _count(ROUND_ADD, base.ptx) == 0
    for c in (poly, base):
        assert _count(r"cvt\.r[mnpz]i\.", c.ptx) == 0, "no rounding conversion in the softmax"


def test_lazy_rescale_votes_before_rescaling_o(pieces):
    for c in pieces:
        assert c.cfg.rescale_threshold > 0
        votes = re.findall(r"vote\.sync\.any\.pred\s+%p\d+, %p\d+, -1;", c.ptx)
        assert votes, "lazy rescale: O's rescale is skipped behind a full-warp vote.sync.any"
        skips = _count(r"@skip bra\.uni SCALE_DONE;", c.ptx)
        assert skips >= 2, f"{skips} non-divergent branches around O's rescale (the unmasked and masked loops)"


_LAZY_UNIFORM = [ENTRIES[i] for i in PIECES if not ENTRIES[i][1].persistent and ENTRIES[i][1].head_dim != 256]


@pytest.mark.parametrize("entry", _LAZY_UNIFORM, ids=[_id(e) for e in _LAZY_UNIFORM])
def test_lazy_rescale_keeps_descriptors_uniform(entry, tmp_path_factory):
    """The branch around O's rescale is a bra.uni (fa4.scale_if_uniform): with an scf.if, ptxas
    treated the loop as divergent and moved the wgmma descriptors into uniform registers before
    every wgmma (32 R2UR per D128 KV loop, 534 instructions against 477 now). Persistent and D256
    kernels move some descriptors with or without it (see _UNIFORM below)."""
    cfg, loops = _kv_loops(entry, tmp_path_factory)
    for body in loops:
        moves = sum(o == "R2UR" for o, _ in body)
        assert moves <= _r2ur_limit(cfg), f"{moves} R2UR in a lazy-rescale KV loop of {len(body)} instructions"


def _r2ur_limit(cfg) -> int:
    """R2UR a KV loop may hold: one; two when the lazy rescale's branch sits between the S and the
    P.V issue (rescale_before_pv), as in D128 non-causal's default (measured with it: KNOBS)."""
    return 2 if cfg.rescale_before_pv and cfg.rescale_threshold else 1


def test_pieces_keep_the_register_budget(pieces):
    for c in pieces:
        r = c.resources
        assert (r["spill_stores"], r["spill_loads"], r["stack_bytes"]) == (0, 0, 0), r
        assert not r["setmaxnreg_ignored"], r


def test_no_division_by_a_runtime_value(compiled):
    """Runtime divisors (the GQA group, a persistent kernel's tile split and heads) go through
    dsl.fast_div with host-computed (multiplier, shift): a PTX div/rem by a register becomes a
    reciprocal sequence on the vector pipes, whose quotient ptxas no longer keeps uniform.
    Divisions by constants are strength-reduced by LLVM and leave no div/rem either."""
    found = re.findall(r"^\s*(?:@!?%p\d+\s+)?((?:div|rem)\.\S+\s+[^;]*);", compiled.ptx, re.M)
    assert not found, f"integer division in the PTX: {found[:4]}"


_KV_LOOPS: dict = {}


def _kv_loops(entry, tmp_path_factory) -> tuple[object, list[list[tuple[str, str]]]]:
    """(config, [unmasked, masked] KV loops as (opcode, operands)) of an entry's SASS: the loops holding one
    block's S and P.V GEMMs (head_dim / 16 + bn / 16 wgmma), the unmasked (shorter) one first.
    Disassembled once per entry."""
    if entry[1] not in _KV_LOOPS:
        c = compile_entry(entry, tmp_path_factory)
        per_block = c.cfg.head_dim // WGMMA_K + c.cfg.bn // WGMMA_K
        loops = [body for body in wgmma_loops(_sass(c.cubin))
                 if sum(o.startswith("HGMMA") for o, _ in body) == per_block]
        assert len(loops) >= 2, "the unmasked and masked KV loops were not found in the SASS"
        _KV_LOOPS[entry[1]] = (c.cfg, loops[:2])
    return _KV_LOOPS[entry[1]]


# the one-tile-per-CTA bf16 defaults (persistent kernels still move their descriptors: see
# notes/RESULTS.md, [D-turn-barriers]; D256 runs out of uniform registers)
_UNIFORM = [e for e in ENTRIES if e[1].dtype == "bf16" and e[1].head_dim in (64, 128) and not e[1].persistent
            and not e[1].exp2_poly_stride
            and e[1].stages == 2 and e[1].bn == 128]
_UNIFORM_IDS = [f"d{c.head_dim}{'_causal' if c.causal else ''}_{c.bm}x{c.bn}{'' if c.pingpong else '_nopp'}"
                for _, c, *_ in _UNIFORM]


@pytest.mark.parametrize("entry", _UNIFORM, ids=_UNIFORM_IDS)
def test_wgmma_descriptors_stay_in_uniform_registers(entry, tmp_path_factory):
    """The consumer's warpgroup index is broadcast from lane 0 (KernelBuilder.warp_uniform) and the
    GEMM turns of ping-pong select their named barrier by it (fa4.named_barrier select) instead of
    branching per warpgroup, so ptxas computes the Q, K and V descriptors in uniform registers:
    each KV loop moves at most one value into them per iteration (two: _r2ur_limit). (With the
    indices taken straight from %tid there were 9 R2UR per loop at D64; with a branch per
    warpgroup around the turn barriers, 24 at D64 and 32 at D128, one or two in front of every
    wgmma.)"""
    cfg, loops = _kv_loops(entry, tmp_path_factory)
    for body in loops:
        moves = sum(o == "R2UR" for o, _ in body)
        assert moves <= _r2ur_limit(cfg), f"{moves} R2UR in a KV loop of {len(body)} instructions"


@pytest.mark.parametrize("entry", _UNIFORM, ids=_UNIFORM_IDS)
def test_masking_costs_one_compare_and_select_per_score(entry, tmp_path_factory):
    """The masked KV loop compares each score's compile-time column offset with one per-row count
    of visible keys (common.masks.visible_keys): at most one ISETP and one FSEL per S register of
    the thread beyond what the unmasked loop runs (the per-score key_hidden it replaced cost
    two compares, two adds and two selects per score: 130 FSEL and 105 ISETP at D64 causal)."""
    cfg, (plain, masked) = _kv_loops(entry, tmp_path_factory)
    n_s = cfg.bn // 2
    for op in ("ISETP", "FSEL"):
        extra = sum(o.startswith(op) for o, _ in masked) - sum(o.startswith(op) for o, _ in plain)
        assert 0 < extra <= n_s + 4, f"{extra} more {op} in the masked loop than the unmasked one (S registers: {n_s})"


@pytest.mark.parametrize("entry", _UNIFORM, ids=_UNIFORM_IDS)
def test_softmax_runs_between_the_two_gemm_waits(entry, tmp_path_factory):
    """Intra-warpgroup overlap, as ptxas scheduled it: each KV loop waits for S (gsb0 <= 1) before
    it waits for P.V (gsb0 == 0), and the unmasked loop computes at least one row's max of S in
    between (bn / 4 S registers of the thread per row: bn / 4 - 1 FMNMX), while P.V still runs.
    That is all ptxas leaves there today: no exp2 (MUFU) in either loop, and in the causal masked
    loop only the masking (bench/sass_loops.py; notes/RESULTS.md, [R-pv-wait])."""
    cfg, (plain, masked) = _kv_loops(entry, tmp_path_factory)
    for body in (plain, masked):
        w = wgmma_waits(body)
        assert w["s_wait"] is not None and w["pv_wait"] is not None, w
        assert w["s_wait"] < w["pv_wait"], f"P.V is waited on before S: {w}"
    w = wgmma_waits(plain)
    fmnmx = sum(o.startswith("FMNMX") for o, _ in plain[w["s_wait"]:w["pv_wait"]])
    assert fmnmx >= cfg.bn // 4 - 1, f"{fmnmx} FMNMX between the waits: {w}"


def test_wgmma_waits_on_a_hand_written_loop():
    sass = """
.L_x_7:
        /*0100*/                   WARPGROUP.ARRIVE ;
        /*0110*/                   HGMMA.64x128x16.F32.BF16 R24, gdesc[UR8], RZ, !UPT, gsb0 ;
        /*0120*/                   HGMMA.64x128x16.F32.BF16 R88, R152, gdesc[UR12].tnspB, R88, gsb0 ;
        /*0130*/                   WARPGROUP.DEPBAR.LE gsb0, 0x1 ;
        /*0140*/                   FMNMX R9, R24, R25, !PT ;
        /*0150*/                   MUFU.EX2 R10, R10 ;
        /*0160*/                   WARPGROUP.DEPBAR.LE gsb0, 0x0 ;
        /*0170*/                   MUFU.EX2 R11, R11 ;
        /*0180*/              @P0 BRA `(.L_x_7) ;
        /*0190*/                   EXIT ;
"""
    (loop,) = wgmma_loops(sass)
    assert [o for o, _ in loop][:2] == ["WARPGROUP.ARRIVE", "HGMMA.64x128x16.F32.BF16"]
    assert wgmma_waits(loop) == {"instructions": 9, "hgmma": 2, "s_wait": 3, "pv_wait": 6, "between": 2,
                                 "mufu_between": 1, "mufu": 2}
    assert wgmma_loops(sass.replace("@P0 BRA `(.L_x_7)", "@P0 BRA `(.L_x_8)")) == []
    from bench.sass_loops import loop_rows  # the CLI's table rows: the same numbers plus the opcode mix
    (row,) = loop_rows(sass, hgmma=2)
    assert row["between"] == 2 and row["mix"] == "WARPGROUP:3 HGMMA:2 MUFU:2 FMNMX:1 BRA:1"
    assert loop_rows(sass, hgmma=16) == []
