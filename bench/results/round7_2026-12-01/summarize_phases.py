# Medians over processes of the --phases lines (ms per call) and the mpe_cached / FBGEMM CPU-time ratio.
# usage: python3 summarize_phases.py DIR PREFIX...   (reads DIR/PREFIX_*.txt)
import glob,re,statistics,collections,sys
d0=sys.argv[1]
for b in sys.argv[2:]:
    d=collections.defaultdict(list)
    for f in glob.glob('%s/%s_*.txt'%(d0,b)):
        for l in open(f):
            m=re.match(r'# mpe_cached (\w+) phases.*?: (.*) \| total ([0-9.]+)',l)
            if m:
                dist=m.group(1)
                for k,v in re.findall(r'(\w+) ([0-9.]+) \(',m.group(2)): d[(dist,k)].append(float(v))
                d[(dist,'total')].append(float(m.group(3)))
            if l.startswith('CSV,int8') and 'mpe_cached' in l:
                p=l.split(','); d[(p[4],'ratio')].append(float(p[12]))
    for dist in ['zipf','uniform']:
        print('%-6s %-8s'%(b,dist),' '.join('%s %.3f'%(k,statistics.median(d[(dist,k)])) for k in ['dedup','sort','hits','misses','pool','total','ratio']))
