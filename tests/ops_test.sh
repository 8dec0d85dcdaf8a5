#!/usr/bin/env bash
# Operations tests of build/vecfs: exit statuses and --help, the source
# mount shows (fsname), --log, the mount helper forms of an fstab line
# (mount.fuse3, mount -t fuse.vecfs, mount -t fuse PROG#STORE) and the
# systemd unit tools/vecfs@.service (systemd-analyze verify, and its
# ExecStart and ExecStopPost lines run by hand: systemd need not be PID 1).
# The last line is `ops: N passed, N failed`.
#
# Usage: bash tests/ops_test.sh [path/to/vecfs]   (from the project root)

VECFS=$(readlink -f "${1:-build/vecfs}")
SUITE=ops
ROOT=$(cd "$(dirname "$0")/.." && pwd)
. "$(dirname "$0")/harness.sh"

# run CMD...: its exit status in RC, stdout and stderr in OUT
run() { OUT=$(T "$@" 2>&1 </dev/null); RC=$?; }
wait_gone() { # PID: until it has exited (5 s)
	local i
	for ((i = 0; i < 50; i++)); do kill -0 "$1" 2>/dev/null || return 0; sleep 0.1; done
	return 1
}
umnt() { # MNT: unmount, wait for its daemon
	local pid
	pid=$(daemon_pid "$1")
	T fusermount3 -u "$1" || return 1
	[[ -z $pid ]] || wait_gone "$pid"
	! is_mounted "$1"
}
source_of() { awk -v m="$1" '$2 == m { print $1 }' /proc/self/mounts; }
type_of() { awk -v m="$1" '$2 == m { print $3 }' /proc/self/mounts; }
STAMP='^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z '

S=$TMP/store
M=$TMP/mnt
mkdir -p "$M"

# ---------------------------------------------------------------- exit statuses
run "$VECFS" --help
check help_exit_0 test "$RC" -eq 0
for code in 0 1 2 3 4; do
	check "help_documents_exit_$code" grep -qE "^ +$code +[a-zA-Z]" <<<"$OUT"
done
check help_documents_log grep -q -- '--log FILE' <<<"$OUT"
run "$VECFS" "$S"
check exit_2_missing_mountpoint test "$RC" -eq 2
run "$VECFS" -o no_such_option "$S" "$M"
check exit_2_unknown_option test "$RC" -eq 2
check unknown_option_not_mounted sh -c "! awk -v m='$M' '\$2 == m { f = 1 } END { exit !f }' /proc/self/mounts"
# options are checked before STORE is made
run "$VECFS" -o no_such_option "$TMP/newstore" "$M"
check exit_2_unknown_option_new_store test "$RC" -eq 2
check unknown_option_no_store test ! -e "$TMP/newstore"
run "$VECFS" -f -o no_such_option "$TMP/newstore2" "$M"
check exit_2_unknown_option_foreground test "$RC" -eq 2
check unknown_option_foreground_no_store test ! -e "$TMP/newstore2"
run "$VECFS" -o max_sessions=many "$TMP/newstore3" "$M"
check exit_2_bad_value test "$RC" -eq 2
check bad_value_no_store test ! -e "$TMP/newstore3"
# /dev/fuse missing or not to be opened (in a mount namespace of its own):
# exit 1, and the message says so
if command -v unshare >/dev/null && unshare -m true 2>/dev/null; then
	mkdir -p "$TMP/nodev"
	run unshare -m sh -c 'mount -t tmpfs none /dev && : >/dev/null && exec "$@"' sh "$VECFS" "$TMP/nodev/s" "$M"
	check exit_1_no_dev_fuse test "$RC" -eq 1
	check no_dev_fuse_message grep -qF "cannot mount on $M: /dev/fuse: No such file or directory (is the fuse module loaded, and may this user use it?)" <<<"$OUT"
	: >"$TMP/closed"
	chmod 000 "$TMP/closed"
	# root without CAP_DAC_OVERRIDE: a device node it may not open
	if command -v setpriv >/dev/null && [[ $(id -u) == 0 ]]; then
		run unshare -m sh -c 'mount --bind "$1" /dev/fuse && shift && exec setpriv --bounding-set -dac_override,-dac_read_search "$@"' \
			sh "$TMP/closed" "$VECFS" "$TMP/nodev/s" "$M"
		check exit_1_dev_fuse_denied test "$RC" -eq 1
		check dev_fuse_denied_message grep -qF "cannot mount on $M: /dev/fuse: Permission denied (is the fuse module loaded, and may this user use it?)" <<<"$OUT"
	else
		echo "SKIP dev_fuse_denied: needs root and setpriv"
	fi
	check no_dev_fuse_not_mounted sh -c "! awk -v m='$M' '\$2 == m { f = 1 } END { exit !f }' /proc/self/mounts"
