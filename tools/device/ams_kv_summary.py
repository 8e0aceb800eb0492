#!/usr/bin/env python3
"""Markdown table of tools/device/ams_kv_bench.sh's `bench e2e` JSON files (one per batch).

KV columns, all relative to the dense baseline's cache of the same batch (every token of every
scale in every layer: total tokens x layers x 2 (K, V) x width x 2B rows x bytes), so batches
where the baseline ran out of memory are comparable too:
  KV final  = bytes held after the last scale: the paper's accounting (ams-kv.txt App. D, Eq. 4:
              the scales each layer retains, S_CD / S_CE, against all scales in all layers);
  KV peak   = the most bytes held after any step (the loop's kv_bytes_peak).
"""
import glob
import json
import os
import sys


def main(folder):
    rows = []
    for path in glob.glob(os.path.join(folder, "e2e_d30_256_b*_fp16_amskv.json")):
        j = json.load(open(path))
        c, batch = j["config"], j["batch"]
        elem = 2 if j["precision"] in ("fp16", "bf16") else 4
        tokens = sum(p * p for p in c["patch_nums"])
        dense = tokens * c["depth"] * 2 * c["embed_dim"] * 2 * batch * elem
        for m in j["methods"]:
            rows.append((batch, m, dense))
    order = {"baseline": 0, "baseline@eager": 1}
    rows.sort(key=lambda r: (r[0], order.get(r[1]["name"], 2), r[1]["name"]))
    print("| batch | method | ms per batch | img/s | peak device GiB | KV final (paper) | KV peak |"
          " KV GiB final | identical tokens |")
    print("|---|---|---|---|---|---|---|---|---|")
    best = {}
    for batch, m, dense in rows:
        name = m["name"]
        if "error" in m:
            print(f"| {batch} | {name} | {m['error']} | – | – | – | – | – | – |")
            continue
        ms = m["median_total_ms"]
        ips = batch * 1000.0 / ms
        best[name] = max(best.get(name, (0, 0)), (ips, batch))
        same = m.get("identical_tokens")
        print(f"| {batch} | {name} | {ms:.1f} | {ips:.1f} | {m['peak_device_bytes'] / 2**30:.1f} |"
              f" {100 * m['kv_bytes_end'] / dense:.1f} % | {100 * m['kv_bytes_peak'] / dense:.1f} % |"
              f" {m['kv_bytes_end'] / 2**30:.2f} | {'' if same is None else f'{100 * same:.1f} %'} |")
    print()
    for name, (ips, batch) in sorted(best.items()):
        print(f"best {name}: {ips:.1f} img/s at batch {batch}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else ".")
