import sys
sys.argv=[sys.argv[0]]
exec(open('/tmp/align/opt.py').read().split('for name,start')[0])
def by_scale(l, key):
    # group the list's blocks by the scale they belong to, order groups by key(scale), modular within runs
    groups={}
    for b in l: groups.setdefault(seg_of[b],[]).append(b)
    out=[]
    for s in sorted(groups, key=key):
        out+=modrun(sorted(groups[s]))
    return out
K=len(pns)-1
cands={
 "asc": lists,
 "modrun": [modrun(l) for l in lists],
 "last_first": [by_scale(l, lambda s: (0 if s==K else 1, s)) for l in lists],
 "desc_scales": [by_scale(l, lambda s: -s) for l in lists],
 "sinks_then_desc": [by_scale(l, lambda s: (0 if s<5 else 1, -s)) for l in lists],
 "sinks_last_then_rest": [by_scale(l, lambda s: (0 if s<5 else (1 if s==K else 2), s)) for l in lists],
}
for name,o in cands.items():
    b,d=consensus(o)
    print(f"{name:22s} distinct {distinct(o):4d} (w2 {distinct(o,2)}, w4 {distinct(o,4)}); refined {d} (w2 {distinct(b,2)})")
print("seg lens qb32:", [(s, sum(1 for b in lists[32] if seg_of[b]==s)) for s in range(K+1)])
print("seg lens qb0:", [(s, sum(1 for b in lists[0] if seg_of[b]==s)) for s in range(K+1)])
import os
os.makedirs('/work/main/.device/synth/lists', exist_ok=True)
def dump(name, o):
    with open(f'/work/main/.device/synth/lists/{name}.txt','w') as f:
        for l in o: f.write(' '.join(map(str,l))+'\n')
dump('modrun_ref', consensus(cands['modrun'])[0])
dump('sinks_then_desc', cands['sinks_then_desc'])
dump('sinks_then_desc_ref', consensus(cands['sinks_then_desc'])[0])
dump('desc_scales', cands['desc_scales'])
dump('last_first', cands['last_first'])
