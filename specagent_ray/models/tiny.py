"""A tiny random-weight Qwen2 chat model that vLLM loads, built locally in a few seconds.

The folder holds a ``Qwen2ForCausalLM`` (transformers) with random weights drawn under ``torch.manual_seed``,
and a byte-level BPE tokenizer trained with the ``tokenizers`` library on a small built-in corpus (JSON
punctuation, tau2 tool names, argument names, English words), wrapped as a ``PreTrainedTokenizerFast`` with a
ChatML chat template (``<|im_start|>``/``<|im_end|>``, ``<|endoftext|>`` for padding). Everything is written
with ``save_pretrained``, so ``vllm serve DIR``, ``vllm.LLM(DIR)`` and ``ray.serve.llm.LLMConfig`` with
``model_source=DIR`` all accept it.

The model is useless as a policy: it only exercises the engine path (scheduling, prefix caching, structured
outputs, token usage). Its outputs are *simulated-quality* and must never be reported as a model's results.

Guarantees:
- deterministic: the same arguments give byte-identical weights and the same tokenizer (the tokenizer does
  not depend on the seed, so models built with different seeds share it, as a drafter/verifier pair does);
- ``head_dim = hidden // heads`` must be >= 64: the vLLM CPU attention kernel rejects smaller heads;
- idempotent: if ``out_dir`` already holds a complete model built with the same arguments, it is returned
  untouched; a partial or different one is rebuilt.

CLI: ``python -m specagent_ray.models.tiny OUT_DIR [--seed N] [--hidden 256] [--layers 2] ...``
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from .folders import is_complete, save_folder

SPEC_FILE = "specagent_tiny_model.json"
FORMAT_VERSION = 1
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]

CHATML_TEMPLATE = (
    "{%- for message in messages %}"
    "{%- if message['content'] is string %}{%- set content = message['content'] %}"
    "{%- elif message['content'] is none %}{%- set content = '' %}"
    "{%- else %}{%- set content = message['content'] | map(attribute='text') | join('') %}{%- endif %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + content + '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)

# Tool names from tau2-bench's airline and retail domains plus a few generic ones.
_TOOLS = [
    "get_user_details", "get_reservation_details", "search_direct_flight", "search_onestop_flight",
    "list_all_airports", "get_flight_status", "book_reservation", "cancel_reservation",
    "update_reservation_flights", "update_reservation_passengers", "update_reservation_baggages",
    "send_certificate", "calculate", "transfer_to_human_agents", "get_order_details", "get_product_details",
    "find_user_id_by_email", "find_user_id_by_name_zip", "list_all_product_types", "cancel_pending_order",
    "exchange_delivered_order_items", "return_delivered_order_items", "modify_pending_order_items",
    "modify_pending_order_address", "modify_pending_order_payment", "modify_user_address", "get_weather",
    "think", "respond", "stop",
]
_KEYS = [
    "kind", "name", "arguments", "tool", "stop", "message", "content", "role", "user", "assistant", "system",
    "user_id", "reservation_id", "order_id", "item_ids", "new_item_ids", "payment_method_id", "email",
    "first_name", "last_name", "zip", "origin", "destination", "date", "cabin", "flight_number", "passengers",
    "total_baggages", "nonfree_baggages", "insurance", "reason", "expression", "summary", "amount", "city",
    "accept", "prefix", "repair", "verdict", "j", "r", "action", "id", "type", "status", "price", "address",
]
_WORDS = (  # noqa: SIM905 - a word list reads best as one string
    "the a an and or but if then else of to in on at for with from by as is are was were be been being have "
    "has had do does did not no yes can could will would should may might must shall I you he she it we they "
    "me him her us them my your his its our their this that these those what which who whom whose when where "
    "why how all any both each few more most other some such only own same so than too very just now here "
    "there up down out over under again further once please thank thanks hello hi sorry help need want like "
    "book flight reservation cancel change update order item product return exchange refund payment card gift "
    "certificate user customer agent airline retail seat cabin economy business basic baggage bag passenger "
    "date time today tomorrow morning evening address city zip email phone name number total price amount "
    "dollar dollars status pending delivered processed shipped cancelled confirmed available found error "
    "request response tool call result observation verify accept reject reason step task plan next first "
    "last new old one two three four five six seven eight nine ten json object string array true false null "
    "weather Paris London Tokyo New York Boston Seattle Chicago Miami Denver Houston Dallas Atlanta"
).split()
_VALUES = ["mia_li_3668", "HATHAT", "EHGLP3", "#W2378156", "JFK", "SFO", "LAX", "ORD", "2024-05-15",
           "HAT170", "credit_card_7815826", "gift_card_7219486", "economy", "business", "basic_economy"]


def _corpus() -> list[str]:
    """A deterministic corpus: JSON tool calls, verdicts, chat turns and plain English."""
    lines: list[str] = []
    for i, tool in enumerate(_TOOLS):
        key = _KEYS[(i * 7 + 11) % len(_KEYS)]
        val = _VALUES[i % len(_VALUES)]
        lines.append(json.dumps({"kind": "tool", "name": tool, "arguments": {key: val}}))
        lines.append(json.dumps({"kind": "tool", "name": tool, "arguments": {key: [val, i, i * 1.5]}}, indent=2))
        lines.append(f'{{"name": "{tool}", "arguments": {{"{key}": "{val}", "count": {i}}}}}')
        lines.append(f"Calling {tool.replace('_', ' ')} for the user.")
    for j in range(12):
        lines.append(json.dumps({"j": j % 5, "r": "the step does not follow the policy", "action": None,
                                 "accept": j % 2 == 0, "kind": "stop" if j % 3 else "tool"}))
    for i in range(0, len(_WORDS), 9):
        chunk = _WORDS[i:i + 9]
        lines.append(" ".join(chunk).capitalize() + ".")
        lines.append(", ".join(reversed(chunk)) + "?")
    for i, key in enumerate(_KEYS):
        lines.append(f'{{"{key}": {i}, "{_KEYS[(i + 1) % len(_KEYS)]}": true, "x": null, "y": [1, 2.5, -3]}}')
    for role in ("system", "user", "assistant", "tool"):
        lines.append(f"<|im_start|>{role}\nYou are a helpful agent. Answer in JSON.<|im_end|>\n")
    lines.append("0123456789 10 100 1000 2024 2025 {} [] {\"\": \"\"} ::: ,,, ... !!! ??? $ % & * + - / = _ #")
    # Inflections, capitalised forms and numbers widen the vocabulary towards the requested size.
    for i in range(0, len(_WORDS), 6):
        chunk = _WORDS[i:i + 6]
        lines.append(" ".join(f"{w}{suffix}" for w in chunk for suffix in ("s", "ed", "ing", "er", "ly")))
        lines.append(" ".join(w.capitalize() + " " + w.upper() for w in chunk))
    for i in range(0, 2000, 20):
        lines.append(", ".join(str(n) for n in range(i, i + 20)) + f" ${i}.{i % 100:02d} {i / 7:.3f}")
    for m in range(1, 13):
        lines.append(" ".join(f'"2024-{m:02d}-{d:02d}T{(d * 5) % 24:02d}:{(d * 7) % 60:02d}"' for d in range(1, 29)))
    return lines * 3


def _train_tokenizer(vocab_size: int):
    from tokenizers import (
        Tokenizer,
        decoders,
        models,
        pre_tokenizers,
        processors,
        trainers,
    )
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=1, special_tokens=SPECIAL_TOKENS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(_corpus(), trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=None, eos_token="<|im_end|>",
                                   pad_token="<|endoftext|>", unk_token=None,
                                   additional_special_tokens=["<|im_start|>", "<|im_end|>"],
                                   model_max_length=1 << 20)
    fast.chat_template = CHATML_TEMPLATE
    return fast


def _spec(seed: int, hidden: int, layers: int, heads: int, kv_heads: int, vocab_size: int,
          max_position: int, intermediate: int | None) -> dict:
    return {"format": FORMAT_VERSION, "seed": seed, "hidden": hidden, "layers": layers, "heads": heads,
            "kv_heads": kv_heads, "vocab_size": vocab_size, "max_position": max_position,
            "intermediate": intermediate or 2 * hidden}


def build_tiny_model(out_dir: str | Path, seed: int = 0, hidden: int = 256, layers: int = 2, heads: int = 4,
                     kv_heads: int = 2, vocab_size: int = 3072, max_position: int = 8192,
                     intermediate: int | None = None) -> Path:
    """Build (or reuse) a tiny random-weight Qwen2 chat model in ``out_dir`` and return its path.

    ``vocab_size`` is the BPE training target; the model's vocabulary equals the trained tokenizer's exact
    size, so every id the model can emit decodes. Raises ``ValueError`` on shapes vLLM's CPU backend rejects.
    """
    if heads <= 0 or hidden % heads:
        raise ValueError(f"hidden ({hidden}) must be a multiple of heads ({heads})")
    if hidden // heads < 64:
        raise ValueError(f"head_dim = hidden/heads = {hidden // heads}; vLLM's CPU attention needs >= 64")
    if kv_heads <= 0 or heads % kv_heads:
        raise ValueError(f"heads ({heads}) must be a multiple of kv_heads ({kv_heads})")
    if not 512 <= vocab_size <= 65536:
        raise ValueError(f"vocab_size {vocab_size} out of range 512..65536")
    out = Path(out_dir)
    spec = _spec(seed, hidden, layers, heads, kv_heads, vocab_size, max_position, intermediate)
    if is_complete(out, SPEC_FILE, spec):
        return out

    import torch
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    tokenizer = _train_tokenizer(vocab_size)
    eos_id = tokenizer.convert_tokens_to_ids("<|im_end|>")
    pad_id = tokenizer.convert_tokens_to_ids("<|endoftext|>")
    config = Qwen2Config(
        vocab_size=len(tokenizer), hidden_size=hidden, intermediate_size=spec["intermediate"],
        num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=kv_heads,
        max_position_embeddings=max_position, tie_word_embeddings=True, use_sliding_window=False,
        bos_token_id=eos_id, eos_token_id=eos_id, pad_token_id=pad_id, torch_dtype="bfloat16",
    )
    torch.manual_seed(seed)
    with torch.device("cpu"):
        model = Qwen2ForCausalLM(config).eval()
    model = model.to(torch.bfloat16)
    model.generation_config = GenerationConfig(bos_token_id=eos_id, eos_token_id=eos_id, pad_token_id=pad_id)

    return save_folder(out, model, tokenizer, SPEC_FILE, spec)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m specagent_ray.models.tiny", description=__doc__.split("\n")[0])
    p.add_argument("out_dir")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--kv-heads", type=int, default=2)
    p.add_argument("--vocab-size", type=int, default=3072)
    p.add_argument("--max-position", type=int, default=8192)
    a = p.parse_args(argv)
    path = build_tiny_model(a.out_dir, seed=a.seed, hidden=a.hidden, layers=a.layers, heads=a.heads,
                            kv_heads=a.kv_heads, vocab_size=a.vocab_size, max_position=a.max_position)
    print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
