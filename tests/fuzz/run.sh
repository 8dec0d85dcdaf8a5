#!/usr/bin/env bash
# Run fuzz targets: run.sh BUILD TARGET... runs each for FUZZ_SECONDS on
# BUILD/corpus/TARGET (new inputs go there) seeded with tests/fuzz/corpus/TARGET;
# run.sh --crashes BUILD TARGET... runs each once over tests/fuzz/crashes/TARGET.
# A target passes when it ran without a crash, leak or timeout.  Logs and
# crashing inputs go to BUILD/fuzz-logs and BUILD/fuzz-crashes; the last
# line is `fuzz: N passed, N failed`.
set -u
crashes=0
[ "${1:-}" = --crashes ] && { crashes=1; shift; }
build=$1
shift
here=$(dirname "$0")
secs=${FUZZ_SECONDS:-60}
pass=0
fail=0
mkdir -p "$build/fuzz-logs" "$build/tmp"
# the targets' temporary stores: under the build directory, apart from /tmp
TMPDIR=$(cd "$build/tmp" && pwd)
export TMPDIR
for t in "$@"; do
	log=$build/fuzz-logs/$t.log
	[ $crashes = 1 ] && log=$build/fuzz-logs/$t.crashes.log
	if [ $crashes = 1 ]; then
		files=()
		[ -d "$here/crashes/$t" ] && files=("$here/crashes/$t"/*)
		[ ${#files[@]} = 0 ] && continue
		"$build/fuzz/$t" -close_fd_mask=2 "${files[@]}" >"$log" 2>&1
		rc=$?
		what="${#files[@]} saved inputs"
	else
		mkdir -p "$build/corpus/$t" "$build/fuzz-crashes/$t"
		start=$(date +%s)
		"$build/fuzz/$t" -max_total_time="$secs" -timeout=20 -rss_limit_mb=2048 \
			-close_fd_mask=2 -print_final_stats=1 \
			-artifact_prefix="$build/fuzz-crashes/$t/" \
			"$build/corpus/$t" "$here/corpus/$t" >"$log" 2>&1
		rc=$?
		what="$(($(date +%s) - start)) s, $(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo '?') runs"
	fi
	if [ $rc = 0 ]; then
		pass=$((pass + 1))
		echo "fuzz $t: ok ($what)"
	else
		fail=$((fail + 1))
		echo "fuzz $t: FAILED ($what, exit $rc; see $log)"
		grep -m1 -E 'ERROR: |runtime error|==ERROR' "$log" | sed 's/^/  /'
	fi
done
echo "fuzz: $pass passed, $fail failed"
[ $fail = 0 ]
