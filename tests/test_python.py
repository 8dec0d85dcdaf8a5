"""Tests of tools/python/vecfs against a fresh mount.

Usage: python3 tests/test_python.py MOUNTPOINT [--no-numpy]
Prints `PASS NAME` or `FAIL NAME: why` per check; exit status 1 if any failed.
--no-numpy hides numpy from the module (the standard-library path).
"""

import builtins
import errno
import io
import math
import os
import random
import signal
import struct
import subprocess
import sys
import threading
import time

MNT = sys.argv[1]
NO_NUMPY = "--no-numpy" in sys.argv
if NO_NUMPY:
    sys.modules["numpy"] = None          # `import numpy` raises ImportError
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools", "python"))
import vecfs                              # noqa: E402
from vecfs import Index, VecfsError       # noqa: E402

np = None if NO_NUMPY else __import__("numpy")
FAILED = 0
DIM = 16


def check(name, cond, why=""):
    global FAILED
    if cond:
        print("PASS", name, flush=True)
    else:
        FAILED += 1
        print("FAIL %s: %s" % (name, why), flush=True)


def raises(fn, exc=VecfsError):
    try:
        fn()
    except exc as e:
        return e
    return None


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def l2(a, b):
    return sum((f32(x) - f32(y)) ** 2 for x, y in zip(a, b))


def tolist(x):
    return x.tolist() if hasattr(x, "tolist") else list(x)


rng = random.Random(1)
rows = [[f32(rng.uniform(-1, 1)) for _ in range(DIM)] for _ in range(1000)]
data = np.array(rows, dtype=np.float32) if np is not None else rows
check("numpy_path" if np is not None else "no_numpy_path", (vecfs.np is None) == NO_NUMPY)

# ------------------------------------------------------------ open, config
e = raises(lambda: Index("/"))
check("not_a_mount", e is not None and e.errno == errno.ENOENT, repr(e))
ix = Index(MNT)
ix.set_config(auto_build=0)
check("config_read", ix.config["auto_build"] == 0 and ix.get_config()["k"] == 10, repr(ix.get_config()))
ix.config["k"] = 7
ix.config.update(refine=12)
check("config_write", ix.config["k"] == 7 and ix.config["refine"] == 12)
ix.config = {"k": 10}
check("config_assign", ix.config["k"] == 10 and ix.config["refine"] == 12)
e = raises(lambda: ix.set_config(k=5, bogus=1))
check("config_bad_key", e is not None and e.errno == errno.EINVAL and
      any("bogus" in line for line in e.lines) and ix.config["k"] == 10, repr(e))
check("error_str_has_line", e is not None and "bogus" in str(e), str(e))
# the same failure again (the same line in `errors`, likely the same second):
# each call gets its line, once
e2 = raises(lambda: ix.set_config(k=5, bogus=1))
check("error_again_has_line", e2 is not None and len(e2.lines) == 1 and "bogus" in e2.lines[0] and
      len(e.lines) == 1, repr((e.lines, getattr(e2, "lines", None))))
check("new_lines_overlap", Index._new_lines(["a", "b", "b"], ["b", "b", "b", "c", "c"]) == ["b", "c"] and
      Index._new_lines(["x", "b"], ["b", "b"]) == ["b"] and Index._new_lines([], ["a", "a"]) == ["a"] and
      Index._new_lines(["a"], ["a"]) == [])

# ------------------------------------------------------------ add
keys = ix.add(data)
check("add_assigned_keys", keys == [str(i) for i in range(1000)], repr(keys)[:200])
v, p = ix.get("7")
check("get_vector", tolist(v) == rows[7] and p is None, repr((v, p)))
check("get_type", isinstance(v, list) if np is None else isinstance(v, np.ndarray))
got = ix.add([[1.0] * DIM, [0.5] * DIM], keys=["a", "b, c"],
             payloads=[{"colour": "red", "n": [1, 2]}, "plain"])