else
	echo "SKIP no_dev_fuse: unshare -m is not available"
fi
run "$VECFS" --log "$TMP/no/such/dir/log" "$S" "$M"
check exit_2_log_unopenable test "$RC" -eq 2
check log_unopenable_message grep -q "cannot open the log file $TMP/no/such/dir/log" <<<"$OUT"
: >"$TMP/plainfile"
run "$VECFS" "$TMP/plainfile" "$M"
check exit_4_store_unopenable test "$RC" -eq 4
check store_unopenable_message grep -q "cannot open store" <<<"$OUT"
run "$VECFS" "$S" "$TMP/no-such-mnt"
check exit_1_missing_mountpoint test "$RC" -eq 1

if mnt "$S" "$M"; then
	ok mount
	check fsname_is_store test "$(source_of "$M")" == "$S"
	check type_fuse_vecfs test "$(type_of "$M")" == fuse.vecfs
	check df_shows_store sh -c "df '$M' | tail -n 1 | grep -q '^$S '"
	mkdir -p "$TMP/m2"
	MOUNTS+=("$TMP/m2")
	run "$VECFS" "$S" "$TMP/m2"
	check exit_3_store_in_use test "$RC" -eq 3
	run "$VECFS" "$TMP/other" "$M"
	check exit_1_already_mounted test "$RC" -eq 1
	check already_mounted_message grep -q "already a mount point" <<<"$OUT"
	pid=$(daemon_pid "$M")
	# named as the program is: pgrep, top and ps find it
	check process_name test "$(cat "/proc/$pid/comm")" == vecfs
	check pgrep_finds_daemon sh -c "pgrep -x vecfs | grep -qx '$pid'"
	kill -9 "$pid"
	wait_gone "$pid"
	run "$VECFS" "$S" "$M"
	check exit_1_stale test "$RC" -eq 1
	check stale_message grep -qF "the mount point is stale: run fusermount3 -u $M" <<<"$OUT"
	T fusermount3 -u "$M"
else
	bad mount "$(tail -c 300 "$TMP/daemon.log")"
fi

# fsname: given, or STORE with a comma (escaped for the mount options)
if mnt "$S" "$M" -o fsname=myindex; then
	check fsname_given test "$(source_of "$M")" == myindex
	umnt "$M"
else
	bad mount_fsname "$(tail -c 300 "$TMP/daemon.log")"
fi
if mnt "$TMP/st,ore" "$M"; then
	check fsname_with_comma test "$(source_of "$M")" == "$TMP/st,ore"
	umnt "$M"
else
	bad mount_comma_store "$(tail -c 300 "$TMP/daemon.log")"
fi

