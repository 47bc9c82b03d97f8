"""Global memory as the caller's numpy arrays, and TMA descriptors over them.

A `TensorMap` is what cuTensorMapEncodeTiled makes of a tensor and a `TmaSpec` (the runtime's
`tma_encoding`): the array's dims innermost first, the box, the swizzle, the out-of-bounds fill.
A box load reads the elements inside the tensor and fills the rest with zeros (oob_fill "zero";
"nan" fills NaN), a box store writes only the elements inside it: the clipping the hardware does.
In shared memory a box is rows of box[0] elements (the innermost extent) packed one after the
other, each byte address under the descriptor's swizzle (PTX ISA §5.5 "Tensor layouts").

Pointer parameters (kind "ptr") get a made-up global address per array; `GlobalMemory` maps
addresses back to the arrays' bytes, and an access outside every array is a fault.
"""
from __future__ import annotations

import numpy as np

from ..artifacts import SWIZZLE_BYTES, TmaSpec
from .faults import Fault, Unsupported
from .numeric import swizzle

GLOBAL_BASE = 0x7000_0000_0000
GLOBAL_STRIDE = 1 << 36


class TensorMap:
    """One TMA descriptor: `array` (outermost dim first, C-contiguous) as `spec` describes it."""

    def __init__(self, array: np.ndarray, spec: TmaSpec, name: str = "?"):
        if not isinstance(array, np.ndarray) or not array.flags.c_contiguous:
            raise TypeError(f"TMA param {name!r}: expected a C-contiguous numpy array, got {type(array).__name__}")
        if array.dtype.itemsize != spec.elem_bytes:
            raise TypeError(f"TMA param {name!r}: {spec.dtype} elements are {spec.elem_bytes} bytes, the array's "
                            f"dtype {array.dtype} has {array.dtype.itemsize} (bf16 travels as uint16 bits)")
        if array.ndim != len(spec.box):
            raise ValueError(f"TMA param {name!r}: rank {array.ndim} (shape {array.shape}) does not match the box "
                             f"{spec.box}; reshape the array to rank {len(spec.box)}")
        self.array, self.spec, self.name = array, spec, name
        self.dims = tuple(reversed(array.shape))            # innermost first, as the descriptor
        self.box = spec.box
        self.span = SWIZZLE_BYTES[spec.swizzle]
        self.row_bytes = self.box[0] * spec.elem_bytes
        if self.span and self.row_bytes != self.span:
            raise Unsupported(f"TMA param {name!r}: a {self.row_bytes}-byte box row under the {spec.swizzle} "
                              f"swizzle (only rows of exactly the swizzle span are modelled)")
        self.rows = int(np.prod(self.box[1:], dtype=np.int64))

    @property
    def box_bytes(self) -> int:
        return self.spec.box_bytes

    def _index(self, coords):
        """Clipped indices of the box at `coords` (innermost first) and the in-bounds mask, both
        shaped as the box outermost first."""
        ranges = [np.arange(c, c + b) for c, b in zip(reversed(coords), reversed(self.box))]
        grids = np.ix_(*ranges)
        inside = np.ones(tuple(reversed(self.box)), bool)
        clipped = []
        for g, n in zip(grids, self.array.shape):
            inside &= (g >= 0) & (g < n)
            clipped.append(np.clip(g, 0, n - 1))
        return tuple(clipped), inside

    def smem_addresses(self, dst: int, rows: int | None = None) -> np.ndarray:
        """The shared-memory byte address of every byte of the box, [row, byte in row] (`rows`: the
        box rows the copy writes, when not the descriptor's: 4 for a gather4)."""
        rows = self.rows if rows is None else rows
        raw = dst + np.arange(rows)[:, None] * self.row_bytes + np.arange(self.row_bytes)[None, :]
        return swizzle(raw, self.span)

    def load_box(self, coords) -> np.ndarray:
        """The box's bytes [rows, row_bytes], out-of-bounds elements filled."""
        index, inside = self._index(coords)
        fill = np.nan if self.spec.oob_fill == "nan" and self.array.dtype.kind == "f" else 0
        values = np.where(inside, self.array[index], np.array(fill).astype(self.array.dtype))
        return np.ascontiguousarray(values.astype(self.array.dtype)).view(np.uint8).reshape(self.rows, self.row_bytes)

    def store_box(self, coords, data: np.ndarray) -> int:
        """Write the box's in-bounds elements from `data` (bytes [rows, row_bytes]); returns bytes written."""
        index, inside = self._index(coords)
        values = np.ascontiguousarray(data).view(self.array.dtype).reshape(inside.shape)
        full = tuple(np.broadcast_to(i, inside.shape) for i in index)
        sel = np.nonzero(inside)
        self.array[tuple(i[sel] for i in full)] = values[sel]
        return int(inside.sum()) * self.array.dtype.itemsize


