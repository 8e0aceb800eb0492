#!/usr/bin/env python3
"""Numerical parity of varscope-cli's MAR against the official LTH14/mar code, on the CPU or
on CUDA (--device cuda).

The official code is NOT part of this repository: pass the folder of a local copy with
--official (it must contain models/ and diffusion/; needs timm 0.9.16 and scipy). Both sides get
identical random weights in the official layout (torch.save of a training-style checkpoint with
"model", "model_ema" and "args"; our CLI loads it unchanged and uses the EMA weights), then we
compare, per config:
  1. encoder output and decoder output z for random tokens + mask + labels (fp32, relative L2),
  2. the DiffLoss MLP output for given x, t, c, and a full reverse diffusion (100 respaced steps,
     CFG, temperature) from given noise,
  3. whole sampling runs: the official sample_tokens with torch.manual_seed(seed) and its
     numpy-shuffled generation order replaced by torch.randperm per image (our sampler's draw),
     so both consume one torch CPU random stream in the same order: generation orders and the
     positions decoded per step must be identical, the sampled latents equal up to float error.
On CUDA (--device cuda) the official sampler mixes generators (its start noise comes from the
CPU generator, the step noise from the CUDA one); here every torch.randn without a device is
sent to CUDA while it runs and the orders come from torch.randperm on CUDA, so both sides again
consume one stream (torch.manual_seed's CUDA generator = our seeded CUDA generator). Config
base256 is MAR-B at 256 px (16x16 tokens, the released DiffLoss d6 w1024) with one 64-step run;
--speed also times the official sampler there (batch 1, CFG 3, fp16 autocast like the anchor).
Writes a JSON report.
"""
import argparse
import json
import math
import os
import subprocess
import sys
import time
import types
from contextlib import nullcontext

import numpy as np
import torch
from safetensors.torch import load_file, save_file


def stub_cuda():
    """The official sampler calls .cuda() everywhere; on the CPU those become no-ops."""
    torch.Tensor.cuda = lambda self, *a, **k: self


