#!/usr/bin/env bash
# make demo: vecfs end to end through a live mount, with plain shell tools.
#
# Generates a clustered data set with vecfs-data (100000 x 64 float32, 200
# queries, exact top-10 ground truth), mounts a fresh store in a temporary
# directory, ingests the base vectors with cp, builds a generation with
# `echo build > ctl`, runs the queries through query/demo/in and out (index
# search, exact scan, then one query at a time) and prints recall@10 and
# latencies.  The mount is always unmounted and the temporary directory
# removed, whatever happens.
#
# Environment: BUILD (default build), DEMO_N, DEMO_D, DEMO_Q, DEMO_ONE,
# DEMO_CLUSTERS, DEMO_SEED to change the data set.
set -euo pipefail
export LC_ALL=C
cd "$(dirname "$0")/.."

BUILD=${BUILD:-build}
case $BUILD in /*) ;; *) BUILD=$PWD/$BUILD ;; esac
VECFS=$BUILD/vecfs
DATAGEN=$BUILD/vecfs-data
N=${DEMO_N:-100000}
D=${DEMO_D:-64}
Q=${DEMO_Q:-200}
ONE=${DEMO_ONE:-50}
CLUSTERS=${DEMO_CLUSTERS:-100}
SEED=${DEMO_SEED:-42}
K=10
T=60                 # seconds allowed for any one operation on the mount
MIN_RECALL=0.90      # the demo fails below this ANN recall@10

for f in "$VECFS" "$DATAGEN"; do
	[ -x "$f" ] || { echo "demo: $f is missing; run make first" >&2; exit 1; }
done
command -v fusermount3 >/dev/null || { echo "demo: fusermount3 not found (apt-get install fuse3)" >&2; exit 1; }
[ -e /dev/fuse ] || { echo "demo: /dev/fuse is missing: FUSE is not available here" >&2; exit 1; }
(( ONE <= Q )) || ONE=$Q

# ---------------------------------------------------------------- helpers

# microseconds since the epoch, into REPLY (no subshell: cheap and exact)
now() {
	if [ -n "${EPOCHREALTIME:-}" ]; then
		REPLY=${EPOCHREALTIME//[!0-9]/}
	else
		REPLY=$(( $(date +%s%N) / 1000 ))
	fi
}

# seconds, from microseconds
secs() { awk -v u="$1" 'BEGIN { printf "%.3f s", u / 1e6 }'; }
# milliseconds per item, from total microseconds and a count
per_ms() { awk -v u="$1" -v n="$2" 'BEGIN { printf "%.3f ms", u / n / 1e3 }'; }

TMP=
STORE=
MNT=
DAEMON_PID=

is_mounted() {
	[ -n "$MNT" ] || return 1
	local m=${MNT//\\/\\134}
	m=${m// /\\040}
	awk -v m="$m" '$5 == m { f = 1 } END { exit !f }' /proc/self/mountinfo
}

# Is process $1 our daemon (`vecfs STORE MNT`, exactly)?
is_daemon() {
	local -a args=()
	[ -r "/proc/$1/cmdline" ] || return 1
	mapfile -t -d '' args <"/proc/$1/cmdline" 2>/dev/null || return 1
	[ "${#args[@]}" -eq 3 ] && [ "${args[0]}" = "$VECFS" ] &&
		[ "${args[1]}" = "$STORE" ] && [ "${args[2]}" = "$MNT" ]
}

find_daemon() {
	local p
	for p in /proc/[0-9]*; do
		p=${p#/proc/}
		if is_daemon "$p"; then
			DAEMON_PID=$p
			return 0
		fi
	done
	return 1
}

# wait up to $1 tenths of a second for our daemon to exit
wait_daemon() {
	local i
	for (( i = 0; i < $1; i++ )); do
		is_daemon "$DAEMON_PID" || return 0
		sleep 0.1
	done
	return 1
}

cleanup() {
	local rc=$?
	set +e
	trap - EXIT INT TERM ERR
	if [ -n "$MNT" ] && [ -z "$DAEMON_PID" ]; then
		find_daemon
	fi
	if is_mounted; then
		timeout 20 fusermount3 -u "$MNT" 2>/dev/null
		if is_mounted; then
			echo "demo: $MNT is busy or hung; detaching it" >&2
			fusermount3 -uz "$MNT" 2>/dev/null || umount -l "$MNT" 2>/dev/null
		fi
	fi
	if [ -n "$DAEMON_PID" ] && ! wait_daemon 100; then
		echo "demo: the daemon (pid $DAEMON_PID) is still running; stopping it" >&2
		kill -TERM "$DAEMON_PID" 2>/dev/null
		wait_daemon 50 || kill -KILL "$DAEMON_PID" 2>/dev/null
	fi
	if [ -n "$TMP" ]; then
		if is_mounted; then
			echo "demo: $MNT is still mounted; left $TMP in place" >&2
		else
			rm -rf "$TMP"
		fi
	fi
	exit "$rc"
}
on_error() {
	local rc=$1 line=$2 cmd=$3
	if [ "$rc" -eq 124 ]; then
		echo "demo: timed out after ${T}s (line $line): $cmd" >&2
	else
		echo "demo: failed with status $rc (line $line): $cmd" >&2
	fi
}
trap cleanup EXIT
trap 'on_error $? $LINENO "$BASH_COMMAND"' ERR
trap 'exit 130' INT
trap 'exit 143' TERM

TMP=$(mktemp -d "${TMPDIR:-/tmp}/vecfs-demo.XXXXXX")
TMP=$(cd "$TMP" && pwd -P)
STORE=$TMP/store
MNT=$TMP/mnt
DATA=$TMP/data
WORK=$TMP/work
mkdir "$MNT" "$WORK"
SESSION=$MNT/query/demo

# ---------------------------------------------------------------- data

echo "vecfs demo: $N x $D float32 vectors in $CLUSTERS clusters, $Q queries, l2"
echo "working in $TMP"
echo
echo "== data: vecfs-data --n $N --d $D --clusters $CLUSTERS --queries $Q --gt $K --seed $SEED --text"
now; t0=$REPLY
"$DATAGEN" --n "$N" --d "$D" --clusters "$CLUSTERS" --queries "$Q" --gt "$K" \
	--seed "$SEED" --text --out "$DATA" | sed "s|^$DATA/|   |"
now; t_data=$(( REPLY - t0 ))
echo "   generated in $(secs $t_data) (ground truth by brute force, 2 threads)"

# ---------------------------------------------------------------- mount

echo
echo "== mount: vecfs STORE MNT"
now; t0=$REPLY
timeout "$T" "$VECFS" "$STORE" "$MNT"
now; t_mount=$(( REPLY - t0 ))
find_daemon || { echo "demo: the daemon is not running after the mount" >&2; exit 1; }
echo "   mounted in $(secs $t_mount), daemon pid $DAEMON_PID"
echo "   \$ ls MNT"
echo "   $(timeout "$T" ls "$MNT" | tr '\n' ' ')"

echo
echo "== config: echo 'auto_build = 0' > MNT/config"
timeout "$T" sh -c 'echo "auto_build = 0" > "$1"' sh "$MNT/config"
grep -q '^auto_build = 0$' <(timeout "$T" cat "$MNT/config") ||
	{ echo "demo: config did not take auto_build = 0" >&2; exit 1; }
echo "   \$ cat MNT/config"
timeout "$T" cat "$MNT/config" | sed 's/^/   /'

# ---------------------------------------------------------------- ingest

echo
echo "== ingest: cp base.fvecs MNT/ingest/"
now; t0=$REPLY
timeout "$T" cp "$DATA/base.fvecs" "$MNT/ingest/"
now; t_ingest=$(( REPLY - t0 ))
echo "   committed in $(secs $t_ingest) ($(awk -v n="$N" -v u="$t_ingest" 'BEGIN { printf "%.0f", n / (u / 1e6) }') rows/s)"
echo "   \$ cat MNT/stats   (some lines)"
timeout "$T" cat "$MNT/stats" >"$WORK/stats"
grep -E '^(dim|metric|records|unindexed|ingest_rows|store_bytes|active) ' "$WORK/stats" | sed 's/^/   /'
records=$(awk -F' = ' '$1 == "records" { print $2 }' "$WORK/stats")
[ "$records" = "$N" ] || { echo "demo: stats says records = $records, expected $N" >&2; exit 1; }

# ---------------------------------------------------------------- build

echo
echo "== build: echo build > MNT/ctl"
now; t0=$REPLY
timeout "$T" sh -c 'echo build > "$1"' sh "$MNT/ctl"
now; t_build=$(( REPLY - t0 ))
echo "   built in $(secs $t_build)"
echo "   \$ ls MNT/generations"
echo "   $(timeout "$T" ls "$MNT/generations" | tr '\n' ' ')"
echo "   \$ readlink MNT/generations/active"
gen=$(timeout "$T" readlink "$MNT/generations/active")
echo "   $gen"
if [ -z "$gen" ] || [ "$gen" = none ]; then
	echo "demo: no active generation after build" >&2
	exit 1
fi
echo "   \$ cat MNT/generations/$gen/meta   (some lines)"
timeout "$T" cat "$MNT/generations/$gen/meta" |
	grep -E '^(state|records|nlist|bits|build_seconds) ' | sed 's/^/   /'

# ---------------------------------------------------------------- queries

score() { # OUT -> "R" (recall@K), checking that all queries were answered
	local line
	line=$("$DATAGEN" --recall "$1" "$DATA/gt.ivecs" --k "$K")
	if [[ ! $line =~ ^recall@$K\ =\ ([0-9.]+)\ \(([0-9]+)\ queries\) ]]; then
		echo "demo: unexpected recall output: $line" >&2
		exit 1
	fi
	if [ "${BASH_REMATCH[2]}" != "$2" ]; then
		echo "demo: $1 holds results for ${BASH_REMATCH[2]} queries, expected $2" >&2
		exit 1
	fi
	echo "${BASH_REMATCH[1]}"
}

echo
echo "== queries: mkdir -p MNT/query/demo; cp query.txt MNT/query/demo/in; cat MNT/query/demo/out"
echo "   (query.txt: $Q lines of $D numbers; the search runs when in is closed)"
timeout "$T" mkdir -p "$SESSION"
now; t0=$REPLY
timeout "$T" cp "$DATA/query.txt" "$SESSION/in"
timeout "$T" cat "$SESSION/out" >"$WORK/ann.out"
now; t_ann=$(( REPLY - t0 ))
timeout "$T" cat "$SESSION/stats" >"$WORK/ann.stats"
echo "   first query, first 3 results (KEY<TAB>DISTANCE; keys are base row numbers):"
head -n 3 "$WORK/ann.out" | sed 's/^/     /'
echo "   \$ cat MNT/query/demo/stats   (some lines)"
grep -E '^(generation|clusters_probed|pass1_scored|pass1_pruned|pass2_scored|pass2_pruned|reranked|search_us) ' \
	"$WORK/ann.stats" | sed 's/^/   /'
r_ann=$(score "$WORK/ann.out" "$Q")
echo "   recall@$K = $r_ann"

echo
echo "== exact: the same queries after a line 'mode=exact' (scans every record)"
{ echo mode=exact; cat "$DATA/query.txt"; } >"$WORK/exact.in"
now; t0=$REPLY
timeout "$T" cp "$WORK/exact.in" "$SESSION/in"
timeout "$T" cat "$SESSION/out" >"$WORK/exact.out"
now; t_exact=$(( REPLY - t0 ))
r_exact=$(score "$WORK/exact.out" "$Q")
echo "   recall@$K = $r_exact"

echo
echo "== one at a time: $ONE queries, each \`cat qI.txt > MNT/query/demo/in; cat MNT/query/demo/out\`"
mkdir "$WORK/one"
awk -v n="$ONE" -v dir="$WORK/one" 'NR <= n { f = sprintf("%s/q%04d.txt", dir, NR); print > f; close(f) }' \
	"$DATA/query.txt"
now; t0=$REPLY
timeout "$T" bash -c '
	set -e
	for f in "$1"/q*.txt; do
		cat "$f" > "$2/in"
		cat "$2/out"
		echo
	done' bash "$WORK/one" "$SESSION" >"$WORK/one.out"
now; t_one=$(( REPLY - t0 ))
r_one=$(score "$WORK/one.out" "$ONE")
echo "   recall@$K = $r_one"
# the same loop on a plain file: what the two cat processes cost by themselves
now; t0=$REPLY
bash -c '
	set -e
	for f in "$1"/q*.txt; do
		cat "$f" > "$2/plain"
		cat "$2/plain"
		echo
	done' bash "$WORK/one" "$WORK" >/dev/null
now; t_plain=$(( REPLY - t0 ))

timeout "$T" cat "$MNT/stats" >"$WORK/stats"
p50=$(awk -F' = ' '$1 == "p50_us" { print $2 }' "$WORK/stats")
p99=$(awk -F' = ' '$1 == "p99_us" { print $2 }' "$WORK/stats")
nerr=$(timeout "$T" cat "$MNT/errors" | wc -l)

# ---------------------------------------------------------------- unmount

echo
echo "== unmount: fusermount3 -u MNT"
timeout "$T" fusermount3 -u "$MNT"
wait_daemon 100 || { echo "demo: the daemon did not exit after the unmount" >&2; exit 1; }
echo "   unmounted; the daemon exited"

# ---------------------------------------------------------------- report

echo
echo "== summary ($N x $D, $Q queries, k = $K)"
printf '   %-44s %s\n' \
	"ingest (cp base.fvecs MNT/ingest/)" "$(secs $t_ingest)" \
	"build (echo build > MNT/ctl)" "$(secs $t_build)" \
	"recall@$K, index search vs ground truth" "$r_ann" \
	"recall@$K, mode=exact vs ground truth" "$r_exact" \
	"index search, $Q queries in one in" "$(secs $t_ann) = $(per_ms "$t_ann" "$Q")/query" \
	"exact scan, $Q queries in one in" "$(secs $t_exact) = $(per_ms "$t_exact" "$Q")/query" \
	"one query per write of in, $ONE queries" "$(secs $t_one) = $(per_ms "$t_one" "$ONE")/query" \
	"  the same loop on a plain file" "$(secs $t_plain) = $(per_ms "$t_plain" "$ONE")/query" \
	"query latency in the daemon, p50 / p99" "$p50 / $p99 us (MNT/stats)" \
	"lines in MNT/errors" "$nerr"

if awk -v a="$r_ann" -v e="$r_exact" -v m="$MIN_RECALL" 'BEGIN { exit !(a >= m && e >= 0.99) }'; then
	echo "demo: ok"
else
	echo "demo: FAILED: recall below $MIN_RECALL (index) or 0.99 (exact)" >&2
	exit 1
fi
