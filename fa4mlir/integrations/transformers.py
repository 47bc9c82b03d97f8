"""attn_implementation="fa4mlir" for Hugging Face transformers (5.x) models.

    import fa4mlir.integrations.transformers as fa4mlir_hf
    fa4mlir_hf.register()                        # once per process
    model = AutoModelForCausalLM.from_pretrained(name, attn_implementation="fa4mlir", dtype=torch.bfloat16)
    # or, on a built model: model.set_attn_implementation("fa4mlir")

transformers reaches attention through two registries, both keyed by the config's
``_attn_implementation`` (transformers/modeling_utils.py, ``AttentionInterface``;
transformers/masking_utils.py, ``AttentionMaskInterface``, read by ``create_causal_mask`` and
``create_bidirectional_mask``). ``register`` puts ``attention_forward`` in the first and
``attention_mask`` in the second. The mask entry matters: for a name the mask registry lacks,
``_preprocess_mask_arguments`` returns no mask at all, so a padding mask would be dropped silently.
``attention_mask`` builds nothing (no dense [batch, 1, q, kv] mask): for a plain causal or full
mask, or transformers' own sliding-window causal mask (``sliding_window_causal_mask_function``,
recognised by its structure and checked against the call's ``local_size``), over a cache whose keys
end at the last query (the tokens seen plus the new ones; a sliding layer's cache may have dropped
the oldest), it returns None, and for anything else the kernel cannot do yet (padding, chunked or
packed-sequence masks, extra mask functions, a static cache whose unfilled slots would need
masking) it raises ``UnsupportedFeatureError`` saying what and what to use instead.

``attention_forward`` gets the module's query [batch, heads, seqlen_q, head_dim] and key and value
[batch, kv_heads, seqlen_k, head_dim] (transformers does not repeat GQA heads for a registered
function: the kernel reads kv_heads directly), takes them as [batch, seqlen, heads, head_dim] views
(no copy), uses the module's ``scaling`` and its ``is_causal`` (or the call's), and returns the
output [batch, seqlen_q, heads, head_dim] and no weights. Decoding with a KV cache (seqlen_q <
seqlen_k) needs the causal mask aligned bottom-right, which is the kernel's. The module's
``sliding_window`` W (Mistral, Gemma-2/3, gpt-oss: key j is seen by query i iff i - W < j <= i) runs
as ``window_size=(W - 1, 0)``, its ``softcap`` (Gemma-2's attn_logit_softcapping, applied to the
scaled scores) as ``softcap=``, and ``s_aux`` (gpt-oss's learned sinks, [heads]) as ``sinks=``
(float32). Windows are compile-time: the bundle must hold the kernel of each window a model uses (a
missing one is a BundleError naming it). Dropout in training, a position bias, a paged cache or a
mask tensor raise ``UnsupportedFeatureError``; an input that requires grad raises
``AutogradError`` (no backward yet: generate() runs under no_grad).
"""
from __future__ import annotations

import torch

from ..attention.dense import flash_attn_func
from ..attention.errors import UnsupportedFeatureError

NAME = "fa4mlir"


def _unsupported(what: str, instead: str) -> UnsupportedFeatureError:
    return UnsupportedFeatureError(f"attn_implementation={NAME!r}: {what} is not supported yet; {instead}")


def sliding_window_of(mask_function) -> int | None:
    """W when ``mask_function`` is transformers' ``sliding_window_causal_mask_function(W)``
    (``and_masks(sliding_window_overlay(W), causal_mask_function)``), else None. Read from the
    closures' structure: anything else (an extra and/or mask, a packed-sequence remap) is not it."""
    from transformers.masking_utils import causal_mask_function
    if getattr(mask_function, "__qualname__", "") != "and_masks.<locals>.and_mask" or not mask_function.__closure__:
        return None
    cells = dict(zip(mask_function.__code__.co_freevars, (c.cell_contents for c in mask_function.__closure__)))
    parts = cells.get("mask_functions")
    if not isinstance(parts, tuple) or len(parts) != 2 or parts[1] is not causal_mask_function:
        return None
    overlay = parts[0]
    if getattr(overlay, "__qualname__", "") != "sliding_window_overlay.<locals>.inner_mask" or not overlay.__closure__:
        return None
    window = dict(zip(overlay.__code__.co_freevars, (c.cell_contents for c in overlay.__closure__))).get("sliding_window")
    return window if isinstance(window, int) and window > 0 else None