# ---------------------------------------------------------------- --log
L=$TMP/vecfs.log
echo 'an older line' >"$L"
if mnt "$S" "$M" --log "$L"; then
	pid=$(daemon_pid "$M")
	T sh -c "echo x > '$M/ingest/bad.zzz'" 2>/dev/null
	kill -s USR1 "$pid" # ignored: not a stop, not a reopen
	sleep 0.2
	check log_appends test "$(head -n 1 "$L")" == 'an older line'
	check log_start_line grep -qE "${STAMP}vecfs: serving $S on $M \(pid $pid\)\$" "$L"
	check log_errors_line grep -qE "${STAMP}ingest/bad.zzz: unknown file type" "$L"
	check log_same_as_errors sh -c "grep -qxF \"\$(grep bad.zzz '$M/errors')\" '$L'"
	# logrotate's copytruncate: lines go on at the start of the emptied file
	: >"$L"
	T sh -c "echo x > '$M/ingest/bad2.zzz'" 2>/dev/null
	check log_after_truncate grep -qE "${STAMP}ingest/bad2.zzz" "$L"
	check log_no_hole sh -c "! tr -d '\\n[:print:]' <'$L' | grep -q ."
	kill -s TERM "$pid"
	wait_gone "$pid"
	check log_signal_line grep -qE "${STAMP}vecfs: SIGTERM: unmounting $M\$" "$L"
	check log_stop_line grep -qE "${STAMP}vecfs: unmounted $M; exiting with status 0\$" "$L"
	check log_every_line_stamped sh -c "! grep -vE '$STAMP' '$L'"
else
	bad mount_log "$(tail -c 300 "$TMP/daemon.log")"
fi
if mnt "$S" "$M" -o log="$TMP/o.log"; then
	check log_option_o grep -qE "${STAMP}vecfs: serving $S on $M" "$TMP/o.log"
	# its lines name files and keys: a new log is the owner's only
	check log_created_0600 test "$(stat -c %a "$TMP/o.log")" == 600
	umnt "$M"
else
	bad mount_log_o "$(tail -c 300 "$TMP/daemon.log")"
fi
# a failure at start is logged too
mkdir -p "$TMP/m3"
run "$VECFS" --log "$TMP/fail.log" "$TMP/plainfile" "$TMP/m3"
check log_start_failure grep -qE "${STAMP}vecfs: cannot open store $TMP/plainfile" "$TMP/fail.log"

# ---------------------------------------------------------------- address space limit
# under `ulimit -v` (systemd's LimitAS=) of 1.5 GB the daemon starts, takes
# an ingest and answers a query: the store's map is sized for the store and
# grows as it does
MOUNTS+=("$M")
(ulimit -v 1500000 && exec timeout -k 5 60 "$VECFS" "$TMP/as" "$M") >>"$TMP/daemon.log" 2>&1 </dev/null
if is_mounted "$M"; then
	ok mount_ulimit_v
	$PY -c 'import random; random.seed(3); print("\n".join("k%d,%s" % (i, ",".join("%.3f" % random.random() for _ in range(16))) for i in range(3000)))' >"$TMP/as.csv"
	check ulimit_v_ingest T cp "$TMP/as.csv" "$M/ingest/as.csv"
	T mkdir "$M/query/q"
	head -n 1 "$TMP/as.csv" | cut -d, -f2- | tr , ' ' >"$TMP/as.q"
	check ulimit_v_query T cp "$TMP/as.q" "$M/query/q/in"
	check ulimit_v_answer sh -c "head -n 1 '$M/query/q/out' | grep -q '^k0	'"
	umnt "$M"
else
	bad mount_ulimit_v "$(tail -c 300 "$TMP/daemon.log")"
fi

# ---------------------------------------------------------------- fstab
# mount.fuse3, as mount(8) runs it for `STORE MNT fuse.vecfs OPTS`: the
# program is found on PATH under the type's name
mkdir -p "$TMP/bin"
ln -s "$VECFS" "$TMP/bin/vecfs"
MOUNTS+=("$M")
PATH="$TMP/bin:$PATH" T mount.fuse3 "$S" "$M" -t fuse.vecfs -o defaults,noatime,nofail,_netdev,x-systemd.automount >"$TMP/helper.log" 2>&1
check mount_fuse3_exit_0 test $? -eq 0
if is_mounted "$M"; then
	check mount_fuse3_source test "$(source_of "$M")" == "$S"
	check mount_fuse3_noatime grep -q noatime <<<"$(awk -v m="$M" '$2 == m { print $4 }' /proc/self/mounts)"
	check mount_fuse3_usable test -f "$M/README"
	pid=$(daemon_pid "$M")
	check umount_stops_daemon sh -c "umount '$M' && ! awk -v m='$M' '\$2 == m { f = 1 } END { exit !f }' /proc/self/mounts"
	check umount_daemon_exits wait_gone "$pid"
