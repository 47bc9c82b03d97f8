"""Deviceless: the import rules of fa4mlir (fa4mlir/__init__.py, "Import rules"), checked on the
source of every module under fa4mlir/ by parsing its imports (ast; nothing is imported).

Every import counts, at module level or inside a function: a lazy import is still a dependency.
"No MLIR" is transitive (a module that imports a module that imports fa4mlir._mlir imports MLIR,
and importing a.b.c runs a/__init__.py and a/b/__init__.py too); the package rules are direct.
"""
from __future__ import annotations

import ast
from functools import lru_cache
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "fa4mlir"

# Pure-Python host modules: the runtime side that runs a bundle without MLIR.
HOST = ("fa4mlir", "fa4mlir.runtime", "fa4mlir.driver", "fa4mlir.artifacts", "fa4mlir.tensors", "fa4mlir.env",
        "fa4mlir.cache")
# Compiler layers the host modules must not reach.
COMPILER = ("fa4mlir._mlir", "fa4mlir.dsl", "fa4mlir.dialect", "fa4mlir.passes", "fa4mlir.lowering",
            "fa4mlir.compiler", "fa4mlir.kernels", "fa4mlir.interpret")
# Pure-Python kernel pieces: the configs (the host API imports them) and the common/ modules that
# hold numbers and host-side math. The other common/ modules build IR through the DSL.
PURE_KERNEL_PIECES = ("fa4mlir.kernels.attention_sm90_config", "fa4mlir.kernels.attention_sm90_config_varlen",
                      "fa4mlir.kernels.attention_sm100_config",
                      "fa4mlir.kernels.attention_decode_sm90_config", "fa4mlir.kernels.attention_mla_decode_sm90_config",
                      "fa4mlir.kernels.attention_mla_sparse_sm90_config", "fa4mlir.kernels.attention_mla_sparse_sm100_config",
                      "fa4mlir.kernels.attention_mla_sparse_sm100_pair_config",
                      "fa4mlir.kernels.common.constants", "fa4mlir.kernels.common.fastdiv",
                      "fa4mlir.kernels.common.naming", "fa4mlir.kernels.common.tmem",
                      "fa4mlir.kernels.common.paging", "fa4mlir.kernels.common.decode_schedule",
                      "fa4mlir.kernels.common.decode_balanced",
                      "fa4mlir.kernels.common.mask_family", "fa4mlir.kernels.common.score_mod",
                      "fa4mlir.kernels.common.varlen_compact")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PKG.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {_module_name(p): p for p in sorted(PKG.rglob("*.py")) if "__pycache__" not in p.parts}


def _is_package(name: str) -> bool:
    return MODULES.get(name, Path()).name == "__init__.py"


def _resolve(module: str, node: ast.ImportFrom) -> list[str]:
    """The absolute module names a `from ... import ...` statement in `module` loads."""
    if node.level:
        base = module.split(".") if _is_package(module) else module.split(".")[:-1]
        base = base[:len(base) - (node.level - 1)]
        target = ".".join(base + ([node.module] if node.module else []))
    else:
        target = node.module
    out = [target]
    for alias in node.names:  # `from pkg import sub` loads pkg.sub when it is a module
        if f"{target}.{alias.name}" in MODULES:
            out.append(f"{target}.{alias.name}")
    return out


def _dynamic_import(node: ast.Call) -> str | None:
    """The literal prefix of importlib.import_module("...") / f"bench.{x}" (None when not such a call)."""
    f = node.func
    name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
    if name not in ("import_module", "__import__") or not node.args:
        return None
    arg = node.args[0]
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
        return arg.value
    if isinstance(arg, ast.JoinedStr) and arg.values and isinstance(arg.values[0], ast.Constant):
        return arg.values[0].value
    return None


