"""The compile-time fields and launch contract the sm_100a sparse MLA kernels share (MLIR-free): the one-CTA
kernel (attention_mla_sparse_sm100_config.MLASparseSm100Config) and the CTA pair
(attention_mla_sparse_sm100_pair_config.MLASparsePairConfig) differ in their kernel name, their TMEM / SMEM plans
and their TMA boxes, not in these."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from .constants import LOG2E

DTYPE = "bf16"              # q, kv and out (FlashMLA's sparse prefill)
OUTPUTS = (("out", "ptr"), ("max_logits", "ptr"), ("lse", "ptr"))
SCALARS = (("s_kv", "i32"), ("heads", "i32"), ("topk", "i32"), ("scale_log2", "f32"))


@dataclass(frozen=True)
class SparseSm100Fields:
    """topk_length and sinks present or not; a subclass names its KERNEL and checks its plans."""
    topk_length: bool = False
    sinks: bool = False
    KERNEL: ClassVar[str] = ""

    def validate(self) -> None:
        """TypeError unless both fields are bools; the plans must fit (ValueError otherwise)."""
        for field in ("topk_length", "sinks"):
            if not isinstance(getattr(self, field), bool):
                raise TypeError(f"{type(self).__name__}.{field} must be a bool, got {getattr(self, field)!r}")
        self.plans()

    def plans(self) -> None:
        """The kernel's TMEM and SMEM plans (ValueError where one does not fit)."""
        raise NotImplementedError

    def name(self) -> str:
        return f"{self.KERNEL}_{DTYPE}{'_topklen' if self.topk_length else ''}{'_sinks' if self.sinks else ''}"

    def key(self) -> dict:
        return {"kernel": self.KERNEL, **self.__dict__}

    @property
    def params(self) -> tuple:
        """(name, kind) in kernel-parameter order."""
        optional = (("topk_length", "ptr"),) * self.topk_length + (("sinks", "ptr"),) * self.sinks
        return (("q", "tma"), ("kv", "tma"), ("indices", "ptr"), *optional, *OUTPUTS, *SCALARS)


def sparse_launch_args(cfg: SparseSm100Fields, tensors: dict, heads_built: tuple, b_topk: int, *, s_kv: int,
                       heads: int, topk: int, softmax_scale: float) -> dict:
    """The kernel's parameters by name (both kernels' contract: ``tensors`` by the contract's names, q [s_q, h_q,
    576] and kv [s_kv, 576] for the descriptors; indices [s_q, topk], out [s_q, h_q, 512], lse and max_logits
    [s_q, h_q], contiguous); ValueError for h_q outside ``heads_built`` or topk not a multiple of ``b_topk``."""
    if heads not in heads_built:
        raise ValueError(f"heads={heads}: the sm_100a kernel {cfg.KERNEL} takes h_q in {heads_built}")
    if topk <= 0 or topk % b_topk:
        raise ValueError(f"topk={topk}: expected a positive multiple of {b_topk}")
    args = {n: tensors[n] for n, kind in cfg.params if kind in ("ptr", "tma")}
    args.update(s_kv=s_kv, heads=heads, topk=topk, scale_log2=float(softmax_scale) * LOG2E)
    return {n: args[n] for n, _ in cfg.params}


__all__ = ["DTYPE", "OUTPUTS", "SCALARS", "SparseSm100Fields", "sparse_launch_args"]