else
	bad mount_fuse3 "$(cat "$TMP/helper.log")"
fi
# the `PROG#STORE` source of type fuse: no PATH needed
T mount -t fuse "$VECFS#$S" "$M" -o defaults,_netdev >"$TMP/helper.log" 2>&1
check mount_t_fuse_prog_source test $? -eq 0
if is_mounted "$M"; then
	check mount_t_fuse_type test "$(type_of "$M")" == fuse.vecfs
	T umount "$M"
else
	bad mount_t_fuse "$(cat "$TMP/helper.log")"
fi
# mount -t fuse.NAME runs NAME from the standard PATH (/usr/local/bin is on
# it): a link there under a name of its own, removed at once
if [[ $(id -u) == 0 && -d /usr/local/sbin ]]; then
	name=vecfs-ops-test-$$
	ln -s "$VECFS" "/usr/local/sbin/$name"
	T mount -t "fuse.$name" "$S" "$M" -o defaults >"$TMP/helper.log" 2>&1
	rc=$?
	rm -f "/usr/local/sbin/$name"
	check mount_t_fuse_vecfs test $rc -eq 0
	if is_mounted "$M"; then
		check mount_t_type_is_vecfs test "$(type_of "$M")" == fuse.vecfs
		T umount "$M"
	else
		bad mount_t_fuse_vecfs_mounted "$(cat "$TMP/helper.log")"
	fi
else
	echo "SKIP mount -t fuse.vecfs through /usr/local/sbin: not root"
fi

# ---------------------------------------------------------------- vecfs-inspect search
# the same query through a mount's query/ID/in and `vecfs-inspect STORE search
# FILE` on the store unmounted: the same out, for text and fvecs input
INSPECT=$(dirname "$VECFS")/vecfs-inspect
Q=$TMP/qstore
"$PY" - "$TMP" <<'PY'
import random, struct, sys
r = random.Random(7)
tmp = sys.argv[1]
with open(tmp + '/base.csv', 'w') as f:
    for i in range(2000):
        f.write('k%d,' % i + ','.join('%.5f' % r.uniform(-1, 1) for _ in range(8)) + '\n')
qs = [[r.uniform(-1, 1) for _ in range(8)] for _ in range(3)]
with open(tmp + '/q.txt', 'w') as f:
    f.write('k=7, nprobe=2\n# comment\n\n')
    for q in qs:
        f.write('[' + ' '.join('%.5f' % x for x in q) + ']\n')
    f.write('refine=3\n')
with open(tmp + '/q.fvecs', 'wb') as f:
    for q in qs:
        f.write(struct.pack('<i8f', 8, *q))
