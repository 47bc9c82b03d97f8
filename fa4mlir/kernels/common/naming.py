"""Kernel-name tags of the softmax knobs (MLIR-free: the config modules import it)."""
from __future__ import annotations


def softmax_knob_tags(exp2_poly_stride: int, rescale_threshold: float, default_stride: int = 0,
                      default_threshold: float = 0.0) -> str:
    """'' at the defaults, else _poly{k} and/or _lazy{t}: t in its shortest exact spelling as a PTX
    identifier (8.0 -> 8, 7.5 -> 7p5, 1e-05 -> 1em05), so distinct configs get distinct names."""
    tags = f"_poly{exp2_poly_stride}" if exp2_poly_stride != default_stride else ""
    thr = float(rescale_threshold)
    if thr != float(default_threshold):
        text = f"{thr:g}" if float(f"{thr:g}") == thr else repr(thr)
        tags += "_lazy" + text.replace(".", "p").replace("-", "m").replace("+", "")
    return tags


__all__ = ["softmax_knob_tags"]
