/*
 * engine/search.c - queries.  One read transaction (one snapshot) and one
 * generation per call:
 *   probe   the nprobe nearest centroids of each query;
 *   pass 1  per posting block, 4-bit table look-ups over the sign planes
 *           give an estimate and a lower bound; a vector whose lower bound
 *           cannot beat the current k-th upper bound is dropped;
 *   pass 2  survivors are scored with all bit planes (tighter bound);
 *   deltas  scored like pass 2; records the generation does not cover are
 *           scored exactly;
 *   re-rank candidates in order of lower bound, exact distance on the stored
 *           vectors, stopping once no remaining bound can enter the top k.
 * Queries of one call that probe the same cluster share its scan (one range
 * read, one checksum check, one tombstone load).
 */
#include "internal.h"
#include "parallel.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "changes.h"
#include "keys.h"
#include "record.h"

/* ------------------------------------------------------------ small heaps */

typedef struct hit { /* exact result, from its record; pointers valid in the
		      * transaction */
	float d;              /* index units */
	uint64_t id;
	const char *key;
	uint32_t keylen;
	const void *payload;
	uint32_t plen;
} hit;

/* A max-heap of the k smallest items by a float key, so that the k-th best
 * so far is at the top (+inf until there are k); one definition serves the
 * bounds (fheap, plain floats) and the exact results (hheap, hits). */
#define TOPK_HEAP(name, type, KEY)                                              \
	typedef struct name {                                                   \
		type *v;                                                        \
		uint32_t n, k;                                                  \
	} name;                                                                 \
                                                                                \
	static void name##_push(name *h, type x)                                \
	{                                                                       \
		uint32_t i;                                                     \
		if (h->n < h->k) {                                              \
			i = h->n++;                                             \
			while (i > 0 && KEY(h->v[(i - 1) / 2]) < KEY(x)) {      \
				h->v[i] = h->v[(i - 1) / 2];                    \
				i = (i - 1) / 2;                                \
			}                                                       \
			h->v[i] = x;                                            \
			return;                                                 \
		}                                                               \
		if (!(KEY(x) < KEY(h->v[0])))                                   \
			return;                                                 \
		i = 0;                                                          \
		for (;;) {                                                      \
			uint32_t l = 2 * i + 1, m = i;                          \
			float mv = KEY(x);                                      \
			if (l < h->n && KEY(h->v[l]) > mv)                      \
				m = l, mv = KEY(h->v[l]);                       \
			if (l + 1 < h->n && KEY(h->v[l + 1]) > mv)              \
				m = l + 1;                                      \
			if (m == i)                                             \
				break;                                          \
			h->v[i] = h->v[m];                                      \
			i = m;                                                  \
		}                                                               \
		h->v[i] = x;                                                    \
	}                                                                       \
                                                                                \
	static inline float name##_top(const name *h)                           \
	{                                                                       \
		return h->n < h->k ? INFINITY : KEY(h->v[0]);                   \
	}

#define KEY_SELF(x) (x)
#define KEY_DIST(x) ((x).d)
TOPK_HEAP(fheap, float, KEY_SELF)
TOPK_HEAP(hheap, hit, KEY_DIST)

/* Can a result at distance (or lower bound) d still enter the top k?  Always
 * while there are fewer than k, even at +inf: a distance that overflows
 * float32 is still a result. */
static inline int hheap_admits(const hheap *h, float d)
{
	return h->n < h->k || d < KEY_DIST(h->v[0]);
}

/* ------------------------------------------------------------ per query */

typedef struct cand {
	float lo;
	const uint8_t *idp;   /* its record id (u64): in the block's IDS column
			       * or the delta posting, both checked by the scan */
} cand;

typedef struct query {
	float *q;          /* index space */
	float qn2;         /* |q|^2 */
	vf_qstate qs;
	vf_cstate cs;
	fheap ub;          /* k smallest upper bounds: the pruning threshold */
	cand *cands;
	size_t nc, capc;
	hheap top;         /* exact results */
	uint32_t *probe;   /* nprobe clusters, nearest first */
	float *pdist;
	vecfs_explain ex;
} query;

typedef struct search {
	vecfs *v;
	vf_txn *txn;
	uint64_t active;     /* the generation searched (0: an exact scan), read
			      * once for every part of a batch */
	const vf_kernels *kn;
	vecfs_metric metric;
	uint32_t dim, k, nprobe, refine;
	size_t nq;
	query *qs;
	vf_gen *g;
	vf_genmeta gm;
	vf_dirty dirty;
	vf_tombs tombs;      /* of the cluster being scanned */
	uint64_t txnid, epoch; /* the snapshot and the map it is read through */
	uint32_t *surv;      /* first-pass survivors of one block */
	float *surv_lo, *surv_hi;
	float *kbuf;         /* k floats */
	uint8_t *planes;     /* one full code */
} search;

static float exact_dist_raw(const search *s, const query *q, const void *vec)
{
	switch (s->metric) {
	case VECFS_L2:
		return s->kn->l2sq(q->q, vec, s->dim);
	case VECFS_DOT:
		return -s->kn->dot(q->q, vec, s->dim);
	case VECFS_COSINE: {
		float dv = s->kn->dot(vec, vec, s->dim);
		float c = dv > 0 ? s->kn->dot(q->q, vec, s->dim) / sqrtf(dv) : 0;
		float d = 1 - c;
		if (d < 0)
			d = 0;
		if (d > 2)
			d = 2;
		return 2 * d; /* index units: squared l2 of unit vectors */
	}
	}
	return 0;
}

/* The distance, +inf where float32 arithmetic gives none (overflowing
 * sums of opposite signs): a NaN would not order. */
static float exact_dist(const search *s, const query *q, const void *vec)
{
	float d = exact_dist_raw(s, q, vec);
	return d == d ? d : INFINITY;
}

static float to_metric_units(const search *s, float d)
{
	return s->metric == VECFS_COSINE ? d * 0.5f : d;
}

static int cand_push(query *q, cand c)
{
	if (q->nc == q->capc) {
		size_t nc = q->capc ? q->capc * 2 : 256;
		cand *n = realloc(q->cands, nc * sizeof *n);
		if (!n)
			return -ENOMEM;
		q->cands = n;
		q->capc = nc;
	}
	q->cands[q->nc++] = c;
	return 0;
}

/* Drop candidates that can no longer make the top k. */
static void cand_trim(query *q)
{
	float t = fheap_top(&q->ub);
	size_t w = 0;
	for (size_t i = 0; i < q->nc; i++)
		if (q->cands[i].lo <= t)
			q->cands[w++] = q->cands[i];
	q->nc = w;
}

