import sys,glob,statistics,collections
d=collections.defaultdict(list)
for f in sorted(glob.glob(sys.argv[1])):
    for l in open(f):
        if l.startswith("CSV,") and not l.startswith("CSV,prec") and not l.startswith("CSV,limits"):
            p=l.strip().split(",")
            prec,rows,D,dist,var=p[1],p[2],p[3],p[4],p[5]
            d[(prec,rows,dist,var)].append(float(p[12]))
for k in sorted(d):
    if k[3]=="fbgemm": continue
    v=d[k]; print("%-5s %-8s %-8s %-14s median %.3f  [%s]"%(k[0],k[1],k[2],k[3],statistics.median(v)," ".join("%.2f"%x for x in v)))
