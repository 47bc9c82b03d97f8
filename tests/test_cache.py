"""Deviceless tests of fa4mlir.cache: computed keys, atomic writes, one build per key."""

import hashlib
import json
import multiprocessing as mp
import os
import struct
import time
from pathlib import Path

import pytest

from fa4mlir import cache, env
from fa4mlir.cache import KernelCache, compute_key
from fa4mlir.runtime import KernelArtifact, ParamSpec, TmaSpec

CONFIG = {"head_dim": 128, "block_m": 128, "causal": True, "stages": 2}


def make_artifact(key="", cubin=b"cubin-bytes"):
    return KernelArtifact(name="attn_fwd", arch="sm_90a", cubin=cubin, block=(384, 1, 1),
                          smem_bytes=180_000, key=key, config=dict(CONFIG),
                          params=(ParamSpec("q_desc", "tma", TmaSpec("bf16", (64, 128), "128B")),
                                  ParamSpec("n", "i32")),
                          resources={"registers": 168, "spills": 0})


def test_key_changes_with_config_arch_and_compile_options(monkeypatch):
    """compute_key is a pure function of its inputs: the compile options reach it through `extra`
    (fa4mlir.compiler.key_for), resolved once; no knob is read here."""
    from fa4mlir import compiler
    base = compute_key(CONFIG, "sm_90a", {})
    assert base == compute_key(dict(reversed(list(CONFIG.items()))), "sm_90a", {})  # order-free
    assert compute_key({**CONFIG, "stages": 3}, "sm_90a", {}) != base
    assert compute_key(CONFIG, "sm_100a", {}) != base
    assert compute_key(CONFIG, "sm_90a", {"ptx_opt": 2}) != base
    for knob in ("FA4MLIR_DEBUG", "FA4MLIR_CUBIN_BACKEND", "FA4MLIR_VERBOSE"):
        monkeypatch.setenv(knob, "1" if knob != "FA4MLIR_CUBIN_BACKEND" else "ptxas")
    assert compute_key(CONFIG, "sm_90a", {}) == base
    monkeypatch.delenv("FA4MLIR_CUBIN_BACKEND")
    debug, plain = compiler.resolve_options("gemm_sm90"), compiler.resolve_options("gemm_sm90", debug=False)
    assert debug.debug and not plain.debug
    assert compute_key(CONFIG, "sm_90a", {"options": debug.key()}) != compute_key(CONFIG, "sm_90a",
                                                                                 {"options": plain.key()})


def test_key_covers_sources_and_toolchain(monkeypatch, tmp_path):
    base = compute_key(CONFIG, "sm_90a", {})
    monkeypatch.setattr(cache, "source_fingerprint", lambda: "other-sources")
    assert compute_key(CONFIG, "sm_90a", {}) != base
    monkeypatch.undo()
    monkeypatch.setattr(cache, "toolchain_versions", lambda: {"nvidia-nvjitlink": "0.0"})
    assert compute_key(CONFIG, "sm_90a", {}) != base
    (tmp_path / "a.py").write_text("x = 1\n")
    fp1 = cache.source_fingerprint.__wrapped__(tmp_path)
    (tmp_path / "a.py").write_text("x = 2\n")
    assert cache.source_fingerprint.__wrapped__(tmp_path) != fp1


def test_toolchain_versions_reports_absent_packages(monkeypatch):
    monkeypatch.setattr(cache, "TOOLCHAIN_PACKAGES", ("surely-not-installed-fa4mlir-pkg",))
    assert cache.toolchain_versions() == {"surely-not-installed-fa4mlir-pkg": "absent"}


def test_key_rejects_non_json_config():
    with pytest.raises(TypeError, match="canonical-JSON"):
        compute_key({"f": object()}, "sm_90a", {})


def test_put_get_round_trip_and_no_temp_files(tmp_path):
    c = KernelCache(tmp_path, enabled=True)
    key = compute_key(CONFIG, "sm_90a", {})
    assert c.get(key) is None
    a = make_artifact(key)
    c.put(a)
    assert c.get(key) == a
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"{key}.cubin", f"{key}.json"]