static inline int stale(const search *s, uint64_t id, uint64_t seq)
{
	return vf_posting_stale(&s->tombs, &s->dirty, id, seq);
}

/* ------------------------------------------------------------ scoring */

/* Can a second-pass result still make the top k?  (Counts it.) */
static int pass2_keeps(query *q, float est, float bound)
{
	q->ex.pass2_scored++;
	if (est - bound > fheap_top(&q->ub)) { /* a NaN prunes nothing */
		q->ex.pass2_pruned++;
		return 0;
	}
	return 1;
}

/* A second-pass result that can make the top k becomes candidate c unless
 * it is stale in this snapshot: the posting's id and seq (in block b, or
 * the delta posting) are read only when something can be stale, since the
 * re-rank takes a candidate's id from its posting. */
static int accept(search *s, query *q, float est, float bound, const vf_block *b, uint32_t i,
		  const vf_code *delta, const uint8_t *delta_data)
{
	if (!b || s->tombs.n || s->dirty.n) {
		uint64_t id = b ? vf_block_id(b, i) : delta->id;
		uint64_t seq = b ? vf_block_seq(b, i) : delta->seq;
		if (stale(s, id, seq)) {
			q->ex.stale_skipped++;
			return 0;
		}
	}
	/* a NaN estimate (float32 overflow in the factors) bounds nothing:
	 * the candidate stays, and sets no threshold */
	float lo = est - bound, hi = est + bound;
	cand c = {lo == lo ? lo : -INFINITY, b ? vf_block_id_at(b, i) : vf_delta_id_at(delta_data)};
	fheap_push(&q->ub, hi == hi ? hi : INFINITY);
	int rc = cand_push(q, c);
	if (rc == 0 && q->nc >= 4096 && q->nc >= 8 * (size_t)s->k * s->refine)
		cand_trim(q);
	return rc;
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

#define PASS2_LAG 4 /* batches between a survivor's prefetch and its pass 2 */

/* Pass 2 for survivors s->surv[k0..k1) of block b (their PASS2 records were
 * prefetched when pass 1 let them through). */
static int pass2_block(search *s, query *q, const vf_block *b, uint32_t k0, uint32_t k1,
		       int *checked2)
{
	if (k0 < k1 && !*checked2) {
		if (vf_block_check(s->v->vcache, b, VF_COL_PASS2) ||
		    vf_block_check(s->v->vcache, b, VF_COL_IDS))
			return -EIO;
		*checked2 = 1;
	}
	for (uint32_t k = k0; k < k1; k++) {
		uint32_t i = s->surv[k];
		/* the bound has tightened since pass 1 */
		if (s->surv_lo[k] > fheap_top(&q->ub)) {
			q->ex.pass1_pruned++;
			continue;
		}
		const uint8_t *f2 = vf_block_f2_at(b, i);
		float est, bound;
		vf_block_planes(b, i, s->planes);
		vf_pass2(&q->qs, &q->cs, s->planes, vf_block_f1(b, 0, i),
			 vf_ldf(f2, 0), vf_ldf(f2, 1), vf_ldf(f2, 2), &est, &bound);
		if (!pass2_keeps(q, est, bound))
			continue;
		int rc = accept(s, q, est, bound, b, i, NULL, NULL);
		if (rc)
			return rc;
	}
	return 0;
}

static inline void prefetch_pass2(const vf_block *b, uint32_t i)
{
	const uint8_t *rec = vf_block_pass2_at(b, i);
	for (size_t o = 0; o < b->stride; o += 64)
		__builtin_prefetch(rec + o);
}

/* Score one posting block for one query.  Pass 1 runs batch by batch; the
 * PASS2 records of its survivors are prefetched at once and scored
 * PASS2_LAG batches later, so their memory arrives while pass 1 goes on,
 * and every result tightens the threshold of the batches after it.  Before
 * the query has k candidates, pass 1 covers the whole block first (see
 * below). */
static int scan_block(search *s, query *q, const vf_block *b, int *checked2)
{
	uint32_t groups = b->pdim / 4;
	int check = s->tombs.n || s->dirty.n;
	int whole = q->ub.n < q->ub.k && !check; /* pass 1 over all batches first */
	float lo[32], hi[32];
	uint32_t ns = 0, done = 0, lag[PASS2_LAG] = {0};
	int rc = 0;
	for (uint32_t bt = 0; bt < PF_BATCHES && bt < b->nbatch; bt++)
		prefetch_batch(b, bt);
	for (uint32_t bt = 0; bt < b->nbatch; bt++) {
		if (bt + PF_BATCHES < b->nbatch)
			prefetch_batch(b, bt + PF_BATCHES);
		const uint8_t *f1 = vf_block_f1_batch(b, bt);
		q->cs.p1.thresh = fheap_top(&q->ub);
		uint32_t mask = s->kn->pass1(b->col[VF_COL_SIGN] + (size_t)bt * groups * 16,
					     q->cs.lut, groups, f1, f1 + 128, f1 + 256,
					     &q->cs.p1, lo, hi);
		uint32_t in = b->n - bt * 32 < 32 ? b->n - bt * 32 : 32;
		if (in < 32)
			mask &= (1u << in) - 1;
		uint32_t ns0 = ns;
		for (; mask; mask &= mask - 1) {
			uint32_t j = (uint32_t)__builtin_ctz(mask), i = bt * 32 + j;
			if (!whole)
				prefetch_pass2(b, i);
			s->surv[ns] = i;
			s->surv_hi[ns] = hi[j];
			s->surv_lo[ns++] = lo[j];
		}
		q->ex.pass1_scored += in;
		q->ex.pass1_pruned += in - (ns - ns0);
		if (whole)
			continue;
		/* survivors of batch bt - PASS2_LAG + 1 and before are due */
		uint32_t due = lag[bt % PASS2_LAG];
		lag[bt % PASS2_LAG] = ns;
		if ((rc = pass2_block(s, q, b, done, due, checked2)))
			return rc;
		done = due;
	}
	/* Before k candidates exist there is no threshold yet: then the block's
	 * own k smallest first-pass upper bounds (k distinct records when no
	 * posting can be stale) bound the k-th distance instead.  The survivors
	 * whose upper bound is among them go to pass 2 first: their tighter
	 * bounds set the threshold before the others are scored. */
	if (whole && ns > q->ub.k) {
		fheap blk = {s->kbuf, 0, q->ub.k};
		for (uint32_t k = 0; k < ns; k++)
			if (s->surv_hi[k] < fheap_top(&blk))
				fheap_push(&blk, s->surv_hi[k]);
		float tb = fheap_top(&blk);
		uint32_t a = 0, e = ns;
		while (a < e) {
			if (s->surv_hi[a] <= tb) {
				a++;
				continue;
			}
			e--;
			uint32_t ti = s->surv[a];
			float tl = s->surv_lo[a], th = s->surv_hi[a];
			s->surv[a] = s->surv[e], s->surv_lo[a] = s->surv_lo[e];
			s->surv_hi[a] = s->surv_hi[e];
			s->surv[e] = ti, s->surv_lo[e] = tl, s->surv_hi[e] = th;
		}
		uint32_t w = a;
		for (uint32_t k = a; k < ns; k++)
			if (!(s->surv_lo[k] > tb)) {
				s->surv[w] = s->surv[k];
				s->surv_lo[w++] = s->surv_lo[k];
			}
		q->ex.pass1_pruned += ns - w;
		ns = w;
	}
	if (whole)
		for (uint32_t k = 0; k < ns; k++)
			prefetch_pass2(b, s->surv[k]);
	return pass2_block(s, q, b, done, ns, checked2);
}

typedef struct cluster_work {
	uint32_t cluster;
	uint32_t rank;        /* best probe rank among its queries */
	uint32_t first, count;/* range in the query list */
} cluster_work;

/* One entry of a cluster's key range, located before scanning. */
typedef struct entry {
	uint8_t kind;
	uint64_t sub;
	const uint8_t *data;
	size_t len;
} entry;

/* Where a cluster's entries were found, valid for one snapshot: queries
 * that read the same snapshot (same LMDB transaction id, map not moved
 * since) take them from here instead of walking the tree.  A write makes a
 * new snapshot, so a slot never outlives what it describes for a reader
 * that can use it (that reader holds the snapshot, so its pages stay). */
#define LOCATED_MAX 4 /* clusters with more entries are not kept */

typedef struct located {
	uint64_t txnid, epoch; /* txnid 0: empty */
	uint32_t n;
	entry e[LOCATED_MAX];
} located;

/* Room for `more` entries after the first n. */
static int ents_reserve(entry **ents, size_t n, size_t *cap, size_t more)
{
	if (*cap - n >= more)
		return 0;
	size_t nc = *cap ? *cap : 64;
	while (nc - n < more)
		nc *= 2;
	entry *ne = realloc(*ents, nc * sizeof *ne);
	if (!ne)
		return -ENOMEM;
	*ents = ne;
	*cap = nc;
	return 0;
}

/* Append cluster c's entries as located in this snapshot: 1, or 0 when
 * they are not known for it. */
static int located_get(search *s, uint32_t c, entry **ents, size_t *n, size_t *cap)
{
	vf_gen *g = s->g;
	entry e[LOCATED_MAX];
	uint32_t ne = 0;
	int found = 0;
	pthread_mutex_lock(&g->located_mu);
	if (g->located) {
		const located *l = (const located *)g->located + c;
		if (l->txnid == s->txnid && l->epoch == s->epoch) {
			ne = l->n;
			memcpy(e, l->e, ne * sizeof(entry));
			found = 1;
		}
	}
	pthread_mutex_unlock(&g->located_mu);
	if (!found)
		return 0;
	if (ents_reserve(ents, *n, cap, ne))
		return -ENOMEM;
	memcpy(*ents + *n, e, ne * sizeof(entry));
	*n += ne;
	return 1;
}

static void located_put(search *s, uint32_t c, const entry *e, size_t n)
{
	vf_gen *g = s->g;
	if (n > LOCATED_MAX)
		return;
	pthread_mutex_lock(&g->located_mu);
	if (!g->located)
		g->located = calloc(g->meta.nlist, sizeof(located));
	if (g->located) {
		located *l = (located *)g->located + c;
		l->txnid = s->txnid;
		l->epoch = s->epoch;
		l->n = (uint32_t)n;
		memcpy(l->e, e, n * sizeof(entry));
	}
	pthread_mutex_unlock(&g->located_mu);
}

/* Collect the entries of cluster c (tombstones, blocks, deltas) and
 * prefetch the start of each block, so the memory of all probed clusters
 * is in flight before the first is scored. */
static int locate_cluster(search *s, vf_cursor *cur, uint32_t c, entry **ents,
			  size_t *n, size_t *cap)
{
	size_t n0 = *n;
	int rc = located_get(s, c, ents, n, cap);
	if (rc < 0)
		return rc;
	if (rc == 0) {
		vf_postkey start = vf_post_key(s->g->id, c, VF_PK_TOMB, 0);
		vf_val k = {sizeof start.b, start.b}, d;
		for (rc = vf_cursor_get(cur, &k, &d, VF_SEEK); rc == 0;
		     rc = vf_cursor_get(cur, &k, &d, VF_NEXT)) {
			const uint8_t *kb = k.data;
			if (k.len != sizeof start.b || memcmp(kb, start.b, 12))
				break;
			if (ents_reserve(ents, *n, cap, 1))
				return -ENOMEM;
			entry *e = &(*ents)[(*n)++];
			e->kind = vf_postkey_kind(kb);
			e->sub = vf_postkey_sub(kb);
			e->data = d.data;
			e->len = d.len;
		}
		if (rc != -ENOENT && rc != 0)
			return vf_store_err(rc);
		located_put(s, c, *ents + n0, *n - n0);
	}
	for (size_t i = n0; i < *n; i++) {
		const entry *e = &(*ents)[i];
		if (e->kind == VF_PK_BLOCK)
			for (size_t o = 0; o < 1024 && o < e->len; o += 64)
				__builtin_prefetch(e->data + o);
	}
	return 0;
}

/* Start fetching the first batches of the blocks of a located cluster (its
 * block headers were prefetched when it was located). */
static void prefetch_cluster(const entry *ents, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		vf_block b;
		if (ents[i].kind != VF_PK_BLOCK || vf_block_open(ents[i].data, ents[i].len, &b))
			continue;
		for (uint32_t bt = 0; bt < PF_BATCHES && bt < b.nbatch; bt++)
			prefetch_batch(&b, bt);
	}
}

