"""cluster_bench.py: vecfs.cluster.ShardedIndex measured, and checked
against one store.

  python3 tools/python/cluster_bench.py bench VECFS DIR WORK [SHARDS...] [--metric M]
      DIR/base.fvecs, query.fvecs, gt.ivecs; for each shard count (1 2 4):
      a LocalCluster with fresh stores under WORK (metric M: l2, cosine or
      dot; l2 unless given), add (keys 0..N-1) in one call, build, the
      queries as one batch at the defaults (best of 3): rows/s, build s,
      QPS, recall@10, the client's merge as a share of the search; then 200
      queries one per call: p50 and p99 latency; the load average after.
  python3 tools/python/cluster_bench.py accept VECFS DIR WORK [METRIC]
      4 shards and one store (mounted under WORK) on the same rows: exact
      search of every query equal (keys and distances), recall@10 at the
      defaults of both.
  python3 tools/python/cluster_bench.py grow VECFS DIR WORK [SHARDS]
      SHARDS shards (4 unless given) with DIR/base.fvecs (keys 0..N-1) and a
      generation, then one more shard added while a thread searches the
      first 100 queries exactly again and again: the share of the keys
      that moved, the records of each shard, and how many of the searches
      during the move differed from the search before it (0 is right).
"""

import os
import shutil
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import vecfs                          # noqa: E402
import vecfs.cluster as vc            # noqa: E402


def fvecs(path, dtype="<f4"):
    raw = np.fromfile(path, dtype="<i4")
    d = int(raw[0])
    return np.ascontiguousarray(raw.reshape(-1, d + 1)[:, 1:].view(dtype))


def recall(got, gt, k=10):
    return float(np.mean([len(set(int(x) for x in got[i] if x is not None) & set(gt[i, :k].tolist())) / k
                          for i in range(len(got))]))


_merge_s = [0.0]
_orig_merge = vc._merge


def _timed_merge(parts, k):
    t = time.perf_counter()
    try:
        return _orig_merge(parts, k)
    finally:
        _merge_s[0] += time.perf_counter() - t


