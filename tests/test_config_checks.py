"""Deviceless: kernel configs are checked before anything uses them.

* Every field of every kernel config is checked against its annotated type first
  (kernels/common/fields.py): a flag given 'no' (which Python reads as true: causal='no' built the
  causal kernel), an int given 128.0 (which reached the PTX as '128.0' and died in ptxas) raise
  ConfigTypeError naming the field and what it takes; supported() gives the same reason.
* The compiler validates a config before it computes the cache key, and refuses another kernel's
  config.
* The cubin backend that honours setmaxnreg is kept whatever the environment says: a knob naming
  nvjitlink for an attention kernel raises BackendError with the fix, an explicit argument builds
  it with a SetmaxnregDroppedWarning, and nvjitlink-lto for an sm_90a kernel is refused up front.
* sm_100a's lazy rescale is capped as sm_90a's is: P reaches 2**threshold and must fit f16.
"""
import math
import warnings
from dataclasses import fields

import pytest

from fa4mlir import compiler, kernels
from fa4mlir.attention import plan
from fa4mlir.kernels import attention_sm90_config as acfg
from fa4mlir.kernels import deadlock_sm90, gemm_sm90, gemm_sm100
from fa4mlir.kernels.attention_sm100_config import FA4Config
from fa4mlir.kernels.attention_sm90_config import AttnConfig
from fa4mlir.kernels.common.constants import MAX_RESCALE_THRESHOLD
from fa4mlir.kernels.common.fields import KINDS, ConfigError, ConfigTypeError, RegisterBudgetError
from fa4mlir.lowering import BackendError, CompileOptions, SetmaxnregDroppedWarning
from fa4mlir.testing import raises

@pytest.fixture(autouse=True)
def _plain_environment(monkeypatch):
    for knob in ("FA4MLIR_CUBIN_BACKEND", "FA4MLIR_DUMP_DIR", "FA4MLIR_DEBUG"):
        monkeypatch.delenv(knob, raising=False)


CONFIGS = (AttnConfig, FA4Config, gemm_sm90.GemmConfig, gemm_sm100.GemmConfig, deadlock_sm90.DeadlockConfig)
# per annotation, values of another type (a bool is not an int; a number must be finite)
WRONG = {"bool": ["no", 1, None], "int": [128.0, True, "128"], "float": ["8", True, math.nan, math.inf],
         "str": [1, None, b"bf16"]}
CASES = [(cls, f.name, bad) for cls in CONFIGS for f in fields(cls) for bad in WRONG[f.type]]


def test_every_field_has_a_checked_kind():
    assert {f.type for cls in CONFIGS for f in fields(cls)} <= set(KINDS) == set(WRONG)
    assert len(CASES) > 100


@pytest.mark.parametrize("cls, name, bad", CASES, ids=[f"{c.__name__}.{n}={b!r}" for c, n, b in CASES])
def test_a_field_of_the_wrong_type_is_refused_naming_it(cls, name, bad):
    cfg = cls(**{name: bad})
    kind = next(f.type for f in fields(cls) if f.name == name)
    words = [f"{cls.__name__}.{name} must be {KINDS[kind][1]}", f"got {bad!r} ({type(bad).__name__})"]
    raises(ConfigTypeError, words, cfg.validate)
    if cls is FA4Config:
        ok, why = cfg.supported()
        assert not ok and all(w in why for w in words), why


def test_the_issue_cases():
    raises(ConfigTypeError, ["AttnConfig.causal must be a bool (True or False)", "got 'no'"],
           AttnConfig(causal="no").validate)
    raises(ConfigTypeError, ["AttnConfig.pingpong", "got 'off'"], AttnConfig(pingpong="off").validate)
    raises(ConfigTypeError, ["AttnConfig.head_dim must be an int, one of (64, 96, 128, 192, 256)", "got 128.0"],
           AttnConfig(head_dim=128.0).validate)
    raises(ConfigTypeError, ["FA4Config.causal", "got 'no'"], FA4Config(causal="no").validate)
    raises(ConfigTypeError, ["GemmConfig.bn must be an int", "got 128.0"], gemm_sm90.GemmConfig(bn=128.0).validate)
    # ints given to a float field are one config (one key, one kernel name), as 8 and 8.0 are
    for cls in (AttnConfig, FA4Config):
        assert cls(rescale_threshold=8).key() == cls(rescale_threshold=8.0).key()


def test_config_errors_are_value_errors():
    assert issubclass(ConfigError, ValueError) and issubclass(ConfigTypeError, TypeError)
    assert issubclass(ConfigTypeError, ConfigError)


def test_sm100_rescale_threshold_is_capped_as_sm90():
    """P reaches 2**threshold before it is stored as a 16-bit value: f16's largest finite is 65504."""
    for dtype in ("bf16", "f16"):
        assert FA4Config(dtype=dtype, rescale_threshold=MAX_RESCALE_THRESHOLD).supported() == (True, "")
        ok, why = FA4Config(dtype=dtype, rescale_threshold=16.0).supported()
        assert not ok and "rescale_threshold=16.0" in why and "fit f16" in why
    raises(ConfigError, ["rescale_threshold", "[0, 15.0]"], FA4Config(dtype="f16", rescale_threshold=20.0).validate)
    raises(ConfigError, ["[0, 15.0]"], AttnConfig(rescale_threshold=16.0).validate)


