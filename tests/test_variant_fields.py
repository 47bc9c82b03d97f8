"""Deviceless: one source for the variant fields (kernels/common/fields.py). Each kernel config declares the
fields a bundle lookup must match exactly once, beside the config; attention.plan.VARIANT_FIELDS (the
attention kernel's bundle lookup) and bench/sanitize.py's OPTIONAL_FIELDS (its kernels' union) are derived
from those declarations, and every field any config's key() leaves out must be declared, checked over every
entry of every bundle set: a new optional field forgotten in one place fails here (the list used to be kept
twice, and a field added to one of the copies only broke CI on the GPU).
"""
from __future__ import annotations

import dataclasses

import pytest

from bench import sanitize as san
from fa4mlir import kernel_sets
from fa4mlir.attention import plan
from fa4mlir.kernels import attention_sm90_config as acfg
from fa4mlir.kernels.common.fields import field_defaults, key_leaving_out, merge_variant_fields


def undeclared_left_out(cfg, declared: dict) -> list[str]:
    """Fields of ``cfg`` its key() lacks that ``declared`` does not name at ``cfg``'s value of them."""
    key = cfg.key()
    return [f.name for f in dataclasses.fields(cfg)
            if f.name not in key and (f.name not in declared or getattr(cfg, f.name) != declared[f.name])]


def test_plan_and_sanitize_read_the_configs_declarations():
    assert plan.VARIANT_FIELDS is acfg.VARIANT_FIELDS
    assert set(acfg.OPTIONAL_FIELDS) | set(acfg.MOD_FIELDS) <= set(acfg.VARIANT_FIELDS)
    for kernel, declared in san.VARIANT_FIELDS_BY_KERNEL.items():
        assert all(san.OPTIONAL_FIELDS.get(k, object()) == d for k, d in declared.items()), kernel
    assert san.OPTIONAL_FIELDS == merge_variant_fields(*san.VARIANT_FIELDS_BY_KERNEL.values())


def test_every_left_out_key_field_is_declared_over_every_bundle_set():
    seen = {}
    for kernel, cfg, *_ in kernel_sets.configs(list(kernel_sets.SETS)):
        if kernel in san.VARIANT_FIELDS_BY_KERNEL:
            assert undeclared_left_out(cfg, san.VARIANT_FIELDS_BY_KERNEL[kernel]) == [], (kernel, cfg)
            seen[kernel] = seen.get(kernel, 0) + 1
    assert set(seen) == set(san.VARIANT_FIELDS_BY_KERNEL), seen     # every such kernel has entries to check


def test_the_check_catches_an_undeclared_optional_field():
    @dataclasses.dataclass(frozen=True)
    class Fake:
        dtype: str = "bf16"
        newer: bool = False     # left out of key() at False, the way a new variant field is

        def key(self):
            return key_leaving_out(self, {"newer": False})
    assert undeclared_left_out(Fake(), {}) == ["newer"]
    assert undeclared_left_out(Fake(), field_defaults(Fake, ("newer",))) == []
    assert Fake(newer=True).key() == {"dtype": "bf16", "newer": True}


def test_field_tables_refuse_unknown_fields_and_two_defaults():
    with pytest.raises(ValueError, match="no field"):
        field_defaults(acfg.AttnConfig, ("softcapp",))
    with pytest.raises(ValueError, match="two defaults"):
        merge_variant_fields({"sinks": False}, {"sinks": 0.5})
