"""`python -m fa4mlir [demo|bundle|bench|knobs]`.

    demo (default)  compile the default kernel of each arch, print the resource table, and on a GPU
                    run the sm_90a GEMM against torch.matmul
    bundle          compile config sets into a bundle folder (cubins + manifest), with progress
    bench [attention|gemm|decode|prefill|mla]
                    time a bundle's kernels on the GPU machine (no MLIR needed): attention (default)
                    against torch SDPA (cuDNN, FA2) and FA4 CuTe on the FA3 grid; gemm against
                    torch.matmul; decode (flash_attn_with_kvcache) on the serving anchors' decode
                    workloads against FA4 CuTe, cuDNN and FA2; prefill on the serving anchors'
                    prefill workloads (ragged, chunked, sliding window, softcap, sinks, ALiBi) against
                    FA4 CuTe, FlexAttention and torch's FA2/cuDNN; mla on the serving anchors' MLA prefill
                    (qk 192, v 128, causal) against FA4 CuTe and cuDNN. All live in fa4mlir/bench/
    knobs           print every FA4MLIR_* knob
"""
from __future__ import annotations

import argparse
import sys
import time


def _resource_table(rows: list[tuple]) -> str:
    head = ("kernel", "arch", "backend", "regs", "spills", "smem B", "tmem cols", "threads",
            "build", "fa4", "nvvm", "llvm", "ptx/ir", "cubin", "total s")
    lines = [head]
    for name, art in rows:
        r = art.resources
        st = r.get("stage_seconds", {})
        st = {**st, "ptx": st.get("ptx", st.get("nvvm-ir", 0.0))}   # nvjitlink-lto emits NVVM IR, not PTX
        stages = [f"{st.get(s, 0.0):.2f}" for s in ("build", "fa4", "nvvm", "llvm", "ptx", "cubin")]
        lines.append((name, art.arch, r.get("cubin_backend", "?") + ("*" if r.get("setmaxnreg_ignored") else ""),
                      str(r.get("registers")), str(r.get("spill_stores", 0) + r.get("spill_loads", 0)),
                      str(r.get("smem_bytes")), str(r.get("tmem_cols")), str(r.get("threads")), *stages,
                      f"{sum(st.values()):.2f}"))
    widths = [max(len(str(l[i])) for l in lines) for i in range(len(head))]
    table = "\n".join("  ".join(str(c).ljust(w) for c, w in zip(l, widths)) for l in lines)
    if any(r.get("setmaxnreg_ignored") for _, a in rows for r in [a.resources]):
        table += "\n* ptxas ignored setmaxnreg (C7504: nvJitLink compiles PTX relocatably); the ptxas backend (or nvjitlink-lto, sm_100+) keeps it"
    return table


def _compile(entries, show_progress=True):
    from . import compiler
    out = []
    for i, (name, cfg, *overrides) in enumerate(entries, 1):
        t0 = time.perf_counter()
        art = compiler.compile_kernel(name, cfg, **(overrides[0] if overrides else {}))
        if show_progress:
            print(f"[{i}/{len(entries)}] {art.name} ({art.arch}, {art.resources.get('cubin_backend')}) "
                  f"{time.perf_counter() - t0:.2f} s", flush=True)
        out.append((art.name, art))
    return out


def cmd_demo(args) -> int:
    from . import kernel_sets
    from .kernels import gemm_sm90  # noqa: F401  (fails early without MLIR)
    rows = _compile(kernel_sets.demo())
    print()
    print(_resource_table(rows))
    from .testing import gpu_available
    ok, why = gpu_available()
    if not ok:
        print(f"\nno GPU here ({why}): compiled only. Run the GPU tests from a bundle (README, 'GPU workflow').")
        return 0
    from .testing import check_gemm
    for name, art in rows:
        if art.arch == "sm_90a":
            for mnk in ((1000, 1016, 1000), (4096, 4096, 4096)):
                print(check_gemm(art, *mnk))
    return 0


def _compile_parallel(entries, sets: list[str], jobs: int):
    """_compile in `jobs` spawned processes (compiler.compile_entries), in the entries' order."""
    from . import compiler
    out = []
    for i, (art, seconds) in enumerate(compiler.compile_entries(entries, sets, jobs), 1):
        print(f"[{i}/{len(entries)}] {art.name} ({art.arch}, {art.resources.get('cubin_backend')}) {seconds:.2f} s",
              flush=True)
        out.append((art.name, art))
    return out


def cmd_bundle(args) -> int:
    from . import kernel_sets
    from .artifacts import write_bundle
    entries = kernel_sets.configs(args.set)
    jobs = args.jobs or 1
    print(f"compiling {len(entries)} kernel(s) for bundle {args.out}{f' in {jobs} processes' if jobs > 1 else ''}",
          flush=True)
    rows = _compile_parallel(entries, args.set, jobs) if jobs > 1 else _compile(entries)
    write_bundle(args.out, [a for _, a in rows])
    print(_resource_table(rows))
    print(f"wrote {args.out}/manifest.json")
    return 0


