#!/usr/bin/env bash
# Crash test of build/vecfs: the durability promise under `kill -9` while the
# daemon is busy.  A store with a generation and a small compact_deltas takes
# ingests (delta postings), deletes and ctl commands (compact, rebalance,
# build, verify) from several processes; after a random 0.3-2 s the daemon is
# killed with SIGKILL, the mount is taken down, the store as the crash left
# it (no recovery yet) must pass `vecfs-inspect STORE verify`, and the
# store is mounted again.
# Then every ingest whose close() returned 0 and every rm whose unlink()
# returned 0 must be there (only those count: the writers log an operation
# only after it returned), a file whose close() failed is all there or not at
# all, keys nobody touched keep their state, `verify` is ok and queries
# return only live records with exact distances.  Several rounds on the same
# store.  Every operation on the mount runs under `timeout`; an EXIT trap
# unmounts whatever is still mounted.  The last line is
# `crash: N passed, N failed`.
#
# Usage: bash tests/crash_test.sh [path/to/vecfs]   (from the project root)
# CRASH_SEED=N repeats a run's random choices (its seed is printed first).

VECFS=$(readlink -f "${1:-build/vecfs}")
SUITE=crash
. "$(dirname "$0")/harness.sh"
ROUNDS=${CRASH_ROUNDS:-5} # kill -9 cycles on one store
BASE=3000 # rows of the first ingest, keys base-0 ... base-2999
DIM=16
SEED=${CRASH_SEED:-$RANDOM}
log_tail() { tail -c 300 "$TMP/daemon.log" | tr "\n" "|"; }
INSPECT=$(dirname "$VECFS")/vecfs-inspect
inspect_verify_ok() {
	local out
	out=$(T "$INSPECT" "$S" verify 2>&1) && [[ $out == "verify: ok"* ]] ||
		{ echo "$out" >&2; return 1; }
}

# The vector of a key: a function of the key alone, float32 values.
cat >"$TMP/vec.py" <<'EOF'
import random, struct
DIM = 16
def vec(key):
    r = random.Random('vecfs-crash:' + key)
    return [struct.unpack('<f', struct.pack('<f', r.uniform(-1, 1)))[0] for _ in range(DIM)]
def text(v, sep=' '):
    return sep.join('%.9g' % x for x in v)
EOF

# writer.py MNT NAME LOG SEED POOL_FIRST POOL_N: ingest small files of keyed
# rows and delete some acknowledged records, until an operation fails.  LOG
# gets, each written before the next operation starts:
#   A FILE KEY...  before the file is created (attempt)
#   P FILE         after its close() returned 0 (acknowledged)
#   d KEY / D KEY  before / after a successful unlink of records/KEY
#   E ERRNO STAGE WHAT  the failure that ended the loop
cat >"$TMP/writer.py" <<'EOF'
import errno, json, os, random, sys
sys.path.insert(0, os.path.dirname(sys.argv[0]))
from vec import vec, text
from fileio import write_file
mnt, name, log, seed = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
pool = ['base-%d' % i for i in range(int(sys.argv[5]), int(sys.argv[5]) + int(sys.argv[6]))]
r = random.Random(seed)
r.shuffle(pool)
lfd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
def note(s):
    os.write(lfd, (s + '\n').encode())
def fail(e, stage, what):
    note('E %s %s %s' % (errno.errorcode.get(e.errno, e.errno), stage, what))
    sys.exit(0)
def delete(key):
    note('d ' + key)
    try:
        os.unlink(os.path.join(mnt, 'records', key))
    except OSError as e:
        fail(e, 'unlink', key)
    note('D ' + key)
