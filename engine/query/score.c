/*
 * engine/query/score.c - scoring: posting blocks in two passes (the sign planes by
 * 4-bit table look-ups, then all bit planes for the survivors), delta
 * postings, records the generation does not cover, and the exact re-rank
 * of the candidates on their records' vectors.
 */
#include "io.h"
#include "search_internal.h"

#include <errno.h>
#include <string.h>

#include "keys.h"
#include "record.h"
#include "gen/gen.h"
#include "math/math.h"

static int cand_push(query *q, cand c)
{
	if (VF_GROW(q->cands, q->nc, q->capc, 256))
		return -ENOMEM;
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

/* The first pass drops a posting whose lower bound at VF_PASS1_EPS
 * standard deviations (not the code's VF_EPS0) cannot beat the k-th upper
 * bound: only a pre-filter for pass 2, whose bounds (at VF_EPS0) choose the
 * candidates.  A true neighbour lost here must have a first-pass estimate
 * 1.9 standard deviations above its distance while that distance is near
 * the k-th: at equal nprobe recall@10 fell by 0.0001-0.0009 on sift-128,
 * fashion-mnist-784 and glove-100, and half as many postings reached pass
 * 2 (sift-128 nprobe 12: 165 -> 105; glove-100 nprobe 32: 693 -> 359). */
#define VF_PASS1_EPS 1.9f

#define PASS2_LAG 4 /* batches between a survivor's prefetch and its pass 2 */

/* A block's columns verified: those pass 1 reads, those pass 2 reads. */
#define CHECKED_SCAN (1u << VF_COL_SIGN | 1u << VF_COL_F1)
#define CHECKED_PASS2 (1u << VF_COL_PASS2 | 1u << VF_COL_IDS)

/* Pass 2 for survivors s->surv[k0..k1) of block b (their PASS2 records were
 * prefetched when pass 1 let them through). */
static int pass2_block(search *s, query *q, const vf_block *b, uint32_t k0, uint32_t k1,
		       uint8_t *checked)
{
	if (k0 < k1 && !(*checked & CHECKED_PASS2)) {
		if (vf_block_check(s->v->vcache, b, VF_COL_PASS2) ||
		    vf_block_check(s->v->vcache, b, VF_COL_IDS))
			return -EIO;
		*checked |= CHECKED_PASS2;
	}
	for (uint32_t k = k0; k < k1; k++) {
		uint32_t i = s->surv[k];
		/* the id column is read only under a filter: a cache miss a
		 * survivor otherwise */
		if (s->fset && filtered_out(s, vf_block_id(b, i)))
			continue;
		/* the bound has tightened since pass 1 */
		if (s->surv_lo[k] > fheap_top(&q->ub)) {
			q->ex.pass1_pruned++;
			continue;
		}
		const uint8_t *f2 = vf_block_f2_at(b, i);
		float est, bound;
		vf_block_sign_with(b, i, s->planes, s->kn->sign_gather);
		vf_pass2(&q->qs, &q->cs, s->planes, vf_block_pass2_at(b, i), vf_block_f1(b, 0, i),
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
static int scan_block(search *s, query *q, const vf_block *b, uint8_t *checked)
{
	uint32_t groups = b->pdim / 4;
	int check = s->tombs.n || s->dirty.n || s->fset;
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
		q->p1.thresh = fheap_top(&q->ub);
		uint32_t mask = s->kn->pass1(b->col[VF_COL_SIGN] + (size_t)bt * groups * 16,
					     q->cs.lut, groups, f1, f1 + 128, f1 + 256,
					     &q->p1, lo, hi);
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
		if ((rc = pass2_block(s, q, b, done, due, checked)))
			return rc;
		done = due;
	}
	/* Before k candidates exist there is no threshold yet: then the block's
	 * own k smallest first-pass upper bounds (k distinct records when no
	 * posting can be stale) bound the k-th distance instead.  The survivors
	 * whose upper bound is among them go to pass 2 first, in block order:
	 * their tighter bounds set the threshold before the others are scored.
	 * (Without a branch on the bounds: which side a survivor falls on is a
	 * coin toss.) */
	if (whole && ns > q->ub.k) {
		float tb = vf_kth_smallest(s->kn, s->surv_hi, ns, q->ub.k, s->kbuf, s->kidx);
		uint32_t a = 0, e = 0;
		for (uint32_t k = 0; k < ns; k++) {
			uint32_t i = s->surv[k];
			float sl = s->surv_lo[k], sh = s->surv_hi[k];
			int first = sh <= tb, later = !first && !(sl > tb);
			s->surv[a] = i; /* (a <= k: read already) */
			s->surv_lo[a] = sl;
			a += (uint32_t)first;
			s->aside[e] = i;
			s->aside_lo[e] = sl;
			e += (uint32_t)later;
		}
		memcpy(s->surv + a, s->aside, sizeof(uint32_t) * e);
		memcpy(s->surv_lo + a, s->aside_lo, sizeof(float) * e);
		q->ex.pass1_pruned += ns - (a + e);
		ns = a + e;
	}
	if (whole)
		for (uint32_t k = 0; k < ns; k++)
			prefetch_pass2(b, s->surv[k]);
	return pass2_block(s, q, b, done, ns, checked);
}

/* Score the located entries of cluster c for the queries that probe it. */
int vf_scan_cluster(search *s, uint32_t c, entry *ents, size_t nents,
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
		q->p1 = q->cs.p1;
		q->p1.nq *= VF_PASS1_EPS / VF_EPS0;
		q->ex.clusters_probed++;
	}
	/* each query has its own constants for the cluster (and, in a
	 * generation without a table a query, its table), set above; the
	 * block reads are shared */
	for (size_t ei = 0; ei < nents && rc == 0; ei++) {
		entry *e = &ents[ei];
		if (e->kind == VF_PK_TOMB) {
			uint64_t ks;
			if (e->len != 8)
				return -EIO;
			memcpy(&ks, e->data, 8);
			rc = vf_tombs_add(&s->tombs, e->sub, ks);
		} else if (e->kind == VF_PK_BLOCK) {
			vf_block b;
			if ((rc = vf_entry_block_open(e, &b)))
				break;
			/* verified once in this snapshot, the columns are
			 * known good at this place (the vcache remembers them
			 * beyond it, at the cost of a look-up) */
			if (!(e->checked & CHECKED_SCAN)) {
				if ((rc = vf_block_check(s->v->vcache, &b, VF_COL_SIGN)) ||
				    (rc = vf_block_check(s->v->vcache, &b, VF_COL_F1)))
					break;
				e->checked |= CHECKED_SCAN;
			}
			if (b.pdim != s->gm.pdim || b.bits != s->gm.bits)
				return -EIO;
			for (uint32_t i = 0; i < nqc && rc == 0; i++)
				rc = scan_block(s, &s->qs[qids[i]], &b, &e->checked);
		} else if (e->kind == VF_PK_DELTA) {
			vf_code code;
			if ((rc = vf_delta_open_cached(s->v->vcache, e->data, e->len, s->gm.dim,
							s->gm.pdim, s->gm.bits, &code)))
				break;
			if (filtered_out(s, code.id))
				continue;
			for (uint32_t i = 0; i < nqc && rc == 0; i++) {
				query *q = &s->qs[qids[i]];
				float est, bound;
				q->ex.delta_scanned++;
				vf_pass2(&q->qs, &q->cs, code.planes,
					 code.planes + vf_plane_bytes(s->gm.pdim), code.add, code.rb,
					 code.eb, code.cdot, &est, &bound);
				if (pass2_keeps(q, est, bound))
					rc = accept(s, q, est, bound, NULL, 0, &code, e->data);
			}
		}
	}
	return rc;
}

static int fetch_record(search *s, uint64_t id, vf_val *val, vf_record *r)
{
	int rc = vf_records_get(s->txn, s->v->store, id, val);
	if (rc)
		return vf_store_err(rc);
	return vf_record_decode(val->data, val->len, r);
}

/* Records changed since the generation was synced and not posted to it. */
int vf_scan_uncovered(search *s)
{
	for (uint64_t i = 0; i < s->dirty.cap; i++) {
		const vf_dirty_entry *e = &s->dirty.slots[i];
		if (!e->id || e->ch.op != VF_OP_PUT || e->ch.gen == s->g->id ||
		    filtered_out(s, e->ch.id))
			continue;
		vf_val val;
		vf_record r;
		int rc = fetch_record(s, e->ch.id, &val, &r);
		if (rc == -ENOENT)
			continue;
		if (rc)
			return rc;
		if (r.dim != s->dim)
			return -EIO;
		const float *vec = rec_vec(s, &r, s->nq);
		for (size_t qi = 0; qi < s->nq; qi++) {
			query *q = &s->qs[qi];
			q->ex.uncovered_scanned++;
			hheap_push(&q->top, (hit){rec_dist(s, q, &r, vec), e->ch.id, r.key, r.keylen,
						  r.payload, r.plen});
		}
	}
	return 0;
}

/* The candidates in order of lower bound, as far as the re-rank needs
 * them (it stops after a few dozen of hundreds): a min-heap of a[0..h)
 * whose popped minima fill the array from its end, so that a[n - 1] is the
 * best, a[n - 2] the next, and so on. */
static void cand_sift(cand *a, size_t h, size_t i)
{
	cand x = a[i];
	for (;;) {
		size_t l = 2 * i + 1, m = l;
		if (l >= h)
			break;
		if (l + 1 < h && a[l + 1].lo < a[l].lo)
			m = l + 1;
		if (!(a[m].lo < x.lo))
			break;
		a[i] = a[m];
		i = m;
	}
	a[i] = x;
}

static void cand_heapify(cand *a, size_t n)
{
	for (size_t i = n / 2; i-- > 0;)
		cand_sift(a, n, i);
}

/* Pop until the best `upto` are in order at the end; *h the heap's size. */
static void cand_order(cand *a, size_t n, size_t *h, size_t upto)
{
	while (n - *h < upto && *h > 0) {
		size_t e = --*h;
		cand t = a[0];
		a[0] = a[e];
		a[e] = t;
		cand_sift(a, e, 0);
	}
}

/* The vector, key and payload of a candidate, from its record (the one
 * copy of every vector; checksummed).  1 when the record is gone: the
 * posting is stale (tombstones and the change log say so first; this only
 * guards the answer).  hp/hlen: where the record was last seen (a location
 * hint, or NULL), hstate: what vf_hint_get() said of it.  A stable place
 * lies inside the snapshot: it is read in place like the tree's values,
 * and checked once (then its hint says so).  Else a writer may free and
 * reuse its page at any moment, so it is read once, into `copy` (room for
 * hlen bytes), and only the copy is checked and used (*copied = 1).  Else
 * the record comes from the tree, in the snapshot (*copied = 0). */
static int resolve(search *s, const cand *c, const void *hp, size_t hlen, int hstate,
		   uint8_t *copy, const uint8_t **vec, int *kind, hit *h, int *copied)
{
	uint64_t id, seq;
	memcpy(&id, c->idp, 8);
	memcpy(&seq, c->idp + 8, 8); /* (blocks and deltas keep seq after id) */
	seq &= ~VF_SEQ_PAYLOAD;
	vf_val val;
	vf_record r;
	*copied = 0;
	/* good if that place still holds this very version (sequence numbers
	 * are never reused) intact */
	if (hp && (hstate & VF_HINT_CHECKED)) {
		if (vf_record_fields(hp, hlen, &r) == 0 && r.seq == seq && r.dim == s->dim)
			goto found;
	} else if (hp && (hstate & VF_HINT_STABLE)) {
		if (vf_record_decode(hp, hlen, &r) == 0 && r.seq == seq && r.dim == s->dim) {
			vf_hint_put(s->v->store, s->txn, id, hp, hlen, 1);
			goto found;
		}
	} else if (hp) {
		memcpy(copy, hp, hlen);
		if (vf_record_decode(copy, hlen, &r) == 0 && r.seq == seq && r.dim == s->dim) {
			*copied = 1;
			goto found;
		}
	}
	int rc = fetch_record(s, id, &val, &r);
	if (rc == -ENOENT)
		return 1;
	if (rc)
		return rc;
	vf_hint_put(s->v->store, s->txn, id, val.data, val.len, 1);
found:
	if (r.dim != s->dim)
		return -EIO;
	*vec = r.vec;
	*kind = r.kind;
	h->id = id;
	h->key = r.key;
	h->keylen = r.keylen;
	h->payload = r.payload;
	h->plen = r.plen;
	return 0;
}

/* A result read from a copy keeps its key and payload in q's own chunks
 * (the copy is reused by the next step). */
static int keep_bytes(query *q, hit *h)
{
	size_t n = (size_t)h->keylen + h->plen;
	keep_chunk *c = q->keep;
	if (!c || c->cap - c->used < n) {
		/* room for about k results like this one, then twice the last
		 * chunk (a batch holds one list a query: kept small) */
		size_t cap = c ? 2 * c->cap : n * ((size_t)q->top.k + 4);
		cap = cap > 65536 ? 65536 : cap < 256 ? 256 : cap;
		if (cap < n)
			cap = n;
		keep_chunk *nc = vf_malloc(sizeof *nc + cap);
		if (!nc)
			return -ENOMEM;
		nc->next = c;
		nc->used = 0;
		nc->cap = cap;
		q->keep = c = nc;
	}
	uint8_t *p = c->data + c->used;
	if (h->keylen)
		memcpy(p, h->key, h->keylen);
	if (h->plen)
		memcpy(p + h->keylen, h->payload, h->plen);
	h->key = (const char *)p;
	h->payload = p + h->keylen;
	c->used += n;
	return 0;
}

#define RERANK_STEP 16 /* most candidates whose records are fetched together */
#define RERANK_AHEAD 4 /* records read ahead when candidates go one at a time */
/* Bytes of a record read ahead: its header and the start of its vector.
 * The distance reads the vector in order, so the hardware's own read-ahead
 * takes the rest; asking for every line of a few 3 KiB records at once
 * (fashion-mnist-784) stalled on the outstanding misses instead. */
#define RERANK_PF_BYTES 256

/* Start reading the records of candidates c[0..n): first where each was
 * last seen, then the first RERANK_PF_BYTES of the record there, so that
 * the cache misses of all of them overlap instead of coming one after
 * another. */
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
		const char *p = vf_hint_get(s->v->store, NULL, id, &len, NULL);
		for (size_t o = 0; p && o < len && o < RERANK_PF_BYTES; o += 64)
			__builtin_prefetch(p + o);
	}
}