@lru_cache(maxsize=None)
def imports(module: str) -> frozenset[str]:
    """Every module name `module` imports (absolute; external ones as written)."""
    found = set()
    for node in ast.walk(ast.parse(MODULES[module].read_text(), str(MODULES[module]))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            found.update(_resolve(module, node))
        elif isinstance(node, ast.Call) and (name := _dynamic_import(node)) is not None:
            found.add(name)
    return frozenset(found)


def _parents(name: str) -> list[str]:
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def _within(name: str, prefixes) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def _path_to_mlir(module: str) -> list[str] | None:
    """An import chain from `module` to MLIR (mlir or fa4mlir._mlir), or None."""
    seen, stack = {module}, [[module]]
    while stack:
        chain = stack.pop()
        for dep in imports(chain[-1]):
            if _within(dep, ("mlir", "fa4mlir._mlir")):
                return chain + [dep]
            for m in _parents(dep) + [dep]:
                if m in MODULES and m not in seen:
                    seen.add(m)
                    stack.append(chain + [m])
    return None


def _violations(modules, forbidden) -> list[str]:
    return [f"{m} imports {d}" for m in modules for d in sorted(imports(m)) if _within(d, forbidden)]


def test_the_parser_sees_the_imports_it_checks():
    """Guard against a rule passing because nothing was found."""
    assert "fa4mlir.passes._util" in MODULES and "fa4mlir.kernels.common.tmem" in MODULES
    assert "fa4mlir.dialect.query" in imports("fa4mlir.passes._util")
    assert "fa4mlir.kernels.common.constants" in imports("fa4mlir.kernels.attention_sm90_config")
    assert "fa4mlir.dsl" in imports("fa4mlir.kernels.common.masks")
    assert "fa4mlir.artifacts" in imports("fa4mlir.cache")
    assert _path_to_mlir("fa4mlir.kernels.common.masks") is not None


@pytest.mark.parametrize("module", HOST)
def test_host_modules_import_no_mlir_and_no_compiler(module):
    assert _path_to_mlir(module) is None, " -> ".join(_path_to_mlir(module))
    assert not _violations([module], COMPILER)


def test_front_end_reaches_kernels_through_configs_and_the_compiler_only():
    """The entry points (fa4mlir/attention/) read kernel configs (launch contracts, tile tables) and
    the kernel table, and call the compiler (lazily: the 'else the compiler' kernel source); they
    import no IR layer themselves (test_attention_api checks that importing them loads no MLIR)."""
    mods = [m for m in MODULES if _within(m, ("fa4mlir.attention",))]
    assert len(mods) >= 5
    assert not _violations(mods, ("fa4mlir._mlir", "mlir", "fa4mlir.dsl", "fa4mlir.dialect", "fa4mlir.passes",
                                  "fa4mlir.lowering"))
    kernel_deps = {d for m in mods for d in imports(m) if _within(d, ("fa4mlir.kernels",))}
    assert kernel_deps <= {"fa4mlir.kernels"} | set(PURE_KERNEL_PIECES), kernel_deps


@pytest.mark.parametrize("module", PURE_KERNEL_PIECES)
def test_configs_and_pure_common_pieces_import_no_mlir(module):
    chain = _path_to_mlir(module)
    assert chain is None, " -> ".join(chain)


def test_dialect_imports_only_mlir():
    mods = [m for m in MODULES if _within(m, ("fa4mlir.dialect",))]
    assert not _violations(mods, ("fa4mlir.dsl", "fa4mlir.passes", "fa4mlir.kernels", "fa4mlir.lowering",
                                  "fa4mlir.compiler", "fa4mlir.runtime"))


def test_dsl_imports_no_passes_or_kernels():
    mods = [m for m in MODULES if _within(m, ("fa4mlir.dsl",))]
    assert not _violations(mods, ("fa4mlir.passes", "fa4mlir.kernels", "fa4mlir.lowering", "fa4mlir.compiler"))


def test_passes_import_no_kernels_or_lowering():
    mods = [m for m in MODULES if _within(m, ("fa4mlir.passes",))]
    assert not _violations(mods, ("fa4mlir.kernels", "fa4mlir.lowering", "fa4mlir.compiler", "fa4mlir.dsl"))


def test_kernels_import_no_passes_or_lowering():
    mods = [m for m in MODULES if _within(m, ("fa4mlir.kernels",))]
    assert not _violations(mods, ("fa4mlir.passes", "fa4mlir.lowering", "fa4mlir.compiler"))


def test_common_pieces_import_no_kernel_module():
    """kernels/common/ is shared by the kernels: it imports none of them (nor their configs)."""
    mods = [m for m in MODULES if _within(m, ("fa4mlir.kernels.common",))]
    kernel_modules = [m for m in MODULES if _within(m, ("fa4mlir.kernels",))
                      and not _within(m, ("fa4mlir.kernels.common",)) and m != "fa4mlir.kernels"]
    assert not _violations(mods, kernel_modules)


def test_configs_share_through_common_only():
    """A config imports no other kernel module (the sm_100a config once took LOG2E from the sm_90a
    one): what two configs share lives in kernels/common/."""
    configs = [m for m in MODULES if m.startswith("fa4mlir.kernels.") and m.endswith("_config")]
    others = [m for m in MODULES if _within(m, ("fa4mlir.kernels",)) and m != "fa4mlir.kernels"
              and not _within(m, ("fa4mlir.kernels.common",))]
    assert len(configs) >= 2 and not _violations(configs, others)


def test_only_tests_import_the_interpreter():
    """fa4mlir.interpret sits on top (it runs the compiler's stages): nothing in the package imports it."""
    assert "fa4mlir.interpret.machine" in MODULES
    others = [m for m in MODULES if not _within(m, ("fa4mlir.interpret",))]
    assert not _violations(others, ("fa4mlir.interpret",))


def test_no_module_imports_bench():
    """bench/ is the checkout's developer probes; what `python -m fa4mlir bench` runs is
    fa4mlir/bench/, part of the package."""
    assert any(d.startswith("fa4mlir.bench.") for d in imports("fa4mlir.__main__"))   # the parser sees it
    assert not _violations(list(MODULES), ("bench",))


@pytest.mark.parametrize("module", ("fa4mlir.bench.timers", "fa4mlir.bench.decode_bench", "fa4mlir.bench.prefill_bench",
                                    "fa4mlir.bench.prefill_workloads"))
def test_serving_benches_import_no_mlir(module):
    """The serving benchmarks reach fa4mlir only through the package's lazy entry points
    (`import fa4mlir; fa4mlir.flash_attn_func`), so no import chain leads to the compiler."""
    chain = _path_to_mlir(module)
    assert chain is None, " -> ".join(chain)
