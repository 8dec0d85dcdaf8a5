# tests/harness.sh - what the mount-level test scripts share, sourced by
# them: PASS/FAIL counting, `timeout` around every operation on a mount,
# an EXIT trap that unmounts whatever is still mounted, mounting, finding
# the daemon, and a copy tool that reports the failing call and errno.
#
# Before sourcing: VECFS (the daemon, absolute path) and SUITE (the name on
# the last line, `SUITE: N passed, N failed`).  BG may list background
# processes that the EXIT trap stops.  After: TMP (removed at exit), PY.

PY=/usr/bin/python3
[[ -x $PY ]] || PY=$(command -v python3)
export LC_ALL=C
PASS=0
FAIL=0
MOUNTS=()
BG=()
TMP=$(mktemp -d "${TMPDIR:-/tmp}/vecfs-$SUITE-test.XXXXXX")

T() { timeout -k 5 60 "$@"; }
ok() { echo "PASS $1"; PASS=$((PASS + 1)); }
bad() { echo "FAIL $1: ${2:-}"; FAIL=$((FAIL + 1)); }
check() { local n=$1; shift; if "$@"; then ok "$n"; else bad "$n" "$*"; fi; }
is_mounted() { awk -v m="$1" '$2 == m { f = 1 } END { exit !f }' /proc/self/mounts; }

cleanup() {
	local m p
	for p in "${BG[@]}"; do kill -TERM "$p" 2>/dev/null; done
	for m in "${MOUNTS[@]}"; do
		if is_mounted "$m"; then
			T fusermount3 -u "$m" 2>/dev/null || { sleep 1; T fusermount3 -u "$m" 2>/dev/null; } ||
				T fusermount3 -uz "$m" 2>/dev/null
		fi
	done
	if grep -qF " $TMP/" /proc/self/mounts; then
		echo "warning: mounts left under $TMP" >&2
	else
		rm -rf "$TMP"
	fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

summary() {
	echo "$SUITE: $PASS passed, $FAIL failed"
	[[ $FAIL -eq 0 ]]
}

if [[ ! -x $VECFS ]]; then
	echo "$SUITE tests: $VECFS is not built"
	FAIL=1
	summary
	exit 1
fi
if [[ ! -c /dev/fuse ]] || ! command -v fusermount3 >/dev/null; then
	echo "SKIP $SUITE tests: no /dev/fuse or fusermount3 on this machine"
	summary
	exit 0
fi

daemon_pid() { # MNT: the daemon serving MNT
	local p
	for p in /proc/[0-9]*; do
		[[ $(readlink -f "$p/exe" 2>/dev/null) == "$VECFS" ]] || continue
		tr '\0' '\n' <"$p/cmdline" 2>/dev/null | grep -qxF "$1" && { basename "$p"; return 0; }
	done
	return 1
}

mnt() { # STORE MNT [options]: mount, 0 once usable
	local s=$1 m=$2
	shift 2
	mkdir -p "$m"
	MOUNTS+=("$m")
	T "$VECFS" "$@" "$s" "$m" >>"$TMP/daemon.log" 2>&1 </dev/null || return 1
	is_mounted "$m"
}

tally() { # the lines of a test program on stdin: shown, PASS and FAIL lines counted
	local line
	while IFS= read -r line; do
		echo "$line"
		case $line in
		PASS\ *) PASS=$((PASS + 1)) ;;
		FAIL\ *) FAIL=$((FAIL + 1)) ;;
		esac
	done
}

# A daemon in the foreground (-f), its stderr kept, for the suites that look
# for sanitizer reports in it.  fg_mount STORE MNT: mounts, sets DPID, 0 once
# mounted (else one failed check `mount`); FG_ENV (an array) adds to its
# environment.  fg_finish KEEP_LOG: unmounts,
# checks the daemon exits 0 with no sanitizer report in its stderr (kept in
# KEEP_LOG).
SAN_PATTERN='WARNING: ThreadSanitizer|ERROR: AddressSanitizer|ERROR: LeakSanitizer|runtime error:|SUMMARY: [A-Za-z]*Sanitizer'
fg_mount() {
	local s=$1 m=$2 v i san_env=()
	[[ -n ${FG_ENV+x} ]] || FG_ENV=()
	# a sanitizer's report goes to the daemon's stderr, whatever log_path
	# the environment names for the other programs
	for v in ASAN_OPTIONS UBSAN_OPTIONS TSAN_OPTIONS; do
		[[ -n ${!v:-} ]] && san_env+=("$v=${!v}:log_path=stderr")
	done
	mkdir -p "$m"
	MOUNTS+=("$m")
	env "${san_env[@]}" "${FG_ENV[@]}" "$VECFS" -f "$s" "$m" </dev/null >"$TMP/daemon.out" 2>"$TMP/daemon.err" &
	DPID=$!
	for ((i = 0; i < 300; i++)); do
		is_mounted "$m" && break
		kill -0 "$DPID" 2>/dev/null || break
		sleep 0.1
	done
	if ! is_mounted "$m"; then
		bad mount "$(tail -c 300 "$TMP/daemon.err")"
		return 1
	fi
	ok mount
}

