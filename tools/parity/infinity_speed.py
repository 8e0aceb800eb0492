#!/usr/bin/env python3
"""Speed of varscope-cli against the official FoundationVision/Infinity sampler, same weights, text
features and seed (issue #32's anchor: official Infinity-2B, 1024x1024, batch 1, bf16).

The official code is NOT part of this repository: pass a local copy with --infinity-src. The
official Infinity-2B (tools/run_infinity.py's settings: bf16=1 puts every block in bf16 and the
loop runs under torch.autocast(bfloat16)) gets random weights on the GPU; its state dict is saved
with torch.save (blocks in bf16, the rest fp32) and loaded unchanged by our CLI, which runs the
official bf16 mode (--precision bf16) through `bench e2e` (dense, with CUDA graphs and eagerly).
flash-attn is not installed on the GPU machine: its varlen cross-attention is replaced by the
arithmetic our C++ uses for it (the packed rows as a padded batch with a -inf key mask, fp32 SDPA
on the bf16 operands, output rounded to bf16), so both sides compute the same values; its cost is
a small part of a step (text of tens of tokens). Sampling is timed without the VAE decode (as the
bench does and the papers report), warm-up runs then the median of N, the device synchronised
around each call. Bits: per scale, whether ours equal the official run's (same seed).
Writes a JSON report and prints a table.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import types

import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from infinity_parity import install_stubs  # noqa: E402  (timm / PIL / torch.compile stand-ins)


def install_gpu_flash_stub():
    """flash_attn_varlen_kvpacked_func as our C++ computes it (see the module docstring)."""
    host_lens = {}

    def varlen_kvpacked(q, kv, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                        dropout_p=0.0, softmax_scale=None, **_):
        key = (cu_seqlens_k.data_ptr(), cu_seqlens_k.numel())
        if key not in host_lens:  # one host read per text batch (the tensor is reused)
            host_lens[key] = (cu_seqlens_k[1:] - cu_seqlens_k[:-1]).tolist()
        lk = host_lens[key]
        B, Lq, Lk = len(lk), int(max_seqlen_q), int(max_seqlen_k)
        H, c = q.shape[1], q.shape[2]
        qb = q.float().view(B, Lq, H, c).transpose(1, 2)
        kp = kv.new_zeros(B, Lk, 2, H, c, dtype=torch.float32)
        mask = torch.zeros(B, 1, 1, Lk, device=q.device)
        off = 0
        for b, n in enumerate(lk):
            kp[b, :n] = kv[off:off + n].float()
            mask[b, ..., n:] = float("-inf")
            off += n
        with torch.autocast("cuda", enabled=False):  # fp32 arithmetic, as flash-attn accumulates
            o = F.scaled_dot_product_attention(qb, kp[:, :, 0].transpose(1, 2),
                                               kp[:, :, 1].transpose(1, 2), attn_mask=mask,
                                               scale=softmax_scale)
        return o.transpose(1, 2).reshape(B * Lq, H, c).to(q.dtype)

    sys.modules["flash_attn"].flash_attn_varlen_kvpacked_func = varlen_kvpacked


def build_official(Infinity, MultiScaleBSQ, seed):
    d = 32
    vae = types.SimpleNamespace(embed_dim=d, vocab_size=2 ** d, quantizer=MultiScaleBSQ(
        dim=d, codebook_size=2 ** d, schedule_mode="dynamic"))
    # Built on the CPU: the constructor draws cfg_uncond with a CPU generator.
    m = Infinity(
        vae_local=vae, text_channels=2048, text_maxlen=512, shared_aln=True,
        checkpointing="full-block", customized_flash_attn=False, fused_norm=True,
        pad_to_multiplier=128, use_flex_attn=False, add_lvl_embeding_only_first_block=1,
        use_bit_label=1, rope2d_each_sa_layer=1, rope2d_normalized_by_hw=2, pn="1M",
        apply_spatial_patchify=0, inference_mode=True, train_h_div_w_list=[1.0],
        depth=32, embed_dim=2048, num_heads=16, block_chunks=8, mlp_ratio=4,
        drop_path_rate=0.0)
    m = m.cuda()
    m.rng = torch.Generator(device="cuda")  # the sampler's generator, made on the CPU above
    g = torch.Generator(device="cuda").manual_seed(seed)
    with torch.no_grad():  # spread-out random weights (the official init makes blocks ~identity)
        for name, p in m.named_parameters():
            if name.endswith("scale_mul_1H11"):
                p.fill_(1.386)
            elif p.dim() >= 2 or name.endswith("mat_q"):
                p.copy_(torch.randn(p.shape, generator=g, device="cuda") / p.shape[-1] ** 0.5)
            elif name.endswith("weight"):
                p.fill_(1.0)
            else:
                p.copy_(0.02 * torch.randn(p.shape, generator=g, device="cuda"))
    for b in m.unregistered_blocks:  # run_infinity.py's bf16=1
        b.bfloat16()
    m.eval().requires_grad_(False)
    return m, vae


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--infinity-src", required=True)
    ap.add_argument("--cli", required=True, help="path of varscope-cli")
    ap.add_argument("--out", required=True, help="folder for the JSON report and the work files")
    ap.add_argument("--batches", default="1,4")
    ap.add_argument("--text-len", type=int, default=24)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    install_stubs()
    install_gpu_flash_stub()
    sys.path.insert(0, os.path.abspath(args.infinity_src))
    from infinity.models.infinity import Infinity
    from infinity.models.bsq_vae.multiscale_bsq import MultiScaleBSQ
    from infinity.utils.dynamic_resolution import dynamic_resolution_h_w

    os.makedirs(args.out, exist_ok=True)
    torch.manual_seed(args.seed)
    model, vae = build_official(Infinity, MultiScaleBSQ, args.seed)
    ckpt = os.path.join(args.out, "infinity_2b_random.pth")
    t0 = time.time()
    torch.save(model.state_dict(), ckpt)
    print(f"saved {ckpt} in {time.time() - t0:.0f} s", flush=True)
    scales = [(1, h, w) for (_, h, w) in dynamic_resolution_h_w[1.0]["1M"]["scales"]]
    n = len(scales)
    cfg, tau, top_k, top_p = 4.0, 1.0, 900, 0.97
    report = {"scales": [list(s) for s in scales], "cfg": cfg, "tau": tau, "top_k": top_k,
              "top_p": top_p, "device": torch.cuda.get_device_name(), "runs": []}

    q = vae.quantizer
    orig = q.lfq.indices_to_codes
    recorded = []

    def recording(indices, label_type="int_label", project_out=True):
        recorded.append(indices)
        return orig(indices, label_type=label_type, project_out=project_out)

    q.lfq.indices_to_codes = recording
    for B in [int(b) for b in args.batches.split(",")]:
        g = torch.Generator().manual_seed(args.seed + B)
        lens = [args.text_len] * B
        kv = torch.randn(sum(lens), 2048, generator=g)
        text_path = os.path.join(args.out, f"text_b{B}.safetensors")
        save_file({"kv_compact": kv, "lens": torch.tensor(lens, dtype=torch.int64)}, text_path)
        kv_cuda = kv.cuda()
        cu = F.pad(torch.tensor(lens, dtype=torch.int32, device="cuda").cumsum(0, dtype=torch.int32), (1, 0))

        def official():
            recorded.clear()
            with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16, cache_enabled=True):
                model.autoregressive_infer_cfg(
                    vae=vae, scale_schedule=scales, label_B_or_BLT=(kv_cuda, lens, cu, max(lens)),
                    B=B, g_seed=args.seed, cfg_list=[cfg] * n, tau_list=[tau] * n, top_k=top_k,
                    top_p=top_p, cfg_insertion_layer=[0], vae_type=32, returns_vemb=1,
                    ret_img=False, inference_mode=True, gt_leak=0)

        times = []
        for i in range(args.warmup + args.repeat):
            torch.cuda.synchronize()
            t = time.perf_counter()
            official()
            torch.cuda.synchronize()
            if i >= args.warmup:
                times.append(1000 * (time.perf_counter() - t))
        official_bits = [x[:, 0].to(torch.uint8).cpu() for x in recorded]
        peak = torch.cuda.max_memory_allocated() / 2 ** 20
        print(f"official b{B}: median {statistics.median(times):.1f} ms", flush=True)

        ours_json = os.path.join(args.out, f"ours_b{B}.json")
        tokens = os.path.join(args.out, f"ours_b{B}_tokens.safetensors")
        cmd = [args.cli, "bench", "e2e", "--infinity", ckpt, "--text-features", text_path,
               "--device", "cuda", "--precision", "bf16", "--seed", str(args.seed),
               "--cfg", str(cfg), "--tau", str(tau), "--top-k", str(top_k), "--top-p", str(top_p),
               "--methods", "baseline;baseline@eager", "--repeat", str(args.repeat),
               "--warmup", str(args.warmup), "--json", ours_json, "--tokens-out", tokens,
               "--no-cost-model", "--force"]
        r = subprocess.run(cmd, capture_output=True, text=True)
        print(r.stdout[-3000:], r.stderr[-2000:], flush=True)
        run = {"batch": B, "official_ms": times, "official_median_ms": statistics.median(times),
               "official_peak_mib": peak, "ours_rc": r.returncode, "cmd": " ".join(cmd)}
        if r.returncode == 0:
            ours = json.load(open(ours_json))
            run["ours"] = {m["name"]: {"median_ms": m.get("median_total_ms"),
                                       "cuda_graphs": m.get("cuda_graphs")}
                           for m in ours.get("methods", [])}
            base = run["ours"].get("baseline", {}).get("median_ms")
            if base:
                run["speedup_over_official"] = run["official_median_ms"] / base
            try:
                t = load_file(tokens)
                same = []
                for si, ob in enumerate(official_bits):
                    key = f"bits.{si}"
                    same.append(bool(key in t and torch.equal(t[key], ob.reshape(t[key].shape))))
                run["identical_bits_per_scale"] = same
            except Exception as e:  # the layout of --tokens-out is the CLI's; say what failed
                run["bits_error"] = repr(e)
        report["runs"].append(run)
    with open(os.path.join(args.out, "infinity_speed.json"), "w") as f:
        json.dump(report, f, indent=1)
    print(json.dumps(report["runs"], indent=1)[:4000])


if __name__ == "__main__":
    main()
