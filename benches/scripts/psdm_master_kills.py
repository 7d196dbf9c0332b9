#!/usr/bin/env python3
"""psdm on two simulated nodes x two ranks (root 1), rank 0 -- the master --
SIGKILLed at instants drawn uniformly over a failure-free run's length.

Usage (as root, from the workspace, after
`cargo build --release -p taskfold-cli -p taskfold-psdm`):

    python3 benches/scripts/psdm_master_kills.py TRIALS auto|on|off SEED

Prints one line per trial (kill instant, exit code, whether the image's
checksum equals the failure-free one, wall time, whether the standby took
over) and a summary. A kill that lands after rank 0 ended hits nobody; the
summary counts only the runs it printed.
"""
import subprocess, time, random, os, re, sys, statistics
N=int(sys.argv[1]); standby=sys.argv[2]; seed=int(sys.argv[3])
random.seed(seed)
JOB="--nx 320 --nz 180 --shots 24 --receivers 96 --batch 24 --root 1".split()
def pid_of_rank0(tag):
    for p in os.listdir('/proc'):
        if not p.isdigit(): continue
        try:
            if open(f'/proc/{p}/comm').read().strip()!='psdm': continue
            env=open(f'/proc/{p}/environ','rb').read().split(b'\0')
            if f'TF_TAG={tag}'.encode() in env and b'TASKFOLD_RANK=0' in env: return int(p)
        except Exception: pass
def run(tag, kill_after=None):
    env=dict(os.environ, TASKFOLD_STANDBY=standby, TF_TAG=tag)
    cmd=['target/release/taskfold','run','--nodes','2','-n','4','--timeout','120','--','target/release/psdm',*JOB,'--out',f'/tmp/psdm-{tag}.png']
    p=subprocess.Popen(cmd,stdout=subprocess.PIPE,stderr=subprocess.STDOUT,env=env,text=True)
    t0=None
    while t0 is None:
        pid=pid_of_rank0(tag)
        if pid: t0=time.time(); break
        if p.poll() is not None: break
        time.sleep(0.002)
    if kill_after is not None and t0:
        time.sleep(max(0,kill_after-(time.time()-t0)))
        try: os.kill(pid,9)
        except ProcessLookupError: pass
    out,_=p.communicate(timeout=200)
    end=time.time()
    m=re.search(r'psdm: checksum (\S+)',out)
    return p.returncode,(float(m.group(1)) if m else None),end-(t0 or end),out
rc,want,T,_=run('clean')
print('clean',rc,want,'%.2fs'%T)
res=[]
for i in range(N):
    d=random.uniform(0,0.95*T)
    rc,cs,el,out=run(f'k{i}',d)
    ok = (cs is not None and abs(cs-want)<=1e-5*abs(want))
    lost=sum(1 for r in (1,2,3) if re.search(rf'^\[{r}\] .*master', out, re.M))
    took = 'took over' if 'takes over' in out else ''
    res.append((round(d,3),rc,ok,round(el,2),lost,took))
    print(i,'kill %.3fs'%d,'rc',rc,'checksum ok' if ok else f'checksum {cs}','%.2fs'%el,took, 'ranks reporting master lost:',lost, flush=True)
print('summary', standby, 'trials',N,'exit0',sum(1 for r in res if r[1]==0),'checksum ok',sum(1 for r in res if r[2]),'max elapsed',max(r[3] for r in res))
