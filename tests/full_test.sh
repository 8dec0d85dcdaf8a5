#!/usr/bin/env bash
# Full-disk test of build/vecfs: the store's filesystem runs out of space
# while files are ingested.  The store lives on a small tmpfs; keyed files go
# into ingest/ until one fails.  Then: the failing call is ENOSPC with one
# line in `errors` naming the file, none of that file is committed, every
# acknowledged row is there bit for bit, queries answer with exact distances,
# `verify` is ok, a build that finds no room leaves the active generation
# serving; once the filesystem has room again the same file commits, and a
# new mount serves the same records.  Every operation on the mount runs
# under `timeout`; an EXIT trap unmounts the daemon and the tmpfs.  The last
# line is `full: N passed, N failed`.
#
# Usage: bash tests/full_test.sh [path/to/vecfs]   (from the project root)
# Needs root (it mounts a tmpfs); elsewhere it says so and runs nothing.

VECFS=$(readlink -f "${1:-build/vecfs}")
SUITE=full
. "$(dirname "$0")/harness.sh"
DIM=24
ROWS=200 # rows a file

FS=$TMP/fs
mkdir -p "$FS"
if [[ $(id -u) != 0 ]] || ! mount -t tmpfs -o size=4m vecfs-full-test "$FS" 2>/dev/null; then
	echo "SKIP full-disk tests: mounting a tmpfs needs root"
	summary
	exit 0
fi
# unmounted after the daemon (cleanup() takes MOUNTS in order)
untmpfs() {
	local f
	for f in "$FS" "$TMP/fs2"; do
		mountpoint -q "$f" 2>/dev/null || continue
		umount "$f" 2>/dev/null || umount -l "$f" 2>/dev/null
	done
}
trap 'cleanup_full' EXIT
cleanup_full() {
	local m
	for m in "${MOUNTS[@]}"; do
		is_mounted "$m" && { T fusermount3 -u "$m" 2>/dev/null || T fusermount3 -uz "$m" 2>/dev/null; }
	done
	untmpfs
	cleanup
}

S=$FS/store
M=$TMP/mnt

# The rows of file F: keys fF-0 ... fF-(ROWS-1), each vector a function of
# its key, float32 values printed to round-trip.
cat >"$TMP/rows.py" <<'EOF'
import random, struct
DIM = 24
def vec(key):
    r = random.Random('vecfs-full:' + key)
    return [struct.unpack('<f', struct.pack('<f', r.uniform(-1, 1)))[0] for _ in range(DIM)]
def keys(f, rows):
    return ['f%d-%d' % (f, i) for i in range(rows)]
def tsv(f, rows):
    return ''.join('%s\t%s\n' % (k, '\t'.join('%.9g' % x for x in vec(k))) for k in keys(f, rows)).encode()
EOF

# fill.py MNT FIRST ROWS LOG: ingest files FIRST, FIRST+1, ... until one
# fails; LOG gets "P F" for each acknowledged file, then "E F ERRNO STAGE".
cat >"$TMP/fill.py" <<'EOF'
import errno, os, sys
sys.path.insert(0, os.path.dirname(sys.argv[0]))
from rows import tsv
from fileio import write_file
mnt, first, rows, log = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
with open(log, 'a') as out:
    for f in range(first, first + 10000):
        data = tsv(f, rows)
        failed = write_file('%s/ingest/f%d.tsv' % (mnt, f), [data[i:i + 65536] for i in range(0, len(data), 65536)])
        if failed:
            e, stage = failed
            out.write('E %d %s %s\n' % (f, errno.errorcode.get(e.errno, e.errno), stage))
            break
        out.write('P %d\n' % f)
        out.flush()
EOF

# check.py MNT ROWS FILE...: every key of the files reads back its vector
# bit for bit; an exact query's distances are the exact ones over them.
cat >"$TMP/check.py" <<'EOF'
import os, struct, sys
sys.path.insert(0, os.path.dirname(sys.argv[0]))
from rows import vec, keys
mnt, rows, files = sys.argv[1], int(sys.argv[2]), [int(f) for f in sys.argv[3:]]
live = {}
for f in files:
    for k in keys(f, rows):
        live[k] = vec(k)
