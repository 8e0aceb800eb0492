#!/usr/bin/env python3
"""Parity of our BSQ multi-scale VAE (core/models/bsq_vae*, core/models/bsq_quant.*) with
Infinity's official infinity/models/bsq_vae (FoundationVision/Infinity).

The official code is NOT part of this repository: pass the root of a local copy with
--infinity-src (it must contain infinity/models/bsq_vae/). Only the bsq_vae modules are
imported; the package __init__ files (timm, flash-attn, the transformer) are bypassed, and the
unused imageio / torchvision imports of flux_vqgan.py are stubbed. Needs torch, numpy, einops
(and safetensors for --check's optional file).

--make-fixture OUTDIR   tiny random VAE on the CPU, written as the official checkpoint layout
                        ({"vae": state_dict}, torch.save) plus inputs and the official outputs
                        (expected.pth): codes of bit labels, the quantizer's interpolations,
                        the sampler's summed codes / next-scale inputs, encode -> bit labels per
                        scale, decode. tests/bsq_vae_test.cpp compares against it.
--check OUTDIR          the real infinity_vae_d32reg architecture (Infinity-2B: codebook_dim 32,
                        patch 16, ch_mult 1 2 4 4 4; --variant d14f8: Infinity-8B's VAE) with
                        random weights, on CUDA when present (TF32 off):
                        writes the same files at that shape for the C++ side to compare
                        (`--image-size` 256 by default; the lead runs it on the GPU machine),
                        then: VARSCOPE_BSQ_PARITY_DIR=OUTDIR varscope_tests \
                              --gtest_filter=BsqVaeParity.CheckDirectoryMatchesOfficial

  PYTHONPATH=/work/pydeps /opt/venv/bin/python tools/parity/bsq_vae_parity.py \\
      --infinity-src /tmp/infinity-src --make-fixture tests/fixtures/bsq_tiny
"""
import argparse
import math
import os
import sys
import types

import torch
import torch.nn.functional as F


def import_official(src):
    """Imports infinity.models.bsq_vae.{vae,flux_vqgan,multiscale_bsq} without the package
    __init__ files (they pull the transformer, timm and flash-attn)."""
    root = os.path.abspath(src)
    if not os.path.isdir(os.path.join(root, "infinity", "models", "bsq_vae")):
        sys.exit(f"--infinity-src {src}: no infinity/models/bsq_vae there")
    for name, path in (("infinity", "infinity"), ("infinity.models", "infinity/models")):
        mod = types.ModuleType(name)
        mod.__path__ = [os.path.join(root, path)]
        sys.modules[name] = mod
    # flux_vqgan.py imports these for its training/video helpers only.
    for name in ("imageio", "torchvision", "torchvision.transforms"):
        if name not in sys.modules:
            try:
                __import__(name)
            except ImportError:
                sys.modules[name] = types.ModuleType(name)
    sys.modules["torchvision"].transforms = sys.modules["torchvision.transforms"]
    import infinity.models.bsq_vae.vae as vae_mod
    import infinity.models.bsq_vae.flux_vqgan as flux_mod
    return vae_mod, flux_mod


def official_args(vae_mod, codebook_dim, patch_size, enc_mult, dec_mult):
    """The argparse.Namespace the official vae_model() builds (run_infinity.py's
    load_visual_tokenizer arguments: schedule_mode 'dynamic', new_quant, no attention ...)."""
    real = vae_mod.AutoEncoder
    vae_mod.AutoEncoder = lambda args: args  # capture instead of building
    try:
        args = vae_mod.vae_model(None, "dynamic", codebook_dim, 2**codebook_dim, test_mode=False,
                                 patch_size=patch_size, encoder_ch_mult=list(enc_mult),
                                 decoder_ch_mult=list(dec_mult))
    finally:
        vae_mod.AutoEncoder = real
    return args


