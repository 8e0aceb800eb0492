#!/usr/bin/env python3
"""Summarise Kineto traces written by `varscope-cli bench e2e --trace DIR` (Chrome trace JSON, or
.json.gz): device busy time, idle gaps between kernels (by the host operator that launched the
kernel after the gap), time in host syncs, the largest kernels, and the attention kernels per
step (`--layers N` groups N consecutive attention kernels into one step). With two traces, the
kernel totals of the second minus the first, largest differences first.

  python3 tools/bench/trace_summary.py --layers 30 out/00-baseline.trace.json out/01-ams_kv.trace.json
"""
import argparse
import collections
import gzip
import json


def load(path):
    with (gzip.open(path) if path.endswith('.gz') else open(path)) as f:
        return [e for e in json.load(f)['traceEvents'] if e.get('ph') == 'X']


def device_events(ev):
    return sorted((e for e in ev if e.get('cat') in ('kernel', 'gpu_memcpy', 'gpu_memset')),
                  key=lambda e: e['ts'])


def kernel_totals(kern):
    total, count = collections.Counter(), collections.Counter()
    for k in kern:
        total[k['name'][:110]] += k['dur']
        count[k['name'][:110]] += 1
    return total, count


def summarise(path, ev, layers, min_gap_us, top):
    kern = device_events(ev)
    if not kern:
        print(f'{path}: no device kernels (a CPU run?)')
        return
    runtime = {e['args']['correlation']: e for e in ev
               if e.get('cat') == 'cuda_runtime' and 'correlation' in e.get('args', {})}
    ops = {}
    for e in ev:
        if e.get('cat') == 'cpu_op':
            ops.setdefault(e.get('args', {}).get('External id'), e)
    busy_end, gaps, ngaps = kern[0]['ts'], collections.Counter(), collections.Counter()
    for k in kern:
        gap = k['ts'] - busy_end
        if gap > min_gap_us:
            r = runtime.get(k.get('args', {}).get('correlation'))
            name = r['name'] if r else '?'
            if r and name != 'cudaGraphLaunch':
                op = ops.get(r.get('args', {}).get('External id'))
                name = op['name'] if op else name
            gaps[name] += gap
            ngaps[name] += 1
        busy_end = max(busy_end, k['ts'] + k['dur'])
    span = (busy_end - kern[0]['ts']) / 1e3
    busy = sum(k['dur'] for k in kern) / 1e3
    print(f'{path}: device span {span:.1f} ms, kernels busy {busy:.1f} ms, '
          f'idle gaps > {min_gap_us:g} us {sum(gaps.values()) / 1e3:.2f} ms')
    for name, g in gaps.most_common(6):
        print(f'  gap before {name:44s} {g / 1e3:8.2f} ms in {ngaps[name]:5d}')
    syncs, nsync = collections.Counter(), collections.Counter()
    for e in ev:
        if e.get('cat') == 'cuda_runtime' and ('Synchronize' in e['name'] or 'Memcpy' in e['name']):
            syncs[e['name']] += e['dur']
            nsync[e['name']] += 1
    for name, d in syncs.most_common(3):
        print(f'  host in {name:46s} {d / 1e3:8.2f} ms in {nsync[name]:5d}')
    total, count = kernel_totals(kern)
    for name, d in total.most_common(top):
        print(f'  {d / 1e3:9.2f} ms {count[name]:5d}x {name[:90]}')
    if layers:
        att = [k for k in kern if any(s in k['name'] for s in ('sdpa', 'flash', 'fmha'))
               and 'pytorch_flash' not in k['name']]
        steps = len(att) // layers
        print(f'  attention kernels: {len(att)} = {steps} steps x {layers} layers '
              '(ms per step: sum, first layer, fastest, slowest)')
        for s in range(steps):
            d = [k['dur'] / 1e3 for k in att[s * layers:(s + 1) * layers]]
            print(f'    step {s:2d}: {sum(d):9.2f} {d[0]:8.3f} {min(d):8.3f} {max(d):8.3f}')


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('traces', nargs='+')
    ap.add_argument('--layers', type=int, default=0, help='attention kernels per step (depth)')
    ap.add_argument('--min-gap-us', type=float, default=3.0)
    ap.add_argument('--top', type=int, default=8, help='largest kernels to list')
    a = ap.parse_args()
    loaded = [(p, load(p)) for p in a.traces]
    for p, ev in loaded:
        summarise(p, ev, a.layers, a.min_gap_us, a.top)
    if len(loaded) == 2:
        (pa, ea), (pb, eb) = loaded
        ta, ca = kernel_totals(device_events(ea))
        tb, cb = kernel_totals(device_events(eb))
        print(f'kernel totals, second minus first ({pb} - {pa}):')
        for n in sorted(set(ta) | set(tb), key=lambda n: -abs(tb[n] - ta[n]))[:a.top]:
            print(f'  {(tb[n] - ta[n]) / 1e3:+9.2f} ms  {ta[n] / 1e3:9.2f}/{ca[n]:4d} -> '
                  f'{tb[n] / 1e3:9.2f}/{cb[n]:4d}  {n[:80]}')


if __name__ == '__main__':
    main()