/* Score the located entries of cluster c for the queries that probe it. */
static int scan_cluster(search *s, uint32_t c, const entry *ents, size_t nents,
			const uint32_t *qids, uint32_t nqc)
{
	int rc = 0;
	vf_tombs_clear(&s->tombs);
	for (uint32_t i = 0; i < nqc; i++) {
		query *q = &s->qs[qids[i]];
		const float *cent = s->g->centroids + (size_t)c * s->dim;
		float nq2 = s->kn->l2sq(q->q, cent, s->dim);
		float qc = s->metric == VECFS_DOT ? -s->kn->dot(q->q, cent, s->dim) : nq2;
		vf_cstate_set(&q->cs, &q->qs, s->g->rc + (size_t)c * s->gm.pdim, s->g->rc_sum[c],
			      qc, sqrtf(nq2));
		q->ex.clusters_probed++;
	}
	/* each query has its own table for the cluster, set above; the block
	 * reads are shared */
	for (size_t ei = 0; ei < nents && rc == 0; ei++) {
		const entry *e = &ents[ei];
		if (e->kind == VF_PK_TOMB) {
			uint64_t ks;
			if (e->len != 8)
				return -EIO;
			memcpy(&ks, e->data, 8);
			rc = vf_tombs_add(&s->tombs, e->sub, ks);
		} else if (e->kind == VF_PK_BLOCK) {
			vf_block b;
			int checked2 = 0;
			if ((rc = vf_block_open(e->data, e->len, &b)) ||
			    (rc = vf_block_check(s->v->vcache, &b, VF_COL_SIGN)) ||
			    (rc = vf_block_check(s->v->vcache, &b, VF_COL_F1)))
				break;
			if (b.pdim != s->gm.pdim || b.bits != s->gm.bits)
				return -EIO;
			for (uint32_t i = 0; i < nqc && rc == 0; i++)
				rc = scan_block(s, &s->qs[qids[i]], &b, &checked2);
		} else if (e->kind == VF_PK_DELTA) {
			vf_code code;
			if ((rc = vf_delta_open_cached(s->v->vcache, e->data, e->len, s->gm.dim,
							s->gm.pdim, s->gm.bits, &code)))
				break;
			for (uint32_t i = 0; i < nqc && rc == 0; i++) {
				query *q = &s->qs[qids[i]];
				float est, bound;
				q->ex.delta_scanned++;
				vf_pass2(&q->qs, &q->cs, code.planes, code.add, code.rb, code.eb,
					 code.cdot, &est, &bound);
				if (pass2_keeps(q, est, bound))
					rc = accept(s, q, est, bound, NULL, 0, &code, e->data);
			}
		}
	}
	return rc;
}