/* Exact distances for the candidates, best lower bound first, until no
 * remaining bound can enter the top k.  While the top k is short by m
 * results, the next m candidates are all scored, so their records are
 * fetched together; once it is full, one at a time, each only if its bound
 * can still enter (a record read costs a tree descent: none in vain). */
int vf_rerank(search *s, query *q)
{
	cand_trim(q);
	if (q->nc == 0)
		return 0;
	cand *a = q->cands;
	size_t nc = q->nc, h = nc;
	cand_heapify(a, nc);
	size_t cap = (size_t)s->k * s->refine;
	size_t n = nc < cap ? nc : cap;
#define CAND(i) (&a[nc - 1 - (i)]) /* the i-th best lower bound */
	/* the ids of the likely re-ranks (the top k and as many again) */
	size_t first = n < 2 * (size_t)q->top.k ? n : 2 * (size_t)q->top.k;
	cand_order(a, nc, &h, first);
	for (size_t i = 0; i < first; i++)
		__builtin_prefetch(CAND(i)->idp);
	size_t ahead = 0; /* records read ahead up to here */
	for (size_t i0 = 0, m; i0 < n; i0 += m) {
		const uint8_t *vec[RERANK_STEP];
		int kind[RERANK_STEP];
		hit hs[RERANK_STEP];
		m = q->top.n < q->top.k ? q->top.k - q->top.n : 1;
		if (m > RERANK_STEP)
			m = RERANK_STEP;
		if (m > n - i0)
			m = n - i0;
		cand_order(a, nc, &h, i0 + (m > RERANK_AHEAD ? m : RERANK_AHEAD));
		if (!hheap_admits(&q->top, CAND(i0)->lo))
			break;
		if (i0 + m > ahead) { /* read this step's records, or a few ahead */
			size_t r = m > RERANK_AHEAD ? m : RERANK_AHEAD;
			r = r < n - i0 ? r : n - i0;
			/* not those that cannot enter the top k already (the
			 * bounds rise with i, the top k's only falls) */
			while (r > m && !hheap_admits(&q->top, CAND(i0 + r - 1)->lo))
				r--;
			prefetch_records(s, CAND(i0 + r - 1), r); /* (they lie backwards) */
			ahead = i0 + r;
		}
		/* where each record was last seen, and room to copy them */
		const void *hp[RERANK_STEP];
		size_t hlen[RERANK_STEP], need = 0;
		int copied[RERANK_STEP], hstate[RERANK_STEP];
		for (size_t j = 0; j < m; j++) {
			uint64_t id;
			memcpy(&id, CAND(i0 + j)->idp, 8);
			hp[j] = vf_hint_get(s->v->store, &s->hints, id, &hlen[j], &hstate[j]);
			need += hp[j] && !hstate[j] ? hlen[j] : 0;
		}
		if (need > s->copies_cap) {
			uint8_t *nb = vf_realloc(s->copies, need);
			if (!nb)
				return -ENOMEM;
			s->copies = nb;
			s->copies_cap = need;
		}
		for (size_t j = 0, off = 0; j < m; j++) {
			int rc = resolve(s, CAND(i0 + j), hp[j], hlen[j], hstate[j], s->copies + off,
					 &vec[j], &kind[j], &hs[j], &copied[j]);
			if (rc < 0)
				return rc;
			if (rc)
				vec[j] = NULL; /* (the record checksum has read the vector) */
			off += hp[j] && !hstate[j] ? hlen[j] : 0;
		}
		for (size_t j = 0; j < m; j++) {
			const cand *c = CAND(i0 + j);
			if (!hheap_admits(&q->top, c->lo))
				return 0;
			if (!vec[j]) {
				q->ex.stale_skipped++;
				continue;
			}
			q->ex.reranked++;
			vf_record r = {.dim = s->dim, .kind = kind[j], .vec = vec[j]};
			hs[j].d = rec_dist(s, q, &r, rec_vec(s, &r, 1));
			if (!hheap_admits(&q->top, hs[j].d))
				continue;
			int rc = copied[j] ? keep_bytes(q, &hs[j]) : 0;
			if (rc)
				return rc;
			hheap_push(&q->top, hs[j]);
		}
	}
#undef CAND
	return 0;
}

int vf_scan_exact(search *s)
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
		if (filtered_out(s, id))
			continue;
		const float *vec = rec_vec(s, &r, s->nq);
		for (size_t qi = 0; qi < s->nq; qi++) {
			query *q = &s->qs[qi];
			q->ex.uncovered_scanned++;
			double dd = rec_dist(s, q, &r, vec);
			if (hheap_admits(&q->top, dd))
				hheap_push(&q->top, (hit){dd, id, r.key, r.keylen, r.payload,
							  r.plen});
		}
	}
	vf_cursor_close(cur);
	return rc == -ENOENT ? 0 : rc;
}
