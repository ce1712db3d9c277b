#!/usr/bin/env python3
"""Builds the tokenizer fixtures with Hugging Face `tokenizers` (run once by hand; outputs are
committed and CI needs neither Python nor network):

    pip install tokenizers==0.23.3
    python3 tests/data/tokenizer/gen_tokenizer_fixtures.py tests/data/tokenizer

Outputs
  corpus.jsonl        >= 1 MB multilingual text, one {"text": ...} document per line: Python
                      docstrings, Unicode character names, pseudo-words in 14 scripts, emoji
                      (ZWJ sequences, skin tones, flags), combining marks, unusual spaces and
                      digits, contractions in mixed case, special-token strings. Deterministic
                      (seeded); the docstrings are those of CPython 3.11.7.
  gpt2/vocab.json, gpt2/merges.txt
                      a GPT-2-style byte-level BPE (GPT-2 regex, 2000 merges) trained here: the
                      real GPT-2 files are not on PyPI, and only the file format matters.
  llama3/tokenizer.json
                      a Llama-3-style tokenizer.json (Split on the Llama 3 regex + ByteLevel
                      without regex, ignore_merges, special tokens), 3000 merges, trained here.
  expected_gpt2.txt, expected_llama3.txt
                      per document: "<number of ids> <FNV-1a 64 of the ids as int32 LE>" from
                      HF tokenizers' encode(text, add_special_tokens=False).
"""
import json
import os
import random
import sys
import unicodedata

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

LLAMA3_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)

SCRIPTS = {
    "latin": [(0x61, 0x7A), (0xE0, 0xFF), (0x100, 0x17F)],
    "greek": [(0x3B1, 0x3C9)],
    "cyrillic": [(0x430, 0x44F)],
    "armenian": [(0x561, 0x586)],
    "hebrew": [(0x5D0, 0x5EA)],
    "arabic": [(0x627, 0x64A)],
    "devanagari": [(0x905, 0x939), (0x93E, 0x94C)],
    "bengali": [(0x985, 0x9B9)],
    "thai": [(0xE01, 0xE2E), (0xE31, 0xE3A)],
    "georgian": [(0x10D0, 0x10F0)],
    "hangul": [(0xAC00, 0xD7A3)],
    "hiragana": [(0x3041, 0x3096)],
    "katakana": [(0x30A1, 0x30FA)],
    "cjk": [(0x4E00, 0x9FFF)],
}
EMOJI = [(0x1F300, 0x1F5FF), (0x1F600, 0x1F64F), (0x1F680, 0x1F6FF), (0x1F900, 0x1F9FF),
         (0x2600, 0x26FF)]
SPACES = [" ", " ", " ", "  ", "\t", "\n", "\r\n", "\u00a0", "\u2003", "\u3000", "\u200b",
          "\u2028", "\x0b", "\x0c", " \n ", "\n\n", "\u0085", "\u1680", "\u202f"]
PUNCT = list(".,;:!?-()[]{}\"'`/\\@#$%^&*_+=<>|~") + ["...", "—", "«", "»", "“", "”", "。", "、",
                                                     "¿", "¡", "€", "£", "°", "±"]
DIGITS = ["0123456789", "٠١٢٣٤٥٦٧٨٩", "०१२३४५६७८९", "０１２３４５６７８９", "²³¹", "Ⅻ"]
CONTRACTIONS = ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'T", "'RE", "'Ve", "'LL", "'D"]
SPECIALS = ["<|endoftext|>", "<|begin_of_text|>", "<|end_of_text|>"]


def pick(rng, ranges):
    lo, hi = rng.choice(ranges)
    return chr(rng.randint(lo, hi))


def word(rng, script):
    w = "".join(pick(rng, SCRIPTS[script]) for _ in range(rng.randint(1, 9)))
    if rng.random() < 0.15:  # combining marks, sometimes stacked
        w += "".join(chr(rng.randint(0x300, 0x36F)) for _ in range(rng.randint(1, 3)))
    if script == "latin" and rng.random() < 0.2:
        w = w.capitalize() if rng.random() < 0.5 else w.upper()
    return w


def emoji(rng):
    r = rng.random()
    if r < 0.2:  # ZWJ family / profession sequences
        return "\u200d".join(pick(rng, EMOJI) for _ in range(rng.randint(2, 4)))
    if r < 0.35:  # skin tone modifier
        return chr(rng.choice([0x1F44B, 0x1F44D, 0x1F64F])) + chr(rng.randint(0x1F3FB, 0x1F3FF))
    if r < 0.5:  # flag from regional indicators
        return chr(rng.randint(0x1F1E6, 0x1F1FF)) + chr(rng.randint(0x1F1E6, 0x1F1FF))
    if r < 0.6:
        return pick(rng, EMOJI) + "\ufe0f"
    return pick(rng, EMOJI)


