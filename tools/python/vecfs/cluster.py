"""vecfs.cluster: one index over N vecfs shards on the workers of a Dask
distributed cluster.

Each shard is a vecfs daemon with its own store on one Dask worker's
machine, mounted there by `ShardPlugin` (a worker plugin) or served by a
daemon that systemd runs (`vecfs@.service`), which the plugin attaches to.
`ShardedIndex` is the client: it routes rows to shards by a stable hash of
their keys, fans queries out to every shard and merges the results (each
shard asked for a recall below the caller's target, so that the merge's
recall is one store's at that target: see shard_recall).

Keys.  A row's shard is jump_hash(blake2b-64(key), N) over the N shards in
the shard map (Lamping and Veach's jump consistent hash: growing from N to
N+1 shards moves 1/(N+1) of the keys, all of them to the new shard).  So an
upsert or a delete of a key reaches the shard that holds it.  Rows added
without keys get `G-R`: G 16 hex digits naming the call (random for a numpy
add; a hash of the chunk's or partition's Dask token, or of the file's
path, for Dask collections and files, so that a retried ingest writes the
same keys again), R the row's number within it.  No two shards hand out a
key: the stores' own counters are never used.

The shard map (which worker name holds which shard, and their order) is
kept beside each store, in ROOT/shard-NAME/shard.json on the worker's
machine, and read back from the workers when a ShardedIndex connects.

Dask and numpy are needed here only; `import vecfs` does not import them.
"""

import errno
import hashlib
import itertools
import json
import logging
import os
import queue
import re
import shutil
import subprocess
import tempfile
import threading
import time
import uuid

import numpy as np
import distributed
from distributed import WorkerPlugin, get_worker

from . import Config, Index, VecfsError, _check_key, _options, _Writer, _is_vector

__all__ = ["ShardedIndex", "ShardPlugin", "ShardError", "Shard", "shard_of"]

PLUGIN = "vecfs-shard"
MAP_FILE = "shard.json"
PIECE_ROWS = 4096        # rows formatted at a time into an ingest file


# ---------------------------------------------------------------- keys
def key_hash(keys):
    """blake2b-64 of each key's UTF-8 bytes, as uint64."""
    b2 = hashlib.blake2b
    digests = b"".join([b2(k.encode("utf-8"), digest_size=8).digest() for k in keys])
    return np.frombuffer(digests, dtype="<u8").astype(np.uint64)


def jump_hash(h, n):
    """Jump consistent hash of uint64 array h into n buckets."""
    h = np.array(h, dtype=np.uint64)
    b = np.full(h.shape, -1, dtype=np.int64)
    j = np.zeros(h.shape, dtype=np.int64)
    live = j < n
    with np.errstate(over="ignore"):
        while live.any():
            b[live] = j[live]
            h[live] = h[live] * np.uint64(2862933555777941757) + np.uint64(1)
            j[live] = ((b[live] + 1).astype(np.float64) *
                       (float(1 << 31) / ((h[live] >> np.uint64(33)).astype(np.float64) + 1.0))
                       ).astype(np.int64)
            live = j < n
    return b


def shard_of(keys, n):
    """The shard number (0..n-1) of each key: jump_hash(blake2b-64(key), n)."""
    if isinstance(keys, str):
        return int(jump_hash(key_hash([keys]), n)[0])
    keys = list(keys)
    if n == 1:
        return np.zeros(len(keys), dtype=np.int64)
    return jump_hash(key_hash(keys), n)


def _check_keys(keys):
    """keys as a list of str (others as their str()), each checked as
    vecfs' _check_key checks one: the usual case in one pass over their
    join, the rest key by key (which raises for the bad one)."""
    keys = list(keys)
    if set(map(type, keys)) - {str}:
        keys = [k if isinstance(k, str) else str(k) for k in keys]
    j = "\n" + "\n".join(keys) + "\n"
    if "/" in j or "\0" in j or "\n\n" in j or "\n.\n" in j or "\n..\n" in j:
        for k in keys:
            _check_key(k)
    return keys


def _gen_keys(tag, n, start=0):
    return ["%s-%d" % (tag, i) for i in range(start, start + n)]


def _tag_of(text):
    return hashlib.blake2b(str(text).encode("utf-8"), digest_size=8).hexdigest()


def _key_order(key):
    """Ties in distance order by key: decimal keys by value first."""
    if key is None:
        return (2, 0, "")
    return (0, int(key), key) if key.isascii() and key.isdigit() else (1, 0, key)


# ---------------------------------------------------------------- errors
class ShardError(VecfsError):
    """A call that needed shards that did not answer: `missing` names them
    ({shard number: reason})."""

    def __init__(self, missing, what="call"):
        self.missing = dict(missing)
        text = "; ".join("shard %d: %s" % (i, r) for i, r in sorted(self.missing.items()))
        code = errno.EHOSTDOWN
        super().__init__(code, "%s failed on %d shard(s): %s" % (what, len(self.missing), text))


class SearchResult(tuple):
    """(keys, distances), as vecfs.Index.search returns; `missing` is
    {shard number: reason} of the shards that did not answer (empty unless
    partial=True was asked for)."""
    missing = {}

    def __new__(cls, keys, dists, missing=None, payloads=None):
        t = super().__new__(cls, (keys, dists))
        t.missing = dict(missing or {})
        t.payloads = payloads
        return t


# ---------------------------------------------------------------- worker side
def _mounted(path):
    with open("/proc/self/mounts") as f:
        return any(line.split()[1] == path for line in f)


def _unmount(path):
    for args in (["-u"], ["-u"], ["-uz"]):
        if not _mounted(path):
            return True
        subprocess.run(["fusermount3", *args, path], stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, timeout=90)
        if _mounted(path):
            time.sleep(0.5)
    return not _mounted(path)


def _daemon_pid(mount):
    """The pid of the vecfs daemon serving mount (by its command line)."""
    mount = os.path.abspath(mount)
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            with open("/proc/%s/cmdline" % p, "rb") as f:
                args = f.read().split(b"\0")
        except OSError:
            continue
        if mount.encode() in args and any(a.endswith(b"vecfs") for a in args[:1]):
            return int(p)
    return None


