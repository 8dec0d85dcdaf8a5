#!/usr/bin/env bash
# Concurrency stress of build/vecfs: a fresh store mounted with the daemon in
# the foreground (-f, its stderr kept), then for STRESS_SECONDS (default 60)
# at once: writers ingesting csv and fvecs files, query sessions (mkdir, in,
# out, rmdir), a session held open (pwrite in at 0, close a dup, pread out)
# with dup/close/fork storms on its descriptors, ingest files whose whole
# content is written before dup/close/fork storms on their descriptor,
# readers of stats/errors/config/generations, ctl commands (build, compact,
# rebalance, verify), config writes and flips of generations/active.
# Afterwards: every acknowledged csv row is in records/ (a sample read back
# bit for bit), a sample of the acknowledged fvecs rows is found by exact
# queries at distance 0, every query's out was well formed, the mount comes
# down cleanly, the daemon exits 0 having printed no sanitizer report, and
# `vecfs-inspect STORE verify` passes.  The last line is
# `stress: N passed, N failed`.
#
# Two of the roles are ordinary Unix use that once broke the daemon:
#  - shared_fd: one ctl or config descriptor written by two threads while a
#    third dup()s and close()s it;
#  - fork_midline: a forked child closing an inherited ingest descriptor
#    while the parent is in the middle of a line (the file must commit once,
#    whole, at the parent's close).
#
# Usage: bash tests/stress.sh [path/to/vecfs]   (from the project root)
# STRESS_SEED=N repeats a run's random choices; the daemon's stderr is kept
# in DIR/stress-daemon.log next to the daemon.

VECFS=$(readlink -f "${1:-build/vecfs}")
SUITE=stress
. "$(dirname "$0")/harness.sh"
SECS=${STRESS_SECONDS:-60}
SEED=${STRESS_SEED:-$RANDOM}
DIM=16
KEEP_LOG=$(dirname "$VECFS")/stress-daemon.log
echo "stress: $SECS s, seed $SEED"

S=$TMP/store
M=$TMP/mnt
if ! fg_mount "$S" "$M"; then
	summary
	exit 1
fi

cat >"$TMP/stress.py" <<'EOF'
# stress.py ROLE MNT ID SEED DEADLINE LOG: one role's loop until DEADLINE
# (time.time()).  LOG gets `P FORMAT FILE SEED ROWS` for each acknowledged
# ingest, `X what` for each fault found, `E errno` for each refusal that is
# allowed, and a last line `done OPS`.
import errno, os, random, struct, sys, threading, time
sys.path.insert(0, os.path.dirname(sys.argv[0]))
from fileio import write_file

DIM = 16
DEAD = (errno.ENOTCONN, errno.ECONNABORTED)

def rows(seed, n):
    r = random.Random(seed)
    return [[struct.unpack('<f', struct.pack('<f', r.uniform(-1, 1)))[0] for _ in range(DIM)]
            for _ in range(n)]

def csv_key(name, i):
    return '%s-%d' % (name, i)

def csv_bytes(name, vs):
    return ''.join('%s,%s\n' % (csv_key(name, i), ','.join('%.9g' % x for x in v))
                   for i, v in enumerate(vs)).encode()

def fvecs_bytes(vs):
    return b''.join(struct.pack('<i%df' % DIM, DIM, *v) for v in vs)