PY
if mnt "$Q" "$M"; then
	put "$TMP/base.csv" "$M/ingest/base.csv" >/dev/null
	echo build | put - "$M/ctl" >/dev/null
	T mkdir "$M/query/s"
	put "$TMP/q.txt" "$M/query/s/in" >/dev/null
	T cat "$M/query/s/out" >"$TMP/out.text"
	put "$TMP/q.fvecs" "$M/query/s/in" >/dev/null
	T cat "$M/query/s/out" >"$TMP/out.fvecs"
	{ echo 'mode=exact k=4'; tail -n +4 "$TMP/q.txt"; } >"$TMP/q.exact"
	put "$TMP/q.exact" "$M/query/s/in" >/dev/null
	T cat "$M/query/s/out" >"$TMP/out.exact"
	{ echo 'k=4 filter={"tag": {"$ne": "x"}}'; tail -n +4 "$TMP/q.txt"; } >"$TMP/q.filter"
	put "$TMP/q.filter" "$M/query/s/in" >/dev/null
	T cat "$M/query/s/out" >"$TMP/out.filter"
	umnt "$M"
	check search_mount_out_nonempty test "$(grep -c . "$TMP/out.text")" -eq 21
	run "$INSPECT" "$Q" search "$TMP/q.txt"
	check search_text_as_out test "$RC" -eq 0 -a "$OUT" == "$(cat "$TMP/out.text")"
	run "$INSPECT" "$Q" search "$TMP/q.fvecs"
	check search_fvecs_as_out test "$RC" -eq 0 -a "$OUT" == "$(cat "$TMP/out.fvecs")"
	OUT=$(T "$INSPECT" "$Q" search - <"$TMP/q.exact" 2>&1)
	check search_stdin_exact test $? -eq 0 -a "$OUT" == "$(cat "$TMP/out.exact")"
	run "$INSPECT" "$Q" search "$TMP/q.filter"
	check search_filter_as_out test "$RC" -eq 0 -a "$OUT" == "$(cat "$TMP/out.filter")"
	run "$INSPECT" "$Q" search /dev/null
	check search_empty_exit_2 test "$RC" -eq 2
	check search_empty_message grep -q 'no query vector (empty)' <<<"$OUT"
	printf 'k=3\nk=0\n1 2 3 4 5 6 7 8\n' >"$TMP/qbad"
	run "$INSPECT" "$Q" search "$TMP/qbad"
	check search_bad_option test "$RC" -eq 2 -a "$OUT" == "vecfs-inspect: $TMP/qbad: line 2: bad value '0' for k (a positive integer)"
	printf '1 2 3\n' >"$TMP/qdim"
	run "$INSPECT" "$Q" search "$TMP/qdim"
	check search_wrong_dim test "$RC" -eq 2
	check search_wrong_dim_message grep -q 'dim 8' <<<"$OUT"
	run "$INSPECT" "$Q" search "$TMP/no-such-file"
	check search_missing_file test "$RC" -eq 2
	run "$INSPECT" "$Q" search
	check search_needs_file test "$RC" -eq 2
else
	bad mount_search "$(tail -c 300 "$TMP/daemon.log")"
fi

# ---------------------------------------------------------------- tools: progress, --plot
# progress on stderr: plain lines with the rate when it is no terminal, one
# line rewritten with a bar on a terminal (script(1) gives one); --plot
# draws a PNG with gnuplot, or says gnuplot is missing
BIN=$(dirname "$VECFS")
DS=$TMP/ds
T "$BIN/vecfs-data" --n 3000 --d 16 --clusters 10 --queries 40 --out "$DS" >/dev/null 2>&1
T "$BIN/vecfs-bench" "$DS" --nprobe 1,8 --recall 0.9 --plot "$TMP/plot.png" >"$TMP/bench.out" 2>"$TMP/bench.err"
check bench_plot_exit_0 test $? -eq 0
check bench_plot_png test "$(head -c 8 "$TMP/plot.png" 2>/dev/null | od -An -tx1 | tr -d ' \n')" == 89504e470d0a1a0a
check bench_plain_ingest_rate grep -qE '^ingest: 100% \([0-9,]+ rows/s\)$' "$TMP/bench.err"
check bench_plain_build_phases grep -qE '^build: (train|encode|calibrate|publish) [0-9]+%' "$TMP/bench.err"
check bench_plain_no_cr sh -c "! grep -q \$'\r' '$TMP/bench.err'"
if command -v script >/dev/null; then
	T script -qec "'$BIN/vecfs-bench' '$DS' --nprobe 4 --queries 10" /dev/null >"$TMP/tty.out" 2>&1
	check bench_tty_bar grep -qaE $'\ringest: \[#{20}\] 100%  [0-9,]+ rows/s' "$TMP/tty.out"
	check bench_tty_one_line test "$(grep -ac '^ingest:' "$TMP/tty.out")" -eq 0
