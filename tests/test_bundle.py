"""Deviceless tests of kernel bundles: round-trip, lookup, format checks, loading without MLIR."""

import json
import struct
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from fa4mlir import testing
from fa4mlir.runtime import Bundle, KernelArtifact, ParamSpec, TmaSpec, write_bundle

REPO_ROOT = Path(__file__).resolve().parents[1]


def artifact(head_dim, causal, arch="sm_90a", name="attn_fwd"):
    key = f"{head_dim:04x}{int(causal):02x}{arch[3:6]}".ljust(64, "0")
    return KernelArtifact(
        name=name, arch=arch, cubin=f"cubin {name} {head_dim} {causal} {arch}".encode(),
        block=(384, 1, 1), cluster=(2, 1, 1) if arch == "sm_100a" else (1, 1, 1),
        smem_bytes=1000 * head_dim, key=key,
        params=(ParamSpec("q_desc", "tma", TmaSpec("bf16", (64, 128), "128B", "zero", "256B")),
                ParamSpec("o_gmem", "ptr"), ParamSpec("seqlen", "i32"), ParamSpec("scale", "f32")),
        resources={"registers": 168, "spills": 0},
        config={"head_dim": head_dim, "causal": causal, "tile": [128, 128]})


ARTIFACTS = [artifact(64, False), artifact(128, False), artifact(128, True),
             artifact(128, False, arch="sm_100a"), artifact(64, False, name="attn_bwd")]


def test_round_trip(tmp_path):
    write_bundle(tmp_path, ARTIFACTS)
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert manifest["format"] == "fa4mlir-bundle" and manifest["version"] == 1
    assert len(manifest["kernels"]) == len(ARTIFACTS)
    cubins = sorted(p.name for p in tmp_path.glob("*.cubin"))
    assert cubins == sorted(f"{a.name}-{a.key[:16]}.cubin" for a in ARTIFACTS)
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []
    b = Bundle.open(tmp_path)
    assert b.names() == ["attn_bwd", "attn_fwd"]
    assert b.artifacts() == ARTIFACTS


def test_find_by_name_arch_and_config(tmp_path):
    b = Bundle.open(write_bundle(tmp_path, ARTIFACTS))
    assert b.find(name="attn_fwd", arch="sm_90a", head_dim=128, causal=True) == ARTIFACTS[2]
    assert b.find(name="attn_fwd", arch="sm_100a") == ARTIFACTS[3]
    assert b.find(name="attn_bwd") == ARTIFACTS[4]
    assert b.find(name="attn_fwd", arch="sm_90a", head_dim=64, tile=(128, 128)) == ARTIFACTS[0]
    with pytest.raises(LookupError, match="2 kernels .* match name='attn_fwd', arch='sm_90a', head_dim=128"):
        b.find(name="attn_fwd", arch="sm_90a", head_dim=128)
    with pytest.raises(LookupError, match="no kernel .* head_dim=256.*the bundle holds: attn_fwd"):
        b.find(name="attn_fwd", head_dim=256)


@pytest.mark.parametrize("manifest, words", [
    ({"format": "something-else", "version": 1, "kernels": []}, "expected format 'fa4mlir-bundle'"),
    ({"format": "fa4mlir-bundle", "version": 2, "kernels": []}, "bundle version 2, this runtime reads version 1"),
    ([1, 2], "not an fa4mlir bundle"),
])
def test_open_rejects_foreign_manifests(tmp_path, manifest, words):
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ValueError, match=words):
        Bundle.open(tmp_path)


def test_open_missing_and_env_default(tmp_path, monkeypatch):
    with pytest.raises(FileNotFoundError, match="manifest.json not found"):
        Bundle.open(tmp_path)
    monkeypatch.delenv("FA4MLIR_BUNDLE", raising=False)
    with pytest.raises(ValueError, match="FA4MLIR_BUNDLE is unset"):
        Bundle.open()
    write_bundle(tmp_path, ARTIFACTS[:1])
    monkeypatch.setenv("FA4MLIR_BUNDLE", str(tmp_path))
    assert Bundle.open().names() == ["attn_fwd"]


def test_tampered_cubin_is_detected(tmp_path):
    b = Bundle.open(write_bundle(tmp_path, ARTIFACTS[:1]))
    (tmp_path / f"attn_fwd-{ARTIFACTS[0].key[:16]}.cubin").write_bytes(b"other")
    with pytest.raises(ValueError, match="sha256"):
        b.find(name="attn_fwd")


def _edit_manifest(root: Path, fn) -> None:
    manifest = json.loads((root / "manifest.json").read_text())
    fn(manifest["kernels"][0])
    (root / "manifest.json").write_text(json.dumps(manifest))


def _elf(sm: int) -> bytes:
    """The header of a 64-bit CUDA ELF built for sm_<sm> (CUDA ELF ABI 8: the SM in e_flags bits 8-15)."""
    image = bytearray(64)
    image[:9] = b"\x7fELF\x02\x01\x01\x41\x08"
    struct.pack_into("<H", image, 18, 190)
    struct.pack_into("<I", image, 48, 0x06000000 | sm << 8 | 2)
    return bytes(image)


def test_a_cubin_path_outside_the_bundle_is_refused(tmp_path):
    root = tmp_path / "b"
    write_bundle(root, ARTIFACTS[:1])
    (tmp_path / "secret").write_bytes(b"outside")
    for path in ("../secret", str(tmp_path / "secret"), "../../../../etc/hostname"):
        _edit_manifest(root, lambda e, path=path: e.__setitem__("cubin", path))
        with pytest.raises(ValueError, match="outside the bundle folder"):
            Bundle.open(root).find(name="attn_fwd")


