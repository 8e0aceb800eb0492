#!/usr/bin/env python3
"""Writes tests/fixtures/emoji_samples.safetensors: a few emoji64 images (both styles) with their
class ids, for the test that the shipped emoji feature network classifies real emoji
(tests/emoji_features_test.cpp). Images are composited on white and stored as uint8 (N, 3, 64, 64)
as `varscope-cli pack-emoji` stores them; labels are positions in emoji64's emoji.json.
"""
import argparse
import json
import os

import numpy as np
import torch
from PIL import Image
from safetensors.torch import save_file

SHORT_NAMES = ["cat", "pizza", "rocket", "tada"]


def composite_on_white(path):
    rgba = np.asarray(Image.open(path).convert("RGBA")).astype(np.float32)
    a = rgba[..., 3:4] / 255.0
    rgb = np.round(rgba[..., :3] * a + 255.0 * (1.0 - a))
    return np.ascontiguousarray(np.clip(rgb, 0, 255).astype(np.uint8).transpose(2, 0, 1))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--emoji", default="/work/shared/datasets/emoji64")
    ap.add_argument("--out", default="tests/fixtures/emoji_samples.safetensors")
    args = ap.parse_args()
    entries = json.load(open(os.path.join(args.emoji, "emoji.json")))
    images, labels = [], []
    for name in SHORT_NAMES:
        label = next(i for i, e in enumerate(entries) if e.get("short_name") == name)
        for style in ("google", "twitter"):
            images.append(composite_on_white(os.path.join(args.emoji, style, entries[label]["image"])))
            labels.append(label)
    save_file({"images": torch.from_numpy(np.stack(images)),
               "labels": torch.tensor(labels, dtype=torch.int64)}, args.out,
              metadata={"source": "emoji64 " + ", ".join(SHORT_NAMES) + " (google, twitter)"})
    print(args.out, len(images), "images", labels)


if __name__ == "__main__":
    main()