class GlobalMemory:
    """Pointer parameters' arrays at made-up addresses, read and written as bytes."""

    def __init__(self):
        self.regions: list[tuple[int, np.ndarray, str]] = []

    def add(self, array: np.ndarray, name: str) -> int:
        if not isinstance(array, np.ndarray) or not array.flags.c_contiguous:
            raise TypeError(f"pointer param {name!r}: expected a C-contiguous numpy array, got {type(array).__name__}")
        base = GLOBAL_BASE + GLOBAL_STRIDE * len(self.regions)
        self.regions.append((base, array.reshape(-1).view(np.uint8), name))
        return base

    def _find(self, addr: int, nbytes: int):
        i = (addr - GLOBAL_BASE) // GLOBAL_STRIDE      # the region a made-up address can be in
        for base, flat, name in self.regions[i:i + 1] if 0 <= i < len(self.regions) else ():
            if base <= addr < base + flat.size:
                if addr + nbytes > base + flat.size:
                    raise Fault(f"global access of {nbytes} bytes at {name}+{addr - base} runs past its "
                                f"{flat.size} bytes")
                return flat, addr - base
        raise Fault(f"global access at {addr:#x}: no pointer parameter's array holds that address")

    def write(self, addr: int, data: np.ndarray) -> None:
        flat, off = self._find(addr, data.size)
        flat[off:off + data.size] = data

    def read(self, addr: int, nbytes: int) -> np.ndarray:
        flat, off = self._find(addr, nbytes)
        return flat[off:off + nbytes].copy()

    def _lanes(self, addrs: np.ndarray, nbytes: int):
        """(region bytes, [lane, byte] index) when every lane's `nbytes` at `addrs` lie in one array, else
        None (the per-lane path then names the lane's fault)."""
        if not addrs.size:
            return None
        lo, hi = int(addrs.min()), int(addrs.max())
        i = (lo - GLOBAL_BASE) // GLOBAL_STRIDE
        if not 0 <= i < len(self.regions):
            return None
        base, flat, _ = self.regions[i]
        if lo < base or hi + nbytes > base + flat.size:
            return None
        return flat, (addrs.astype(np.int64) - base)[:, None] + np.arange(nbytes)

    def read_lanes(self, addrs: np.ndarray, nbytes: int) -> np.ndarray:
        """[lane, byte]: `nbytes` at each address of `addrs` (one gather when they share an array)."""
        found = self._lanes(addrs, nbytes)
        if found is not None:
            return found[0][found[1]]
        return np.stack([self.read(int(a), nbytes) for a in addrs]) if addrs.size else \
            np.zeros((0, nbytes), np.uint8)

    def write_lanes(self, addrs: np.ndarray, data: np.ndarray) -> None:
        """Each lane's bytes data[lane] at addrs[lane], in lane order (a later lane's bytes win)."""
        found = self._lanes(addrs, data.shape[1])
        if found is not None:
            found[0][found[1]] = data
            return
        for addr, row in zip(addrs, data):
            self.write(int(addr), row)


__all__ = ["TensorMap", "GlobalMemory"]