check("add_keys_payloads", got == ["a", "b, c"])
check("get_payload", ix.get("a")[1] == {"colour": "red", "n": [1, 2]} and ix.get("b, c")[1] == "plain")
ix.add([[2.0] * DIM], keys=["nop"])
check("get_no_payload", ix.get("nop")[1] is None)
check("len_keys_contains", len(ix) == 1003 and sum(1 for _ in ix.keys()) == 1003 and "a" in ix and "zz" not in ix)
check("add_one_vector", ix.add([3.0] * DIM, keys="one") == ["one"] and tolist(ix.get("one")[0]) == [3.0] * DIM)
check("add_empty", ix.add([]) == [])
check("add_keys_count", raises(lambda: ix.add([[1.0] * DIM], keys=["x", "y"]), ValueError) is not None)
check("add_bad_key_refused", raises(lambda: ix.add([[1.0] * DIM], keys=[".."]), ValueError) is not None)

e = raises(lambda: ix.add([[1.0, 2.0, 3.0]]))
check("bad_dim_error", e is not None and e.errno == errno.EINVAL and len(e.lines) == 1 and
      "ingest/" in e.lines[0] and "expected 16" in e.lines[0], repr(e) + repr(getattr(e, "lines", "")))
e = raises(lambda: ix.add([[1.0] * DIM], keys=["big"], payloads=["x" * 70000]))
check("payload_limit_error", e is not None and e.errno == errno.EINVAL and e.lines and "big" not in ix,
      repr(e))
e = raises(lambda: ix.add([[1.0] * DIM, [float("nan")] * DIM]))
check("nan_error", e is not None and e.errno == errno.EINVAL and e.lines and len(ix) == 1004, repr(e))
check("no_files_left", [n for n in os.listdir(MNT + "/ingest")] == [])

# ------------------------------------------------------------ search
k, d = ix.search(rows[7], k=3)
check("search_one", len(k) == 3 and k[0] == "7" and d[0] == 0.0 and d[1] <= d[2], repr((k, d)))
check("search_one_types", isinstance(k, list) and isinstance(d, list) if np is None else
      (isinstance(k, np.ndarray) and k.ndim == 1 and d.dtype == np.float32))
qs = [rows[i] for i in (1, 2, 3, 500, 999)]
qarg = np.array(qs, dtype=np.float32) if np is not None else qs
K, D = ix.search(qarg, k=5, exact=True)
check("search_batch_shape", len(K) == 5 and all(len(r) == 5 for r in K) and len(D) == 5)
# the same queries through a session written by hand
os.makedirs(MNT + "/query/manual", exist_ok=True)
with open(MNT + "/query/manual/in", "w") as f:
    f.write("k=5 mode=exact\n" + "".join(" ".join(repr(x) for x in q) + "\n" for q in qs))
with open(MNT + "/query/manual/out") as f:
    blocks = [[line.split("\t") for line in b.splitlines()] for b in f.read().rstrip("\n").split("\n\n")]
check("exact_equals_mode_exact", [tolist(r) for r in K] == [[x[0] for x in b] for b in blocks] and
      [tolist(r) for r in D] == [[f32(float(x[1])) for x in b] for b in blocks],
      repr((K, blocks))[:300])
live = {str(i): rows[i] for i in range(1000)}
live.update({"a": [1.0] * DIM, "b, c": [0.5] * DIM, "nop": [2.0] * DIM, "one": [3.0] * DIM})
ok = True
for q, kr, dr in zip(qs, K, D):
    ref = sorted(live, key=lambda key: l2(q, live[key]))[:5]
    ok &= tolist(kr) == ref and all(abs(float(a) - l2(q, live[b])) <= 1e-4 * (1 + float(a)) for a, b in zip(dr, kr))
check("exact_equals_brute_force", ok)
K2, D2 = ix.search(qarg, k=5)
check("ann_batch_before_build", [tolist(r) for r in K2] == [tolist(r) for r in K])
K3, D3 = ix.search(qarg[:2], k=1010)
check("batch_padded", len(K3[0]) == 1010 and K3[0][1004] is None and math.isinf(D3[1][1009]) and
      K3[0][1003] is not None, repr(K3[0][1000:]))
k1, d1 = ix.search(rows[3], k=1010)
check("one_not_padded", len(k1) == 1004)
e = raises(lambda: ix.search([1.0, 2.0], k=3))
check("search_bad_dim", e is not None and e.errno == errno.EINVAL and e.lines and "in" in e.lines[-1], repr(e))
check("search_error_lines_once", e is not None and len(e.lines) == 1, repr(getattr(e, "lines", None)))
e2 = raises(lambda: ix.search([1.0, 2.0], k=3))
check("search_error_again", e2 is not None and len(e2.lines) == 1 and "2 numbers" in e2.lines[0],
      repr(getattr(e2, "lines", None)))
