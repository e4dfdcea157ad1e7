"""A tiny real model for tests: a randomly initialised 2-layer Llama with a byte-level BPE tokenizer
trained on the project's prompts (a real transformers model, only small)."""

from __future__ import annotations

import torch
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from sparse_react.prompts import prompts_dir

CHAT_TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
                 "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def tiny_tokenizer(chat: bool = True) -> PreTrainedTokenizerFast:
    """A byte-level BPE tokenizer trained on the prompts (600 tokens), with a chat template when `chat`."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=600, special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator([p.read_text() for p in sorted(prompts_dir().glob("*.yaml"))], trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>", bos_token="<|endoftext|>")
    if chat:
        fast.chat_template = CHAT_TEMPLATE
    return fast


def tiny_model(folder, chat: bool = True) -> None:
    """A randomly initialised 2-layer Llama and a byte-level BPE tokenizer trained on the prompts."""
    fast = tiny_tokenizer(chat)
    fast.save_pretrained(folder)
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(fast), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=8192,
                         eos_token_id=fast.eos_token_id, bos_token_id=fast.bos_token_id)
    LlamaForCausalLM(config).save_pretrained(folder)
