/*
 * engine/internal.h - the engine's shared internals: the store handle, the
 * in-memory cache of generations, and helpers between engine modules.
 */
#ifndef VF_INTERNAL_H
#define VF_INTERNAL_H

#include <assert.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <stdio.h>
#include <time.h>

#include "assign.h"
#include "io.h"
#include "block.h"
#include "checksum.h"
#include "kernels.h"
#include "kmeans.h"
#include "meta.h"
#include "postings.h"
#include "rabitq.h"
#include "rotation.h"
#include "store.h"
#include "vecfs.h"

/* VF_ASSERT_HELD(mu): the caller holds mutex mu, as a function whose
 * comment says "with mu held" needs; an assertion, so compiled out with
 * NDEBUG.  A trylock that succeeds means no thread held it (one held by
 * another thread passes: the check catches a lock not taken). */
static inline int vf_mutex_held(pthread_mutex_t *mu)
{
	if (pthread_mutex_trylock(mu) != 0)
		return 1;
	pthread_mutex_unlock(mu);
	return 0;
}
#define VF_ASSERT_HELD(mu) assert(vf_mutex_held(mu))

/* An immutable generation's routing state, loaded once and shared. */
typedef struct vf_gen {
	uint64_t id;
	int refs;               /* guarded by vecfs.gen_mu */
	vf_genmeta meta;        /* as loaded (state, nlist, dims) */
	float *centroids;       /* nlist * dim */
	vf_cindex ci;
	/* ci's float centroids for assigning rows (vf_nearest_bounded()),
	 * with an 8-bit copy of their own, whose first look bounds the float
	 * scores (ci's bounds the binary16 ones): vf_cindex_assign_init() */
	vf_cindex ai;
	float *rc;              /* rotated centroids, nlist * pdim */
	float *rc_sum;          /* nlist */
	/* VF_GEN_QUERY_TABLE: the centre mu its first-pass tables are built
	 * around (dim, saved with it) and R mu (pdim); else NULL */
	float *center, *rmu;
	vf_rotation rot;
	/* where each cluster's postings were found in one snapshot (see
	 * probe.c): nlist slots, allocated on first use, under located_mu */
	pthread_mutex_t located_mu;
	void *located;
	struct vf_calib *cal;   /* its recall calibration (calibrate.h), NULL
				 * for a generation built without one */
	struct vf_gen *next;
} vf_gen;

#define VF_LAT_RING 4096

/* What a search reads of the meta family, for one snapshot (search.c):
 * the same for every search of that snapshot, so the last one's is kept. */
typedef struct vf_snap_meta {
	int valid;
	uint64_t txnid, epoch; /* the snapshot, and the map it was read through */
	vecfs_config sc;
	vf_counters cnt;
	uint64_t active;
	int gm_ok;             /* gm is the active generation's meta */
	vf_genmeta gm;
} vf_snap_meta;

