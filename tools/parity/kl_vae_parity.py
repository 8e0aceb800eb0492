#!/usr/bin/env python3
"""Numerical parity of our KL VAE (core/models/kl_vae.*) against the official LTH14/mar
models/vae.py (LDM's AutoencoderKL).

The official code is NOT part of this repository: pass the folder of a local copy with
--official (it must contain models/vae.py; it needs only torch and numpy). For each
configuration the official modules get well-conditioned random weights, which are written in the
layout users have (kl16: torch.save({"model": state_dict}) like the released kl16.ckpt; others:
raw safetensors), together with an input batch, the official posterior mean/logvar, a random
latent and the official decoder output. Then the C++ test KlVaeParity.MatchesOfficialReference
(build/tests/varscope_tests) loads the weights through load_kl_vae, recomputes everything and
reports max |ours - official| / max |official| (fp32, CPU). Writes a JSON report.

  /tmp/venvtest/bin/python tools/parity/kl_vae_parity.py --official /tmp/marref \
      --tests build/tests/varscope_tests --work /tmp/klparity --out /tmp/klparity/report.json
"""
import argparse
import json
import math
import os
import subprocess
import sys
import time

import torch
from safetensors.torch import save_file

# name: (embed_dim, ch, ch_mult, num_res_blocks, resolution, encoder attn, decoder attn,
#        image size fed in, weights file)
CONFIGS = {
    # The official MAR tokenizer, exactly as models/vae.py builds it (fed 64x64 images to stay
    # quick on a CPU; the attention placement depends on the constructor's resolution only).
    "kl16": (16, 128, (1, 1, 2, 2, 4), 2, 256, (16,), (), 64, "kl16.ckpt"),
    # The embedded emoji tokenizer's architecture (resources/training/emoji-klvae.json).
    "emoji": (16, 64, (1, 2, 2, 2), 2, 64, (8,), (), 64, "emoji.safetensors"),
    # Attention in decoder levels too (the LDM option the official kl16 leaves off).
    "decoder_attn": (4, 32, (1, 2), 1, 16, (8,), (8,), 16, "decoder_attn.safetensors"),
}


def randomise_(model: torch.nn.Module, gen: torch.Generator) -> None:
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() >= 2:
                p.copy_(torch.randn(p.shape, generator=gen) / math.sqrt(p[0].numel()))
            elif "norm" in name and name.endswith("weight"):
                p.copy_(1 + 0.05 * torch.randn(p.shape, generator=gen))
            else:
                p.copy_(0.05 * torch.randn(p.shape, generator=gen))


def build(vae_mod, cfg):
    embed_dim, ch, ch_mult, nrb, res, enc_attn, dec_attn, _, _ = cfg
    model = vae_mod.AutoencoderKL(embed_dim=embed_dim, ch_mult=ch_mult)
    if (ch, nrb, res, enc_attn, dec_attn) != (128, 2, 256, (16,), ()):
        # AutoencoderKL hard-codes the kl16 widths; swap in official Encoder/Decoder instances
        # built with this configuration's keyword arguments.
        kw = dict(ch=ch, ch_mult=ch_mult, num_res_blocks=nrb, resolution=res, z_channels=embed_dim)
        model.encoder = vae_mod.Encoder(attn_resolutions=enc_attn, double_z=True, **kw)
        model.decoder = vae_mod.Decoder(attn_resolutions=dec_attn, **kw)
    return model.eval()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--official", required=True, help="folder with the official models/vae.py")
    ap.add_argument("--tests", required=True, help="path of build/tests/varscope_tests")
    ap.add_argument("--work", required=True, help="scratch folder")
    ap.add_argument("--out", required=True, help="JSON report")
    ap.add_argument("--configs", default=",".join(CONFIGS))
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    sys.path.insert(0, args.official)
    from models import vae as vae_mod  # noqa: E402  (official code, outside the repo)

    torch.set_grad_enabled(False)
    report = {"official": os.path.abspath(args.official), "configs": {}}
    for name in args.configs.split(","):
        cfg = CONFIGS[name]
        embed_dim, _, ch_mult, _, res, _, _, size, weights = cfg
        gen = torch.Generator().manual_seed(args.seed)
        model = build(vae_mod, cfg)
        randomise_(model, gen)
        work = os.path.join(args.work, name)
        os.makedirs(work, exist_ok=True)
        sd = {k: v.contiguous() for k, v in model.state_dict().items()}
        if weights.endswith(".ckpt"):
            torch.save({"model": sd}, os.path.join(work, weights))  # the released layout
        else:
            save_file(sd, os.path.join(work, weights))
        inp = torch.rand((2, 3, size, size), generator=gen) * 2 - 1
        posterior = model.encode(inp)
        stride = 2 ** (len(ch_mult) - 1)
        z = torch.randn((2, embed_dim, size // stride, size // stride), generator=gen)
        dec = model.decode(z)
        save_file({"inp": inp, "mean": posterior.mean.contiguous(),
                   "logvar": posterior.logvar.contiguous(), "z": z, "dec": dec.contiguous()},
                  os.path.join(work, "reference.safetensors"))
        with open(os.path.join(work, "params.json"), "w") as f:
            json.dump({"weights": weights, "resolution": res}, f)

        ours_path = os.path.join(work, "ours.json")
        if os.path.exists(ours_path):
            os.remove(ours_path)
        t0 = time.time()
        env = dict(os.environ, VARSCOPE_KL_PARITY_DIR=work)
        run = subprocess.run([args.tests, "--gtest_filter=KlVaeParity.*"], env=env,
                             capture_output=True, text=True)
        ours = json.load(open(ours_path)) if os.path.exists(ours_path) else {}
        entry = {"passed": run.returncode == 0, "seconds_cpp": round(time.time() - t0, 2),
                 "params": sum(v.numel() for v in sd.values()), "image": size, **ours}
        if run.returncode != 0:
            entry["output_tail"] = run.stdout[-3000:] + run.stderr[-2000:]
        report["configs"][name] = entry
        print(name, json.dumps({k: v for k, v in entry.items() if k != "config"}), flush=True)

    with open(args.out, "w") as f:
        json.dump(report, f, indent=2)
    return 0 if all(e["passed"] for e in report["configs"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
