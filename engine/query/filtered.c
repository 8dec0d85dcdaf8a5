/*
 * engine/query/filtered.c - filtered search.  Before the search, the records
 * that match the filter are found: those the payload index gives, each
 * tested, when it narrows the filter to a small share of the records; else
 * one pass over the snapshot's records evaluates the filter on each
 * payload.  The ids that match are kept for the queries that repeat the
 * filter on the same snapshot.  A small set is then scored record by record
 * (exact); otherwise the scans check each posting and row against the set
 * before it can become a candidate (score.c), and a query probes more
 * clusters until it has min(k, matches) results (search.c).
 */
#include "filtered.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "io.h"
#include "keys.h"
#include "meta.h"
#include "math/math.h"
#include "payload_index.h"
#include "record.h"
#include "search_internal.h"

/* Sets of recent filters, by snapshot: a query that repeats a filter on
 * the same snapshot (no write in between) takes the set the first one
 * found.  Each set counts its users, the cache being one. */
#define FSET_CACHED 4
#define FSET_CACHED_MAX ((size_t)64 << 20) /* bytes of a set kept */

typedef struct vf_fset_cache {
	pthread_mutex_t mu;
	vf_fset *e[FSET_CACHED];
	uint64_t clock;
} vf_fset_cache;

static void fset_free(vf_fset *s)
{
	if (!s)
		return;
	free(s->ids);
	free(s->bits);
	free(s->text);
	free(s);
}

/* With the cache's lock held (or none). */
static void fset_unref(vf_fset *s)
{
	if (s && --s->refs == 0)
		fset_free(s);
}

void vf_fset_put(vecfs *v, vf_fset *s)
{
	vf_fset_cache *c = v->fset_cache;
	if (!s)
		return;
	if (!c) {
		fset_unref(s);
		return;
	}
	pthread_mutex_lock(&c->mu);
	fset_unref(s);
	pthread_mutex_unlock(&c->mu);
}

void vf_fset_cache_free(vecfs *v)
{
	vf_fset_cache *c = v->fset_cache;
	if (!c)
		return;
	for (int i = 0; i < FSET_CACHED; i++)
		fset_unref(c->e[i]);
	pthread_mutex_destroy(&c->mu);
	free(c);
	v->fset_cache = NULL;
}

static vf_fset_cache *cache_of(vecfs *v)
{
	vf_fset_cache *c = atomic_load_explicit(&v->fset_cache, memory_order_acquire);
	if (c)
		return c;
	if (!(c = vf_calloc(1, sizeof *c)))
		return NULL;
	pthread_mutex_init(&c->mu, NULL);
	vf_fset_cache *none = NULL;
	if (atomic_compare_exchange_strong_explicit(&v->fset_cache, &none, c, memory_order_acq_rel,
						    memory_order_acquire))
		return c;
	pthread_mutex_destroy(&c->mu);
	free(c);
	return none;
}

static int ids_push(vf_fset *s, size_t *cap, uint64_t id)
{
	if (VF_GROW(s->ids, s->n, *cap, 1024))
		return -ENOMEM;
	s->ids[s->n++] = id;
	return 0;
}

/* A share of the work on txn: the records with ids in [lo, hi), or, with
 * cand set, the records of ids cand[0..ncand) (ascending; from the
 * payload index, so some may be gone). */
typedef struct pass_job {
	vecfs *v;
	vf_txn *txn;
	const vf_filter *f;
	uint64_t lo, hi;
	const uint64_t *cand;
	size_t ncand;
	vf_fset part;  /* its ids */
	size_t cap;
	int rc;
} pass_job;

static void *pass_run(void *arg)
{
	pass_job *j = arg;
	vf_cursor *cur;
	vf_val k, d;
	vf_key64 at = vf_key_u64(j->cand ? (j->ncand ? j->cand[0] : 0) : j->lo);
	size_t next = 0; /* of cand */
	int rc = vf_cursor_open(j->txn, j->v->store->records, &cur);
	if (rc) {
		j->rc = vf_store_err(rc);
		return NULL;
	}
	/* the payloads as stored, checksums unchecked: a record that comes
	 * into the results is read (and checked) again; one whose sizes do not
	 * add up matches nothing here, and the scans that read it report it */
	k.data = at.b;
	k.len = sizeof at.b;
	rc = j->cand && !j->ncand ? -ENOENT : vf_cursor_get(cur, &k, &d, VF_SEEK);
	while (rc == 0) {
		vf_record r;
		uint64_t id = k.len == 8 ? vf_rd_be64(k.data) : UINT64_MAX;
		if (j->cand) /* the candidates before id are gone */
			while (next < j->ncand && j->cand[next] < id)
				next++;
		if (j->cand ? next < j->ncand && j->cand[next] == id : id < j->hi) {
			if (vf_record_fields(d.data, d.len, &r) == 0 &&
			    vf_filter_match(j->f, r.payload, r.plen) &&
			    (rc = ids_push(&j->part, &j->cap, id)))
				break;
			next++;
		} else if (!j->cand && k.len == 8) {
			break; /* past hi */
		}
		if (!j->cand) {
			rc = vf_cursor_get(cur, &k, &d, VF_NEXT);
			continue;
		}
		if (next >= j->ncand)
			break;
		/* the next candidate: a seek from here (LMDB stays on the leaf
		 * page when the key is on it: ascending ids cost little) */
		at = vf_key_u64(j->cand[next]);
		k.data = at.b;
		k.len = sizeof at.b;
		rc = vf_cursor_get(cur, &k, &d, VF_SEEK);
	}
	vf_cursor_close(cur);
	j->rc = rc == -ENOENT ? 0 : rc;
	return NULL;
}