acked = []
seq = 0
while True:
    seq += 1
    keys = ['%s-%d-%d' % (name, seq, j) for j in range(r.randint(5, 40))]
    fmt = r.choice(['tsv', 'csv', 'jsonl'])
    if fmt == 'jsonl':
        lines = [json.dumps({'key': k, 'vector': [float('%.9g' % x) for x in vec(k)]}) for k in keys]
    else:
        sep = '\t' if fmt == 'tsv' else ','
        lines = [k + sep + text(vec(k), sep) for k in keys]
    data = ('\n'.join(lines) + '\n').encode()
    fname = '%s-%d.%s' % (name, seq, fmt)
    note('A %s %s' % (fname, ' '.join(keys)))
    cut = r.randint(0, len(data))
    failed = write_file(os.path.join(mnt, 'ingest', fname), (data[:cut], data[cut:]))
    if failed:
        fail(failed[0], failed[1], fname)
    note('P ' + fname)
    acked.extend(keys)
    if r.random() < 0.3 and acked:
        delete(acked.pop(r.randrange(len(acked))))
    if r.random() < 0.2 and pool:
        delete(pool.pop())
EOF

# maint.py MNT LOG SEED: ctl commands in a loop (mostly compact); LOG gets
# `ok CMD` or `CMD ERRNO` per command, `stop` once the mount is gone
cat >"$TMP/maint.py" <<'EOF'
import errno, os, random, sys
sys.path.insert(0, os.path.dirname(sys.argv[0]))
from fileio import write_file
mnt, log, seed = sys.argv[1], sys.argv[2], int(sys.argv[3])
r = random.Random(seed)
lfd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
while True:
    cmd = r.choice(['compact'] * 14 + ['rebalance'] * 2 + ['verify'] * 2 + ['build'])
    failed = write_file(os.path.join(mnt, 'ctl'), [(cmd + '\n').encode()],
                        os.O_WRONLY | os.O_TRUNC)
    if not failed:
        os.write(lfd, ('ok %s\n' % cmd).encode())
        continue
    e = failed[0]
    os.write(lfd, ('%s %s\n' % (cmd, errno.errorcode.get(e.errno, e.errno))).encode())
    if e.errno in (errno.ENOTCONN, errno.ECONNABORTED, errno.ENOENT):
        os.write(lfd, b'stop\n')
        sys.exit(0)
EOF

# check.py MNT ROUND LOGDIR PREV CUR SEED: after a remount, the store against
# every round's logs.  Prints `ok NAME` or `bad NAME DETAIL` lines, then `end`.
cat >"$TMP/check.py" <<'EOF'
import glob, math, os, random, re, struct, sys
sys.path.insert(0, os.path.dirname(sys.argv[0]))
from vec import vec, text
mnt, rnd, logdir, prev_path, cur_path = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
rng = random.Random(int(sys.argv[6]) * 1000 + rnd)
BASE = int(sys.argv[7])
def res(ok, name, detail=''):
    print(('ok %s' % name) if ok else ('bad %s %s' % (name, detail)), flush=True)
def short(keys, n=5):
    keys = sorted(keys)
    return '%d: %s%s' % (len(keys), ' '.join(keys[:n]), ' ...' if len(keys) > n else '')

files = {}                      # file -> keys, every attempt of every round
acked_files = set()
put_acked, del_tried, del_acked = set(), set(), set()
touched = set()                 # keys this round tried to change
this_round_acked = []
for path in sorted(glob.glob(os.path.join(logdir, 'r*w*.log'))):
    r = int(re.match(r'r(\d+)w', os.path.basename(path)).group(1))
    for line in open(path):
        f = line.split()
        if not f or line[-1] != '\n':
            continue            # a line cut by the writer's end is no acknowledgement
        if f[0] == 'A':
            files[f[1]] = f[2:]
            if r == rnd:
                touched.update(f[2:])
        elif f[0] == 'P':
            acked_files.add(f[1])
            put_acked.update(files[f[1]])
            if r == rnd:
                this_round_acked.extend(files[f[1]])
        elif f[0] == 'd':
            del_tried.add(f[1])
            if r == rnd:
                touched.add(f[1])
        elif f[0] == 'D':
            del_acked.add(f[1])
base = {'base-%d' % i for i in range(BASE)}
known = base.union(*files.values()) if files else set(base)
must_live = (base | put_acked) - del_tried
must_gone = del_acked