def _bench_module(name: str):
    import importlib
    return importlib.import_module(f"fa4mlir.bench.{name}")


def cmd_bench(args) -> int:
    if args.what == "gemm":
        return _bench_module("gemm_bench").main(args.bundle, args.out or "gemm-bench.json")
    if args.what == "decode":
        args.out = args.out or "decode-bench.json"
        return _bench_module("decode_bench").run(args)
    if args.what == "prefill":
        args.out = args.out or "prefill-bench.json"
        return _bench_module("prefill_bench").run(args)
    if args.what == "mla":
        args.out = args.out or "mla-bench.json"
        return _bench_module("mla_bench").run(args)
    args.out = args.out or "attention-bench.json"
    return _bench_module("attention_bench").run(args)


def cmd_knobs(args) -> int:
    from . import env
    print(env.describe())
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m fa4mlir", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd")
    sub.add_parser("demo", help="compile the default kernels, print resources, run on a GPU if present")
    b = sub.add_parser("bundle", help="compile config sets into a bundle folder")
    b.add_argument("--out", required=True)
    b.add_argument("--set", action="append", default=None, help="demo, gpu-tests, bench (repeatable)")
    b.add_argument("--jobs", type=int, default=1, help="compile in this many processes (default 1); the bundle is "
                                                       "the same, in the same order")
    be = sub.add_parser("bench", help="time a bundle's attention kernels (default) or GEMMs on the GPU",
                        description="attention: fa4mlir vs torch SDPA (cuDNN, FA2) and FA4 CuTe on the "
                                    "FA3 grid; gemm: the bundle's sm_90a GEMMs vs torch.matmul; decode, "
                                    "prefill, mla: the serving anchors' workloads. The flags after --out apply "
                                    "to attention; decode, prefill and mla read --rounds, --heat-ms, --warmup-ms, "
                                    "--rep-ms, --timer and --no-fa4 too.")
    be.add_argument("what", nargs="?", choices=("attention", "gemm", "decode", "prefill", "mla"),
                    default="attention")
    be.add_argument("--workloads", default="", help="decode, prefill, mla: comma-separated workloads (default: all "
                                                     "of fa4mlir/bench/decode_bench.py's / prefill_bench.py's / "
                                                     "mla_bench.py's WORKLOADS)")
    be.add_argument("--no-flex", action="store_true", help="prefill only: skip FlexAttention")
    be.add_argument("--splits", default="", help="decode only: also time fa4mlir with num_splits forced to each of "
                                                  "these (e.g. 2,4,8)")
    be.add_argument("--decode-variant", default="", help="decode only: the *_fp8 workloads also time fa4mlir with "
                                                          "each of these FP8 kernel variants (attention_decode_sm90_"
                                                          "config.FP8_VARIANTS, e.g. default,smem,swapab,swapabw; "
                                                          "default: FP8_DEFAULT_RULE's kernel, smem: the conversion-"
                                                          "through-SMEM kernel (both in --set decode); a bundle of the "
                                                          "decode-fp8-variants set holds the rest); names of "
                                                          "config.TILE_VARIANTS (bf16 tiles: bn128s2, bn64s3: a "
                                                          "bundle of the decode-bf16-variants set) time decode_dense "
                                                          "the same way")
    be.add_argument("--mla-decode-variant", default="", help="mla only: the mla_decode rows also time fa4mlir with "
                                                              "each of these decode variants (attention.mla.VARIANTS: "
                                                              "default (DEFAULT_RULE's), m64, swapab, seesaw, "
                                                              "swapab_ring; FA4MLIR_MLA_DECODE_VARIANT per call; "
                                                              "swapab and swapab_ring on the rows of seqlen_q x heads "
                                                              "<= 32 only; a bundle of the mla set holds them)")
    be.add_argument("--prefill-tiles", default="", help="prefill, mla (mla_prefill): also time flash_attn_func's rows with each of "
                                                         "these ';'-separated FA4MLIR_PREFILL_TILES specs (e.g. "
                                                         "'persistent=False;bn=144'; the bundle must hold them)")
    be.add_argument("--bundle", default=None, help="bundle folder (default: FA4MLIR_BUNDLE)")
    be.add_argument("--out", default=None, help="JSON result (default: attention-bench.json / gemm-bench.json / "
                                                             "decode-bench.json / prefill-bench.json / mla-bench.json)")
    _bench_module("attention_bench").add_arguments(be, with_common=False)
    sub.add_parser("knobs", help="print the FA4MLIR_* knobs")
    args = p.parse_args(argv)
    if args.cmd == "bundle" and not args.set:
        args.set = ["gpu-tests"]
    return {"demo": cmd_demo, None: cmd_demo, "bundle": cmd_bundle, "bench": cmd_bench,
            "knobs": cmd_knobs}[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
