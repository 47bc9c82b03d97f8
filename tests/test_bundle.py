"""Deviceless tests of kernel bundles: round-trip, lookup, format checks, loading without MLIR."""

import json
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
