#!/usr/bin/env bash
# Run cmocka test binaries, UNIT_JOBS of them at a time (default 1); print
# each one's output and time, in the order given, and a closing line
# `unit: N passed, N failed` summed over all of them.
pass=0; fail=0; bad=""
jobs=${UNIT_JOBS:-1}
now() { date +%s.%N; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
run() { # I TEST: its output, exit status and time into $out/I.*
	local t0
	t0=$(now)
	"$2" >"$out/$1.out" 2>&1
	echo $? >"$out/$1.rc"
	awk -v a="$t0" -v b="$(now)" 'BEGIN { printf "%.2f", b - a }' >"$out/$1.time"
}
i=0
for t in "$@"; do
	while (($(jobs -rp | wc -l) >= jobs)); do
		wait -n
	done
	run $i "$t" &
	i=$((i + 1))
done
wait
i=0
for t in "$@"; do
	cat "$out/$i.out"
	echo "-- ${t##*/}: $(cat "$out/$i.time") s"
	rc=$(cat "$out/$i.rc")
	p=$(sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' "$out/$i.out" | tail -1)
	f=$(sed -n 's/^\[  FAILED  \] \([0-9]*\) test.*/\1/p' "$out/$i.out" | tail -1)
	pass=$((pass + ${p:-0})); fail=$((fail + ${f:-0}))
	if [ "$rc" -ne 0 ] && [ -z "$f" ]; then fail=$((fail + 1)); bad="$bad $t(rc=$rc)"; fi
	i=$((i + 1))
done
[ -n "$bad" ] && echo "crashed or failed to run:$bad"
echo "unit: $pass passed, $fail failed"
[ $fail -eq 0 ]