/* ------------------------------------------------------------ phases */

static int cmp_probe(const void *a, const void *b)
{
	const cluster_work *x = a, *y = b;
	if (x->rank != y->rank)
		return x->rank < y->rank ? -1 : 1;
	return x->cluster < y->cluster ? -1 : x->cluster > y->cluster;
}

/* nprobe nearest centroids of q, nearest first. */
static int probe(search *s, query *q, float *dots)
{
	const vf_gen *g = s->g;
	uint32_t nl = g->meta.nlist, np = s->nprobe < nl ? s->nprobe : nl;
	vf_cindex_dots(&g->ci, q->q, dots);
	/* max-heap of the np best (score, cluster) */
	uint32_t n = 0;
	for (uint32_t c = 0; c < nl; c++) {
		float sc = s->metric == VECFS_DOT ? -dots[c] : g->ci.norms[c] - 2 * dots[c];
		if (n < np) {
			uint32_t i = n++;
			while (i > 0 && q->pdist[(i - 1) / 2] < sc) {
				q->pdist[i] = q->pdist[(i - 1) / 2];
				q->probe[i] = q->probe[(i - 1) / 2];
				i = (i - 1) / 2;
			}
			q->pdist[i] = sc;
			q->probe[i] = c;
		} else if (sc < q->pdist[0]) {
			uint32_t i = 0;
			for (;;) {
				uint32_t l = 2 * i + 1, m = i;
				float mv = sc;
				if (l < n && q->pdist[l] > mv)
					m = l, mv = q->pdist[l];
				if (l + 1 < n && q->pdist[l + 1] > mv)
					m = l + 1;
				if (m == i)
					break;
				q->pdist[i] = q->pdist[m];
				q->probe[i] = q->probe[m];
				i = m;
			}
			q->pdist[i] = sc;
			q->probe[i] = c;
		}
	}
	/* heap-sort ascending */
	for (uint32_t e = n; e > 1; e--) {
		float td = q->pdist[0];
		uint32_t tc = q->probe[0];
		q->pdist[0] = q->pdist[e - 1];
		q->probe[0] = q->probe[e - 1];
		q->pdist[e - 1] = td;
		q->probe[e - 1] = tc;
		uint32_t i = 0, m2 = e - 1;
		for (;;) {
			uint32_t l = 2 * i + 1, m = i;
			if (l < m2 && q->pdist[l] > q->pdist[m])
				m = l;
			if (l + 1 < m2 && q->pdist[l + 1] > q->pdist[m])
				m = l + 1;
			if (m == i)
				break;
			float fd = q->pdist[i];
			uint32_t fc = q->probe[i];
			q->pdist[i] = q->pdist[m];
			q->probe[i] = q->probe[m];
			q->pdist[m] = fd;
			q->probe[m] = fc;
			i = m;
		}
	}
	return (int)n;
}

#define LOCATE_AHEAD 16 /* clusters located (and prefetched) at a time */

typedef struct pair {
	uint32_t cluster, rank, q;
} pair;

static int cmp_pair(const void *a, const void *b)
{
	const pair *x = a, *y = b;
	if (x->cluster != y->cluster)
		return x->cluster < y->cluster ? -1 : 1;
	return x->rank < y->rank ? -1 : x->rank > y->rank;
}

