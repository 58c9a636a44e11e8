#!/usr/bin/env python3
"""Exports a GGUF model's tokenizer and chat template as Hugging Face files, and checks them.

The gateway tokenizes prompts itself (Hugging Face `tokenizer.json`) and renders the chat
template itself (`tokenizer_config.json`), then sends token ids to the engine. In front of
llama.cpp the ids must be exactly the ones llama.cpp would have made from the same text, so
this exporter rebuilds the tokenizer from the GGUF's own metadata rather than from any
separately published files:

  - `tokenizer.ggml.tokens` / `tokenizer.ggml.merges` become a byte-level BPE model;
  - tokens whose `tokenizer.ggml.token_type` is control (3) or unknown (2) become special
    added tokens, user-defined ones (4) plain added tokens: llama.cpp splits the text on
    these before the pre-tokenizer (when special-token parsing is on), and so does
    `tokenizers` with added tokens;
  - `tokenizer.ggml.pre` picks the pre-tokenizer: llama.cpp's regex list for that name,
    expressed with `tokenizers` pre-tokenizers. Only names whose llama.cpp regexes have an
    exact `tokenizers` equivalent are accepted; any other name is refused, not guessed.

Usage:
  gguf_tokenizer.py export MODEL.gguf OUT_DIR
  gguf_tokenizer.py check OUT_DIR --server http://127.0.0.1:PORT   # needs a llama-server

`check` tokenizes PARITY_TEXTS with the exported files and with llama-server's POST
/tokenize (`add_special: false`, `parse_special: true`) and exits 1 on any difference.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

# llama.cpp's token types (llama_token_type in llama.h).
TYPE_NORMAL = 1
TYPE_UNKNOWN = 2
TYPE_CONTROL = 3
TYPE_USER_DEFINED = 4

# Byte-level BPE as GPT-2 shaped it: split on the GPT-2 pattern, map bytes to printable
# characters. `use_regex` applies the pattern that llama.cpp's GPT-2 regex implements.
BYTE_LEVEL = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}

# tokenizer.ggml.pre → pre-tokenizer. llama.cpp (llama-vocab.cpp) gives these names the
# regex list ["\p{N}", <GPT-2 pattern>]: every digit on its own, then the GPT-2 split,
# which is Digits(individual_digits) followed by byte-level with its regex.
DIGITS_THEN_GPT2 = {
    "type": "Sequence",
    "pretokenizers": [{"type": "Digits", "individual_digits": True}, BYTE_LEVEL],
}
PRE_TOKENIZERS = {
    "smollm": DIGITS_THEN_GPT2,
    "starcoder": DIGITS_THEN_GPT2,
    "refact": DIGITS_THEN_GPT2,
    "codeshell": DIGITS_THEN_GPT2,
    # llama.cpp: the GPT-2 pattern alone.
    "gpt-2": BYTE_LEVEL,
    "mpt": BYTE_LEVEL,
    "olmo": BYTE_LEVEL,
}

# Texts the check compares: prose, code, digit runs, multi-byte characters, whitespace
# runs, and the chat template's special tokens.
PARITY_TEXTS = [
    "Hello, world!",
    "The quick brown fox jumps over the lazy dog.",
    "Name three colours of the rainbow.",
    "def add(a, b):\n    return a + b\n",
    "for (int i = 0; i < n; ++i) { sum += x[i]; }",
    "12345",
    "3.14159 and 2,718 and 1e-9 and 0x1F",
    "Phone: +1 (555) 010-9999",
    "héllo 世界 🎉",
    "Écris une phrase en français avec des accents: été, garçon.",
    "emoji 😀👍🏽 and flags 🇫🇷 and a family 👨‍👩‍👧",
    "Ünïcödé Ωμέγα Привет مرحبا नमस्ते こんにちは 한국어",
    "tabs\tand\nnewlines\r\nand  double  spaces",
    "trailing spaces   ",
    "   leading spaces",
    "\n\n\nblank lines\n\n",
    "it's they're we've I'm you'll he'd",
    "IT'S SHOUTING'S",
    "<|im_start|>user\nhi<|im_end|>",
    "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face"
    "<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n",
    "<|endoftext|>text after end<|im_end|><|im_start|>",
    "almost special <|im_star|> and <im_end>",
    "",
    " ",
    "a",
    "\u00a0non-breaking\u2003em space\u200bzero width",
    "mixed123digits456and789letters",
    "Ⅻ roman ½ fraction ² superscript",
    "$100.00 — 50% off! (limited) #deal @shop",
    "```json\n{\"key\": [1, 2, 3], \"nested\": {\"ok\": true}}\n```",
]


def _load(path: Path):
    # Imported here so that `--help` works without the package.
    from gguf import GGUFReader

    return GGUFReader(str(path))


def _field(reader, key: str, default=None):
    field = reader.fields.get(key)
    if field is None:
        return default
    return field.contents()


def build(reader) -> tuple[dict, dict]:
    """(tokenizer.json, tokenizer_config.json) from an open GGUFReader."""
    model = _field(reader, "tokenizer.ggml.model")
    if model != "gpt2":
        raise SystemExit(f"tokenizer.ggml.model is {model!r}: only byte-level BPE ('gpt2') is exported")
    pre = _field(reader, "tokenizer.ggml.pre", "default")
    if pre not in PRE_TOKENIZERS:
        raise SystemExit(
            f"tokenizer.ggml.pre is {pre!r}: no exact tokenizers equivalent is known "
            f"(supported: {', '.join(sorted(PRE_TOKENIZERS))})"
        )
    tokens = _field(reader, "tokenizer.ggml.tokens")
    types = _field(reader, "tokenizer.ggml.token_type")
    merges = _field(reader, "tokenizer.ggml.merges")
    if not tokens or not merges or types is None or len(types) != len(tokens):
        raise SystemExit("GGUF lacks tokenizer.ggml.tokens, token_type or merges")

    vocab = {}
    added = []
    for token_id, (text, kind) in enumerate(zip(tokens, types)):
        if text in vocab:
            raise SystemExit(f"token {text!r} appears twice (ids {vocab[text]} and {token_id})")
        vocab[text] = token_id
        if kind in (TYPE_CONTROL, TYPE_UNKNOWN, TYPE_USER_DEFINED):
            added.append(
                {
                    "id": token_id,
                    "content": text,
                    "single_word": False,
                    "lstrip": False,
                    "rstrip": False,
                    "normalized": False,
                    "special": kind != TYPE_USER_DEFINED,
                }
            )

    def token_text(key: str) -> str | None:
        token_id = _field(reader, key)
        if token_id is None or not 0 <= int(token_id) < len(tokens):
            return None
        return tokens[int(token_id)]

    bos = token_text("tokenizer.ggml.bos_token_id")
    eos = token_text("tokenizer.ggml.eos_token_id")
    add_bos = bool(_field(reader, "tokenizer.ggml.add_bos_token", False))
    if add_bos and bos is None:
        raise SystemExit("tokenizer.ggml.add_bos_token is set but there is no BOS token")

    post_processor = None
    if add_bos:
        bos_id = vocab[bos]
        post_processor = {
            "type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": bos, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [
                {"SpecialToken": {"id": bos, "type_id": 0}},
                {"Sequence": {"id": "A", "type_id": 0}},
                {"SpecialToken": {"id": bos, "type_id": 1}},
                {"Sequence": {"id": "B", "type_id": 1}},
            ],
            "special_tokens": {bos: {"id": bos, "ids": [bos_id], "tokens": [bos]}},
        }

    tokenizer = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": PRE_TOKENIZERS[pre],
        "post_processor": post_processor,
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": None,
            "continuing_subword_prefix": None,
            "end_of_word_suffix": None,
            "fuse_unk": False,
            "byte_fallback": False,
            "ignore_merges": False,
            "vocab": vocab,
            # Each merge is "left right" in the GGUF; tokenizers takes the pair form.
            "merges": [merge.split(" ", 1) for merge in merges],
        },
    }
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "add_bos_token": add_bos,
        "add_eos_token": False,
        "bos_token": bos,
        "eos_token": eos,
        "unk_token": token_text("tokenizer.ggml.unknown_token_id"),
        "pad_token": token_text("tokenizer.ggml.padding_token_id"),
        "model_max_length": int(_field(reader, f"{_field(reader, 'general.architecture')}.context_length", 0))
        or None,
        "clean_up_tokenization_spaces": False,
    }
    template = _field(reader, "tokenizer.chat_template")
    if template:
        config["chat_template"] = template
    return tokenizer, {k: v for k, v in config.items() if v is not None}


def _write_json(path: Path, value) -> None:
    # Written beside the target and renamed, so a reader never sees half a file.
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".")
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        json.dump(value, out, ensure_ascii=False, indent=1)
        out.write("\n")
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)


def export(gguf: Path, out_dir: Path) -> None:
    tokenizer, config = build(_load(gguf))
    out_dir.mkdir(parents=True, exist_ok=True)
    _write_json(out_dir / "tokenizer.json", tokenizer)
    _write_json(out_dir / "tokenizer_config.json", config)
    # Proves the file loads before anyone relies on it.
    from tokenizers import Tokenizer

    Tokenizer.from_file(str(out_dir / "tokenizer.json"))


def mismatches(out_dir: Path, server: str, texts=PARITY_TEXTS) -> list[tuple[str, list[int], list[int]]]:
    """(text, exported ids, llama-server ids) for every text on which the two differ."""
    import httpx
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(out_dir / "tokenizer.json"))
    bad = []
    with httpx.Client(base_url=server, timeout=30) as client:
        for text in texts:
            ours = tok.encode(text, add_special_tokens=False).ids
            r = client.post("/tokenize", json={"content": text, "add_special": False, "parse_special": True})
            r.raise_for_status()
            theirs = r.json()["tokens"]
            if ours != theirs:
                bad.append((text, ours, theirs))
    return bad


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    ex = sub.add_parser("export", help="write tokenizer.json and tokenizer_config.json")
    ex.add_argument("gguf", type=Path)
    ex.add_argument("out_dir", type=Path)
    ck = sub.add_parser("check", help="compare with a running llama-server's /tokenize")
    ck.add_argument("out_dir", type=Path)
    ck.add_argument("--server", required=True, help="llama-server base URL")
    args = parser.parse_args(argv)

    if args.command == "export":
        export(args.gguf, args.out_dir)
        return 0
    bad = mismatches(args.out_dir, args.server)
    for text, ours, theirs in bad:
        print(f"MISMATCH {text!r}\n  exported:     {ours}\n  llama-server: {theirs}")
    print(f"{len(PARITY_TEXTS) - len(bad)} passed, {len(bad)} failed")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
