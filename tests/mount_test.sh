#!/usr/bin/env bash
# Mount-level tests of build/vecfs: a real FUSE mount of a temporary store,
# exercised with the tools users have (cat, cp, dd, ln, mv, rm, python).
# Every operation on the mount runs under `timeout`; an EXIT trap unmounts
# whatever is still mounted.  The last line is `mount: N passed, N failed`.
#
# Usage: bash tests/mount_test.sh [path/to/vecfs]   (from the project root)

VECFS=$(readlink -f "${1:-build/vecfs}")
SUITE=mount
. "$(dirname "$0")/harness.sh"

umnt() { # MNT: unmount and wait for the daemon to exit
	local m=$1 pid i
	pid=$(daemon_pid "$m")
	T fusermount3 -u "$m" 2>/dev/null || { sleep 1; T fusermount3 -u "$m"; }
	for ((i = 0; i < 100; i++)); do
		[[ -n $pid ]] && kill -0 "$pid" 2>/dev/null || break
		sleep 0.1
	done
	! is_mounted "$m"
}

errors_has() { T cat "$M/errors" | grep -qF -- "$1"; }
# the session loop's gauges, in the user.workers attribute of stats
workers_kv() { T getfattr --absolute-names --only-values -n user.workers "$M/stats" | kv "$1"; }

# gen OUT N D SEED: deterministic fvecs
gen() {
	"$PY" - "$@" <<'EOF'
import random, struct, sys
out, n, d, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
r = random.Random(seed)
with open(out, 'wb') as f:
    for _ in range(n):
        v = [struct.unpack('<f', struct.pack('<f', r.uniform(-1, 1)))[0] for _ in range(d)]
        f.write(struct.pack('<i', d) + struct.pack('<%df' % d, *v))
EOF
}

# ---------------------------------------------------------------- cli
out=$(T "$VECFS" --help 2>&1)
check help_usage grep -qi usage <<<"$out"
out=$(T "$VECFS" --version 2>&1)
check version_number grep -q '[0-9]' <<<"$out"
# every tool: "NAME VERSION", the daemon's version, exit status 0
version=$(head -n 1 <<<"$out" | awk '$1 == "vecfs" && NF == 2 { print $2 }')
check version_name_first test -n "$version"
for tool in vecfs-bench vecfs-data vecfs-churn vecfs-inspect; do
	check "version_$tool" test "$(T "$(dirname "$VECFS")/$tool" --version 2>&1; echo "rc=$?")" == "$tool $version
rc=0"
done
T "$VECFS" "$TMP/only-store" >/dev/null 2>&1
check missing_mountpoint_fails test $? -ne 0

S=$TMP/store
M=$TMP/mnt
if ! mnt "$S" "$M"; then
	bad mount "$(tail -c 300 "$TMP/daemon.log")"
	summary
	exit 1
fi
ok mount
check store_created test -d "$S"
# the daemon restarted itself with the heap tuned for large ingests
pid=$(daemon_pid "$M")
check daemon_heap_tuned grep -qz '^GLIBC_TUNABLES=glibc.malloc.hugetlb=1' "/proc/$pid/environ"
# a GLIBC_TUNABLES of the caller's own is kept as it is
GLIBC_TUNABLES=glibc.malloc.check=0 mnt "$TMP/tun-store" "$TMP/tun-mnt"
pid=$(daemon_pid "$TMP/tun-mnt")
check daemon_tunables_kept grep -qzx 'GLIBC_TUNABLES=glibc.malloc.check=0' "/proc/$pid/environ"
umnt "$TMP/tun-mnt"

# ---------------------------------------------------------------- tree
ls=$(T ls -A "$M" | tr '\n' ' ')
check root_listing test "$ls" == "README backup config ctl delete errors export.jsonl generations ingest query records stats "
check readme_lines test "$(T cat "$M/README" | wc -l)" -ge 2
check readme_read_only test "$(printf 'x\n' | put - "$M/README")" == "ERR EACCES open"
check config_mode test "$(T stat -c %A "$M/config")" == "-rw-r--r--"
check mkdir_root_refused test "$(T mkdir "$M/x" 2>&1 >/dev/null | wc -l)" -ge 1

# ---------------------------------------------------------------- config
check config_dim_unset test "$(T cat "$M/config" | kv dim)" == 0
check config_write test "$(printf '# c\nk = 4\n\nnprobe = 3\n' | put - "$M/config")" == OK
check config_reads_back test "$(T cat "$M/config" | kv k)/$(T cat "$M/config" | kv nprobe)" == "4/3"
check config_unknown_key test "$(printf 'k = 5\nbogus = 1\n' | put - "$M/config")" == "ERR EINVAL write"
check config_all_or_nothing test "$(T cat "$M/config" | kv k)" == 4
check config_unknown_logged errors_has bogus
check config_bad_value test "$(printf 'bits = many\n' | put - "$M/config")" == "ERR EINVAL write"
check config_bad_metric test "$(printf 'metric = taxicab\n' | put - "$M/config")" == "ERR EINVAL write"
check config_range_at_write test "$(printf 'bits = 99\n' | put - "$M/config")" == "ERR EINVAL write"
check config_range_logged errors_has "bad value '99' for bits (an integer in 1..8)"
check config_echo_bad test "$(T bash -c "echo 'nlist = -1' > '$M/config'" 2>&1 | grep -c 'write error')" == 1
check config_auto_build_off test "$(printf 'auto_build = 0\n' | put - "$M/config")" == OK

