import sys
sys.argv=[sys.argv[0]]
exec(open('/tmp/align/orders.py').read().split('import os')[0].replace('for name,o in cands.items():','for name,o in []:'))
K=len(pns)-1
def groups_of(l):
    g={}
    for b in l: g.setdefault(seg_of[b],[]).append(b)
    return g
def build(l, first_scales, tail='asc', mod_last=0):
    g=groups_of(l); out=[]
    for s in first_scales:
        if s in g:
            out+=modrun(sorted(g.pop(s)), mod_last if s==K else 0)
    rest=sorted(b for v in g.values() for b in v)
    if tail=='desc':
        for s in sorted(groups_of(rest), key=lambda s:(0 if s<=5 else 1, -s)):
            out+=modrun(sorted(groups_of(rest)[s]))
    else:
        out+=modrun(rest)
    assert sorted(out)==sorted(l)
    return out
def dump(name,o):
    with open(f'/work/main/.device/synth/lists/{name}.txt','w') as f:
        for l in o: f.write(' '.join(map(str,l))+'\n')
dump('lf_k1', [build(l,[K,K-1]) for l in lists])
dump('lf_sinks_desc', [build(l,[K],'desc') for l in lists])
dump('lf_k1_k2', [build(l,[K,K-1,K-2]) for l in lists])
dump('lf_m8', [build(l,[K],mod_last=8) for l in lists])
lf=[build(l,[K]) for l in lists]
ref=[list(map(int,x.split())) for x in open('/work/main/.device/synth/lists/last_first.txt')]
print("last_first reproduced:", lf==ref)
for n in ['lf_k1','lf_sinks_desc','lf_k1_k2','lf_m8']:
    o=[list(map(int,x.split())) for x in open(f'/work/main/.device/synth/lists/{n}.txt')]
    print(n, o[32], o[0])
dump('lf_b', lf)
