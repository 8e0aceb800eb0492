#!/usr/bin/env python3
"""How close are an emoji VAR's samples to real emoji of their class?

For the 16 prompts of the sample grid and seeds 0..N-1, generates one batch per seed
(`varscope-cli generate --class <16 ids> --seed S`) and scores each sample by its PSNR to the
nearest training image of its own class (1-4 images per class in the packed data set). A model
that draws the emoji scores high; smeared or wrong-class samples score low. A proxy for
"recognisable", not a perceptual metric; compare models on the same seeds.

  tools/emoji_nn_psnr.py --cli build/app/cli/varscope-cli --data emoji64.safetensors \\
      --resources A=/path/to/resources_a --resources B=/path/to/resources_b --seeds 8

Each --resources folder holds models/emoji-var.safetensors (+ emoji-vqvae, emoji-classes.json);
it is passed to the CLI as VARSCOPE_RESOURCES. Needs numpy.
"""
import argparse
import json
import os
import struct
import subprocess
import sys
import tempfile

import numpy as np

# red heart, thumbs up, grinning face, rainbow, rocket, crab, christmas tree, dog face, snowman,
# pizza, ghost, banana, sun with face, tiger face, cat face, hamburger (class ids of emoji-classes.json)
CLASSES = [1891, 655, 1076, 313, 1173, 1432, 437, 630, 1780, 390, 798, 381, 335, 623, 625, 389]
NAMES = ["heart", "thumbs", "grin", "rainbow", "rocket", "crab", "tree", "dog", "snowman", "pizza",
         "ghost", "banana", "sun", "tiger", "cat", "burger"]


def load_pack(path):
    with open(path, "rb") as f:
        blob = f.read()
    n = struct.unpack("<Q", blob[:8])[0]
    header = json.loads(blob[8:8 + n])
    data = blob[8 + n:]

    def tensor(name, dtype):
        e = header[name]
        begin, end = e["data_offsets"]
        return np.frombuffer(data[begin:end], dtype).reshape(e["shape"])
    return tensor("images", np.uint8), tensor("labels", np.int64)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cli", required=True)
    ap.add_argument("--data", required=True, help="packed data set (varscope-cli pack-emoji)")
    ap.add_argument("--resources", action="append", required=True, help="NAME=folder, repeatable")
    ap.add_argument("--seeds", type=int, default=8)
    ap.add_argument("extra", nargs="*", help="more generate flags after --, e.g. -- --cfg 2")
    a = ap.parse_args()
    images, labels = load_pack(a.data)
    refs = {c: images[labels == c].astype(np.float32) / 255.0 for c in CLASSES}
    for spec in a.resources:
        name, folder = spec.split("=", 1)
        psnr = np.zeros((len(CLASSES), a.seeds))
        with tempfile.TemporaryDirectory() as tmp:
            for s in range(a.seeds):
                out = os.path.join(tmp, f"s{s}.npy")
                cmd = [a.cli, "generate", "--class", ",".join(map(str, CLASSES)), "--seed", str(s),
                       "-q", "-o", out] + a.extra
                r = subprocess.run(cmd, env=dict(os.environ, VARSCOPE_RESOURCES=folder),
                                   capture_output=True, text=True)
                if r.returncode:
                    sys.exit(f"{name}: {r.stderr}")
                for i, c in enumerate(CLASSES):  # batches are written as <out>_<i>.npy
                    x = np.load(os.path.join(tmp, f"s{s}_{i}.npy"))
                    mse = ((refs[c] - x[None]) ** 2).mean(axis=(1, 2, 3))
                    psnr[i, s] = 10 * np.log10(1.0 / max(mse.min(), 1e-10))
        print(f"{name}: mean {psnr.mean():.2f} dB, >= 16 dB {100 * (psnr >= 16).mean():.0f} %, "
              f">= 18 dB {100 * (psnr >= 18).mean():.0f} % ({psnr.size} samples)")
        print("   " + " ".join(f"{n} {psnr[i].mean():.1f}" for i, n in enumerate(NAMES)))


if __name__ == "__main__":
    main()
