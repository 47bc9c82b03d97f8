"""Integrations with other frameworks, each imported only when asked for (each imports its
framework; importing fa4mlir imports none of them).

    transformers.py   register(): attn_implementation="fa4mlir" for Hugging Face transformers models
"""
