#!/usr/bin/env python3
"""Numerical parity of varscope-cli against the official FoundationVision/VAR code.

The official code is NOT part of this repository: pass the folder of a local copy with
--official (it must contain models/ and dist.py). Both sides get identical random weights in the
official layout (saved with torch.save, loaded unchanged by our CLI), then we compare
  1. teacher-forced logits for random token maps (relative L2 error, fp32), and
  2. sampled token maps for the same seed / labels / cfg / top-k / top-p (fraction identical).
Writes a JSON report.
"""
import argparse
import json
import math
import os
import subprocess
import sys
import time

import torch
from safetensors.torch import load_file, save_file


def randomise_(model: torch.nn.Module, gen: torch.Generator) -> None:
    """Well-conditioned random weights for every parameter (the official builder skips init)."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() >= 2:
                fan_in = p[0].numel()
                p.copy_(torch.randn(p.shape, generator=gen) / math.sqrt(fan_in))
            elif "norm" in name and name.endswith("weight"):
                p.copy_(1 + 0.05 * torch.randn(p.shape, generator=gen))
            elif name.endswith("scale_mul_1H11"):
                p.copy_(math.log(4.0) + 0.1 * torch.randn(p.shape, generator=gen))
            else:
                p.copy_(0.02 * torch.randn(p.shape, generator=gen))


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.double(), b.double()
    return ((a - b).norm() / b.norm().clamp_min(1e-30)).item()


def run_cli(cmd):
    t0 = time.time()
    print("+", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True)
    return time.time() - t0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--official", required=True, help="folder with the official models/ and dist.py")
    ap.add_argument("--cli", required=True, help="path of varscope-cli")
    ap.add_argument("--depth", type=int, default=16)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--work", required=True, help="scratch folder for weights and tensors")
    ap.add_argument("--out", required=True, help="JSON report")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    sys.path.insert(0, os.path.abspath(args.official))
    import models  # noqa: E402  (official code)
    import models.var as official_var  # noqa: E402

    os.makedirs(args.work, exist_ok=True)
    dev = torch.device(args.device)
    gen = torch.Generator().manual_seed(args.seed)
    vae, var = models.build_vae_var(device=dev, depth=args.depth, shared_aln=False,
                                    flash_if_available=False, fused_if_available=False)
    randomise_(vae, gen)
    randomise_(var, gen)
    vae.eval()
    var.eval()
    var.cond_drop_rate = 0.0
    var_path, vae_path = os.path.join(args.work, "var.pth"), os.path.join(args.work, "vae.pth")
    torch.save(var.state_dict(), var_path)
    torch.save(vae.state_dict(), vae_path)

    report = {"depth": args.depth, "device": str(dev), "torch": torch.__version__}
    # --- 1. teacher-forced logits ---------------------------------------------------------
    B, V = args.batch, vae.vocab_size
    labels = torch.randint(0, 1000, (B,), generator=gen)
    idx = [torch.randint(0, V, (B, pn * pn), generator=gen) for pn in var.patch_nums]
    tok_path = os.path.join(args.work, "teacher_in.safetensors")
    save_file({"labels": labels, **{f"tokens.{i}": t for i, t in enumerate(idx)}}, tok_path)
    with torch.no_grad():
        x = vae.quantize.idxBl_to_var_input([t.to(dev) for t in idx])
        ref = var(labels.to(dev), x).float().cpu()
    ours_path = os.path.join(args.work, "teacher_ours.safetensors")
    run_cli([args.cli, "teacher-forward", "--var", var_path, "--vae", vae_path, "--input", tok_path,
             "--output", ours_path, "--device", args.device])
    ours = load_file(ours_path)
    report["teacher_logits_rel_err"] = rel_err(ours["logits"], ref)
    report["teacher_logits_max_abs_err"] = (ours["logits"] - ref).abs().max().item()
    report["teacher_var_input_rel_err"] = rel_err(ours["x_BLCv"], x.float().cpu())
    report["teacher_argmax_agree"] = (ours["logits"].argmax(-1) == ref.argmax(-1)).float().mean().item()

    # --- 2. sampling with the same seed ---------------------------------------------------
    drawn = []
    original = official_var.sample_with_top_k_top_p_

    def recording(*a, **k):
        out = original(*a, **k)
        drawn.append(out[:, :, 0].cpu())
        return out

    official_var.sample_with_top_k_top_p_ = recording
    sample_labels = [207, 88]
    cfg, top_k, top_p = 4.0, 900, 0.95
    with torch.no_grad():
        t0 = time.time()
        img = var.autoregressive_infer_cfg(B=len(sample_labels), label_B=torch.tensor(sample_labels, device=dev),
                                           g_seed=args.seed, cfg=cfg, top_k=top_k, top_p=top_p)
        if dev.type == "cuda":
            torch.cuda.synchronize()
        report["official_sample_seconds"] = time.time() - t0
    official_var.sample_with_top_k_top_p_ = original
    samp_path = os.path.join(args.work, "sample_ours.safetensors")
    img_path = os.path.join(args.work, "sample_ours.npy")
    run_cli([args.cli, "generate", "--var", var_path, "--vae", vae_path, "--device", args.device,
             "--class", ",".join(map(str, sample_labels)), "--seed", str(args.seed), "--cfg", str(cfg),
             "--top-k", str(top_k), "--top-p", str(top_p), "--tokens-out", samp_path,
             "--out", img_path, "--force", "-q"])
    ours_tok = load_file(samp_path)
    per_scale = []
    for si, ref_t in enumerate(drawn):
        per_scale.append((ours_tok[f"tokens.{si}"] == ref_t).float().mean().item())
    report["sample_tokens_identical_per_scale"] = per_scale
    report["sample_all_tokens_identical"] = all(f == 1.0 for f in per_scale)
    import numpy as np
    for i in range(len(sample_labels)):
        ours_img = torch.from_numpy(np.load(img_path.replace(".npy", f"_{i}.npy")))
        report.setdefault("sample_image_max_abs_diff", []).append(
            (ours_img - img[i].float().cpu()).abs().max().item())

    with open(args.out, "w") as f:
        json.dump(report, f, indent=2)
    print(json.dumps(report, indent=2))
    ok = report["teacher_logits_rel_err"] <= 1e-3
    print("PARITY", "PASS" if ok else "FAIL", "(teacher logits rel err <= 1e-3)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
