#!/usr/bin/env bash
# Upserts racing with flips of generations/active (tests/flip_race.py): a
# fresh store mounted with the daemon in the foreground, two generations
# built over 10,000 csv rows, then rounds of csv ingests, jsonl upserts and
# deletes of 50 keys, `ln -s` + `mv -T` flips of generations/active every
# 20 ms and compact/rebalance/build on ctl, with the daemon's own
# compaction (compact_deltas 16) and rebalance (rebalance_ratio 2) on.
# After every round: `verify` on ctl, ANN results with no key twice and no
# key that is not live, exact results equal to a brute force over the rows
# acknowledged.  Afterwards the mount comes down cleanly, the daemon exits
# 0 having printed no sanitizer report, and `vecfs-inspect STORE verify`
# passes.
#
# FLIP_SECONDS (default 24) is how long it runs, FLIP_ROUND (4) a round's
# length, FLIP_SYNC_STEP (256) the changes a compaction step brings into a
# generation that lacks them (VECFS_SYNC_STEP); FLIP_SEED repeats a run's choices.  `make flip-soak` runs it for
# 30 minutes, `make flip-tsan` for 5 under ThreadSanitizer.  The last line
# is `flip-race: N passed, N failed`.
#
# Usage: bash tests/flip_race.sh [path/to/vecfs]   (from the project root)

VECFS=$(readlink -f "${1:-build/vecfs}")
SUITE=flip-race
. "$(dirname "$0")/harness.sh"
SECS=${FLIP_SECONDS:-24}
ROUND=${FLIP_ROUND:-4}
SEED=${FLIP_SEED:-$RANDOM}
KEEP_LOG=$(dirname "$VECFS")/flip-race-daemon.log
echo "flip-race: $SECS s, rounds of $ROUND s, seed $SEED"

S=$TMP/store
M=$TMP/mnt
# a generation that lacks changes takes them in steps of FLIP_SYNC_STEP
# (256) changes, not thousands: many steps, with writes between them
FG_ENV=("VECFS_SYNC_STEP=${FLIP_SYNC_STEP:-256}")
if ! fg_mount "$S" "$M"; then
	summary
	exit 1
fi

put - "$M/config" >/dev/null <<<"dim = 8
auto_build = 0
nlist = 16
compact_deltas = 16
keep_generations = 3
rebalance_ratio = 2"
cp tests/flip_race.py "$TMP/flip_race.py"
timeout -k 5 $((SECS * 3 + 300)) "$PY" "$TMP/flip_race.py" "$M" "$SECS" "$ROUND" "$SEED" \
	>"$TMP/driver.out" 2>&1
rc=$?
cat "$TMP/driver.out" | grep -v '^round ' | head -40
grep '^round ' "$TMP/driver.out" | tail -3
line=$(grep '^summary:' "$TMP/driver.out")
check rounds_clean test "$rc" -eq 0 -a -n "$line"

if is_mounted "$M" && kill -0 "$DPID" 2>/dev/null; then
	ok still_mounted
	echo "stats: $(T cat "$M/stats" | grep -E '^(records|generations|active|compactions|rebalances) ' | tr '\n' ' ')"
else
	bad still_mounted "the daemon is gone: $(tail -c 300 "$TMP/daemon.err")"
fi
fg_finish_verified "$KEEP_LOG" "$S"
summary