def test_failed_write_leaves_no_partial_entry(tmp_path, monkeypatch):
    c = KernelCache(tmp_path, enabled=True)
    key = "cd" * 32

    def broken_replace(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(OSError, match="disk full"):
        c.put(make_artifact(key))
    monkeypatch.undo()
    assert list(tmp_path.iterdir()) == []
    assert c.get(key) is None


def test_corrupt_cubin_is_a_miss(tmp_path):
    c = KernelCache(tmp_path, enabled=True)
    key = "ef" * 32
    c.put(make_artifact(key))
    (tmp_path / f"{key}.cubin").write_bytes(b"truncated")
    with pytest.warns(cache.CacheWarning, match="sha256 does not match"):
        assert c.get(key) is None


def _break(path: Path, how: str, key: str) -> None:
    meta = path / f"{key}.json"
    if how == "truncated":
        meta.write_bytes(meta.read_bytes()[:40])
    elif how == "empty":
        meta.write_bytes(b"")
    elif how == "not utf-8":
        meta.write_bytes(b"\xff\xfe{}")
    elif how == "no sha256":
        d = json.loads(meta.read_text())
        del d["cubin_sha256"]
        meta.write_text(json.dumps(d))
    elif how == "another key's entry":
        other = "12" * 32
        KernelCache(path, enabled=True).put(make_artifact(other, cubin=b"the other kernel"))
        meta.write_bytes((path / f"{other}.json").read_bytes())
        (path / f"{key}.cubin").write_bytes((path / f"{other}.cubin").read_bytes())
    elif how == "mislabelled arch":
        sm100 = bytearray(64)
        sm100[:9] = b"\x7fELF\x02\x01\x01\x41\x08"
        struct.pack_into("<H", sm100, 18, 190)
        struct.pack_into("<I", sm100, 48, 0x06006402)    # sm_100a's e_flags, in an entry labelled sm_90a
        (path / f"{key}.cubin").write_bytes(bytes(sm100))
        d = json.loads(meta.read_text())
        d["cubin_sha256"] = hashlib.sha256(bytes(sm100)).hexdigest()
        meta.write_text(json.dumps(d))
    elif how == "cubin missing":
        (path / f"{key}.cubin").unlink()


@pytest.mark.parametrize("how, words", [
    ("truncated", "not valid JSON"), ("empty", "not valid JSON"), ("not utf-8", "UnicodeDecodeError"),
    ("no sha256", "no cubin_sha256"), ("another key's entry", "not its own"),
    ("mislabelled arch", "built for sm_100 but its metadata says sm_90a"), ("cubin missing", "is missing")])
def test_a_corrupt_entry_is_reported_by_path_and_rebuilt(tmp_path, how, words):
    """Each of these once failed every later compile of its key, or (another key's entry, no
    sha256) returned the wrong kernel without a word."""
    c = KernelCache(tmp_path, enabled=True)
    key = "ab" * 32
    c.put(make_artifact(key))
    _break(tmp_path, how, key)
    builds = []
    with pytest.warns(cache.CacheWarning, match=words) as seen:
        art = c.get_or_build(key, lambda: builds.append(1) or make_artifact(cubin=b"rebuilt"))
    assert str(tmp_path / f"{key}.json") in str(seen[0].message)
    assert builds == [1] and art.cubin == b"rebuilt" and art.key == key
    assert c.get(key).cubin == b"rebuilt"       # the rebuilt entry replaced the broken one


def test_an_unwritable_cache_warns_once_and_compiles(tmp_path, monkeypatch):
    ro = tmp_path / "ro"
    ro.mkdir()
    monkeypatch.setattr(cache, "_WARNED_UNWRITABLE", set())

    def no_write(path, data):
        raise PermissionError(13, "Permission denied", str(path))
    monkeypatch.setattr(cache, "atomic_write", no_write)
    c = KernelCache(ro, enabled=True)
    with pytest.warns(cache.CacheWarning, match="cannot write .*compiling without caching"):
        art = c.get_or_build("ab" * 32, lambda: make_artifact(cubin=b"built"))
    assert art.cubin == b"built"
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")            # once per folder: no second warning
        assert c.get_or_build("cd" * 32, lambda: make_artifact(cubin=b"again")).cubin == b"again"
    # a folder that cannot even be created: the same, for its own folder
    monkeypatch.undo()
    monkeypatch.setattr(cache, "_WARNED_UNWRITABLE", set())
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    with pytest.warns(cache.CacheWarning, match="cannot write"):
        assert KernelCache(blocker / "sub", enabled=True).get_or_build(
            "ef" * 32, lambda: make_artifact(cubin=b"x")).cubin == b"x"


def test_empty_cache_dir_knob_means_the_default(monkeypatch):
    monkeypatch.setenv("FA4MLIR_CACHE_DIR", "")
    assert KernelCache().dir == Path("~/.cache/fa4mlir").expanduser()


def _hold_lock(path: str, held, release) -> None:
    import fcntl
    with open(path, "a+b") as f:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX)
        f.write(f"pid {os.getpid()} on this host".encode())
        f.flush()
        held.set()
        release.wait(30)