def bench(vecfs_bin, data, work, counts, metric=None):
    base, q = fvecs(data + "/base.fvecs"), fvecs(data + "/query.fvecs")
    gt = fvecs(data + "/gt.ivecs", "<i4")
    keys = [str(i) for i in range(len(base))]
    vc._merge = _timed_merge
    for n in counts:
        root = os.path.join(work, "b%d" % n)
        shutil.rmtree(root, ignore_errors=True)
        ix = vc.ShardedIndex.local(n, root, vecfs=vecfs_bin, timeout=3600)
        try:
            ix.config.update(dict(auto_build=0, **({"metric": metric} if metric else {})))
            t = time.perf_counter()
            ix.add(base, keys=keys)
            t_add = time.perf_counter() - t
            t = time.perf_counter()
            ix.build()
            t_build = time.perf_counter() - t
            ix.search(q[:10])
            best, merge = None, None
            for _ in range(3):
                _merge_s[0] = 0.0
                t = time.perf_counter()
                k, _ = ix.search(q, k=10)
                dt = time.perf_counter() - t
                if best is None or dt < best:
                    best, merge = dt, _merge_s[0]
            print("%d shard(s): add %d x %d in %.1f s (%s rows/s); build %.1f s; "
                  "one batch of %d: %s QPS, recall@10 %.4f; merge %.1f ms = %.1f%% of the search"
                  % (n, len(base), base.shape[1], t_add, format(int(len(base) / t_add), ","),
                     t_build, len(q), format(int(len(q) / best), ","), recall(k, gt),
                     merge * 1e3, 100 * merge / best), flush=True)
            lat = []
            for i in range(200):
                t = time.perf_counter()
                ix.search(q[i % len(q)], k=10)
                lat.append(time.perf_counter() - t)
            lat = np.sort(lat) * 1e3
            print("%d shard(s): one query a call: p50 %.1f ms, p99 %.1f ms; load average %s"
                  % (n, lat[len(lat) // 2], lat[int(len(lat) * 0.99)],
                     " ".join(open("/proc/loadavg").read().split()[:3])), flush=True)
        finally:
            ix.close()


def accept(vecfs_bin, data, work, metric=None):
    base, q = fvecs(data + "/base.fvecs"), fvecs(data + "/query.fvecs")
    gt = fvecs(data + "/gt.ivecs", "<i4")
    mnt, store = os.path.join(work, "one"), os.path.join(work, "one-store")
    shutil.rmtree(store, ignore_errors=True)
    shutil.rmtree(os.path.join(work, "shards"), ignore_errors=True)
    os.makedirs(mnt, exist_ok=True)
    subprocess.run([vecfs_bin, store, mnt], check=True)
    ix = None
    try:
        one = vecfs.Index(mnt)
        ix = vc.ShardedIndex.local(4, os.path.join(work, "shards"), vecfs=vecfs_bin, timeout=3600)
        conf = {"auto_build": 0}
        if metric:
            conf["metric"] = metric
        one.config.update(conf)
        ix.config.update(conf)
        one.add(base)
        ix.add(base, keys=[str(i) for i in range(len(base))])
        k1, d1 = one.search(q, k=10, exact=True)
        k2, d2 = ix.search(q, k=10, exact=True)
        print("exact, %d queries over 4 shards and one store: keys equal %s, distances equal "
              "bit for bit %s" % (len(q), bool((k1 == k2).all()), d1.tobytes() == d2.tobytes()))
        one.build()
        ix.build()
        r1, r2 = recall(one.search(q, k=10)[0], gt), recall(ix.search(q, k=10)[0], gt)
        print("recall@10 at the defaults: one store %.4f, 4 shards %.4f (difference %+.4f)"
              % (r1, r2, r2 - r1))
        one.close()
    finally:
        if ix is not None:
            ix.close()
        subprocess.run(["fusermount3", "-u", mnt])


def grow(vecfs_bin, data, work, shards=4):
    import threading
    base, q = fvecs(data + "/base.fvecs"), fvecs(data + "/query.fvecs")[:100]
    shutil.rmtree(os.path.join(work, "shards"), ignore_errors=True)
    with vc.ShardedIndex.local(shards, os.path.join(work, "shards"), vecfs=vecfs_bin,
                               timeout=3600) as ix:
        ix.add(base, keys=[str(i) for i in range(len(base))])
        ix.build()
        want_k, want_d = ix.search(q, k=10, exact=True)
        before = len(ix)
        wrong, done, count = [], threading.Event(), [0]

        def load():
            while not done.is_set():
                k, d = ix.search(q, k=10, exact=True)
                count[0] += 1
                if not ((k == want_k).all() and d.tobytes() == want_d.tobytes()):
                    wrong.append(int((k != want_k).sum()))
        t = threading.Thread(target=load)
        t.start()
        try:
            moved = ix.add_shard()
        finally:
            done.set()
            t.join()
        per = [s.index.stats()["records"] for s in ix.shards]
        print("%d -> %d shards: %d of %d keys moved (%.4f; 1/%d = %.4f); records a shard %s"
              % (shards, len(ix.shards), moved, before, moved / before, shards + 1,
                 1 / (shards + 1), per))
        print("searches during the move: %d, differing from the search before it: %d"
              % (count[0], len(wrong)))


if __name__ == "__main__":
    cmd, vecfs_bin, data, work = sys.argv[1:5]
    vecfs_bin = os.path.abspath(vecfs_bin)
    if cmd == "bench":
        rest, metric = sys.argv[5:], None
        if "--metric" in rest:
            i = rest.index("--metric")
            metric = rest[i + 1]
            rest = rest[:i] + rest[i + 2:]
        bench(vecfs_bin, data, work, [int(x) for x in rest] or [1, 2, 4], metric)
    elif cmd == "grow":
        grow(vecfs_bin, data, work, int(sys.argv[5]) if len(sys.argv) > 5 else 4)
    else:
        accept(vecfs_bin, data, work, sys.argv[5] if len(sys.argv) > 5 else None)