def chunks(data, n):
    step = max(1, len(data) // n)
    return [data[i:i + step] for i in range(0, len(data), step)]

def parse_out(text, nq, k):
    """None if out holds nq groups of k (None: of one number of at least 1)
    `KEY<TAB>DISTANCE` lines, distances ascending; else what is wrong."""
    if not text.endswith('\n'):
        return 'no final newline'
    groups = text[:-1].split('\n\n')
    if len(groups) != nq:
        return '%d groups for %d queries' % (len(groups), nq)
    for g in groups:
        lines = g.split('\n')
        if k is None:
            k = len(lines)
        if len(lines) != k:
            return '%d results, k %d' % (len(lines), k)
        last = -1.0
        for ln in lines:
            f = ln.split('\t')
            if len(f) != 2 or not f[0]:
                return 'bad line %r' % ln
            try:
                d = float(f[1])
            except ValueError:
                return 'bad distance %r' % ln
            if d < 0 or d < last:
                return 'distances not ascending: %r' % g[:200]
            last = d
    return None

class Role:
    def __init__(self, mnt, ident, seed, deadline, log):
        self.mnt, self.id, self.deadline = mnt, ident, deadline
        self.r = random.Random(seed)
        self.log = open(log, 'a', buffering=1)
        self.ops = 0
        self.stop = False

    def p(self, *a):
        self.log.write(' '.join(str(x) for x in a) + '\n')

    def fault(self, what):
        self.p('X', what)

    def oserr(self, e, what, allowed=()):
        """A refused operation: allowed errnos logged, others are faults."""
        if e.errno in DEAD:
            self.fault('%s: %s (the daemon is gone)' % (what, errno.errorcode.get(e.errno, e.errno)))
            self.stop = True
        elif e.errno in allowed:
            self.p('E', errno.errorcode.get(e.errno, e.errno))
        else:
            self.fault('%s: %s' % (what, e))

    def go(self):
        return not self.stop and time.time() < self.deadline

    def run(self, step):
        while self.go():
            try:
                step()
            except OSError as e:
                self.oserr(e, step.__name__)
            self.ops += 1
        self.p('done', self.ops)

    def ingest(self, fmt, name, n, write):
        seed = '%s:%s' % (self.id, name)
        vs = rows(seed, n)
        data = csv_bytes(name, vs) if fmt == 'csv' else fvecs_bytes(vs)
        res = write('%s/ingest/%s.%s' % (self.mnt, name, fmt), data)
        if res is None:
            self.p('P', fmt, name, seed, n)
        else:
            e, stage = res
            self.oserr(e, 'ingest %s.%s at %s' % (name, fmt, stage))

    def query(self, path_in, path_out):
        nq, k = self.r.randint(1, 4), self.r.randint(1, 8)
        vs = rows('q:%s:%d' % (self.id, self.ops), nq)
        if self.r.random() < 0.5:
            body = ('k=%d\n' % k + ''.join(' '.join('%.9g' % x for x in v) + '\n' for v in vs)).encode()
            parts = [body]
        else:  # binary rows take no option lines: k is the store's
            parts, k = [fvecs_bytes(vs)], None
        res = write_file(path_in, parts)
        if res:
            return self.oserr(res[0], 'query in at ' + res[1])
        with open(path_out) as f:
            text = f.read()
        why = parse_out(text, nq, k)
        if why:
            self.fault('query out: %s' % why)

def plain_write(path, data):
    return write_file(path, chunks(data, 3))

def storm_write(role):
    """Write the whole file, then dups, closes and forked children exiting
    (each closes the inherited descriptor) before the last close."""
    return lambda path, data: write_file(path, chunks(data, 4) + [lambda fd: storm(role, fd)])

def storm(role, fd):
    kids = []
    for _ in range(role.r.randint(2, 6)):
        if role.r.random() < 0.5:
            os.close(os.dup(fd))
        else:
            pid = os.fork()
            if pid == 0:
                os._exit(0)
            kids.append(pid)
    for pid in kids:
        os.waitpid(pid, 0)

def ingests(role, prefix, most, write):
    """csv and fvecs files in turn, of up to `most` rows."""
    def ingest_step():
        fmt = 'csv' if role.ops % 2 else 'fvecs'
        role.ingest(fmt, '%s%s-%d' % (prefix, role.id, role.ops), role.r.randint(5, most), write)
    role.run(ingest_step)

def writer(role):
    ingests(role, 'w', 200, plain_write)

def ingest_storm(role):
    ingests(role, 's', 60, storm_write(role))

def sessions(role):
    n = [0]
    def session_step():
        n[0] += 1
        d = '%s/query/s%s-%d' % (role.mnt, role.id, n[0])
        os.mkdir(d)
        try:
            for _ in range(role.r.randint(1, 3)):
                role.query(d + '/in', d + '/out')
        finally:
            os.rmdir(d)
    role.run(session_step)

def held_session(role):
    d = '%s/query/h%s' % (role.mnt, role.id)
    os.mkdir(d)
    fin = os.open(d + '/in', os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    fout = [None]
    def held_step():
        nq, k = role.r.randint(1, 3), role.r.randint(1, 8)
        vs = rows('h:%s:%d' % (role.id, role.ops), nq)
        req = ('k=%d\n' % k + ''.join(' '.join('%.9g' % x for x in v) + '\n' for v in vs)).encode()
        os.pwrite(fin, req, 0)
        os.close(os.dup(fin))
        if role.r.random() < 0.3:
            storm(role, fin)
        if fout[0] is None:
            fout[0] = os.open(d + '/out', os.O_RDONLY)
        text = os.pread(fout[0], 1 << 20, 0).decode()
        why = parse_out(text, nq, k)
        if why:
            role.fault('held query out: %s' % why)
        if fout[0] is not None and role.r.random() < 0.2:
            storm(role, fout[0])
    role.run(held_step)
    os.close(fin)
    if fout[0] is not None:
        os.close(fout[0])
    os.rmdir(d)

def reader(role):
    gone = (errno.ENOENT,)
    def read_step():
        for name in ('stats', 'errors', 'config', 'README'):
            with open('%s/%s' % (role.mnt, name), 'rb') as f:
                f.read()
        gdir = role.mnt + '/generations'
        for g in os.listdir(gdir):
            try:
                if g == 'active':
                    os.readlink(gdir + '/active')
                    continue
                for leaf in ('meta', 'clusters'):
                    with open('%s/%s/%s' % (gdir, g, leaf), 'rb') as f:
                        f.read()
            except OSError as e:
                role.oserr(e, 'generations/' + g, gone)
        if role.r.random() < 0.1:
            keys = os.listdir(role.mnt + '/records')
            if keys:
                k = role.r.choice(keys)
                try:
                    with open('%s/records/%s' % (role.mnt, k), 'rb') as f:
                        f.read()
                except OSError as e:
                    role.oserr(e, 'records/' + k, gone)
        time.sleep(0.02)
    role.run(read_step)

# ctl and config may refuse (a build already running, nothing to compact, ...)
REFUSED = (errno.EBUSY, errno.EINVAL, errno.EAGAIN, errno.ENOENT, errno.EEXIST,
           errno.ENOSPC, errno.ECANCELED)

def commands(role, name, line, pause):
    """Lines line() written to `name`, one open, write and close each."""
    def command_step():
        text = line()
        res = write_file('%s/%s' % (role.mnt, name), [(text + '\n').encode()], os.O_WRONLY)
        if res:
            role.oserr(res[0], '%s %r at %s' % (name, text, res[1]), REFUSED)
        time.sleep(role.r.uniform(*pause))
    role.run(command_step)

def ctl(role):
    commands(role, 'ctl', lambda: role.r.choice(['build', 'build', 'compact', 'compact',
                                                 'rebalance', 'verify', 'build stage']),
             (0.2, 1.5))

def config(role):
    r = role.r
    commands(role, 'config', lambda: r.choice([
        'nprobe = %d' % r.randint(1, 64), 'k = %d' % r.randint(1, 20),
        'refine = %d' % r.randint(1, 20), 'compact_deltas = %d' % r.randint(16, 256),
        'keep_generations = %d' % r.randint(1, 3), 'auto_build = %d' % r.choice([0, 3000, 8000])]),
        (0.05, 0.5))

def flipper(role):
    gdir = role.mnt + '/generations'
    def flip_step():
        gens = [g for g in os.listdir(gdir) if g.isdigit()]
        if gens:
            tmp = '%s/next-%s' % (gdir, role.id)
            try:
                os.symlink(role.r.choice(gens), tmp)
                os.rename(tmp, gdir + '/active')
            except OSError as e:
                role.oserr(e, 'flip', REFUSED + (errno.EPERM, errno.ENOTDIR))
                try:
                    os.unlink(tmp)
                except OSError:
                    pass
        time.sleep(role.r.uniform(0.1, 0.6))
    role.run(flip_step)

def shared_fd(role):
    """One ctl or config descriptor written by two threads
    while a third dup()s and close()s it."""
    def shared_step():
        name, line = role.r.choice([('ctl', b'compact\n'), ('config', b'nprobe = 16\n')])
        fd = os.open('%s/%s' % (role.mnt, name), os.O_WRONLY)
        end = time.time() + 2
        def writes():
            while time.time() < end:
                try:
                    os.write(fd, line)
                except OSError as e:
                    if e.errno in DEAD:
                        return
        def dups():
            while time.time() < end:
                try:
                    os.close(os.dup(fd))
                except OSError as e:
                    if e.errno in DEAD:
                        return
        ts = [threading.Thread(target=t) for t in (writes, writes, dups)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        try:
            os.close(fd)
        except OSError as e:
            role.oserr(e, name + ' close', REFUSED)
    role.run(shared_step)

def fork_midline(role):
    """A forked child closes the inherited ingest descriptor
    while the parent is in the middle of a line."""
    n = [0]
    def fork_exit(fd):
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        os.waitpid(pid, 0)
    def w(path, data):
        cut = data.index(b'\n') // 2
        return write_file(path, [data[:cut], fork_exit, data[cut:]])
    def midline_step():
        n[0] += 1
        role.ingest('csv', 'm%s-%d' % (role.id, n[0]), role.r.randint(5, 40), w)
        time.sleep(0.05)
    role.run(midline_step)

ROLES = {f.__name__: f for f in (writer, ingest_storm, sessions, held_session, reader, ctl,
                                 config, flipper, shared_fd, fork_midline)}

if __name__ == '__main__':
    role, mnt, ident, seed, deadline, log = sys.argv[1:7]
    ro = Role(mnt, ident, int(seed), float(deadline), log)
    try:
        ROLES[role](ro)
    except OSError as e:
        ro.oserr(e, role)
        ro.p('done', ro.ops)  # the last `done` line counts
EOF

# check.py MNT LOG...: the acknowledged rows of the writers' logs are in the
# store (every csv key listed, a sample read back; a sample of fvecs rows
# found by an exact query at distance 0).  Prints `ok WHAT` or `bad WHAT: why`.
cat >"$TMP/check.py" <<'EOF'
import os, random, struct, sys
sys.path.insert(0, os.path.dirname(sys.argv[0]))
from stress import rows, csv_key, parse_out
from fileio import write_file
mnt, logs = sys.argv[1], sys.argv[2:]
csv, fv = [], []
for log in logs:
    if not os.path.exists(log):
        continue
    for line in open(log):
        f = line.split()
        if f and f[0] == 'P':
            fmt, name, seed, n = f[1], f[2], f[3], int(f[4])
            vs = rows(seed, n)
            if fmt == 'csv':
                csv += [(csv_key(name, i), v) for i, v in enumerate(vs)]
            else:
                fv += vs
print('acknowledged: %d csv rows, %d fvecs rows' % (len(csv), len(fv)))
keys = set(os.listdir(mnt + '/records'))
missing = [k for k, _ in csv if k not in keys]
print(('ok' if not missing else 'bad') + ' csv_rows_listed: %d of %d missing %s' % (len(missing), len(csv), ' '.join(missing[:5])))
r = random.Random(1)
wrong = []
for k, v in r.sample(csv, min(300, len(csv))):
    try:
        got = [struct.unpack('<f', struct.pack('<f', float(x)))[0]
               for x in open('%s/records/%s' % (mnt, k)).read().split()]
    except OSError as e:
        got = str(e)
    if got != v:
        wrong.append(k)
print(('ok' if not wrong else 'bad') + ' csv_rows_exact: %d of a sample wrong %s' % (len(wrong), ' '.join(wrong[:5])))
sample = r.sample(fv, min(300, len(fv)))
if sample:
    d = mnt + '/query/check'
    os.mkdir(d)
    res = write_file(d + '/in', [('k=1 mode=exact\n' + ''.join(' '.join('%.9g' % x for x in v) + '\n' for v in sample)).encode()])
    out = open(d + '/out').read() if not res else ''
    os.rmdir(d)
    why = str(res) if res else parse_out(out, len(sample), 1)
    far = [ln for ln in out.split('\n') if '\t' in ln and float(ln.split('\t')[1]) != 0]
    print(('ok' if not why and not far else 'bad') + ' fvecs_rows_found: %d of %d at a distance %s' % (len(far), len(sample), why or ' '.join(far[:3])))
else:
    print('bad fvecs_rows_found: no fvecs row acknowledged')
EOF

# settings that make maintenance happen during the run
put - "$M/config" >/dev/null <<<"dim = $DIM
auto_build = 3000
compact_deltas = 32
keep_generations = 2"
T "$PY" -c "
import sys; sys.path.insert(0, '$TMP')
from stress import rows, csv_bytes
from fileio import write_file
r = write_file('$M/ingest/seed.csv', [csv_bytes('seed', rows('seed', 300))])
sys.exit(1 if r else 0)"
check seed_ingest test $? -eq 0

DEADLINE=$(awk -v t="$(date +%s.%N)" -v s="$SECS" 'BEGIN { printf "%.3f", t + s }')
ROLES=(writer writer writer ingest_storm sessions sessions held_session reader reader ctl config
	flipper shared_fd fork_midline)
mkdir -p "$TMP/logs"
pids=()
for i in "${!ROLES[@]}"; do
	timeout -k 5 $((SECS + 120)) "$PY" "$TMP/stress.py" "${ROLES[$i]}" "$M" "$i" $((SEED * 100 + i)) \
		"$DEADLINE" "$TMP/logs/$i.${ROLES[$i]}" >"$TMP/logs/$i.out" 2>&1 &
	pids+=($!)
done
for i in "${!pids[@]}"; do
	wait "${pids[$i]}"
	rc=$?
	log=$TMP/logs/$i.${ROLES[$i]}
	name="role_${i}_${ROLES[$i]}"
	ops=$(awk '$1 == "done" { n = $2 } END { print n }' "$log" 2>/dev/null)
	refused=$(awk '$1 == "E" { n[$2]++ } END { for (e in n) printf " %s=%d", e, n[e] }' "$log" 2>/dev/null)
	faults=$(grep -c '^X' "$log" 2>/dev/null)
	echo "$name: ${ops:-?} operations, ${faults:-0} faults, refused:${refused:- none}"
	if [[ $rc -eq 0 && -n $ops && ${faults:-0} -eq 0 ]]; then
		ok "$name"
	else
		bad "$name" "exit $rc; $(grep '^X' "$log" | sed 's/[0-9][0-9]*/N/g' | sort | uniq -c | sort -rn | head -5 | tr -s ' \n' ' ;') $(tail -c 300 "$TMP/logs/$i.out")"
	fi
done

if is_mounted "$M" && kill -0 "$DPID" 2>/dev/null; then
	ok still_mounted
	while read -r verdict rest; do
		case $verdict in
		ok) ok "${rest%%:*}" ;;
		bad) bad "${rest%%:*}" "${rest#*: }" ;;
		*) echo "$verdict $rest" ;;
		esac
	done < <(T "$PY" "$TMP/check.py" "$M" "$TMP"/logs/*.writer "$TMP"/logs/*.ingest_storm "$TMP"/logs/*.fork_midline 2>&1)
	echo "stats: $(T cat "$M/stats" | grep -E '^(records|generations|active|compactions|rebalances|queries) ' | tr '\n' ' ')"
else
	bad still_mounted "the daemon is gone: $(tail -c 300 "$TMP/daemon.err")"
fi

fg_finish_verified "$KEEP_LOG" "$S"
summary