k, d = ix.search(rows[7], k=1)
check("search_after_error", tolist(k) == ["7"], repr(k))

# one query a call: the session's files stay open, nothing opened or made
calls = []
real = {(mod, name): getattr(mod, name) for mod, name in
        ((os, "open"), (os, "makedirs"), (os, "mkdir"), (os, "rmdir"), (builtins, "open"), (io, "open"))}
for (mod, name), fn in real.items():
    setattr(mod, name, lambda *a, _n=name, _f=fn, **kw: (calls.append(_n), _f(*a, **kw))[1])
try:
    good = all(tolist(ix.search(rows[j], k=1)[0]) == [str(j)] for j in range(50))
finally:
    for (mod, name), fn in real.items():
        setattr(mod, name, fn)
check("search_held_descriptors", good and calls == [], repr(calls[:6]))
K4, D4 = ix.search(qarg, k=5, exact=True)
check("search_held_batch", [tolist(r) for r in K4] == [tolist(r) for r in K] and
      [tolist(r) for r in D4] == [tolist(r) for r in D])
if np is not None:
    q64 = np.array(rows[11], dtype=np.float64)
    check("search_float64_row", tolist(ix.search(q64, k=1)[0]) == ["11"])
    check("text_rows_float32", [f32(float(x)) for x in next(vecfs._text_rows(np.array([rows[3]], dtype=np.float32))).split()] == rows[3])

# a forked child makes its own sessions; the parent's go on serving
pid = os.fork()
if pid == 0:
    try:
        ok_child = tolist(ix.search(rows[12], k=1)[0]) == ["12"]
        ix.close()
    except BaseException:
        ok_child = False
    os._exit(0 if ok_child else 1)
_, status = os.waitpid(pid, 0)
check("fork_child_searches", os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, repr(status))
check("fork_parent_searches", tolist(ix.search(rows[13], k=1)[0]) == ["13"] and
      not any(("py-%d-" % pid) in s for s in os.listdir(MNT + "/query")))

# options
ix.build()
st = ix.stats()
check("build_stats", st["active"] == 1 and st["records"] == 1004 and st["metric"] == "l2" and
      st["recall_estimate"] is None and isinstance(st["cluster_imbalance"], float), repr(st))


def session_files(name):
    """The bytes of file `name` of each of the module's sessions."""
    out = []
    for s in os.listdir(MNT + "/query"):
        if s.startswith("py-"):
            with open("%s/query/%s/%s" % (MNT, s, name), "rb") as f:
                out.append(f.read())
    return out


def session_stats():
    return [vecfs._parse_kv(b.decode()) for b in session_files("stats")]


# a search is the query call (an ioctl of in) when it fits: it leaves the
# session's in, out and stats as they were, so what the module asked for is
# read here from the stats of the write path, which sends the same request
before = session_files("in")
k, d = ix.search(rows[10], k=3)
check("search_is_the_call", list(k[:1]) == ["10"] and len(k) == 3 and
      session_files("in") == before, repr((k, before, session_files("in"))))
ix._no_call = True
k, d = ix.search(rows[10], k=4, recall=0.9)
ss = session_stats()
check("recall_option", k[0] == "10" and len(ss) == 1 and ss[0].get("recall_target") == 0.9 and
      ss[0]["k"] == 4 and ss[0]["mode"] == "ann", repr(ss))
k, d = ix.search(rows[10], k=4, nprobe=2, refine=20)
ss = session_stats()
check("nprobe_option", k[0] == "10" and ss[0]["nprobe"] == 2 and ss[0]["refine"] == 20, repr(ss))
k, d = ix.search(rows[10], k=4, exact=True)
check("exact_option", session_stats()[0]["mode"] == "exact")
ix._no_call = False
check("options_text", vecfs._options(3, {"colour": "red"}, 0.9, None, True, None) ==
      'k=3 recall=0.9 mode=exact\nfilter={"colour": "red"}\n')
k, d = ix.search([1.0] * DIM, k=3, filter={"colour": "red"})
check("filter_passed", tolist(k) == ["a"], repr(k))
try:
    ix.search([1.0] * DIM, k=3, filter={"colour": {"$regex": "r"}})
    check("filter_malformed", False, "no error")