static int scan_ivf(search *s)
{
	uint32_t np = s->nprobe < s->g->meta.nlist ? s->nprobe : s->g->meta.nlist;
	size_t m = s->nq * np;
	float *dots = malloc(sizeof(float) * s->g->ci.npanels * VF_PANEL);
	pair *pairs = malloc(sizeof(pair) * (m ? m : 1));
	cluster_work *work = malloc(sizeof(cluster_work) * (m ? m : 1));
	uint32_t *qlist = malloc(sizeof(uint32_t) * (m ? m : 1));
	size_t nw = 0, nents = 0, capents = 0;
	entry *ents = NULL;
	vf_cursor *cur = NULL;
	int rc = 0;
	if (!dots || !pairs || !work || !qlist) {
		rc = -ENOMEM;
		goto out;
	}
	if ((rc = vf_cursor_open(s->txn, s->v->store->postings, &cur))) {
		rc = vf_store_err(rc);
		goto out;
	}
	for (size_t i = 0; i < s->nq; i++)
		probe(s, &s->qs[i], dots);
	if (s->nq == 1) { /* probe order as it is */
		for (uint32_t r = 0; r < np; r++) {
			work[nw++] = (cluster_work){s->qs[0].probe[r], r, 0, 1};
			qlist[r] = 0;
		}
	} else {
		/* group (cluster, query) pairs by cluster; visit clusters in order
		 * of their best rank so every query meets its nearest clusters
		 * early */
		for (size_t i = 0, j = 0; i < s->nq; i++)
			for (uint32_t r = 0; r < np; r++, j++)
				pairs[j] = (pair){s->qs[i].probe[r], r, (uint32_t)i};
		qsort(pairs, m, sizeof *pairs, cmp_pair);
		for (size_t i = 0; i < m;) {
			size_t j = i;
			while (j < m && pairs[j].cluster == pairs[i].cluster) {
				qlist[j] = pairs[j].q;
				j++;
			}
			work[nw++] = (cluster_work){pairs[i].cluster, pairs[i].rank, (uint32_t)i,
						    (uint32_t)(j - i)};
			i = j;
		}
		qsort(work, nw, sizeof *work, cmp_probe);
	}
	/* locate a window of clusters ahead (in key order, so the cursor moves
	 * forward through the tree), then score them nearest first */
	for (size_t w0 = 0; w0 < nw && rc == 0; w0 += LOCATE_AHEAD) {
		size_t w1 = w0 + LOCATE_AHEAD < nw ? w0 + LOCATE_AHEAD : nw;
		size_t first[LOCATE_AHEAD], count[LOCATE_AHEAD];
		uint32_t order[LOCATE_AHEAD];
		size_t nwin = w1 - w0;
		for (size_t i = 0; i < nwin; i++) {
			size_t j = i;
			for (; j > 0 && work[w0 + order[j - 1]].cluster > work[w0 + i].cluster; j--)
				order[j] = order[j - 1];
			order[j] = (uint32_t)i;
		}
		nents = 0;
		for (size_t i = 0; i < nwin && rc == 0; i++) {
			first[order[i]] = nents;
			rc = locate_cluster(s, cur, work[w0 + order[i]].cluster, &ents, &nents,
					    &capents);
			count[order[i]] = nents - first[order[i]];
		}
		for (size_t i = 0; i < nwin && rc == 0; i++) {
			if (i + 1 < nwin) /* the next cluster's memory while this one scores */
				prefetch_cluster(ents + first[i + 1], count[i + 1]);
			rc = scan_cluster(s, work[w0 + i].cluster, ents + first[i], count[i],
					  qlist + work[w0 + i].first, work[w0 + i].count);
		}
	}
out:
	free(ents);
	if (cur)
		vf_cursor_close(cur);
	free(dots);
	free(pairs);
	free(work);
	free(qlist);
	return rc;
}

static int fetch_record(search *s, uint64_t id, vf_val *val, vf_record *r)
{
	vf_key64 k = vf_key_u64(id);
	int rc = vf_get(s->txn, s->v->store->records, k.b, 8, val);
	if (rc)
		return vf_store_err(rc);
	return vf_record_decode(val->data, val->len, r);
}

/* Records changed since the generation was synced and not posted to it. */
static int scan_uncovered(search *s)
{
	for (uint64_t i = 0; i < s->dirty.cap; i++) {
		const vf_dirty_entry *e = &s->dirty.slots[i];
		if (!e->id || e->ch.op != VF_OP_PUT || e->ch.gen == s->g->id)
			continue;
		vf_val val;
		vf_record r;
		int rc = fetch_record(s, e->ch.id, &val, &r);
		if (rc == -ENOENT)
			continue;
		if (rc)
			return rc;
		for (size_t qi = 0; qi < s->nq; qi++) {
			query *q = &s->qs[qi];
			q->ex.uncovered_scanned++;
			hheap_push(&q->top, (hit){exact_dist(s, q, r.vec), e->ch.id, r.key, r.keylen,
						  r.payload, r.plen});
		}
	}
	return 0;
}

