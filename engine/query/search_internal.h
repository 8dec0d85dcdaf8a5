/*
 * engine/query/search_internal.h - what a search's files share: the small heaps
 * of results and bounds, one query's and one search's state, the exact
 * distance, and the phases each file runs (probe.c: probing and locating
 * clusters; score.c: scoring postings and records; search.c: the driver).
 */
#ifndef VF_SEARCH_INTERNAL_H
#define VF_SEARCH_INTERNAL_H

#include "handle.h"

#include <math.h>
#include <stdlib.h>

#include "filtered.h"
#include "gen/gen.h"
#include "math/math.h"
#include "record.h"

/* ------------------------------------------------------------ small heaps */

typedef struct hit { /* exact result, from its record; pointers into the
		      * transaction's pages or the query's kept bytes */
	double d;             /* index units, in double: distances past
			       * float32 still order */
	uint64_t id;
	const char *key;
	uint32_t keylen;
	const void *payload;
	uint32_t plen;
} hit;

TOPK_HEAP(fheap, float, KEY_SELF)
TOPK_HEAP(hheap, hit, KEY_DIST)

/* Can a result at distance (or lower bound) d still enter the top k?  Always
 * while there are fewer than k, even at +inf: a distance that overflows
 * float32 is still a result. */
static inline int hheap_admits(const hheap *h, double d)
{
	return h->n < h->k || d < KEY_DIST(h->v[0]);
}

/* ------------------------------------------------------------ probing */

/* The np smallest of score[0..nl) with their indexes, ascending, into
 * pd[] and pc[]; returns how many (min(np, nl)).  Up to
 * VF_BEST_SORTED_MAX: kept sorted by insertion, a score that makes the list
 * moving the worse ones up by one (fewer unpredictable branches than a
 * heap, and no sort after); more: a max-heap, then a heap sort.  probe()
 * uses the one for its np; both are here for the tests. */
#define VF_BEST_SORTED_MAX 128
uint32_t vf_best_sorted(const float *score, uint32_t nl, uint32_t np, float *pd,
			uint32_t *pc);
uint32_t vf_best_heap(const float *score, uint32_t nl, uint32_t np, float *pd, uint32_t *pc);
/* Those of score[0..nl) no more than `width` above the smallest, at most
 * `want` of them, ascending (ties in index order), into pd[] and pc[]
 * (want + 1 entries of room); the smallest score of the others, INFINITY
 * if none, into *next; near: nl entries of room.  Returns how many, 0 when
 * there is no finite limit (a NaN, width infinite) or want is 0.  The same
 * as the first entries of vf_best_sorted() up to the limit, for the
 * price of two scans when they are few. */
uint32_t vf_within_sorted(const float *score, uint32_t nl, float width, uint32_t want,
			  uint32_t *near, float *pd, uint32_t *pc, float *next);

/* The k-th smallest of v[0..n), a NaN counted as +inf; +inf when n < k
 * or k is 0.  Up to VF_KTH_SORTED_MAX: the k best so far in order in buf
 * and idx (k entries each), and the kernel that passes over the vectors
 * holding none below the worst of them; more: a heap in buf (k floats;
 * idx unused). */
#define VF_KTH_SORTED_MAX 64
float vf_kth_smallest(const vf_kernels *kn, const float *v, uint32_t n, uint32_t k, float *buf,
		      uint32_t *idx);

/* ------------------------------------------------------------ per query */

typedef struct cand {
	float lo;
	const uint8_t *idp;   /* its record id (u64): in the block's IDS column
			       * or the delta posting, both checked by the scan */
} cand;

/* Bytes kept for a query's results (keys and payloads copied from records
 * read through location hints): chunks that never move, freed with it. */
typedef struct keep_chunk {
	struct keep_chunk *next;
	size_t used, cap;
	uint8_t data[];
} keep_chunk;