except VecfsError as e:
    check("filter_malformed", e.errno == errno.EINVAL and any("filter" in line for line in e.lines), repr(e))

# threads share sessions from the pool
res = {}


def worker(t):
    r = []
    for i in range(20):
        j = (t * 37 + i) % 1000
        r.append(tolist(ix.search(rows[j], k=1, exact=True)[0]) == [str(j)])
    res[t] = all(r)


ths = [threading.Thread(target=worker, args=(t,)) for t in range(4)]
for t in ths:
    t.start()
for t in ths:
    t.join()
check("threads", len(res) == 4 and all(res.values()) and 1 <= len(session_stats()) <= 4, repr(res))

# a search lets the interpreter's other threads run while it waits for the
# daemon: with the daemon stopped for half a second, a search (the query
# call) waits in its thread while this one sleeps 50 ms and wakes on time
def daemon_pid():
    me = os.path.realpath(MNT).encode()
    for p in os.listdir("/proc"):
        try:
            with open("/proc/%s/cmdline" % p, "rb") as f:
                args = f.read().split(b"\0")
        except OSError:
            continue
        if len(args) >= 2 and os.path.basename(args[0]) == b"vecfs" and \
                os.path.realpath(args[-2]) == me:
            return int(p)
    return None


pid = daemon_pid()
woke = None
if pid:
    # (started first: the child's closing of our descriptors of the mount
    # would wait for the stopped daemon)
    subprocess.Popen(["sh", "-c", "sleep 0.5; kill -CONT %d" % pid])
    os.kill(pid, signal.SIGSTOP)
    th = threading.Thread(target=lambda: ix.search(rows[1], k=60))
    th.start()
    t0 = time.monotonic()
    time.sleep(0.05)
    woke = time.monotonic() - t0
    th.join()
check("search_lets_threads_run", woke is not None and woke < 0.3,
      "no daemon found" if pid is None else "a sleep of 50 ms took %.3f s" % woke)

for sess in os.listdir(MNT + "/query"):        # sessions removed under the Index
    if sess.startswith("py-"):
        os.rmdir(MNT + "/query/" + sess)
check("session_made_again", tolist(ix.search(rows[9], k=1)[0]) == ["9"] and len(session_stats()) == 1)

# ------------------------------------------------------------ delete, ctl
check("delete_one", ix.delete("a") == 1 and "a" not in ix)
check("get_missing", raises(lambda: ix.get("a"), KeyError) is not None)
check("delete_missing", raises(lambda: ix.delete("a"), KeyError) is not None)
check("delete_some_missing", raises(lambda: ix.delete(["nop", "a"]), KeyError) is not None and "nop" not in ix)
check("delete_missing_ok", ix.delete(["a", "one"], missing_ok=True) == 1 and "one" not in ix)
check("delete_bad_key", raises(lambda: ix.delete(".."), ValueError) is not None)
# through `delete`: one commit (last_delete counts all of it), a filter too
ix.add([[4.0] * DIM, [5.0] * DIM, [6.0] * DIM, [7.0] * DIM], keys=["d1", 'd"2', "d3", "d4"],
       payloads=[{"g": "x"}, {"g": "x"}, {"g": "y"}, {"g": "x"}])
n_before = len(ix)
check("delete_many_one_commit", ix.delete(["d1", 'd"2']) == 2 and ix.stats()["last_delete"] == 2 and
      len(ix) == n_before - 2 and "d1" not in ix and 'd"2' not in ix)
check("delete_filter", ix.delete(filter={"g": "x"}) == 1 and ix.stats()["last_delete"] == 1 and
      "d4" not in ix and "d3" in ix)
e = raises(lambda: ix.delete(["d3", "gone"]), KeyError)
check("delete_many_missing", e is not None and e.args[0] == "gone" and "d3" not in ix and
      ix.stats()["last_delete"] == 1, repr(e))
ix.add([[4.0] * DIM, [5.0] * DIM], keys=["d5", "d6"], payloads=[{"g": "z"}, None])
check("delete_keys_and_filter", ix.delete(["d6", "gone"], missing_ok=True, filter={"g": "z"}) == 2 and
      ix.stats()["last_delete"] == 2 and "d5" not in ix and "d6" not in ix)