# ---- the compiler ----------------------------------------------------------------------------------
class _NoCache:
    """A kernel cache that builds nothing: what compile_kernel asks it for."""

    def __init__(self):
        self.keys = []

    def get_or_build(self, key, build):
        self.keys.append(key)
        return "artifact"


@pytest.fixture
def no_key(monkeypatch):
    """compute_key that fails the test when called."""
    def fail(*args, **kw):
        raise AssertionError("the cache key was computed for an invalid config")
    monkeypatch.setattr(compiler, "compute_key", fail)


@pytest.mark.parametrize("name, cfg, exc, words", [
    (acfg.KERNEL, AttnConfig(causal="no"), ConfigTypeError, ["AttnConfig.causal"]),
    (acfg.KERNEL, AttnConfig(bn=128.0), ConfigTypeError, ["AttnConfig.bn", "128.0"]),
    (acfg.KERNEL, AttnConfig(head_dim=256, bm=192, bn=64), RegisterBudgetError, ["registers per consumer thread", "bm=128"]),
    ("attention_fwd_sm100", FA4Config(bn=64), ConfigError, ["bn=64", "bn=128 only"]),
    ("gemm_sm90", AttnConfig(), ConfigError, ["AttnConfig is a config of 'attention_fwd_sm90', not of 'gemm_sm90'"]),
    ("gemm_sm90", object(), ConfigError, ["gemm_sm90: expected its config", "got object"]),
], ids=["flag-str", "int-float", "registers", "sm100-unsupported", "other-kernel", "not-a-config"])
def test_config_is_validated_before_the_key(no_key, name, cfg, exc, words):
    raises(exc, words, compiler.compile_kernel, name, cfg, cache=_NoCache())
    raises(exc, words, compiler.key_for, name, cfg, compiler.resolve_options(name))


def test_a_valid_config_reaches_the_cache():
    cache = _NoCache()
    assert compiler.compile_kernel(acfg.KERNEL, acfg.default_config("bf16", 128, False), cache=cache) == "artifact"
    assert len(cache.keys) == 1


# ---- the cubin backend ------------------------------------------------------------------------------
ATTENTION = ("attention_fwd_sm90", "attention_fwd_sm100")


def test_the_environment_cannot_pick_a_backend_that_drops_setmaxnreg(monkeypatch):
    monkeypatch.setenv("FA4MLIR_CUBIN_BACKEND", "nvjitlink")
    for name in ATTENTION:
        assert kernels.needs_setmaxnreg(name)
        raises(BackendError, ["FA4MLIR_CUBIN_BACKEND=nvjitlink", f"{name}'s register split needs setmaxnreg",
                              "spill", "Unset FA4MLIR_CUBIN_BACKEND", kernels.cubin_backend(name),
                              "cubin_backend='nvjitlink'"], compiler.resolve_options, name)
    assert compiler.resolve_options("gemm_sm90").cubin_backend == "nvjitlink"   # fits without its split
    # flash_attn_func's compiler source: refused before anything is built
    source = plan.KernelSource(None)
    raises(BackendError, ["FA4MLIR_CUBIN_BACKEND=nvjitlink"], source.artifact, acfg.default_config("bf16", 64, True))
    for backend in ("ptxas", "nvjitlink-lto"):
        monkeypatch.setenv("FA4MLIR_CUBIN_BACKEND", backend)
        assert compiler.resolve_options("attention_fwd_sm100").cubin_backend == backend


def test_nvjitlink_lto_is_refused_before_sm100(monkeypatch):
    monkeypatch.setenv("FA4MLIR_CUBIN_BACKEND", "nvjitlink-lto")
    for name in ("gemm_sm90", "attention_fwd_sm90"):
        raises(BackendError, ["'nvjitlink-lto' (from FA4MLIR_CUBIN_BACKEND=nvjitlink-lto)", "sm_90a",
                              "sm_100 and later", "unset FA4MLIR_CUBIN_BACKEND"], compiler.resolve_options, name)
    monkeypatch.delenv("FA4MLIR_CUBIN_BACKEND")
    raises(BackendError, ["sm_100 and later", "Use 'ptxas'"], compiler.resolve_options, "attention_fwd_sm90",
           "nvjitlink-lto")


def test_an_explicit_backend_that_drops_setmaxnreg_builds_with_a_warning(monkeypatch):
    monkeypatch.setenv("FA4MLIR_CUBIN_BACKEND", "ptxas")
    for name in ATTENTION:
        with pytest.warns(SetmaxnregDroppedWarning, match="asked for explicitly.*spill"):
            assert compiler.resolve_options(name, cubin_backend="nvjitlink").cubin_backend == "nvjitlink"
    cfg = acfg.default_config("bf16", 128, False)
    with pytest.warns(SetmaxnregDroppedWarning):
        compiler.compile_kernel(acfg.KERNEL, cfg, CompileOptions(cubin_backend="nvjitlink"), cache=_NoCache())
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        compiler.compile_kernel(acfg.KERNEL, cfg, CompileOptions(cubin_backend="ptxas"), cache=_NoCache())
        compiler.resolve_options("gemm_sm90", cubin_backend="nvjitlink")
