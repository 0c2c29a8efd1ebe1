#!/usr/bin/env python3
"""Code lines per source file (blank, comment-only and #[cfg(test)] module lines excluded)."""
import os,re,sys
root=sys.argv[1] if len(sys.argv)>1 else '.'
rows=[]
for d,_,fs in os.walk(root):
    if '/target' in d or '/.git' in d or '/fuzz' in d or '/tests' in d or '/benches' in d or '/examples' in d: continue
    for f in fs:
        if not f.endswith('.rs') or f.endswith('_tests.rs') or f=='tests.rs': continue
        p=os.path.join(d,f); lines=open(p).read().split('\n')
        n=0; i=0
        while i<len(lines):
            l=lines[i].strip()
            if l=='#[cfg(test)]' and i+1<len(lines) and re.match(r'\s*mod \w+\s*\{',lines[i+1]):
                depth=0; i+=1
                while i<len(lines):
                    depth+=lines[i].count('{')-lines[i].count('}')
                    i+=1
                    if depth<=0: break
                continue
            if l and not l.startswith('//'): n+=1
            i+=1
        rows.append((n,os.path.relpath(p,root)))
rows.sort(reverse=True)
for n,p in rows[:int(sys.argv[2]) if len(sys.argv)>2 else 25]: print(f"{n:6} {p}")
print("files:",len(rows),"over 800:",sum(1 for n,_ in rows if n>800))
