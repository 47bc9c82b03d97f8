"""Command-line tools: `fa4mlir-opt` (opt.py), the mlir-opt of the fa4 passes."""
