#!/bin/sh
# Run cmocka test binaries one after another; print each one's output and
# time, and a closing line `unit: N passed, N failed` summed over all of them.
pass=0; fail=0; bad=""
now() { date +%s.%N; }
for t in "$@"; do
	t0=$(now)
	out=$("$t" 2>&1); rc=$?
	printf '%s\n' "$out"
	echo "-- ${t##*/}: $(awk -v a="$t0" -v b="$(now)" 'BEGIN { printf "%.2f", b - a }') s"
	p=$(printf '%s\n' "$out" | sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' | tail -1)
	f=$(printf '%s\n' "$out" | sed -n 's/^\[  FAILED  \] \([0-9]*\) test.*/\1/p' | tail -1)
	pass=$((pass + ${p:-0})); fail=$((fail + ${f:-0}))
	if [ $rc -ne 0 ] && [ -z "$f" ]; then fail=$((fail + 1)); bad="$bad $t(rc=$rc)"; fi
done
[ -n "$bad" ] && echo "crashed or failed to run:$bad"
echo "unit: $pass passed, $fail failed"
[ $fail -eq 0 ]
