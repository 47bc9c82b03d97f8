"""The fa4 dialect: op table (ops.py), registration, and Python builders (builders.py)."""
from __future__ import annotations

from .._mlir import ir, irdl
from .ops import OPS, OPS_BY_NAME, OpDef, irdl_source

_IRDL_TEXT = irdl_source()

# The bindings find fa4's (empty) dialect module, fa4mlir/dialect/fa4.py, under this prefix and stop
# looking for it on every fa4 op view (see that module).
if __name__ not in ir._globals.dialect_search_modules:
    ir._globals.append_dialect_search_prefix(__name__)


def load(ctx: ir.Context) -> None:
    """Register the fa4 dialect (IRDL) in `ctx`."""
    with ctx, ir.Location.unknown():
        irdl.load_dialects(ir.Module.parse(_IRDL_TEXT))


def new_context() -> ir.Context:
    """A context with every upstream dialect fa4mlir uses and the fa4 dialect loaded."""
    ctx = ir.Context()
    load(ctx)
    return ctx


__all__ = ["OPS", "OPS_BY_NAME", "OpDef", "load", "new_context", "irdl_source"]

from . import builders  # noqa: E402, F401  (per-op Python builders, loaded with the package)