else
	echo "SKIP progress on a terminal: no script(1)"
fi
T env PATH=/nonexistent "$BIN/vecfs-bench" "$DS" --plot "$TMP/x.png" >/dev/null 2>"$TMP/noplot.err"
check bench_plot_no_gnuplot_fails test $? -ne 0 -a ! -e "$TMP/x.png"
check bench_plot_no_gnuplot_message grep -q 'needs gnuplot.*gnuplot-nox' "$TMP/noplot.err"
T "$BIN/vecfs-churn" "$DS" --rounds 1 >/dev/null 2>"$TMP/churn.err"
check churn_progress_rate grep -qE '^churned: round 1 100% \([0-9,]+ operations/s\)$' "$TMP/churn.err"
check churn_progress_load grep -qE '^churned: load 100%' "$TMP/churn.err"

# ---------------------------------------------------------------- make install
# into a staging directory: the programs, and the unit pointed at PREFIX
if [[ $(dirname "$VECFS") == "$ROOT/build" ]]; then
	T make -C "$ROOT" --no-print-directory -s install DESTDIR="$TMP/dest" PREFIX=/opt/vecfs >"$TMP/install.log" 2>&1
	check install_exit_0 test $? -eq 0
	check install_daemon test -x "$TMP/dest/opt/vecfs/bin/vecfs" -a -x "$TMP/dest/opt/vecfs/bin/vecfs-inspect"
	check install_unit grep -qx 'ExecStart=/opt/vecfs/bin/vecfs -f $OPTIONS ${STORE} %f' \
		"$TMP/dest/etc/systemd/system/vecfs@.service"
else
	echo "SKIP make install: the daemon is not build/vecfs"
fi

# ---------------------------------------------------------------- systemd unit
UNIT=$ROOT/tools/vecfs@.service
inst=$(systemd-escape --path "$M" 2>/dev/null || echo x)
if command -v systemd-analyze >/dev/null; then
	mkdir -p "$TMP/unit"
	# the installed path of the daemon, here the one built
	sed "s#/usr/local/bin/vecfs#$VECFS#" "$UNIT" >"$TMP/unit/vecfs@$inst.service"
	out=$(cd "$TMP/unit" && T systemd-analyze verify --man=no "./vecfs@$inst.service" 2>&1)
	check unit_verifies test $? -eq 0 -a -z "$out"
	[[ -z $out ]] || echo "$out"
else
	echo "SKIP systemd-analyze verify: not installed"