struct vecfs {
	vf_store *store;
	vf_vcache *vcache;
	pthread_mutex_t gen_mu;     /* generation cache */
	vf_gen *gens;
	vf_snap_meta snap_meta;     /* the last search's snapshot, under gen_mu */
	pthread_mutex_t build_mu;   /* builds never overlap */
	pthread_mutex_t stat_mu;    /* in-memory query counters */
	uint64_t queries;
	uint64_t pages_read;        /* major faults of the searches counted */
	uint64_t prefetch_until;    /* searches plan their reads until then
				     * (engine/prefetch.c) */
	uint32_t prefetch_calm;     /* searches in a row since then that waited
				     * for no page */
	int prefetch_mode;          /* 0: as prefetch.c decides; 1: always; -1:
				     * never (tests) */
	uint32_t lat[VF_LAT_RING];
	uint64_t nlat;
	pthread_t auto_thread;
	int auto_running;           /* guarded by stat_mu */
	pthread_t maint_thread;     /* background compaction */
	pthread_cond_t maint_cv;    /* with stat_mu */
	int maint_started, maint_due;
	int maint_idle_due;         /* a backlog to fold once writes pause */
	int maint_busy;             /* the worker is compacting or rebalancing */
	struct timespec last_write; /* CLOCK_MONOTONIC of the last kick */
	atomic_int closing;         /* set once vecfs_close() began: builds,
				     * rebalances and the workers stop */
	pthread_t hint_thread;      /* fills the record location hints */
	int hint_started;
	atomic_int hint_stop;       /* the hint filler stops */
	int threads;
	size_t pending_bytes;       /* delta postings a write keeps before it
				     * writes them in key order (32 MiB) */
	size_t spool_bytes;         /* a batch's write buffer
				     * (VECFS_BATCH_BUF); the tests set both
				     * smaller */
	uint64_t sync_step;         /* changes a compaction step brings into a
				     * generation that lacks them, at first
				     * (COMPACT_SYNC; VECFS_SYNC_STEP: tests
				     * make it small, so that a generation is
				     * caught up in many steps) */
	void (*before_snapshot)(vecfs *v); /* tests: called by a rebalance
				     * between its compaction and its snapshot
				     * (another generation made active there) */
	int no_preparer;            /* tests: every put encodes each row as it
				     * writes it, as when the preparer cannot
				     * start (write.c) */
	uint32_t gen_flags;         /* VF_GEN_* of the generations it builds (the
				     * tests build the older kind with 0) */
	vecfs_lost_fn lost_fn;      /* damaged records skipped (vecfs_set_lost_fn) */
	void *lost_arg;
	vecfs_notice_fn notice_fn;  /* what the owner should hear (vecfs_set_notice_fn) */
	void *notice_arg;
	struct vf_sampler *sampler; /* the recall of served queries (sampler.c) */
	/* told of each served ANN query (neither exact nor filtered) once its
	 * read transactions ended: vf_sampler_offer, set by vf_sampler_init
	 * when the store opens; NULL: no one (search.c calls it) */
	void (*on_search)(vecfs *v, const float *queries, size_t nq, uint32_t dim,
			  const vecfs_results *r);
	struct vf_fset_cache *_Atomic fset_cache; /* filters' matches by snapshot
					   * (filtered.c), made at first use */
};

/* sampler.c: a share of served ANN queries run again exactly in the
 * background; the estimate in stats. */
typedef struct vf_sampler vf_sampler;
int vf_sampler_init(vecfs *v);
void vf_sampler_fini(vecfs *v);
void vf_sampler_offer(vecfs *v, const float *queries, size_t nq, uint32_t dim,
		      const vecfs_results *r);
void vf_sampler_stats(vecfs *v, vecfs_stats *st);
/* vecfs_search() on at most `threads` threads, the calling one included (0:
 * the store's; 1: the calling thread alone, as the sampler runs, so that its
 * CPU time is all its own and at its priority) (search.c). */
int vf_search_threads(vecfs *v, const float *queries, size_t nq, uint32_t dim,
		      const vecfs_query_opts *opts, int threads, vecfs_results **out,
		      char *err, size_t errlen);