static int cmp_cand(const void *a, const void *b)
{
	const cand *x = a, *y = b;
	return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* The vector, key and payload of a candidate, from its record (the one
 * copy of every vector; checksummed).  1 when the record is gone: the
 * posting is stale (tombstones and the change log say so first; this only
 * guards the answer). */
static int resolve(search *s, const cand *c, const uint8_t **vec, hit *h)
{
	uint64_t id, seq;
	memcpy(&id, c->idp, 8);
	memcpy(&seq, c->idp + 8, 8); /* (blocks and deltas keep seq after id) */
	vf_val val;
	vf_record r;
	size_t hlen;
	/* where the record was last seen: good if that place still holds this
	 * very version (sequence numbers are never reused) intact */
	const void *hp = vf_hint_get(s->v->store, id, &hlen);
	if (hp && vf_record_decode(hp, hlen, &r) == 0 && r.seq == (seq & ~VF_SEQ_PAYLOAD) &&
	    r.dim == s->dim)
		goto found;
	int rc = fetch_record(s, id, &val, &r);
	if (rc == -ENOENT)
		return 1;
	if (rc)
		return rc;
	vf_hint_put(s->v->store, id, val.data, val.len);
found:
	if (r.dim != s->dim)
		return -EIO;
	*vec = r.vec;
	h->id = id;
	h->key = r.key;
	h->keylen = r.keylen;
	h->payload = r.payload;
	h->plen = r.plen;
	return 0;
}

#define RERANK_STEP 16 /* most candidates whose records are fetched together */
#define RERANK_AHEAD 4 /* records read ahead when candidates go one at a time */

/* Start reading the records of candidates c[0..n): first where each was
 * last seen, then the record there, so that the cache misses of all of
 * them overlap instead of coming one after another. */
static void prefetch_records(search *s, const cand *c, size_t n)
{
	for (size_t j = 0; j < n; j++) {
		uint64_t id;
		memcpy(&id, c[j].idp, 8);
		vf_hint_prefetch(s->v->store, id);
	}
	for (size_t j = 0; j < n; j++) {
		uint64_t id;
		size_t len;
		memcpy(&id, c[j].idp, 8);
		const char *p = vf_hint_get(s->v->store, id, &len);
		for (size_t o = 0; p && o < len; o += 64)
			__builtin_prefetch(p + o);
	}
}

/* Exact distances for the candidates, best lower bound first, until no
 * remaining bound can enter the top k.  While the top k is short by m
 * results, the next m candidates are all scored, so their records are
 * fetched together; once it is full, one at a time, each only if its bound
 * can still enter (a record read costs a tree descent: none in vain). */
static int rerank(search *s, query *q)
{
	cand_trim(q);
	if (q->nc == 0)
		return 0;
	qsort(q->cands, q->nc, sizeof(cand), cmp_cand);
	size_t cap = (size_t)s->k * s->refine;
	size_t n = q->nc < cap ? q->nc : cap;
	/* the ids of the likely re-ranks (the top k and as many again) */
	for (size_t i = 0; i < n && i < 2 * (size_t)q->top.k; i++)
		__builtin_prefetch(q->cands[i].idp);
	size_t ahead = 0; /* records read ahead up to here */
	for (size_t i0 = 0, m; i0 < n; i0 += m) {
		const uint8_t *vec[RERANK_STEP];
		hit h[RERANK_STEP];
		m = q->top.n < q->top.k ? q->top.k - q->top.n : 1;
		if (m > RERANK_STEP)
			m = RERANK_STEP;
		if (m > n - i0)
			m = n - i0;
		if (!hheap_admits(&q->top, q->cands[i0].lo))
			break;
		if (i0 + m > ahead) { /* read this step's records, or a few ahead */
			size_t r = m > RERANK_AHEAD ? m : RERANK_AHEAD;
			r = r < n - i0 ? r : n - i0;
			prefetch_records(s, &q->cands[i0], r);
			ahead = i0 + r;
		}
		for (size_t j = 0; j < m; j++) {
			int rc = resolve(s, &q->cands[i0 + j], &vec[j], &h[j]);
			if (rc < 0)
				return rc;
			if (rc)
				vec[j] = NULL; /* (the record checksum has read the vector) */
		}
		for (size_t j = 0; j < m; j++) {
			const cand *c = &q->cands[i0 + j];
			if (!hheap_admits(&q->top, c->lo))
				return 0;
			if (!vec[j]) {
				q->ex.stale_skipped++;
				continue;
			}
			q->ex.reranked++;
			h[j].d = exact_dist(s, q, vec[j]);
			hheap_push(&q->top, h[j]);
		}
	}
	return 0;
}

static int scan_exact(search *s)
{
	vf_cursor *cur;
	vf_val k, d;
	int rc = vf_cursor_open(s->txn, s->v->store->records, &cur);
	if (rc)
		return vf_store_err(rc);
	for (rc = vf_cursor_get(cur, &k, &d, VF_FIRST); rc == 0;
	     rc = vf_cursor_get(cur, &k, &d, VF_NEXT)) {
		vf_record r;
		if (vf_record_decode(d.data, d.len, &r) || r.dim != s->dim) {
			rc = -EIO;
			break;
		}
		uint64_t id = vf_rd_be64(k.data);
		for (size_t qi = 0; qi < s->nq; qi++) {
			query *q = &s->qs[qi];
			q->ex.uncovered_scanned++;
			float dd = exact_dist(s, q, r.vec);
			if (hheap_admits(&q->top, dd))
				hheap_push(&q->top, (hit){dd, id, r.key, r.keylen, r.payload,
							  r.plen});
		}
	}
	vf_cursor_close(cur);
	return rc == -ENOENT ? 0 : rc;
}

static int cmp_hit(const void *a, const void *b)
{
	const hit *x = a, *y = b;
	if (x->d != y->d)
		return x->d < y->d ? -1 : 1;
	return x->id < y->id ? -1 : x->id > y->id;
}

/* The work counts of x added to e's. */
static void explain_add(vecfs_explain *e, const vecfs_explain *x)
{
	e->clusters_probed += x->clusters_probed;
	e->pass1_scored += x->pass1_scored;
	e->pass1_pruned += x->pass1_pruned;
	e->pass2_scored += x->pass2_scored;
	e->pass2_pruned += x->pass2_pruned;
	e->reranked += x->reranked;
	e->delta_scanned += x->delta_scanned;
	e->uncovered_scanned += x->uncovered_scanned;
	e->stale_skipped += x->stale_skipped;
}

/* The results of the queries of parts[0..nparts), in order: the hits (keys,
 * payloads) copied out of the transactions. */
static int collect(search *parts, int nparts, vecfs_results **out)
{
	size_t bytes = 0, nh = 0, nq = 0;
	for (int pi = 0; pi < nparts; pi++)
		nq += parts[pi].nq;
	for (int pi = 0; pi < nparts; pi++)
	for (size_t i = 0; i < parts[pi].nq; i++) {
		query *q = &parts[pi].qs[i];
		qsort(q->top.v, q->top.n, sizeof(hit), cmp_hit);
		for (uint32_t j = 0; j < q->top.n; j++)
			bytes += q->top.v[j].keylen + 1 + q->top.v[j].plen;
		nh += q->top.n;
	}
	vecfs_results *res = calloc(1, sizeof *res);
	if (!res)
		return -ENOMEM;
	res->nq = nq;
	res->count = calloc(nq, sizeof(size_t));
	res->hits = calloc(nq, sizeof(vecfs_hit *));
	vecfs_hit *hits = malloc(sizeof(vecfs_hit) * (nh ? nh : 1) + bytes);
	if (!res->count || !res->hits || !hits) {
		free(hits);
		vecfs_results_free(res);
		return -ENOMEM;
	}
	char *arena = (char *)(hits + (nh ? nh : 1));
	for (int pi = 0, r = 0; pi < nparts; pi++)
	for (size_t i = 0; i < parts[pi].nq; i++, r++) {
		const search *s = &parts[pi];
		query *q = &s->qs[i];
		res->hits[r] = hits;
		res->count[r] = q->top.n;
		for (uint32_t j = 0; j < q->top.n; j++, hits++) {
			const hit *h = &q->top.v[j];
			memcpy(arena, h->key, h->keylen);
			arena[h->keylen] = 0;
			hits->key = arena;
			hits->keylen = h->keylen;
			arena += h->keylen + 1;
			hits->payload = NULL;
			hits->payload_len = 0;
			if (h->plen) {
				hits->payload = arena;
				hits->payload_len = h->plen;
				memcpy(arena, h->payload, h->plen);
				arena += h->plen;
			}
			hits->distance = to_metric_units(s, h->d);
		}
		explain_add(&res->explain, &q->ex);
	}
	res->generation = parts[0].g ? parts[0].g->id : 0;
	res->explain.generation = res->generation;
	*out = res;
	return 0;
}

void vecfs_results_free(vecfs_results *r)
{
	if (!r)
		return;
	if (r->hits)
		free(r->hits[0]);
	free(r->hits);
	free(r->count);
	free(r);
}

static void query_free(query *q)
{
	free(q->q);
	vf_qstate_free(&q->qs);
	vf_cstate_free(&q->cs);
	free(q->ub.v);
	free(q->cands);
	free(q->top.v);
	free(q->probe);
	free(q->pdist);
}

static double now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e6 + ts.tv_nsec * 1e-3;
}

