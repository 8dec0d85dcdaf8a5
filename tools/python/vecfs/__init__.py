"""vecfs: a Python API over a mounted vecfs directory.

Everything goes through the mount's files (ingest/, query/ID/, records/,
delete, export.jsonl, ctl, config, stats, errors), with the standard
library only; numpy arrays are accepted and returned when numpy is
installed.
"""

import errno
import fcntl
import itertools
import json
import math
import os
import struct
import sys
import threading
from array import array

# The longest input a synchronous write of `in` runs at once on any kernel
# (the smallest WRITE a FUSE kernel sends whole): longer ones run at a close.
_SYNC_MAX = 128 * 1024
# The query call: one ioctl() of `in` runs a whole input and returns out's
# text in the same buffer of at most _CALL_MAX bytes (vecfs.h's
# VECFS_IOC_QUERY; the mount's README, "One system call a query").
_CALL_MAX = 16383


def _call_cmd(size):
    return (3 << 30) | (size << 16) | (ord("v") << 8) | 1

try:
    import numpy as np
except ImportError:
    np = None

__all__ = ["Index", "VecfsError"]
__version__ = "0.1.0"

STAGE_BYTES = 8 << 20     # inputs larger than this are written as a staged .part file
CHUNK_BYTES = 1 << 20     # write() size
MAX_RESULTS = 1 << 20     # queries x k of one request (the daemon's limit is 4194304)
MAX_INPUT = 64 << 20      # bytes of one `in` (the daemon's limit is 256 MiB)


class VecfsError(OSError):
    """A failed call on the mount: errno, strerror and filename as OSError,
    plus `lines`, the lines that the `errors` file gained during the call."""

    def __init__(self, err, strerror, filename=None, lines=()):
        super().__init__(err, strerror, filename)
        self.lines = list(lines)

    def __str__(self):
        s = super().__str__()
        return s + "".join("\n  " + line for line in self.lines)


def _check_key(key):
    if not isinstance(key, str):
        raise TypeError("a key is a str, not %s" % type(key).__name__)
    if not key or key in (".", "..") or "/" in key or "\0" in key:
        raise ValueError("not a key: %r" % key)
    return key


def _number(s):
    try:
        return int(s)
    except ValueError:
        pass
    try:
        return float(s)
    except ValueError:
        return s


def _parse_value(s):
    if s == "none":
        return None
    v = _number(s)
    if isinstance(v, str) and " " in s:
        parts = [_number(p) for p in s.split()]
        if all(not isinstance(p, str) for p in parts):
            return tuple(parts)
    return v


def _parse_kv(text):
    out = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        k, v = line.split("=", 1)
        out[k.strip()] = _parse_value(v.strip())
    return out


def _is_vector(x):
    """True for one vector (1-D), False for a batch (2-D)."""
    if np is not None and isinstance(x, np.ndarray):
        if x.ndim not in (1, 2):
            raise ValueError("vectors must be 1-D or 2-D, not %d-D" % x.ndim)
        return x.ndim == 1
    if len(x) == 0:
        return False
    return isinstance(x[0], (int, float)) or (np is not None and np.isscalar(x[0]))


def _text_rows(rows):
    """Query or record vectors as text lines, each number round-tripping:
    float32 arrays with 9 significant digits (enough for any float32),
    other numbers as repr() (which reads back to the same float)."""
    f32 = np is not None and isinstance(rows, np.ndarray) and rows.dtype == np.float32
    if np is not None and isinstance(rows, np.ndarray):
        rows = rows.tolist()
    fmt = None
    for r in rows:
        if np is not None and isinstance(r, np.ndarray):
            f32 = r.dtype == np.float32
            r = r.tolist()
        if f32:
            if fmt is None or len(r) != fmt[0]:
                fmt = (len(r), " ".join(["%.9g"] * len(r)) + "\n")
            yield fmt[1] % tuple(r)
        else:
            yield " ".join(map(repr, map(float, r))) + "\n"


