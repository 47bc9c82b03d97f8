"""What every benchmark's JSON result shares (MLIR-free: it runs on the GPU machine)."""
from __future__ import annotations

from typing import Any


def check_header(result: Any, schema: str, kind: str, required: tuple, writer: str) -> None:
    """Raise ValueError unless `result` is a dict of `schema` holding every `required` key. `kind`
    names the result in the message ("an attention bench result"); `writer` the module that writes it."""
    if not isinstance(result, dict) or result.get("schema") != schema:
        got = result.get("schema") if isinstance(result, dict) else type(result).__name__
        raise ValueError(f"expected {kind} with schema {schema!r}, got {got!r}")
    missing = [k for k in required if k not in result]
    if missing:
        name = kind.split(" ", 1)[1]
        raise ValueError(f"{name} lacks {missing}; was it written by {writer}?")