listing = os.listdir(os.path.join(mnt, 'records'))
live = set(listing)
res(len(listing) == len(live), 'listing_unique', '%d names, %d distinct' % (len(listing), len(live)))
stats = dict(l.split(' = ', 1) for l in open(os.path.join(mnt, 'stats')).read().splitlines() if ' = ' in l)
res(stats.get('records') == str(len(live)), 'stats_records_match_listing',
    'stats records = %s, %d listed' % (stats.get('records'), len(live)))
missing = must_live - live
res(not missing, 'acknowledged_ingests_present',
    'missing %s (of %d acknowledged live)' % (short(missing), len(must_live)))
back = must_gone & live
res(not back, 'acknowledged_deletes_gone', 'listed again %s' % short(back))
back = [k for k in sorted(must_gone) if os.path.exists(os.path.join(mnt, 'records', k))]
res(not back, 'acknowledged_deletes_lookup_enoent', 'found %s' % short(back))
stray = live - known
res(not stray, 'no_unknown_keys', 'listed %s' % short(stray))
torn = []
for fname, keys in files.items():
    if fname in acked_files:
        continue
    n = sum(1 for k in keys if k in live and k not in del_tried)
    m = sum(1 for k in keys if k not in del_tried)
    if n not in (0, m):
        torn.append('%s (%d of %d rows)' % (fname, n, m))
res(not torn, 'failed_ingests_all_or_nothing', '%d files: %s' % (len(torn), ' '.join(torn[:3])))
if os.path.exists(prev_path):
    prev = set(open(prev_path).read().split())
    changed = {k for k in (prev ^ live) if k not in touched}
    res(not changed, 'untouched_keys_unchanged',
        'appeared %s; vanished %s' % (short(changed - prev), short(changed & prev)))
open(cur_path, 'w').write('\n'.join(sorted(live)) + '\n')

# record contents: every key acknowledged this round, and a sample of the rest
sample = [k for k in this_round_acked if k in live]
rest = sorted(live - set(sample))
sample += rng.sample(rest, min(300, len(rest)))
wrong = []
for k in sample:
    try:
        got = [struct.unpack('<f', struct.pack('<f', float(x)))[0]
               for x in open(os.path.join(mnt, 'records', k)).read().split()]
    except OSError as e:
        wrong.append('%s (%s)' % (k, e.strerror))
        continue
    if got != vec(k):
        wrong.append(k)
res(not wrong, 'record_contents', '%d of %d wrong: %s' % (len(wrong), len(sample), ' '.join(wrong[:5])))

def query(name, head, vectors):
    d = os.path.join(mnt, 'query', name)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, 'in'), 'w') as f:
        f.write(head + '\n' + ''.join(text(v) + '\n' for v in vectors))
    out = open(os.path.join(d, 'out')).read()
    os.rmdir(d)
    blocks = out.rstrip('\n').split('\n\n') if out.strip() else []
    return [[(l.split('\t')[0], float(l.split('\t')[1])) for l in b.splitlines()] for b in blocks]
def l2(a, b):
    return sum((x - y) * (x - y) for x, y in zip(a, b))

# exact: the last record acknowledged this round and a base record, each at 0
mine = [k for k in reversed(this_round_acked) if k in live and k not in del_tried]
targets = mine[:1] + [rng.choice(sorted(live & base))]
try:
    got = query('crash-exact', 'k=2 mode=exact', [vec(k) for k in targets])
    bad_ = [k for k, b in zip(targets, got) if len(b) != 2 or b[0] != (k, 0.0) or not b[1][1] > 0]
    res(len(got) == len(targets) and not bad_, 'exact_query_finds_self',
        'targets %s, got %s' % (targets, got))
except OSError as e:
    res(False, 'exact_query_finds_self', str(e))