static void record_latency(vecfs *v, size_t nq, double us)
{
	pthread_mutex_lock(&v->stat_mu);
	v->queries += nq;
	uint32_t per = (uint32_t)(us / (double)(nq ? nq : 1));
	for (size_t i = 0; i < nq && i < VF_LAT_RING; i++)
		v->lat[v->nlat++ % VF_LAT_RING] = per;
	pthread_mutex_unlock(&v->stat_mu);
}

void vecfs_search_count(vecfs *v, const vecfs_results *r)
{
	record_latency(v, r->nq, (double)r->explain.micros);
}

uint64_t vecfs_snapshot(vecfs *v)
{
	return vf_store_version(v->store);
}

static int search_run(search *s, const float *queries, size_t nq, size_t first,
		      uint32_t dim, const vecfs_query_opts *opts, char *err, size_t errlen);
static void search_free(search *s);

/* Query i of s again, on the same snapshot, probing four times as many
 * clusters (at most all of them; that search widens further if it must):
 * its results and counts replace the first ones, its work adds to theirs. */
static int widen(search *s, size_t i, const float *qv, size_t first,
		 const vecfs_query_opts *o, char *err, size_t errlen)
{
	vecfs_query_opts wo = *o;
	wo.k = s->k;
	wo.refine = s->refine;
	wo.nprobe = s->nprobe > s->gm.nlist / 4 ? s->gm.nlist : s->nprobe * 4;
	search w = {.v = s->v, .txn = s->txn, .active = s->active};
	int rc = search_run(&w, qv, 1, first, s->dim, &wo, err, errlen);
	if (rc == 0) {
		query t = s->qs[i];
		s->qs[i] = w.qs[0];
		w.qs[0] = t;
		explain_add(&s->qs[i].ex, &t.ex);
	}
	search_free(&w);
	return rc;
}

/* One search over queries[0..nq) (the batch's from `first` on) on the open
 * snapshot s->txn, up to the results that collect() takes from s. */
static int search_run(search *s, const float *queries, size_t nq, size_t first,
		      uint32_t dim, const vecfs_query_opts *opts, char *err, size_t errlen)
{
	vecfs_query_opts o = *opts;
	vecfs *v = s->v;
	vf_stored_config sc;
	vf_counters cnt;
	int rc;

	s->kn = vf_kernels_get();
	s->txnid = vf_txn_id(s->txn);
	s->epoch = v->store->map_epoch;
	if ((rc = vf_load_config(s->txn, v->store, &sc)) ||
	    (rc = vf_load_counters(s->txn, v->store, &cnt)))
		return rc;
	if (sc.dim == 0 || dim != sc.dim) {
		vf_seterr(err, errlen, sc.dim ? "query has dimension %u, the store has dim %u"
					      : "query has dimension %u, the store has no data yet (dim %u)",
			  dim, sc.dim);
		return -EINVAL;
	}
	s->metric = (vecfs_metric)sc.metric;
	s->dim = dim;
	s->k = o.k ? o.k : sc.k;
	s->nprobe = o.nprobe ? o.nprobe : sc.nprobe;
	s->refine = o.refine ? o.refine : sc.refine;
	if (s->k > 100000 || s->refine > 1000) {
		vf_seterr(err, errlen, "k must be at most 100000 and refine at most 1000");
		return -EINVAL;
	}
	s->nq = nq;
	uint64_t active = s->active;
	if (active) {
		if ((rc = vf_gen_get(v, s->txn, active, &s->g)) ||
		    (rc = vf_load_genmeta(s->txn, v->store, active, &s->gm)))
			return rc;
	}
	s->qs = calloc(nq, sizeof(query));
	s->surv = malloc(sizeof(uint32_t) * VF_BLOCK_MAX);
	s->surv_lo = malloc(sizeof(float) * VF_BLOCK_MAX);
	s->surv_hi = malloc(sizeof(float) * VF_BLOCK_MAX);
	s->kbuf = malloc(sizeof(float) * s->k);
	s->planes = malloc(s->g ? (size_t)s->gm.bits * (s->gm.pdim / 8) : 1);
	if (!s->qs || !s->surv || !s->surv_lo || !s->surv_hi || !s->kbuf || !s->planes)
		return -ENOMEM;
	for (size_t i = 0; i < nq; i++) {
		query *q = &s->qs[i];
		q->q = malloc(sizeof(float) * dim);
		q->top.k = s->k;
		q->top.v = malloc(sizeof(hit) * s->k);
		if (!q->q || !q->top.v)
			return -ENOMEM;
		if (vf_to_index_space(s->metric, queries + i * dim, q->q, dim)) {
			vf_seterr(err, errlen, "query %zu is a zero vector under the cosine metric",
				  first + i + 1);
			return -EINVAL;
		}
		if (!s->g)
			continue;
		q->ub.k = s->k;
		q->ub.v = malloc(sizeof(float) * s->k);
		/* an nprobe past the clusters there are probes them all */
		size_t np = s->nprobe < s->gm.nlist ? s->nprobe : s->gm.nlist;
		q->probe = malloc(sizeof(uint32_t) * (np + 1));
		q->pdist = malloc(sizeof(float) * (np + 1));
		if (!q->ub.v || !q->probe || !q->pdist ||
		    (rc = vf_qstate_init(&q->qs, s->gm.pdim, s->gm.bits)) ||
		    (rc = vf_cstate_init(&q->cs, s->gm.pdim)))
			return rc ? rc : -ENOMEM;
		vf_qstate_set(&q->qs, &s->g->rot, q->q);
	}
	if (!s->g)
		return scan_exact(s);
	vf_dirty_init(&s->dirty);
	if ((rc = vf_dirty_load(s->txn, v->store, s->gm.synced_seq, cnt.seq, &s->dirty)) ||
	    (rc = scan_uncovered(s)) || (rc = scan_ivf(s)))
		return rc;
	for (size_t i = 0; i < nq && rc == 0; i++)
		rc = rerank(s, &s->qs[i]);
	/* min(k, live records) results: a query whose probed clusters held
	 * fewer live postings probes again, more clusters */
	uint64_t want = cnt.live < s->k ? cnt.live : s->k;
	for (size_t i = 0; i < nq && rc == 0; i++)
		if (s->qs[i].top.n < want && s->nprobe < s->gm.nlist)
			rc = widen(s, i, queries + i * dim, first + i, &o, err, errlen);
	return rc;
}