typedef struct query {
	float *q;          /* index space */
	float qn2;         /* |q|^2 */
	vf_qstate qs;
	vf_cstate cs;
	vf_pass1 p1;       /* the first pass's constants for the cluster being
			    * scanned: cs.p1, its error bound narrowed to
			    * VF_PASS1_EPS (score.c) */
	fheap ub;          /* k smallest upper bounds: the pruning threshold */
	cand *cands;
	size_t nc, capc;
	hheap top;         /* exact results */
	uint32_t *probe;   /* nprobe clusters, nearest first */
	float *pdist;      /* their probe scores */
	uint32_t from, np; /* it probes probe[from..np) */
	uint32_t listed;   /* how many are listed (with a recall target,
			    * twice nprobe, for the second look, or those
			    * within the rule's limit: see `more`) */
	int more;          /* others are not listed, the nearest of them at
			    * probe score `next` (the second look lists them
			    * if that one is near enough) */
	float next;
	float scale;       /* the probing rule's scale (calibrate.h) */
	keep_chunk *keep;  /* results' bytes copied out of hinted records */
	vecfs_explain ex;
} query;

/* How one call searches: its options resolved and checked once, from the
 * snapshot it reads, for every part of the call (vf_probe_policy_resolve()
 * in search.c).  A part that widens its probing searches again under a
 * copy with nprobe raised and no recall target. */
typedef struct vf_probe_policy {
	vf_snap_meta sm;     /* the snapshot's config, counters, generation */
	uint64_t active;     /* the generation searched (0: an exact scan) */
	vf_gen *g;           /* its routing state: one reference, the call's */
	vf_genmeta gm;       /* its meta */
	vecfs_metric metric;
	uint32_t dim, k, refine;
	uint32_t nprobe;     /* clusters probed at most */
	float target;        /* the recall target the probing aims at; 0:
			      * nprobe clusters for every query */
	vf_stop_rule rule;   /* the target's rule (calibrate.h): tau, the
			      * second look's gamma, the scale's max_norm */
} vf_probe_policy;

struct entry;
typedef struct search {
	vecfs *v;
	vf_txn *txn;
	uint64_t active;     /* the generation searched (0: an exact scan), read
			      * once for every part of a batch */
	const vf_kernels *kn;
	vecfs_metric metric;
	uint32_t dim, k, nprobe, refine;
	float target;        /* the recall target the probing aims at; 0:
			      * nprobe clusters for every query */
	float tau;           /* its rule: clusters within tau * scale of the
			      * nearest one, nprobe at most (calibrate.h) */
	size_t nq;
	query *qs;
	vf_gen *g;
	vf_genmeta gm;
	vf_dirty dirty;
	vf_tombs tombs;      /* of the cluster being scanned */
	uint64_t txnid, epoch; /* the snapshot and the map it is read through */
	vf_hint_view hints;  /* which location hints lie inside the snapshot */
	uint32_t *surv;      /* first-pass survivors of one block */
	float *surv_lo, *surv_hi;
	uint32_t *aside;     /* survivors set aside to come later (the same */
	float *aside_lo;     /* room as surv, surv_lo) */
	float *kbuf;         /* k floats */
	uint32_t *kidx;      /* min(k, VF_KTH_SORTED_MAX) positions */
	uint8_t *planes;     /* one code's sign plane (pass 2 reads the others
			      * in place) */
	float *floats;       /* dim floats: a record's vector held in bytes,
			      * as floats (rec_floats()) */
	void *scratch;       /* the room of surv .. floats above */
	uint8_t *copies;     /* a re-rank step's records read through hints */
	size_t copies_cap;
	const vf_fset *fset; /* a filter's matching records, or NULL */
	/* scores a located cluster for the queries that probe it:
	 * vf_scan_cluster, set by search_run (probe.c calls it) */
	int (*scan_cluster)(struct search *s, uint32_t c, struct entry *ents, size_t nents,
			    const uint32_t *qids, uint32_t nqc);
	int prefetch;        /* its reads planned ahead (prefetch.h) */
} search;

/* A record the search's filter leaves out. */
static inline int filtered_out(const search *s, uint64_t id)
{
	return s->fset && !vf_fset_has(s->fset, id);
}

/* The exact distance in index units (cosine: squared l2 of unit vectors),
 * in double: the float32 kernels where their result is sure to be
 * accurate, double precision where float32 would overflow or underflow
 * (kernels.h). */