#define PASS_SPLIT 65536 /* live records from which the pass runs on every CPU */
#define CAND_SPLIT 4096  /* candidates from which their tests run on every CPU */

/* The records that match: those of the payload index's set, each tested,
 * when the index narrows the filter to a share of the records cheaper to
 * read one by one than all in a pass (an eighth); else one pass over
 * every record.  Either split over the CPUs (each on a read transaction
 * of its own on txn's snapshot). */
static int fset_build(vecfs *v, vf_txn *txn, const vf_filter *f, vf_fset *s)
{
	vf_counters cnt;
	vf_txn *t[VF_PARALLEL_MAX] = {txn};
	pass_job jobs[VF_PARALLEL_MAX];
	int n = v->threads < VF_PARALLEL_MAX ? v->threads : VF_PARALLEL_MAX, rc;
	uint64_t *cids = NULL;
	size_t ncand = 0;
	if ((rc = vf_load_counters(txn, v->store, &cnt)))
		return rc;
	size_t budget = cnt.live / 8 > VF_FSET_EXACT ? (size_t)(cnt.live / 8) : VF_FSET_EXACT;
	if ((rc = vf_pidx_candidates(txn, v->store, f, budget, &cids, &ncand)) < 0)
		return rc;
	int indexed = rc == 0;
	s->tested = indexed ? ncand : cnt.live;
	if (s->tested < (indexed ? CAND_SPLIT : PASS_SPLIT) || n < 1)
		n = 1;
	for (int i = 1; i < n; i++)
		if (vf_read_begin(v->store, &t[i]) || vf_txn_id(t[i]) != vf_txn_id(txn)) {
			n = i; /* a write in between: the rest on the transactions there are */
			if (t[i])
				vf_read_end(v->store, t[i]);
			t[i] = NULL;
			break;
		}
	for (int i = 0; i < n; i++) {
		jobs[i] = (pass_job){.v = v, .txn = t[i], .f = f,
				     .lo = i ? cnt.next_id / (uint64_t)n * (uint64_t)i : 0,
				     .hi = i + 1 < n ? cnt.next_id / (uint64_t)n * (uint64_t)(i + 1)
						     : UINT64_MAX};
		if (indexed) { /* (no candidate: cids is NULL, and cand must not be) */
			static const uint64_t none[1];
			jobs[i].cand = cids ? cids + ncand * (size_t)i / (size_t)n : none;
			jobs[i].ncand = ncand * (size_t)(i + 1) / (size_t)n - ncand * (size_t)i / (size_t)n;
		}
	}
	vf_parallel_on(v->pool, pass_run, jobs, sizeof jobs[0], n);
	free(cids);
	rc = 0;
	size_t total = 0;
	for (int i = 0; i < n; i++) {
		rc = rc ? rc : jobs[i].rc;
		total += jobs[i].part.n;
	}
	if (rc == 0 && n == 1) {
		s->ids = jobs[0].part.ids; /* taken as it is */
		s->n = total;
		jobs[0].part.ids = NULL;
		jobs[0].part.n = 0;
	} else if (rc == 0 && total && !(s->ids = vf_malloc(total * sizeof(uint64_t)))) {
		rc = -ENOMEM;
	}
	for (int i = 0; i < n; i++) {
		if (rc == 0 && jobs[i].part.n) {
			memcpy(s->ids + s->n, jobs[i].part.ids, jobs[i].part.n * sizeof(uint64_t));
			s->n += jobs[i].part.n;
		}
		free(jobs[i].part.ids);
		if (i)
			vf_read_end(v->store, t[i]);
	}
	if (rc)
		return rc;
	/* a bitmap by id when it is at most 8 times the ids' own memory */
	uint64_t top = s->n ? s->ids[s->n - 1] + 1 : 0;
	if (s->n && top / 8 <= 64 * (uint64_t)s->n) {
		if (!(s->bits = vf_calloc((size_t)(top + 63) / 64, 8)))
			return -ENOMEM;
		s->nbits = top;
		for (size_t i = 0; i < s->n; i++)
			s->bits[s->ids[i] / 64] |= 1ULL << (s->ids[i] % 64);
		if (s->n > VF_FSET_EXACT) { /* the ids are read only to score them */
			free(s->ids);
			s->ids = NULL;
		}
	}
	return 0;
}

