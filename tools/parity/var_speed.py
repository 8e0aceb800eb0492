#!/usr/bin/env python3
"""Speed of varscope-cli against the official FoundationVision/VAR sampler, same weights and tokens.

The official code is NOT part of this repository: pass the folder of a local copy with
--official (models/ and dist.py). For each depth, both sides get identical random weights
(var_parity.randomise_, saved with torch.save in the official layout and loaded unchanged by our
CLI). For each batch size, the official `autoregressive_infer_cfg` is timed in fp32 and under
bf16 autocast (torch SDPA, as the official code runs without flash-attn / xformers) and, on
request, with TF32 matrix products (the official demo's `tf32 = True`), and our CLI
(`bench e2e`, dense baseline with CUDA graphs and eagerly) in fp32, bf16 (bf16 weights and
stream), bf16-autocast (what autocast computes: fp32 stream, bf16 matrix products) and tf32, all with
the same labels, seed, cfg, top-k and top-p. Both sides are timed to the decoded images (the official call
returns images): warm-up runs, then the median of N, with the device synchronised around each call.
Tokens: the fraction identical per scale between ours and the official run of each precision
(ours bf16 and bf16-autocast are compared with the official bf16-autocast run), and the first
scale that differs.
Writes a JSON report and prints the table last.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import torch
from safetensors.torch import load_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from var_parity import randomise_  # noqa: E402  (the same weights as the parity check)
from autocast_emulation import CudaAutocastBf16  # noqa: E402

# Official runs: fp32, bf16 under torch.autocast, tf32 (fp32 with the official demo's
# `tf32 = True`: TF32 matrix products). Our precision -> the official run it should reproduce.
OFFICIAL_OF = {"fp32": "fp32", "bf16": "bf16", "bf16-autocast": "bf16", "tf32": "tf32"}


class Tf32:
    """The official demo_sample's `tf32 = True` (matmul and cuDNN TF32) while alive."""

    def __init__(self, on):
        self.on = on

    def __enter__(self):
        if self.on:
            self.saved = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32,
                          torch.get_float32_matmul_precision())
            torch.backends.cudnn.allow_tf32 = True
            torch.backends.cuda.matmul.allow_tf32 = True
            torch.set_float32_matmul_precision("high")
        return self

    def __exit__(self, *exc):
        if self.on:
            torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32, prec = self.saved
            torch.set_float32_matmul_precision(prec)
        return False


def official_run(var, labels, args, precision):
    """One call of the official sampler (returns images), as its demo runs it. "emulated": the
    fp32 model with CUDA autocast's casts written out (autocast_emulation.py), on any device."""
    if precision == "emulated":
        with torch.inference_mode(), CudaAutocastBf16():
            return var.autoregressive_infer_cfg(B=labels.numel(), label_B=labels, g_seed=args.seed,
                                                cfg=args.cfg, top_k=args.top_k, top_p=args.top_p)
    with torch.inference_mode(), Tf32(precision == "tf32"), torch.autocast(
            labels.device.type, dtype=torch.bfloat16, enabled=precision == "bf16", cache_enabled=True):
        return var.autoregressive_infer_cfg(B=labels.numel(), label_B=labels, g_seed=args.seed,
                                            cfg=args.cfg, top_k=args.top_k, top_p=args.top_p)


def sync(dev):
    if dev.type == "cuda":
        torch.cuda.synchronize()


def time_official(var, labels, args, precision):
    for _ in range(args.warmup):
        official_run(var, labels, args, precision)
    times = []
    for _ in range(args.repeat):
        sync(labels.device)
        t0 = time.perf_counter()
        official_run(var, labels, args, precision)
        sync(labels.device)
        times.append((time.perf_counter() - t0) * 1e3)
    return times


def official_tokens(official_var, var, labels, args, precision):
    """Token maps of one (untimed) official run, recorded at its sampling call."""
    drawn = []
    original = official_var.sample_with_top_k_top_p_

    def recording(*a, **k):
        out = original(*a, **k)
        drawn.append(out[:, :, 0].cpu())
        return out

    official_var.sample_with_top_k_top_p_ = recording
    try:
        official_run(var, labels, args, precision)
    finally:
        official_var.sample_with_top_k_top_p_ = original
    return drawn


