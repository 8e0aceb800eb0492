#!/usr/bin/env python3
"""Fixtures for VARScope's Infinity transformer from the official FoundationVision/Infinity code.

The official code is NOT part of this repository: pass a local copy with --infinity-src (it must
contain infinity/models/infinity.py). This script holds no model code: it imports the official
modules, builds a tiny random Infinity with the 2B/8B switches (shared AdaLN, cosine attention,
2-D RoPE normalised by the final grid (mode 2), level embedding only before the first block, bit
labels, fused-norm path) and writes into OUTDIR:
  infinity_tiny.pth          the state dict as torch.save(model.state_dict()) writes it, with
                             the block_chunks.<c>.module.<j>. names of the released checkpoints
  teacher.safetensors        text features (kv_compact, lens), random bit labels per scale, the
                             official next-scale inputs made from them (x_BLC_wo_prefix) and the
                             teacher-forced logits (B, L, 2*codebook_dim), plus sos and the
                             cross-attention keys for debugging
  sample_<run>.safetensors   autoregressive_infer_cfg runs: per-scale bits (B, h, w, d) and the
                             final summed codes, for a seed / cfg list / tau / top-k / top-p /
                             cfg_insertion_layer (settings in schedules.json under "runs");
                             sample_patchify: the same weights with apply_spatial_patchify over
                             a 2-bit quantizer (Infinity-8B's layout), bits (B, 2h, 2w, 2)
  schedules.json             the official dynamic-resolution schedules (h_div_w templates ->
                             pn -> scales), the tiny config and the runs' settings
  sample_bf16_<run>.safetensors  the logits_cfg and layer_cfg runs in the official bf16 mode
                             (blocks in bf16, the loop under CUDA autocast(bfloat16) emulated on
                             the CPU by autocast_emulation.py): per-scale bits
  release_shapes.json        names and shapes of the released 2B / 8B state dicts (built on the
                             meta device), to check config inference and names at full size
Stubs (CPU, no extra packages): flash_attn (the varlen cross-attention computed in fp32 on the
bf16-rounded inputs the caller passes, output rounded to the input dtype, as flash-attn's
fp32-accumulating kernel returns it), timm (register_model, DropPath), PIL (unused import), and
torch.compile (identity: the official fused_op functions then run eagerly, same math).
Needs einops and pytz (pip install --target DIR; PYTHONPATH=DIR).
"""
import argparse
import json
import math
import os
import sys
import types

import torch
import torch.nn.functional as F


def install_stubs():
    """Import-time stand-ins for packages the CPU run does not have."""

    def varlen_kvpacked(q, kv, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                        dropout_p=0.0, softmax_scale=None, **_):
        # q (Nq, H, c), kv (Nk, 2, H, c): one attention per row of the packed batch.
        out = torch.empty_like(q)
        # fp32 arithmetic on the bf16 operands in every mode: under (emulated) autocast too, the
        # SDPA call below must not run in bf16 (flash-attn accumulates in fp32).
        with torch.autocast("cuda", enabled=False):
            _varlen_rows(q, kv, cu_seqlens_q, cu_seqlens_k, softmax_scale, out)
        return out

    def _varlen_rows(q, kv, cu_seqlens_q, cu_seqlens_k, softmax_scale, out):
        for b in range(cu_seqlens_q.numel() - 1):
            q0, q1 = int(cu_seqlens_q[b]), int(cu_seqlens_q[b + 1])
            k0, k1 = int(cu_seqlens_k[b]), int(cu_seqlens_k[b + 1])
            qb = q[q0:q1].float().transpose(0, 1)            # H Lq c
            kb = kv[k0:k1, 0].float().transpose(0, 1)        # H Lk c
            vb = kv[k0:k1, 1].float().transpose(0, 1)
            ob = F.scaled_dot_product_attention(qb, kb, vb, scale=softmax_scale)
            out[q0:q1] = ob.transpose(0, 1).to(q.dtype)

    def flash_attn_func(*a, **k):
        raise RuntimeError("flash_attn_func stub: the tiny model uses SDPA (customized_flash_attn=False)")

    fa = types.ModuleType("flash_attn")
    fa.flash_attn_func = flash_attn_func
    fa.flash_attn_varlen_kvpacked_func = varlen_kvpacked
    sys.modules["flash_attn"] = fa

    class DropPath(torch.nn.Identity):
        def __init__(self, *a, **k):
            super().__init__()

    timm = types.ModuleType("timm")
    timm_models = types.ModuleType("timm.models")
    timm_models.register_model = lambda f: f
    timm_layers = types.ModuleType("timm.models.layers")
    timm_layers.DropPath = DropPath
    timm_layers.drop_path = lambda x, *a, **k: x
    timm_loss = types.ModuleType("timm.loss")
    timm_loss.SoftTargetCrossEntropy = type("SoftTargetCrossEntropy", (torch.nn.Module,), {})
    timm.models, timm_models.layers, timm.loss = timm_models, timm_layers, timm_loss
    for name, mod in (("timm", timm), ("timm.models", timm_models),
                      ("timm.models.layers", timm_layers), ("timm.loss", timm_loss)):
        sys.modules[name] = mod
    pil = types.ModuleType("PIL")
    pil.Image = types.ModuleType("PIL.Image")
    sys.modules["PIL"], sys.modules["PIL.Image"] = pil, pil.Image

    def compile_identity(fn=None, **_):
        return fn if fn is not None else (lambda f: f)

    torch.compile = compile_identity


