import sys,re,glob,statistics as st,collections
res=collections.defaultdict(lambda: collections.defaultdict(list))
for f in sorted(glob.glob(sys.argv[1])):
    v=f.split('/')[-1].rsplit('_',1)[0]
    for line in open(f):
        m=re.match(r'# mpe_cached (\w+) phases.*?: (.*) \| total ([\d.]+)',line)
        if m:
            d=m.group(1)
            for name,val in re.findall(r'(\w+) ([\d.]+) \(',m.group(2)):
                res[(v,d)][name].append(float(val))
            res[(v,d)]['total'].append(float(m.group(3)))
        if line.startswith('CSV,') and 'mpe_cached' in line:
            p=line.strip().split(',')
            res[(v,p[4])]['cpu_ratio'].append(float(p[12]))
        if line.startswith('CSV,') and ',fbgemm,' in line:
            p=line.strip().split(',')
            res[(v,p[4])]['fbgemm_ms'].append(float(p[11]))
for k in sorted(res):
    print(k, ' '.join(f"{n} {st.median(x):.3f}" for n,x in res[k].items()))
