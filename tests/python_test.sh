#!/usr/bin/env bash
# Tests of the Python module tools/python/vecfs: tests/test_python.py
# against a fresh mount, once with numpy and once with numpy hidden, then
# `pip install` of tools/python into a temporary directory.
# The last line is `python: N passed, N failed`.
#
# Usage: bash tests/python_test.sh [path/to/vecfs]   (from the project root)

VECFS=$(readlink -f "${1:-build/vecfs}")
SUITE=python
. "$(dirname "$0")/harness.sh"

run() { # NAME FLAGS...: tests/test_python.py on a fresh mount, its lines counted
	local name=$1
	shift
	if ! mnt "$TMP/store-$name" "$TMP/mnt-$name"; then
		bad "mount_$name" "$(tail -c 300 "$TMP/daemon.log")"
		return
	fi
	tally < <(timeout -k 5 300 "$PY" tests/test_python.py "$TMP/mnt-$name" "$@" 2>&1)
	wait $! || bad "test_python_$name" "exit status $?"
	T fusermount3 -u "$TMP/mnt-$name"
}

if "$PY" -c 'import numpy' 2>/dev/null; then
	run numpy
else
	bad numpy "python3-numpy is not installed"
fi
run nonumpy --no-numpy

# the README's tour in Python: run as written (on this mount), the output as shown
tour() {
	awk '/<!-- tour.py/ {f = 1; next} f && /^```/ {n++; if (n == 2 || n == 4) f = (n == 2); next}
	     f && n == 1 {print > "'"$TMP"'/tour.py"} f && n == 3 {print > "'"$TMP"'/tour.want"}
	     n >= 4 {exit}' README.md
	if ! mnt "$TMP/store-tour" "$TMP/mnt-tour"; then
		bad mount_tour "$(tail -c 300 "$TMP/daemon.log")"
		return
	fi
	sed -i "s#/tmp/vecfs#$TMP/mnt-tour#" "$TMP/tour.py"
	check tour_found test -s "$TMP/tour.py" -a -s "$TMP/tour.want"
	check tour_lines test "$(wc -l <"$TMP/tour.py")" -le 10
	PYTHONPATH=tools/python timeout 60 "$PY" "$TMP/tour.py" >"$TMP/tour.got" 2>&1
	check tour_output cmp "$TMP/tour.want" "$TMP/tour.got"
	T fusermount3 -u "$TMP/mnt-tour"
}
if "$PY" -c 'import numpy' 2>/dev/null; then
	tour
fi

# pip builds and installs the module with Debian's setuptools, offline
cp -r tools/python "$TMP/src"
T "$PY" -m pip install -q --no-build-isolation --no-index --target "$TMP/site" "$TMP/src" >"$TMP/pip.log" 2>&1
check pip_install test -f "$TMP/site/vecfs/__init__.py"
check pip_import test "$(cd "$TMP" && PYTHONPATH="$TMP/site" "$PY" -c 'import vecfs; print(vecfs.__file__, vecfs.__version__)')" \
	== "$TMP/site/vecfs/__init__.py 0.1.0"
summary