fg_finish() {
	local m=${MOUNTS[-1]} rc=124 i
	T fusermount3 -u "$m" 2>/dev/null || { sleep 1; T fusermount3 -u "$m"; }
	check umount_clean bash -c '! awk -v m="$1" "\$2 == m { f = 1 } END { exit !f }" /proc/self/mounts' _ "$m"
	for ((i = 0; i < 600; i++)); do
		kill -0 "$DPID" 2>/dev/null || { wait "$DPID"; rc=$?; break; }
		sleep 0.1
	done
	check daemon_exit_0 test "$rc" -eq 0
	cp "$TMP/daemon.err" "$1" 2>/dev/null
	if grep -qE "$SAN_PATTERN" "$TMP/daemon.err"; then
		bad no_sanitizer_report "$(grep -cE 'WARNING: ThreadSanitizer|ERROR: [A-Za-z]*Sanitizer|runtime error:' "$TMP/daemon.err") reports, in $1"
		grep -E 'SUMMARY: |runtime error:' "$TMP/daemon.err" | sort | uniq -c | sort -rn | head -20
	else
		ok no_sanitizer_report
	fi
}

# fg_finish KEEP_LOG, then STORE as the daemon left it checked offline
# (vecfs-inspect verify, next to VECFS)
fg_finish_verified() { # KEEP_LOG STORE
	local out
	fg_finish "$1"
	out=$(T "$(dirname "$VECFS")/vecfs-inspect" "$2" verify 2>&1)
	check inspect_verify test "${out:0:10}" == "verify: ok"
	[[ ${out:0:10} == "verify: ok" ]] || echo "$out" | head -5
}

kv() { awk -v k="$1" -F' *= *' '$1 == k { print $2; f = 1; exit } END { exit !f }'; }
stat_kv() { T cat "$M/stats" | kv "$1"; }

# fileio.py, for the test scripts' Python: write_file(path, parts, flags)
# opens, writes each part with one os.write (a callable part is called with
# the descriptor instead) and closes; it returns None, or (the OSError, the
# stage that failed: open, write or close)
cat >"$TMP/fileio.py" <<'PY'
import os
def write_file(path, parts, flags=os.O_WRONLY | os.O_CREAT | os.O_TRUNC):
    stage, fd = 'open', None
    try:
        fd = os.open(path, flags, 0o644)
        stage = 'write'
        for part in parts:
            if callable(part):
                part(fd)
            elif part:
                os.write(fd, part)
        stage = 'close'
        f, fd = fd, None
        os.close(f)
        return None
    except OSError as e:
        if fd is not None:
            try:
                os.close(fd)
            except OSError:
                pass
        return e, stage
PY

# put SRC|- DEST [chunk]: copy with os.write; prints OK or ERR <errno> <stage>
cat >"$TMP/put.py" <<'PY'
import errno, os, sys
sys.path.insert(0, os.path.dirname(sys.argv[0]))
from fileio import write_file
src, dst = sys.argv[1], sys.argv[2]
chunk = int(sys.argv[3]) if len(sys.argv) > 3 else 65536
data = sys.stdin.buffer.read() if src == '-' else open(src, 'rb').read()
failed = write_file(dst, [data[i:i + chunk] for i in range(0, len(data), chunk)])
if failed:
    e, stage = failed
    print('ERR %s %s' % (errno.errorcode.get(e.errno, e.errno), stage))
else:
    print('OK')
PY
put() { T "$PY" "$TMP/put.py" "$@"; }
