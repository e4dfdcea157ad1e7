"""Tiny real models of several architectures, built from configs (random weights, no download) with
the tests' BPE tokenizer: each with grouped key/value heads, and the sliding windows short enough
(16 tokens) that they matter over a game's prompt of hundreds of tokens."""

from __future__ import annotations

from typing import Any, Callable

import torch
import transformers

from tiny import tiny_tokenizer

WINDOW = 16
SHAPE = dict(hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2,
             max_position_embeddings=8192, initializer_range=0.1)  # wider than the default 0.02: sharper choices


def _llama(vocab: int, **ids: int) -> Any:
    return transformers.LlamaConfig(vocab_size=vocab, num_hidden_layers=2, **SHAPE, **ids)


def _gemma3(vocab: int, **ids: int) -> Any:  # two sliding-window layers, then a full one (Gemma 3 has five to one)
    return transformers.Gemma3TextConfig(vocab_size=vocab, num_hidden_layers=3, head_dim=16, query_pre_attn_scalar=16,
                                         sliding_window=WINDOW, layer_types=["sliding_attention"] * 2 + ["full_attention"],
                                         **SHAPE, **ids)


def _qwen3(vocab: int, **ids: int) -> Any:
    return transformers.Qwen3Config(vocab_size=vocab, num_hidden_layers=2, head_dim=16, **SHAPE, **ids)


def _qwen2_window(vocab: int, **ids: int) -> Any:  # Qwen2's own mix: full attention below max_window_layers, sliding above
    return transformers.Qwen2Config(vocab_size=vocab, num_hidden_layers=2, use_sliding_window=True,
                                    sliding_window=WINDOW, max_window_layers=1, **SHAPE, **ids)


def _phi3(vocab: int, **ids: int) -> Any:  # every layer sliding, one mask for all
    return transformers.Phi3Config(vocab_size=vocab, num_hidden_layers=2, sliding_window=WINDOW, pad_token_id=0,
                                   **SHAPE, **ids)


def _mistral(vocab: int, **ids: int) -> Any:
    return transformers.MistralConfig(vocab_size=vocab, num_hidden_layers=2, sliding_window=WINDOW, head_dim=16,
                                      **SHAPE, **ids)


def _lfm2(vocab: int, **ids: int) -> Any:  # convolution layers: a cache kind the engine cannot keep
    shape = {k: v for k, v in SHAPE.items() if k != "intermediate_size"}
    return transformers.Lfm2Config(vocab_size=vocab, num_hidden_layers=2, full_attn_idxs=[1], block_ff_dim=128,
                                   block_auto_adjust_ff_dim=False, **shape, **ids)


ARCHITECTURES: dict[str, Callable[..., Any]] = {
    "llama": _llama, "gemma3": _gemma3, "qwen3": _qwen3, "qwen2-window": _qwen2_window, "phi3": _phi3,
    "mistral": _mistral, "lfm2": _lfm2}


def tiny_architecture(folder, name: str, chat: bool = False) -> None:
    """Save a randomly initialised tiny causal LM of architecture `name` (see ARCHITECTURES) and the
    tests' tokenizer in `folder`."""
    tokenizer = tiny_tokenizer(chat)
    tokenizer.save_pretrained(folder)
    config = ARCHITECTURES[name](len(tokenizer), eos_token_id=tokenizer.eos_token_id, bos_token_id=tokenizer.eos_token_id)
    torch.manual_seed(0)
    transformers.AutoModelForCausalLM.from_config(config).save_pretrained(folder)
