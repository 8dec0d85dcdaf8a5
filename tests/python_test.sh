#!/usr/bin/env bash
# Tests of the Python module tools/python/vecfs: tests/test_python.py
# against a fresh mount, once with numpy and once with numpy hidden, then
# the README's install line in a fresh virtual environment (no index) and
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
# NAME: the README's block after <!-- NAME.py as $TMP/NAME.py, the block
# after it as $TMP/NAME.want, then a fresh mount at $TMP/mnt-NAME
readme_py() {
	awk '/<!-- '"$1"'.py/ {f = 1; next} f && /^```/ {n++; if (n == 2 || n == 4) f = (n == 2); next}
	     f && n == 1 {print > "'"$TMP/$1"'.py"} f && n == 3 {print > "'"$TMP/$1"'.want"}
	     n >= 4 {exit}' README.md
	if ! mnt "$TMP/store-$1" "$TMP/mnt-$1"; then
		bad "mount_$1" "$(tail -c 300 "$TMP/daemon.log")"
		return 1
	fi
}
tour() {
	readme_py tour || return
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

# a README program with the standard library alone, run on a fresh mount
# and its output compared with the one the README shows
readme_run() {
	readme_py "$1" || return
	check "$1_found" test -s "$TMP/$1.py" -a -s "$TMP/$1.want"
	MNT="$TMP/mnt-$1" timeout 60 "$PY" "$TMP/$1.py" >"$TMP/$1.got" 2>&1
	check "$1_output" cmp "$TMP/$1.want" "$TMP/$1.got"
	T fusermount3 -u "$TMP/mnt-$1"
}
# the loop over queries: one synchronous write of in a query, out read at
# offset 0
readme_run loop
# the query call: one ioctl() of in a query, the same results
readme_run call

# the README's install line, in a fresh virtual environment (its own
# site-packages only) with no index: the module is built with the standard
# library, then imported there and used on a mount
venv() {
	awk '/<!-- install:/ {f = 1; next} f && /^```/ {n++; if (n == 2) exit; next} f && n == 1' README.md >"$TMP/install.sh"
	check install_found grep -q 'pip install' "$TMP/install.sh"
	sed -i "s#~/vecfs-env#$TMP/venv#g" "$TMP/install.sh"
	PATH=$(dirname "$PY"):$PATH T bash -e "$TMP/install.sh" >"$TMP/venv.log" 2>&1
	check venv_install test -f "$TMP/venv/bin/python" -a -z "$(find "$TMP/venv" -name 'numpy' -type d)" \
		-a -n "$(find "$TMP/venv" -path '*site-packages/vecfs/__init__.py')"
	if ! mnt "$TMP/store-venv" "$TMP/mnt-venv"; then
		bad mount_venv "$(tail -c 300 "$TMP/daemon.log")"
		return
	fi
	check venv_add_search test "$(cd "$TMP" && T "$TMP/venv/bin/python" -c '
import sys, vecfs
ix = vecfs.Index(sys.argv[1])
ix.add([[1, 0, 0], [0, 1, 0], [0, 0, 1]], keys=["x", "y", "z"])
k, d = ix.search([0, 0.9, 0.1], k=2)
print(vecfs.__file__.startswith(sys.prefix), vecfs.np, list(k), [round(x, 4) for x in d])
ix.close()' "$TMP/mnt-venv" 2>&1)" == "True None ['y', 'z'] [0.02, 1.62]"
	T fusermount3 -u "$TMP/mnt-venv"
}
venv
grep -q 'Successfully installed' "$TMP/venv.log" || tail -5 "$TMP/venv.log"

# pip builds and installs the module into a directory, offline, as well
# with build isolation as without (then Debian's setuptools is at hand)
cp -r tools/python "$TMP/src"
T "$PY" -m pip install -q --no-index --target "$TMP/site" "$TMP/src" >"$TMP/pip.log" 2>&1
check pip_install test -f "$TMP/site/vecfs/__init__.py"
check pip_import test "$(cd "$TMP" && PYTHONPATH="$TMP/site" "$PY" -c 'import vecfs; print(vecfs.__file__, vecfs.__version__)')" \
	== "$TMP/site/vecfs/__init__.py 0.1.0"
T "$PY" -m pip install -q --no-build-isolation --no-index --target "$TMP/site2" "$TMP/src" >"$TMP/pip.log" 2>&1
check pip_install_no_isolation test -f "$TMP/site2/vecfs/__init__.py"
summary
