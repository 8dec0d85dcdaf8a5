#!/usr/bin/env bash
# Run test suites one after another, each as `$MAKE TARGET` (so a suite sees
# the variables make was given, BUILD among them), and show their output as
# it comes.  After each: `== TARGET: S s`.  A suite's count is the last
# `N passed, N failed` it prints (`unit: 3 passed, 0 failed` and the
# conformance suite's bare line alike); a suite that exits non-zero with no
# failure counted, or prints no count, counts one failure.
# With SAN_LOGS set (a directory the sanitizers' log_path points into), a
# report that appears there during a suite is printed and counts one failure.
# The last line is `total: N passed, N failed`; exit status 1 if any failed.
#
# Usage: MAKE=make bash tests/run-suite.sh TARGET...   (from the project root)

MAKE=${MAKE:-make}
pass=0 fail=0 failed=()
now() { date +%s.%N; }
san_reports() { [[ -n ${SAN_LOGS:-} ]] && find "$SAN_LOGS" -type f 2>/dev/null | sort; }
log=$(mktemp "${TMPDIR:-/tmp}/vecfs-suite.XXXXXX")
trap 'rm -f "$log"' EXIT

for t in "$@"; do
	before=$(san_reports)
	t0=$(now)
	$MAKE --no-print-directory -s "$t" 2>&1 | tee "$log"
	rc=${PIPESTATUS[0]}
	secs=$(awk -v a="$t0" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }')
	line=$(grep -E '(^|: )[0-9]+ passed, [0-9]+ failed$' "$log" | tail -1)
	p=0 f=0
	if [[ $line =~ ([0-9]+)\ passed,\ ([0-9]+)\ failed$ ]]; then
		p=${BASH_REMATCH[1]} f=${BASH_REMATCH[2]}
	fi
	[[ $rc -ne 0 && $f -eq 0 ]] && f=1
	[[ -z $line && $f -eq 0 ]] && f=1
	new=$(comm -13 <(printf '%s\n' "$before") <(san_reports) | grep .)
	if [[ -n $new ]]; then
		for r in $new; do
			echo "sanitizer report $r:"
			head -n 60 "$r"
		done
		f=$((f + 1))
	fi
	echo "== $t: $secs s"
	pass=$((pass + p)) fail=$((fail + f))
	[[ $f -ne 0 ]] && failed+=("$t")
done
[[ ${#failed[@]} -ne 0 ]] && echo "failed suites: ${failed[*]}"
echo "total: $pass passed, $fail failed"
[[ $fail -eq 0 ]]
