import sys, statistics, random
sys.argv=[sys.argv[0]]
exec(open('/tmp/align/model.py').read().split('if __name__')[0])
exec("def distinct(order, window=1):\n    seen=set()\n    for l in order:\n        for p,b in enumerate(l): seen.add((p//window,b))\n    return len(seen)\n")
def consensus(order, iters=30, seed=0):
    rnd=random.Random(seed)
    best=[list(l) for l in order]; bd=distinct(best)
    cur=[list(l) for l in order]
    for it in range(iters):
        pos={}
        for l in cur:
            for p,b in enumerate(l): pos.setdefault(b,[]).append(p)
        target={b:statistics.median(v) for b,v in pos.items()}
        us=list(range(len(cur))); rnd.shuffle(us)
        for u in us:
            # place blocks at their consensus positions as far as possible: sort by target, ties by block
            cur[u]=sorted(cur[u], key=lambda b:(target[b], b))
        d=distinct(cur)
        if d<bd: best=[list(l) for l in cur]; bd=d
    return best, bd
for name,start in [("asc",lists),("modrun0",[modrun(l) for l in lists])]:
    b,d=consensus(start)
    print(name,"->",d, distinct(b,2), distinct(b,4))
    print("  qb 32:", b[32]); print("  qb 0:", b[0]); print("  qb 63:", b[63])