static inline void vf_seterr(char *err, size_t len, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
#include <stdarg.h>
static inline void vf_seterr(char *err, size_t len, const char *fmt, ...)
{
	if (!err || !len)
		return;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(err, len, fmt, ap);
	va_end(ap);
}

/* Room for `need` bytes in a buffer that doubles as it grows (from 64 KiB):
 * 0, or -ENOMEM (the buffer stays as it was). */
static inline int vf_bytes_reserve(uint8_t **buf, size_t *cap, size_t need)
{
	if (need <= *cap)
		return 0;
	size_t nc = *cap ? *cap * 2 : 1 << 16;
	while (nc < need)
		nc *= 2;
	uint8_t *nb = vf_realloc(*buf, nc);
	if (!nb)
		return -ENOMEM;
	*buf = nb;
	*cap = nc;
	return 0;
}

/* The stored configuration, the defaults for what the store does not
 * hold (config.c). */
int vf_load_config(vf_txn *txn, vf_store *s, vecfs_config *c);
/* Store c as the configuration. */
int vf_config_save(vf_txn *txn, vf_store *s, const vecfs_config *c);

/* A generation's delta postings and tombstones over its nlist clusters;
 * its largest cluster over the mean (generations.c). */
int vf_sum_manifests(vf_txn *txn, vf_store *s, uint64_t gen, uint32_t nlist,
		     uint64_t *deltas, uint64_t *tombs);
int vf_cluster_imbalance(vf_txn *txn, vf_store *s, const vf_genmeta *m, double *out);
/* The active generation (0: none) and its vf_cluster_imbalance() (0 when
 * none), in a read transaction of its own. */
int vf_active_imbalance(vecfs *v, uint64_t *active, double *out);

/* generation cache: a reference, released with vf_gen_put */
int vf_gen_get(vecfs *v, vf_txn *txn, uint64_t gen, vf_gen **out);
void vf_gen_put(vecfs *v, vf_gen *g);
void vf_gen_forget(vecfs *v, uint64_t gen);
/* nearest cluster of a vector (in index space) */
uint32_t vf_gen_nearest(const vf_gen *g, const float *x);

/* index space: cosine vectors are normalized; returns 0 or -EINVAL for a
 * zero vector */
int vf_to_index_space(vecfs_metric m, const float *in, float *out, uint32_t dim);

/* Bring a generation's postings up to date with every change after its
 * synced_seq (tombstones for stale postings, deltas for new versions): up
 * to change `to`, or to the last one (cnt->seq) when `to` is 0. */
int vf_sync_generation(vecfs *v, vf_txn *txn, vf_gen *g, vf_genmeta *m, uint64_t to,
		       const vf_counters *cnt);

/* The size of the steps that bring a generation up to date while writes go
 * on (each step its own transaction): `step` changes at first; a step that
 * did not shrink what the generation lacks (writes keep pace) makes the
 * next twice as large, up to 64 times the first. */
typedef struct vf_catchup {
	uint64_t step, max;
	uint64_t behind;    /* changes lacking after the last step */
} vf_catchup;

static inline void vf_catchup_init(vf_catchup *c, uint64_t step, uint64_t behind)
{
	c->step = step ? step : 1;
	c->max = 64 * c->step;
	c->behind = behind;
}

static inline void vf_catchup_after(vf_catchup *c, uint64_t behind)
{
	if (behind && behind >= c->behind && c->step < c->max)
		c->step *= 2;
	c->behind = behind;
}

/* Posting writes for one changed record while generation g is live. */
/* A row's cluster and code, found before it is written (postings_writer.c
 * encodes a chunk of rows on every CPU): code.planes points into the
 * caller's buffer. */
typedef struct vf_precode {
	uint32_t cluster;
	vf_code code;
} vf_precode;

typedef struct vf_posting_writer {
	vecfs *v;
	vf_gen *g;
	vf_encoder enc;
	uint64_t max_deltas;    /* most delta postings of a cluster it wrote to */
	uint64_t added;         /* delta postings and tombstones it wrote */
	vf_assign_cache assign; /* the generation's map, as changed so far */
	vf_manifest *mf;        /* per cluster, loaded on first use */
	uint8_t *mf_state;      /* 0 not loaded, 1 loaded, 2 changed */
	uint8_t *planes;
	uint8_t *buf;
	float *tmp;
	/* postings and tombstones not yet written: kept, then written in key
	 * order through one cursor (vf_pw_flush, or when they pass a bound) */
	struct vf_pw_pending *pend;
	size_t npend, pendcap;   /* pendcap in bytes */
	uint8_t *pbytes;         /* their values, one after the other */
	size_t pbytes_len, pbytes_cap;
} vf_posting_writer;
int vf_pw_init(vf_posting_writer *w, vecfs *v, vf_gen *g);
void vf_pw_free(vf_posting_writer *w);
/* Write the postings kept so far and the cached manifests and assignment
 * chunks (before commit; nothing may read the generation's postings in the
 * transaction before). */
int vf_pw_flush(vf_posting_writer *w, vf_txn *txn);
/* Kill the record's current posting in g (if any); with vec != NULL add a
 * delta posting (code, vector, key) for version `seq` in the cluster of
 * the nearest centroid and return that cluster in *cluster.  `pre`: the
 * cluster and code the caller found for vec already (NULL: found here). */
int vf_pw_apply(vf_posting_writer *w, vf_txn *txn, uint64_t id, uint64_t seq,
		const float *vec, const char *key, uint32_t keylen, int has_payload,
		const vf_precode *pre, uint32_t *cluster);

/* Records ids[0..n) were removed (with their keys) in txn: as a delete
 * does, a change-log entry each (cnt->seq advances, cnt->deleted counts)
 * and their postings in the active generation killed; *maint_due (may be
 * NULL) says whether compaction is due.  The caller saves cnt. */
int vf_forget_records(vecfs *v, vf_txn *txn, const uint64_t *ids, size_t n,
		      vf_counters *cnt, int *maint_due);

/* A generation being made (a build or a rebalance): whom to tell about
 * progress, where its error goes, whether it was asked to stop.  report()
 * may be called from worker threads (publish.c). */
typedef struct vf_task {
	vecfs *v;
	vf_genmeta *m;          /* its meta: phase and pct shown while it runs */
	vecfs_progress_fn progress;
	void *parg;
	char *err;
	size_t errlen;
	const char *phase;
	int last_pct;
	int cancelled;
	pthread_mutex_t mu;
} vf_task;
void vf_task_init(vf_task *t, vecfs *v, vf_genmeta *m, vecfs_progress_fn progress,
		  void *parg, char *err, size_t errlen);
void vf_task_end(vf_task *t);
/* Record and report progress; non-zero once the caller (or the store's
 * closing) asked to stop. */
int vf_task_report(vf_task *t, const char *phase, int pct);
/* Has the task been asked to stop? */
int vf_task_cancelled(vf_task *t);

void vf_maybe_auto_build(vecfs *v);
/* Background maintenance: compaction once a cluster's delta postings
 * reach compact_deltas or the backlog grew large, and of a smaller backlog
 * once writes paused for VF_MAINT_IDLE_MS. */
#define VF_MAINT_IDLE_MS 500
enum { VF_MAINT_NONE = 0, VF_MAINT_WHEN_IDLE = 1, VF_MAINT_NOW = 2 };
void vf_maint_start(vecfs *v);
void vf_maint_stop(vecfs *v);
/* After a write: `level` is vf_maint_due()'s answer (NONE does nothing). */
void vf_maint_kick(vecfs *v, int level);
/* vecfs_compact() in steps of about step_us of folding each, a step
 * bringing `sync` changes at first into a generation that lacks some, and
 * trimming `sync` change-log entries at the end (see compact_job in
 * compact.c); `between`, if set, runs after each step but
 * the last (the tests write there; non-zero stops the compaction as a
 * crash would: -ECANCELED).  With build_mu held. */
int vf_compact_steps(vecfs *v, uint32_t *clusters, uint64_t step_us, uint64_t sync,
		     int (*between)(void *), void *arg, char *err, size_t errlen);

/* Is compaction due after w wrote into generation m of a store with `live`
 * records?  NOW when a cluster reached compact_deltas or the whole backlog
 * passed both 4 x compact_deltas and 2% of the live records; WHEN_IDLE when
 * it passed both compact_deltas and 0.1% of them (scanning it costs queries
 * more than folding it costs a store with nothing else to do). */
int vf_maint_due(const vf_posting_writer *w, const vf_genmeta *m, uint64_t live,
		 uint32_t compact_deltas);
/* 1 while maintenance is due or running. */
int vf_maint_busy(vecfs *v);
/* Remove the oldest generations beyond keep_generations (never the active
 * one nor `keep`) (generations.c). */
void vf_retire_generations(vecfs *v, uint64_t keep);
/* Shared by compaction, rebalance and salvage (blocks.c): order of codes by id;
 * posting i of an opened block whose columns were checked, as a code
 * pointing into the block, its planes copied to `planes` (0, or -EIO when
 * its key is damaged); a posting block opened with every column checked;
 * codes[0..n) packed into evenly filled posting blocks 0, 1, ... of cluster
 * c of generation m, with its manifest counting `deltas` delta postings
 * left beside them. */
int vf_cmp_code(const void *a, const void *b);
int vf_block_code(const vf_block *b, uint32_t i, vf_code *code, uint8_t *planes);
int vf_block_open_checked(const vf_val *d, vf_block *b);
int vf_write_blocks(vf_txn *txn, vf_store *s, const vf_genmeta *m, uint32_t c,
		    const vf_code *codes, size_t n, uint64_t deltas, uint8_t **buf,
		    size_t *bufcap);
/* Cluster c of generation m rewritten as a compaction folds it (up to its
 * blocks_seq: its later delta postings stay), every posting of an id in
 * `drop` left out; postings of ids in `dirty` (the changes m lacks) kept
 * as they are.  -EIO when a posting kept does not match its record, or an
 * id has two live postings there (salvage.c). */
struct vf_dirty;
struct vf_tombs;
int vf_refold_cluster(vf_txn *txn, vf_store *s, const vf_genmeta *m, uint32_t c,
		      const struct vf_dirty *dirty, const struct vf_tombs *drop);
/* Does a live posting of record id (version seq, key) match the record?
 * 1 yes, or the record fails its checksum (nothing to compare: salvage
 * removes it, and a build or rebalance leaves it out rather than fail); 0
 * no (the record is missing, or of another version or key); else a store
 * error (verify.c). */
int vf_posting_matches(vf_txn *txn, vf_store *s, uint64_t id, uint64_t seq, const char *key,
		       uint32_t keylen);
int vf_compact_locked(vecfs *v, uint32_t *clusters, char *err, size_t errlen);
/* Microseconds since t (CLOCK_MONOTONIC). */
int64_t vf_us_since(const struct timespec *t);
/* After an automatic compaction: rebalance when the largest cluster is over
 * rebalance_ratio times the mean (rebalance.c). */
int vf_maybe_rebalance(vecfs *v, char *err, size_t errlen);
#define VF_BLOCK_TARGET 1024 /* vectors per posting block */

/* Publishing a generation (builds and rebalances; publish.c): register its metadata
 * (`building`, a new id in m->id); write its posting blocks in
 * transactions of about VF_PUBLISH_TXN_BYTES while a read snapshot stays
 * open (so make room with VF_GEN_RESERVE first: the map cannot grow under
 * it); then in one transaction store centroids, the assignment map for ids
 * below id_limit, sync the changes after m->snap_seq, mark it `ready` and
 * flip `active` when asked.  On failure, abandon it: its keys are dropped
 * and it is marked `failed`.  g->cal, when set, is stored with it; a
 * rebalanced one is counted in the store's counters. */
#define VF_PUBLISH_TXN_BYTES (64u << 20)
#define VF_GEN_RESERVE(s) (3 * vf_store_bytes(s) + (64u << 20))
int vf_gen_register(vecfs *v, vf_genmeta *m);
int vf_gen_publish(vecfs *v, const vf_genmeta *m, const float *centroids,
		   const uint32_t *idmap, uint64_t id_limit, vf_gen *g, int activate,
		   int rebalanced);
void vf_gen_abandon(vecfs *v, vf_genmeta *m);
/* The routing state of a generation not yet loadable from the store: g
 * borrows centroids (m->nlist * m->dim); release with vf_gen_routing_free
 * (gen_cache.c). */
int vf_gen_routing(vf_gen *g, const vf_genmeta *m, float *centroids, const float *center);
void vf_gen_routing_free(vf_gen *g);
/* An encoder for generation g's codes (its bits, metric and table). */
static inline int vf_gen_encoder_init(vf_encoder *e, const vf_gen *g)
{
	return vf_encoder_init(e, &g->rot, g->meta.bits, g->meta.metric == VECFS_DOT, g->rmu);
}

#endif
