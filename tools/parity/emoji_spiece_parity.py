#!/usr/bin/env python3
"""Fixture for the shipped emoji text-to-image tokenizer (resources/models/emoji-t2i-t5/spiece.model):
the ids the Python `sentencepiece` package (0.2.3 tested) gives for packed captions and a few
free-text prompts, read by tests/sentencepiece_trainer_test.cpp (EmojiT2ITokenizer.*).

    PYTHONPATH=/work/pydeps /opt/venv/bin/python tools/parity/emoji_spiece_parity.py \
        PACKED.safetensors resources/models/emoji-t2i-t5/spiece.model \
        tests/fixtures/emoji_spiece/cases.json

PACKED is `varscope-cli pack-emoji` output; its captions are in the safetensors header.
"""
import json
import struct
import sys

import sentencepiece as spm

PROMPTS = [  # free text: capitals (folded by the model), unseen words, characters, spacing
    "A Thumbs Up, dark skin tone!", "  red   apple  ", "a cat wearing sunglasses",
    "Twemoji PIZZA", "drapeau de la Côte d'Ivoire", "emoji ✓ ★ 🙂", "", "1234567890",
]


def packed_captions(path):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
    return json.loads(header["__metadata__"]["captions"])


def main(packed, model, out):
    sp = spm.SentencePieceProcessor(model_file=model)
    caps = packed_captions(packed)
    rows = caps["rows"]
    step = max(1, rows // 150)  # ~150 rows spread over the file: every category and style
    cases = []
    for r in range(0, rows, step):
        for kind in ("train", "heldout"):
            text = caps[kind][r][r % len(caps[kind][r])]
            cases.append({"kind": "caption", "text": text})
    cases += [{"kind": "prompt", "text": p} for p in PROMPTS]
    for c in cases:
        c["ids"] = sp.encode(c["text"])
        c["decoded"] = sp.decode(c["ids"])
    with open(out, "w", encoding="utf-8") as f:
        json.dump({"model": model, "pieces": sp.get_piece_size(), "cases": cases}, f,
                  ensure_ascii=False, separators=(",", ":"))
        f.write("\n")
    print(f"{len(cases)} cases -> {out}")


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    main(*sys.argv[1:])
