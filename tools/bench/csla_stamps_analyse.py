import numpy as np, sys
for fn in sys.argv[1:]:
    a=np.fromfile(fn,dtype=np.uint64).reshape(-1,8).astype(np.int64)
    sm,t0,t1,t2,t3,n,e1,e2=a.T
    base=t0.min(); t0-=base;t1-=base;t2-=base;t3-=base
    span=t3.max()
    nsm=sm.max()+1
    # per-SM occupancy over time
    ev=[]
    busy1=0;busy2=0;idle=0
    for s in range(nsm):
        m=sm==s
        e=sorted([(x,1) for x in t0[m]]+[(x,-1) for x in t3[m]])
        cur=0;last=0
        for t,d in e:
            dt=t-last
            if cur==0: idle+=dt
            elif cur==1: busy1+=dt
            else: busy2+=dt
            cur+=d;last=t
        idle+=span-last
    tot=nsm*span
    print(fn.split('/')[-1], 'ctas',len(a),'span us %.1f'%(span/1e3))
    print('  SM-time: idle %.1f%%  one CTA %.1f%%  two %.1f%%'%(100*idle/tot,100*busy1/tot,100*busy2/tot))
    print('  per CTA mean us: start->first P %.2f  loop %.2f  epilogue %.2f  total %.2f; tiles %.1f; loop us/tile %.3f'%(
        (t1-t0).mean()/1e3,(t2-t1).mean()/1e3,(t3-t2).mean()/1e3,(t3-t0).mean()/1e3,n.mean(),((t2-t1)/np.maximum(n-1,1)).mean()/1e3))
    # gaps between CTA end and next start on same SM-slot
    gaps=[]
    for s in range(nsm):
        m=np.where(sm==s)[0]
        ends=np.sort(t3[m]); starts=np.sort(t0[m])
        # each start after first two: gap to the latest end before it
        for st in starts[2:]:
            prev=ends[ends<=st]
            if len(prev): gaps.append(st-prev.max())
    gaps=np.array(gaps)
    print('  relaunch gap us: median %.2f mean %.2f'%(np.median(gaps)/1e3,gaps.mean()/1e3))
    first_idle = np.sort([t3[sm==s].max() for s in range(nsm)])
    print('  SM finish times us: min %.1f median %.1f max %.1f'%(first_idle[0]/1e3,np.median(first_idle)/1e3,first_idle[-1]/1e3))
    # first-P latency by wave
    w1 = t0 < 1000
    print('  first wave start->firstP %.2f, later %.2f'%((t1-t0)[w1].mean()/1e3,(t1-t0)[~w1].mean()/1e3))
    if (e1>0).any():
        e1=e1-base; e2=e2-base
        print('  epilogue parts us: loop->bar %.2f  bar->read done %.2f  read->end %.2f'%((e1-t2).mean()/1e3,(e2-e1).mean()/1e3,(t3-e2).mean()/1e3))