fi
# ExecStart, with the unit's specifiers and variables put in by hand
line=$(sed -n 's/^ExecStart=//p' "$UNIT")
line=${line//\/usr\/local\/bin\/vecfs/$VECFS}
line=${line//\$\{STORE\}/$S}
line=${line//\$OPTIONS/--log $TMP/unit.log}
line=${line//%f/$M}
check unit_execstart_foreground grep -q -- ' -f ' <<<"$line"
$line >"$TMP/unit.out" 2>&1 &
upid=$!
for ((i = 0; i < 100; i++)); do is_mounted "$M" && break; sleep 0.1; done
check unit_execstart_mounts is_mounted "$M"
check unit_execstart_stays kill -0 "$upid"
kill -s TERM "$upid"
wait "$upid"
check unit_sigterm_exit_0 test $? -eq 0
check unit_sigterm_unmounts sh -c "! awk -v m='$M' '\$2 == m { f = 1 } END { exit !f }' /proc/self/mounts"
check unit_foreground_stderr grep -q "vecfs: SIGTERM: unmounting $M" "$TMP/unit.out"
check unit_type_notify grep -qx 'Type=notify' "$UNIT"
# Type=notify: READY=1 and MAINPID= on $NOTIFY_SOCKET (a path, or an
# abstract name '@...') once the mount answers, from the foreground daemon
# and from the one that forks into the background
cat >"$TMP/notify.py" <<'PY'
import os, socket, subprocess, sys
mnt, addr, cmd = sys.argv[1], sys.argv[2], sys.argv[3:]
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind('\0' + addr[1:] if addr[0] == '@' else addr)
s.settimeout(30)
env = dict(os.environ, NOTIFY_SOCKET=addr)
p = subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
try:
    msg = s.recv(4096).decode()
except socket.timeout:
    print('no message'); sys.exit(1)
fields = dict(l.split('=', 1) for l in msg.splitlines() if '=' in l)
# the mount answers at once: README is vecfs's
try:
    readme = open(mnt + '/README').read()
except OSError as e:
    readme = 'error %s' % e
print('ready', fields.get('READY'))
print('mainpid', fields.get('MAINPID'))
print('answers', 'records/' in readme)
print('popen_pid', p.pid)
p.wait() if '-f' not in cmd else None
PY
for addr in "$TMP/notify.sock" "@vecfs-test-$$"; do
	kind=$([[ $addr == @* ]] && echo abstract || echo path)
	T "$PY" "$TMP/notify.py" "$M" "$addr" "$VECFS" -f "$S" "$M" >"$TMP/notify.res" 2>&1
	check "notify_${kind}_ready" grep -qx 'ready 1' "$TMP/notify.res"
	check "notify_${kind}_mount_answers" grep -qx 'answers True' "$TMP/notify.res"
	check "notify_${kind}_mainpid" test "$(sed -n 's/^mainpid //p' "$TMP/notify.res")" == "$(daemon_pid "$M")"
	umnt "$M"
	rm -f "$TMP/notify.sock"
done
T "$PY" "$TMP/notify.py" "$M" "$TMP/notify.sock" "$VECFS" "$S" "$M" >"$TMP/notify.res" 2>&1
check notify_background_ready grep -qx 'ready 1' "$TMP/notify.res"
check notify_background_mount_answers grep -qx 'answers True' "$TMP/notify.res"
check notify_background_mainpid test "$(sed -n 's/^mainpid //p' "$TMP/notify.res")" == "$(daemon_pid "$M")"
umnt "$M"
# ExecStopPost: a stale mount is detached, a live one left alone
post=$(sed -n 's/^ExecStopPost=-//p' "$UNIT")
post=${post//%f/$M}
if mnt "$S" "$M"; then
	eval "$post"
	check unit_stoppost_keeps_live is_mounted "$M"
	pid=$(daemon_pid "$M")
	kill -9 "$pid"
	wait_gone "$pid"
	eval "$post"
	check unit_stoppost_detaches_stale sh -c "! awk -v m='$M' '\$2 == m { f = 1 } END { exit !f }' /proc/self/mounts"
	check unit_restart_after_stale mnt "$S" "$M"
	umnt "$M"
else
	bad mount_stoppost "$(tail -c 300 "$TMP/daemon.log")"
fi

# ---------------------------------------------------------------- the README's backups
# the lines of the README's "Backups and moving data" block run as they
# stand (their /tmp/ paths moved into this test's directory), one shell,
# each command's output compared with the lines the README shows under it
readme_backups() {
	local dir=$TMP/readme-backups
	mkdir -p "$dir"
	awk -v t="$dir/" '/<!-- backups:/ {f = 1; next} f && /^```console/ {next} f && /^```/ {exit}
		f {gsub("/tmp/", t); print}' README.md >"$dir/block"
	grep '^\$ ' "$dir/block" | sed 's/^\$ //' >"$dir/script"
	grep -v '^\$ ' "$dir/block" >"$dir/want"
	check readme_backups_found test "$(wc -l <"$dir/script")" -ge 10
	(set -e; . "$dir/script") >"$dir/got" 2>"$dir/err"
	local rc=$?
	is_mounted "$dir/vecfs-b" && fusermount3 -u "$dir/vecfs-b"
	check readme_backups_run test "$rc" -eq 0
	check readme_backups_output diff "$dir/want" "$dir/got"
	[[ $rc == 0 ]] || cat "$dir/err" >&2
}
readme_backups

summary