e = raises(lambda: ix.delete(filter={"g": {"$regex": "x"}}))
check("delete_bad_filter", e is not None and e.errno == errno.EINVAL and len(e.lines) == 1 and
      "delete" in e.lines[0], repr(e))
check("delete_nothing", ix.delete([]) == 0)

# export: (key, vector, payload) a record, streamed, in key order
it = ix.export()
first = next(it)
check("export_streams", iter(it) is it and first[0] == sorted(ix.keys())[0], repr(first)[:100])
recs = [first] + list(it)
check("export_all", [r[0] for r in recs] == sorted(ix.keys()) and len(recs) == len(ix))
by = {r[0]: r for r in recs}
check("export_records", tolist(by["7"][1]) == rows[7] and by["7"][2] is None and by["b, c"][2] == "plain" and
      (isinstance(by["7"][1], list) if np is None else by["7"][1].dtype == np.float32), repr(by.get("b, c")))
k, d = ix.search([1.0] * DIM, k=1010)
check("deleted_not_found", "a" not in tolist(k) and len(k) == 1001)
line = ix.verify()
check("verify", line is not None and "verify: ok" in line, repr(line))
e = raises(lambda: ix.ctl("frobnicate"))
check("ctl_bad_command", e is not None and e.errno == errno.EINVAL and e.lines and "frobnicate" in e.lines[-1], repr(e))

# ------------------------------------------------------------ staged large add
N = 50000
big_rng = random.Random(2)
big = [[f32(big_rng.uniform(-1, 1)) for _ in range(DIM)] for _ in range(N)]
bigarg = np.array(big, dtype=np.float32) if np is not None else big
before = len(ix)
seen = {"rename": [], "counts": set()}
real_rename = os.rename


def spy_rename(src, dst):  # at the commit: the staged file is there, nothing committed
    seen["rename"].append((src, dst, os.path.basename(src) in os.listdir(MNT + "/ingest"), len(ix)))
    return real_rename(src, dst)


stop = threading.Event()


def poll():
    while not stop.is_set():
        seen["counts"].add(len(ix))


ix.stage_bytes = 1 << 20
poller = threading.Thread(target=poll)
poller.start()
os.rename = spy_rename
try:
    keys = ix.add(bigarg)
finally:
    os.rename = real_rename
    stop.set()
    poller.join()
seen["counts"].add(len(ix))
r = seen["rename"]
check("staged_renamed_once", len(r) == 1 and r[0][0].endswith(".part") and r[0][0][:-5] == r[0][1] and
      r[0][2] and r[0][3] == before, repr(r))
check("staged_atomic", seen["counts"] <= {before, before + N} and len(ix) == before + N, repr(seen["counts"]))
check("staged_keys", keys == [str(i) for i in range(1000, 1000 + N)] and tolist(ix.get(str(1000 + N - 1))[0]) == big[-1],
      repr(keys[:3] if keys else keys))
# with keys and payloads: .jsonl staged; a bad last row commits nothing
bad = big[:20000] + [[float("inf")] * DIM]
e = raises(lambda: ix.add(bad, keys=["s%d" % i for i in range(len(bad))], payloads=[{"i": i} for i in range(len(bad))]))
check("staged_bad_commits_nothing", e is not None and e.errno == errno.EINVAL and e.lines and
      len(ix) == before + N and "s0" not in ix and os.listdir(MNT + "/ingest") == [], repr(e))
ks = ["s%d" % i for i in range(20000)]
check("staged_jsonl", ix.add(big[:20000], keys=ks, payloads=[{"i": i} for i in range(20000)]) == ks and
      ix.get("s19999")[1] == {"i": 19999} and len(ix) == before + N + 20000)
K, D = ix.search(bigarg[:3], k=2, exact=True)
check("staged_searchable", sorted(tolist(K[0])) == ["1000", "s0"] and D[0][0] == 0.0, repr(K))

# ------------------------------------------------------------ close
ix.close()
check("close_ends_sessions", [s for s in os.listdir(MNT + "/query") if s.startswith("py-")] == [])
with Index(MNT) as ix2:
    check("reopen_search", tolist(ix2.search(rows[5], k=1)[0]) == ["5"])
check("context_closes", [s for s in os.listdir(MNT + "/query") if s.startswith("py-")] == [])
sys.exit(1 if FAILED else 0)