class ShardPlugin(WorkerPlugin):
    """Holds one shard on each worker it is registered on: at setup, the
    store ROOT/shard-NAME/store (NAME the worker's name) mounted at
    ROOT/shard-NAME/mnt with `vecfs [options] STORE MNT`; at teardown,
    unmounted.  A mount found already live there (a daemon that outlived
    its worker) is used as it is; a stale one is detached first.

    With mount= (a path, `{name}` replaced by the worker's name) the plugin
    attaches to a daemon that something else runs there (systemd's
    vecfs@.service) and never mounts or unmounts; the shard map is then
    kept in ROOT/shard-NAME/ all the same."""

    name = PLUGIN

    def __init__(self, root, vecfs="vecfs", options=(), mount=None):
        self.root = os.path.abspath(root)
        self.vecfs = vecfs
        self.options = list(options)
        self.attach = mount
        self.index = None
        self.pid = None

    def setup(self, worker):
        self.shard = "shard-%s" % worker.name
        self.dir = os.path.join(self.root, self.shard)
        os.makedirs(self.dir, exist_ok=True)
        self.store = os.path.join(self.dir, "store")
        if self.attach:
            self.mount = self.attach.replace("{name}", str(worker.name))
            self.store = None
        else:
            self.mount = os.path.join(self.dir, "mnt")
            os.makedirs(self.mount, exist_ok=True)
            self._mount()
        self.index = Index(self.mount)
        self.pid = _daemon_pid(self.mount)

    def _live(self):
        try:
            return os.path.isfile(os.path.join(self.mount, "ctl"))
        except OSError:
            return False

    def _mount(self):
        if _mounted(self.mount):
            if self._live():
                return                      # a daemon that outlived its worker
            _unmount(self.mount)            # stale: its daemon died
        r = subprocess.run([self.vecfs, *self.options, self.store, self.mount],
                           stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, timeout=120)
        if r.returncode != 0:
            raise VecfsError(errno.EIO, "vecfs exited with status %d: %s" % (
                r.returncode, r.stdout.decode(errors="replace").strip()), self.mount)

    def remount(self):
        """Mount again after the daemon died (a stale mount is detached)."""
        if self.attach:
            raise VecfsError(errno.ENOTCONN, "the daemon is run by another program", self.mount)
        if self.index is not None:
            self.index.close()
        self._mount()
        self.index = Index(self.mount)
        self.pid = _daemon_pid(self.mount)

    def teardown(self, worker):
        if self.index is not None:
            self.index.close()
        if not self.attach and getattr(self, "mount", None):
            _unmount(self.mount)

    # the map kept beside the store
    def read_map(self):
        try:
            with open(os.path.join(self.dir, MAP_FILE)) as f:
                return json.load(f)
        except FileNotFoundError:
            return {}

    def write_map(self, meta):
        path = os.path.join(self.dir, MAP_FILE)
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(meta, f)
            f.flush()
            os.fsync(f.fileno())
        os.rename(tmp, path)
        fd = os.open(self.dir, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _plugin():
    p = get_worker().plugins.get(PLUGIN)
    if p is None or p.index is None:
        raise VecfsError(errno.ENODEV, "this worker holds no vecfs shard (no %s plugin)" % PLUGIN)
    return p


def _w_info():
    p = _plugin()
    return {"name": p.shard, "worker_name": get_worker().name, "mount": p.mount,
            "store": p.store, "pid": p.pid, "map": p.read_map(), "live": p._live()}


def _w_write_map(meta):
    _plugin().write_map(meta)


def _w_call(method, *args, **kw):
    return getattr(_plugin().index, method)(*args, **kw)


def _w_remount():
    p = _plugin()
    p.remount()
    return p.pid


# Keyed rows go to a shard as .csv: the key, then each float32 as nine
# significant decimal digits times a power of ten ("+215617210e-009"), which
# strtof reads back as the same float32 (nine digits always do) and which the
# daemon reads without strtof (up to 19 digits, powers of ten to 1e+-22).
# Each number is 16 bytes taken from tables: a little-endian word of the
# sign and 3 digits, one of 4 digits, and 8 bytes of the last 2 digits, "e",
# the exponent (sign and 3 digits) and the separator.
_W0 = np.frombuffer("".join(c + "%03d" % i for c in "+-" for i in range(1000)).encode(), "<u4")
_W1 = np.frombuffer("".join("%04d" % i for i in range(10000)).encode(), "<u4")
_W23 = np.frombuffer("".join("%02de%+04d," % (i, e - 64) for i in range(100)
                             for e in range(128)).encode(), "<u8")
_P10 = 10.0 ** np.arange(-64, 65)
_LOG2 = np.floor((np.arange(256) - 127) * np.log10(2.0)).astype(np.int64)  # 10^x <= 2^(e-127)


def _decimal_rows(a):
    """float32 rows (finite) as text: (rows, dim*16) bytes, each number
    "+DDDDDDDDDe+XXX" and a comma, a newline after the row's last."""
    a = np.ascontiguousarray(a, dtype=np.float32)
    n, d = a.shape
    bits = a.view(np.uint32)
    av = np.abs(a).astype(np.float64)
    x = _LOG2[bits >> 23 & 0xff]                 # 10^x <= |a| < 10^(x+1), or one below
    x += av >= _P10[64 + 1 + x]
    m = np.rint(av * _P10[64 + 8 - x])
    odd = (m >= 1e9) | ((m < 1e8) & (av > 0))     # subnormals; rounding up to 10^9
    if odd.any():
        i = np.nonzero(odd)
        xs = np.floor(np.log10(av[i])).astype(np.int64)
        ms = np.rint(av[i] * 10.0 ** (8 - xs))
        up = ms >= 1e9
        xs += up
        x[i] = xs
        m[i] = np.where(up, np.rint(av[i] * 10.0 ** (8 - xs)), ms)
    m = m.astype(np.int32)                      # (zero: 0 times any power of ten)
    out = np.empty((n, d, 2), "<u8")
    words = out.view("<u4").reshape(n, d, 4)
    words[:, :, 0] = _W0[(bits >> 31).astype(np.int32) * 1000 + m // 1000000]
    words[:, :, 1] = _W1[m // 100 % 10000]
    out[:, :, 1] = _W23[(m % 100) * 128 + (x + (64 - 8))]
    text = out.view(np.uint8).reshape(n, d * 16)
    text[:, -1] = ord("\n")
    return text


_QUOTE = re.compile(r'[ ,"\t]')


def _text_key(k):
    if _QUOTE.search(k) or k.startswith("#"):
        return ('"' + k.replace('"', '""') + '"').encode("utf-8")
    return k.encode("utf-8")


def _key_fields(keys):
    """Each key as a CSV field and its comma (RFC 4180 quotes where needed)."""
    joined = "\n".join(keys)
    if keys and not _QUOTE.search(joined) and "\n#" not in "\n" + joined:
        out = (joined.replace("\n", ",\n") + ",").encode("utf-8").split(b"\n")
        if len(out) == len(keys):                 # (no key holds a newline)
            return out
    return [_text_key(k) + b"," for k in keys]


def _csv_rows(keys, vectors):
    """Rows with keys as the bytes of CSV lines."""
    text = memoryview(_decimal_rows(vectors).reshape(-1))
    width = vectors.shape[1] * 16
    parts = [None] * (2 * len(keys))
    parts[0::2] = _key_fields(keys)
    parts[1::2] = [text[i:i + width] for i in range(0, len(keys) * width, width)]
    return b"".join(parts)


def _overlapped(ix, write, chunks):
    """write(chunk) for each of chunks in order, in a thread of its own, so
    that the next chunk is made while the daemon takes the last."""
    todo = queue.Queue(2)
    failed = []
    seen = ix._seen

    def run():
        ix._seen = seen
        while True:
            c = todo.get()
            if c is None:
                return
            if not failed:
                try:
                    write(c)
                except BaseException as e:       # noqa: BLE001 (raised below)
                    failed.append(e)
    t = threading.Thread(target=run, name="vecfs-ingest", daemon=True)
    t.start()
    try:
        for c in chunks:
            if failed:
                break
            todo.put(c)
    finally:
        todo.put(None)
        t.join()
    if failed:
        raise failed[0]


def _dedupe(keys, vectors, payloads):
    """The last row of each key (as one file of the store would keep)."""
    if len(set(keys)) == len(keys):
        return keys, vectors, payloads
    last = {k: i for i, k in enumerate(keys)}
    idx = sorted(last.values())
    return ([keys[i] for i in idx], vectors[idx],
            None if payloads is None else [payloads[i] for i in idx])


def _pack(piece):
    """A piece to send: its keys as one string, one per line, which
    pickles in a fraction of a list's time (a list when a key holds a
    newline)."""
    keys, vectors, payloads = piece
    joined = "\n".join(keys)
    if len(keys) and joined.count("\n") == len(keys) - 1:
        return (joined, vectors, payloads)
    return piece


def _w_ingest(piece, name):
    """Write one piece (keys, float32 vectors, payloads or None; the keys
    as a list or as _pack's string) into this worker's shard as one ingest
    file: one atomic commit.  The same piece again writes the same rows
    again (an upsert): retries add nothing."""
    keys, vectors, payloads = piece
    if isinstance(keys, str):
        keys = keys.split("\n")
    if not len(keys):
        return 0
    ix = _plugin().index
    keys, vectors, payloads = _dedupe(list(keys), vectors, payloads)
    ix._begin()
    n, d = vectors.shape
    if payloads is None:
        with _Writer(ix, name + ".csv", n * (d * 16 + 32)) as w:
            _overlapped(ix, w.write, (_csv_rows(keys[i:i + PIECE_ROWS], vectors[i:i + PIECE_ROWS])
                                      for i in range(0, n, PIECE_ROWS)))
    else:
        with _Writer(ix, name + ".jsonl", n * (d * 24 + 64)) as w:
            rows = vectors.tolist()
            for k, v, p in zip(keys, rows, payloads):
                rec = {"key": k, "vector": v}
                if p is not None:
                    rec["payload"] = p
                w.write(json.dumps(rec, ensure_ascii=False, separators=(",", ":")).encode() + b"\n")
    return n


def _w_ingest_part(pieces, s, name):
    return _w_ingest(pieces[s], name)


# Recall over shards.  A query's k nearest over N shards are mostly each
# shard's nearest few (about k/N of them), which a shard finds more often
# than its k-th: shards asked for a store's recall target T return a merge
# above what one store returns at T.  So each shard aims lower, at
#     t = 1 - (1 - T) * ((k + 1) / (k / N + 1)) ** RECALL_SHRINK
# ((k+1)/(k/N+1) is how much less a shard would miss of its share if its
# misses grew linearly with rank; the exponent is what brings the merge
# within 0.005 of one store's recall at the default target on sift-128 and
# glove-100 over 4 shards).  A shard probes by the nearest calibrated
# target at or above the one asked (its generation's meta lists them), so a
# t between two of them, lo < t < hi, is met on average: a share
# (t - lo) / (hi - lo) of the queries, chosen by a hash of each vector (the
# same on every shard), asks for hi, the rest for lo.
RECALL_SHRINK = 0.45


def shard_recall(target, shards, k):
    """The recall each of `shards` shards aims at for a merged recall@k
    near one store's at `target`."""
    if shards <= 1 or k <= 1:
        return float(target)
    f = ((k + 1) / (k / shards + 1)) ** RECALL_SHRINK
    return max(0.01, 1 - (1 - float(target)) * f)


_MIX = np.random.default_rng(0x5eed).integers(1, 1 << 63, 4096, dtype=np.uint64) | np.uint64(1)


def _query_share(q):
    """A number in [0, 1) for each query row, from its float32 bits."""
    bits = np.ascontiguousarray(q, dtype=np.float32).view(np.uint32).astype(np.uint64)
    with np.errstate(over="ignore"):
        h = (bits * _MIX[:bits.shape[1]]).sum(axis=1, dtype=np.uint64)
        h ^= h >> np.uint64(31)
        h *= np.uint64(0xbf58476d1ce4e5b9)
        h ^= h >> np.uint64(29)
    return (h >> np.uint64(11)).astype(np.float64) / float(1 << 53)


def _levels(ix):
    """The recall targets calibrated in the shard's active generation
    (sorted), or None without one."""
    gen = ix.stats().get("active")
    if gen in (None, "none"):
        return None
    p = _plugin()
    cached = getattr(p, "levels", None)
    if cached and cached[0] == (ix.root, gen):
        return cached[1]
    levels = None
    try:
        with open(os.path.join(ix.root, "generations", str(gen), "meta")) as f:
            for line in f:
                name, _, value = line.partition("=")
                if name.strip() == "nprobe_for_recall":
                    levels = sorted(float(t.split(":")[0]) for t in value.split())
    except (OSError, ValueError):
        levels = None
    p.levels = ((ix.root, gen), levels)
    return levels


def _recall_groups(ix, queries, t):
    """[(rows, recall)]: the queries split between the calibrated targets
    around t (all of them at t when t is one, or outside the range)."""
    levels = _levels(ix)
    everything = np.arange(len(queries))
    if not levels or t <= levels[0] or t >= levels[-1] or t in levels:
        return [(everything, t)]
    hi = next(x for x in levels if x > t)
    lo = max(x for x in levels if x < t)
    up = _query_share(queries) < (t - lo) / (hi - lo)
    return [(g, r) for g, r in ((everything[~up], lo), (everything[up], hi)) if len(g)]


def _w_search(queries, opts, k, want_payloads, target=None, spread=(1, 10)):
    """This shard's top-k of each query: (keys, distances, payloads).
    target: the recall one store would be asked for ("config": its
    recall_target), asked of this shard as shard_recall(target, *spread)
    (spread: the shards and the merge's k); None: opts as they are."""
    ix = _plugin().index
    if target is None:
        groups = [(np.arange(len(queries)), None)]
    else:
        if target == "config":
            target = float(ix.get_config()["recall_target"])
        groups = _recall_groups(ix, queries, shard_recall(target, *spread))
    kd = np.empty((len(queries), k), dtype=object)
    dd = np.full((len(queries), k), np.inf, dtype=np.float32)
    pd = np.empty((len(queries), k), dtype=object) if want_payloads else None
    path = ix._session()
    try:
        for rows, r in groups:
            text_opts = opts.replace("{k}", str(k) if r is None else "%d recall=%r" % (k, r), 1)
            _search_rows(ix, path, queries, rows, text_opts, k, want_payloads, kd, dd, pd)
    finally:
        ix._release(path)
    return kd, dd, pd


def _search_rows(ix, path, queries, rows, text_opts, k, want_payloads, kd, dd, pd):
    per = max(1, min((1 << 20) // max(k, 1), (64 << 20) // (queries.shape[1] * 26)))
    for i in range(0, len(rows), per):
        part = rows[i:i + per]
        text = text_opts + "".join(" ".join(map(repr, r)) + "\n" for r in queries[part].tolist())
        ix._begin()
        ix._write(os.path.join(path, "in"), text)
        res = json.loads(ix._call(ix._read, os.path.join(path, "out.json")))["results"]
        for j, q in zip(part, res):
            kd[j, :len(q)] = [r["key"] for r in q]
            dd[j, :len(q)] = [r["distance"] for r in q]
            if want_payloads:
                pd[j, :len(q)] = [r.get("payload") for r in q]


def _w_delete(keys):
    """Delete keys here: (deleted, missing)."""
    ix = _plugin().index
    missing = [k for k in keys if k not in ix]
    return ix.delete([k for k in keys if k not in set(missing)], missing_ok=True), missing


def _w_delete_filter(flt, dim):
    """Delete every record the filter matches: through the `delete` file
    when the mount has one (one atomic commit), else by exact filtered
    searches, a batch of keys at a time (not one commit)."""
    ix = _plugin().index
    path = os.path.join(ix.root, "delete")
    before = ix.stats().get("records", 0)
    if os.path.exists(path):
        ix._begin()
        ix._write(path, "filter=" + json.dumps(flt, ensure_ascii=False) + "\n")
        return before - ix.stats().get("records", 0)
    n = 0
    q = np.ones(dim, dtype=np.float32)
    while True:
        keys, _ = ix.search(q, k=min(100000, max(1, ix.stats().get("records", 0))),
                            filter=flt, exact=True)
        keys = [k for k in keys if k is not None]
        if not keys:
            return n
        n += ix.delete(keys, missing_ok=True)


def _w_moving(n_new, s, new=None):
    """The keys of shard s whose shard under n_new shards is not s."""
    ix = _plugin().index
    keys = list(ix.keys())
    if not keys:
        return []
    owner = shard_of(keys, n_new)
    return [k for k, o in zip(keys, owner) if o != s and (new is None or o == new)]


def _w_export(keys):
    """(keys, vectors, payloads) of the records of keys that exist."""
    ix = _plugin().index
    out_k, out_v, out_p = [], [], []
    for k in keys:
        try:
            v, p = ix.get(k)
        except KeyError:
            continue
        out_k.append(k)
        out_v.append(v)
        out_p.append(p)
    vec = np.array(out_v, dtype=np.float32).reshape(len(out_k), -1) if out_k else np.zeros((0, 1), np.float32)
    return out_k, vec, out_p if any(p is not None for p in out_p) else None


# ---------------------------------------------------------------- splitting
def _split(vectors, keys, payloads, n, tag, start):
    """Rows as {shard: (keys, vectors, payloads)}; keys generated from tag
    (and the row's number start+i) when None."""
    vectors = np.asarray(vectors)
    if vectors.ndim == 1:
        vectors = vectors[None, :]
    vectors = np.ascontiguousarray(vectors, dtype=np.float32)
    if keys is None:
        keys = _gen_keys(tag, len(vectors), start)
    else:
        keys = _check_keys(keys)
    if len(keys) != len(vectors):
        raise ValueError("%d keys for %d vectors" % (len(keys), len(vectors)))
    if payloads is not None:
        payloads = list(payloads)
        if len(payloads) != len(vectors):
            raise ValueError("%d payloads for %d vectors" % (len(payloads), len(vectors)))
    if len(vectors) and not np.isfinite(vectors).all():
        raise ValueError("vectors hold NaN or infinity (or a number beyond float32)")
    if n == 1:
        return {0: (keys, vectors, payloads)}
    owner = shard_of(keys, n)
    karr = np.empty(len(keys), dtype=object)
    karr[:] = keys
    out = {}
    for s in range(n):
        idx = np.nonzero(owner == s)[0]
        out[s] = (karr[idx].tolist(), vectors[idx],
                  None if payloads is None else [payloads[i] for i in idx])
    return out


def _split_frame(df, key, vector, payload, n, tag):
    keys = None if key is None else [str(k) for k in df[key].tolist()]
    if isinstance(vector, (list, tuple)):
        vec = df[list(vector)].to_numpy(dtype=np.float32)
    else:
        vec = np.array([np.asarray(v, dtype=np.float32) for v in df[vector].tolist()],
                       dtype=np.float32).reshape(len(df), -1)
    pays = None if payload is None else df[payload].tolist()
    return _split(vec, keys, pays, n, tag, 0)


def _read_vectors(path):
    if path.endswith(".npy"):
        return np.load(path, mmap_mode="r")
    raw = np.fromfile(path, dtype="<i4")
    if not len(raw):
        return np.zeros((0, 1), np.float32)
    d = int(raw[0])
    return raw.reshape(-1, d + 1)[:, 1:].view("<f4")


def _split_file(path, n):
    return _split(_read_vectors(path), None, None, n, _tag_of(os.path.abspath(path)), 0)


# ---------------------------------------------------------------- client side
class Shard:
    """One shard: index (a vecfs.Index on its mount, opened at first use;
    from a process on the shard's machine), number (0..N-1), name
    (shard-WORKERNAME), worker (its worker's address, None when gone),
    store, mount, pid (its daemon's), worker_name."""

    def __init__(self, number, name, worker=None, info=None, opened=None):
        self.number = number
        self.name = name
        self.worker = worker
        info = info or {}
        self.store = info.get("store")
        self.mount = info.get("mount")
        self.pid = info.get("pid")
        self.worker_name = info.get("worker_name")
        self._opened = {} if opened is None else opened

    @property
    def index(self):
        """vecfs.Index on this shard's mount, one per mount for the
        ShardedIndex (its close() closes it)."""
        if self.mount is None:
            raise VecfsError(errno.ENOTCONN, "shard %d (%s): its worker is gone"
                             % (self.number, self.name))
        ix = self._opened.get(self.mount)
        if ix is None:
            ix = self._opened.setdefault(self.mount, Index(self.mount))
        return ix

    def __repr__(self):
        return "Shard(%d, %r, worker=%r, store=%r, pid=%r)" % (
            self.number, self.name, self.worker, self.store, self.pid)


class ShardedConfig(Config):
    """config of every shard: reads from the first that answers, writes to
    all (the mapping of vecfs.Config over ShardedIndex's get_config and
    set_config)."""

    def __repr__(self):
        return "ShardedConfig(%r)" % self._ix.get_config()


class ShardedIndex:
    """vecfs.Index's calls over the shards of a Dask cluster whose workers
    run ShardPlugin (see the module's text for the key rule)."""

    def __init__(self, client, timeout=120, poll=0.2):
        self.client = client
        self.timeout = timeout
        self.poll = poll
        self._cluster = None
        self._tmp = None
        self._lock = threading.RLock()      # writes wait while shards move
        self._cv = threading.Condition()     # searches in flight, by map epoch
        self._active = {}
        self._sent = {}                      # future key: the worker it was sent to
        self._move = None                    # (read map count, shard filter) during a move
        self._names = itertools.count()
        self._tag = uuid.uuid4().hex[:8]
        self._opened = {}                    # mount: the vecfs.Index of Shard.index
        self._direct = True                  # scatter straight to the workers
        self._load()

    # ------------------------------------------------------------ setup
    @classmethod
    def local(cls, n, root, vecfs=None, options=(), threads=1, **kw):
        """A LocalCluster of n worker processes, one shard each, stores under root."""
        from distributed import Client, LocalCluster
        vecfs = os.path.abspath(vecfs or os.environ.get("VECFS") or shutil.which("vecfs") or "vecfs")
        root = os.path.abspath(root)
        os.makedirs(root, exist_ok=True)
        cluster = LocalCluster(n_workers=n, threads_per_worker=threads, processes=True,
                               dashboard_address=None, silence_logs=logging.ERROR)
        try:
            client = Client(cluster)
            client.register_worker_plugin(ShardPlugin(root, vecfs, options), name=PLUGIN)
            ix = cls(client, **kw)
        except BaseException:
            cluster.close()
            _sweep(root)
            raise
        ix._cluster = cluster
        ix._root = root
        if not ix.shards:
            ix.init_shards()
        return ix

    def _infos(self):
        """{address: info} of the workers holding a shard."""
        res = self.client.run(_w_info, on_error="return")
        return {a: i for a, i in res.items() if isinstance(i, dict)}

    def _load(self):
        infos = self._infos()
        best = None
        for a, i in infos.items():
            m = i["map"]
            if m.get("shards") and (best is None or m["epoch"] > best["epoch"]):
                best = m
        self._map = best
        self._infos_by_name = {i["name"]: (a, i) for a, i in infos.items()}
        self._dirty = any(i["map"].get("clean") is False for i in infos.values())
        if self._dirty and best:
            self._cleanup(len(best["shards"]))

    def init_shards(self):
        """A fresh cluster: every worker holding a store becomes a shard, in
        order of worker name."""
        infos = self._infos()
        names = sorted((i["name"] for i in infos.values()),
                       key=lambda s: _key_order(s.split("-", 1)[1]))
        meta = {"shards": names, "epoch": 1, "clean": True}
        self._write_maps(meta, names)
        self._load()

    def _write_maps(self, meta, names):
        addr = self._addresses()
        futs = []
        for i, nm in enumerate(names):
            m = dict(meta, index=i)
            futs.append((i, self._submit(nm, addr, _w_write_map, m)))
        self._wait(futs, "shard map write", names=names)

    @property
    def shards(self):
        if not self._map:
            return []
        addr = self._addresses()
        out = []
        for i, nm in enumerate(self._map["shards"]):
            info = self._infos_by_name.get(nm, (None, {}))[1]
            out.append(Shard(i, nm, addr.get(nm), info, self._opened))
        return out

    def refresh(self):
        """Read the shard map and the shards' details (pids) again."""
        self._load()
        return self.shards

    def _addresses(self):
        """{shard name: worker address} of the workers alive now."""
        info = self.client.scheduler_info()["workers"]
        return {"shard-%s" % w["name"]: a for a, w in info.items()}

    def _n(self):
        if not self._map:
            raise VecfsError(errno.ENODEV, "no shards: no worker runs the %s plugin" % PLUGIN)
        return len(self._map["shards"])

    # ------------------------------------------------------------ fan-out
    def _submit(self, name, addr, fn, *args, retries=0):
        a = addr.get(name)
        if a is None:
            return None
        f = self.client.submit(fn, *args, workers=[a], allow_other_workers=False,
                               pure=False, retries=retries)
        self._sent[f.key] = a
        return f

    def _wait(self, futs, what, partial=False, names=None):
        """Results of [(shard, future or None)]: ({shard: [results]}, {shard: reason}).
        A shard whose worker leaves, or whose future fails, is missing; with
        partial False a missing shard raises ShardError."""
        if names is None:
            names = self._map["shards"] if self._map else []
        missing = {}
        for s, f in futs:
            if f is None:
                missing[s] = "%s: its worker is gone" % names[s]
        pending = [(s, f) for s, f in futs if f is not None]
        results = {}
        t_end = time.monotonic() + self.timeout
        while pending:
            try:
                distributed.wait([f for _, f in pending], timeout=self.poll)
            except (distributed.TimeoutError, TimeoutError):
                pass
            left = []
            alive = None
            for s, f in pending:
                if s in missing:
                    f.cancel()
                    continue
                if f.status == "finished":
                    results.setdefault(s, []).append(f.result())
                elif f.status in ("error", "cancelled"):
                    try:
                        e = f.exception()
                        if isinstance(e, (KeyError, ValueError, TypeError)):
                            for _, g in pending:
                                g.cancel()
                            raise e
                        missing[s] = "%s: %s" % (names[s], _reason(e))
                    except distributed.CancelledError:
                        missing[s] = "%s: cancelled (its worker left)" % names[s]
                else:
                    if alive is None:
                        alive = self._addresses()
                    sent = self._sent.get(f.key)
                    if alive.get(names[s]) != sent or time.monotonic() > t_end:
                        missing[s] = "%s: %s" % (
                            names[s], "its worker is gone" if names[s] not in alive else
                            "its worker restarted" if alive[names[s]] != sent else
                            "no answer in %g s" % self.timeout)
                        f.cancel()
                    else:
                        left.append((s, f))
            pending = left
        for _, f in futs:
            if f is not None:
                self._sent.pop(f.key, None)
        if missing and not partial:
            raise ShardError(missing, what)
        return results, missing

    def _fanout(self, fn, *args, what="call", partial=False, shards=None):
        addr = self._addresses()
        names = self._map["shards"]
        idx = range(len(names)) if shards is None else shards
        futs = [(s, self._submit(names[s], addr, fn, *args)) for s in idx]
        res, missing = self._wait(futs, what, partial)
        return {s: r[0] for s, r in res.items()}, missing

    # ------------------------------------------------------------ ingest
    def add(self, vectors, keys=None, payloads=None):
        """Add rows (upserts); returns the keys (given or generated).
        vectors: a numpy array or list of lists, a dask.array (chunks split
        by shard on the workers, each piece one ingest file), a pandas or
        dask DataFrame (add_frame's defaults), or a list of .npy/.fvecs
        paths (add_files)."""
        mod = type(vectors).__module__
        if mod.startswith("dask.array"):
            return self._add_dask_array(vectors, keys, payloads)
        if mod.startswith(("dask.dataframe", "pandas")):
            return self.add_frame(vectors)
        if isinstance(vectors, (list, tuple)) and vectors and all(isinstance(v, str) for v in vectors):
            return self.add_files(vectors)
        if isinstance(vectors, str):
            return self.add_files([vectors])
        if not isinstance(vectors, np.ndarray) and _is_vector(vectors):
            vectors = [vectors]
        vectors = np.asarray(vectors, dtype=np.float32)
        if isinstance(keys, str):
            keys = [keys]
        tag = uuid.uuid4().hex[:16]
        pieces = _split(vectors, None if keys is None else list(keys),
                        payloads, self._n(), tag, 0)
        with self._lock:
            self._ingest_pieces([(s, pieces[s]) for s in pieces if len(pieces[s][0])], tag)
        if keys is None:
            return _gen_keys(tag, len(vectors))
        return list(keys)

    def _ingest_pieces(self, pieces, tag):
        addr = self._addresses()
        names = self._map["shards"]
        futs = []
        for s, piece in pieces:
            a = addr.get(names[s])
            if a is None:
                futs.append((s, None))
                continue
            pf = self._scatter(_pack(piece), a)
            futs.append((s, self._submit(names[s], addr, _w_ingest, pf,
                                         "cl-%s-%d" % (tag, s), retries=1)))
        self._wait(futs, "add")

    def _scatter(self, data, address):
        """data on the worker at address: sent to it directly (a client
        that cannot reach the worker sends through the scheduler)."""
        if self._direct:
            try:
                return self.client.scatter([data], workers=[address], direct=True)[0]
            except (OSError, distributed.TimeoutError):
                self._direct = False
        return self.client.scatter([data], workers=[address], direct=False)[0]

    def _ingest_futures(self, sources, what="add"):
        """sources: futures each of {shard: piece}; every piece goes to its
        shard's worker, one ingest file each, named after the source (so a
        retried task writes the same file with the same keys again)."""
        with self._lock:
            addr = self._addresses()
            names = self._map["shards"]
            futs = []
            for j, src in enumerate(sources):
                for s in range(len(names)):
                    futs.append((s, self._submit(names[s], addr, _w_ingest_part, src, s,
                                                 "cl-%s-%d-%d" % (src.key[-16:].replace("-", ""), j, s),
                                                 retries=2)))
            res, _ = self._wait(futs, what)
            return sum(sum(r) for r in res.values())

    def _add_dask_array(self, arr, keys, payloads):
        if arr.ndim != 2:
            raise ValueError("vectors must be 2-D")
        if len(arr.chunks[1]) != 1:
            arr = arr.rechunk({1: -1})
        n = self._n()
        chunks = arr.to_delayed().ravel().tolist()
        futs = self.client.compute(chunks)
        sources, out, start = [], [], 0
        for i, (f, rows) in enumerate(zip(futs, arr.chunks[0])):
            tag = _tag_of("%s/%d" % (arr.name, i))
            ks = None if keys is None else list(keys[start:start + rows])
            ps = None if payloads is None else list(payloads[start:start + rows])
            sources.append(self.client.submit(_split, f, ks, ps, n, tag, 0, pure=False))
            out += ks if ks is not None else _gen_keys(tag, rows)
            start += rows
        self._ingest_futures(sources)
        return out

    def add_frame(self, df, key="key", vector="vector", payload=None):
        """Rows of a pandas or dask DataFrame: key (a column, or None for
        generated keys), vector (a column of sequences, or a list of columns
        of numbers), payload (a column of JSON values, or None).  A dask
        DataFrame's partitions are split on the workers; a retried partition
        writes the same rows again.  Returns the number of rows."""
        if key is not None and key not in df.columns:
            key = None
        if payload is None and "payload" in df.columns:
            payload = "payload"
        n = self._n()
        if type(df).__module__.startswith("pandas"):
            tag = uuid.uuid4().hex[:16]
            pieces = _split_frame(df, key, vector, payload, n, tag)
            with self._lock:
                self._ingest_pieces([(s, pieces[s]) for s in pieces if len(pieces[s][0])], tag)
            return len(df)
        parts = df.to_delayed()
        futs = self.client.compute(parts)
        sources = [self.client.submit(_split_frame, f, key, vector, payload, n,
                                      _tag_of("%s/%d" % (df._name, i)), pure=False)
                   for i, f in enumerate(futs)]
        return self._ingest_futures(sources)

    def add_files(self, paths):
        """.npy or .fvecs files that the workers can read, each read on a
        worker and split by shard; keys `G-R` with G a hash of the file's
        absolute path (adding the same file again replaces its rows).
        Returns the number of rows."""
        n = self._n()
        sources = [self.client.submit(_split_file, os.path.abspath(p), n, pure=False) for p in paths]
        return self._ingest_futures(sources)

    # ------------------------------------------------------------ search
    def search(self, queries, k=10, filter=None, recall=None, nprobe=None,
               exact=False, refine=None, partial=False, payloads=False):
        """vecfs.Index.search over every shard: one `in` per shard per batch,
        each shard's top-k merged into the global top-k (ties in distance by
        key, decimal keys by value).  A shard that does not answer raises
        ShardError naming it, unless partial=True: then the merge of the
        shards that answered, and the result's `missing` names the others.
        The result is a (keys, distances) tuple with `.missing` (and
        `.payloads` when payloads=True)."""
        single = _is_vector(queries)
        q = np.asarray([queries] if single else queries, dtype=np.float32)
        if q.ndim != 2:
            raise ValueError("queries must be 1-D or 2-D")
        if k is None:
            k = int(self.get_config()["k"])
        # the ANN default: each shard aims at the recall that brings the merge
        # to one store's at the target (shard_recall); exact or a fixed
        # nprobe pass through as they are
        target = None
        if not exact and nprobe is None:
            target, recall = ("config" if recall is None else float(recall)), None
        opts = _options(None, filter, recall, nprobe, exact, refine)
        opts = "k={k} " + opts if opts and not opts.startswith("filter=") else "k={k}\n" + opts
        with self._cv:
            names, move, epoch = list(self._map["shards"]), self._move, self._map["epoch"]
            self._active[epoch] = self._active.get(epoch, 0) + 1
        try:
            keys, dists, pays, missing = self._search(q, k, opts, partial, payloads, names, move,
                                                      target)
        finally:
            with self._cv:
                self._active[epoch] -= 1
                self._cv.notify_all()
        if single:
            m = np.array([x is not None for x in keys[0]], dtype=bool)
            return SearchResult(keys[0][m], dists[0][m], missing,
                                None if pays is None else pays[0][m])
        return SearchResult(keys, dists, missing, pays)

    def _search(self, q, k, opts, partial, want_payloads, names, move, target):
        n = len(names)
        kk = {s: k for s in range(n)}
        got, missing = {}, {}
        todo = list(range(n))
        while True:
            addr = self._addresses()
            futs = [(s, self._submit(names[s], addr, _w_search, q, opts, kk[s], want_payloads,
                                     target, (n, k)))
                    for s in todo]
            res, miss = self._wait(futs, "search", partial, names)
            missing.update(miss)
            for s, r in res.items():
                got[s] = r[0]
            if move is None:
                break
            # during a move: keep only the keys each shard owns under the map
            # that reads use; a shard that lost some of its k is asked for
            # more where its k-th distance might still count
            own = {}
            for s, (ks, ds, ps) in got.items():
                flat = [x for x in ks.ravel() if x is not None]
                o = dict(zip(flat, shard_of(flat, move).tolist())) if flat else {}
                mask = np.array([[x is not None and o[x] == s for x in row] for row in ks], dtype=bool)
                own[s] = mask
            merged_d = _merge([(np.where(own[s], ks, None), np.where(own[s], ds, np.inf), ps)
                               for s, (ks, ds, ps) in got.items()], k)[1]
            kth = merged_d[:, k - 1] if k else np.zeros(len(q))
            todo = []
            for s, (ks, ds, ps) in got.items():
                full = np.isfinite(ds[:, -1])
                dropped = (~own[s]) & np.array([[x is not None for x in row] for row in ks])
                need = full & dropped.any(axis=1) & (kth >= ds[:, -1])
                if need.any() and kk[s] < (1 << 20) // max(1, len(q)):
                    kk[s] *= 2
                    todo.append(s)
            if not todo:
                got = {s: (np.where(own[s], ks, None), np.where(own[s], ds, np.inf), ps)
                       for s, (ks, ds, ps) in got.items()}
                break
        keys, dists, pays = _merge(list(got.values()), k)
        return keys, dists, pays if want_payloads else None, missing

    # ------------------------------------------------------------ records
    def _owner(self, key):
        return shard_of(_check_key(key), self._move or self._n())

    def get(self, key):
        """(vector, payload) from the key's shard; KeyError when missing."""
        s = self._owner(key)
        res, _ = self._fanout(_w_call, "get", key, what="get", shards=[s])
        return res[s]

    def __contains__(self, key):
        s = self._owner(key)
        return self._fanout(_w_call, "__contains__", key, what="get", shards=[s])[0][s]

    def delete(self, keys=None, filter=None, missing_ok=False):
        """Delete keys (each on its shard) and/or every record a filter
        matches (on every shard: the `delete` file where the daemon has one,
        else exact filtered searches and deletes of what they find, which is
        not one atomic commit).  Returns how many were deleted; missing keys
        raise KeyError after the others are deleted, unless missing_ok."""
        if keys is None and filter is None:
            raise ValueError("delete needs keys or a filter")
        total, missing = 0, []
        with self._lock:
            if keys is not None:
                keys = [keys] if isinstance(keys, str) else [_check_key(k) for k in keys]
                owner = shard_of(keys, self._n()) if keys else []
                groups = {}
                for kk, s in zip(keys, owner):
                    groups.setdefault(int(s), []).append(kk)
                addr = self._addresses()
                names = self._map["shards"]
                futs = [(s, self._submit(names[s], addr, _w_delete, g)) for s, g in groups.items()]
                res, _ = self._wait(futs, "delete")
                for r in res.values():
                    total += r[0][0]
                    missing += r[0][1]
            if filter is not None:
                if not isinstance(filter, dict):
                    raise TypeError("a filter is a dict")
                dim = int(self.stats()["total"]["dim"])
                res, _ = self._fanout(_w_delete_filter, filter, dim, what="delete")
                total += sum(res.values())
        if missing and not missing_ok:
            raise KeyError(missing if len(missing) > 1 else missing[0])
        return total

    def keys(self):
        """Every live key, shard by shard."""
        res, _ = self._fanout(_w_call, "keys", what="keys")
        for s in sorted(res):
            yield from res[s]

    def __len__(self):
        return int(self.stats()["total"]["records"])

    # ------------------------------------------------------------ control
    def ctl(self, command, partial=False):
        """A ctl command on every shard at once."""
        with self._lock:
            self._fanout(_w_call, "ctl", command, what=command.split()[0], partial=partial)

    def build(self, stage=False):
        self.ctl("build stage" if stage else "build")

    def compact(self):
        self.ctl("compact")

    def verify(self):
        """verify on every shard: {shard: its line of errors}."""
        res, _ = self._fanout(_w_call, "verify", what="verify")
        return res

    def stats(self, partial=False):
        """{"shards": [each shard's stats, None when missing], "total": the
        counts summed (dim and metric as the shards say), "recall_estimate":
        [each shard's], "missing": {shard: reason}}."""
        res, missing = self._fanout(_w_call, "stats", what="stats", partial=partial)
        per = [res.get(s) for s in range(self._n())]
        total = {}
        for st in per:
            if not st:
                continue
            for k, v in st.items():
                if k in ("dim", "metric", "kernels", "maintenance"):
                    total.setdefault(k, v)
                elif isinstance(v, (int, float)) and not isinstance(v, bool) and k in _SUMMED:
                    total[k] = total.get(k, 0) + v
        return {"shards": per, "total": total,
                "recall_estimate": [st.get("recall_estimate") if st else None for st in per],
                "missing": missing}

    def errors(self):
        res, _ = self._fanout(_w_call, "errors", what="errors", partial=True)
        return res

    def get_config(self):
        res, _ = self._fanout(_w_call, "get_config", what="config", partial=True)
        if not res:
            raise ShardError({s: "no answer" for s in range(self._n())}, "config")
        return res[min(res)]

    def set_config(self, **kv):
        """Set config keys on every shard (each shard's write all or nothing)."""
        if kv:
            with self._lock:
                self._fanout_kw("set_config", kv)

    def _fanout_kw(self, method, kv):
        addr = self._addresses()
        names = self._map["shards"]
        futs = []
        for s, nm in enumerate(names):
            f = None
            if addr.get(nm) is not None:
                f = self.client.submit(_w_call, method, workers=[addr[nm]],
                                       allow_other_workers=False, pure=False, **kv)
                self._sent[f.key] = addr[nm]
            futs.append((s, f))
        self._wait(futs, "config")

    @property
    def config(self):
        return ShardedConfig(self)

    @config.setter
    def config(self, kv):
        self.set_config(**dict(kv))

    def remount(self, shard):
        """Mount a shard's store again on its worker after its daemon died."""
        res, _ = self._fanout(_w_remount, what="remount", shards=[shard])
        self._load()
        return res[shard]

    # ------------------------------------------------------------ growth
    def add_shard(self, worker=None):
        """One more shard, online: on worker (the address of a worker
        holding a store that is not a shard yet; for .local(), a new worker
        process is started).  The keys whose shard changes (1/(N+1) of
        them, all to the new shard) are copied, the map is switched on every
        shard, then they are deleted where they were.  Queries answer
        throughout (each key counted on one shard only); writes of this
        ShardedIndex wait for the move."""
        with self._lock:
            n = self._n()
            names = list(self._map["shards"])
            name = self._spare(worker)
            addr = self._addresses()
            self._move = n                   # reads keep the old map
            try:
                grown = names + [name]
                m = {"shards": None, "joining": grown, "epoch": self._map["epoch"],
                     "index": n, "clean": True}
                self._wait([(n, self._submit(name, addr, _w_write_map, m))], "add_shard",
                           names=grown)
                moved = 0
                for s in range(n):
                    f = self._submit(names[s], addr, _w_moving, n + 1, s, n)
                    keys = self._wait([(s, f)], "add_shard")[0][s][0]
                    for i in range(0, len(keys), 20000):
                        part = self._submit(names[s], addr, _w_export, keys[i:i + 20000])
                        ing = self._submit(name, addr, _w_ingest, part,
                                           "cl-move-%d-%d-%d" % (self._map["epoch"], s, i))
                        moved += self._wait([(n, ing)], "add_shard", names=grown)[0][n][0]
                old = self._map["epoch"]
                new = {"shards": grown, "epoch": old + 1, "clean": False}
                self._write_maps(new, grown)
                with self._cv:
                    self._map = {"shards": grown, "epoch": old + 1}
                    self._move = n + 1       # reads take the new map, old copies dropped
                    # searches that fanned out under the old map finish first
                    self._cv.wait_for(lambda: not self._active.get(old), timeout=self.timeout)
                self._cleanup(n + 1)
            finally:
                self._move = None
            self._load()
            return moved

    def _spare(self, worker):
        infos = self._infos()
        taken = set(self._map["shards"])
        if worker is not None:
            i = infos.get(worker)
            if i is None:
                raise ValueError("%s holds no store (does it run the %s plugin?)" % (worker, PLUGIN))
            return i["name"]
        spare = [i["name"] for i in infos.values() if i["name"] not in taken]
        if spare:
            return sorted(spare)[0]
        if self._cluster is None:
            raise ValueError("no spare worker: start one (with the plugin) and pass its address")
        want = len(self.client.scheduler_info()["workers"]) + 1
        self._cluster.scale(want)
        self.client.wait_for_workers(want, timeout=self.timeout)
        t_end = time.monotonic() + self.timeout
        while time.monotonic() < t_end:
            infos = self._infos()
            spare = [i["name"] for i in infos.values() if i["name"] not in taken]
            if spare:
                return sorted(spare)[0]
            time.sleep(0.2)
        raise VecfsError(errno.ETIMEDOUT, "the new worker did not mount its store")

    def _cleanup(self, n):
        """Delete, on every shard, the keys it does not own under n shards;
        then mark the maps clean.  Reads drop those keys meanwhile."""
        names = self._map["shards"]
        self._move = n
        try:
            res, _ = self._fanout_each(_w_moving, n)
            for s, keys in res.items():
                for i in range(0, len(keys), 20000):
                    self._fanout(_w_delete, keys[i:i + 20000], what="move", shards=[s])
            self._write_maps({"shards": names, "epoch": self._map["epoch"], "clean": True}, names)
        finally:
            self._move = None

    def _fanout_each(self, fn, n):
        addr = self._addresses()
        names = self._map["shards"]
        futs = [(s, self._submit(names[s], addr, fn, n, s)) for s in range(len(names))]
        res, missing = self._wait(futs, "move")
        return {s: r[0] for s, r in res.items()}, missing

    # ------------------------------------------------------------ closing
    def close(self):
        """Close the client; for .local(), also the cluster, its workers
        unmounting their stores (and any mount or daemon left is removed)."""
        opened, self._opened = self._opened, {}
        for one in opened.values():
            one.close()
        try:
            if self._cluster is not None:
                try:
                    self.client.run(_w_teardown, on_error="ignore")
                except Exception:
                    pass
            self.client.close()
        finally:
            if self._cluster is not None:
                self._cluster.close()
                _sweep(self._root)
                self._cluster = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


_SUMMED = {"records", "deleted", "unindexed", "delta_postings", "store_bytes", "ingest_rows",
           "queries", "recall_samples", "compactions", "rebalances", "generations"}


def _w_teardown():
    p = _plugin()
    p.teardown(get_worker())


def _sweep(root):
    """Unmount what is still mounted under root and stop its daemons."""
    if not os.path.isdir(root):
        return
    for d in sorted(os.listdir(root)):
        m = os.path.join(root, d, "mnt")
        if os.path.isdir(m) and _mounted(m):
            pid = _daemon_pid(m)
            if not _unmount(m) and pid:
                try:
                    os.kill(pid, 9)
                except OSError:
                    pass
                _unmount(m)


def _reason(e):
    if isinstance(e, OSError):
        return "%s (errno %s)" % (e.strerror or e, errno.errorcode.get(e.errno, e.errno))
    return "%s: %s" % (type(e).__name__, e)


def _merge(parts, k):
    """The k nearest of each row over parts [(keys, dists, payloads)]:
    distance first, ties by key (decimal keys by value)."""
    keys = np.concatenate([p[0] for p in parts], axis=1)
    dists = np.concatenate([p[1] for p in parts], axis=1)
    pays = None
    if all(p[2] is not None for p in parts):
        pays = np.concatenate([p[2] for p in parts], axis=1)
    order = np.argsort(dists, axis=1, kind="stable")
    top = order[:, :k + 1]
    d = np.take_along_axis(dists, top, axis=1)
    ties = np.nonzero(((d[:, 1:] == d[:, :-1]) & np.isfinite(d[:, 1:])).any(axis=1))[0]
    order = order[:, :k].copy()
    for i in ties:
        cand = np.nonzero(dists[i] <= d[i, -1])[0]
        best = sorted(cand, key=lambda j: (dists[i, j], _key_order(keys[i, j])))[:k]
        order[i, :len(best)] = best
    ko = np.take_along_axis(keys, order, axis=1)
    do = np.take_along_axis(dists, order, axis=1)
    po = None if pays is None else np.take_along_axis(pays, order, axis=1)
    return ko, do, po
