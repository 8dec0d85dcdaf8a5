#!/usr/bin/env bash
# tools/ingest_bench.sh - the ingest rate through a live mount: a whole
# fvecs file written into ingest/ in 1 MiB writes (dd), timed from the first
# write to the end of its close() (when the rows are committed and durable),
# the daemon's CPU time meanwhile (user + system, all its threads) and its
# peak RSS.
#
# usage: tools/ingest_bench.sh [-b ROWS | -s STORE] [-r RUNS] [-v DAEMON,...] FILE.fvecs
#   -b ROWS  write into a store that already holds the first ROWS rows of
#            FILE and a generation built from them (made once, copied for
#            each run); default: an empty store
#   -s STORE write into a copy of STORE (not mounted meanwhile)
#   -r RUNS  rounds (default 3); in each, every daemon once, each on a
#            fresh copy of the store and a fresh mount
#   -v LIST  the daemons to compare, comma-separated (default build/vecfs);
#            alternated, so a drift of the machine falls on each
#
# Needs /dev/fuse and fusermount3.  Everything lives in a temporary
# directory that is removed, and every mount is unmounted, whatever happens.
set -euo pipefail
export LC_ALL=C
cd "$(dirname "$0")/.."

BASE_ROWS=0
STORE=
RUNS=3
DAEMONS=build/vecfs
while getopts "b:s:r:v:" o; do
	case $o in
	b) BASE_ROWS=$OPTARG ;;
	s) STORE=$OPTARG ;;
	r) RUNS=$OPTARG ;;
	v) DAEMONS=$OPTARG ;;
	*) sed -n '7,15p' "$0" | cut -c3- >&2; exit 2 ;;
	esac
done
shift $((OPTIND - 1))
[ $# -eq 1 ] || { sed -n '7,15p' "$0" | cut -c3- >&2; exit 2; }
FILE=$1
[ -r "$FILE" ] || { echo "ingest_bench: cannot read $FILE" >&2; exit 1; }
IFS=, read -r -a VECFS <<<"$DAEMONS"
for d in "${VECFS[@]}"; do
	[ -x "$d" ] || { echo "ingest_bench: $d is not an executable daemon (make first)" >&2; exit 1; }
done

DIM=$(od -An -t d4 -N4 "$FILE" | tr -d ' ')
ROW=$((4 + 4 * DIM))
SIZE=$(stat -c %s "$FILE")
ROWS=$((SIZE / ROW))
(( SIZE % ROW == 0 && DIM > 0 )) || { echo "ingest_bench: $FILE is not an fvecs file" >&2; exit 1; }
(( BASE_ROWS <= ROWS )) || { echo "ingest_bench: -b $BASE_ROWS: the file has $ROWS rows" >&2; exit 1; }

TMP=$(mktemp -d /tmp/vecfs-ingest.XXXXXX)
MNT=$TMP/mnt
mkdir "$MNT"
PID=
cleanup() {
	if mountpoint -q "$MNT" 2>/dev/null; then
		fusermount3 -u "$MNT" 2>/dev/null || fusermount3 -uz "$MNT" 2>/dev/null || true
	fi
	[ -n "$PID" ] && wait "$PID" 2>/dev/null || true
	rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Mount store $1 with daemon $2 in the foreground (so that its pid is ours).
mount_store() {
	"$2" -f "$1" "$MNT" 2>>"$TMP/daemon.log" &
	PID=$!
	for _ in $(seq 200); do
		[ -e "$MNT/stats" ] && return 0
		kill -0 "$PID" 2>/dev/null || break
		sleep 0.05
	done
	echo "ingest_bench: $2 did not mount $1 (see below)" >&2
	cat "$TMP/daemon.log" >&2
	exit 1
}
# The daemon's CPU time so far, user and system, of all its threads (those
# that ended too), in clock ticks.
HZ=$(getconf CLK_TCK)
cpu_ticks() {
	awk '{print $14 + $15}' "/proc/$PID/stat"
}
unmount_store() {
	fusermount3 -u "$MNT"
	wait "$PID" || true
	PID=
}

mkdir "$TMP/base"
if [ -n "$STORE" ]; then
	[ -f "$STORE/data.mdb" ] || { echo "ingest_bench: $STORE is not a store" >&2; exit 1; }
	cp -a "$STORE/." "$TMP/base/"
	mount_store "$TMP/base" "${VECFS[0]}"
	BASE_ROWS=$(awk -F' = ' '$1 == "records" {print $2}' "$MNT/stats")
	gen=$(readlink "$MNT/generations/active" || echo none)
	unmount_store
	echo "store: a copy of $STORE, $BASE_ROWS rows, active generation $gen"
elif (( BASE_ROWS > 0 )); then
	mount_store "$TMP/base" "${VECFS[0]}"
	head -c $((BASE_ROWS * ROW)) "$FILE" >"$MNT/ingest/base.fvecs"
	echo build >"$MNT/ctl"
	gen=$(readlink "$MNT/generations/active" || true)
	[ -n "$gen" ] || { echo "ingest_bench: the build made no active generation" >&2; exit 1; }
	unmount_store
	echo "store: $BASE_ROWS rows and generation $gen (built by ${VECFS[0]})"
else
	echo "store: empty"
fi
echo "file:  $FILE, $ROWS rows of $DIM dimensions, $((SIZE >> 20)) MiB"

for r in $(seq "$RUNS"); do
	for d in "${VECFS[@]}"; do
		rm -rf "$TMP/run"
		cp -a "$TMP/base" "$TMP/run"
		sync # the copy's writeback is not the run's to pay
		mount_store "$TMP/run" "$d"
		c0=$(cpu_ticks)
		t0=$(date +%s.%N)
		dd if="$FILE" of="$MNT/ingest/all.fvecs" bs=1M status=none
		t1=$(date +%s.%N)
		c1=$(cpu_ticks)
		hwm=$(awk '/^VmHWM/ {print $2}' "/proc/$PID/status")
		got=$(awk -F' = ' '$1 == "records" {print $2}' "$MNT/stats")
		unmount_store
		(( got == BASE_ROWS + ROWS )) ||
			{ echo "ingest_bench: $got records after the write, not $((BASE_ROWS + ROWS))" >&2; exit 1; }
		awk -v r="$r" -v d="$d" -v n="$ROWS" -v t0="$t0" -v t1="$t1" -v m="$hwm" \
		    -v cpu="$(((c1 - c0) * 100 / HZ))" 'BEGIN {
			printf "round %d  %-28s %9.0f rows/s  (%.2f s)  daemon CPU %.2f s  RSS peak %.0f MB\n",
			       r, d, n / (t1 - t0), t1 - t0, cpu / 100, m / 1024 }'
	done
done