def attention_mask(batch_size: int, q_length: int, kv_length: int, q_offset=0, kv_offset: int = 0,
                   mask_function=None, attention_mask: torch.Tensor | None = None, local_size: int | None = None,
                   **kwargs):
    """The AttentionMaskInterface entry: None (the kernel's causal flag and window, or no mask, do it
    all), else UnsupportedFeatureError. Never materialises a mask."""
    from transformers.masking_utils import bidirectional_mask_function, causal_mask_function
    window = sliding_window_of(mask_function)
    causal = mask_function is causal_mask_function or window is not None
    if mask_function is not None and not causal and mask_function is not bidirectional_mask_function:
        raise _unsupported(f"a mask other than causal, full or transformers' sliding-window causal one "
                           f"({getattr(mask_function, '__name__', mask_function)}: chunked attention, packed "
                           f"sequences or an extra mask function)",
                           "use attn_implementation='sdpa' for this model or input")
    if window is not None and local_size is not None and local_size != window:
        raise _unsupported(f"a sliding-window mask of {window} tokens called with local_size={local_size}",
                           "use attn_implementation='sdpa' for this model or input")
    # The cache first: a static cache's kv_length is its capacity, which generate()'s 2-D mask does not
    # span, so the padding check below would misname it. The kernel aligns the mask bottom-right: the
    # keys must end at the last query. A sliding layer's cache may start later (its oldest tokens
    # dropped: kv_offset > 0); a full layer's holds every token seen.
    if causal and (isinstance(q_offset, torch.Tensor) or kv_offset + kv_length != q_offset + q_length
                   or (window is None and kv_offset != 0)):
        raise _unsupported(f"a KV cache whose length ({kv_length}) is not the tokens seen plus the new ones "
                           f"(a static or sliding cache: its unfilled slots need a mask)",
                           "use the default DynamicCache (cache_implementation=None)")
    if attention_mask is not None:
        attention_mask = attention_mask[:, kv_offset:kv_offset + kv_length]   # absolute positions
        if attention_mask.shape[-1] != kv_length or not bool(attention_mask.all()):
            raise _unsupported("a padding mask (attention_mask with zeros)",
                               "run one sequence per call, or batch sequences of equal length without padding "
                               "(flash_attn_varlen_func will take padded batches)")
    return None


def attention_forward(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                      attention_mask: torch.Tensor | None, dropout: float = 0.0, scaling: float | None = None,
                      sliding_window: int | None = None, softcap: float | None = None, is_causal: bool | None = None,
                      s_aux: torch.Tensor | None = None, **kwargs) -> tuple[torch.Tensor, None]:
    """The AttentionInterface entry: fa4mlir.flash_attn_func on the module's query, key, value."""
    if attention_mask is not None:
        raise _unsupported(f"an attention mask tensor (shape {tuple(attention_mask.shape)}: padding or a custom "
                           f"4-D mask)", "pass no padding mask, or use attn_implementation='sdpa'")
    if dropout:
        raise _unsupported(f"attention dropout ({dropout})", "call model.eval(), or set attention_dropout=0.0")
    for what, value_ in (("a position bias", kwargs.get("position_bias")), ("a paged cache", kwargs.get("cache"))):
        if value_ is not None:
            raise _unsupported(what, "use attn_implementation='sdpa' for this model")
    causal = bool(is_causal if is_causal is not None else getattr(module, "is_causal", True))
    window = (-1, -1)
    if sliding_window is not None:
        if not causal:
            raise _unsupported(f"a bidirectional sliding window ({sliding_window})",
                               "use attn_implementation='sdpa' for this model")
        window = (int(sliding_window) - 1, 0)   # i - W < j <= i
    sinks = None if s_aux is None else s_aux.detach().to(torch.float32)
    out = flash_attn_func(query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2),
                          softmax_scale=scaling, causal=causal, window_size=window, softcap=float(softcap or 0.0),
                          sinks=sinks)
    return out, None


def register(name: str = NAME) -> str:
    """Register ``name`` (default "fa4mlir") in transformers' AttentionInterface and
    AttentionMaskInterface; returns the name, for ``attn_implementation=``."""
    from transformers import AttentionInterface, AttentionMaskInterface
    AttentionInterface.register(name, attention_forward)
    AttentionMaskInterface.register(name, attention_mask)
    return name


__all__ = ["register", "attention_forward", "attention_mask", "NAME"]
