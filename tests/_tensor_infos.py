"""TensorInfos for the deviceless front-end tests (test_attention_api.py, test_kvcache_operand.py): the
descriptions of tensors the host checks read, with no tensor behind them."""
from __future__ import annotations

from fa4mlir.runtime import TensorInfo

PTR = 0x7F0000000000     # a 16-byte aligned device address


def contiguous(shape):
    """Row-major element strides of `shape` (a dimension of 0 counts as 1)."""
    strides, acc = [], 1
    for n in reversed(shape):
        strides.append(acc)
        acc *= max(n, 1)
    return tuple(reversed(strides))


def info(shape, dtype="bf16", strides=None, ptr=PTR, device="cuda"):
    """A TensorInfo of `shape` (contiguous unless `strides`) at `ptr` on `device`."""
    return TensorInfo(ptr, tuple(shape), tuple(strides) if strides else contiguous(shape), dtype, device)