static void search_free(search *s)
{
	if (s->qs)
		for (size_t i = 0; i < s->nq; i++)
			query_free(&s->qs[i]);
	free(s->qs);
	vf_dirty_free(&s->dirty);
	vf_tombs_free(&s->tombs);
	free(s->surv);
	free(s->surv_lo);
	free(s->surv_hi);
	free(s->kbuf);
	free(s->planes);
	vf_gen_put(s->v, s->g);
}

/* A batch of queries is searched in parts, on every CPU.  With an index,
 * a part is at most PART_ANN queries: they share the reads of the blocks
 * they probe while their tables and candidates stay in the CPU's caches
 * (measured on sift-128: 17k QPS in parts of 4-8 on one CPU, 12-14k one
 * query at a time, 9k for a batch of 1000 in one part).  Without (exact
 * scans), a part reads every record: one part a CPU, at least PART_EXACT
 * queries each.  Each CPU's parts run on a read transaction of its own,
 * all of them on one snapshot. */
#define PART_ANN 8
#define PART_EXACT 16

typedef struct cpu_job {
	search *parts;        /* this CPU's, in batch order */
	size_t nparts, first; /* how many; the index of the first in the batch's */
	const float *queries; /* the batch */
	size_t nq, per;       /* queries in all; in a part */
	uint32_t dim;
	const vecfs_query_opts *opts;
	int rc;
	char err[256];
} cpu_job;

static void *cpu_run(void *arg)
{
	cpu_job *j = arg;
	for (size_t p = 0; p < j->nparts && j->rc == 0; p++) {
		size_t from = (j->first + p) * j->per;
		size_t n = j->nq - from < j->per ? j->nq - from : j->per;
		j->rc = search_run(&j->parts[p], j->queries + from * j->dim, n, from, j->dim,
				   j->opts, j->err, sizeof j->err);
	}
	return NULL;
}

/* Read transactions txn[1..n) on the snapshot of txn[0].  Returns how many
 * CPUs have one: n, or 1 when a write committed in between (the batch then
 * runs on one CPU). */
static int open_more(vecfs *v, vf_txn **txn, int n)
{
	int t;
	for (t = 1; t < n; t++)
		if (vf_read_begin(v->store, &txn[t]) ||
		    vf_txn_id(txn[t]) != vf_txn_id(txn[0])) {
			if (txn[t])
				vf_read_end(v->store, txn[t]);
			txn[t] = NULL;
			break;
		}
	if (t == n)
		return n;
	for (int u = 1; u < t; u++) {
		vf_read_end(v->store, txn[u]);
		txn[u] = NULL;
	}
	return 1;
}

int vecfs_search(vecfs *v, const float *queries, size_t nq, uint32_t dim,
		 const vecfs_query_opts *opts, vecfs_results **out, char *err,
		 size_t errlen)
{
	double t0 = now_us();
	vecfs_query_opts o = opts ? *opts : (vecfs_query_opts){0};
	vf_txn *txn[VF_PARALLEL_MAX] = {0};
	cpu_job jobs[VF_PARALLEL_MAX];
	search *parts = NULL;
	size_t nparts, per;
	int rc, n = v->threads;

	*out = NULL;
	if (nq == 0) {
		vf_seterr(err, errlen, "no query vector");
		return -EINVAL;
	}
	for (size_t i = 0; i < nq * dim; i++)
		if (!isfinite(queries[i])) {
			vf_seterr(err, errlen, "query %zu: value %zu is not finite", i / dim + 1,
				  i % dim + 1);
			return -EINVAL;
		}
	if ((rc = vf_read_begin(v->store, &txn[0])))
		return rc;
	if (n > VF_PARALLEL_MAX)
		n = VF_PARALLEL_MAX;
	uint64_t active = o.exact ? 0 : vf_load_active(txn[0], v->store);
	int exact = !active;
	if (exact) {
		if ((size_t)n > nq / PART_EXACT)
			n = (int)(nq / PART_EXACT);
		if (n < 1)
			n = 1;
	} else if ((size_t)n > (nq + PART_ANN - 1) / PART_ANN) {
		n = (int)((nq + PART_ANN - 1) / PART_ANN);
	}
	n = open_more(v, txn, n);
	per = exact ? (nq + (size_t)n - 1) / (size_t)n : PART_ANN;
	nparts = (nq + per - 1) / per;
	parts = calloc(nparts, sizeof *parts);
	if (!parts) {
		vf_read_end(v->store, txn[0]);
		for (int t = 1; t < n; t++)
			vf_read_end(v->store, txn[t]);
		return -ENOMEM;
	}
	memset(jobs, 0, sizeof jobs);
	for (int t = 0; t < n; t++) {
		size_t p0 = nparts * (size_t)t / (size_t)n, p1 = nparts * (size_t)(t + 1) / (size_t)n;
		jobs[t] = (cpu_job){parts + p0, p1 - p0, p0, queries, nq, per, dim, &o, 0, ""};
		for (size_t p = p0; p < p1; p++) {
			parts[p].v = v;
			parts[p].txn = txn[t]; /* the snapshot of txn[0] (open_more) */
			parts[p].active = active;
		}
	}
	vf_parallel(cpu_run, jobs, sizeof *jobs, n);
	for (int t = 0; t < n && rc == 0; t++)
		if ((rc = jobs[t].rc) && jobs[t].err[0])
			vf_seterr(err, errlen, "%s", jobs[t].err);
	if (rc == 0)
		rc = collect(parts, (int)nparts, out);
	if (rc == 0) {
		double us = now_us() - t0;
		(*out)->explain.micros = (uint64_t)us;
		(*out)->explain.k = parts[0].k;
		(*out)->explain.nprobe = parts[0].nprobe;
		(*out)->explain.refine = parts[0].refine;
		(*out)->snapshot = vf_txn_id(txn[0]);
		if (!o.uncounted)
			record_latency(v, nq, us);
	}
	if (rc == -EIO && err && errlen && !err[0])
		vf_seterr(err, errlen, "a posting block or record failed its checksum or is damaged");
	for (size_t p = 0; p < nparts; p++)
		search_free(&parts[p]);
	free(parts);
	for (int t = 0; t < n; t++)
		vf_read_end(v->store, txn[t]);
	return rc;
}
