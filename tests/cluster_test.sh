#!/usr/bin/env bash
# Tests of vecfs.cluster (tools/python/vecfs/cluster.py): tests/test_cluster.py
# runs a ShardedIndex on a distributed.LocalCluster of worker processes, each
# mounting its own store under a temporary directory, against one store
# mounted here; sift-128 from ../shared/data when present.
# The last line is `cluster: N passed, N failed`.
#
# Usage: bash tests/cluster_test.sh [path/to/vecfs]   (from the project root)

VECFS=$(readlink -f "${1:-build/vecfs}")
SUITE=cluster
. "$(dirname "$0")/harness.sh"

# whatever the workers left mounted under $TMP is unmounted, its daemon stopped
sweep() {
	local m
	for m in $(awk -v t="$TMP/" 'index($2, t) == 1 { print $2 }' /proc/self/mounts); do
		p=$(daemon_pid "$m") && kill -9 "$p" 2>/dev/null
		T fusermount3 -u "$m" 2>/dev/null || T fusermount3 -uz "$m" 2>/dev/null
	done
}
trap 'sweep; cleanup' EXIT

if ! "$PY" -c 'import distributed, dask.dataframe, numpy' 2>/dev/null; then
	bad deps "python3-distributed, python3-dask or python3-numpy is not installed"
	summary
	exit 1
fi
if ! mnt "$TMP/single" "$TMP/one"; then
	bad mount "$(tail -c 300 "$TMP/daemon.log")"
	summary
	exit 1
fi
tally < <(timeout -k 5 240 "$PY" tests/test_cluster.py "$VECFS" "$TMP/one" "$TMP" ../shared/data 2>"$TMP/stderr")
wait $! || bad test_cluster "exit status $?: $(tail -c 600 "$TMP/stderr")"
T fusermount3 -u "$TMP/one"
summary