def run_ours(args, var_path, vae_path, labels, precision, tag):
    """bench e2e: dense baseline with CUDA graphs, then eagerly; tokens of the graphed run."""
    js = os.path.join(args.work, f"ours_{tag}.json")
    tok = os.path.join(args.work, f"ours_{tag}.safetensors")
    cmd = [args.cli, "bench", "e2e", "--var", var_path, "--vae", vae_path, "--device", args.device,
           "--precision", precision, "--class", ",".join(map(str, labels)), "--seed", str(args.seed),
           "--cfg", str(args.cfg), "--top-k", str(args.top_k), "--top-p", str(args.top_p),
           "--methods", "baseline;baseline@eager", "--warmup", str(args.warmup),
           "--repeat", str(args.repeat), "--decode", "--no-scale-sync", "--json", js,
           *(["--patch-nums", args.patch_nums] if args.patch_nums else []),
           "--tokens-out", tok, "--force"]
    print("+", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    with open(js) as f:
        report = json.load(f)
    methods = {m["name"]: m for m in report["methods"]}
    tokens = load_file(tok)
    return methods, [tokens[f"tokens.{si}"] for si in range(len(tokens) - 1)]


def identical(ours, ref):
    return [(a == b).float().mean().item() for a, b in zip(ours, ref)]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--official", required=True, help="folder with the official models/ and dist.py")
    ap.add_argument("--cli", required=True, help="path of varscope-cli")
    ap.add_argument("--work", required=True, help="scratch folder for weights and tensors")
    ap.add_argument("--out", required=True, help="JSON report")
    ap.add_argument("--device", default="cuda", help="cuda (cpu only to test this script)")
    ap.add_argument("--depths", default="16,30")
    ap.add_argument("--batches", default="1,16")
    ap.add_argument("--ours-precisions", default="fp32,bf16,bf16-autocast",
                    help="any of fp32, bf16, bf16-autocast, tf32")
    ap.add_argument("--official-precisions", default=None,
                    help="official runs (fp32, bf16 = bf16 autocast, tf32); default: the ones "
                         "--ours-precisions needs, plus fp32")
    ap.add_argument("--emulate", action="store_true",
                    help="also run the official sampler with autocast's casts written out "
                         "(autocast_emulation.py) and compare tokens with it")
    ap.add_argument("--patch-nums", default=None,
                    help="scale schedule for both sides, e.g. 1,2,4,6,8,12,16,20,24,32,40,48,64 "
                         "(1024², 13 scales); default: the official 256² one")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--cfg", type=float, default=4.0)
    ap.add_argument("--top-k", type=int, default=900)
    ap.add_argument("--top-p", type=float, default=0.95)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    ours = args.ours_precisions.split(",")
    unknown = [p for p in ours if p not in OFFICIAL_OF]
    if unknown:
        ap.error(f"unknown --ours-precisions {unknown}; choose from {sorted(OFFICIAL_OF)}")
    official_precisions = (args.official_precisions.split(",") if args.official_precisions
                           else sorted({"fp32", *(OFFICIAL_OF[p] for p in ours)}))
    missing = [OFFICIAL_OF[p] for p in ours if OFFICIAL_OF[p] not in official_precisions]
    if missing or any(p not in ("fp32", "bf16", "tf32") for p in official_precisions):
        ap.error("--official-precisions must be among fp32, bf16, tf32 and cover "
                 f"what --ours-precisions reproduces ({sorted(set(missing))} missing)")
    if args.emulate and "bf16" not in official_precisions:
        ap.error("--emulate compares with the official bf16 autocast run: add bf16")

    sys.path.insert(0, os.path.abspath(args.official))
    import models  # noqa: E402  (official code)
    import models.var as official_var  # noqa: E402

    os.makedirs(args.work, exist_ok=True)
    dev = torch.device(args.device)
    device_name = torch.cuda.get_device_name(0) if dev.type == "cuda" else "cpu"
    report = {"torch": torch.__version__, "device": device_name,
              "seed": args.seed, "cfg": args.cfg, "top_k": args.top_k, "top_p": args.top_p,
              "warmup": args.warmup, "repeat": args.repeat,
              "timing": "to decoded images, device synchronised, median of repeat runs; ours: "
                        "bench e2e --decode --no-scale-sync, CUDA graph capture excluded",
              "rows": []}
    patch_nums = tuple(int(x) for x in args.patch_nums.split(",")) if args.patch_nums else None
    report["patch_nums"] = list(patch_nums) if patch_nums else None
    for depth in map(int, args.depths.split(",")):
        gen = torch.Generator().manual_seed(args.seed)
        extra = {"patch_nums": patch_nums} if patch_nums else {}
        vae, var = models.build_vae_var(device=dev, depth=depth, shared_aln=False,
                                        flash_if_available=False, fused_if_available=False,
                                        **extra)
        randomise_(vae, gen)
        randomise_(var, gen)
        vae.eval()
        var.eval()
        var.cond_drop_rate = 0.0
        var_path = os.path.join(args.work, f"var_d{depth}.pth")
        vae_path = os.path.join(args.work, f"vae_d{depth}.pth")
        torch.save(var.state_dict(), var_path)
        torch.save(vae.state_dict(), vae_path)
        for batch in map(int, args.batches.split(",")):
            labels = torch.randint(0, 1000, (batch,), generator=torch.Generator().manual_seed(batch))
            labels[0] = 207
            labels_dev = labels.to(dev)
            official = {}
            for p in official_precisions:
                times = time_official(var, labels_dev, args, p)
                official[p] = {"median_ms": statistics.median(times), "ms_each": times,
                               "tokens": official_tokens(official_var, var, labels_dev, args, p)}
                print(f"official d{depth} b{batch} {p}: {official[p]['median_ms']:.1f} ms", flush=True)
            emulated = official_tokens(official_var, var, labels_dev, args, "emulated") \
                if args.emulate else None
            emu_vs_autocast = identical(emulated, official["bf16"]["tokens"]) if emulated else None
            if emulated:
                print(f"emulated autocast vs official autocast, identical per scale: "
                      f"{emu_vs_autocast}", flush=True)
            for p in args.ours_precisions.split(","):
                tag = f"d{depth}_b{batch}_{p}"
                try:
                    methods, tokens = run_ours(args, var_path, vae_path, labels.tolist(), p, tag)
                except subprocess.CalledProcessError as e:
                    print(f"ours d{depth} b{batch} {p}: failed ({e})", flush=True)
                    continue
                graphed, eager = methods["baseline"], methods["baseline@eager"]
                row = {"depth": depth, "batch": batch, "precision": p,
                       "official_precision": OFFICIAL_OF[p],
                       "ours_graphs_ms": graphed["median_total_ms"],
                       "ours_graphs_ms_each": graphed["total_ms_each"],
                       "ours_eager_ms": eager["median_total_ms"],
                       "ours_eager_ms_each": eager["total_ms_each"],
                       "cuda_graphs_used": graphed["cuda_graphs"],
                       "graph_capture_ms": graphed["graph_capture_ms"],
                       "graphs_vs_eager_identical_tokens": eager.get("identical_tokens")}
                for op in official_precisions:
                    o = official[op]
                    row[f"official_{op}_ms"] = o["median_ms"]
                    row[f"official_{op}_ms_each"] = o["ms_each"]
                    row[f"speedup_vs_official_{op}"] = o["median_ms"] / graphed["median_total_ms"]
                    row[f"speedup_eager_vs_official_{op}"] = o["median_ms"] / eager["median_total_ms"]
                    per_scale = identical(tokens, o["tokens"])
                    row[f"identical_tokens_vs_official_{op}_per_scale"] = per_scale
                    n = [t.numel() for t in tokens]
                    row[f"identical_tokens_vs_official_{op}"] = sum(f * k for f, k in zip(per_scale, n)) / sum(n)
                    row[f"first_differing_scale_vs_official_{op}"] = next(
                        (si for si, f in enumerate(per_scale) if f < 1.0), None)
                if emulated:
                    row["emulation_vs_official_bf16_per_scale"] = emu_vs_autocast
                    row["identical_tokens_vs_emulation_per_scale"] = identical(tokens, emulated)
                report["rows"].append(row)
                with open(args.out, "w") as f:  # as we go: a timeout keeps the rows so far
                    json.dump(report, f, indent=2)
                print(json.dumps({k: v for k, v in row.items() if not k.endswith(("_each", "_per_scale"))}),
                      flush=True)
        del var, vae
        if dev.type == "cuda":
            torch.cuda.empty_cache()
        for path in (var_path, vae_path):
            os.remove(path)

    with open(args.out, "w") as f:
        json.dump(report, f, indent=2)
    # The short table, last: ours at each precision against the official run at the same one.
    print()
    print(f"{'model':8} {'batch':>5} {'prec':>13} {'official ms':>12} {'ours ms':>9} {'eager ms':>9} "
          f"{'speedup':>8} {'vs off. fp32':>13} {'same tok':>9} {'1st diff':>8}")
    for r in report["rows"]:
        p = r["official_precision"]
        # Without an official fp32 run (--official-precisions bf16) that column is empty.
        vs_fp32 = r.get("speedup_vs_official_fp32")
        vs_fp32 = f"{vs_fp32:>12.2f}x" if vs_fp32 is not None else f"{'-':>13}"
        print(f"{'VAR-d' + str(r['depth']):8} {r['batch']:>5} {r['precision']:>13} "
              f"{r[f'official_{p}_ms']:>12.1f} "
              f"{r['ours_graphs_ms']:>9.1f} {r['ours_eager_ms']:>9.1f} "
              f"{r[f'speedup_vs_official_{p}']:>7.2f}x {vs_fp32} "
              f"{100 * r[f'identical_tokens_vs_official_{p}']:>8.1f}% "
              f"{str(r[f'first_differing_scale_vs_official_{p}']):>8}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