for k, v in live.items():
    with open('%s/records/%s' % (mnt, k)) as r:
        got = [struct.unpack('<f', struct.pack('<f', float(x)))[0] for x in r.read().split()]
    if got != v:
        sys.exit('record %s: %r, want %r' % (k, got[:3], v[:3]))
q = vec('query')
os.makedirs(mnt + '/query/full', exist_ok=True)
with open(mnt + '/query/full/in', 'w') as w:
    w.write('k=5 mode=exact\n' + ' '.join('%.9g' % x for x in q) + '\n')
with open(mnt + '/query/full/out') as r:
    got = [l.split('\t') for l in r.read().splitlines() if l]
def d(v):
    s = 0.0
    for a, b in zip(v, q):
        s += (a - b) * (a - b)
    return s
best = sorted(live, key=lambda k: d(live[k]))[:5]
if [k for k, _ in got] != best:
    sys.exit('exact query: %r, want %r' % ([k for k, _ in got], best))
for k, dist in got:
    if abs(float(dist) - d(live[k])) > 1e-4 * max(1.0, d(live[k])):
        sys.exit('distance of %s: %s, want %.9g' % (k, dist, d(live[k])))
print('OK %d records' % len(live))
EOF

records() { stat_kv records; }
acked() { awk '$1 == "P" { printf "%s ", $2 }' "$TMP/fill.log"; }
errors_has() { T cat "$M/errors" | grep -qF -- "$1"; }

check mount_on_small_fs mnt "$S" "$M"
check config_no_auto_build T sh -c "printf 'auto_build = 0\n' > '$M/config'"
# a first file, and a generation over it: later files become delta postings
check first_file test "$(T "$PY" -c '
import sys; sys.path.insert(0, sys.argv[1])
from rows import tsv; sys.stdout.buffer.write(tsv(0, 200))' "$TMP" | put - "$M/ingest/f0.tsv")" == OK
echo "P 0" >"$TMP/fill.log"
check first_build T sh -c "echo build > '$M/ctl'"

T "$PY" "$TMP/fill.py" "$M" 1 "$ROWS" "$TMP/fill.log"
last=$(awk '$1 == "E" { print $2, $3, $4 }' "$TMP/fill.log")
read -r FAILED ERRNO STAGE <<<"$last"
echo "filled: $(grep -c '^P' "$TMP/fill.log") files acknowledged, file ${FAILED:-none} failed: ${ERRNO:-} at ${STAGE:-}"
check fill_ends_in_enospc test "${ERRNO:-}" == ENOSPC
check fill_failed_late test "$(grep -c '^P' "$TMP/fill.log")" -ge 3
check enospc_in_errors errors_has "ingest/f$FAILED.tsv"
errors_line() { T cat "$M/errors" | grep -F -- "$1" | grep -qi -- "$2"; }
check enospc_errors_reason errors_line "ingest/f$FAILED.tsv" space
check failed_file_gone test ! -e "$M/ingest/f$FAILED.tsv"
check failed_file_not_committed test ! -e "$M/records/f$FAILED-0"
n_acked=$(($(grep -c '^P' "$TMP/fill.log") * ROWS))
check count_is_acknowledged test "$(records)" == "$n_acked"
# shellcheck disable=SC2046
check acknowledged_intact_when_full T "$PY" "$TMP/check.py" "$M" "$ROWS" $(acked)
verify_ok() { T sh -c "echo verify > '$M/ctl'" && T cat "$M/errors" | tail -1 | cut -d' ' -f2- | grep -q '^verify: ok'; }
check verify_when_full verify_ok
# a build needs room for a whole new generation: ok, or a clear error; the
# active generation serves either way
active=$(T readlink "$M/generations/active")
out=$(printf 'build\n' | put - "$M/ctl")
echo "build while full: $out; errors: $(T cat "$M/errors" | tail -1)"
if [[ $out != OK ]]; then
	check build_when_full_fails_clearly test "$out" == "ERR ENOSPC close" -o "$out" == "ERR ENOSPC write"
	check build_when_full_logged sh -c "timeout 60 cat '$M/errors' | tail -1 | cut -d' ' -f2- | grep -i '^ctl: build' | grep -qi space"
	check build_when_full_keeps_active test "$(T readlink "$M/generations/active")" == "$active"
