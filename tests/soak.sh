#!/usr/bin/env bash
# Crash soak: tests/crash_test.sh again and again, each run a fresh store,
# a new seed and CRASH_ROUNDS kill -9 cycles (ingests, deletes, compact,
# rebalance, build with its flip of `active`, verify, all under way when the
# daemon is killed), until SOAK_CYCLES cycles (default 1000) have run or
# SOAK_SECONDS (default: no limit) have passed.  Each cycle checks the store
# as the crash left it (vecfs-inspect verify), then after a remount every
# acknowledged ingest and delete, and nothing unacknowledged half there.
# Prints each run's summary and seed, then `cycles: N, runs: N` and
# `soak: N passed, N failed` (a failed check is a loss or a damaged store).
#
# Usage: bash tests/soak.sh [path/to/vecfs]   (make soak)
VECFS=${1:-build/vecfs}
CYCLES=${SOAK_CYCLES:-1000}
LIMIT=${SOAK_SECONDS:-0}
export CRASH_ROUNDS=${CRASH_ROUNDS:-5}
start=$SECONDS
pass=0 fail=0 cycles=0 runs=0 bad_seeds=""
while ((cycles < CYCLES)); do
	((LIMIT > 0 && SECONDS - start >= LIMIT)) && break
	seed=$(( (RANDOM << 15) | RANDOM ))
	out=$(CRASH_SEED=$seed bash "$(dirname "$0")/crash_test.sh" "$VECFS" 2>&1)
	line=$(grep -E '^crash: [0-9]+ passed, [0-9]+ failed' <<<"$out" | tail -1)
	p=$(sed -n 's/^crash: \([0-9]*\) passed.*/\1/p' <<<"$line")
	f=$(sed -n 's/.* \([0-9]*\) failed.*/\1/p' <<<"$line")
	[[ -z $line ]] && { p=0; f=1; }
	done_rounds=$(grep -c '^round [0-9]*: killed' <<<"$out")
	runs=$((runs + 1)); cycles=$((cycles + done_rounds))
	pass=$((pass + p)); fail=$((fail + f))
	echo "run $runs (CRASH_SEED=$seed): $done_rounds cycles, ${line:-no summary}; $((SECONDS - start)) s"
	if ((f > 0)); then
		bad_seeds="$bad_seeds $seed"
		grep -E '^FAIL' <<<"$out" | head -20
	fi
done
echo "cycles: $cycles, runs: $runs, $((SECONDS - start)) s${bad_seeds:+; failing seeds:$bad_seeds}"
echo "soak: $pass passed, $fail failed"
((fail == 0))
