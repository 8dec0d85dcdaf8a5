/*
 * engine/gen/gen.h - what gen/ offers the other folders: generations in
 * memory and in the store, their building and publishing, the posting
 * writer, catching up with the change log (changes.h), the rows of a write
 * prepared beforehand (prepare.h) and the recall calibration (calibrate.h).
 */
#ifndef VF_GEN_H
#define VF_GEN_H

#include "handle.h"
#include "assign.h"
#include "block.h"
#include "postings.h"
#include "math/math.h"

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

#include "calibrate.h"
#include "changes.h"
#include "prepare.h"

#endif
