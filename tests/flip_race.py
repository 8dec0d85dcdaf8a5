# flip_race.py MNT SECONDS ROUND SEED: upserts racing with flips of
# generations/active.  The store gets every g key, and two generations are
# built over them; then each round, for ROUND seconds at once: csv ingests
# (keys g<F>_<J>, each file replacing the rows of one of 20 key sets),
# jsonl upserts and deletes of 50 keys u0..u49, `ln -s` + `mv -T` flips of
# generations/active every 20 ms, and compact/rebalance/build on ctl; the
# daemon's own compaction and rebalance run meanwhile.  Then, with the
# writers stopped: `verify` on ctl, and no line in errors of a compaction
# or rebalance refusing a posting that disagrees with its record; ANN
# queries (k=3, every cluster) at each live u key's vector and at a
# sample of g keys: no key twice, no key that is not live; exact queries
# (k=10 mode=exact) against a brute force over the rows the writers had
# acknowledged.  Prints one line a round, `X what` for each fault, and a
# last `summary:` line; exit 1 on a fault.
import errno, json, os, random, struct, sys, threading, time

DIM = 8
NU = 50              # upserted keys u0..u49
NF, NR = 20, 500     # csv key sets g<F>_<J>, J < NR
REFUSED = (errno.EBUSY, errno.EINVAL, errno.EAGAIN, errno.ENOENT, errno.EEXIST,
           errno.ECANCELED, errno.EALREADY)

mnt, secs, round_s, seed = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
sys.path.insert(0, os.path.dirname(sys.argv[0]))
from fileio import write_file

rng = random.Random(seed)
live = {}            # key -> vector, as acknowledged
mu = threading.Lock()
said_before = set()  # lines of errors already counted
tot = {'rounds': 0, 'verify_problems': 0, 'duplicate_keys': 0, 'stale_keys': 0,
       'exact_mismatches': 0, 'faults': 0, 'flips': 0, 'upserts': 0, 'deletes': 0,
       'csv_rows': 0, 'ctl': 0, 'refused': 0}


def f32(x):
    return struct.unpack('<f', struct.pack('<f', x))[0]


def vec(r):
    return [f32(r.uniform(-1, 1)) for _ in range(DIM)]


def fmt(v):
    return ' '.join('%.9g' % x for x in v)


def fault(what):
    with mu:
        tot['faults'] += 1
    print('X', what, flush=True)


def refused(e, what):
    if e.errno in REFUSED:
        with mu:
            tot['refused'] += 1
    else:
        fault('%s: %s' % (what, e))


def csv_role(r, end, ident):
    n = 0
    while time.time() < end:
        f = r.randrange(NF)
        rows = [('g%d_%d' % (f, j), vec(r)) for j in range(NR)]
        body = ''.join('%s,%s\n' % (k, ','.join('%.9g' % x for x in v)) for k, v in rows)
        res = write_file('%s/ingest/c%d-%d.csv' % (mnt, ident, n), [body.encode()])
        n += 1
        if res:
            fault('csv ingest at %s: %s' % (res[1], res[0]))
            continue
        with mu:
            live.update(rows)
            tot['csv_rows'] += len(rows)
        time.sleep(r.uniform(0, 0.01))


def upsert_role(r, end, ident):
    n = 0
    while time.time() < end:
        if r.random() < 0.7:
            rows = [('u%d' % r.randrange(NU), vec(r)) for _ in range(r.randint(1, 5))]
            body = ''.join(json.dumps({'key': k, 'vector': v}) + '\n' for k, v in rows)
            res = write_file('%s/ingest/u%d-%d.jsonl' % (mnt, ident, n), [body.encode()])
            n += 1
            if res:
                fault('jsonl upsert at %s: %s' % (res[1], res[0]))
                continue
            with mu:
                live.update(rows)   # the last of a key in the file wins
                tot['upserts'] += len(rows)
        else:
            k = 'u%d' % r.randrange(NU)
            with mu:
                was = k in live
            try:
                os.unlink('%s/records/%s' % (mnt, k))
                if not was:
                    fault('delete of %s, not live, succeeded' % k)
                with mu:
                    live.pop(k, None)
                    tot['deletes'] += 1
            except OSError as e:
                if not (e.errno == errno.ENOENT and not was):
                    fault('delete %s: %s' % (k, e))
        time.sleep(r.uniform(0, 0.02))


def flip_role(r, end, ident):
    gdir = mnt + '/generations'
    while time.time() < end:
        gens = [g for g in os.listdir(gdir) if g.isdigit()]
        if gens:
            tmp = '%s/next-%d' % (gdir, ident)
            try:
                os.symlink(r.choice(gens), tmp)
                os.rename(tmp, gdir + '/active')     # mv -T
                with mu:
                    tot['flips'] += 1
            except OSError as e:
                refused(e, 'flip')
                try:
                    os.unlink(tmp)
                except OSError:
                    pass
        time.sleep(0.02)


def ctl_role(r, end, ident):
    while time.time() < end:
        cmd = r.choice(['compact', 'compact', 'rebalance', 'rebalance', 'build'])
        res = write_file(mnt + '/ctl', [(cmd + '\n').encode()], os.O_WRONLY)
        with mu:
            tot['ctl'] += 1
        if res:
            refused(res[0], 'ctl ' + cmd)
        time.sleep(r.uniform(0.1, 0.6))


