# Offline model of CSLA block lists (SparVAR Table 1, block 64) and of how many CTAs read the
# same key block at the same list position ("in step"), for candidate orders.
import sys
from collections import defaultdict
pns=[1,2,4,6,8,12,16,20,24,32,40,48,64]
block=64
def rhe(num,den):
    q,r=divmod(num,den); tr=2*r
    return q+1 if (tr>den or (tr==den and q%2==1)) else q
k=len(pns)-1; pq=pns[k]; lq=pq*pq; lk=sum(p*p for p in pns)
nqb=(lq+block-1)//block; nkb=(lk+block-1)//block
bm=[[0]*nkb for _ in range(nqb)]
seg_of=[0]*nkb
col0=0
windows=[3,5,7]
for h in range(k+1):
    ph=pns[h]
    if h<5: near=[[1]*ph for _ in range(pq)]
    else:
        dist=k-h; w=windows[2-dist] if dist<3 else 3; r=w//2
        near=[[0]*ph for _ in range(pq)]
        for x in range(pq):
            c=rhe(x*ph,pq)
            for y in range(max(0,c-r),min(ph-1,c+r)+1): near[x][y]=1
    for t in range(col0, col0+ph*ph): seg_of[t//block]=max(seg_of[t//block],h)
    for xi in range(pq):
        rows=[yi for yi in range(ph) if near[xi][yi]]
        for xj in range(pq):
            qrow=xi*pq+xj
            cols=[yj for yj in range(ph) if near[xj][yj]]
            for yi in rows:
                for yj in cols:
                    bm[qrow//block][(col0+yi*ph+yj)//block]=1
    col0+=ph*ph
lists=[[j for j in range(nkb) if bm[u][j]] for u in range(nqb)]
def runs(l):
    out=[];i=0
    while i<len(l):
        j=i+1
        while j<len(l) and l[j]==l[j-1]+1: j+=1
        out.append(l[i:j]); i=j
    return out
def score(order, slack=0):
    # mean over (CTA, position) of the number of CTAs reading the same block within +-slack positions
    at=defaultdict(int)
    for u,l in enumerate(order):
        for p,b in enumerate(l): at[(p,b)]+=1
    tot=0;n=0
    for u,l in enumerate(order):
        for p,b in enumerate(l):
            tot+=sum(at.get((p+d,b),0) for d in range(-slack,slack+1)); n+=1
    return tot/n
def modrun(l, M=0):
    out=[]
    for r in runs(l):
        m=M or len(r)
        out+=sorted(r,key=lambda b:(b%m,b))
    return out
if __name__=="__main__":
    print("lists", nqb, nkb, "mean len", sum(map(len,lists))/nqb)
    for u in (0,1,2,3,10,31,32,33,62,63): print(u, len(lists[u]), [len(r) for r in runs(lists[u])])
    for name,o in [("asc",lists),("modrun0",[modrun(l) for l in lists]),("modrun8",[modrun(l,8) for l in lists])]:
        print(name, round(score(o),2), round(score(o,1),2))

def distinct(order, window=1):
    # L2 reads if requests for one block within the same window of `window` positions merge
    seen=set()
    for l in order:
        for p,b in enumerate(l): seen.add((p//window,b))
    return len(seen)
if __name__=="__main__":
    for name,o in [("asc",lists),("modrun0",[modrun(l) for l in lists]),("modrun8",[modrun(l,8) for l in lists])]:
        print(name, "distinct", distinct(o), distinct(o,2), distinct(o,4), "of", sum(map(len,o)))