def test_a_mislabelled_cubin_is_refused(tmp_path):
    """An sm_100 cubin in an entry that says sm_90a once passed lookup (and would fail to load, or
    worse, on the wrong GPU); the ELF header's SM must be the entry's arch."""
    from dataclasses import replace
    good = replace(ARTIFACTS[0], cubin=_elf(90))
    bad = replace(ARTIFACTS[1], cubin=_elf(100))           # labelled sm_90a
    b = Bundle.open(write_bundle(tmp_path, [good, bad]))
    assert b.find(name="attn_fwd", head_dim=64).cubin == _elf(90)
    with pytest.raises(ValueError, match="built for sm_100 but its metadata says sm_90a"):
        b.find(name="attn_fwd", head_dim=128, causal=False)


def test_an_entry_without_its_sha256_is_refused(tmp_path):
    """Without cubin_sha256 a non-causal call once launched the causal cubin: the hash is mandatory."""
    write_bundle(tmp_path, ARTIFACTS[:1])
    _edit_manifest(tmp_path, lambda e: e.pop("cubin_sha256"))
    with pytest.raises(ValueError, match="field 'cubin_sha256' must be a str, is missing"):
        Bundle.open(tmp_path)


@pytest.mark.parametrize("field, value, words", [
    ("name", 3, "field 'name' must be a str, is a int"), ("config", [], "field 'config' must be a dict"),
    ("params", None, "field 'params' must be a list"), ("block", "384", "field 'block' must be a list")])
def test_malformed_entries_are_typed_errors(tmp_path, field, value, words):
    write_bundle(tmp_path, ARTIFACTS[:1])
    _edit_manifest(tmp_path, lambda e: e.__setitem__(field, value))
    with pytest.raises(ValueError, match=words):
        Bundle.open(tmp_path)
    (tmp_path / "manifest.json").write_text(json.dumps({"format": "fa4mlir-bundle", "version": 1, "kernels": [7]}))
    with pytest.raises(ValueError, match="kernel entry #0 is a int"):
        Bundle.open(tmp_path)


BLOCK_MLIR = testing.BLOCK_MLIR + """
try:
    import mlir
except ImportError:
    pass
else:
    raise SystemExit("the mlir blocker does not work")
"""


def run_without_mlir(code: str, bundle_dir: Path) -> subprocess.CompletedProcess:
    script = BLOCK_MLIR + textwrap.dedent(code)
    return subprocess.run([sys.executable, "-c", script, str(bundle_dir)], cwd=REPO_ROOT,
                          env={"PYTHONPATH": str(REPO_ROOT), "PATH": "/usr/bin:/bin"},
                          capture_output=True, text=True, timeout=120)


def test_bundle_loads_with_mlir_unimportable(tmp_path):
    write_bundle(tmp_path, ARTIFACTS)
    proc = run_without_mlir("""
        import fa4mlir.runtime as rt
        import fa4mlir.cache
        b = rt.Bundle.open(sys.argv[1])
        a = b.find(name="attn_fwd", arch="sm_90a", head_dim=128, causal=True)
        assert a.cubin == b"cubin attn_fwd 128 True sm_90a", a.cubin
        assert a.params[0].tma.swizzle == "128B"
        assert a.smem_bytes == 128000
        assert "mlir" not in sys.modules, sorted(m for m in sys.modules if "mlir" in m)
        print("OK", a.key[:16])
    """, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("OK ")


def test_mlir_blocker_is_effective(tmp_path):
    proc = run_without_mlir("import mlir.ir\n", tmp_path)
    assert proc.returncode != 0 and "mlir is blocked" in proc.stderr


def test_parallel_compile_gives_the_serial_artifacts_in_order(tmp_path, monkeypatch):
    """`bundle --jobs N` (compiler.compile_entries): spawned workers, the entries' order, the same
    cubins as compiling one by one (each worker has its own empty cache here)."""
    pytest.importorskip("mlir")
    from fa4mlir import compiler, kernel_sets
    from fa4mlir.kernels.gemm_sm90 import GemmConfig
    monkeypatch.setenv("FA4MLIR_CACHE_DIR", str(tmp_path / "cache-parallel"))
    entries = [("gemm_sm90", GemmConfig(dtype="f16").validate()), ("gemm_sm90", GemmConfig(dtype="bf16").validate())]
    got = [art for art, seconds in compiler.compile_entries(entries, ["sm90"], 2)]
    monkeypatch.setenv("FA4MLIR_CACHE_DIR", str(tmp_path / "cache-serial"))
    want = [compiler.compile_kernel(name, cfg) for name, cfg in entries]
    assert [a.name for a in got] == [a.name for a in want] == ["gemm_sm90_f16_128x256x64_s4", "gemm_sm90_bf16_128x256x64_s4"]
    assert [a.cubin for a in got] == [a.cubin for a in want]
    assert kernel_sets.SETS["sm90"]   # the workers' initializer reads the named sets


def test_exact_find_tells_a_key_from_its_superset(tmp_path):
    """A kernel whose key leaves out unset fields (AttnConfig.varlen) holds every item of its plain
    variant's key: a subset query finds both, an exact one the plain kernel."""
    from dataclasses import replace
    plain = artifact(128, False)
    varlen = replace(plain, name="attn_fwd_varlen", key="f".ljust(64, "0"), config={**plain.config, "varlen": True})
    b = Bundle.open(write_bundle(tmp_path, [plain, varlen]))
    with pytest.raises(LookupError, match="2 kernels"):
        b.find(**plain.config)
    assert b.find(exact=True, **plain.config).name == "attn_fwd"
    assert b.find(exact=True, **varlen.config).name == "attn_fwd_varlen"