fi
# compaction rewrites posting blocks: done, or ENOSPC with its line
out=$(printf 'compact\n' | put - "$M/ctl")
echo "compact while full: $out; errors: $(T cat "$M/errors" | tail -1)"
if [[ $out != OK ]]; then
	check compact_when_full_fails_clearly test "$out" == "ERR ENOSPC close" -o "$out" == "ERR ENOSPC write"
	check compact_when_full_logged sh -c "timeout 60 cat '$M/errors' | tail -1 | cut -d' ' -f2- | grep -i '^ctl: compact' | grep -qi space"
fi
check verify_after_compact_when_full verify_ok
# shellcheck disable=SC2046
check queries_after_build_when_full T "$PY" "$TMP/check.py" "$M" "$ROWS" $(acked)

# room again: the file that failed commits now
check fs_grows mount -o remount,size=32m "$FS"
check failed_file_commits_with_room test "$(T "$PY" -c '
import sys; sys.path.insert(0, sys.argv[1])
from rows import tsv; sys.stdout.buffer.write(tsv(int(sys.argv[2]), 200))' "$TMP" "$FAILED" |
	put - "$M/ingest/f$FAILED.tsv")" == OK
echo "P $FAILED" >>"$TMP/fill.log"
check count_with_room test "$(records)" == $((n_acked + ROWS))
check compact_with_room test "$(printf 'compact\n' | put - "$M/ctl")" == OK

# a new mount serves the same
check unmount T fusermount3 -u "$M"
check remount mnt "$S" "$M"
check count_after_remount test "$(records)" == $((n_acked + ROWS))
# shellcheck disable=SC2046
check intact_after_remount T "$PY" "$TMP/check.py" "$M" "$ROWS" $(acked)
check verify_after_remount verify_ok
T fusermount3 -u "$M"

# ---------------------------------------------------------------- a commit's row array on a full disk
# A commit lays the row array vecfs_put takes behind the spooled rows (88
# bytes a row at dim 16); with room for the rows and 64 KiB more, the array
# has none: the close fails with ENOSPC and an errors line, nothing is
# committed, and the daemon serves on (it once died of SIGBUS there).
FS2=$TMP/fs2
M2=$TMP/mnt2
N2=12000
mkdir -p "$FS2"
if mount -t tmpfs -o size=8m vecfs-full-spool "$FS2"; then
	check spool_mount mnt "$FS2/store" "$M2"
	T "$PY" -c '
import struct, sys
n, d = int(sys.argv[2]), 16
with open(sys.argv[1], "wb") as f:
    for i in range(n):
        f.write(struct.pack("<i%df" % d, d, *[float(i % 97 + j) for j in range(d)]))' "$TMP/spool.fvecs" "$N2"
	avail=$(($(stat -f -c '%a' "$FS2") * $(stat -f -c '%S' "$FS2")))
	fill=$((avail - (88 * N2 + 65536)))
	check spool_fill test "$fill" -gt 0
	head -c "$fill" /dev/zero >"$FS2/filler" 2>/dev/null
	out=$(put "$TMP/spool.fvecs" "$M2/ingest/s.fvecs")
	echo "ingest with room for the spooled rows only: $out"
	check spool_full_enospc test "$out" == "ERR ENOSPC close"
	pid2=$(daemon_pid "$M2")
	check spool_full_daemon_alive test -n "$pid2"
	M_SAVE=$M
	M=$M2
	check spool_full_errors_line errors_has "ingest/s.fvecs"
	check spool_full_nothing_committed test "$(records)" == 0
	check spool_full_leaves_ingest test -z "$(T ls -A "$M2/ingest")"
	rm -f "$FS2/filler"
	check spool_room_commits test "$(put "$TMP/spool.fvecs" "$M2/ingest/s.fvecs")" == OK
	check spool_room_count test "$(records)" == "$N2"
	M=$M_SAVE
	T fusermount3 -u "$M2"
else
	bad spool_tmpfs "cannot mount a second tmpfs"
fi
summary
