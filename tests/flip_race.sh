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
# length; FLIP_SEED repeats a run's choices.  `make flip-soak` runs it for
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
INSPECT=$(dirname "$VECFS")/vecfs-inspect
KEEP_LOG=$(dirname "$VECFS")/flip-race-daemon.log
echo "flip-race: $SECS s, rounds of $ROUND s, seed $SEED"

san_env=()
for v in ASAN_OPTIONS UBSAN_OPTIONS TSAN_OPTIONS; do
	[[ -n ${!v:-} ]] && san_env+=("$v=${!v}:log_path=stderr")
done
SAN_PATTERN='WARNING: ThreadSanitizer|ERROR: AddressSanitizer|ERROR: LeakSanitizer|runtime error:|SUMMARY: [A-Za-z]*Sanitizer'

S=$TMP/store
M=$TMP/mnt
mkdir -p "$M"
MOUNTS+=("$M")
env "${san_env[@]}" "$VECFS" -f "$S" "$M" </dev/null >"$TMP/daemon.out" 2>"$TMP/daemon.err" &
DPID=$!
for ((i = 0; i < 300; i++)); do
	is_mounted "$M" && break
	kill -0 "$DPID" 2>/dev/null || break
	sleep 0.1
done
if ! is_mounted "$M"; then
	bad mount "$(tail -c 300 "$TMP/daemon.err")"
	summary
	exit 1
fi
ok mount

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
T fusermount3 -u "$M" 2>/dev/null || { sleep 1; T fusermount3 -u "$M"; }
rc=124
for ((i = 0; i < 600; i++)); do
	kill -0 "$DPID" 2>/dev/null || { wait "$DPID"; rc=$?; break; }
	sleep 0.1
done
check daemon_exit_0 test "$rc" -eq 0
cp "$TMP/daemon.err" "$KEEP_LOG" 2>/dev/null
if grep -qE "$SAN_PATTERN" "$TMP/daemon.err"; then
	bad no_sanitizer_report "$(grep -cE 'WARNING: ThreadSanitizer|ERROR: [A-Za-z]*Sanitizer|runtime error:' "$TMP/daemon.err") reports, in $KEEP_LOG"
	grep -E 'SUMMARY: |runtime error:' "$TMP/daemon.err" | sort | uniq -c | sort -rn | head -20
else
	ok no_sanitizer_report
fi
out=$(T "$INSPECT" "$S" verify 2>&1)
check inspect_verify test "${out:0:10}" == "verify: ok"
[[ ${out:0:10} == "verify: ok" ]] || echo "$out" | head -5
summary