def randomise_(model, gen):
    """Well-conditioned random weights (unit-variance activations through the stack)."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() >= 2:
                p.copy_(torch.randn(p.shape, generator=gen) / math.sqrt(p[0].numel()))
            elif "norm" in name and name.endswith("weight"):
                p.copy_(1 + 0.05 * torch.randn(p.shape, generator=gen))
            else:
                p.copy_(0.05 * torch.randn(p.shape, generator=gen))


def build(vae_mod, flux_mod, cfg, seed):
    args = official_args(vae_mod, cfg["codebook_dim"], cfg["patch_size"], cfg["encoder_ch_mult"],
                         cfg["decoder_ch_mult"])
    args.base_ch = cfg["base_ch"]
    args.num_res_blocks = cfg["num_res_blocks"]
    model = flux_mod.AutoEncoder(args)
    randomise_(model, torch.Generator().manual_seed(seed))
    model.eval()
    # Round trip through the official loader: every key of our file must be consumed.
    fresh = flux_mod.AutoEncoder(args)
    sd = {k: v.clone() for k, v in model.state_dict().items()}
    _, left, loaded = vae_mod.load_cnn(fresh, dict(sd), prefix="", expand=False)
    assert not left and len(loaded) == len(sd), f"official load_cnn left {list(left)[:5]}"
    return model


def sampler_codes(model, bits_per_scale, schedule):
    """The bit-label branch of Infinity.autoregressive_infer_cfg (vae_type != 0, no patchify):
    summed codes at the final size and the next-scale inputs, with the official quantizer."""
    q = model.quantizer
    summed, nexts = 0, []
    for si, bits in enumerate(bits_per_scale):
        codes = q.lfq.indices_to_codes(bits, label_type="bit_label")
        if si != len(schedule) - 1:
            summed = summed + F.interpolate(codes, size=schedule[-1], mode=q.z_interplote_up)
            nexts.append(F.interpolate(summed, size=schedule[si + 1], mode=q.z_interplote_up))
        else:
            summed = summed + codes
    return summed, nexts


def make_outputs(model, img, schedule, gen, device):
    q = model.quantizer
    d = model.codebook_dim
    out = {"image": img.cpu(), "schedule": torch.tensor(schedule, dtype=torch.int64)}
    with torch.no_grad():
        # quantizer ops on random bit labels
        bits = torch.randint(0, 2, (2, 1, 3, 5, d), generator=gen).to(device)
        codes = q.lfq.indices_to_codes(bits, label_type="bit_label")
        out.update(bits=bits.cpu(), codes=codes.cpu())
        x = torch.randn(2, d, 1, 7, 9, generator=gen).to(device)
        out["interp_in"] = x.cpu()
        out["interp_up"] = F.interpolate(x, size=(1, 10, 13), mode=q.z_interplote_up).cpu()
        out["interp_up_small"] = F.interpolate(x, size=(1, 4, 5), mode=q.z_interplote_up).cpu()
        out["interp_down"] = F.interpolate(x, size=(1, 3, 4), mode=q.z_interplote_down).cpu()

        # encoder + multi-scale quantizer (the official AutoEncoder.encode)
        h, z, _, bit_indices, _, var_inputs = model.encode(img, scale_schedule=schedule)
        out["enc_h"] = h.cpu()
        out["enc_z"] = z.cpu()
        for si, b in enumerate(bit_indices):
            out[f"enc_bits.{si}"] = b.to(torch.int64).cpu()
        for si, v in enumerate(var_inputs):
            out[f"enc_var_input.{si}"] = v.cpu()

        # the sampler path with those labels, and both decodes
        summed, nexts = sampler_codes(model, bit_indices, schedule)
        out["sampler_summed"] = summed.cpu()
        for si, n in enumerate(nexts):
            out[f"sampler_next.{si}"] = n.cpu()
        out["decode_z"] = model.decode(z).cpu()  # clamped to [-1, 1]
        out["decoder_raw_z"] = model.decoder(z).cpu()
        summed2, rec = model.decode_from_indices(bit_indices, schedule, "bit_label")
        assert torch.equal(summed2, summed)
        out["decode_bits"] = rec.cpu()

        # Teacher forcing as the official trainer does it (no label noise), without and with
        # spatial patchify (then on a vae schedule of even sizes).
        from infinity.models.bitwise_self_correction import BitwiseSelfCorrection
        for tag, patchify, sched in (("tf", 0, schedule), ("tfp", 1, patchify_schedule(h))):
            if sched is None:
                continue
            bsc_args = types.SimpleNamespace(noise_apply_layers=0, noise_apply_requant=0,
                                             noise_apply_strength=0.0, debug_bsc=0,
                                             apply_spatial_patchify=patchify)
            bsc = BitwiseSelfCorrection(model, bsc_args)
            x_blc, gt = bsc.flip_requant(sched, img, h, device)
            out[f"{tag}_schedule"] = torch.tensor(sched, dtype=torch.int64)
            out[f"{tag}_x"] = x_blc.cpu()
            for si, g in enumerate(gt):
                out[f"{tag}_gt.{si}"] = g.to(torch.int64).cpu()
    return out


def patchify_schedule(h):
    """Even-sized vae scales ending at the latent size, or None if it is odd."""
    H, W = h.shape[-2:]
    if H % 2 or W % 2 or H < 4 or W < 4:
        return None
    return [(1, 2, 2), (1, H // 2 if (H // 2) % 2 == 0 else H // 2 + 1, W // 2 if (W // 2) % 2 == 0
                        else W // 2 + 1), (1, H, W)]


TINY = dict(codebook_dim=6, patch_size=4, base_ch=24, num_res_blocks=1,
            encoder_ch_mult=(2, 1, 1), decoder_ch_mult=(1, 1, 1))
D32REG = dict(codebook_dim=32, patch_size=16, base_ch=128, num_res_blocks=2,
              encoder_ch_mult=(1, 2, 4, 4, 4), decoder_ch_mult=(1, 2, 4, 4, 4))
# Infinity-8B's infinity_vae_d56_f8_14_patchify (run_infinity.py with apply_spatial_patchify).
D14F8 = dict(codebook_dim=14, patch_size=8, base_ch=128, num_res_blocks=2,
             encoder_ch_mult=(1, 2, 4, 4), decoder_ch_mult=(1, 2, 4, 4))


def write(outdir, model, outputs, cfg):
    os.makedirs(outdir, exist_ok=True)
    sd = {k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()}
    torch.save({"vae": sd}, os.path.join(outdir, "vae.pth"))  # the released files' layout
    outputs["config"] = torch.tensor(
        [cfg["codebook_dim"], cfg["patch_size"], cfg["base_ch"], cfg["num_res_blocks"]])
    torch.save({k: v.contiguous() for k, v in outputs.items()},
               os.path.join(outdir, "expected.pth"))
    total = sum(os.path.getsize(os.path.join(outdir, f)) for f in os.listdir(outdir))
    print(f"wrote {outdir}: {len(sd)} tensors, {total} bytes")


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--infinity-src", required=True)
    ap.add_argument("--make-fixture", metavar="OUTDIR")
    ap.add_argument("--check", metavar="OUTDIR")
    ap.add_argument("--image-size", type=int, default=256, help="--check only")
    ap.add_argument("--variant", choices=["d32reg", "d14f8"], default="d32reg",
                    help="--check only: Infinity-2B's or Infinity-8B's VAE architecture")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    if bool(a.make_fixture) == bool(a.check):
        ap.error("give exactly one of --make-fixture / --check")
    vae_mod, flux_mod = import_official(a.infinity_src)
    torch.manual_seed(a.seed)
    gen = torch.Generator().manual_seed(a.seed + 1)
    if a.make_fixture:
        torch.set_num_threads(1)  # deterministic reductions for the fixture
        model = build(vae_mod, flux_mod, TINY, a.seed)
        # 16x24 image -> 4x6 latent; a non-square schedule ending at the latent size.
        schedule = [(1, 1, 1), (1, 2, 3), (1, 3, 4), (1, 4, 6)]
        img = torch.rand(2, 3, 16, 24, generator=gen) * 2 - 1
        write(a.make_fixture, model, make_outputs(model, img, schedule, gen, "cpu"), TINY)
    else:
        device = "cuda" if torch.cuda.is_available() else "cpu"
        # A true fp32 reference: no TF32 in cuDNN convolutions or matmuls.
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cuda.matmul.allow_tf32 = False
        cfg = D32REG if a.variant == "d32reg" else D14F8
        model = build(vae_mod, flux_mod, cfg, a.seed).to(device)
        # Infinity's token schedule is that of a stride-16 latent; with spatial patchify (8B,
        # patch 8) the vae-side schedule doubles h and w (autoregressive_infer_cfg).
        s = a.image_size // 16
        up = 16 // cfg["patch_size"]
        from infinity.models.bsq_vae.dynamic_resolution import predefined_HW_Scales_dynamic
        hw = predefined_HW_Scales_dynamic.get((s, s), [(s, s)])
        schedule = [(1, up * h, up * w) for h, w in hw]
        img = (torch.rand(1, 3, a.image_size, a.image_size, generator=gen) * 2 - 1).to(device)
        write(a.check, model, make_outputs(model, img, schedule, gen, device), cfg)


if __name__ == "__main__":
    main()