# ann: vectors of live records and of acknowledged deleted ones; every hit is
# live, not deleted, at its exact distance, in order
qkeys = rng.sample(sorted(live), min(10, len(live))) + rng.sample(sorted(must_gone), min(10, len(must_gone)))
try:
    got = query('crash-ann', 'k=10', [vec(k) for k in qkeys])
    probs = []
    if len(got) != len(qkeys):
        probs.append('%d result groups for %d queries' % (len(got), len(qkeys)))
    for k, b in zip(qkeys, got):
        if len(b) != min(10, len(live)):
            probs.append('%s: %d results' % (k, len(b)))
        for hk, dist in b:
            if hk not in live or hk in must_gone:
                probs.append('%s: hit %s is not live' % (k, hk))
            elif not math.isclose(dist, l2(vec(k), vec(hk)), rel_tol=1e-4, abs_tol=1e-5):
                probs.append('%s: hit %s at %r, exact %r' % (k, hk, dist, l2(vec(k), vec(hk))))
        if [d for _, d in b] != sorted(d for _, d in b):
            probs.append('%s: not in order' % k)
    res(not probs, 'ann_query_live_exact', '; '.join(probs[:4]))
except OSError as e:
    res(False, 'ann_query_live_exact', str(e))
print('info round %d: %d live, %d acknowledged files this round (%d rows), %d deletes acknowledged in all, %d unacknowledged files' % (
    rnd, len(live), sum(1 for f in acked_files if f.startswith('r%dw' % rnd)), len(this_round_acked),
    len(del_acked), len(set(files) - acked_files)))
print('end')
EOF

# verify through ctl: its close succeeds and its line in errors says ok
verify_ok() {
	local r line
	r=$(printf 'verify\n' | put - "$M/ctl")
	line=$(T cat "$M/errors" | cut -d' ' -f2- | grep '^verify: ' | tail -n 1)
	[[ $r == OK && $line == "verify: ok"* ]] && return 0
	echo "ctl: $r; errors: $line" >&2
	return 1
}

# ---------------------------------------------------------------- setup
echo "seed $SEED"
S=$TMP/store
M=$TMP/mnt
mkdir -p "$TMP/logs"
if ! mnt "$S" "$M"; then
	bad mount "$(log_tail)"
	summary
	exit 1
fi
ok mount
check config_set test "$(printf 'auto_build = 0\ncompact_deltas = 8\nkeep_generations = 1\n' | put - "$M/config")" == OK
"$PY" - "$TMP" "$BASE" >"$TMP/base.tsv" <<'EOF'
import sys
sys.path.insert(0, sys.argv[1])
from vec import vec, text
for i in range(int(sys.argv[2])):
    k = 'base-%d' % i
    print(k + '\t' + text(vec(k), '\t'))
EOF
check base_ingest test "$(put "$TMP/base.tsv" "$M/ingest/base.tsv")" == OK
check base_records test "$(stat_kv records)" == "$BASE"
check base_dim test "$(T cat "$M/config" | kv dim)" == "$DIM"
check base_build test "$(printf 'build\n' | put - "$M/ctl")" == OK
check base_active test -n "$(T readlink "$M/generations/active")"
check base_verify verify_ok
T ls "$M/records" | sort >"$TMP/live.0"