def test_a_held_lock_times_out_naming_its_holder(tmp_path):
    key = "ab" * 32
    ctx = mp.get_context("spawn")
    held, release = ctx.Event(), ctx.Event()
    holder = ctx.Process(target=_hold_lock, args=(str(tmp_path / f"{key}.lock"), held, release))
    holder.start()
    try:
        assert held.wait(30)
        with pytest.raises(cache.CacheLockTimeout, match=rf"held by pid {holder.pid} .* for more than 0 s"):
            KernelCache(tmp_path, enabled=True).get_or_build(key, make_artifact, lock_timeout_s=0.3)
    finally:
        release.set()
        holder.join(30)
    # once released, the key builds
    assert KernelCache(tmp_path, enabled=True).get_or_build(key, make_artifact, lock_timeout_s=5).cubin


def test_disabled_cache_always_builds(tmp_path, monkeypatch):
    monkeypatch.setenv("FA4MLIR_CACHE", "0")
    c = KernelCache(tmp_path)
    assert not c.enabled
    calls = []
    for _ in range(2):
        c.get_or_build("ab" * 32, lambda: calls.append(1) or make_artifact())
    assert len(calls) == 2 and list(tmp_path.iterdir()) == []


def test_cache_dir_knob(monkeypatch, tmp_path):
    monkeypatch.setenv("FA4MLIR_CACHE_DIR", str(tmp_path / "c"))
    assert KernelCache().dir == tmp_path / "c"
    monkeypatch.delenv("FA4MLIR_CACHE_DIR")
    assert env.cache_dir() == Path("~/.cache/fa4mlir").expanduser()


def test_build_fn_key_mismatch_is_an_error(tmp_path):
    with pytest.raises(ValueError, match="expected"):
        KernelCache(tmp_path, enabled=True).get_or_build("ab" * 32, lambda: make_artifact("cd" * 32))


def _slow_build(counter: str) -> KernelArtifact:
    with open(counter, "a") as f:
        f.write(f"{os.getpid()}\n")
    time.sleep(0.5)
    return make_artifact(cubin=f"built by {os.getpid()}".encode())


def _worker(cache_dir: str, key: str, counter: str, start, out) -> None:
    start.wait()
    art = KernelCache(cache_dir, enabled=True).get_or_build(key, lambda: _slow_build(counter))
    out.put(art.cubin)


def test_concurrent_get_or_build_builds_once(tmp_path):
    ctx = mp.get_context("spawn")
    key = compute_key(CONFIG, "sm_90a", {"test": "concurrency"})
    counter = tmp_path / "builds.txt"
    start, out = ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(str(tmp_path / "cache"), key, str(counter), start, out))
             for _ in range(6)]
    for p in procs:
        p.start()
    start.set()
    results = [out.get(timeout=60) for _ in procs]
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    assert len(counter.read_text().splitlines()) == 1
    assert len(set(results)) == 1 and results[0].startswith(b"built by ")
    leftovers = [p.name for p in (tmp_path / "cache").iterdir() if p.name.endswith(".tmp")]
    assert leftovers == []