static inline double exact_dist(const search *s, const query *q, const float *vec)
{
	switch (s->metric) {
	case VECFS_L2:
		return vf_l2sq_exact(s->kn, q->q, vec, s->dim);
	case VECFS_DOT:
		return -vf_dot_exact(s->kn, q->q, vec, s->dim);
	case VECFS_COSINE:
		return vf_cosine_exact(s->kn, q->q, vec, s->dim);
	}
	return 0;
}

/* A record's vector as floats to give exact_dist(): in place, or decoded
 * into s->floats (until the next call; the caller has checked that r->dim
 * is s->dim, the room s->floats has). */
static inline const float *rec_floats(search *s, const vf_record *r)
{
	if (r->kind != VF_VEC_U8)
		return r->vec;
	s->kn->u8_floats(r->vec, r->dim, s->floats);
	return s->floats;
}

/* Record r's vector for rec_dist() with n queries to score it against:
 * NULL when its bytes are read in place (l2 and one query: the distance
 * reads each byte once), else its floats (rec_floats(): decoded once for
 * all n). */
static inline const float *rec_vec(search *s, const vf_record *r, size_t n)
{
	if (r->kind == VF_VEC_U8 && s->metric == VECFS_L2 && n == 1)
		return NULL;
	return rec_floats(s, r);
}

/* exact_dist() of q and record r, vec what rec_vec() gave: the same
 * value either way (vf_l2sq_exact_u8()). */
static inline double rec_dist(const search *s, const query *q, const vf_record *r,
			      const float *vec)
{
	return vec ? exact_dist(s, q, vec) : vf_l2sq_exact_u8(s->kn, q->q, r->vec, s->dim);
}

static inline int stale(const search *s, uint64_t id, uint64_t seq)
{
	return vf_posting_stale(&s->tombs, &s->dirty, id, seq);
}

#define PF_BATCHES 8 /* batches prefetched ahead of the first pass */

static inline void prefetch_batch(const vf_block *b, uint32_t bt)
{
	size_t sz = (size_t)(b->pdim / 4) * 16;
	const uint8_t *c = b->col[VF_COL_SIGN] + (size_t)bt * sz;
	for (size_t o = 0; o < sz; o += 64)
		__builtin_prefetch(c + o);
	const uint8_t *f = vf_block_f1_batch(b, bt);
	for (size_t o = 0; o < VF_BATCH * 12; o += 64)
		__builtin_prefetch(f + o);
}

/* One entry of a cluster's key range, located before scanning. */
#define VF_CHECKED_ALL                                                     \
	(1u << VF_COL_SIGN | 1u << VF_COL_F1 | 1u << VF_COL_PASS2 | 1u << VF_COL_IDS)
typedef struct entry {
	uint8_t kind;
	uint8_t checked; /* a block's columns verified in this snapshot:
			  * 1 << VF_COL_* (VF_CHECKED_ALL: those a scan
			  * checks); any: its header too */
	uint64_t sub;
	const uint8_t *data;
	size_t len;
} entry;

/* Open the located block e: its header's checksum is computed only while
 * nothing of it was checked in this snapshot (a column checked means the
 * header was). */
static inline int vf_entry_block_open(const entry *e, vf_block *b)
{
	return e->checked ? vf_block_open_known(e->data, e->len, b)
			  : vf_block_open(e->data, e->len, b);
}

/* Score the located entries of cluster c for the queries qids[0..nqc) that
 * probe it (score.c); the columns it verifies are marked in `checked`. */
int vf_scan_cluster(search *s, uint32_t c, entry *ents, size_t nents,
		    const uint32_t *qids, uint32_t nqc);
/* Records changed since the generation was synced and not posted to it,
 * scored exactly (score.c). */
int vf_scan_uncovered(search *s);
/* Re-rank q's candidates with exact distances (score.c). */
int vf_rerank(search *s, query *q);
/* Every live record scored exactly (score.c). */
int vf_scan_exact(search *s);
/* Every record of s->fset scored exactly (filtered.c). */
int vf_scan_set(search *s);
/* List query q's `list` nearest clusters afresh (its np stays) (probe.c). */
int vf_probe_more(search *s, query *q, uint32_t list);
/* Probe each query's nearest clusters and score them (probe.c); again:
 * the clusters probe[from..np) of each, its probe list already made. */
int vf_scan_ivf(search *s, int again);

#endif
