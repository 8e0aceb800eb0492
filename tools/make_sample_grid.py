#!/usr/bin/env python3
"""Sample grid of the embedded emoji model: one row per prompt, one column per seed.

Runs `varscope-cli generate --prompt P --seed S -o img.npy` for each prompt and seed and tiles
the images into one PNG (written with zlib, no imaging library needed). Needs numpy.
"""
import argparse
import os
import struct
import subprocess
import sys
import tempfile
import zlib

import numpy as np


def write_png(path, rgb):
    h, w, _ = rgb.shape
    raw = b"".join(b"\x00" + rgb[y].tobytes() for y in range(h))
    def chunk(tag, data):
        return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data) & 0xFFFFFFFF)
    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
                + chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b""))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cli", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--seeds", default="0,1,2,3", help="one column per seed")
    ap.add_argument("--top-k", type=int, default=900)
    ap.add_argument("--top-p", type=float, default=0.95)
    ap.add_argument("--cfg", type=float, default=3.0)
    ap.add_argument("--family", choices=["var", "mar", "t2i"], default="var",
                    help="var: `generate` (top-k/top-p/cfg given here); mar: `generate-mar` with the "
                         "MAR file's recommended settings; t2i: `generate` with the text-to-image "
                         "model's own settings (the prompt is its text)")
    ap.add_argument("--model-args", default="",
                    help="extra generate flags, space-separated (e.g. explicit model files)")
    ap.add_argument("--scale", type=int, default=2, help="pixel upscaling for viewing")
    ap.add_argument("prompts", nargs="+")
    a = ap.parse_args()
    rows, labels = [], []
    with tempfile.TemporaryDirectory() as tmp:
        seeds = [int(x) for x in a.seeds.split(",")]
        for i, p in enumerate(a.prompts):
            imgs = []
            for s in seeds:
                out = os.path.join(tmp, f"r{i}_{s}.npy")
                if a.family == "t2i":
                    cmd = [a.cli, "generate", "--prompt", p, "--seed", str(s), "-q", "-o", out]
                    cmd += a.model_args.split()
                elif a.family == "mar":
                    cmd = [a.cli, "generate-mar", "--prompt", p, "--seed", str(s), "-q", "-o", out]
                else:
                    cmd = [a.cli, "generate", "--prompt", p, "--seed", str(s), "--cfg", str(a.cfg),
                           "--top-k", str(a.top_k), "--top-p", str(a.top_p), "-q", "-o", out]
                r = subprocess.run(cmd, capture_output=True, text=True)
                if r.returncode:
                    sys.exit(f"{p!r}: {r.stderr}")
                imgs.append(np.load(out))
            labels.append(next((l for l in r.stderr.splitlines() if l.startswith("prompt")), p))
            rows.append(np.concatenate([np.pad(m.transpose(1, 2, 0), ((2, 2), (2, 2), (0, 0)), constant_values=1.0)
                                        for m in imgs], axis=1))
    grid = np.concatenate(rows, axis=0)
    grid = np.kron(grid, np.ones((a.scale, a.scale, 1)))
    write_png(a.out, (grid.clip(0, 1) * 255).round().astype(np.uint8))
    for l in labels:
        print(l)


if __name__ == "__main__":
    main()
