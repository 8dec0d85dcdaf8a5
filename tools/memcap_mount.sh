#!/usr/bin/env bash
# The daemon serving a store under a memory cap: the daemon started inside
# a cgroup-v1 memory cgroup (/sys/fs/cgroup/memory) whose
# memory.limit_in_bytes caps it, the page cache dropped first. Then all of
# DIR/query.fvecs in one query/b/in (a cold pass, then PASSES warm ones),
# and one query a write of query/s/in for the first SINGLES of them (a
# cold pass after the cache is dropped again with the daemon restarted,
# then a warm one). Recall@10 against DIR/gt.ivecs (the store's keys are
# row numbers, as vecfs-bench makes them). One line a figure:
#   FIGURE name value unit
# The store is left as it was; the mount, the cgroup and the daemon go.
#
# Usage: bash tools/memcap_mount.sh STORE DIR CAP [PASSES [SINGLES]]
#   CAP: MiB, or P% of the store's file (data.mdb)
# Needs root (cgroups, drop_caches) and /dev/fuse. VECFS=PATH: another
# daemon binary (default: build/vecfs).
set -u
[ $# -ge 3 ] || { sed -n '2,18p' "$0"; exit 2; }
STORE=$1 DIR=$2 CAP=$3 PASSES=${4:-3} SINGLES=${5:-1000}
HERE=$(cd "$(dirname "$0")/.." && pwd)
VF=${VECFS:-$HERE/build/vecfs}
CG=/sys/fs/cgroup/memory
[ -e $CG/memory.limit_in_bytes ] ||
	{ echo "memcap_mount: needs the cgroup-v1 memory controller at $CG" >&2; exit 1; }
SIZE=$(stat -c %s "$STORE/data.mdb") || exit 1
case $CAP in
*%) BYTES=$((SIZE / 100 * ${CAP%\%})) ;;
*) BYTES=$((CAP * 1048576)) ;;
esac
W=$(mktemp -d /tmp/memcap-mount.XXXXXX)
M=$W/mnt
mkdir -p "$M"
G=$CG/memcap-mount.$$
mkdir "$G" || exit 1
echo "$BYTES" >"$G/memory.limit_in_bytes" || exit 1
fig() { echo "FIGURE $*"; }
pid_of() { pgrep -f "^$VF $STORE $M\$" | head -n 1; }
cleanup() {
	mountpoint -q "$M" && fusermount3 -u "$M"
	for _ in $(seq 1 100); do [ -z "$(pid_of)" ] && break; sleep 0.1; done
	for p in $(cat "$G/cgroup.procs" 2>/dev/null); do echo "$p" >$CG/cgroup.procs; done
	rmdir "$G" 2>/dev/null
	rm -rf "$W"
}
trap cleanup EXIT
# the daemon born in the cgroup, on a dropped page cache
start() {
	sync
	echo 3 >/proc/sys/vm/drop_caches
	(echo $BASHPID >"$G/cgroup.procs" && exec "$VF" "$STORE" "$M") ||
		{ echo "memcap_mount: cannot mount $STORE" >&2; exit 1; }
	for _ in $(seq 1 100); do [ -e "$M/stats" ] && break; sleep 0.1; done
}
stop() {
	local p
	p=$(pid_of)
	fusermount3 -u "$M"
	while [ -n "$p" ] && kill -0 "$p" 2>/dev/null; do sleep 0.1; done
}
stat_of() { awk -v k="$1" '$1 == k {print $3}' "$2"; }
fig cap_mb "$((BYTES / 1048576))" "MiB ($CAP of $((SIZE / 1048576)) MiB)"
# a batch: every query in one in; recall and pages_read from out and stats
start
mkdir -p "$M/query/b"
for pass in $(seq 0 "$PASSES"); do
	t0=$(date +%s.%N)
	cp "$DIR/query.fvecs" "$M/query/b/in" || exit 1
	cat "$M/query/b/out" >"$W/out"
	t1=$(date +%s.%N)
	n=$(python3 -c "import os,sys; print(os.path.getsize(sys.argv[1]) // (4 + 4 * int.from_bytes(open(sys.argv[1], 'rb').read(4), 'little')))" "$DIR/query.fvecs")
	qps=$(awk -v a="$t0" -v b="$t1" -v n="$n" 'BEGIN {printf "%.1f", n / (b - a)}')
	rec=$(python3 - "$W/out" "$DIR/gt.ivecs" <<'PY'
import struct, sys
blocks = open(sys.argv[1]).read().split("\n\n")
gt = open(sys.argv[2], "rb").read()
gdim = struct.unpack_from("<i", gt)[0]
found = n = 0
for i, b in enumerate(blocks):
    keys = [int(l.split("\t")[0]) for l in b.splitlines() if l]
    if not keys:
        continue
    truth = set(struct.unpack_from("<%di" % gdim, gt, i * (4 + 4 * gdim) + 4)[:10])
    found += len(truth & set(keys[:10]))
    n += 1
print("%.4f" % (found / (10.0 * n)))
PY
)
	pages=$(stat_of pages_read "$M/query/b/stats")
	name=$([ "$pass" = 0 ] && echo cold || echo "warm$pass")
	fig "batch_${name}_qps" "$qps" "queries/s ($n in one in)"
	fig "batch_${name}_recall" "$rec" "recall@10"
	fig "batch_${name}_pages_read" "$(awk -v p="$pages" -v n="$n" 'BEGIN {printf "%.2f", p / n}')" "a query"
done
fig peak_mb "$(($(cat "$G/memory.max_usage_in_bytes") / 1048576))" "MiB in the cgroup"
stop
# one query a write: the daemon started again on a dropped cache
start
for name in cold warm; do
	python3 - "$M" "$DIR" "$SINGLES" "$name" <<'PY'
import os, struct, sys, time
m, d, n, name = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
raw = open(os.path.join(d, "query.fvecs"), "rb").read()
dim = struct.unpack_from("<i", raw)[0]
row = 4 + 4 * dim
gt = open(os.path.join(d, "gt.ivecs"), "rb").read()
gdim = struct.unpack_from("<i", gt)[0]
os.makedirs(os.path.join(m, "query", "s"), exist_ok=True)
qin, qout = os.path.join(m, "query/s/in"), os.path.join(m, "query/s/out")
qst = os.path.join(m, "query/s/stats")
found = pages = 0
t = 0.0
n = min(n, len(raw) // row)
for i in range(n):
    t0 = time.perf_counter()
    with open(qin, "wb") as f:
        f.write(raw[i * row:(i + 1) * row])
    with open(qout) as f:
        out = f.read()
    t += time.perf_counter() - t0
    keys = [int(l.split("\t")[0]) for l in out.splitlines() if l]
    truth = set(struct.unpack_from("<%di" % gdim, gt, i * (4 + 4 * gdim) + 4)[:10])
    found += len(truth & set(keys[:10]))
    for l in open(qst):
        if l.startswith("pages_read ="):
            pages += int(l.split("=")[1])
print("FIGURE single_%s_qps %.1f queries/s (one a write, %d)" % (name, n / t, n))
print("FIGURE single_%s_recall %.4f recall@10" % (name, found / (10.0 * n)))
print("FIGURE single_%s_pages_read %.2f a query" % (name, pages / n))
PY
done
stop
