#!/usr/bin/python3
"""bench.py MOUNT DIR [--queries Q] [--metric l2|dot|cosine] [--loaded]
                [--rounds R] [--module PATH]

The Python module end to end on a fresh mount: DIR/base.fvecs read into a
numpy array and added in one call (assigned keys 0..N-1), a build, then
DIR/query.fvecs searched one query a call (one thread) and as one batch,
recall@10 against DIR/gt.ivecs.  Prints rows/s, build seconds, calls/s,
QPS and recall.  Needs numpy.  The mount must hold an empty store, or with
--loaded the records of DIR/base.fvecs as keys 0..N-1, built (`cp
DIR/base.fvecs MOUNT/ingest/` and `echo build > MOUNT/ctl`): no add, no
build.  --rounds repeats the searches; --module imports vecfs from PATH
(another version of tools/python, to compare the two).
"""
import argparse
import os
import sys
import time

import numpy as np



def read_vecs(path, dtype):
    raw = np.fromfile(path, dtype=np.int32)
    d = int(raw[0])
    return raw.reshape(-1, d + 1)[:, 1:].copy().view(dtype)


def recall_at(keys, gt, k):
    hits = 0
    for row, truth in zip(keys, gt):
        want = set(int(t) for t in truth[:k])
        hits += sum(1 for key in row[:k] if key is not None and int(key) in want)
    return hits / (k * len(gt))


def add_and_build(ix, base, metric):
    ix.config.update(metric=metric)
    t0 = time.perf_counter()
    keys = ix.add(base)
    t_add = time.perf_counter() - t0
    if keys is not None and (keys[0] != "0" or keys[-1] != str(len(base) - 1)):
        sys.exit("bench.py: keys not 0..N-1")
    t0 = time.perf_counter()
    ix.build()
    t_build = time.perf_counter() - t0
    print(f"add: {len(base)} x {base.shape[1]} in {t_add:.1f} s "
          f"({len(base) / t_add:,.0f} rows/s, one call); build {t_build:.1f} s")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("mount")
    ap.add_argument("dir")
    ap.add_argument("--queries", type=int, default=1000)
    ap.add_argument("--metric", default="l2")
    ap.add_argument("--loaded", action="store_true")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--module", default=os.path.dirname(os.path.abspath(__file__)))
    a = ap.parse_args()
    sys.path.insert(0, os.path.abspath(a.module))
    import vecfs
    base = None if a.loaded else read_vecs(os.path.join(a.dir, "base.fvecs"), np.float32)
    queries = read_vecs(os.path.join(a.dir, "query.fvecs"), np.float32)[: a.queries]
    gt = read_vecs(os.path.join(a.dir, "gt.ivecs"), np.int32)[: a.queries]
    with vecfs.Index(a.mount) as ix:
        if a.loaded:
            if not len(ix) or ix.stats().get("active") is None:
                sys.exit("bench.py: --loaded, but the store is empty or has no generation")
        elif len(ix):
            sys.exit("bench.py: the store is not empty")
        else:
            add_and_build(ix, base, a.metric)
        print(f"module: {vecfs.__file__}")
        ix.search(queries[0], k=10)  # a session made
        for _ in range(a.rounds):
            for label, batch in (("one query a call", False), ("one batch", True)):
                t0 = time.perf_counter()
                if batch:
                    found, _ = ix.search(queries, k=10)
                else:
                    found = [ix.search(q, k=10)[0] for q in queries]
                t = time.perf_counter() - t0
                rate = f"{len(queries) / t:,.0f} calls/s" if not batch else f"{len(queries) / t:,.0f} QPS"
                print(f"search, {label}: {len(queries)} queries, {rate}, "
                      f"recall@10 {recall_at(found, gt, 10):.4f}", flush=True)
        st = ix.stats()
        print(f"stats: recall_estimate {st.get('recall_estimate')} "
              f"over {st.get('recall_samples')} samples")


if __name__ == "__main__":
    main()
