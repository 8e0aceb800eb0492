#!/usr/bin/env python3
"""Summarises a per-item timeline of the persistent sm90 CSLA kernel (issue #6).

Input: the CSV written by `probe --trace FILE` (tools/bench/csla_sm90_probe.cu built with
-DVARSCOPE_SM90_TRACE). Per case (sparse mask / every block active), schedule and run it prints:
the span; the phases of an item (Q wait, first tile, the tile loop per tile, the store); the
cycles waited for K and V tiles per tile; the loop's cycles per tile and the SM clock through the
launch (traces with loop_cycles); the tail (how long SMs and CTAs sit idle at the end,
and when the first, the median and the last SM end); the per-SM tile load against the SM's end;
and a CTA's tile rate by what its partner on the SM is doing (in its loop, between items, or
finished).
Usage: csla_trace_summary.py trace.csv (or trace.csv.gz)
"""
import collections
import csv
import gzip
import sys

import numpy as np

INT_FIELDS = ("impl", "run", "lin", "smid", "cta", "tiles", "t0", "t1", "t2", "t3", "t4",
              "kwait", "vwait", "loop_cycles")


def load(path):
    groups = collections.defaultdict(list)
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", newline="") as f:
        for row in csv.DictReader(f):
            for key in INT_FIELDS:
                if key in row:  # loop_cycles: traces since 2026-11-26 (session 19)
                    row[key] = int(row[key])
            groups[(row["case"], row["impl"], row["run"])].append(row)
    return groups


def partner_rates(items):
    """Per-tile loop time of items whose partner CTA ran its own loop throughout, against the
    share of the loop the partner spent between items; and of items whose partner had ended."""
    by_sm = collections.defaultdict(lambda: collections.defaultdict(list))
    for r in items:
        by_sm[r["smid"]][r["cta"]].append(r)
    share, rate, gone = [], [], []
    for ctas in by_sm.values():
        if len(ctas) != 2:
            continue
        a, b = ctas.values()
        for mine, other in ((a, b), (b, a)):
            loops = [(r["t2"], r["t3"]) for r in other]
            other_end = max(r["t4"] for r in other)
            for r in mine:
                s, e = r["t2"], r["t3"]
                if r["tiles"] < 2 or e <= s:
                    continue
                per_tile = (e - s) / (r["tiles"] - 1)
                alive = max(0, min(e, other_end) - s)
                if alive < e - s:
                    if alive < (e - s) / 2:
                        gone.append(per_tile)
                    continue
                in_loop = sum(max(0, min(e, oe) - max(s, os_)) for os_, oe in loops)
                share.append((alive - in_loop) / (e - s))
                rate.append(per_tile)
    if len(rate) < 2:
        return None
    slope, base = np.polyfit(share, rate, 1)
    return base, slope, float(np.mean(share)), (float(np.mean(gone)) if gone else float("nan"))


def summarise(key, items):
    t0 = min(r["t0"] for r in items)
    end = max(r["t4"] for r in items)
    n = np.array([r["tiles"] for r in items])
    col = {k: np.array([r[k] for r in items]) for k in ("t0", "t1", "t2", "t3", "t4")}
    # Items with no tiles have no first-tile stamp: they are left out of the phase figures.
    has_tiles = n > 0
    first_round = np.array([r["lin"] for r in items]) < len({r["cta"] for r in items})
    later = ~first_round & has_tiles
    first = first_round & has_tiles
    cta_end = collections.defaultdict(int)
    cta_tiles = collections.Counter()
    sm_of = {}
    for r in items:
        cta_end[r["cta"]] = max(cta_end[r["cta"]], r["t4"])
        cta_tiles[r["cta"]] += r["tiles"]
        sm_of[r["cta"]] = r["smid"]
    sm_end = collections.defaultdict(int)
    sm_tiles = collections.Counter()
    for cta, e in cta_end.items():
        sm_end[sm_of[cta]] = max(sm_end[sm_of[cta]], e)
        sm_tiles[sm_of[cta]] += cta_tiles[cta]
    span = end - t0
    sm_idle = sum(end - e for e in sm_end.values()) / (len(sm_end) * span)
    cta_idle = sum(end - e for e in cta_end.values()) / (len(cta_end) * span)
    loads = np.array([sm_tiles[s] for s in sm_end])
    ends = np.array([sm_end[s] for s in sm_end])
    print(f"{key[0]:6s} schedule {key[1]} run {key[2]}: span {span / 1e3:.1f} us, "
          f"{len(items)} items on {len(cta_end)} CTAs / {len(sm_end)} SMs")
    print(f"  first items: Q wait median {np.median((col['t1'] - col['t0'])[first]):.0f} ns, "
          f"first tile {np.median((col['t2'] - col['t1'])[first]):.0f} ns")
    print(f"  later items: Q wait median {np.median((col['t1'] - col['t0'])[later]):.0f} ns, "
          f"first tile {np.median((col['t2'] - col['t1'])[later]):.0f} ns, loop "
          f"{(col['t3'] - col['t2'])[later].sum() / (n[later] - 1).clip(min=0).sum():.0f} ns/tile, "
          f"store {np.median((col['t4'] - col['t3'])[later]):.0f} ns")
    print(f"  waits per tile: K {sum(r['kwait'] for r in items) / n.sum():.0f}, "
          f"V {sum(r['vwait'] for r in items) / n.sum():.0f} cycles")
    print(f"  tail: SMs idle {100 * sm_idle:.1f} %, CTAs idle {100 * cta_idle:.1f} % of "
          f"SM/CTA time; SM tiles min {loads.min()} mean {loads.mean():.1f} max {loads.max()}, "
          f"corr(SM tiles, SM end) {np.corrcoef(loads, ends)[0, 1]:.2f}")
    # How far the last SM ends after the typical one: the tail that whole items leave.
    rel_end = (ends - t0) / 1e3
    print(f"  SM end: min {rel_end.min():.1f} median {np.median(rel_end):.1f} "
          f"max {rel_end.max():.1f} us")
    pr = partner_rates(items)
    if pr:
        base, slope, mean_share, gone = pr
        print(f"  loop ns/tile with the partner in its loop {base:.0f} (+{slope:.0f} x the share "
              f"it spent between items, mean {mean_share:.3f}); partner finished: {gone:.0f}")
    clock = loop_clock(items, t0, span)
    if clock:
        cycles_per_tile, tenths = clock
        print(f"  tile loop: {cycles_per_tile:.0f} cycles/tile; SM clock (GHz) by tenth of the span "
              f"(items by their loop's start): " + " ".join(f"{g:.2f}" for g in tenths))


def loop_clock(items, t0, span):
    """Cycles per tile of the tile loops, and the mean SM clock (loop cycles / loop ns) of the
    loops starting in each tenth of the span; None for traces without loop_cycles."""
    loops = [r for r in items if "loop_cycles" in r and r["tiles"] > 1 and r["t3"] > r["t2"]]
    if not loops:
        return None
    cycles_per_tile = sum(r["loop_cycles"] for r in loops) / sum(r["tiles"] - 1 for r in loops)
    by_tenth = collections.defaultdict(list)
    for r in loops:
        by_tenth[min(9, int(10 * (r["t2"] - t0) / span))].append(
            r["loop_cycles"] / (r["t3"] - r["t2"]))
    return cycles_per_tile, [float(np.mean(by_tenth[k])) for k in sorted(by_tenth)]


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    for key, items in sorted(load(sys.argv[1]).items()):
        summarise(key, items)


if __name__ == "__main__":
    main()