# ---------------------------------------------------------------- ingest
printf '# header\nk1,1,2,3,4\r\nk2\t5\t6\t7\t8\n\nk3 9 10 11 12\nk4,1e-3,-2.5,0x1p3,4' >"$TMP/a.csv"
check csv_ingest test "$(put "$TMP/a.csv" "$M/ingest/a.csv" 3)" == OK
check csv_count test "$(stat_kv records)" == 4
check dim_fixed test "$(T cat "$M/config" | kv dim)" == 4
check record_text test "$(T cat "$M/records/k4")" == "0.00100000005 -2.5 8 4"
check record_bytes_text test "$(T cat "$M/records/k3")" == "9 10 11 12" # (held in bytes)
check record_stat_size test "$(T stat -c %s "$M/records/k1")" == "$(T cat "$M/records/k1" | wc -c)"
check ingest_empties_after_close test -z "$(T ls -A "$M/ingest")"
printf 'g1,1,2,3,4\ng2,1,2,3\ng3,1,2,3,4\n' >"$TMP/bad.csv"
check bad_row_einval test "$(put "$TMP/bad.csv" "$M/ingest/bad.csv")" == "ERR EINVAL write"
check bad_row_nothing_committed test ! -e "$M/records/g1"
check bad_row_logged errors_has "ingest/bad.csv: line 2"
check bad_ending_einval test "$(put "$TMP/a.csv" "$M/ingest/a.dat")" == "ERR EINVAL open"
printf 'n1,1,2,nan,4\n' >"$TMP/nan.csv"
check nan_rejected test "$(put "$TMP/nan.csv" "$M/ingest/nan.csv")" == "ERR EINVAL write"
printf 'o1,1,2,1e39,4\n' >"$TMP/of.csv"
check overflow_rejected test "$(put "$TMP/of.csv" "$M/ingest/of.csv")" == "ERR EINVAL write"
printf '{"key": "j\\u00e9", "vector": [0.5, 0.25, 0.125, 2], "payload": {"tag": ["x", 1]}}\n' >"$TMP/j.jsonl"
check jsonl_ingest test "$(put "$TMP/j.jsonl" "$M/ingest/j.jsonl" 5)" == OK
check jsonl_utf8_key test -e "$M/records/jé"
gen "$TMP/v.fvecs" 50 4 7
check fvecs_ingest test "$(put "$TMP/v.fvecs" "$M/ingest/v.fvecs" 7)" == OK
check fvecs_assigned_keys test -e "$M/records/0" -a -e "$M/records/49"
"$PY" - "$TMP/v.fvecs" "$TMP/v.npy" <<'EOF'
import struct, sys
data = open(sys.argv[1], 'rb').read()
rows = [data[i * 20 + 4:i * 20 + 20] for i in range(len(data) // 20)][:10]
hdr = "{'descr': '<f4', 'fortran_order': False, 'shape': (%d, 4), }" % len(rows)
hdr += ' ' * ((64 - (10 + len(hdr) + 1) % 64) % 64) + '\n'
open(sys.argv[2], 'wb').write(b'\x93NUMPY\x01\x00' + struct.pack('<H', len(hdr)) + hdr.encode() + b''.join(rows))
EOF
check npy_ingest test "$(put "$TMP/v.npy" "$M/ingest/v.npy" 11)" == OK
check npy_keys_continue test -e "$M/records/59"
head -c 30 "$TMP/v.fvecs" >"$TMP/t.fvecs"
check truncated_fvecs test "$(put "$TMP/t.fvecs" "$M/ingest/t.fvecs")" == "ERR EINVAL close"
check truncated_logged errors_has "ingest/t.fvecs: row 2"
# mknod makes no file anywhere: EPERM and a line; chmod and chown to what is
# shown succeed, to anything else EPERM and a line, nothing changed
nodes_and_modes() {
	local out mode
	out=$(T mknod "$M/ingest/n.csv" p 2>&1) && return 1
	[[ $out == *"Operation not permitted"* ]] || return 1
	errors_has "mknod ingest/n.csv: files are made here by opening them for writing" || return 1
	out=$(T "$PY" -c 'import os, stat, sys; os.mknod(sys.argv[1], stat.S_IFREG | 0o644)' "$M/ingest/r.csv" 2>&1) && return 1
	[[ $out == *"Operation not permitted"* && ! -e $M/ingest/r.csv ]] || return 1
	mode=$(T stat -c %a "$M/config")
	T chmod "$mode" "$M/config" || return 1
	T chown "$(id -u):$(id -g)" "$M/config" || return 1
	out=$(T chmod 777 "$M/config" 2>&1) && return 1
	[[ $out == *"Operation not permitted"* && $(T stat -c %a "$M/config") == "$mode" ]] || return 1
	errors_has "chmod config: modes are fixed ($mode)"
}
check mknod_chmod_honest nodes_and_modes
# a shell redirection of a block, and cp / dd
{ echo 'b1,1,1,1,1'; /bin/echo 'b2,2,2,2,2'; echo 'b3,3,3,3,3'; } >"$M/ingest/block.csv"
check shell_block test -e "$M/records/b1" -a -e "$M/records/b3"
T cp "$TMP/a.csv" "$M/ingest/cp.csv"
check cp_ingest test $? -eq 0
T dd if="$TMP/v.fvecs" of="$M/ingest/dd.fvecs" bs=64 status=none
check dd_ingest test "$(stat_kv records)" == 118

# ---------------------------------------------------------------- records
check ls_records test "$(T ls "$M/records" | wc -l)" == 118
check rm_record T rm "$M/records/k2"
check rm_gone test ! -e "$M/records/k2"
check rm_missing_enoent test "$(T rm "$M/records/k2" 2>&1 | grep -c 'No such file')" == 1
check stats_deleted test "$(stat_kv deleted)" == 1
# many keys: readdir streams across many reply buffers
"$PY" -c "
import sys
print(''.join('key-%05d,%d,1,2,3\n' % (i, i) for i in range(5000)), end='')" >"$TMP/many.csv"
check many_ingest test "$(put "$TMP/many.csv" "$M/ingest/many.csv")" == OK
check many_listed test "$(T ls "$M/records" | grep -c '^key-')" == 5000
check many_unique test "$(T ls "$M/records" | sort | uniq -d | wc -l)" == 0
check many_python_listdir test "$(T "$PY" -c "import os,sys; print(len(os.listdir(sys.argv[1])))" "$M/records")" == 5117

# ---------------------------------------------------------------- delete
"$PY" -c "
print(''.join('del-%d,%d,1,2,3\n' % (i, i) for i in range(40)), end='')
print('\"del x\",9,9,9,9')" >"$TMP/del.csv"
check delete_setup test "$(put "$TMP/del.csv" "$M/ingest/del.csv")" == OK
check delete_mode test "$(T stat -c '%A %s' "$M/delete")" == "-rw------- 0"
check delete_reads_empty test "$(T cat "$M/delete" | wc -c)" == 0
# keys a line (a quoted one, a CRLF one, a missing one, blank lines): one commit at the close
printf 'del-1\n\n"del x"\ndel-2\r\nno-such-key\n  \ndel-3\n' >"$M/delete"
check delete_keys test "$(stat_kv last_delete)/$(stat_kv records)" == "4/5154"
check delete_keys_gone test ! -e "$M/records/del-2" -a ! -e "$M/records/del x" -a -e "$M/records/del-4"
# a bad key line or a second filter= line: EINVAL, nothing deleted, one errors line
check delete_bad_key test "$(printf 'del-4\na/b\n' | put - "$M/delete")" == "ERR EINVAL write"
check delete_bad_key_line errors_has "delete: line 2: bad key 'a/b'"
check delete_two_filters test "$(printf 'filter={}\nfilter={}\n' | put - "$M/delete")" == "ERR EINVAL write"
check delete_bad_filter test "$(printf 'del-4\nfilter={"a":\n' | put - "$M/delete")" == "ERR EINVAL close"
check delete_bad_filter_line errors_has "delete: line 2: "
check delete_nothing_deleted test "$(stat_kv records)" == 5154
# a shell's redirection of one echo; a forked child that inherited the descriptor and wrote nothing commits nothing
T bash -c "echo del-4 > '$M/delete'"
check delete_echo test ! -e "$M/records/del-4"
T "$PY" - "$M" <<'PY'
import os, sys
fd = os.open(sys.argv[1] + '/delete', os.O_WRONLY)
os.write(fd, b'del-5\n')
pid = os.fork()
if pid == 0:
    os.close(fd)
    os._exit(0)
os.waitpid(pid, 0)
kept = os.path.exists(sys.argv[1] + '/records/del-5')
os.close(fd)
sys.exit(0 if kept else 1)
PY
check delete_child_close_no_commit test $? -eq 0
check delete_parent_close_commits test ! -e "$M/records/del-5"
# the payload filter (records of del.csv have none: none match $exists)
check delete_filter_none test "$(printf 'filter={"x": {"$exists": true}}\n' | put - "$M/delete")/$(stat_kv last_delete)" == "OK/0"
printf 'del-%d\n' 0 $(seq 6 39) >"$M/delete"
check delete_rest test "$(stat_kv last_delete)/$(T ls "$M/records" | grep -c '^del-')" == "35/0"

# ---------------------------------------------------------------- query
check query_enoent_without_mkdir test "$(printf '1 2 3 4\n' | put - "$M/query/nope/in")" == "ERR ENOENT open"
check query_mkdir T mkdir -p "$M/query/q1"
check query_mkdir_p T mkdir -p "$M/query/q1"
check query_out_empty test "$(T cat "$M/query/q1/out" | wc -c)" == 0
check query_bad_id test "$(T mkdir "$M/query/a b" 2>&1 | wc -l)" -ge 1
check query_run test "$(printf 'k=3 mode=exact\n[1, 2, 3, 4]\n9 10 11 12\n' | put - "$M/query/q1/in")" == OK
T cat "$M/query/q1/out" >"$TMP/out"
check query_groups test "$(grep -c '^$' "$TMP/out")/$(grep -c . "$TMP/out")" == "1/6"
check query_self_first test "$(head -n 1 "$TMP/out")" == "$(printf 'k1\t0')"
T cat "$M/query/q1/out.json" >"$TMP/out.json"
check query_json "$PY" -c "
import json, sys
j = json.load(open(sys.argv[1]))
assert j['generation'] is None and len(j['results']) == 2 and len(j['results'][0]) == 3
" "$TMP/out.json"
check query_stats test "$(T cat "$M/query/q1/stats" | kv mode)" == exact
# the pages a query waited to read from disk, and their sum in stats: numbers
check query_stats_pages_read grep -Eq '^pages_read = [0-9]+$' <(T cat "$M/query/q1/stats")
check stats_pages_read grep -Eq '^pages_read = [0-9]+$' <(T cat "$M/stats")
check query_binary test "$(head -c 20 "$TMP/v.fvecs" | put - "$M/query/q1/in")" == OK
check query_binary_self test "$(T cat "$M/query/q1/out" | head -n 1 | cut -f2)" == 0
T mkdir -p "$M/query/pay"
check query_payload test "$(printf 'k=1\n0.5 0.25 0.125 2\n' | put - "$M/query/pay/in")" == OK
check query_payload_json grep -qF '"payload": {"tag": ["x", 1]}' <(T cat "$M/query/pay/out.json")
# a record's payload is its extended attribute user.payload, read only
cat >"$TMP/xattr.py" <<'PY'
import ctypes, errno, os, sys
libc = ctypes.CDLL(None, use_errno=True)
def call(f, *a):
    r = f(*a)
    return 'ERR ' + errno.errorcode[ctypes.get_errno()] if r < 0 else r
op, path = sys.argv[1], sys.argv[2].encode()
name = sys.argv[3].encode() if len(sys.argv) > 3 else b''
try:
    if op == 'get':
        print(os.getxattr(path, name).decode())
    elif op == 'size':  # a size query, then a buffer one byte short
        n = call(libc.getxattr, path, name, None, 0)
        short = call(libc.getxattr, path, name, ctypes.create_string_buffer(64), n - 1) if isinstance(n, int) else ''
        print(n, short)
    elif op == 'list':
        n = call(libc.listxattr, path, None, 0)
        short = call(libc.listxattr, path, ctypes.create_string_buffer(64), n - 1) if isinstance(n, int) and n else ''
        print(n, short, ' '.join(os.listxattr(path)))
    elif op == 'set':
        os.setxattr(path, name, b'1')
    elif op == 'remove':
        os.removexattr(path, name)
    print('OK') if op in ('set', 'remove') else None
except OSError as e:
    print('ERR ' + errno.errorcode[e.errno])
PY
xa() { T "$PY" "$TMP/xattr.py" "$@"; }
check xattr_payload test "$(xa get "$M/records/jé" user.payload)" == '{"tag": ["x", 1]}'
check xattr_size_query test "$(xa size "$M/records/jé" user.payload)" == "17 ERR ERANGE"
check xattr_list test "$(xa list "$M/records/jé")" == "13 ERR ERANGE user.payload"
check xattr_none_enodata test "$(xa get "$M/records/k1" user.payload)" == "ERR ENODATA"
check xattr_none_listed test "$(xa list "$M/records/k1")" == "0  "
check xattr_other_name test "$(xa get "$M/records/jé" user.other)" == "ERR ENODATA"
check xattr_other_file test "$(xa get "$M/README" user.payload)" == "ERR ENODATA"
check xattr_set_enotsup test "$(xa set "$M/records/jé" user.payload)" == "ERR ENOTSUP"
check xattr_remove_enotsup test "$(xa remove "$M/records/jé" user.payload)" == "ERR ENOTSUP"
check xattr_set_other_enotsup test "$(xa set "$M/config" user.x)" == "ERR ENOTSUP"
check xattr_unchanged test "$(xa get "$M/records/jé" user.payload)" == '{"tag": ["x", 1]}'
check query_bad_in test "$(printf 'k=x\n1 2 3 4\n' | put - "$M/query/q1/in")" == "ERR EINVAL write"
check query_bad_logged errors_has "query/q1/in: line 1"
check query_bad_dim test "$(printf '1 2 3\n' | put - "$M/query/q1/in")" == "ERR EINVAL write"
check query_bad_echo test "$(T bash -c "echo '1 2 x 4' > '$M/query/q1/in'" 2>&1 | grep -c 'write error')" == 1
check query_bad_out_empty test "$(T cat "$M/query/q1/out" | wc -c)" == 0
check query_bad_unterminated test "$(printf '1 2 3' | put - "$M/query/q1/in")" == "ERR EINVAL close"
check query_unterminated_last test "$(printf 'k=1 mode=exact\n9 10 11 12\n1 2 3 4' | put - "$M/query/q1/in")" == OK
check query_unterminated_out test "$(T cat "$M/query/q1/out" | cut -f1 | tr '\n' ' ')" == "k3  k1 "
# a batch's lines that one write completes, parsed in pieces on the CPUs at
# once: the same out as written line by line in small writes, and a bad line
# (a word, another dimension) or an option line anywhere gives what it would;
# its out the same as smaller batches' outs, an empty line between them
big_in_ok() { # SESSION
	T "$PY" -c "
import errno, os, random, sys
d = sys.argv[1]
random.seed(7)
lines = ['%d %d %d %d' % tuple(random.randint(0, 20) for _ in range(4)) for _ in range(30000)]
def errs():
    return open(d + '/../../errors').read().splitlines()
def put(ls, one):
    b = ('\\n'.join(ls) + '\\n').encode()
    fd = os.open(d + '/in', os.O_WRONLY | os.O_TRUNC)
    try:
        if one:
            assert os.write(fd, b) == len(b) # (one WRITE: it is less than max_write)
        else:
            for x in range(0, len(b), 4000):
                assert os.write(fd, b[x:x + 4000]) == len(b[x:x + 4000])
    except OSError as e:
        try:
            os.close(fd) # (fails too: the input is bad)
        except OSError:
            pass
        return 'ERR ' + errno.errorcode[e.errno]
    os.close(fd)
    return open(d + '/out', 'rb').read()
def same(ls):
    a, b = put(ls, True), put(ls, False)
    assert a == b, (a[:200], b[:200])
    return a
out = same(lines)
assert len(out) > 200000 and out.count(b'\\n\\n') == len(lines) - 1, len(out)
assert out == b'\\n'.join(put(lines[x:x + 1000], True) for x in range(0, len(lines), 1000))
assert same(lines[:20000] + ['k=1'] + lines[20000:]).count(b'\\n') == 2 * len(lines) - 1
for at, bad, why in ((25000, '1 2 x 4', \"'x' is not a number\"), (3, '1 2 x 4', \"'x' is not a number\"),
                     (20000, '1 2 3', '3 numbers, the vectors before have 4')):
    e0 = len(errs())
    assert put(lines[:at - 1] + [bad] + lines[at - 1:], True) == 'ERR EINVAL'
    assert errs()[e0:] and 'query/%s/in: line %d: %s' % (os.path.basename(d), at, why) in errs()[-1], errs()[e0:]
print('OK')
" "$1"
}
check query_big_in test "$(T mkdir -p "$M/query/big" && big_in_ok "$M/query/big")" == OK
# a program looping over queries may hold in and out open: a write at offset
# 0 starts in over, closing a dup() of in runs the query, out read again from
# offset 0 shows the new results; O_APPEND appends to what in holds
held_ok() { # SESSION
	T "$PY" -c "
import os, sys
d = sys.argv[1]
i = os.open(d + '/in', os.O_WRONLY | os.O_TRUNC)
o = os.open(d + '/out', os.O_RDONLY)
def run(req):
    os.pwrite(i, req, 0)
    os.close(os.dup(i))
    return os.pread(o, 65536, 0).decode()
a = run(b'k=1 mode=exact\\n1 2 3 4\\n')
b = run(b'k=1 mode=exact\\n9 10 11 12\\n')
assert a.split('\\t')[0] == 'k1', a
assert b.split('\\t')[0] != 'k1' and b.count('\\n') == 1, b
assert os.pread(o, 65536, len(b)) == b''
os.close(i); os.close(o)
f = os.open(d + '/in', os.O_WRONLY | os.O_APPEND)
os.write(f, b'1 2 3 4\\n')
assert os.fstat(f).st_size == 34, os.fstat(f).st_size
os.close(f)
out = open(d + '/out').read()
assert out.count('\\n') == 3 and out.endswith('\\n\\nk1\\t0\\n'), out
" "$1"
}
check query_held_descriptors held_ok "$M/query/q1"
# one kernel round trip a query: a synchronous write (O_DSYNC, or
# pwritev2 with RWF_DSYNC) of a whole input at offset 0 runs it, and fails
# with the query's errno; the close after it runs nothing more; a write
# without the flag still waits for the close
sync_ok() { # SESSION
	T "$PY" -c "
import errno, os, sys
d = sys.argv[1]
def stat_queries():
    for l in open(d + '/../../stats'):
        if l.startswith('queries '):
            return int(l.split()[-1])
i = os.open(d + '/in', os.O_WRONLY | os.O_TRUNC | os.O_DSYNC)
o = os.open(d + '/out', os.O_RDONLY)
q0 = stat_queries()
assert os.pwrite(i, b'k=1 mode=exact\\n1 2 3 4\\n', 0) == 23
a = os.pread(o, 65536, 0).decode()
assert a.split('\\t')[0] == 'k1' and a.count('\\n') == 1, a
assert stat_queries() == q0 + 1, (stat_queries(), q0)
os.pwrite(i, b'k=2 mode=exact\\n9 10 11 12\\n', 0)
b = os.pread(o, 65536, 0).decode()
assert b.count('\\n') == 2 and b.split('\\t')[0] != 'k1', b
try:
    os.pwrite(i, b'k=x\\n1 2 3 4\\n', 0)
    raise SystemExit('a bad input was taken')
except OSError as e:
    assert e.errno == errno.EINVAL, e
assert os.pread(o, 65536, 0) == b'', 'results of a failed query'
os.pwrite(i, b'k=1 mode=exact\\n1 2 3 4\\n', 0)
q1 = stat_queries()
os.close(i)                                  # ran already: runs nothing
assert stat_queries() == q1, (stat_queries(), q1)
assert os.pread(o, 65536, 0).decode().split('\\t')[0] == 'k1'
p = os.open(d + '/in', os.O_WRONLY)
os.pwrite(p, b'k=1 mode=exact\\n9 10 11 12\\n', 0)   # a plain write: the close runs it
assert os.pread(o, 65536, 0).decode().split('\\t')[0] == 'k1'
os.pwritev(p, [b'k=1 mode=exact\\n', b'9 10 11 12\\n'], 0, os.RWF_DSYNC)
c = os.pread(o, 65536, 0).decode()
assert c.count('\\n') == 1 and c.split('\\t')[0] != 'k1', c
os.close(p); os.close(o)
" "$1"
}
check query_sync_write sync_ok "$M/query/q1"
# the query call, one system call a query: an ioctl() of in (any of its
# descriptors) runs a whole input and returns out's text in its buffer
# (VECFS_IOC_QUERY in vecfs.h); a bad input fails with EINVAL and one errors
# line, results past the buffer with ERANGE and none, other numbers and
# other files with ENOTTY; the session's out stays as it was; threads may
# call at once on one descriptor
call_ok() { # SESSION
	T "$PY" - "$1" "$M" <<'PY'
import errno, fcntl, os, struct, sys, threading
d, m = sys.argv[1], sys.argv[2]
def cmd(size, nr=1, dirn=3):
    return (dirn << 30) | (size << 16) | (ord('v') << 8) | nr
def call(fd, req, size=4096, c=None):
    buf = bytearray(size)
    struct.pack_into('<I', buf, 0, len(req))
    buf[4:4 + len(req)] = req
    n = fcntl.ioctl(fd, c if c is not None else cmd(size), buf, True)
    return bytes(buf[:n])
def errs():
    return open(m + '/errors').read().splitlines()
def fails(err, f, *a):
    try:
        f(*a)
    except OSError as e:
        assert e.errno == err, (e, a)
        return
    raise SystemExit('no error %d: %r' % (err, a))
i = os.open(d + '/in', os.O_WRONLY | os.O_TRUNC | os.O_DSYNC)
o = os.open(d + '/out', os.O_RDONLY)
r = os.open(d + '/in', os.O_RDONLY)              # any descriptor of in takes it
os.pwrite(i, b'k=2 mode=exact\n9 10 11 12\n', 0)
before = os.pread(o, 65536, 0)
for fd in (i, r):
    got = call(fd, b'k=1 mode=exact\n1 2 3 4\n')
    assert got.split(b'\t')[0] == b'k1' and got.count(b'\n') == 1, got
assert os.pread(o, 65536, 0) == before           # the session's out as it was
# what the write path gives: text, binary rows, a batch, at the defaults
for req in (b'k=3 mode=exact\n1 2 3 4\n', b'k=2\n1 2 3 4\n9 10 11 12\n',
            struct.pack('<i4f', 4, 1, 2, 3, 4), b'5 5 5 5'):
    os.pwrite(i, req, 0)
    assert call(r, req) == os.pread(o, 65536, 0), req
# a bad input: EINVAL and one errors line naming its line
e0 = len(errs())
fails(errno.EINVAL, call, r, b'k=1\nk=x\n1 2 3 4\n')
assert len(errs()) == e0 + 1 and 'query/q1/in (call): line 2:' in errs()[-1], errs()[-1]
fails(errno.EINVAL, call, r, b'1 2 3\n')         # the store's dimension is 4
fails(errno.EINVAL, call, r, b'')                # no query vector
# a length past the call's buffer
buf = bytearray(64)
struct.pack_into('<I', buf, 0, 61)
fails(errno.EINVAL, fcntl.ioctl, r, cmd(64), buf, True)
# results longer than the buffer: ERANGE, and no errors line
e1 = len(errs())
fails(errno.ERANGE, call, r, b'k=4\n1 2 3 4\n', 16)
assert len(errs()) == e1, errs()[e1:]
# other numbers, other files
for c in (cmd(64, nr=2), cmd(64, dirn=1), cmd(64, dirn=2), cmd(4)):
    fails(errno.ENOTTY, call, r, b'1 2 3 4\n', 64, c)
for f in (d + '/out', m + '/config', m + '/stats'):
    fd = os.open(f, os.O_RDONLY)
    fails(errno.ENOTTY, call, fd, b'1 2 3 4\n')
    fails(errno.ENOTTY, fcntl.ioctl, fd, 0x80086601, bytearray(8), True)   # lsattr's
    os.close(fd)
# nor on a directory (which holds no file handle), and the daemon serves on
for f in (m, m + '/query', d, m + '/generations'):
    fd = os.open(f, os.O_RDONLY | os.O_DIRECTORY)
    fails(errno.ENOTTY, call, fd, b'1 2 3 4\n')
    fails(errno.ENOTTY, fcntl.ioctl, fd, 0x80086601, bytearray(8), True)
    os.close(fd)
os.stat(m + '/stats')
# calls of many threads on one descriptor at once
reqs = [b'k=2 mode=exact\n%s\n' % v for v in (b'1 2 3 4', b'9 10 11 12', b'5 5 5 5', b'2 2 2 2')]
wants = []
for req in reqs:
    os.pwrite(i, req, 0)
    wants.append(os.pread(o, 65536, 0))
bad = []
def worker(t):
    for q in range(50):
        v = (t * 50 + q) % 4
        got = call(r, reqs[v])
        if got != wants[v]:
            bad.append((wants[v], got))
ts = [threading.Thread(target=worker, args=(t,)) for t in range(4)]
for t in ts: t.start()
for t in ts: t.join()
assert not bad, bad[:3]
# a removed session
os.mkdir(m + '/query/callgone')
g = os.open(m + '/query/callgone/in', os.O_RDONLY)
os.rmdir(m + '/query/callgone')
fails(errno.ENOENT, call, g, b'1 2 3 4\n')
os.close(g)
os.close(i); os.close(o); os.close(r)
PY
}
check query_call call_ok "$M/query/q1"
# one client's queries, one after another, as a shell script makes them,
# need no worker beyond those there are: a worker counts as waiting once its
# reply is out, so the next request of the client it woke does not look like
# one that nobody waits for
serial_ok() {
	local before after
	before=$(workers_kv workers_started) || return 1
	T bash -c 'for ((n = 0; n < 100; n++)); do
		printf "k=2 mode=exact\n%d 2 3 4\n" $((n % 9)) >"$1/in" || exit 1
		[[ $(cat "$1/out" | wc -l) == 2 ]] || exit 1
	done' sh "$M/query/q1" || return 1
	after=$(workers_kv workers_started) || return 1
	((after - before <= 2)) || { echo "$((after - before)) workers started" >&2; return 1; }
}
check one_client_needs_no_extra_workers serial_ok
# one client's requests, one at a time, wake only the worker of its CPU:
# the others stop listening, and the one of a CPU the client moves to
# starts (rounds of ROUND_REPLIES in fs/loop.c)
# SESSION N: N exact queries on descriptors held open, one after another
HELD_LOOP='
import os, sys
d, n = sys.argv[1], int(sys.argv[2])
fi = os.open(d + "/in", os.O_WRONLY)
fo = os.open(d + "/out", os.O_RDONLY)
for q in range(n):
    os.pwrite(fi, b"k=2 mode=exact\n%d 2 3 4\n" % (q % 9), 0)
    os.close(os.dup(fi))
    assert os.pread(fo, 4096, 0).count(b"\n") == 2
'
# Other load on the machine can leave a standby listening at the moment
# stats is read (a request of another process, a round's probe), so each
# CPU gets up to three tries: a loop that never settles fails all three.
listen_ok() {
	local c want try st
	for c in 0 1; do
		want=$c
		if (($(nproc) < 2)); then
			want='*'
		fi
		for try in 1 2 3; do
			T taskset -c "$c" "$PY" -c "$HELD_LOOP" "$M/query/q1" 100 || return 1
			st=$(T taskset -c "$c" getfattr --absolute-names --only-values -n user.workers "$M/stats") || return 1
			[[ $(kv workers_listening <<<"$st") == 1 &&
				$(kv workers_listening_cpus <<<"$st") == "$want" ]] && break
			echo "client on CPU $c, try $try: $(grep listening <<<"$st" | tr '\n' ' ')" >&2
			((try == 3)) && return 1
		done
		(($(nproc) < 2)) && break
	done
	return 0
}
# Which worker listens depends on how long a request takes to answer: in a
# sanitizer build (VECFS_SANITIZER set by make asan/tsan) every request takes
# several times longer, both workers read requests each round and both keep
# listening, as designed; the plain build is where this is checked.
if [[ -n ${VECFS_SANITIZER:-} ]]; then
	echo "SKIP one_client_wakes_one_worker: timing of the $VECFS_SANITIZER build"
else
	check one_client_wakes_one_worker listen_ok
fi
# a held query is searched ahead at its write (fs/ahead.c), and its close
# still sees an ingest committed between the write and the close
ahead_ok() {
	local before after
	before=$(stat_kv queries_searched_ahead) || return 1
	T "$PY" -c "$HELD_LOOP" "$M/query/q1" 50 || return 1
	after=$(stat_kv queries_searched_ahead) || return 1
	((after - before >= 25)) || { echo "$((after - before)) of 50 searched ahead" >&2; return 1; }
	T "$PY" - "$M" <<'PY'
import os, sys, time
m = sys.argv[1]
fi = os.open(m + '/query/q1/in', os.O_WRONLY)
os.pwrite(fi, b'k=1 mode=exact\n901 902 903 904\n', 0)
time.sleep(0.05)  # the search ahead is done by now
with open(m + '/ingest/ahead.csv', 'w') as f:
    f.write('ahead-near,901,902,903,904\n')
os.close(os.dup(fi))
with open(m + '/query/q1/out') as f:
    out = f.read()
assert out == 'ahead-near\t0\n', out
os.close(fi)
os.unlink(m + '/records/ahead-near')
PY
}
check search_ahead_sees_ingest ahead_ok
# a synchronous write runs its query on the worker that took it: nothing is
# handed to the thread that searches ahead (DESIGN.md, one round trip a query)
sync_inline_ok() {
	local before after
	before=$(stat_kv queries_searched_ahead) || return 1
	T "$PY" - "$M/query/q1" 40 <<'PY' || return 1
import os, sys
d, n = sys.argv[1], int(sys.argv[2])
fi = os.open(d + "/in", os.O_WRONLY | os.O_DSYNC)
fo = os.open(d + "/out", os.O_RDONLY)
for q in range(n):
    os.pwrite(fi, b"k=2 mode=exact\n%d 2 3 4\n" % (q % 9), 0)
    assert os.pread(fo, 4096, 0).count(b"\n") == 2
os.close(fi)
os.close(fo)
PY
	after=$(stat_kv queries_searched_ahead) || return 1
	((after == before)) || { echo "$((after - before)) of 40 synchronous writes searched ahead" >&2; return 1; }
}
check sync_write_searched_on_worker sync_inline_ok
# a daemon with one CPU to run on searches nothing ahead: nothing to overlap
ahead_one_cpu_ok() {
	local s1=$TMP/store1cpu m1=$TMP/mnt1cpu n
	mkdir -p "$m1"
	MOUNTS+=("$m1")
	T taskset -c 0 "$VECFS" "$s1" "$m1" >>"$TMP/daemon.log" 2>&1 </dev/null || return 1
	[[ $(printf 'a,1,2,3,4\nb,2,3,4,5\n' | put - "$m1/ingest/a.csv") == OK ]] || return 1
	T mkdir -p "$m1/query/q1" || return 1
	T "$PY" -c "$HELD_LOOP" "$m1/query/q1" 20 || return 1
	n=$(T cat "$m1/stats" | kv queries_searched_ahead)
	T fusermount3 -u "$m1" || return 1
	[[ $n == 0 ]] || { echo "$n searched ahead on one CPU" >&2; return 1; }
}
check search_ahead_not_on_one_cpu ahead_one_cpu_ok
# long work done in a write that is too short to make a standby at its start
# (a synchronous write of an exact batch of queries; `build` written to ctl)
# makes another worker listen: a client on the other CPU is answered while
# it runs, not after it
standby_ok() {
	local s=$TMP/storesb m=$TMP/mntsb
	(($(nproc) >= 2)) || return 0
	mkdir -p "$m"
	MOUNTS+=("$m")
	# two CPUs: the batch's parts run on every CPU the daemon may use
	T taskset -c 0,1 "$VECFS" "$s" "$m" >>"$TMP/daemon.log" 2>&1 </dev/null || return 1
	gen "$TMP/sb.fvecs" 100000 4 11
	T cp "$TMP/sb.fvecs" "$m/ingest/sb.fvecs" || return 1
	T mkdir -p "$m/query/long" "$m/query/other" || return 1
	T "$PY" - "$m" <<'PY' || return 1
import fcntl, os, struct, subprocess, sys, threading, time
m = sys.argv[1]
# the other client, on CPU 1, started before any file is opened (a child
# that closed an inherited in would wait for the query: its close is a FLUSH)
other = subprocess.Popen(["taskset", "-c", "1", sys.executable, "-c",
    "import os, sys, time\nfor _ in sys.stdin:\n    t = time.monotonic()\n"
    "    os.stat(sys.argv[1])\n    print(time.monotonic() - t, flush=True)",
    m + "/query/other/in"],  # (attributes the kernel does not keep: each stat asks)
    stdin=subprocess.PIPE, stdout=subprocess.PIPE)
os.sched_setaffinity(0, {0})

def check(what, work):
    for _ in range(64):  # a client of CPU 0 only: the other worker stops listening
        os.stat(m + "/stats")
    done = []
    def run():
        t = time.monotonic()
        work()
        done.append(time.monotonic() - t)
    th = threading.Thread(target=run)
    th.start()
    time.sleep(0.03)
    other.stdin.write(b"go\n")
    other.stdin.flush()
    wait = float(other.stdout.readline())
    th.join()
    q = done[0]
    print("%s %.3f s, the other client %.3f s" % (what, q, wait), file=sys.stderr)
    # the work must outlast the other client's request by far for this to tell
    assert q > 0.15, "%s took %.3f s: too short to tell" % (what, q)
    assert wait < q / 2, "the other client waited %.3f s of the %.3f s of %s" % (wait, q, what)

body = b"k=1 mode=exact\n" + b"1 0 1 0\n" * 2500
assert len(body) < 65536
fi = os.open(m + "/query/long/in", os.O_WRONLY | os.O_DSYNC)
check("an exact batch", lambda: os.pwrite(fi, body, 0))
os.close(fi)
fc = os.open(m + "/ctl", os.O_WRONLY)
check("a build", lambda: os.write(fc, b"build\n"))
os.close(fc)
# a query call that waits for the session while its in runs an exact batch
# (a buffer of 1024 bytes: Python's ioctl() lets other threads run then)
fi = os.open(m + "/query/long/in", os.O_WRONLY | os.O_DSYNC)
fr = os.open(m + "/query/long/in", os.O_RDONLY)
def batch_then_call():
    a = threading.Thread(target=lambda: os.pwrite(fi, body, 0))
    a.start()
    time.sleep(0.01)
    req = b"k=1 mode=exact\n1 0 1 0\n"
    buf = bytearray(1024)
    struct.pack_into("<I", buf, 0, len(req))
    buf[4:4 + len(req)] = req
    assert fcntl.ioctl(fr, 3 << 30 | 1024 << 16 | ord("v") << 8 | 1, buf, True) > 0
    a.join()
check("a query call waiting on an exact batch", batch_then_call)
os.close(fi)
os.close(fr)
other.stdin.close()
other.wait()
PY
	T fusermount3 -u "$m"
}
check long_work_other_client_answered standby_ok
# out is served from the page cache: a shorter, then a longer result, each
# read whole by a new reader, with an honest size
sizes_ok() {
	local k n
	for k in 3 1 4 2; do
		printf 'k=%s mode=exact\n1 2 3 4\n' "$k" | put - "$M/query/q1/in" >/dev/null || return 1
		n=$(T cat "$M/query/q1/out" | wc -l)
		[[ $n == "$k" ]] || { echo "k=$k: $n lines" >&2; return 1; }
		[[ $(T stat -c %s "$M/query/q1/out") == $(T cat "$M/query/q1/out" | wc -c) ]] || return 1
	done
}
check query_out_follows_each_query sizes_ok
# the kernel's attributes of out are dropped only when it was given them
# since the last drop: queries that nobody stats between still leave stat
# with the size of the last one
unseen_ok() {
	T "$PY" -c '
import os, sys
d = sys.argv[1]
fi = os.open(d + "/in", os.O_WRONLY)
def q(k):
    os.pwrite(fi, b"k=%d mode=exact\n1 2 3 4\n" % k, 0)
    os.close(os.dup(fi))
def body():
    with open(d + "/out", "rb") as f:
        return f.read()
for held in (False, True):
    q(3)
    assert os.stat(d + "/out").st_size == len(body())
    q(1)
    assert os.stat(d + "/out").st_size == len(body())
    fo = os.open(d + "/out", os.O_RDONLY) if held else None
    for k in (4, 2, 4):
        q(k)
    b = body()
    assert b.count(b"\n") == 4, b
    assert os.stat(d + "/out").st_size == len(b), (held, os.stat(d + "/out").st_size, len(b))
if fo is not None:
    fo_body = os.pread(fo, 65536, 0)
    assert os.fstat(fo).st_size == len(fo_body) == len(b)
' "$M/query/q1"
}
check query_out_stat_after_unseen_queries unseen_ok
# several pages, shrinking by a few bytes: the last page is read afresh
pages_ok() {
	local k n want
	for k in 3 2 3; do
		{ echo "k=$k mode=exact"; for n in $(seq 400); do echo "1 2 3 $n"; done; } >"$TMP/many.in"
		put "$TMP/many.in" "$M/query/q1/in" >/dev/null || return 1
		want=$((400 * k + 399))
		n=$(T cat "$M/query/q1/out" | wc -l)
		[[ $n == "$want" ]] || { echo "k=$k: $n lines, want $want" >&2; return 1; }
		T "$PY" -c "import sys; d = open(sys.argv[1], 'rb').read(); sys.exit(b'\\0' in d or len(d) < 4096)" "$M/query/q1/out" || return 1
	done
}
check query_out_many_pages pages_ok
# out is passed through (the kernel reads a file of the daemon's, asking
# nothing) where the kernel offers passthrough and the daemon may register
# the file; -o no_passthrough turns it off
out_files() { # the daemon's files that back an out
	local pid
	pid=$(daemon_pid "$M") || return 1
	ls -l "/proc/$pid/fd" 2>/dev/null | grep -c 'memfd:vecfs-out'
}
pt_offered() {
	[[ $(id -u) == 0 ]] && zcat /proc/config.gz 2>/dev/null | grep -qx 'CONFIG_FUSE_PASSTHROUGH=y'
}
if pt_offered; then
	check query_out_passed_through test "$(out_files)" -ge 1
fi
# long requests on every pinned worker (one per CPU) and one more: further
# requests still get answers at once, and the extra workers started for them
# leave again once idle (the library's kept threads, one a CPU, named
# vecfs-kept, start when first needed and stay: not counted)
threads_of() {
	local t n=0
	for t in /proc/"$1"/task/*; do
		[[ $(cat "$t/comm" 2>/dev/null) == vecfs-kept ]] || n=$((n + 1))
	done
	echo "$n"
}
busy_ok() {
	local pid i ncpu before after started ended=0 pids=()
	pid=$(daemon_pid "$M")
	before=$(threads_of "$pid")
	started=$(workers_kv workers_started) || return 1
	ncpu=$(nproc)
	# queries long enough to be running still after the 0.3 s below,
	# whatever the machine: twice as many vectors until one takes 1 s (the
	# sessions' results together stay under query_results)
	local t0 t1
	NLONG=8000
	T mkdir -p "$M/query/long0" || return 1
	while :; do
		awk -v n="$NLONG" 'BEGIN { print "k=1 mode=exact"; for (i = 0; i < n; i++) print i % 7, 1, i % 5, 3 }' >"$TMP/long.in"
		t0=$(date +%s%N)
		[[ $(put "$TMP/long.in" "$M/query/long0/in") == OK ]] || return 1
		t1=$(date +%s%N)
		(((t1 - t0) >= 1000000000 || NLONG * 2 * (ncpu + 1) > 4000000)) && break
		NLONG=$((NLONG * 2))
	done
	for ((i = 0; i <= ncpu; i++)); do
		T mkdir -p "$M/query/long$i" || return 1
		put "$TMP/long.in" "$M/query/long$i/in" >"$TMP/long$i.res" &
		pids+=($!)
	done
	sleep 0.3
	T cat "$M/config" >/dev/null || return 1
	(($(workers_kv workers_started) > started)) || { echo "no extra worker started" >&2; return 1; }
	for i in "${pids[@]}"; do kill -0 "$i" 2>/dev/null || ended=1; done
	[[ $ended == 0 ]] || { echo "config was read only after a long query ended" >&2; return 1; }
	wait "${pids[@]}"
	for ((i = 0; i <= ncpu; i++)); do
		[[ $(cat "$TMP/long$i.res") == OK ]] || { echo "long query $i: $(cat "$TMP/long$i.res")" >&2; return 1; }
		[[ $(T cat "$M/query/long$i/out" | grep -c .) == "$NLONG" ]] || return 1
		T rmdir "$M/query/long$i" || return 1
	done
	for ((i = 0; i < 50; i++)); do
		after=$(threads_of "$pid")
		((after <= before)) && return 0
		sleep 0.1
	done
	echo "$before threads before, $after after" >&2
	return 1
}
check busy_workers_answer_others busy_ok
# a few steady clients at once keep the extra workers they need, rather
# than starting and ending one for every burst; idle, the extras leave
steady_ok() {
	local before after workers c
	sleep 2.5 # extra workers of the tests before leave (EXTRA_IDLE_MS)
	workers=$(workers_kv workers) || return 1
	before=$(workers_kv workers_started) || return 1
	for c in 1 2 3 4; do
		T mkdir -p "$M/query/st$c" || return 1
		T "$PY" -c "$HELD_LOOP" "$M/query/st$c" 400 &
	done
	wait || return 1
	after=$(workers_kv workers_started) || return 1
	((after - before <= 20)) || { echo "$((after - before)) workers started" >&2; return 1; }
	sleep 2.5 # EXTRA_IDLE_MS and a margin
	[[ $(workers_kv workers) == "$workers" ]] || { echo "$(workers_kv workers) workers stay; $(T getfattr --absolute-names --only-values -n user.workers "$M/stats" | tr '\n' ' '); 3 s later: $(sleep 3; T getfattr --absolute-names --only-values -n user.workers "$M/stats" | tr '\n' ' ')" >&2; return 1; }
}
check steady_clients_keep_workers steady_ok
check query_rmdir T rmdir "$M/query/q1"
check query_rmdir_gone test ! -e "$M/query/q1"

# ---------------------------------------------------------------- ctl, generations
check ctl_unknown test "$(printf 'frob\n' | put - "$M/ctl")" == "ERR EINVAL write"
check ctl_unknown_logged errors_has frob
check ctl_build T sh -c "echo build > '$M/ctl'"
g1=$(T readlink "$M/generations/active")
check build_active test -n "$g1" -a -d "$M/generations/$g1"
check meta_ready test "$(T cat "$M/generations/$g1/meta" | kv state)" == ready
# the codes' dimensions: dim rounded up to a multiple of 64
gdim=$(T cat "$M/generations/$g1/meta" | kv dim)
check meta_padded_dim test "$(T cat "$M/generations/$g1/meta" | kv padded_dim)" == $(((gdim + 63) / 64 * 64))
check meta_first_pass_table test "$(T cat "$M/generations/$g1/meta" | kv first_pass_table)" == query
check progress_done test "$(T cat "$M/generations/$g1/progress")" == "done 100%"
check centroids_size test "$(T cat "$M/generations/$g1/centroids.fvecs" | wc -c)" == "$(T stat -c %s "$M/generations/$g1/centroids.fvecs")"
check ctl_build_stage T sh -c "echo 'build stage' > '$M/ctl'"
g2=$(T ls "$M/generations" | grep -vx -e active -e "$g1" | head -n 1)
check stage_keeps_active test -n "$g2" -a "$(T readlink "$M/generations/active")" == "$g1"
check flip_ln T ln -sfn "$g2" "$M/generations/active"
check flip_ln_done test "$(T readlink "$M/generations/active")" == "$g2"
check flip_mv T sh -c "ln -s '$g1' '$M/generations/next' && mv -T '$M/generations/next' '$M/generations/active'"
check flip_mv_done test "$(T readlink "$M/generations/active")/$(T ls "$M/generations" | grep -c next)" == "$g1/0"
check flip_missing_fails test "$(T ln -sfn 999 "$M/generations/active" 2>&1 | wc -l)" -ge 1
check flip_missing_unchanged test "$(T readlink "$M/generations/active")" == "$g1"
# symlinks waiting in generations/ are bounded: a target past 1024 bytes is
# ENAMETOOLONG, a link past 256 ENOSPC, each with an errors line; removing
# some makes room again
links_bounded() {
	T "$PY" - "$M/generations" <<'PY' || return 1
import errno, os, sys
g = sys.argv[1]
try:
    os.symlink('x' * 2000, g + '/long')
    sys.exit('a target of 2000 bytes was taken')
except OSError as e:
    if e.errno != errno.ENAMETOOLONG:
        sys.exit('long target: %s' % e)
made = 0
try:
    for i in range(100000):
        os.symlink('1', '%s/l%d' % (g, i))
        made += 1
except OSError as e:
    if e.errno != errno.ENOSPC:
        sys.exit('link %d: %s' % (made, e))
if made != 256:
    sys.exit('%d links made' % made)
for i in range(made):
    os.unlink('%s/l%d' % (g, i))
os.symlink('1', g + '/again')
os.unlink(g + '/again')
PY
	errors_has "ln -s xxxxxxxx" && errors_has "generations/long: the target is 2000 bytes" &&
		errors_has "generations/l256: 256 symlinks wait in generations/"
}
check gen_links_bounded links_bounded
check rmdir_active_ebusy test "$(T rmdir "$M/generations/$g1" 2>&1 | grep -c 'busy')" == 1
check rmdir_other T rmdir "$M/generations/$g2"
check rmdir_other_gone test ! -e "$M/generations/$g2"
check gen_read_only test "$(printf 'x\n' | put - "$M/generations/$g1/meta")" == "ERR EACCES open"
check ctl_verify T sh -c "echo verify > '$M/ctl'"
check verify_line test "$(T cat "$M/errors" | tail -n 1 | cut -d' ' -f2- | cut -c1-10)" == "verify: ok"
check ctl_compact test "$(printf 'compact\n' | put - "$M/ctl")" == "OK"
check ctl_compact_folds test "$(T cat "$M/stats" | sed -n 's/^delta_postings = //p')" == 0
check ctl_rebalance test "$(printf 'rebalance\n' | put - "$M/ctl")" == "OK"
# reading ctl: the commands, and how each one last ran
T cat "$M/ctl" >"$TMP/ctl.txt"
check ctl_read_lists grep -q '^# commands, one a line: build, build stage, compact, rebalance, verify, salvage$' "$TMP/ctl.txt"
check ctl_read_build grep -Eq '^build: ok [0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:]{8}Z$' "$TMP/ctl.txt"
check ctl_read_rebalance grep -Eq '^rebalance: ok ' "$TMP/ctl.txt"
check ctl_read_salvage_not_run grep -q '^salvage: not run since the mount$' "$TMP/ctl.txt"
check ctl_read_size test "$(T stat -c '%a %s' "$M/ctl")" == "600 $(wc -c <"$TMP/ctl.txt")"
printf 'frob\n' | put - "$M/ctl" >/dev/null
check ctl_read_unknown_changes_nothing cmp -s "$TMP/ctl.txt" <(T cat "$M/ctl")
check rebalance_flips test "$(T readlink "$M/generations/active")" != "$g1"
g1=$(T readlink "$M/generations/active")

# ---------------------------------------------------------------- backup
mkdir -p "$TMP/bstore"
check backup_copy T cp "$M/backup" "$TMP/bstore/data.mdb"
if mnt "$TMP/bstore" "$TMP/bmnt"; then
	check backup_records test "$(T cat "$TMP/bmnt/stats" | kv records)" == "$(stat_kv records)"
	check backup_active test "$(T readlink "$TMP/bmnt/generations/active")" == "$g1"
	umnt "$TMP/bmnt"
	check backup_unmount test $? -eq 0
else
	bad backup_mount "$(tail -c 200 "$TMP/daemon.log")"
fi

# ---------------------------------------------------------------- inspect
# vecfs-inspect reads the store the daemon serves, and the backup copy,
# and writes nothing
INSPECT=$(dirname "$VECFS")/vecfs-inspect
if [[ -x $INSPECT ]]; then
	check inspect_records test "$(T "$INSPECT" "$S" | kv records)" == "$(stat_kv records)"
	check inspect_active test "$(T "$INSPECT" "$S" | kv active)" == "$(T readlink "$M/generations/active")"
	check inspect_keys test "$(T "$INSPECT" "$S" keys | sort | md5sum)" == "$(T ls "$M/records" | sort | md5sum)"
	key=$(T ls "$M/records" | head -1)
	check inspect_get test "$(T "$INSPECT" "$S" get "$key")" == "$(T cat "$M/records/$key")"
	check inspect_verify sh -c "timeout 60 '$INSPECT' '$S' verify | grep -q '^verify: ok'"
	check inspect_clusters test "$(T "$INSPECT" "$S" clusters | wc -l)" -gt 0
	check inspect_no_key sh -c "timeout 60 '$INSPECT' '$S' get no-such-key 2>/dev/null; test \$? -eq 1"
	check inspect_bad_command sh -c "timeout 60 '$INSPECT' '$S' frob 2>/dev/null; test \$? -eq 2"
	T rm "$M/records/$key"
	check inspect_sees_delete sh -c "! timeout 60 '$INSPECT' '$S' keys | grep -qxF -- '$key'"
	sum=$(md5sum <"$TMP/bstore/data.mdb")
	check inspect_backup test "$(T "$INSPECT" "$TMP/bstore" | kv active)" == "$g1"
	check inspect_writes_nothing test "$(md5sum <"$TMP/bstore/data.mdb")" == "$sum"
else
	bad inspect_built "$INSPECT"
fi

# ---------------------------------------------------------------- daemon
T "$VECFS" "$S" "$TMP/mnt2" >"$TMP/second.log" 2>&1 </dev/null
rc=$?
mkdir -p "$TMP/mnt2"
MOUNTS+=("$TMP/mnt2")
check second_daemon_refused test $rc -ne 0 -a -s "$TMP/second.log"
check second_daemon_not_mounted sh -c "! awk -v m='$TMP/mnt2' '\$2 == m { f = 1 } END { exit !f }' /proc/self/mounts"
n=$(stat_kv records)
pid=$(daemon_pid "$M")
kill -9 "$pid" 2>/dev/null
sleep 0.5
T fusermount3 -u "$M" 2>/dev/null || T fusermount3 -uz "$M"
if mnt "$S" "$M"; then
	check kill9_durable test "$(stat_kv records)" == "$n"
	pid=$(daemon_pid "$M")
	kill -TERM "$pid"
	for ((i = 0; i < 100; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
	check sigterm_exits sh -c "! kill -0 $pid 2>/dev/null"
	check sigterm_unmounts sh -c "! awk -v m='$M' '\$2 == m { f = 1 } END { exit !f }' /proc/self/mounts"
else
	bad remount_after_kill9 "$(tail -c 200 "$TMP/daemon.log")"
fi
# SIGTERM while a query runs: the query finishes and its close() succeeds,
# then the daemon exits and the mount is gone
if mnt "$S" "$M"; then
	T mkdir -p "$M/query/term"
	put "$TMP/long.in" "$M/query/term/in" >"$TMP/term.res" &
	putpid=$!
	sleep 0.3
	pid=$(daemon_pid "$M")
	kill -TERM "$pid"
	wait "$putpid"
	check sigterm_lets_query_finish test "$(cat "$TMP/term.res")" == OK
	for ((i = 0; i < 200; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
	check sigterm_after_query_exits sh -c "! kill -0 $pid 2>/dev/null"
	check sigterm_after_query_unmounts sh -c "! awk -v m='$M' '\$2 == m { f = 1 } END { exit !f }' /proc/self/mounts"
else
	bad remount_for_sigterm "$(tail -c 200 "$TMP/daemon.log")"
fi
# ---------------------------------------------------------------- bench
# vecfs-bench --mount --rounds: each round mounts the store again and
# measures through the mount, then with the library
BENCH=$(dirname "$VECFS")/vecfs-bench
DATA=$(dirname "$VECFS")/vecfs-data
bench_ok() {
	T "$DATA" --n 3000 --d 16 --queries 40 --quiet --out "$TMP/bset" || return 1
	TMPDIR=$TMP T "$BENCH" "$TMP/bset" --mount --vecfs "$VECFS" --nprobe 4,8 --rounds 2 \
		--json >"$TMP/bench.json" 2>"$TMP/bench.err" || { tail -3 "$TMP/bench.err" >&2; return 1; }
	"$PY" -c "
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert [r['nprobe'] for r in rows] == [4, 8], rows
for r in rows:
    assert r['rounds'] == 2 and r['recall_at_10'] > 0.5, r
    for k in ('ratio_median', 'ratio_pooled', 'held_ratio_median', 'held_ratio_pooled'):
        assert r[k] > 0, (k, r)
    # the round trips added, over the rounds: figures (a round whose
    # mount beat the library may make one negative)
    for k in ('held_added_rt_median', 'held_added_rt_pooled', 'call_added_rt_median',
              'call_added_rt_pooled'):
        assert isinstance(r[k], float) and abs(r[k]) < 1e4, (k, r)
" "$TMP/bench.json"
}
# vecfs-bench --batch: the same queries 7 to a call (the last call takes
# the rest) find what they find one to a call
bench_batch_ok() {
	TMPDIR=$TMP T "$BENCH" "$TMP/bset" --nprobe 4,8 --batch 7 --json \
		>"$TMP/batch.json" 2>"$TMP/batch.err" || { tail -3 "$TMP/batch.err" >&2; return 1; }
	"$PY" -c "
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
ivf = [r for r in rows if r['mode'] == 'ivf']
assert [r['nprobe'] for r in ivf] == [4, 8], rows
for r in ivf:
    assert r['batch'] == 7 and r['batch_qps'] > 0, r
    assert r['batch_recall_at_10'] == r['recall_at_10'], r
    assert r['passes'] == 2, r
" "$TMP/batch.json" || return 1
	# through the mount too: 7 queries an input find what they find alone
	TMPDIR=$TMP T "$BENCH" "$TMP/bset" --mount --nprobe 4 --batch 7 --json \
		>"$TMP/mbatch.json" 2>"$TMP/mbatch.err" || { tail -3 "$TMP/mbatch.err" >&2; return 1; }
	"$PY" -c "
import json, sys
rows = [r for r in map(json.loads, open(sys.argv[1])) if r['mode'] == 'mount']
assert [r['nprobe'] for r in rows] == [4], rows
for r in rows:
    assert r['batch'] == 7 and r['batch_qps'] > 0 and r['library_batch_qps'] > 0, r
    assert r['batch_recall_at_10'] == r['recall_at_10'] == r['held_recall_at_10'], r
    assert r['getattr_us'] > 0 and r['held_added_rt'] == r['held_added_rt'], r
    assert r['batch_fvecs_qps'] is None, r  # an nprobe an .fvecs input cannot ask for
" "$TMP/mbatch.json" || return 1
	# at the defaults the batches go as .fvecs rows too (no option line):
	# the same results as the text's
	TMPDIR=$TMP T "$BENCH" "$TMP/bset" --mount --nprobe 0 --batch 7 --rounds 2 --json \
		>"$TMP/fbatch.json" 2>"$TMP/fbatch.err" || { tail -3 "$TMP/fbatch.err" >&2; return 1; }
	"$PY" -c "
import json, sys
rows = [r for r in map(json.loads, open(sys.argv[1])) if r['mode'] == 'mount']
assert len(rows) == 1, rows
r = rows[0]
assert r['batch_fvecs_qps'] > 0 and r['batch_fvecs_ratio_pooled'] > 0, r
assert r['batch_fvecs_recall_at_10'] == r['batch_recall_at_10'] == r['recall_at_10'], r
" "$TMP/fbatch.json" || return 1
	# --passes: the fastest of P timed passes, with that pass's recall and
	# counters (the same queries find the same hits in every pass)
	TMPDIR=$TMP T "$BENCH" "$TMP/bset" --nprobe 4,8 --passes 3 --json \
		>"$TMP/passes.json" 2>"$TMP/passes.err" || { tail -3 "$TMP/passes.err" >&2; return 1; }
	"$PY" -c "
import json, sys
one = {r['nprobe']: r for r in map(json.loads, open(sys.argv[1])) if r['mode'] == 'ivf'}
three = [r for r in map(json.loads, open(sys.argv[2])) if r['mode'] == 'ivf']
assert [r['nprobe'] for r in three] == [4, 8], three
for r in three:
    assert r['passes'] == 3 and r['qps'] > 0, r
    for k in ('recall_at_10', 'pass1_scored', 'pass2_scored', 'clusters_probed'):
        assert r[k] == one[r['nprobe']][k], (k, r, one)
" "$TMP/batch.json" "$TMP/passes.json" || return 1
	[[ $(T "$BENCH" "$TMP/bset" --mount --passes 2 2>&1) == *"--passes times the library alone"* ]]
}
# vecfs-bench --ingest-after-build without --mount: half the base, a build,
# then the other half into the generation through vecfs_put
bench_after_build_ok() {
	TMPDIR=$TMP T "$BENCH" "$TMP/bset" --nprobe 8 --ingest-after-build --json \
		>"$TMP/after.json" 2>"$TMP/after.err" || { tail -3 "$TMP/after.err" >&2; return 1; }
	"$PY" -c "
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
ivf = [r for r in rows if r['mode'] == 'ivf']
assert len(ivf) == 1 and ivf[0]['recall_at_10'] > 0.5, rows
for r in rows:
    assert r['ingest_rows_per_s'] > 0 and r['ingest_after_build_rows_per_s'] > 0, r
" "$TMP/after.json"
}
# vecfs-bench --ingest-files: the second half as several files with the
# daemon's maintenance on, which the bench then waits for and turns off
bench_files_ok() {
	TMPDIR=$TMP T "$BENCH" "$TMP/bset" --mount --vecfs "$VECFS" --nprobe 8 \
		--ingest-after-build --ingest-files 6 --json >"$TMP/files.json" 2>"$TMP/files.err" ||
		{ tail -3 "$TMP/files.err" >&2; return 1; }
	"$PY" -c "
import json, sys
r = [json.loads(l) for l in open(sys.argv[1])][-1]
assert r['ingest_files'] == 6 and r['recall_at_10'] > 0.5, r
assert 0 < r['ingest_file_p50_s'] <= r['ingest_file_max_s'], r
assert r['ingest_compactions'] >= 1 and r['ingest_after_build_rows_per_s'] > 0, r
" "$TMP/files.json" || return 1
	[[ $(T "$BENCH" "$TMP/bset" --ingest-files 3 2>&1) == *"--ingest-files needs --mount"* ]]
}
if [[ -x $BENCH && -x $DATA ]]; then
	check bench_mount_rounds bench_ok
	check bench_ingest_files bench_files_ok
	check bench_batch bench_batch_ok
	check bench_library_after_build bench_after_build_ok
else
	bad bench_mount_rounds "$BENCH or $DATA is not built"
fi
# the same queries with out served through the daemon and the page cache
if mnt "$S" "$M" -o no_passthrough; then
	T mkdir -p "$M/query/q1"
	check no_passthrough_no_file test "$(out_files)" == 0
	check no_passthrough_out_follows sizes_ok
	check no_passthrough_many_pages pages_ok
	check no_passthrough_held held_ok "$M/query/q1"
	umnt "$M"
else
	bad mount_no_passthrough "$(tail -c 200 "$TMP/daemon.log")"
fi
# a worker that cannot put the device back into its epoll instance after a
# reply (out of memory) polls the device itself: requests are still served
if VECFS_FAULT_LISTEN=1 mnt "$S" "$M"; then
	T mkdir -p "$M/query/q1"
	check deaf_workers_serve_held held_ok "$M/query/q1"
	check deaf_workers_serve_shell serial_ok
	check deaf_workers_serve_sizes sizes_ok
	umnt "$M"
else
	bad mount_deaf_workers "$(tail -c 200 "$TMP/daemon.log")"
fi
# sessions are bounded in number (mkdir) and in the input they hold
# together (write): ENOSPC and a line in errors past either bound
limits_ok() {
	local i before
	printf 'a 1 2 3 4\nb 5 6 7 8\n' | put - "$M/ingest/l.txt" >/dev/null || return 1
	for i in 1 2 3; do T mkdir "$M/query/l$i" || return 1; done
	[[ $(T mkdir "$M/query/l4" 2>&1) == *"No space left on device"* ]] ||
		{ echo "a fourth session was made" >&2; return 1; }
	errors_has "mkdir query/l4: 3 query sessions are open" || return 1
	T rmdir "$M/query/l3" && T mkdir "$M/query/l4" || return 1
	head -c 700000 /dev/zero | tr '\0' '1' >"$TMP/big.in"
	[[ $(put "$TMP/big.in" "$M/query/l1/in") == "ERR EINVAL close" ]] || return 1
	[[ $(put "$TMP/big.in" "$M/query/l2/in") == "ERR ENOSPC write" ]] || return 1
	errors_has "query/l2/in: the query input of all sessions together is at its bound (1 MiB" || return 1
	# a write refused part way: the close fails, nothing of the input runs
	T "$PY" -c "
import errno, os, sys
fd = os.open(sys.argv[1] + '/in', os.O_WRONLY | os.O_TRUNC)
line = b'k=1\\n' + b'1 2 3 4\\n' * 8191
try:
    for _ in range(8):
        os.write(fd, line)
    sys.exit('no write was refused')
except OSError as e:
    assert e.errno == errno.ENOSPC, e
try:
    os.close(fd)
    sys.exit('close succeeded')
except OSError as e:
    assert e.errno == errno.EINVAL, e
assert open(sys.argv[1] + '/out').read() == ''
" "$M/query/l4" || return 1
	# rmdir ends a session whose out is open: its input no longer counts
	T "$PY" -c "
import os, sys
fd = os.open(sys.argv[1] + '/out', os.O_RDONLY)
os.rmdir(sys.argv[1])
os.close(fd)
" "$M/query/l1" || return 1
	[[ $(put "$TMP/big.in" "$M/query/l2/in") == "ERR EINVAL close" ]] || return 1
	# nor does it keep the file behind its out
	before=$(out_files)
	for i in 1 2 3 4 5; do
		T "$PY" -c "
import os, sys
os.mkdir(sys.argv[1])
fd = os.open(sys.argv[1] + '/out', os.O_RDONLY)
os.rmdir(sys.argv[1])
os.close(fd)
" "$M/query/r$i" || return 1
	done
	(($(out_files) <= before)) || { echo "$before backing files before, $(out_files) after" >&2; return 1; }
}
if mnt "$TMP/lstore" "$M" -o max_sessions=3,query_input_mb=1; then
	check sessions_bounded limits_ok
	umnt "$M"
else
	bad mount_limits "$(tail -c 200 "$TMP/daemon.log")"
fi
if mnt "$S" "$M" -o fsname=vecfstest; then
	check o_passthrough grep -q "^vecfstest $M " /proc/self/mounts
	check fusermount_unmount umnt "$M"
fi

# ---------------------------------------------------------------- what each directory allows
# Every operation that makes, removes or renames a name (mknod, create,
# mkdir, symlink, rename in the directory and into ingest/, unlink, rmdir),
# and readlink, on an entry of each directory: the errno (readlink: the
# target), and the errors line written.
cat >"$TMP/dirops.py" <<'EOF'
import errno, os, re, sys
M = sys.argv[1]
G = os.readlink(M + "/generations/active")
def errs():
    with open(M + "/errors") as f:
        return f.read().splitlines()
seen = len(errs())
for d, names in (("", ["README", "nosuch"]), ("ingest/", ["bad.zzz"]), ("records/", ["ka"]),
                 ("query/", ["qb"]), ("query/qa/", ["out"]), ("generations/", [G, "active", G + "_l"]),
                 ("generations/" + G + "/", ["meta"])):
    for n in names:
        p = M + "/" + d + n
        for op, fn in (("readlink", lambda: os.readlink(p)),
                       ("mknod", lambda: os.mknod(p + "_n")),
                       ("create", lambda: os.close(os.open(p + "_c", os.O_CREAT | os.O_WRONLY, 0o600))),
                       ("mkdir", lambda: os.mkdir(p + "_d")),
                       ("symlink", lambda: os.symlink("7", p + "_l")),
                       ("rename", lambda: os.rename(p, p + "_r")),
                       ("rename-to-ingest", lambda: os.rename(p, M + "/ingest/" + n + "_x")),
                       ("unlink", lambda: os.unlink(p)),
                       ("rmdir", lambda: os.rmdir(p))):
            try:
                out = fn() or "ok"
            except OSError as e:
                out = errno.errorcode.get(e.errno, str(e.errno))
            lines = errs()
            new = " // ".join(re.sub(r"^\S+\s+", "", l) for l in lines[seen:])
            seen = len(lines)
            print(re.sub(r"(?<![0-9a-z])%s(?![0-9])" % G, "GEN", f"{op} {d}{n}: {out} {new}".rstrip()))
EOF
cat >"$TMP/dirops.want" <<'EOF'
readlink README: EINVAL
mknod README: EPERM mknod /README_n: no file or node can be made here
create README: EPERM README_c: files cannot be created here (write into ingest/)
mkdir README: EPERM mkdir /README_d: directories can only be made in query/
symlink README: EPERM ln -s 7 README_l: symlinks can only be made in generations/
rename README: EPERM mv //README //README_r: only symlinks in generations/ can be renamed (onto active)
rename-to-ingest README: EXDEV mv //README ingest/README_x: only symlinks in generations/ can be renamed (onto active)
unlink README: EPERM rm README: cannot be removed
rmdir README: ENOTDIR
readlink nosuch: ENOENT
mknod nosuch: EPERM mknod /nosuch_n: no file or node can be made here
create nosuch: EPERM nosuch_c: files cannot be created here (write into ingest/)
mkdir nosuch: EPERM mkdir /nosuch_d: directories can only be made in query/
symlink nosuch: EPERM ln -s 7 nosuch_l: symlinks can only be made in generations/
rename nosuch: ENOENT
rename-to-ingest nosuch: ENOENT
unlink nosuch: ENOENT
rmdir nosuch: ENOENT
readlink ingest/bad.zzz: ENOENT
mknod ingest/bad.zzz: EPERM mknod ingest/bad.zzz_n: files are made here by opening them for writing (cp, >, open)
create ingest/bad.zzz: EINVAL ingest/bad.zzz_c: unknown file type: the name must end in .csv, .tsv, .txt, .jsonl, .ndjson, .fvecs, .bvecs or .npy (then .part for a staged file)
mkdir ingest/bad.zzz: EPERM mkdir ingest/bad.zzz_d: directories can only be made in query/
symlink ingest/bad.zzz: EPERM ln -s 7 bad.zzz_l: symlinks can only be made in generations/
rename ingest/bad.zzz: ENOENT
rename-to-ingest ingest/bad.zzz: ENOENT
unlink ingest/bad.zzz: ENOENT
rmdir ingest/bad.zzz: ENOENT
readlink records/ka: EINVAL
mknod records/ka: EPERM mknod records/ka_n: no file or node can be made here
create records/ka: EPERM records/ka_c: records are made by writing files into ingest/
mkdir records/ka: EPERM mkdir records/ka_d: directories can only be made in query/
symlink records/ka: EPERM ln -s 7 ka_l: symlinks can only be made in generations/
rename records/ka: EPERM mv records/ka records/ka_r: only symlinks in generations/ can be renamed (onto active)
rename-to-ingest records/ka: EXDEV mv records/ka ingest/ka_x: only symlinks in generations/ can be renamed (onto active)
unlink records/ka: ok
rmdir records/ka: ENOENT
readlink query/qb: ENOENT
mknod query/qb: EPERM mknod query/qb_n: no file or node can be made here
create query/qb: EPERM query/qb_c: make a session with mkdir query/ID
mkdir query/qb: ok
symlink query/qb: EPERM ln -s 7 qb_l: symlinks can only be made in generations/
rename query/qb: ENOENT
rename-to-ingest query/qb: ENOENT
unlink query/qb: ENOENT
rmdir query/qb: ENOENT
readlink query/qa/out: EINVAL
mknod query/qa/out: EPERM mknod query/qa/out_n: no file or node can be made here
create query/qa/out: EPERM query/qa/out_c: a session holds only in, out, out.json and stats
mkdir query/qa/out: EPERM mkdir query/qa/out_d: directories can only be made in query/
symlink query/qa/out: EPERM ln -s 7 out_l: symlinks can only be made in generations/
rename query/qa/out: EPERM mv query/qa/out query/qa/out_r: only symlinks in generations/ can be renamed (onto active)
rename-to-ingest query/qa/out: EXDEV mv query/qa/out ingest/out_x: only symlinks in generations/ can be renamed (onto active)
unlink query/qa/out: ok
rmdir query/qa/out: ENOTDIR
readlink generations/GEN: EINVAL
mknod generations/GEN: EPERM mknod generations/GEN_n: no file or node can be made here
create generations/GEN: EACCES generations/GEN_c: generations are read-only
mkdir generations/GEN: EACCES mkdir generations/GEN_d: generations are made by writing `build` to ctl
symlink generations/GEN: ok
rename generations/GEN: EPERM mv generations/GEN: generations and active cannot be renamed
rename-to-ingest generations/GEN: EXDEV mv generations/GEN ingest/GEN_x: only symlinks in generations/ can be renamed (onto active)
unlink generations/GEN: EISDIR
rmdir generations/GEN: EBUSY rmdir generations/GEN: it is the active generation, or still building
readlink generations/active: GEN
mknod generations/active: EPERM mknod generations/active_n: no file or node can be made here
create generations/active: EACCES generations/active_c: generations are read-only
mkdir generations/active: EACCES mkdir generations/active_d: generations are made by writing `build` to ctl
symlink generations/active: ok
rename generations/active: EPERM mv generations/active: generations and active cannot be renamed
rename-to-ingest generations/active: EXDEV mv generations/active ingest/active_x: only symlinks in generations/ can be renamed (onto active)
unlink generations/active: EPERM rm generations/active: active cannot be removed; flip it with `ln -sfn GEN generations/active`
rmdir generations/active: ENOTDIR
readlink generations/GEN_l: 7
mknod generations/GEN_l: EPERM mknod generations/GEN_l_n: no file or node can be made here
create generations/GEN_l: EACCES generations/GEN_l_c: generations are read-only
mkdir generations/GEN_l: EACCES mkdir generations/GEN_l_d: generations are made by writing `build` to ctl
symlink generations/GEN_l: ok
rename generations/GEN_l: ok
rename-to-ingest generations/GEN_l: ENOENT
unlink generations/GEN_l: ENOENT
rmdir generations/GEN_l: ENOENT
readlink generations/GEN/meta: EINVAL
mknod generations/GEN/meta: EPERM mknod generations/GEN/meta_n: no file or node can be made here
create generations/GEN/meta: EACCES generations/GEN/meta_c: generations are read-only
mkdir generations/GEN/meta: EACCES mkdir generations/GEN/meta_d: generations are made by writing `build` to ctl
symlink generations/GEN/meta: EPERM ln -s 7 meta_l: symlinks can only be made in generations/
rename generations/GEN/meta: EPERM mv generations/GEN/meta generations/GEN/meta_r: only symlinks in generations/ can be renamed (onto active)
rename-to-ingest generations/GEN/meta: EXDEV mv generations/GEN/meta ingest/meta_x: only symlinks in generations/ can be renamed (onto active)
unlink generations/GEN/meta: EPERM rm generations/GEN/meta: cannot be removed
rmdir generations/GEN/meta: ENOTDIR
EOF
if mnt "$TMP/dstore" "$M"; then
	printf 'ka,1,2,3,4\nkb,2,3,4,5\nkc,5,5,5,5\nkd,1,1,1,1\n' >"$M/ingest/a.csv"
	T sh -c "echo build > '$M/ctl'" && T mkdir "$M/query/qa" &&
		T "$PY" "$TMP/dirops.py" "$M" >"$TMP/dirops.out" 2>&1
	check directory_operations diff -u "$TMP/dirops.want" "$TMP/dirops.out"
	umnt "$M"
else
	bad mount_dirops "$(tail -c 200 "$TMP/daemon.log")"
fi


# ================================================================ ingest/: who commits, appends, writers, staged files
# A store of its own, with an ingest buffer budget of 8 MiB.  Each check of
# ingest.py prints "NAME OK" or "NAME why".
cat >"$TMP/ingest.py" <<'EOF'
import errno, os, struct, subprocess, sys, threading, time
mnt = sys.argv[1]
I = mnt + '/ingest/'
def row(k, v):
    return ('%s,%s\n' % (k, ','.join([str(v)] * 4))).encode()
def has(k):
    return os.path.exists(mnt + '/records/' + k)
def listed(name):
    return name in os.listdir(mnt + '/ingest')
def gone(name):  # a release may come a moment after the close returned
    for _ in range(20):
        if not listed(name):
            return True
        time.sleep(0.1)
    return False
def res(name, ok, why='FAIL'):
    print(name, 'OK' if ok else why)
def err(fn):
    try:
        fn()
        return 0
    except OSError as e:
        return e.errno
def opn(name, flags=os.O_CREAT | os.O_TRUNC):
    return os.open(I + name, os.O_WRONLY | flags, 0o644)
# a forked child that only inherited the descriptor: its close commits nothing
fd = opn('f.csv')
os.write(fd, row('f0', 1)[:4])
pid = os.fork()
if pid == 0:
    os.close(fd)
    os._exit(0)
os.waitpid(pid, 0)
res('child_close_commits_nothing', not has('f0') and listed('f.csv'))
os.write(fd, row('f0', 1)[4:])
os.close(fd)
res('writer_close_commits', has('f0') and not listed('f.csv'))
# nor does a subprocess that inherits it
fd = opn('g.csv')
os.write(fd, row('g0', 1)[:4])
subprocess.run(['true'], pass_fds=(fd,), check=True)
res('subprocess_commits_nothing', not has('g0'))
os.write(fd, row('g0', 1)[4:])
os.close(fd)
res('subprocess_then_writer', has('g0'))
# a thread of the writing process shares its lock owner: its close commits
fd = opn('t.csv')
th = threading.Thread(target=lambda: os.write(fd, row('t0', 1)))
th.start(); th.join()
th = threading.Thread(target=lambda: os.close(fd))
th.start(); th.join()
res('thread_close_commits', has('t0'))
# writes append
fd = opn('w.csv')
os.write(fd, row('w0', 1))
res('overwrite_einval', err(lambda: os.pwrite(fd, row('w9', 9), 0)) == errno.EINVAL)
err(lambda: os.close(fd))
fd = opn('h.csv')
os.write(fd, row('h0', 1))
res('hole_einval', err(lambda: os.pwrite(fd, row('h9', 9), 4096)) == errno.EINVAL)
err(lambda: os.close(fd))
res('bad_offsets_commit_nothing', not has('w0') and not has('w9') and not has('h0'))
fd = opn('a.csv')
a0 = row('a0', 1)
os.write(fd, a0)
res('pwrite_at_end', err(lambda: os.pwrite(fd, row('a1', 2), len(a0))) == 0)
os.close(fd)
res('pwrite_at_end_commits', has('a1'))
# one writer a name
fd = opn('b.csv')
os.write(fd, row('b0', 1))
res('second_create_ebusy', err(lambda: os.close(opn('b.csv'))) == errno.EBUSY)
res('second_open_ebusy', err(lambda: os.close(opn('b.csv', 0))) == errno.EBUSY)
os.write(fd, row('b1', 2))
os.close(fd)
res('first_writer_commits', has('b0') and has('b1'))
fd = opn('b.csv')
os.write(fd, row('b2', 3))
os.close(fd)
res('name_free_after_commit', has('b2'))
# writes through a descriptor still open after its commit: a new file
fd = opn('c.csv')
os.write(fd, row('c0', 1))
pid = os.fork()
if pid == 0:
    os.write(fd, row('c1', 2))
    os.close(fd)
    os._exit(0)
os.waitpid(pid, 0)
res('child_writer_commits', has('c0') and has('c1') and not listed('c.csv'))
os.write(fd, row('c2', 3))
os.close(fd)
res('write_after_commit_new_file', has('c2'))
# staged files
fd = opn('s.csv.part')
os.write(fd, row('s0', 1) + row('s1', 2)[:3])
os.close(fd)
fd = opn('s.csv.part', os.O_APPEND)
os.write(fd, row('s1', 2)[3:])
os.close(fd)
res('part_commits_nothing', not has('s0') and listed('s.csv.part'))
size = os.stat(I + 's.csv.part').st_size
busy = opn('s.csv')
os.write(busy, row('x0', 1))
res('part_onto_busy_ebusy', err(lambda: os.rename(I + 's.csv.part', I + 's.csv')) == errno.EBUSY)
os.close(busy)
res('part_unchanged', os.stat(I + 's.csv.part').st_size == size and not has('s0'))
res('part_other_name_einval', err(lambda: os.rename(I + 's.csv.part', I + 't.csv')) == errno.EINVAL)
res('part_rename_commits', err(lambda: os.rename(I + 's.csv.part', I + 's.csv')) == 0 and has('s0') and has('s1'))
res('part_leaves_ingest', not listed('s.csv.part') and not listed('s.csv'))
fd = opn('bad.csv.part')
os.write(fd, row('bad0', 1) + b'bad1,1,oops,1,1\n')
os.close(fd)
res('bad_part_rename_einval', err(lambda: os.rename(I + 'bad.csv.part', I + 'bad.csv')) == errno.EINVAL)
res('bad_part_nothing_committed', not has('bad0') and not listed('bad.csv.part'))
fd = opn('r.csv.part')
os.write(fd, row('r0', 1))
os.close(fd)
os.unlink(I + 'r.csv.part')
res('rm_part_discards', not listed('r.csv.part') and not has('r0'))
fd = opn('z.csv.part')
os.write(fd, row('z0', 1))
os.close(fd)
fd = opn('z.csv.part')  # O_TRUNC: it starts over
os.write(fd, row('z1', 2))
os.close(fd)
res('part_trunc_starts_over', err(lambda: os.rename(I + 'z.csv.part', I + 'z.csv')) == 0 and has('z1') and not has('z0'))
fd = opn('u.csv.part')
os.write(fd, row('u0', 1))
os.close(fd)
# empty files
res('empty_csv_zero_rows', err(lambda: os.close(opn('e.csv'))) == 0 and gone('e.csv'))
res('empty_npy_einval', err(lambda: os.close(opn('e.npy'))) == errno.EINVAL and gone('e.npy'))
# a shell's redirection closes the descriptor it dup'ed before cat writes
hdr = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 4), }".ljust(117) + '\n'
with open(sys.argv[2], 'wb') as f:
    f.write(b'\x93NUMPY\x01\x00' + struct.pack('<H', len(hdr)) + hdr.encode() + struct.pack('<8f', *range(8)))
r = subprocess.run(['bash', '-c', 'cat "$1" > "$2"', '_', sys.argv[2], I + 'cat.npy'])
res('shell_redirect_npy', r.returncode == 0 and gone('cat.npy') and has('0') and has('1'))
# a byte order mark opens the text, not the key
fd = opn('bom.csv')
os.write(fd, b'\xef\xbb\xbf' + row('bom0', 1))
os.close(fd)
res('bom_dropped', has('bom0'))
# the buffers of open files together stay under -o ingest_buffer_mb
fds, failed = [], 0
for i in range(12):
    fd = opn('m%d.txt' % i)
    fds.append(fd)
    data = b'm%d' % i + b' 1' * (1 << 19)
    try:  # refused part way (the kernel writes 128 KiB at a time): short
        failed += os.write(fd, data) < len(data)
    except OSError as e:
        failed += e.errno == errno.ENOMEM
for fd in fds:
    err(lambda: os.close(fd))
res('budget_enomem', failed > 0, 'no write failed with ENOMEM')
fd = opn('after.csv')
os.write(fd, row('after0', 1))
os.close(fd)
res('budget_freed', has('after0'))
EOF
IS=$TMP/istore
if mnt "$IS" "$M" -o ingest_buffer_mb=8; then
	check ingest_config test "$(printf 'dim = 4\nauto_build = 0\n' | put - "$M/config")" == OK
	T "$PY" "$TMP/ingest.py" "$M" "$TMP/cat.npy" >"$TMP/ingest.res" 2>&1
	check ingest_py_ran grep -q budget_freed "$TMP/ingest.res"
	while read -r name verdict; do
		if [[ $verdict == OK ]]; then ok "ingest_$name"; else bad "ingest_$name" "$verdict"; fi
	done < <(grep -E '^[a-z_0-9]+ ' "$TMP/ingest.res")
	grep -vE '^[a-z_0-9]+ ' "$TMP/ingest.res" | head -5
	check ingest_errors_overwrite errors_has "ingest/w.csv: a write at offset 0"
	check ingest_errors_busy errors_has "ingest/b.csv: is being written"
	check ingest_errors_bad_part errors_has "ingest/bad.csv.part: line 2"
	check ingest_errors_npy errors_has "ingest/e.npy: empty"
	check ingest_errors_budget errors_has "ingest_buffer_mb"
	check ingest_shell_redirect_npy_no_error sh -c "! timeout 60 cat '$M/errors' | grep -qF cat.npy"
	# a shell loop whose $(...) children close the redirected descriptor
	T bash -c 'for i in 1 2 3; do printf "e%d" "$i"; for j in $(seq 4); do printf " 0.5"; done; echo; done >"$1"' _ "$M/ingest/loop.txt"
	check ingest_shell_loop test -e "$M/records/e3" -a -e "$M/records/e1"
	check ingest_shell_loop_no_error sh -c "! timeout 60 cat '$M/errors' | grep -qF loop.txt"
	# coreutils mv of a bad staged file: renameat2(RENAME_NOREPLACE) first,
	# then, after its EINVAL, a plain rename; both fail with EINVAL (which
	# mv words as "cannot move ... to a subdirectory of itself"), one errors
	# line gives the reason, and the file stays for mv to look at (not
	# "cannot stat ...: No such file or directory"), until rm
	printf 'mv0,1,1,1,1\nmv1,1,1\n' | put - "$M/ingest/mvbad.csv.part" >/dev/null
	mvout=$(T mv "$M/ingest/mvbad.csv.part" "$M/ingest/mvbad.csv" 2>&1)
	check ingest_mv_bad_part_fails test $? -ne 0
	check ingest_mv_bad_part_einval grep -q "cannot move '$M/ingest/mvbad.csv.part' to a subdirectory of itself" <<<"$mvout"
	check ingest_mv_bad_part_not_enoent bash -c '! grep -q "No such file" <<<"$1"' _ "$mvout"
	check ingest_mv_bad_part_reason errors_has "ingest/mvbad.csv.part: line 2: 2 numbers, expected 4"
	check ingest_mv_bad_part_one_line test "$(T cat "$M/errors" | grep -c 'mvbad.csv.part')" == 1
	check ingest_mv_bad_part_stays test -e "$M/ingest/mvbad.csv.part" -a ! -e "$M/records/mv0"
	check ingest_mv_bad_part_rm T rm "$M/ingest/mvbad.csv.part"
	check ingest_mv_bad_part_gone test ! -e "$M/ingest/mvbad.csv.part" -a ! -e "$M/records/mv0"
	# renameat2(RENAME_NOREPLACE), then plain renames, by hand: EINVAL each
	# time and one errors line; the second plain rename takes the file away
	printf 'nr0,1,1,1,1\nnr1,x,1,1,1\n' | put - "$M/ingest/nr.csv.part" >/dev/null
	T "$PY" - "$M/ingest" >"$TMP/noreplace.res" 2>&1 <<'PY'
import ctypes, errno, os, sys
libc = ctypes.CDLL(None, use_errno=True)
d = sys.argv[1].encode()
def rn(flags):
    r = libc.renameat2(-100, d + b'/nr.csv.part', -100, d + b'/nr.csv', flags)
    return errno.errorcode.get(0 if r == 0 else ctypes.get_errno(), 'ok')
print('noreplace', rn(1), os.path.exists(d + b'/nr.csv.part'))
print('plain', rn(0), os.path.exists(d + b'/nr.csv.part'))
print('again', rn(0), os.path.exists(d + b'/nr.csv.part'))
PY
	check ingest_noreplace_einval_stays grep -qx 'noreplace EINVAL True' "$TMP/noreplace.res"
	check ingest_noreplace_plain_einval_stays grep -qx 'plain EINVAL True' "$TMP/noreplace.res"
	check ingest_noreplace_again_einval_gone grep -qx 'again EINVAL False' "$TMP/noreplace.res"
	check ingest_noreplace_reason errors_has "ingest/nr.csv.part: line 2: value 1 'x' is not a number"
	check ingest_noreplace_one_line test "$(T cat "$M/errors" | grep -c 'nr.csv.part')" == 1
	check ingest_noreplace_nothing_committed test ! -e "$M/records/nr0"
	# a good staged file under coreutils mv commits
	printf 'mg0,1,1,1,1\n' | put - "$M/ingest/mvgood.csv.part" >/dev/null
	check ingest_mv_good_part T mv "$M/ingest/mvgood.csv.part" "$M/ingest/mvgood.csv"
	check ingest_mv_good_committed test -e "$M/records/mg0" -a ! -e "$M/ingest/mvgood.csv.part"
	umnt "$M"
	if mnt "$IS" "$M"; then
		check ingest_part_gone_after_remount test ! -e "$M/ingest/u.csv.part"
		check ingest_part_never_committed test ! -e "$M/records/u0"
		# and after a crash
		check ingest_part_before_crash test "$(printf 'k0,1,1,1,1\n' | put - "$M/ingest/k.csv.part")" == OK
		kill -9 "$(daemon_pid "$M")"
		sleep 0.5
		T fusermount3 -uz "$M" 2>/dev/null
		if mnt "$IS" "$M"; then
			check ingest_part_gone_after_crash test ! -e "$M/ingest/k.csv.part"
			check ingest_part_crash_never_committed test ! -e "$M/records/k0"
			check ingest_no_spool_left sh -c "! ls -A '$IS' | grep -q spool"
			umnt "$M"
		else
			bad mount_after_crash "$(tail -c 200 "$TMP/daemon.log")"
		fi
	fi
else
	bad mount_ingest "$(tail -c 200 "$TMP/daemon.log")"
fi
# dim 16384: ingest, build, an ANN query that finds each row
if mnt "$TMP/wstore" "$M"; then
	gen "$TMP/wide.fvecs" 4 16384 7
	check wide_ingest test "$(put "$TMP/wide.fvecs" "$M/ingest/wide.fvecs")" == OK
	check wide_dim test "$(stat_kv dim)" == 16384
	check wide_build test "$(printf 'build\n' | put - "$M/ctl")" == OK
	T mkdir -p "$M/query/w"
	check wide_query test "$(T "$PY" -c '
import struct, sys
d = open(sys.argv[1], "rb").read()[65540 * 2 + 4:65540 * 3]
v = struct.unpack("<16384f", d)
open(sys.argv[2] + "/in", "w").write("k=1\n" + " ".join("%.9g" % x for x in v) + "\n")
print(open(sys.argv[2] + "/out").read().split("\t")[0])' "$TMP/wide.fvecs" "$M/query/w")" == 2
	umnt "$M"
else
	bad mount_wide "$(tail -c 200 "$TMP/daemon.log")"
fi

# ================================================================ access, limits, errors, signals
# A store of its own, mounted afresh for each part.
A=$TMP/astore
M=$TMP/mnt

# one ctl or config descriptor written by one thread while another closes dups of it
shared_fd() { # FILE LINE: two threads on one descriptor for 2 s; 0 when the daemon still serves
	T "$PY" - "$1" "$2" <<'EOF' || return 1
import os, sys, threading, time
fd = os.open(sys.argv[1], os.O_WRONLY)
line = sys.argv[2].encode() + b"\n"
end = time.time() + 2
def writer():
    while time.time() < end:
        try:
            os.write(fd, line)
        except OSError:
            pass
def closer():
    while time.time() < end:
        try:
            os.close(os.dup(fd))
        except OSError:
            pass
ts = [threading.Thread(target=writer), threading.Thread(target=closer)]
for t in ts: t.start()
for t in ts: t.join()
try:
    os.close(fd)
except OSError:
    pass
EOF
	T cat "$M/stats" >/dev/null
}
if mnt "$A" "$M"; then
	check shared_ctl_fd shared_fd "$M/ctl" verify
	check shared_config_fd shared_fd "$M/config" "k = 7"
	check shared_fd_still_serving test "$(T cat "$M/config" | kv k)" == 7
	umnt "$M"
else
	bad mount_access "$(tail -c 200 "$TMP/daemon.log")"
fi

# who may do what: the kernel enforces the modes (default_permissions);
# with allow_other, another user reads README, stats, config and generations/ only
nobody() { T setpriv --reuid=65534 --regid=65534 --clear-groups "$@" 2>/dev/null; }
perms_other() {
	grep -q "^[^ ]* $M [^ ]* [^ ]*default_permissions" /proc/self/mounts || return 1
	nobody cat "$M/README" >/dev/null && nobody cat "$M/stats" >/dev/null &&
		nobody cat "$M/config" >/dev/null && nobody ls "$M/generations" >/dev/null || return 1
	# a payload is read only by the owner, like its record
	[[ $(xa get "$M/records/p" user.payload) == 7 ]] || return 1
	! nobody "$PY" -c 'import os, sys; os.getxattr(sys.argv[1], "user.payload")' "$M/records/p" &&
		! nobody "$PY" -c 'import os, sys; os.listxattr(sys.argv[1])' "$M/records/p" || return 1
	! nobody cat "$M/backup" >/dev/null && ! nobody cat "$M/errors" >/dev/null &&
		! nobody ls "$M/records" >/dev/null && ! nobody ls "$M/ingest" >/dev/null &&
		! nobody mkdir "$M/query/nb" && ! nobody sh -c "echo k = 9 >'$M/config'" &&
		! nobody sh -c "echo compact >'$M/ctl'" || return 1
	[[ $(T cat "$M/config" | kv k) != 9 && ! -e $M/query/nb ]]
}
if [[ $(id -u) == 0 ]] && command -v setpriv >/dev/null; then
	chmod 711 "$TMP"
	if mnt "$A" "$M" -o allow_other; then
		put - "$M/ingest/p.jsonl" <<<'{"key": "p", "vector": [9, 9, 9, 9], "payload": 7}' >/dev/null
		check perms_allow_other perms_other
		umnt "$M"
	else
		bad mount_allow_other "$(tail -c 200 "$TMP/daemon.log")"
	fi
else
	echo "SKIP perms_allow_other: needs root and setpriv"
fi

# descriptors held open on a generation's file by another user share one
# rendering of it: 300 of them on a 4 MiB centroids.fvecs (nlist 64, dim
# 16384) raise the daemon's resident memory by less than 64 MiB; past
# -o read_buffer_mb a descriptor on another file fails with ENOMEM and an
# errors line
rss_held() { # PID FILE N: MiB the daemon's VmRSS grew while N descriptors of FILE were held (as nobody)
	nobody "$PY" - "$@" <<'EOF'
import os, sys
pid, path, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
def rss():
    for l in open('/proc/%s/status' % pid):
        if l.startswith('VmRSS:'):
            return int(l.split()[1]) // 1024
first = open(path, 'rb').read()
before = rss()
fds = [os.open(path, os.O_RDONLY) for _ in range(n)]
grown = rss() - before
ok = all(os.pread(fd, len(first) + 1, 0) == first for fd in fds[::50])
for fd in fds:
    os.close(fd)
print(grown if ok and len(first) > 0 else 'bad content')
EOF
}
wide_rows() { # OUT N: N rows of dim 16384 about 64 centres
	"$PY" - "$@" <<'EOF'
import array, random, struct, sys
r = random.Random(5)
with open(sys.argv[1], 'wb') as f:
    for i in range(int(sys.argv[2])):
        c = i % 64
        v = array.array('f', [c + r.random() * 0.1 for _ in range(16384)])
        f.write(struct.pack('<i', 16384) + v.tobytes())
EOF
}
read_budget() { # G1 G2: descriptors held on G1's centroids leave no room for G2's
	T "$PY" - "$M/generations/$1/centroids.fvecs" "$M/generations/$2/centroids.fvecs" <<'EOF'
import errno, os, sys
a = os.open(sys.argv[1], os.O_RDONLY)
b = os.open(sys.argv[1], os.O_RDONLY)  # the same rendering: no more room taken
try:
    os.close(os.open(sys.argv[2], os.O_RDONLY))
    sys.exit('opened past the budget')
except OSError as e:
    if e.errno != errno.ENOMEM:
        raise
os.close(a)
os.close(b)
os.close(os.open(sys.argv[2], os.O_RDONLY))  # room again
EOF
}
if [[ $(id -u) == 0 ]] && command -v setpriv >/dev/null; then
	chmod 711 "$TMP"
	wide_rows "$TMP/wide64.fvecs" 256
	if mnt "$TMP/rstore" "$M" -o allow_other,read_buffer_mb=6; then
		printf 'nlist = 64\n' | put - "$M/config" >/dev/null
		put "$TMP/wide64.fvecs" "$M/ingest/w.fvecs" >/dev/null
		printf 'build\nbuild stage\n' | put - "$M/ctl" >/dev/null
		r1=$(T readlink "$M/generations/active")
		r2=$(T ls "$M/generations" | grep -vx -e active -e "$r1" | head -n 1)
		check held_centroids_size test "$(T stat -c %s "$M/generations/$r1/centroids.fvecs")" == $((64 * (4 + 4 * 16384)))
		grown=$(rss_held "$(daemon_pid "$M")" "$M/generations/$r1/centroids.fvecs" 300)
		echo "  daemon VmRSS grew ${grown:-?} MiB while 300 descriptors were held"
		check held_descriptors_share_rendering test "${grown:-x}" -lt 64
		check read_budget_enomem read_budget "$r1" "$r2"
		check read_budget_errors_line errors_has "generations/$r2/centroids.fvecs: "
		umnt "$M"
	else
		bad mount_read_budget "$(tail -c 200 "$TMP/daemon.log")"
	fi
else
	echo "SKIP held_descriptors_share_rendering: needs root and setpriv"
fi

# errors: each line starts with its UTC time; a name cannot forge lines;
# a flood of one failure keeps the other lines
errors_lines() {
	printf 'no_such_key_mt = 1\n' | put - "$M/config" >/dev/null
	T "$PY" -c "
import os, sys
for name in ['a\nforged\x1b[2J'] + ['bad name'] * 2000:
    try:
        os.mkdir(os.path.join(sys.argv[1], name))
    except OSError:
        pass
" "$M/query" || return 1
	T cat "$M/errors" >"$TMP/errors" || return 1
	! grep -vqE '^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z ' "$TMP/errors" &&
		grep -qF 'no_such_key_mt' "$TMP/errors" && grep -qF 'a\nforged\x1b[2J' "$TMP/errors" &&
		! grep -q '^forged' "$TMP/errors" &&
		grep -q 'mkdir query/bad name: .* [.][.][.] and 1,990 more like it$' "$TMP/errors" &&
		(($(wc -l <"$TMP/errors") < 100))
}
# distinct failures are never summed up: fourteen bad files in a row give
# fourteen lines, each naming its file
errors_distinct() {
	local i n=0
	for ((i = 1; i <= 14; i++)); do
		printf 'k%d,1,2,x\n' "$i" | put - "$M/ingest/bad$i.csv" >/dev/null
	done
	T cat "$M/errors" >"$TMP/errors" || return 1
	for ((i = 1; i <= 14; i++)); do
		[[ $(grep -c "ingest/bad$i[.]csv: " "$TMP/errors") == 1 ]] && n=$((n + 1))
	done
	((n == 14)) && ! grep -q 'ingest/bad.*more like it' "$TMP/errors"
}
if mnt "$A" "$M"; then
	check errors_stamped_escaped_limited errors_lines
	check errors_distinct_files errors_distinct
	umnt "$M"
else
	bad mount_errors "$(tail -c 200 "$TMP/daemon.log")"
fi

# an empty in fails its close with EINVAL and an errors line; a shell's
# redirection (which closes a dup before writing) runs its query alone
empty_in() {
	T mkdir -p "$M/query/e1" || return 1
	printf 'a,1,2,3,4\nb,5,6,7,8\n' | put - "$M/ingest/e.csv" >/dev/null
	[[ $(put /dev/null "$M/query/e1/in") == "ERR EINVAL close" ]] || return 1
	errors_has 'query/e1/in: no query vector' || return 1
	local n0
	n0=$(T cat "$M/errors" | wc -l)
	T bash -c "printf 'k=1 mode=exact\n1 2 3 4\n' >'$M/query/e1/in'" || return 1
	[[ $(T cat "$M/errors" | wc -l) == "$n0" && $(T cat "$M/query/e1/out") == a* ]]
}
# the same through a bind mount of the mount point (a container's view):
# the descriptor the shell keeps is known by the file it is open on, not
# by the path it shows
empty_in_bind() {
	local b=$TMP/bind n0
	mkdir -p "$b" && T mount --bind "$M" "$b" || return 1
	MOUNTS+=("$b")
	n0=$(T cat "$M/errors" | wc -l)
	T bash -c "printf 'k=1 mode=exact\n5 6 7 8\n' >'$b/query/e1/in'"
	local rc=$?
	local out
	out=$(T cat "$b/query/e1/out")
	T umount "$b"
	[[ $rc == 0 && $(T cat "$M/errors" | wc -l) == "$n0" && $out == b* ]]
}
if mnt "$A" "$M"; then
	check empty_in_einval empty_in
	if [[ $(id -u) == 0 ]]; then
		check empty_in_bind_mount empty_in_bind
	fi
	umnt "$M"
else
	bad mount_empty_in "$(tail -c 200 "$TMP/daemon.log")"
fi

# stray signals are ignored, SIGHUP unmounts cleanly; a second mount on a
# live mount is refused; a stale mount point is named as such
signals_ignored() {
	local pid s
	pid=$(daemon_pid "$M") || return 1
	for s in USR1 USR2 ALRM; do kill -s "$s" "$pid" || return 1; done
	sleep 0.3
	T cat "$M/stats" >/dev/null || return 1
	kill -s HUP "$pid" || return 1
	for ((s = 0; s < 50; s++)); do is_mounted "$M" || break; sleep 0.1; done
	! is_mounted "$M"
}
remount_refused() {
	local out
	out=$(T "$VECFS" "$TMP/other" "$M" 2>&1) && return 1
	[[ $out == *"already a mount point"* ]] && T cat "$M/stats" >/dev/null
}
stale_named() {
	local pid out i
	pid=$(daemon_pid "$M") || return 1
	kill -9 "$pid"
	for ((i = 0; i < 50; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
	out=$(T "$VECFS" "$A" "$M" 2>&1) && return 1
	T fusermount3 -u "$M"
	[[ $out == *"the mount point is stale: run fusermount3 -u $M"* ]]
}
if mnt "$A" "$M"; then
	check signals_ignored signals_ignored
else
	bad mount_signals "$(tail -c 200 "$TMP/daemon.log")"
fi
if mnt "$A" "$M"; then
	check remount_refused remount_refused
	check stale_mount_named stale_named
	is_mounted "$M" && umnt "$M"
else
	bad mount_stale "$(tail -c 200 "$TMP/daemon.log")"
fi

# a query asking for more results (vectors x k) than -o query_results fails
# its close with E2BIG, before it takes the memory
results_bounded() {
	local pid hwm
	T mkdir -p "$M/query/big" || return 1
	printf 'a,1,2,3,4\nb,5,6,7,8\n' | put - "$M/ingest/r.csv" >/dev/null
	T "$PY" -c 'import sys; sys.stdout.write("k=100000 mode=exact\n" + "1 2 3 4\n" * 2000)' >"$TMP/bigq"
	[[ $(put "$TMP/bigq" "$M/query/big/in") == "ERR E2BIG close" ]] || return 1
	errors_has 'query/big/in: 2000 query vectors x k=100000' || return 1
	pid=$(daemon_pid "$M") || return 1
	hwm=$(awk '/^VmHWM/ { print $2 }' "/proc/$pid/status")
	((hwm < 262144)) || { echo "daemon peak RSS $hwm KiB" >&2; return 1; }
	[[ $(printf 'k=1 mode=exact\n1 2 3 4\n' | put - "$M/query/big/in") == OK ]]
}
if mnt "$A" "$M"; then
	check query_results_bounded results_bounded
	umnt "$M"
else
	bad mount_results "$(tail -c 200 "$TMP/daemon.log")"
fi

# ================================================================ filters
# filter= keeps only the records whose payload matches, exact and ANN; the
# query's stats count the matches; a malformed filter fails the close with
# EINVAL, one past the limits with E2BIG, each with a line in errors
F=$TMP/fstore
fq() { # SESSION OPTIONS FILTER: the keys found, space-separated
	printf '%s\nfilter=%s\n0.5 0 0 0\n' "$2" "$3" | put - "$M/query/$1/in" >/dev/null || return 1
	T cut -f1 "$M/query/$1/out" | tr '\n' ' '
}
filtered() {
	local mode
	printf '%s\n' '{"key": "fa", "vector": [1, 0, 0, 0], "payload": {"lang": "en", "year": 2001}}' \
		'{"key": "fb", "vector": [2, 0, 0, 0], "payload": {"lang": "fr", "year": 2010, "n": {"x": 3}}}' \
		'{"key": "fc", "vector": [3, 0, 0, 0], "payload": {"lang": "en", "year": 2020, "tags": ["x", "y"]}}' \
		'{"key": "fd", "vector": [4, 0, 0, 0]}' | put - "$M/ingest/f.jsonl" >/dev/null || return 1
	T mkdir -p "$M/query/f1" || return 1
	for mode in mode=exact build mode=ann; do
		if [[ $mode == build ]]; then
			[[ $(printf 'build\n' | put - "$M/ctl") == OK ]] || return 1
			continue
		fi
		[[ $(fq f1 "k=10 $mode" '{"lang": "en"}') == "fa fc " ]] || return 1
		[[ $(fq f1 "k=1 $mode" '{"lang": "en"}') == "fa " ]] || return 1
		[[ $(fq f1 "$mode k=10" '{"year": {"$gte": 2010}}') == "fb fc " ]] || return 1
		[[ $(fq f1 "$mode" '{"tags": "y", "lang": {"$in": ["en", "de"]}}') == "fc " ]] || return 1
		[[ $(fq f1 "$mode" '{"lang": {"$ne": "en"}}') == "fb fd " ]] || return 1
		[[ $(fq f1 "$mode" '{"$or": [{"n.x": 3}, {"year": {"$exists": false}}]}') == "fb fd " ]] || return 1
		[[ $(fq f1 "$mode" '{"$not": {"lang": "en"}}') == "fb fd " ]] || return 1
		[[ $(fq f1 "$mode" '{"lang": "de"}') == "" ]] || return 1
		[[ -z $(T cat "$M/query/f1/out") ]] || return 1
		# on one line with the options
		[[ $(printf 'k=10 %s filter={"lang": "fr"}\n0 0 0 0\n' "$mode" | put - "$M/query/f1/in") == OK &&
			$(T cut -f1 "$M/query/f1/out") == fb ]] || return 1
	done
	fq f1 k=10 '{"lang": "en"}' >/dev/null
	T grep -qx 'filter_passed = 2' "$M/query/f1/stats" || return 1
	T grep -q '"payload": {"lang": "en", "year": 2020, "tags": \["x", "y"\]}' "$M/query/f1/out.json" || return 1
	# unfiltered stats name no filter
	printf 'k=2\n0 0 0 0\n' | put - "$M/query/f1/in" >/dev/null
	! T grep -q filter "$M/query/f1/stats" || return 1
	T mkdir -p "$M/query/fbad" || return 1
	[[ $(printf 'k=2\nfilter={"lang": {"$regex": "e"}}\n0 0 0 0\n' | put - "$M/query/fbad/in") == "ERR EINVAL close" ]] || return 1
	errors_has 'query/fbad/in: line 2: filter: unknown operator' || return 1
	[[ $(printf 'k=2\nfilter=\n0 0 0 0\n' | put - "$M/query/fbad/in") == "ERR EINVAL close" ]] || return 1
	[[ $(printf 'k=2\nfilter={"a": 1} {"b": 2}\n0 0 0 0\n' | put - "$M/query/fbad/in") == "ERR EINVAL close" ]] || return 1
	"$PY" -c 'import sys; n = 40; sys.stdout.write("k=3\nfilter=" + "{\"$not\": " * n + "{\"a\": 1}" + "}" * n + "\n0 0 0 0\n")' >"$TMP/fdeep"
	[[ $(put "$TMP/fdeep" "$M/query/fbad/in") == "ERR E2BIG close" ]] || return 1
	errors_has 'query/fbad/in: line 2: filter: nested 41 deep' || return 1
	# the session still answers
	[[ $(fq fbad k=1 '{"lang": "fr"}') == "fb " ]]
}
if mnt "$F" "$M"; then
	check filter_queries filtered
	umnt "$M"
else
	bad mount_filter "$(tail -c 200 "$TMP/daemon.log")"
fi

# ================================================================ cosine
# a zero query vector under cosine is refused at the close: the errors line
# names its line of in (blank lines, options and good vectors before it)
C=$TMP/cstore
if mnt "$C" "$M"; then
	printf 'metric = cosine\n' | put - "$M/config" >/dev/null
	printf 'c1,1,0,0,0\nc2,0,1,0,0\n' | put - "$M/ingest/c.csv" >/dev/null
	T mkdir "$M/query/cq"
	check cosine_zero_query_refused test "$(printf 'k=2\r\n1 0 0 0\r\n\r\n0 0 0 0\r\n' | put - "$M/query/cq/in")" != OK
	check cosine_zero_query_line errors_has "query/cq/in: line 4: query 2 is a zero vector under the cosine metric"
	umnt "$M"
else
	bad mount_cosine "$(tail -c 200 "$TMP/daemon.log")"
fi

# ================================================================ damaged records
# A record whose stored bytes fail their checksum (a byte flipped in
# data.mdb while unmounted): reading it fails with EIO, rm removes it, and
# ctl salvage names each lost key in errors and leaves a store that verifies.
D=$TMP/dstore
damage() { # STORE VALUE...: flip a byte inside each record's vector bytes
	T "$PY" - "$@" <<'PY'
import struct, sys
p = sys.argv[1] + '/data.mdb'
data = bytearray(open(p, 'rb').read())
for v in sys.argv[2:]:
    pat = struct.pack('<4f', *([float(v)] * 4))
    i = data.find(pat)
    assert i >= 0, v
    data[i + 5] ^= 0x40
open(p, 'wb').write(bytes(data))
PY
}
if mnt "$D" "$M"; then
	printf 'ok1,1,1,1,1\nbad1,7.25,7.25,7.25,7.25\nbad2,9.5,9.5,9.5,9.5\nok2,2,2,2,2\n' | put - "$M/ingest/d.csv" >/dev/null
	umnt "$M"
	damage "$D" 7.25 9.5
	if mnt "$D" "$M"; then
		check damaged_read_eio sh -c "! cat '$M/records/bad1' 2>/dev/null"
		check damaged_read_errors_line errors_has "records/bad1: the record fails its checksum (damaged)"
		check damaged_stat_no_errors_line test "$(T stat -c %s "$M/records/bad2" >/dev/null; T cat "$M/errors" | grep -c bad2)" == 0
		check damaged_xattr_eio sh -c "! getfattr -n user.payload '$M/records/bad2' >/dev/null 2>&1"
		check damaged_xattr_errors_line errors_has "records/bad2: user.payload: the record fails its checksum (damaged)"
		T mkdir "$M/query/dq"
		check damaged_query_eio test "$(printf 'k=4 mode=exact\n9 9 9 9\n' | put - "$M/query/dq/in")" != OK
		check damaged_query_errors_line errors_has "query/dq/in: a posting block or record failed its checksum or is damaged (echo verify > ctl names it"
		check damaged_rm rm "$M/records/bad1"
		check damaged_rm_gone sh -c "! test -e '$M/records/bad1'"
		check damaged_salvage test "$(printf 'salvage\n' | put - "$M/ctl")" == OK
		check damaged_salvage_names_key errors_has 'salvage: lost record bad2'
		check damaged_intact test "$(T cat "$M/records/ok2")" == "2 2 2 2"
		check damaged_verify test "$(printf 'verify\n' | put - "$M/ctl")" == OK
		umnt "$M"
	else
		bad mount_damaged "$(tail -c 200 "$TMP/daemon.log")"
	fi
else
	bad mount_damage_store "$(tail -c 200 "$TMP/daemon.log")"
fi

# A posting block that fails its checksum: ctl salvage drops the active
# generation and, automatic builds on (the default), builds a new one from
# the records in the same command; every row is still found.
D2=$TMP/dstore2
damage_blocks() { # STORE: flip a byte in every posting block's header
	T "$PY" - "$@" <<'PY'
import struct, sys
p = sys.argv[1] + '/data.mdb'
data = bytearray(open(p, 'rb').read())
magic, n, i = struct.pack('<I', 0x35425656), 0, 0
while (i := data.find(magic, i)) >= 0:
    data[i + 40] ^= 0x40
    n, i = n + 1, i + 4
assert n > 0
open(p, 'wb').write(bytes(data))
PY
}
if mnt "$D2" "$M"; then
	awk 'BEGIN { for (i = 0; i < 400; i++) { printf "b%d", i
		for (j = 0; j < 8; j++) printf ",%d", (i * 7 + j * 3) % 23; print "" } }' |
		put - "$M/ingest/b.csv" >/dev/null
	printf 'build\n' | put - "$M/ctl" >/dev/null
	g1=$(T readlink "$M/generations/active")
	umnt "$M"
	damage_blocks "$D2"
	if mnt "$D2" "$M"; then
		check damaged_block_salvage test "$(printf 'salvage\n' | put - "$M/ctl")" == OK
		check damaged_block_dropped errors_has '1 generation(s) dropped'
		check damaged_block_rebuilding errors_has 'salvage: no generation is active now: building a new one'
		g2=$(T readlink "$M/generations/active")
		check damaged_block_new_generation test -n "$g1" -a -n "$g2" -a "$g2" != "$g1"
		check damaged_block_verify test "$(printf 'verify\n' | put - "$M/ctl")" == OK
		check damaged_block_rows test "$(T ls "$M/records" | wc -l)" == 400
		umnt "$M"
	else
		bad mount_damaged_block "$(tail -c 200 "$TMP/daemon.log")"
	fi
else
	bad mount_damage_block_store "$(tail -c 200 "$TMP/daemon.log")"
fi

summary