def synthetic_document(rng):
    parts = []
    main = rng.choice(list(SCRIPTS))
    for _ in range(rng.randint(20, 200)):
        r = rng.random()
        if r < 0.55:
            parts.append(word(rng, main if rng.random() < 0.7 else rng.choice(list(SCRIPTS))))
        elif r < 0.62:
            parts.append(emoji(rng))
        elif r < 0.72:
            d = rng.choice(DIGITS)
            parts.append("".join(rng.choice(d) for _ in range(rng.randint(1, 7))))
        elif r < 0.82:
            parts.append(rng.choice(PUNCT) * rng.randint(1, 3))
        elif r < 0.86:
            parts.append(word(rng, "latin") + rng.choice(CONTRACTIONS))
        elif r < 0.87:
            parts.append(rng.choice(SPECIALS))
        parts.append(rng.choice(SPACES) if rng.random() < 0.8 else "")
    return "".join(parts)


def docstring_documents():
    import builtins
    import collections
    import itertools
    import json as json_mod
    import os as os_mod
    import re
    import string
    import textwrap

    docs = []
    for mod in [builtins, collections, itertools, json_mod, os_mod, re, string, textwrap,
                unicodedata, random]:
        names = sorted(n for n in dir(mod) if not n.startswith("_"))
        text = [mod.__doc__ or ""]
        for n in names:
            doc = getattr(getattr(mod, n, None), "__doc__", None)
            if isinstance(doc, str) and doc not in text:
                text.append(doc)
        docs.append("\n\n".join(text))
    return docs


def unicode_name_documents():
    docs, lines = [], []
    for cp in list(range(0x20, 0x3000, 3)) + list(range(0x1F300, 0x1FA00, 2)):
        ch = chr(cp)
        name = unicodedata.name(ch, "")
        if not name or unicodedata.category(ch) in ("Cs", "Co", "Cn"):
            continue
        lines.append(f"U+{cp:04X} {ch} {name.lower()} ({unicodedata.category(ch)})")
        if len(lines) == 120:
            docs.append("\n".join(lines) + "\n")
            lines = []
    docs.append("\n".join(lines))
    return docs


def build_corpus():
    rng = random.Random(20240601)
    docs = docstring_documents() + unicode_name_documents()
    docs += ["", " ", "\n", "a", "  leading and trailing spaces  ", "x\u0301\u0302\u0303",
             "👩\u200d👩\u200d👧\u200d👦", "I'LL DON'T we've", "123456789012", "\r\n\r\n\t \u3000"]
    while sum(len(d.encode()) for d in docs) < 1_150_000:
        docs.append(synthetic_document(rng))
    return docs


def fnv1a(ids):
    h = 0xCBF29CE484222325
    for i in ids:
        for b in int(i).to_bytes(4, "little", signed=True):
            h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def train_gpt2(texts, out_dir):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=256 + 2000 + 1, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(texts, trainer)
    os.makedirs(out_dir, exist_ok=True)
    tok.model.save(out_dir)
    # As Megatron/HF load GPT-2: BPE from vocab.json + merges.txt under the ByteLevel pre-tokenizer.
    loaded = Tokenizer(models.BPE.from_file(os.path.join(out_dir, "vocab.json"),
                                            os.path.join(out_dir, "merges.txt")))
    loaded.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    return loaded


def train_llama3(texts, out_dir):
    tok = Tokenizer(models.BPE(ignore_merges=True))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    specials = ["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>"]
    trainer = trainers.BpeTrainer(vocab_size=256 + 3000 + len(specials), special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(texts, trainer)
    os.makedirs(out_dir, exist_ok=True)
    tok.save(os.path.join(out_dir, "tokenizer.json"))
    return Tokenizer.from_file(os.path.join(out_dir, "tokenizer.json"))


def main():
    out = sys.argv[1]
    docs = build_corpus()
    with open(os.path.join(out, "corpus.jsonl"), "w", encoding="utf-8") as f:
        for d in docs:
            f.write(json.dumps({"text": d}, ensure_ascii=False) + "\n")
    # Train on a differently seeded corpus so the test text is not the training text.
    train_rng = random.Random(7)
    train_texts = docstring_documents()[::2] + [synthetic_document(train_rng) for _ in range(3000)]
    for name, tok in [("gpt2", train_gpt2(train_texts, os.path.join(out, "gpt2"))),
                      ("llama3", train_llama3(train_texts, os.path.join(out, "llama3")))]:
        with open(os.path.join(out, f"expected_{name}.txt"), "w") as f:
            total = 0
            for enc in tok.encode_batch(docs, add_special_tokens=False):
                f.write(f"{len(enc.ids)} {fnv1a(enc.ids):016x}\n")
                total += len(enc.ids)
        print(name, "documents", len(docs), "ids", total)
    print("corpus bytes", sum(len(d.encode()) for d in docs))


if __name__ == "__main__":
    main()
