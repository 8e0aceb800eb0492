#!/usr/bin/env python3
"""Parity of our FID Inception and quality metrics (core/metrics/fid_inception.*,
core/metrics/feature_stats.*) against pytorch-fid 0.3.0 and torch-fidelity 0.4.0 (issue #34).

No weight file is needed: the Inception's weights come from the formula documented in
core/metrics/fid_inception.h (a seeded hash of tensor name and index), which this script and
the C++ synthetic_inception_weights() both implement. pytorch-fid's InceptionV3 is built with
those weights (its download is replaced by them) and run on 2 x 12 emoji64 images (64x64 RGB,
fed exactly as pytorch-fid's ToTensor feeds PNGs). Written to tests/fixtures/fid_parity.npz
(read by tests/fid_parity_test.cpp through our own .npz reader, so CI needs no Python):

  images_a, images_b         uint8 (12, 3, 64, 64)
  pool3_a/b, logits_a/b, spatial_a/b   float32 features from pytorch-fid's network (logits: the
                             fc without bias, as torch-fidelity's "logits_unbiased")
  fid_ab                     pytorch_fid.fid_score.calculate_frechet_distance on pool3 a vs b
  isc_a                      torch_fidelity isc_features_to_metric(logits_a, splits=4,
                             shuffle=False): [mean, std]
  prc_ab                     torch_fidelity calculate_precision_recall_full(pool3_a, pool3_b, 3):
                             [precision, recall] (a = generated, b = real)
  feat_x, feat_y             float64 (256, 24) well-conditioned features, and fid_xy: the
                             Frechet distance of their statistics (pytorch-fid), prc_xy (torch-fidelity,
                             x = generated), mu_x, sigma_x (np.mean, np.cov)
  logits_z, isc_z            float64 (60, 10) logits with spread, torch-fidelity's IS (5 splits)

and tests/fixtures/inception_partial.pth: the first layer of pytorch-fid's InceptionV3 module
(blocks.0.0.*) as torch.save writes a state dict, for the loader's error path; and
tests/fixtures/stats_compressed.npz: mu_x (float32), sigma_x as np.savez_compressed writes them
(pytorch-fid's --save-stats layout), for the .npz reader's deflate path.

Needs torch 2.11 and: pip install pytorch-fid==0.3.0 torch-fidelity==0.4.0 torchvision==0.26.0 scipy pillow

  python3 tools/parity/fid_parity.py --emoji ../shared/datasets/emoji64 \
      --out tests/fixtures/fid_parity.npz
"""
import argparse
import os

import numpy as np
import torch
from PIL import Image

import pytorch_fid.inception as pfi
from pytorch_fid.fid_score import calculate_frechet_distance
from torch_fidelity.metric_isc import isc_features_to_metric
from torch_fidelity.metric_prc import calculate_precision_recall_full

GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def fnv1a64(name):
    h = 0xCBF29CE484222325
    for c in name.encode():
        h = ((h ^ c) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def formula(name, shape, centred, scale, offset):
    """Value i: z = splitmix64(fnv1a64(name) + i * golden), u = (z >> 40) / 2^24."""
    n = int(np.prod(shape))
    with np.errstate(over="ignore"):
        z = np.uint64(fnv1a64(name)) + np.arange(n, dtype=np.uint64) * GOLDEN
        z ^= z >> np.uint64(30)
        z *= np.uint64(0xBF58476D1CE4E5B9)
        z ^= z >> np.uint64(27)
        z *= np.uint64(0x94D049BB133111EB)
        z ^= z >> np.uint64(31)
    u = (z >> np.uint64(40)).astype(np.float64) / 16777216.0
    v = (2 * u - 1 if centred else u) * scale + offset
    return torch.from_numpy(v.astype(np.float32).reshape(shape))


def synthetic_state_dict(reference):
    """The formula's values for every tensor of `reference` (a torchvision-named state dict)."""
    out = {}
    for name, t in reference.items():
        shape = tuple(t.shape)
        if name.endswith("num_batches_tracked"):
            out[name] = t.clone()
        elif name.endswith(".conv.weight"):
            fan_in = shape[1] * shape[2] * shape[3]
            out[name] = formula(name, shape, True, np.sqrt(6.0 / fan_in), 0.0)
        elif name.endswith(".bn.weight"):
            out[name] = formula(name, shape, True, 0.25, 1.0)
        elif name.endswith(".bn.bias"):
            out[name] = formula(name, shape, True, 0.25, 0.0)
        elif name.endswith(".running_mean"):
            out[name] = formula(name, shape, True, 0.125, 0.0)
        elif name.endswith(".running_var"):
            out[name] = formula(name, shape, False, 0.5, 1.0)
        elif name == "fc.weight":
            out[name] = formula(name, shape, True, 0.5, 0.0)
        elif name == "fc.bias":
            out[name] = formula(name, shape, True, 0.125, 0.0)
        else:
            raise SystemExit(f"unexpected tensor {name}")
    return out


def build_models():
    """pytorch-fid's InceptionV3 (pool3) and its fid_inception_v3 (for fc), formula weights."""
    captured = {}

    def fake_download(url, progress=True):
        skeleton = pfi._inception_v3(num_classes=1008, aux_logits=False, weights=None)
        # The FID blocks (FIDInceptionA..E) keep torchvision's parameter names and shapes.
        captured["sd"] = synthetic_state_dict(skeleton.state_dict())
        return captured["sd"]

    pfi.load_state_dict_from_url = fake_download
    model = pfi.InceptionV3([3]).eval()
    return model, captured["sd"]


def load_images(folder, names):
    arr = [np.asarray(Image.open(os.path.join(folder, n)).convert("RGB")) for n in names]
    return np.stack(arr).transpose(0, 3, 1, 2).copy()  # (N, 3, H, W) uint8


@torch.no_grad()
def features(model, sd, images):
    x = torch.from_numpy(images).float().div(255)  # torchvision ToTensor
    captured = {}
    block = model.blocks[2][6].branch1x1  # Mixed_6d's 1x1 branch: ADM's mixed_6/conv
    hook = block.register_forward_hook(lambda m, i, o: captured.__setitem__("s", o))
    pool3 = model(x)[0].squeeze(3).squeeze(2)
    hook.remove()
    logits = pool3.mm(sd["fc.weight"].T)
    spatial = captured["s"][:, :7].permute(0, 2, 3, 1).reshape(len(x), -1)
    return pool3.numpy(), logits.numpy(), spatial.numpy()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--emoji", default="/work/shared/datasets/emoji64")
    ap.add_argument("--out", default="tests/fixtures/fid_parity.npz")
    ap.add_argument("--count", type=int, default=12)
    args = ap.parse_args()
    torch.set_num_threads(1)
    n = args.count
    google = sorted(os.listdir(os.path.join(args.emoji, "google")))
    twitter = sorted(os.listdir(os.path.join(args.emoji, "twitter")))
    # Every 97th file: faces, objects and flags rather than 12 keycaps.
    images_a = load_images(os.path.join(args.emoji, "google"), google[::97][:n])
    images_b = load_images(os.path.join(args.emoji, "twitter"), twitter[5::97][:n])

    model, sd = build_models()
    pool3_a, logits_a, spatial_a = features(model, sd, images_a)
    pool3_b, logits_b, spatial_b = features(model, sd, images_b)

    def stats(f):
        return np.mean(f, axis=0), np.cov(f, rowvar=False)

    mu_a, sig_a = stats(pool3_a)
    mu_b, sig_b = stats(pool3_b)
    fid_ab = calculate_frechet_distance(mu_a, sig_a, mu_b, sig_b)
    isc = isc_features_to_metric(torch.from_numpy(logits_a), splits=4, shuffle=False)
    prec, rec = calculate_precision_recall_full(torch.from_numpy(pool3_a),
                                                torch.from_numpy(pool3_b), 3)

    rng = np.random.default_rng(34)
    mix = rng.normal(size=(24, 24))
    feat_x = rng.normal(size=(256, 24)) @ mix
    feat_y = rng.normal(size=(256, 24)) @ (mix + 0.3 * rng.normal(size=(24, 24))) + 0.5
    mu_x, sigma_x = stats(feat_x)
    mu_y, sigma_y = stats(feat_y)
    fid_xy = calculate_frechet_distance(mu_x, sigma_x, mu_y, sigma_y)
    logits_z = rng.normal(size=(60, 10)) * 2
    isc_z = isc_features_to_metric(torch.from_numpy(logits_z), splits=5, shuffle=False)
    prc_xy = calculate_precision_recall_full(torch.from_numpy(feat_x), torch.from_numpy(feat_y), 3)

    np.savez(args.out, images_a=images_a, images_b=images_b, pool3_a=pool3_a, pool3_b=pool3_b,
             logits_a=logits_a, logits_b=logits_b, spatial_a=spatial_a, spatial_b=spatial_b,
             fid_ab=np.float64(fid_ab),
             isc_a=np.array([isc["inception_score_mean"], isc["inception_score_std"]]),
             prc_ab=np.array([prec, rec]), feat_x=feat_x, feat_y=feat_y,
             fid_xy=np.float64(fid_xy), prc_xy=np.array(prc_xy), logits_z=logits_z,
             isc_z=np.array([isc_z["inception_score_mean"], isc_z["inception_score_std"]]),
             mu_x=mu_x, sigma_x=sigma_x)
    print(f"wrote {args.out} ({os.path.getsize(args.out)} bytes)")
    # A torch.save'd state dict in pytorch-fid's module layout, cut after the first layer: the
    # C++ loader's .pth path and its message naming the file and the first missing tensor.
    partial = os.path.join(os.path.dirname(args.out), "inception_partial.pth")
    first = {k: v for k, v in model.state_dict().items() if k.startswith("blocks.0.0.")}
    torch.save(first, partial)
    print(f"wrote {partial} ({os.path.getsize(partial)} bytes, {len(first)} tensors)")
    # Statistics as pytorch-fid's --save-stats writes them (np.savez_compressed; its mu is
    # float32, np.mean of float32 activations): the reader's deflate path.
    compressed = os.path.join(os.path.dirname(args.out), "stats_compressed.npz")
    np.savez_compressed(compressed, mu=mu_x.astype(np.float32), sigma=sigma_x)
    print(f"wrote {compressed} ({os.path.getsize(compressed)} bytes)")
    print(f"pool3 |max| {np.abs(pool3_a).max():.4g} mean {pool3_a.mean():.4g}; "
          f"logits |max| {np.abs(logits_a).max():.4g}; spatial |max| {np.abs(spatial_a).max():.4g}")
    print(f"FID(a, b) = {fid_ab:.6f}; IS(a) = {isc}; precision {prec}, recall {rec}; "
          f"FID(x, y) = {fid_xy:.6f}; precision, recall (x, y) {prc_xy}; IS(z) {isc_z}")


if __name__ == "__main__":
    main()