# ---------------------------------------------------------------- rounds
for ((r = 1; r <= ROUNDS; r++)); do
	BG=()
	for w in 0 1; do
		T "$PY" "$TMP/writer.py" "$M" "r${r}w$w" "$TMP/logs/r${r}w$w.log" $((SEED * 100 + r * 10 + w)) \
			$((((r - 1) * 2 + w) * 200)) 200 &
		BG+=($!)
	done
	T "$PY" "$TMP/maint.py" "$M" "$TMP/logs/maint$r" $((SEED * 100 + r)) &
	BG+=($!)
	# the random delay counts from the writers' first acknowledged file
	for ((i = 0; i < 100; i++)); do
		[[ $(cat "$TMP/logs/r${r}"w*.log 2>/dev/null | grep -c '^P ') -ge 2 ]] && break
		sleep 0.1
	done
	ms=$((300 + (SEED * 7919 + r * 104729) % 1701))
	sleep "$((ms / 1000)).$(printf %03d $((ms % 1000)))"
	maint=$(stat_kv maintenance)
	early=
	for p in "${BG[@]}"; do kill -0 "$p" 2>/dev/null || early=1; done
	pid=$(daemon_pid "$M")
	if [[ -z $pid ]]; then
		bad "round${r}_daemon_found" "no daemon serves $M; $(log_tail)"
		break
	fi
	kill -9 "$pid"
	if [[ -n $early ]]; then
		bad "round${r}_busy_until_kill" "a writer stopped before the kill: $(grep -h '^E ' "$TMP/logs/r${r}"w*.log | tr '\n' ';') $(grep -v -e '^ok ' -e '^stop' "$TMP/logs/maint$r" 2>/dev/null | tr '\n' ';')"
	fi
	# the writers fail (ENOTCONN) and end by themselves
	for ((i = 0; i < 150; i++)); do
		alive=0
		for p in "${BG[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
		((alive)) || break
		sleep 0.1
	done
	if ((alive)); then
		bad "round${r}_writers_end" "still running 15 s after the kill"
		for p in "${BG[@]}"; do kill -TERM "$p" 2>/dev/null; done
	fi
	wait "${BG[@]}" 2>/dev/null
	BG=()
	for ((i = 0; i < 50; i++)); do
		st=$(awk '{ print $3 }' "/proc/$pid/stat" 2>/dev/null)
		[[ -z $st || $st == Z ]] && break
		sleep 0.1
	done
	T fusermount3 -u "$M" 2>/dev/null || T fusermount3 -uz "$M"
	nack=$(cat "$TMP/logs/r${r}"w*.log | grep -c '^P ')
	ndel=$(cat "$TMP/logs/r${r}"w*.log | grep -c '^D ')
	echo "round $r: killed after ${ms} ms (maintenance = ${maint:-?}); $nack files and $ndel deletes acknowledged;" \
		"writers ended with: $(grep -h '^E ' "$TMP/logs/r${r}"w*.log | cut -d' ' -f2,3 | tr '\n' ',')" \
		"ctl done: $(awk '$1 == "ok" { n[$2]++ } END { for (c in n) printf "%s %d,", c, n[c] }' "$TMP/logs/maint$r")" \
		"failed: $(grep -v -e '^ok ' -e '^stop' "$TMP/logs/maint$r" | tr '\n' ',')"
	check "round${r}_writers_acknowledged" test "$nack" -gt 0
	# what the crash left, before any recovery, read as it is: consistent
	check "round${r}_consistent_before_recovery" inspect_verify_ok
	if ! mnt "$S" "$M"; then
		bad "round${r}_remount" "$(log_tail)"
		break
	fi
	ok "round${r}_remount"
	# (it reads every record through the mount: on a loaded machine that
	# takes longer than one operation's minute)
	timeout -k 5 600 "$PY" "$TMP/check.py" "$M" "$r" "$TMP/logs" "$TMP/live.$((r - 1))" "$TMP/live.$r" "$SEED" "$BASE" \
		>"$TMP/check.$r" 2>"$TMP/check.$r.err"
	rc=$?
	while read -r st name detail; do
		case $st in
		ok) ok "round${r}_$name" ;;
		bad) bad "round${r}_$name" "$detail" ;;
		info) echo "$name $detail" ;;
		esac
	done <"$TMP/check.$r"
	if [[ $rc != 0 ]] || [[ $(tail -n 1 "$TMP/check.$r") != end ]]; then
		bad "round${r}_check_ran" "exit $rc: $(tail -n 3 "$TMP/check.$r.err" | tr '\n' '|')"
	fi
	check "round${r}_verify" verify_ok
	# the recovered store compacts, and stays consistent
	check "round${r}_compact" test "$(printf 'compact\n' | put - "$M/ctl")" == OK
	check "round${r}_compact_verify" verify_ok
	check "round${r}_compact_keeps_records" test "$(stat_kv records)" == "$(grep -c . "$TMP/live.$r")"
done

if ((FAIL)); then
	echo "# daemon log (last lines)$([[ -s $TMP/daemon.log ]] || echo ': empty')"
	tail -n 20 "$TMP/daemon.log" | sed 's/^/#   /'
	if is_mounted "$M"; then
		echo "# errors:"
		T cat "$M/errors" | tail -n 20 | sed 's/^/#   /'
	fi
fi
summary