def randomise_(model, gen):
    """Well-conditioned random weights for every parameter (biases and gains included)."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("scale_mul_1H11"):
                p.copy_(math.log(4.0) + 0.2 * torch.randn(p.shape, generator=gen))
            elif name == "cfg_uncond":
                p.copy_(torch.randn(p.shape, generator=gen))
            elif name.endswith("ada_gss"):
                p.copy_(0.3 * torch.randn(p.shape, generator=gen))
            elif p.dim() >= 2 or name.endswith("mat_q"):
                fan_in = p.shape[-1]
                p.copy_(torch.randn(p.shape, generator=gen) / math.sqrt(fan_in))
            elif name.endswith("weight"):  # norms
                p.copy_(1 + 0.1 * torch.randn(p.shape, generator=gen))
            else:
                p.copy_(0.05 * torch.randn(p.shape, generator=gen))


def release_shapes(Infinity, MultiScaleBSQ):
    """Tensor names and shapes of the released 2B / 8B transformers (tools/run_infinity.py's
    settings), built on the meta device: no weights are allocated."""
    item = torch.Tensor.item
    torch.Tensor.item = lambda self: 0.0 if self.is_meta else item(self)  # values unused here
    out = {}
    try:
        for name, kw, d, patch in (
                ("2b", dict(depth=32, embed_dim=2048, num_heads=16, block_chunks=8), 32, 0),
                ("8b", dict(depth=40, embed_dim=3584, num_heads=28, block_chunks=8), 14, 1)):
            vae = types.SimpleNamespace(embed_dim=d, vocab_size=2 ** d, quantizer=MultiScaleBSQ(
                dim=d, codebook_size=2 ** d, schedule_mode="dynamic"))
            with torch.device("meta"):
                m = Infinity(
                    vae_local=vae, text_channels=2048, text_maxlen=512, shared_aln=True,
                    checkpointing="full-block", customized_flash_attn=False, fused_norm=True,
                    pad_to_multiplier=128, use_flex_attn=False, add_lvl_embeding_only_first_block=1,
                    use_bit_label=1, rope2d_each_sa_layer=1, rope2d_normalized_by_hw=2, pn="1M",
                    apply_spatial_patchify=patch, inference_mode=True, train_h_div_w_list=[1.0],
                    drop_path_rate=0.1, mlp_ratio=4, **kw)
            out[name] = {k: list(v.shape) for k, v in m.state_dict().items()}
    finally:
        torch.Tensor.item = item
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--infinity-src", required=True)
    ap.add_argument("--make-fixture", required=True, metavar="OUTDIR")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    install_stubs()
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from autocast_emulation import CudaAutocastBf16, install_autocast_switches
    install_autocast_switches()
    sys.path.insert(0, os.path.abspath(args.infinity_src))
    from safetensors.torch import save_file
    from infinity.models.infinity import Infinity
    from infinity.models.bsq_vae.multiscale_bsq import MultiScaleBSQ
    from infinity.utils.dynamic_resolution import dynamic_resolution_h_w, h_div_w_templates

    torch.manual_seed(args.seed)
    out = args.make_fixture
    os.makedirs(out, exist_ok=True)

    # Tiny, with the released 2B/8B switches. The attentive pool's head width is 128 (D <= 4096),
    # so text_channels must be a multiple of 128; depth 6 lets cfg_insertion_layer -5 (the
    # official default) name a layer; two block chunks as inference needs block_chunks > 1.
    d = 8
    tiny = dict(depth=6, embed_dim=32, num_heads=2, mlp_ratio=4.0, text_channels=128,
                text_maxlen=16, codebook_dim=d, block_chunks=2)
    vae = types.SimpleNamespace(embed_dim=d, vocab_size=2 ** d,
                                quantizer=MultiScaleBSQ(dim=d, codebook_size=2 ** d,
                                                        schedule_mode="dynamic"))
    model = Infinity(
        vae_local=vae, text_channels=tiny["text_channels"], text_maxlen=tiny["text_maxlen"],
        embed_dim=tiny["embed_dim"], depth=tiny["depth"], num_heads=tiny["num_heads"],
        mlp_ratio=tiny["mlp_ratio"], drop_path_rate=0.0, shared_aln=True,
        checkpointing="full-block", customized_flash_attn=False, fused_norm=True,
        pad_to_multiplier=128, use_flex_attn=False, add_lvl_embeding_only_first_block=1,
        use_bit_label=1, rope2d_each_sa_layer=1, rope2d_normalized_by_hw=2, pn="0.06M",
        apply_spatial_patchify=0, inference_mode=True, train_h_div_w_list=[1.0],
        block_chunks=tiny["block_chunks"], cond_drop_rate=0.0)
    gen = torch.Generator().manual_seed(args.seed + 1)
    randomise_(model, gen)
    model.eval()
    torch.save(model.state_dict(), os.path.join(out, "infinity_tiny.pth"))

    # A non-square official schedule (h/w = 1.333, 0.06M: 7 scales up to 16x12... see json).
    h_div_w = 1.333
    pn = "0.06M"
    scales = [(1, h, w) for (_, h, w) in dynamic_resolution_h_w[h_div_w][pn]["scales"]]
    L = sum(h * w for _, h, w in scales)

    # Text features: two rows of different lengths, packed as the official encode_prompt packs.
    lens = [5, 11]
    B = len(lens)
    kv_compact = torch.randn(sum(lens), tiny["text_channels"], generator=gen)
    cu = F.pad(torch.tensor(lens, dtype=torch.int32).cumsum(0, dtype=torch.int32), (1, 0))
    text = (kv_compact, lens, cu, max(lens))

    # Random bit labels per scale -> the official next-scale inputs (summed codes upsampled to
    # the last scale, then interpolated to the next scale), as in autoregressive_infer_cfg.
    q = vae.quantizer
    bits = [torch.randint(0, 2, (B, 1, h, w, d), generator=gen).float() for _, h, w in scales]
    summed = 0
    inputs = []
    for si in range(len(scales) - 1):
        codes = q.lfq.indices_to_codes(bits[si], label_type="bit_label")
        summed = summed + F.interpolate(codes, size=scales[-1], mode=q.z_interplote_up)
        nxt = F.interpolate(summed, size=scales[si + 1], mode=q.z_interplote_up).squeeze(-3)
        inputs.append(nxt.reshape(B, d, -1).permute(0, 2, 1))
    x_wo_prefix = torch.cat(inputs, 1)
    assert x_wo_prefix.shape[1] == L - 1

    with torch.no_grad():
        logits = model((kv_compact.clone(), lens, cu, max(lens)), x_wo_prefix, scale_schedule=scales)
        kv_n = model.text_norm(kv_compact)
        sos = model.text_proj_for_sos((kv_n, cu, max(lens)))
        ca = model.text_proj_for_ca(kv_n)
    teacher = {"kv_compact": kv_compact, "lens": torch.tensor(lens, dtype=torch.int64),
               "x_BLC_wo_prefix": x_wo_prefix.contiguous(), "logits": logits.contiguous(),
               "sos": sos.contiguous(), "ca_kv": ca.contiguous(),
               "scales": torch.tensor([[h, w] for _, h, w in scales], dtype=torch.int64)}
    for si, b in enumerate(bits):
        teacher[f"bits.{si}"] = b[:, 0].to(torch.uint8).contiguous()
    save_file(teacher, os.path.join(out, "teacher.safetensors"))
    # The official model's own sensitivity: its fp32 path rounds cross-attention operands to
    # bf16, so an input change at float precision moves the logits by far more.
    with torch.no_grad():
        noisy = x_wo_prefix * (1 + 1e-7 * torch.randn(x_wo_prefix.shape, generator=gen))
        moved = model((kv_compact.clone(), lens, cu, max(lens)), noisy, scale_schedule=scales)
    floor = ((moved - logits).norm() / logits.norm()).item()
    print(f"teacher: logits {tuple(logits.shape)}, |logits| mean {logits.abs().mean():.3f}; "
          f"official noise floor (input x (1 + 1e-7 N(0,1))): rel. change {floor:.2g}")

    # Sampling runs: the official loop with its own generator; bits are taken where the loop
    # turns them into codes (indices_to_codes), the summed codes rebuilt from them.
    n = len(scales)
    runs = {
        "logits_cfg": dict(seed=7, cfg=[1.0] + [3.0] * (n - 1), tau=[0.5] * n, top_k=900,
                           top_p=0.97, cfg_insertion_layer=[0]),
        "layer_cfg": dict(seed=11, cfg=[float(1 + 0.5 * i) for i in range(n)], tau=[1.0] * n,
                          top_k=0, top_p=0.0, cfg_insertion_layer=[-5]),
        "no_cfg_topk1": dict(seed=3, cfg=[1.0] * n, tau=[0.8] * n, top_k=1, top_p=0.0,
                             cfg_insertion_layer=[0]),
    }
    recorded = []
    orig = q.lfq.indices_to_codes

    def recording(indices, label_type="int_label", project_out=True):
        recorded.append(indices.clone())
        return orig(indices, label_type=label_type, project_out=project_out)

    q.lfq.indices_to_codes = recording
    for name, r in runs.items():
        recorded.clear()
        with torch.no_grad():
            model.autoregressive_infer_cfg(
                vae=vae, scale_schedule=scales, label_B_or_BLT=(kv_compact.clone(), lens, cu, max(lens)),
                B=B, g_seed=r["seed"], cfg_list=r["cfg"], tau_list=r["tau"], top_k=r["top_k"],
                top_p=r["top_p"], cfg_insertion_layer=r["cfg_insertion_layer"], vae_type=d,
                returns_vemb=1, ret_img=False, inference_mode=True, gt_leak=0)
        assert len(recorded) == n
        t = {f"bits.{si}": x[:, 0].to(torch.uint8).contiguous() for si, x in enumerate(recorded)}
        summed = 0
        for x in recorded:
            summed = summed + F.interpolate(orig(x, label_type="bit_label"), size=scales[-1],
                                            mode=q.z_interplote_up)
        t["summed_codes"] = summed.squeeze(-3).contiguous()
        save_file(t, os.path.join(out, f"sample_{name}.safetensors"))
        ones = sum(int(x.sum()) for x in recorded) / sum(x.numel() for x in recorded)
        print(f"run {name}: share of 1-bits {ones:.3f}")
    q.lfq.indices_to_codes = orig

    # Spatial patchify (Infinity-8B's layout): the same transformer weights (8 bits per token)
    # over a 2-bit quantizer, each token covering 2 x 2 latent positions. Bits are recorded
    # where the loop turns them into codes, i.e. unpatchified: (B, 2h, 2w, 2).
    vae_p = types.SimpleNamespace(embed_dim=d // 4, vocab_size=2 ** (d // 4),
                                  quantizer=MultiScaleBSQ(dim=d // 4, codebook_size=2 ** (d // 4),
                                                          schedule_mode="dynamic"))
    model.apply_spatial_patchify = 1
    qp = vae_p.quantizer
    orig_p = qp.lfq.indices_to_codes

    def recording_p(indices, label_type="int_label", project_out=True):
        recorded.append(indices.clone())
        return orig_p(indices, label_type=label_type, project_out=project_out)

    qp.lfq.indices_to_codes = recording_p
    r = dict(seed=5, cfg=[1.0] + [3.0] * (n - 1), tau=[0.5] * n, top_k=900, top_p=0.97,
             cfg_insertion_layer=[0])
    recorded.clear()
    with torch.no_grad():
        model.autoregressive_infer_cfg(
            vae=vae_p, scale_schedule=scales, label_B_or_BLT=(kv_compact.clone(), lens, cu, max(lens)),
            B=B, g_seed=r["seed"], cfg_list=r["cfg"], tau_list=r["tau"], top_k=r["top_k"],
            top_p=r["top_p"], cfg_insertion_layer=r["cfg_insertion_layer"], vae_type=d // 4,
            returns_vemb=1, ret_img=False, inference_mode=True, gt_leak=0)
    model.apply_spatial_patchify = 0
    qp.lfq.indices_to_codes = orig_p
    assert len(recorded) == n
    save_file({f"bits.{si}": x[:, 0].to(torch.uint8).contiguous() for si, x in enumerate(recorded)},
              os.path.join(out, "sample_patchify.safetensors"))
    patchify_run = dict(r, vae_codebook_dim=d // 4)
    print(f"run patchify: bits per position {d // 4}, last scale {tuple(recorded[-1].shape)}")

    # The official bf16 mode (run_infinity.py's bf16=1): every block in bf16 and the loop under
    # CUDA autocast(bfloat16), emulated op by op on the CPU (autocast_emulation.py), with the
    # official autocast-disabled regions (modulation, RoPE, head, quantizer) honoured.
    for b in model.unregistered_blocks:
        b.bfloat16()
    q.lfq.indices_to_codes = recording
    bf16_runs = {"bf16_logits_cfg": runs["logits_cfg"], "bf16_layer_cfg": runs["layer_cfg"]}
    for name, r in bf16_runs.items():
        recorded.clear()
        with torch.no_grad(), CudaAutocastBf16():
            model.autoregressive_infer_cfg(
                vae=vae, scale_schedule=scales, label_B_or_BLT=(kv_compact.clone(), lens, cu, max(lens)),
                B=B, g_seed=r["seed"], cfg_list=r["cfg"], tau_list=r["tau"], top_k=r["top_k"],
                top_p=r["top_p"], cfg_insertion_layer=r["cfg_insertion_layer"], vae_type=d,
                returns_vemb=1, ret_img=False, inference_mode=True, gt_leak=0)
        assert len(recorded) == n
        save_file({f"bits.{si}": x[:, 0].to(torch.uint8).contiguous() for si, x in enumerate(recorded)},
                  os.path.join(out, f"sample_{name}.safetensors"))
        print(f"run {name}: bf16 blocks under emulated CUDA autocast")
    q.lfq.indices_to_codes = orig

    sched = {str(float(k)): {p: [list(s) for s in v[p]["scales"]] for p in v}
             for k, v in dynamic_resolution_h_w.items()}
    meta = {"config": tiny, "h_div_w": h_div_w, "pn": pn, "scales": [[h, w] for _, h, w in scales],
            "lens": lens, "runs": runs, "patchify_run": patchify_run,
            "bf16_runs": {k: k[len("bf16_"):] for k in bf16_runs},
            "h_div_w_templates": [float(x) for x in h_div_w_templates],
            "dynamic_resolution_h_w": sched}
    with open(os.path.join(out, "schedules.json"), "w") as f:
        json.dump(meta, f, indent=1)
    with open(os.path.join(out, "release_shapes.json"), "w") as f:
        json.dump(release_shapes(Infinity, MultiScaleBSQ), f)
    print("wrote", out, sorted(os.listdir(out)))


if __name__ == "__main__":
    main()