def query(opts, vs):
    d = '%s/query/fr%d' % (mnt, rng.randrange(1 << 30))
    os.mkdir(d)
    try:
        res = write_file(d + '/in', [(opts + '\n' + ''.join(fmt(v) + '\n' for v in vs)).encode()])
        if res:
            raise res[0]
        text = open(d + '/out').read()
    finally:
        os.rmdir(d)
    groups = text.rstrip('\n').split('\n\n') if text.strip() else []
    out = []
    for g in groups:
        out.append([(ln.split('\t')[0], float(ln.split('\t')[1])) for ln in g.split('\n') if ln])
    if len(out) != len(vs):
        raise OSError(errno.EIO, '%d result groups for %d queries' % (len(out), len(vs)))
    return out


def l2(a, b):
    return sum((x - y) * (x - y) for x, y in zip(a, b))


def close(a, b):
    return abs(a - b) <= 1e-4 * (1 + abs(b))


def check_round():
    """The store against what was acknowledged; returns this round's counts."""
    c = {'verify': 0, 'dup': 0, 'stale': 0, 'exact': 0}
    res = write_file(mnt + '/ctl', [b'verify\n'], os.O_WRONLY)
    if res:
        c['verify'] = 1
        said = [ln for ln in open(mnt + '/errors').read().split('\n') if 'verify' in ln]
        print('X verify: %s: %s' % (res[0], said[-1] if said else '(no line in errors)'), flush=True)
    # maintenance meeting damage says so in errors (and refuses to fold it)
    for ln in open(mnt + '/errors').read().split('\n'):
        if 'salvage repairs it' in ln and ln not in said_before:
            said_before.add(ln)
            c['verify'] += 1
            print('X errors: %s' % ln, flush=True)
    keys = sorted(live)
    us = [k for k in keys if k.startswith('u')]
    sample = us + rng.sample([k for k in keys if k.startswith('g')], min(30, len(keys) - len(us)))
    for k, hits in zip(sample, query('k=3 nprobe=100000', [live[k] for k in sample])):
        names = [h[0] for h in hits]
        if len(set(names)) != len(names):
            c['dup'] += 1
            print('X ANN at %s: a key twice: %s' % (k, names), flush=True)
        gone = [h for h in names if h not in live]
        if gone:
            c['stale'] += 1
            print('X ANN at %s: keys not live: %s' % (k, gone), flush=True)
    qs = [vec(rng) for _ in range(8)] + [live[k] for k in rng.sample(keys, min(4, len(keys)))]
    for q, hits in zip(qs, query('k=10 mode=exact', qs)):
        ref = sorted(l2(q, v) for v in live.values())[:10]
        why = None
        if len(hits) != len(ref):
            why = '%d hits, %d expected' % (len(hits), len(ref))
        elif len(set(h[0] for h in hits)) != len(hits):
            why = 'a key twice'
        else:
            for (k, d), rd in zip(hits, ref):
                if k not in live:
                    why = '%s is not live' % k
                elif not close(d, rd) or not close(d, l2(q, live[k])):
                    why = '%s at %g, expected %g (its row: %g)' % (k, d, rd, l2(q, live[k]))
                if why:
                    break
        if why:
            c['exact'] += 1
            print('X exact: %s' % why, flush=True)
    return c


def seed_store():
    """Every g key once, then two generations over them."""
    rows = [('g%d_%d' % (f, j), vec(rng)) for f in range(NF) for j in range(NR)]
    body = ''.join('%s,%s\n' % (k, ','.join('%.9g' % x for x in v)) for k, v in rows)
    res = write_file(mnt + '/ingest/seed.csv', [body.encode()])
    if res:
        raise res[0]
    live.update(rows)
    for _ in range(2):
        res = write_file(mnt + '/ctl', [b'build\n'], os.O_WRONLY)
        if res:
            raise res[0]


def main():
    try:
        seed_store()
    except OSError as e:
        fault('seed: %s' % e)
        sys.exit(1)
    deadline = time.time() + secs
    roles = [csv_role, upsert_role, flip_role, ctl_role]
    while time.time() < deadline:
        end = min(deadline, time.time() + round_s)
        ts = [threading.Thread(target=f, args=(random.Random(rng.random()), end, i))
              for i, f in enumerate(roles)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        try:
            c = check_round()
        except OSError as e:
            fault('round check: %s' % e)
            break
        tot['rounds'] += 1
        tot['verify_problems'] += c['verify']
        tot['duplicate_keys'] += c['dup']
        tot['stale_keys'] += c['stale']
        tot['exact_mismatches'] += c['exact']
        print('round %d: %d live, verify %s, %d dup, %d stale, %d exact mismatches, %d flips'
              % (tot['rounds'], len(live), 'bad' if c['verify'] else 'ok', c['dup'], c['stale'],
                 c['exact'], tot['flips']), flush=True)
    print('summary: ' + ', '.join('%s %d' % kv for kv in tot.items()), flush=True)
    bad = tot['faults'] + tot['verify_problems'] + tot['duplicate_keys'] + tot['stale_keys'] + \
        tot['exact_mismatches']
    sys.exit(1 if bad or tot['rounds'] == 0 else 0)


main()