class _Writer:
    """Bytes written into ingest/NAME, staged as NAME.part when large."""

    def __init__(self, index, name, size):
        self.ix = index
        self.final = os.path.join(index.root, "ingest", name)
        self.staged = size > index.stage_bytes
        self.path = self.final + ".part" if self.staged else self.final
        self.fd = index._call(os.open, self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        self.buf = bytearray()

    def write(self, b):
        self.buf += b
        if len(self.buf) >= CHUNK_BYTES:
            self.flush()

    def flush(self):
        view = memoryview(self.buf)
        while view:
            view = view[self.ix._call(os.write, self.fd, view):]
        self.buf = bytearray()

    def __enter__(self):
        return self

    def __exit__(self, kind, value, tb):
        if kind is None:
            self.commit()
        else:
            self.abort()

    def commit(self):
        """Close (which commits a plain file), then rename a staged one."""
        try:
            self.flush()
            fd, self.fd = self.fd, None
            self.ix._call(os.close, fd)
            if self.staged:
                self.ix._call(os.rename, self.path, self.final)
        except BaseException:
            self.abort()
            raise

    def abort(self):
        if self.fd is not None:
            fd, self.fd = self.fd, None
            try:
                os.close(fd)
            except OSError:
                pass
        if self.staged:
            try:
                os.unlink(self.path)
            except OSError:
                pass


class _Session:
    """A query session, query/NAME, with its `in` and `out` held open: a
    query is the query call (one ioctl() of `in`) when it fits 16 KiB, else
    a write at offset 0 of `in` (synchronous: it runs the query; a long
    input runs at the close of a duplicate of the descriptor), then `out`
    read from offset 0.  Used by one thread at a time (the Index's pool)."""

    def __init__(self, index, name):
        self.ix = index
        self.name = name
        self.path = os.path.join(index.root, "query", name)
        self.fi = self.fo = None
        self.seen = []        # the lines of `errors` naming it, as last read

    def open(self):
        try:
            os.makedirs(self.path, 0o755, True)
            # O_DSYNC: a whole input written at offset 0 runs at the write
            self.fi = os.open(os.path.join(self.path, "in"), os.O_WRONLY | os.O_DSYNC)
            self.fo = os.open(os.path.join(self.path, "out"), os.O_RDONLY)
        except OSError as e:
            self.end()
            raise VecfsError(e.errno, e.strerror, e.filename, self.new_lines()) from None
        except BaseException:
            self.end()
            raise

    def close_fds(self):
        for fd in (self.fi, self.fo):
            if fd is not None:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self.fi = self.fo = None

    def end(self):
        self.close_fds()
        try:
            os.rmdir(self.path)
        except OSError:
            pass

    def _call(self, req, nres):
        """The query call, when the request and about nres results fit its
        buffer: out's text, or None (then in is written and out read)."""
        size = max(len(req) + 4, 64 * nres + 256)
        if size > _CALL_MAX or self.ix._no_call:
            return None
        buf = bytearray(size)
        struct.pack_into("<I", buf, 0, len(req))
        buf[4:4 + len(req)] = req
        try:
            # (other threads run meanwhile: ioctl() releases the interpreter)
            n = fcntl.ioctl(self.fi, _call_cmd(size), buf, True)
        except OSError as e:
            if e.errno in (errno.ENOTTY, errno.ENOSYS):    # a daemon without it
                self.ix._no_call = True
            elif e.errno != errno.ERANGE:                   # ERANGE: longer keys than guessed
                raise
            return None
        return bytes(buf[:n])

    def _run(self, req, nres):
        text = self._call(req, nres)
        if text is not None:
            return text
        # in is synchronous (O_DSYNC): one write of a whole input shorter
        # than _SYNC_MAX at offset 0 runs it; a longer one runs at a close
        off = os.pwrite(self.fi, req, 0)
        if off < len(req) or len(req) >= _SYNC_MAX:
            view = memoryview(req)
            while off < len(req):
                off += os.pwrite(self.fi, view[off:], off)
            os.close(os.dup(self.fi))             # runs the query
        size = 1 << 16
        chunks = []
        while True:
            b = os.pread(self.fo, size, sum(map(len, chunks)))
            chunks.append(b)
            if len(b) < size:                     # the end of out
                return b"".join(chunks) if len(chunks) > 1 else b
            size = 1 << 20

    def query(self, opts, rows, k=None):
        """One input: (keys, distances), a list a query (k: results a query,
        None: config's, guessed as 100 to size the query call)."""
        if len(rows) == 0:
            return [], []
        req = (opts + "".join(_text_rows(rows))).encode()
        nres = len(rows) * (k or 100)
        try:
            try:
                text = self._run(req, nres)
            except FileNotFoundError:         # the session was removed: a new one
                self.close_fds()
                self.name = "%s-q%d" % (self.ix._tag, next(self.ix._sessions))
                self.path = os.path.join(self.ix.root, "query", self.name)
                self.seen = []
                self.open()
                text = self._run(req, nres)
        except VecfsError:
            raise
        except OSError as e:
            raise VecfsError(e.errno, e.strerror, os.path.join(self.path, "in"),
                             self.new_lines()) from None
        res = _parse_out(text.decode("utf-8"))
        if len(res) != len(rows):
            raise VecfsError(errno.EIO, "%d results for %d queries" % (len(res), len(rows)),
                             os.path.join(self.path, "out"), self.new_lines())
        # distances are float32: as such in both paths
        return [[h[0] for h in q] for q in res], [array("f", [h[1] for h in q]).tolist() for q in res]

    def new_lines(self):
        """The lines naming this session that `errors` gained since the last
        look (only this session's queries name it)."""
        marks = (" query/%s/" % self.name, " query/%s:" % self.name)
        now = [line for line in self.ix._errors() if marks[0] in line or marks[1] in line]
        new, self.seen = _new_lines(self.seen, now), now
        return new


def _records(f):
    with f:
        for line in f:
            rec = json.loads(line)
            vec = rec["vector"]
            vec = np.array(vec, dtype=np.float32) if np is not None else array("f", vec).tolist()
            yield rec["key"], vec, rec.get("payload")


def _parse_out(text):
    """A session's `out`: KEY<TAB>DISTANCE lines, an empty line between
    queries; a list of [(key, distance)] a query."""
    res = [[]]
    lines = text.split("\n")
    lines.pop()                                   # after the last newline
    for line in lines:
        if line:
            key, _, d = line.rpartition("\t")
            res[-1].append((key, float(d)))
        else:
            res.append([])
    return res


class Config:
    """The mount's config as a mapping: reading a key reads `config`,
    assigning one (or update()) writes it."""

    def __init__(self, index):
        self._ix = index

    def __getitem__(self, key):
        return self._ix.get_config()[key]

    def __setitem__(self, key, value):
        self._ix.set_config(**{key: value})

    def update(self, *args, **kv):
        self._ix.set_config(**dict(*args, **kv))

    def get(self, key, default=None):
        return self._ix.get_config().get(key, default)

    def keys(self):
        return self._ix.get_config().keys()

    def items(self):
        return self._ix.get_config().items()

    def __iter__(self):
        return iter(self._ix.get_config())

    def __len__(self):
        return len(self._ix.get_config())

    def __contains__(self, key):
        return key in self._ix.get_config()

    def __repr__(self):
        return "Config(%r)" % self._ix.get_config()


class Index:
    """A vecfs mount at `mountpoint`. Safe to share between threads."""

    def __init__(self, mountpoint):
        self.root = os.path.abspath(mountpoint)
        if not os.path.isfile(os.path.join(self.root, "ctl")):
            raise VecfsError(errno.ENOENT, "not a vecfs mount", self.root)
        self.stage_bytes = STAGE_BYTES
        self._names = itertools.count()
        self._sessions = itertools.count()     # session names
        self._no_call = False                  # the daemon has no query call (ENOTTY)
        self._lock = threading.Lock()          # the session pool
        self._deleting = threading.Lock()      # deletes, one at a time
        self._assign = threading.Lock()        # adds with assigned keys, one at a time
        self._free = []                        # sessions not in use
        self._all = []                         # every session (in use or not)
        self._lent = {}                        # path -> session, from _session()
        self._pid = os.getpid()
        self._tag = "py-%d-%x" % (self._pid, id(self) & 0xffffff)
        self._local = threading.local()        # the errors lines before a call

    # ------------------------------------------------------------ errors
    def _errors(self):
        try:
            with open(os.path.join(self.root, "errors"), encoding="utf-8",
                      errors="replace") as f:
                return f.read().splitlines()
        except OSError:
            return []

    def _call(self, fn, *args):
        """fn(*args); an OSError becomes a VecfsError with the lines that
        `errors` gained since _begin()."""
        try:
            return fn(*args)
        except VecfsError:
            raise
        except OSError as e:
            raise VecfsError(e.errno, e.strerror, e.filename,
                             self._new_lines(self._seen, self._errors())) from None

    @staticmethod
    def _new_lines(before, after):
        return _new_lines(before, after)

    def _begin(self):
        self._seen = self._errors()

    @property
    def _seen(self):
        return getattr(self._local, "seen", [])

    @_seen.setter
    def _seen(self, v):
        self._local.seen = v

    # ------------------------------------------------------------ ingest
    def add(self, vectors, keys=None, payloads=None):
        """Add rows (upsert). Returns the keys: those given, or those the store
        assigned (decimal strings), or None when another ingest of assigned
        keys ran at the same time and they cannot be told."""
        if np is not None and isinstance(vectors, np.ndarray):
            if vectors.ndim == 1:
                vectors = vectors[None, :]
            if vectors.ndim != 2:
                raise ValueError("vectors must be 2-D")
        elif vectors and _is_vector(vectors):
            vectors = [vectors]
        n = len(vectors)
        if keys is not None:
            keys = [_check_key(k) for k in ([keys] if isinstance(keys, str) else keys)]
            if len(keys) != n:
                raise ValueError("%d keys for %d vectors" % (len(keys), n))
        if payloads is not None:
            payloads = list(payloads)
            if len(payloads) != n:
                raise ValueError("%d payloads for %d vectors" % (len(payloads), n))
            if keys is None:
                raise ValueError("payloads need keys")
        if n == 0:
            return []
        self._begin()
        if keys is not None:
            self._add_jsonl(vectors, keys, payloads)
            return keys
        with self._assign:
            first = self.stats().get("next_key")
            if np is not None and isinstance(vectors, np.ndarray):
                self._add_npy(vectors)
            else:
                self._add_fvecs(vectors)
            last = self.stats().get("next_key")
        if isinstance(first, int) and isinstance(last, int) and last - first == n:
            return [str(i) for i in range(first, last)]
        return None

    def _name(self, ext):
        return "%s-%d.%s" % (self._tag, next(self._names), ext)

    def _add_jsonl(self, vectors, keys, payloads):
        dim = len(vectors[0])
        rows = vectors.tolist() if np is not None and isinstance(vectors, np.ndarray) else vectors
        with _Writer(self, self._name("jsonl"), n_bytes(len(keys), dim, 24)) as w:
            for i, (k, v) in enumerate(zip(keys, rows)):
                rec = {"key": k, "vector": [float(x) for x in v]}
                if payloads is not None:
                    rec["payload"] = payloads[i]
                w.write(json.dumps(rec, ensure_ascii=False, allow_nan=True,
                                   separators=(",", ":")).encode() + b"\n")

    def _add_fvecs(self, vectors):
        dim = len(vectors[0])
        swap = sys.byteorder != "little"
        with _Writer(self, self._name("fvecs"), n_bytes(len(vectors), dim, 4)) as w:
            for v in vectors:
                a = array("f", v)
                if swap:
                    a.byteswap()
                w.write(struct.pack("<i", len(a)) + a.tobytes())

    def _add_npy(self, a):
        if a.dtype.kind != "f" or a.dtype.itemsize not in (4, 8):
            a = a.astype("<f4")
        elif a.dtype.byteorder == ">" or (a.dtype.byteorder == "=" and not np.little_endian):
            a = a.astype(a.dtype.newbyteorder("<"))
        a = np.ascontiguousarray(a)
        header = "{'descr': '<f%d', 'fortran_order': False, 'shape': (%d, %d), }" % (
            a.dtype.itemsize, a.shape[0], a.shape[1])
        pad = 64 - (10 + len(header) + 1) % 64
        header = (header + " " * pad + "\n").encode("latin1")
        step = max(1, CHUNK_BYTES // max(1, a.shape[1] * a.dtype.itemsize))
        with _Writer(self, self._name("npy"), len(header) + a.nbytes) as w:
            w.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header)
            for i in range(0, a.shape[0], step):
                w.write(a[i:i + step].tobytes())

    # ------------------------------------------------------------ search
    def _take(self):
        """A session from the pool, or a new one."""
        with self._lock:
            if os.getpid() != self._pid:          # a forked child: its own sessions
                inherited = self._all
                self._pid = os.getpid()
                self._tag = "py-%d-%x" % (self._pid, id(self) & 0xffffff)
                self._free, self._all, self._lent = [], [], {}
                for sess in inherited:            # the parent's: its descriptors only
                    sess.close_fds()
            if self._free:
                return self._free.pop()
            sess = _Session(self, "%s-q%d" % (self._tag, next(self._sessions)))
            self._all.append(sess)
        try:
            sess.open()
        except BaseException:
            with self._lock:
                self._all.remove(sess)
            raise
        return sess

    def _give(self, sess):
        """A session back to the pool (ended if close() ran meanwhile)."""
        with self._lock:
            if sess in self._all:
                self._free.append(sess)
                return
        sess.end()

    def _session(self):
        """The path of a session from the pool, for code that writes its
        files itself; given back with _release(path)."""
        sess = self._take()
        with self._lock:
            self._lent[sess.path] = sess
        return sess.path

    def _release(self, path):
        with self._lock:
            sess = self._lent.pop(path, None)
        if sess is not None:
            self._give(sess)

    def close(self):
        """End this Index's query sessions (rmdir query/ID); one that a
        search uses at the moment ends when that search returns."""
        with self._lock:
            free, self._all, self._free = self._free, [], []
        for sess in free:
            sess.end()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def search(self, queries, k=10, filter=None, recall=None, nprobe=None,
               exact=False, refine=None):
        """Nearest neighbours: (keys, distances).

        One query vector: two 1-D sequences of min(k, live records) entries.
        A batch (2-D): rows of k entries each, padded with None keys and inf
        distances where a query has fewer results; numpy arrays (keys of
        dtype object, distances float32) when numpy is installed, else
        lists of lists. k=None takes config's k."""
        single = _is_vector(queries)
        rows = [queries] if single else queries
        opts = _options(k, filter, recall, nprobe, exact, refine)
        dim = len(rows[0]) if len(rows) else 1
        per = max(1, min(MAX_RESULTS // (k or 1000), MAX_INPUT // (dim * 26)))
        keys, dists = [], []
        sess = self._take()
        try:
            for i in range(0, len(rows), per):
                ks, ds = sess.query(opts, rows[i:i + per], k)
                keys += ks
                dists += ds
        finally:
            self._give(sess)
        if single:
            if np is not None:
                return np.array(keys[0], dtype=object), np.array(dists[0], dtype=np.float32)
            return keys[0], dists[0]
        width = k if k else max((len(r) for r in keys), default=0)
        keys = [r + [None] * (width - len(r)) for r in keys]
        dists = [r + [math.inf] * (width - len(r)) for r in dists]
        if np is not None:
            ka = np.empty((len(keys), width), dtype=object)
            for i, r in enumerate(keys):
                ka[i, :] = r
            return ka, np.array(dists, dtype=np.float32).reshape(len(keys), width)
        return keys, dists

    # ------------------------------------------------------------ records
    def get(self, key):
        """(vector, payload) of a record; KeyError when it does not exist."""
        p = os.path.join(self.root, "records", _check_key(key))
        try:
            with open(p) as f:
                text = f.read()
        except FileNotFoundError:
            raise KeyError(key) from None
        vec = array("f", map(float, text.split()))
        vec = np.array(vec, dtype=np.float32) if np is not None else vec.tolist()
        try:
            payload = json.loads(os.getxattr(p, "user.payload"))
        except OSError as e:
            if e.errno != errno.ENODATA:
                raise
            payload = None
        return vec, payload

    def delete(self, keys=None, missing_ok=False, filter=None):
        """Delete records: a key or a list of keys, and with `filter` (a dict,
        as in search) every record whose payload matches, in one atomic
        commit through the mount's `delete` file; returns how many were
        deleted (`stats`' last_delete).  Keys that do not exist are skipped;
        then KeyError lists them, unless missing_ok."""
        if isinstance(keys, str):
            keys = [keys]
        keys = [_check_key(k) for k in keys] if keys is not None else []
        if filter is not None and not isinstance(filter, dict):
            raise TypeError("a filter is a dict")
        if not keys and filter is None:
            return 0
        missing = [] if missing_ok else [k for k in dict.fromkeys(keys) if k not in self]
        with self._deleting:
            self._begin()

            def run():
                with open(os.path.join(self.root, "delete"), "w", encoding="utf-8",
                          buffering=CHUNK_BYTES) as f:
                    for k in keys:
                        f.write('"%s"\n' % k.replace('"', '""'))
                    if filter is not None:
                        f.write("filter=" + json.dumps(filter, ensure_ascii=False,
                                                       allow_nan=False) + "\n")
            self._call(run)
            n = self.stats().get("last_delete")
        if missing:
            raise KeyError(missing if len(missing) > 1 else missing[0])
        return n

    def export(self):
        """Every live record as (key, vector, payload), in key order, from one
        snapshot of the store taken now; streamed from `export.jsonl`, a
        line at a time.  Vectors as in get(); payload None when there is
        none."""
        self._begin()
        f = self._call(open, os.path.join(self.root, "export.jsonl"), "r", -1, "utf-8")
        return _records(f)

    def __contains__(self, key):
        return os.path.exists(os.path.join(self.root, "records", _check_key(key)))

    def keys(self):
        """Every live key (streamed)."""
        with os.scandir(os.path.join(self.root, "records")) as it:
            for e in it:
                yield e.name

    def __len__(self):
        return self.stats()["records"]

    # ------------------------------------------------------------ control
    def ctl(self, command):
        """Run a ctl command (build, build stage, compact, rebalance, verify)."""
        self._begin()
        self._write(os.path.join(self.root, "ctl"), command.rstrip("\n") + "\n")

    def build(self, stage=False):
        """Build a new generation (and make it active unless stage)."""
        self.ctl("build stage" if stage else "build")

    def verify(self):
        """Run verify; returns its line from `errors`."""
        self.ctl("verify")
        lines = [x for x in self._new_lines(self._seen, self._errors()) if " verify: " in x]
        if lines and " verify: ok" not in lines[-1]:
            raise VecfsError(errno.EIO, "verify failed", os.path.join(self.root, "ctl"), lines)
        return lines[-1] if lines else None

    def _write(self, path, text):
        def run():
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
        self._call(run)

    def _read(self, name):
        with open(os.path.join(self.root, name), encoding="utf-8") as f:
            return f.read()

    def stats(self):
        """The root `stats` file as a dict (numbers as int or float, `none` as
        None, two numbers as a tuple)."""
        return _parse_kv(self._read("stats"))

    def errors(self):
        """The lines of the `errors` file."""
        return self._errors()

    def get_config(self):
        return _parse_kv(self._read("config"))

    def set_config(self, **kv):
        """Set config keys, all in one write (all or nothing)."""
        if not kv:
            return
        lines = []
        for k, v in kv.items():
            if isinstance(v, bool):
                v = int(v)
            lines.append("%s = %s\n" % (k, v))
        self._begin()
        self._write(os.path.join(self.root, "config"), "".join(lines))

    @property
    def config(self):
        return Config(self)

    @config.setter
    def config(self, kv):
        self.set_config(**dict(kv))


def _raise(e):
    raise e


def _new_lines(before, after):
    """The lines of `after` that were not in `before`, once each.

    `errors` only appends and drops its oldest lines, so `after` starts with
    what is left of `before` (a suffix of it): the longest suffix of
    `before` that `after` starts with is the old part.  The same message
    may stand on several lines (the same second); a call's repeats of one
    line are given once."""
    first = after[0] if after else None
    for m in range(min(len(before), len(after)), 0, -1):
        if before[-m] == first and before[-m:] == after[:m]:
            after = after[m:]
            break
    return list(dict.fromkeys(after))


def n_bytes(rows, dim, per):
    return rows * (dim * per + 8)


def _options(k, filter, recall, nprobe, exact, refine):
    opts = []
    for name, v in (("k", k), ("recall", recall), ("nprobe", nprobe), ("refine", refine)):
        if v is not None:
            opts.append("%s=%s" % (name, repr(v) if isinstance(v, float) else int(v)))
    if exact:
        opts.append("mode=exact")
    text = " ".join(opts) + "\n" if opts else ""
    if filter is not None:
        if not isinstance(filter, dict):
            raise TypeError("a filter is a dict")
        text += "filter=" + json.dumps(filter, ensure_ascii=False, allow_nan=False) + "\n"
    return text
