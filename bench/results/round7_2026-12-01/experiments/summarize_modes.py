# Medians over processes of the experiment harness phase lines (kcycles per call, A = mode 0, B = the mode).
# usage: python3 summarize_modes.py "phase_m*.txt"
import sys,glob,re,collections,statistics
# per mode/pagesize: median over processes of the phase cycles, A (mode 0) and B (mode m)
res=collections.defaultdict(lambda: collections.defaultdict(list))
for f in sorted(glob.glob(sys.argv[1])):
    m=re.search(r'phase_m(\d+b?)_(\w+)_\d+\.txt',f); key=(m.group(1),m.group(2))
    for l in open(f):
        if l.startswith('# phases'):
            x=l.split()[1][-1]
            toks=l.split(':',1)[1].split()
            for k,v in zip(toks[0::2],toks[1::2]): res[key][(x,k)].append(float(v))
        if l.startswith('CSV,int8'):
            p=l.strip().split(','); res[key][('ratio',p[5])].append(float(p[12]))
names=['validate','dedup','keys+sort','hits','misses','count','occslots','pool','total']
for key in sorted(res):
    d=res[key]
    print('mode %s %s  ratio A %.2f B %.2f'%(key[0],key[1],statistics.median(d[('ratio','mpe_cached')]),statistics.median(d[('ratio','mpe_cached_x')])))
    for x in '01':
        print('   %s '%('A' if x=='0' else 'B')+' '.join('%s %5.0f'%(n,statistics.median(d[(x,n)])) for n in names))