/* Which cached set goes first: none, then those of other snapshots, then
 * by last use. */
static uint64_t evict_rank(const vf_fset *e, uint64_t txnid)
{
	return !e ? 0 : e->txnid != txnid ? e->used : e->used + (1ULL << 62);
}

int vf_fset_find(vecfs *v, vf_txn *txn, const char *text, size_t len, vf_fset **out, char *err,
		 size_t errlen)
{
	vf_filter *f;
	int rc;
	if ((rc = vf_filter_compile(text, len, &f, err, errlen)))
		return rc;
	vf_fset *s = vf_calloc(1, sizeof *s);
	if (!s || !(s->text = vf_malloc(len ? len : 1))) {
		vf_filter_free(f);
		fset_free(s);
		return -ENOMEM;
	}
	memcpy(s->text, text, len);
	s->len = len;
	s->refs = 1;
	rc = fset_build(v, txn, f, s);
	vf_filter_free(f);
	if (rc) {
		fset_free(s);
		return rc;
	}
	*out = s;
	return 0;
}

int vf_fset_get(vecfs *v, vf_txn *txn, const char *text, size_t len, vf_fset **out,
		uint64_t *tested, char *err, size_t errlen)
{
	vf_fset_cache *c = cache_of(v);
	uint64_t txnid = vf_txn_id(txn);
	int rc;
	*out = NULL;
	if (tested)
		*tested = 0;
	if (c) {
		pthread_mutex_lock(&c->mu);
		for (int i = 0; i < FSET_CACHED; i++) {
			vf_fset *e = c->e[i];
			if (e && e->txnid == txnid && e->len == len && !memcmp(e->text, text, len)) {
				e->refs++;
				e->used = ++c->clock;
				*out = e;
				break;
			}
		}
		pthread_mutex_unlock(&c->mu);
		if (*out)
			return 0;
	}
	if ((rc = vf_fset_find(v, txn, text, len, out, err, errlen)))
		return rc;
	vf_fset *s = *out;
	s->txnid = txnid;
	if (tested)
		*tested = s->tested;
	size_t bytes = (s->ids ? s->n * 8 : 0) + (size_t)(s->nbits / 8);
	if (c && bytes <= FSET_CACHED_MAX) { /* in an empty slot, else in place of the least used */
		pthread_mutex_lock(&c->mu);
		int w = 0;
		for (int i = 1; i < FSET_CACHED; i++)
			if (evict_rank(c->e[i], txnid) < evict_rank(c->e[w], txnid))
				w = i;
		fset_unref(c->e[w]);
		c->e[w] = s;
		s->refs++;
		s->used = ++c->clock;
		pthread_mutex_unlock(&c->mu);
	}
	*out = s;
	return 0;
}

/* The filtered top k lie farther out than the top k of all records (about
 * the k/share nearest overall): nprobe grows with sqrt(0.1 / share), from
 * a share of 10% down, up to 8 times (measured: tools/RESULTS.md). */
uint32_t vf_fset_nprobe(const vf_fset *s, uint64_t live, uint32_t nprobe)
{
	if (!s || !live || s->n * 10 >= live)
		return nprobe;
	double f = sqrt(0.1 * (double)live / (double)(s->n ? s->n : 1));
	f = f < 8 ? f : 8;
	double np = ceil(nprobe * f);
	return np < UINT32_MAX ? (uint32_t)np : UINT32_MAX;
}

/* Every record of the set scored exactly, for each query. */
int vf_scan_set(search *s)
{
	const vf_fset *fs = s->fset;
	for (size_t i = 0; i < fs->n; i++) {
		vf_val val;
		vf_record r;
		int rc = vf_records_get(s->txn, s->v->store, fs->ids[i], &val);
		if (rc)
			return vf_store_err(rc);
		if ((rc = vf_record_decode(val.data, val.len, &r)))
			return rc;
		if (r.dim != s->dim)
			return -EIO;
		const float *vec = rec_vec(s, &r, s->nq);
		for (size_t qi = 0; qi < s->nq; qi++) {
			query *q = &s->qs[qi];
			double dd = rec_dist(s, q, &r, vec);
			q->ex.reranked++;
			if (hheap_admits(&q->top, dd))
				hheap_push(&q->top, (hit){dd, fs->ids[i], r.key, r.keylen, r.payload,
							  r.plen});
		}
	}
	return 0;
}