def randomise_(model: torch.nn.Module, gen: torch.Generator) -> None:
    """Well-conditioned random weights for every parameter (the official init zeroes the
    DiffLoss modulation and output layers, which would make the head trivial)."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "pos_embed" in name or name in ("mask_token", "fake_latent"):
                p.copy_(0.3 * torch.randn(p.shape, generator=gen))
            elif p.dim() >= 2:
                fan_in = p[0].numel()
                scale = 0.05 if "final_layer.linear" in name else 1.0
                p.copy_(scale * torch.randn(p.shape, generator=gen) / math.sqrt(fan_in))
            elif ("norm" in name or "_ln" in name) and name.endswith("weight"):
                p.copy_(1 + 0.05 * torch.randn(p.shape, generator=gen))
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


def class_embedding(model, labels):
    emb = model.class_emb(labels.clamp_min(0))
    return torch.where((labels < 0).unsqueeze(1), model.fake_latent.expand_as(emb), emb)


def forward_parity(model, mar_mod, args, cfg, ckpt, work, gen):
    """Encoder/decoder/head outputs of both implementations on the same inputs."""
    L, D, Cd = model.seq_len, model.token_embed_dim, model.decoder_pos_embed_learned.shape[-1]
    R = 4
    tokens = torch.randn(R, L, D, generator=gen)
    num_masked = (L * 5) // 8
    orders = torch.stack([torch.randperm(L, generator=gen) for _ in range(R)])
    mask = torch.zeros(R, L).scatter(1, orders[:, :num_masked], 1.0)
    labels = torch.tensor([3, 7, -1, 5])
    N = 6
    diff_x = torch.randn(N, D, generator=gen)
    diff_t = torch.randint(0, 1000, (N,), generator=gen)
    diff_c = torch.randn(N, Cd, generator=gen)
    steps = len(model.diffloss.gen_diffusion.use_timesteps)
    diff_z = torch.randn(2 * N, Cd, generator=gen)
    diff_start = torch.randn(N, D, generator=gen)
    diff_noise = torch.randn(steps, 2 * N, D, generator=gen)
    diff_cfg, diff_temp = 2.5, 0.9
    inputs = {"tokens": tokens, "mask": mask, "labels": labels, "diff_x": diff_x,
              "diff_t": diff_t, "diff_c": diff_c, "diff_z": diff_z, "diff_start": diff_start,
              "diff_noise": diff_noise, "diff_cfg": torch.tensor(diff_cfg),
              "diff_temp": torch.tensor(diff_temp)}
    fin, fout = os.path.join(work, f"{cfg}_forward_in.safetensors"), os.path.join(work, f"{cfg}_forward_out.safetensors")
    save_file({k: v.contiguous() for k, v in inputs.items()}, fin)

    tokens, mask, labels, diff_x, diff_t, diff_c, diff_z, diff_start, diff_noise = (
        to_dev(t, args) for t in (tokens, mask, labels, diff_x, diff_t, diff_c, diff_z, diff_start,
                                  diff_noise))
    with torch.no_grad():
        enc = model.forward_mae_encoder(tokens, mask, class_embedding(model, labels))
        z = model.forward_mae_decoder(enc, mask)
        head = model.diffloss.net(diff_x, diff_t, diff_c)
        # Full reverse process with the given noise: randn_like inside p_sample pops from it.
        queue = list(diff_noise.unbind(0))
        gd = sys.modules["diffusion.gaussian_diffusion"]
        saved = gd.th.randn_like
        gd.th.randn_like = lambda x: queue.pop(0).to(x.dtype)
        try:
            sample = model.diffloss.gen_diffusion.p_sample_loop(
                model.diffloss.net.forward_with_cfg, (2 * N, D), torch.cat([diff_start, diff_start]),
                clip_denoised=False, model_kwargs=dict(c=diff_z, cfg_scale=diff_cfg),
                temperature=diff_temp)[:N]
        finally:
            gd.th.randn_like = saved
    run_cli([args.cli, "generate-mar", "--mar", ckpt, "--forward-in", fin, "--forward-out", fout,
             "--num-sampling-steps", str(steps), "--device", args.device])
    ours = load_file(fout)
    enc, z, head, sample = enc.cpu(), z.cpu(), head.cpu(), sample.cpu()
    return {
        "encoder_rel_err": rel_err(ours["encoder_out"], enc),
        "decoder_z_rel_err": rel_err(ours["z"], z),
        "diffloss_mlp_rel_err": rel_err(ours["diff_out"], head),
        "diffusion_sample_rel_err": rel_err(ours["diff_sample"], sample),
    }


def to_dev(t, args):
    return t.to(args.device) if torch.is_tensor(t) else t


class CudaRandn:
    """torch.randn without a device draws on CUDA while active (see the module docstring)."""

    def __enter__(self):
        self.saved = torch.randn

        def randn(*size, **kw):
            kw.setdefault("device", "cuda")
            return self.saved(*size, **kw)
        torch.randn = randn
        return self

    def __exit__(self, *exc):
        torch.randn = self.saved


def sampling_parity(model, mar_mod, args, cfg, ckpt, work, run):
    """Whole sampling runs from one seed on both sides."""
    L = model.seq_len
    labels = run["labels"]
    recorded_orders, recorded_masks = [], []

    def torch_orders(bsz):
        o = torch.stack([torch.randperm(L, device=args.device) for _ in range(bsz)])
        recorded_orders.append(o.cpu())
        return o

    original_mask_by_order = mar_mod.mask_by_order

    def recording_mask_by_order(mask_len, order, bsz, seq_len):
        m = original_mask_by_order(mask_len, order, bsz, seq_len)
        recorded_masks.append(m.clone().cpu())
        return m

    model.sample_orders = torch_orders
    mar_mod.mask_by_order = recording_mask_by_order
    t0 = time.time()
    try:
        torch.manual_seed(run["seed"])
        with torch.no_grad(), (CudaRandn() if args.device == "cuda" else nullcontext()):
            official = model.sample_tokens(bsz=len(labels), num_iter=run["num_iter"], cfg=run["cfg"],
                                           cfg_schedule=run["schedule"],
                                           labels=torch.tensor(labels, device=args.device),
                                           temperature=run["temperature"]).cpu()
        if args.device == "cuda":
            torch.cuda.synchronize()
    finally:
        mar_mod.mask_by_order = original_mask_by_order
        del model.sample_orders
    # Positions decoded per step from the official masks (all remaining ones at the last step).
    official_s = time.time() - t0
    official_decoded = []
    prev = torch.ones(len(labels), L, dtype=torch.bool)
    for s, m in enumerate(recorded_masks):
        pred = prev if s == run["num_iter"] - 1 else prev & ~m
        official_decoded.append(pred)
        prev = m

    out = os.path.join(work, f"{cfg}_{run['name']}_tokens.safetensors")
    if os.path.exists(out):
        os.remove(out)
    run_cli([args.cli, "generate-mar", "--mar", ckpt, "--class", ",".join(map(str, labels)),
             "--seed", str(run["seed"]), "--num-iter", str(run["num_iter"]), "--cfg", str(run["cfg"]),
             "--cfg-schedule", run["schedule"], "--temperature", str(run["temperature"]),
             "--num-sampling-steps", str(len(model.diffloss.gen_diffusion.use_timesteps)),
             "--tokens-out", out, "-q", "--device", args.device])
    ours = load_file(out)
    same_orders = torch.equal(ours["orders"], recorded_orders[0])
    steps_match = 0
    for s in range(run["num_iter"]):
        mine = torch.zeros(len(labels), L, dtype=torch.bool)
        pos = ours[f"decoded.{s}"]
        if pos.numel():
            mine.scatter_(1, pos, True)
        steps_match += int(torch.equal(mine, official_decoded[s]))
    diff = (ours["latents"].double() - official.double()).abs()
    return {
        "name": run["name"], "labels": labels, "seed": run["seed"], "num_iter": run["num_iter"],
        "cfg": run["cfg"], "cfg_schedule": run["schedule"], "temperature": run["temperature"],
        "orders_identical": same_orders,
        "steps_with_identical_decoded_positions": f"{steps_match}/{run['num_iter']}",
        "latents_rel_err": rel_err(ours["latents"], official),
        "latents_max_abs_err": diff.max().item(),
        "latents_rms": official.double().pow(2).mean().sqrt().item(),
        "official_fp32_seconds": official_s,
    }


def build_official(mar_mod, cfg):
    if cfg == "base256":
        # MAR-B as released: 256 px (16x16 tokens), buffer 64, DiffLoss d6 w1024.
        return mar_mod.mar_base(img_size=256, vae_stride=16, patch_size=1, vae_embed_dim=16,
                                buffer_size=64, diffloss_d=6, diffloss_w=1024,
                                num_sampling_steps="100", class_num=1000)
    if cfg == "base":
        # mar_base widths/depths (768, 12 + 12 blocks, 12 heads), buffer 64, DiffLoss d6 w1024
        # (the released MAR-B head), at 128 px (8x8 tokens) to keep the CPU run short.
        return mar_mod.mar_base(img_size=128, vae_stride=16, patch_size=1, vae_embed_dim=16,
                                buffer_size=64, diffloss_d=6, diffloss_w=1024,
                                num_sampling_steps="100", class_num=1000)
    # tiny: 2 + 2 blocks of width 128 (2 heads), buffer 4, 4x4 tokens, 50 diffusion steps
    from functools import partial
    return mar_mod.MAR(img_size=64, vae_stride=16, patch_size=1, encoder_embed_dim=128,
                       encoder_depth=2, encoder_num_heads=2, decoder_embed_dim=128, decoder_depth=2,
                       decoder_num_heads=2, mlp_ratio=4, norm_layer=partial(torch.nn.LayerNorm, eps=1e-6),
                       vae_embed_dim=16, class_num=10, buffer_size=4, diffloss_d=2, diffloss_w=64,
                       num_sampling_steps="50")


def official_speed(model):
    """The official sampler's latency (b1, 64 steps, CFG 3 linear, fp16 autocast), its own
    random draws; one warm-up run, then one timed."""
    out = {}
    for name, dtype in (("fp16_autocast", torch.float16),):
        times = []
        for r in range(2):
            torch.cuda.synchronize()
            t0 = time.time()
            with torch.no_grad(), torch.autocast("cuda", dtype=dtype):
                model.sample_tokens(bsz=1, num_iter=64, cfg=3.0, cfg_schedule="linear",
                                    labels=torch.tensor([207], device="cuda"), temperature=1.0)
            torch.cuda.synchronize()
            times.append(time.time() - t0)
            print(f"official {name} run {r}: {times[-1]:.2f} s", flush=True)
        out[name] = {"warmup_s": times[0], "timed_s": times[1:]}
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--official", required=True, help="folder with the official models/ and diffusion/")
    ap.add_argument("--cli", required=True, help="path of varscope-cli")
    ap.add_argument("--work", required=True, help="scratch folder for weights and tensors")
    ap.add_argument("--out", required=True, help="JSON report")
    ap.add_argument("--configs", default="tiny,base")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--speed", action="store_true",
                    help="base256 on CUDA: also time the official sampler (b1, 64 steps, CFG 3, fp16 autocast)")
    args = ap.parse_args()
    os.makedirs(args.work, exist_ok=True)
    sys.path.insert(0, args.official)
    if args.device == "cpu":
        stub_cuda()
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    from models import mar as mar_mod  # noqa: E402 (the official module)

    report = {"date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "torch": torch.__version__,
              "device": args.device if args.device == "cpu" else torch.cuda.get_device_name(),
              "dtype": "float32", "configs": {}}
    for cfg in args.configs.split(","):
        gen = torch.Generator().manual_seed(1234)
        model = build_official(mar_mod, cfg).eval()
        randomise_(model, gen)
        raw = build_official(mar_mod, cfg).eval()
        randomise_(raw, gen)  # different "model" weights: the loader must pick the EMA ones
        model = model.to(args.device)
        ckpt = os.path.join(args.work, f"mar_{cfg}_checkpoint.pth")
        torch.save({"model": raw.state_dict(), "model_ema": model.state_dict(), "epoch": 799,
                    "args": argparse.Namespace(model=f"mar_{cfg}", num_sampling_steps="100")}, ckpt)
        entry = {"state_dict_tensors": len(model.state_dict()),
                 "params_M": sum(p.numel() for p in model.parameters()) / 1e6}
        entry.update(forward_parity(model, mar_mod, args, cfg, ckpt, args.work, gen))
        n = 2 if cfg == "base" else 3
        classes = [1, 5, 9][:n]
        if cfg == "base256":
            runs = [{"name": "b1_64_cfg3_linear", "labels": [207], "seed": 0, "num_iter": 64,
                     "cfg": 3.0, "schedule": "linear", "temperature": 1.0}]
            entry["sampling"] = [sampling_parity(model, mar_mod, args, cfg, ckpt, args.work, r)
                                 for r in runs]
            if args.speed and args.device == "cuda":
                entry["official_speed"] = official_speed(model)
            report["configs"][cfg] = entry
            print(json.dumps({cfg: entry}, indent=2), flush=True)
            with open(args.out, "w") as f:
                json.dump(report, f, indent=2)
            continue
        runs = [
            {"name": "cfg_linear", "labels": classes, "seed": 7, "num_iter": 8 if cfg == "base" else 6,
             "cfg": 2.9, "schedule": "linear", "temperature": 1.0},
            {"name": "cfg_constant", "labels": classes, "seed": 11, "num_iter": 5, "cfg": 3.0,
             "schedule": "constant", "temperature": 0.9},
            {"name": "no_cfg", "labels": classes, "seed": 3, "num_iter": 4, "cfg": 1.0,
             "schedule": "linear", "temperature": 0.95},
        ]
        entry["sampling"] = [sampling_parity(model, mar_mod, args, cfg, ckpt, args.work, r) for r in runs]
        report["configs"][cfg] = entry
        print(json.dumps({cfg: entry}, indent=2), flush=True)
    with open(args.out, "w") as f:
        json.dump(report, f, indent=2)
    ok = all(e["encoder_rel_err"] <= 1e-3 and e["decoder_z_rel_err"] <= 1e-3 and
             all(s["orders_identical"] for s in e["sampling"]) for e in report["configs"].values())
    print("parity", "OK" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
