"""Deliberately broken kernels for the verifier's seeded-bug suite (tests/test_seeded_bugs.py)."""
