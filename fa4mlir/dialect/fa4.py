"""The fa4 dialect's module for the MLIR Python bindings' dialect lookup (no op classes: fa4 ops are
generic OpViews, built by fa4mlir.dialect.builders).

Before the bindings make a view of an op, they import the module of its dialect, `<prefix>.<dialect>`
for each dialect search prefix, and remember only a success. fa4 is registered through IRDL and has
no module under mlir.dialects, so every fa4 op a pass, the verifier or the interpreter looked at
cost a failed import (about 30 us; some 2,600 per sm_100a compile). `fa4mlir.dialect` is a search
prefix (fa4mlir/dialect/__init__.py) and this module exists, so the first lookup succeeds and sticks.
"""
