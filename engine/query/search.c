/*
 * engine/query/search.c - queries: one read transaction (one snapshot) and one
 * generation per call, split over the CPUs in parts, widened when too few
 * results came back, and the parts' results collected.  The phases:
 *   probe   the nprobe nearest centroids of each query (probe.c);
 *   pass 1  per posting block, 4-bit table look-ups over the sign planes
 *           give an estimate and a lower bound; a vector whose lower bound
 *           cannot beat the current k-th upper bound is dropped (score.c);
 *   pass 2  survivors are scored with all bit planes (tighter bound);
 *   deltas  scored like pass 2; records the generation does not cover are
 *           scored exactly;
 *   re-rank candidates in order of lower bound, exact distance on the stored
 *           vectors, stopping once no remaining bound can enter the top k.
 * Queries of one call that probe the same cluster share its scan (one range
 * read, one checksum check, one tombstone load).
 */
#include "io.h"
#include "query.h"
#include "search_internal.h"
#include "math/math.h"
#include "gen/gen.h"
#include "prefetch.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Clusters probed when nprobe is 0 but the generation has no calibration
 * (built before there was one). */
#define VF_NPROBE_UNCALIBRATED 32

/* rounded to float32: past it, +-inf */
static float to_metric_units(const search *s, double d)
{
	return (float)(s->metric == VECFS_COSINE ? d * 0.5 : d);
}

static int cmp_hit(const void *a, const void *b)
{
	const hit *x = a, *y = b;
	if (x->d != y->d)
		return x->d < y->d ? -1 : 1;
	return x->id < y->id ? -1 : x->id > y->id;
}

/* A query's results in rank order: by insertion up to a few dozen (a
 * qsort() of 48-byte elements sorts pointers to them, then moves them:
 * 4% of a batch of sift-128 queries for lists of ten), else qsort(). */
static void sort_hits(hit *v, size_t n)
{
	if (n > 32) {
		qsort(v, n, sizeof(hit), cmp_hit);
		return;
	}
	for (size_t i = 1; i < n; i++) {
		hit x = v[i];
		size_t j = i;
		for (; j > 0 && cmp_hit(&v[j - 1], &x) > 0; j--)
			v[j] = v[j - 1];
		v[j] = x;
	}
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
	e->pages_read += x->pages_read;
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
		sort_hits(q->top.v, q->top.n);
		for (uint32_t j = 0; j < q->top.n; j++)
			bytes += q->top.v[j].keylen + 1 + q->top.v[j].plen;
		nh += q->top.n;
	}
	vecfs_results *res = vf_calloc(1, sizeof *res);
	if (!res)
		return -ENOMEM;
	res->nq = nq;
	res->count = vf_calloc(nq, sizeof(size_t));
	res->hits = vf_calloc(nq, sizeof(vecfs_hit *));
	vecfs_hit *hits = vf_malloc(sizeof(vecfs_hit) * (nh ? nh : 1) + bytes);
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
	for (keep_chunk *c = q->keep, *n; c; c = n) {
		n = c->next;
		free(c);
	}
}

static double now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e6 + ts.tv_nsec * 1e-3;
}

static void record_latency(vecfs *v, size_t nq, double us, uint64_t pages)
{
	pthread_mutex_lock(&v->stat_mu);
	v->queries += nq;
	v->pages_read += pages;
	uint32_t per = (uint32_t)(us / (double)(nq ? nq : 1));
	for (size_t i = 0; i < nq && i < VF_LAT_RING; i++)
		v->lat[v->nlat++ % VF_LAT_RING] = per;
	pthread_mutex_unlock(&v->stat_mu);
}

void vecfs_search_count(vecfs *v, const vecfs_results *r)
{
	record_latency(v, r->nq, (double)r->explain.micros, r->explain.pages_read);
}

uint64_t vecfs_snapshot(vecfs *v)
{
	return vf_store_version(v->store);
}

static int search_run(search *s, const float *queries, size_t nq, size_t first,
		      const vf_probe_policy *pol, char *err, size_t errlen);
static void search_free(search *s);

/* The config, counters and active generation (and that generation's meta)
 * as the snapshot of txn sees them: read once a snapshot, then copied from
 * the handle's while searches read that snapshot (same transaction id, map
 * not moved: the same committed pages). */
static int snap_meta(vecfs *v, vf_txn *txn, vf_snap_meta *out)
{
	uint64_t txnid = vf_txn_id(txn), epoch = v->store->map_epoch;
	pthread_mutex_lock(&v->gen_mu);
	int same = v->snap_meta.valid && v->snap_meta.txnid == txnid &&
		   v->snap_meta.epoch == epoch;
	if (same)
		*out = v->snap_meta;
	pthread_mutex_unlock(&v->gen_mu);
	if (same)
		return 0;
	int rc;
	memset(out, 0, sizeof *out);
	if ((rc = vf_load_config(txn, v->store, &out->sc)) ||
	    (rc = vf_load_counters(txn, v->store, &out->cnt)))
		return rc;
	out->active = vf_load_active(txn, v->store);
	out->gm_ok = out->active && vf_load_genmeta(txn, v->store, out->active, &out->gm) == 0;
	out->valid = 1;
	out->txnid = txnid;
	out->epoch = epoch;
	pthread_mutex_lock(&v->gen_mu);
	v->snap_meta = *out;
	pthread_mutex_unlock(&v->gen_mu);
	return 0;
}

/* Query i of s again, on the same snapshot, probing nprobe clusters (that
 * search widens further if it must): its results and counts replace the
 * first ones, its work adds to theirs. */
static int widen(search *s, size_t i, const float *qv, size_t first,
		 const vf_probe_policy *pol, uint32_t nprobe, char *err, size_t errlen)
{
	vf_probe_policy wp = *pol;
	wp.nprobe = nprobe < pol->gm.nlist ? nprobe : pol->gm.nlist;
	wp.target = 0;
	wp.rule = (vf_stop_rule){INFINITY, 0, 0, 0};
	search w = {.v = s->v, .txn = s->txn, .active = s->active, .fset = s->fset,
		    .prefetch = s->prefetch};
	int rc = search_run(&w, qv, 1, first, &wp, err, errlen);
	if (rc == 0) {
		query t = s->qs[i];
		s->qs[i] = w.qs[0];
		w.qs[0] = t;
		explain_add(&s->qs[i].ex, &t.ex);
	}
	search_free(&w);
	return rc;
}

/* The policy of a call of dim-dimensional queries with options o (a filter's
 * matches fset, or NULL) on the snapshot of txn: the snapshot's meta, the
 * generation searched (none when o asks for an exact scan or there is
 * none), k, refine, and how many clusters to probe: the query's nprobe
 * wins, then its recall target, then the config's nprobe, which may be 0:
 * chosen to reach recall_target; a selective filter probes more
 * (filtered.c).  0 or -errno (-EINVAL with err set for a bad option).  The
 * caller ends it with probe_policy_end(). */
static int probe_policy_resolve(vecfs *v, vf_txn *txn, const vecfs_query_opts *o,
				const vf_fset *fset, uint32_t dim, vf_probe_policy *pol,
				char *err, size_t errlen)
{
	int rc;
	memset(pol, 0, sizeof *pol);
	pol->rule = (vf_stop_rule){INFINITY, 0, 0, 0};
	if ((rc = snap_meta(v, txn, &pol->sm)))
		return rc;
	const vecfs_config *sc = &pol->sm.sc;
	uint64_t live = pol->sm.cnt.live;
	if (sc->dim == 0 || dim != sc->dim) {
		vf_seterr(err, errlen, sc->dim ? "query has dimension %u, the store has dim %u"
					       : "query has dimension %u, the store has no data yet (dim %u)",
			  dim, sc->dim);
		return -EINVAL;
	}
	pol->metric = (vecfs_metric)sc->metric;
	pol->dim = dim;
	pol->k = o->k ? o->k : sc->k;
	pol->nprobe = o->nprobe                       ? o->nprobe
		      : o->recall > 0 || o->auto_nprobe ? 0
							: vf_fset_nprobe(fset, live, sc->nprobe);
	pol->refine = o->refine ? o->refine : sc->refine;
	if (pol->k > 100000 || pol->refine > 1000) {
		vf_seterr(err, errlen, "k must be at most 100000 and refine at most 1000");
		return -EINVAL;
	}
	if (o->recall < 0 || o->recall > 1 || o->recall != o->recall) {
		vf_seterr(err, errlen, "recall must be a number in (0, 1]");
		return -EINVAL;
	}
	pol->active = o->exact ? 0 : pol->sm.active;
	if (!pol->active)
		return 0;
	if ((rc = vf_gen_get(v, txn, pol->active, &pol->g)))
		return rc;
	if (pol->sm.gm_ok && pol->sm.active == pol->active)
		pol->gm = pol->sm.gm;
	else if ((rc = vf_load_genmeta(txn, v->store, pol->active, &pol->gm)))
		return rc;
	if (pol->nprobe == 0 && pol->g->cal) {
		pol->target = o->recall > 0 ? o->recall : sc->recall_target;
		vf_calib_rule(pol->g->cal, pol->gm.nlist, pol->k, pol->target, &pol->rule);
		pol->nprobe = vf_fset_nprobe(fset, live, pol->rule.cap);
	} else if (pol->nprobe == 0) {
		pol->nprobe = VF_NPROBE_UNCALIBRATED;
	}
	return 0;
}

static void probe_policy_end(vecfs *v, vf_probe_policy *pol)
{
	vf_gen_put(v, pol->g);
	pol->g = NULL;
}

/* One search over queries[0..nq) (the batch's from `first` on) on the open
 * snapshot s->txn, up to the results that collect() takes from s. */
static int search_scan(search *s, const float *queries, size_t nq, size_t first,
		       const vf_probe_policy *pol, char *err, size_t errlen)
{
	vecfs *v = s->v;
	const uint32_t dim = pol->dim;
	const vf_stop_rule rule = pol->rule;
	int rc;

	s->kn = vf_kernels_get();
	s->scan_cluster = vf_scan_cluster;
	s->txnid = vf_txn_id(s->txn);
	s->epoch = v->store->map_epoch;
	vf_hint_view_of(v->store, s->txn, &s->hints);
	s->metric = pol->metric;
	s->dim = dim;
	s->k = pol->k;
	s->nprobe = pol->nprobe;
	s->refine = pol->refine;
	s->target = pol->target;
	s->tau = pol->target > 0 ? pol->rule.tau : 0;
	s->nq = nq;
	if (s->active) {
		s->g = pol->g; /* the call's reference */
		s->gm = pol->gm;
	}
	s->qs = vf_calloc(nq, sizeof(query));
	/* the scan's arrays in one room, each on a line of its own */
	size_t nk = s->k < VF_KTH_SORTED_MAX ? s->k : VF_KTH_SORTED_MAX;
	size_t sz[9] = {sizeof(uint32_t) * VF_BLOCK_MAX, sizeof(float) * VF_BLOCK_MAX,
			sizeof(float) * VF_BLOCK_MAX, sizeof(uint32_t) * VF_BLOCK_MAX,
			sizeof(float) * VF_BLOCK_MAX, sizeof(float) * s->k, sizeof(uint32_t) * nk,
			s->g ? (size_t)s->gm.pdim / 8 : 1, sizeof(float) * dim};
	size_t at[9], total = 0;
	for (int i = 0; i < 9; i++) {
		at[i] = total;
		total += (sz[i] + 63) & ~(size_t)63;
	}
	uint8_t *room = s->scratch = vf_malloc(total);
	if (!s->qs || !room)
		return -ENOMEM;
	s->surv = (uint32_t *)(room + at[0]);
	s->surv_lo = (float *)(room + at[1]);
	s->surv_hi = (float *)(room + at[2]);
	s->aside = (uint32_t *)(room + at[3]);
	s->aside_lo = (float *)(room + at[4]);
	s->kbuf = (float *)(room + at[5]);
	s->kidx = (uint32_t *)(room + at[6]);
	s->planes = room + at[7];
	s->floats = (float *)(room + at[8]);
	for (size_t i = 0; i < nq; i++) {
		query *q = &s->qs[i];
		q->q = vf_malloc(sizeof(float) * dim);
		q->top.k = s->k;
		q->top.v = vf_malloc(sizeof(hit) * s->k);
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
		q->ub.v = vf_malloc(sizeof(float) * s->k);
		/* an nprobe past the clusters there are probes them all */
		size_t np = s->nprobe < s->gm.nlist ? s->nprobe : s->gm.nlist;
		q->probe = vf_malloc(sizeof(uint32_t) * (2 * (size_t)np + 1));
		q->pdist = vf_malloc(sizeof(float) * (2 * (size_t)np + 1));
		if (s->target > 0)
			q->scale = vf_calib_scale(s->metric, s->kn->dot(q->q, q->q, dim),
						  rule.max_norm);
		if (!q->ub.v || !q->probe || !q->pdist ||
		    (rc = vf_qstate_init(&q->qs, s->gm.pdim, s->gm.bits, s->g->rmu)) ||
		    (rc = vf_cstate_init(&q->cs, &q->qs)))
			return rc ? rc : -ENOMEM;
		vf_qstate_set(&q->qs, &s->g->rot, q->q);
	}
	if (s->fset && s->fset->n <= VF_FSET_EXACT)
		return vf_scan_set(s);
	if (!s->g)
		return vf_scan_exact(s);
	vf_dirty_init(&s->dirty);
	if ((rc = vf_dirty_load(s->txn, v->store, s->gm.synced_seq, pol->sm.cnt.seq, &s->dirty)) ||
	    (rc = vf_scan_uncovered(s)) || (rc = vf_scan_ivf(s, 0)) ||
	    (rc = vf_prefetch_reranks(s)))
		return rc;
	for (size_t i = 0; i < nq && rc == 0; i++)
		rc = vf_rerank(s, &s->qs[i]);
	/* with a recall target, the second look (calibrate.h): the clusters
	 * up to the first one far enough are scanned too, their candidates
	 * re-ranked into the results (those left from the first re-rank
	 * could not enter them then, nor can they now) */
	int looks = 0;
	for (size_t i = 0; i < nq && rule.gamma > 0 && rc == 0; i++) {
		query *q = &s->qs[i];
		q->from = q->np;
		if (q->top.n < s->k || (q->np >= q->listed && !q->more))
			continue;
		float lim = rule.gamma * (hheap_top(&q->top) + (s->metric == VECFS_DOT ? q->scale : 0));
		uint32_t r = q->np;
		while (r < q->listed && q->pdist[r] + q->scale <= lim)
			r++;
		/* every listed one is near: more listed, unless the nearest of
		 * those not listed is known not to be */
		int unlisted_near = !q->more || q->next + q->scale <= lim;
		while (rc == 0 && unlisted_near && r == q->listed && r < s->gm.nlist &&
		       (rc = vf_probe_more(s, q, 2 * (q->listed > s->nprobe ? q->listed
								    : s->nprobe))) == 0)
			while (r < q->listed && q->pdist[r] + q->scale <= lim)
				r++;
		q->np = r;
		q->nc = 0;
		looks += r > q->from;
	}
	if (looks && rc == 0 && (rc = vf_scan_ivf(s, 1)) == 0)
		rc = vf_prefetch_reranks(s);
	for (size_t i = 0; i < nq && rc == 0 && looks; i++)
		if (s->qs[i].np > s->qs[i].from)
			rc = vf_rerank(s, &s->qs[i]);

	/* min(k, live records) results: a query whose probed clusters held
	 * fewer live postings probes again, more clusters */
	uint64_t live = s->fset ? s->fset->n : pol->sm.cnt.live; /* (a filter: its matches) */
	uint64_t want = live < s->k ? live : s->k;
	for (size_t i = 0; i < nq && rc == 0; i++)
		if (s->qs[i].top.n < want && (s->nprobe < s->gm.nlist || s->qs[i].np < s->nprobe))
			rc = widen(s, i, queries + i * dim, first + i, pol,
				   s->nprobe > s->gm.nlist / 4 ? s->gm.nlist : s->nprobe * 4, err, errlen);
	return rc;
}

/* What only the scan of s needed, freed once it is done: its arrays and each
 * query's tables, candidates and probe lists (a batch's parts all wait for
 * collect(), which reads their results and kept bytes only: a part's scan
 * room is then given back before the next part takes its own, instead of a
 * thousand queries holding theirs at once). */
static void search_shed(search *s)
{
	free(s->scratch);
	s->scratch = NULL;
	for (size_t i = 0; s->qs && i < s->nq; i++) {
		query *q = &s->qs[i];
		vf_qstate_free(&q->qs);
		vf_cstate_free(&q->cs);
		free(q->cands);
		free(q->probe);
		free(q->pdist);
		free(q->ub.v);
		q->cands = NULL;
		q->probe = NULL;
		q->pdist = NULL;
		q->ub.v = NULL;
	}
}

static int search_run(search *s, const float *queries, size_t nq, size_t first,
		      const vf_probe_policy *pol, char *err, size_t errlen)
{
	int rc = search_scan(s, queries, nq, first, pol, err, errlen);
	search_shed(s);
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
	free(s->scratch);
	free(s->copies);
}

/* A batch of queries is searched in parts, on every CPU.  With an index,
 * a part is at most PART_ANN queries: they share the reads of the blocks
 * they probe while their tables and candidates stay in the CPU's caches
 * (measured on sift-128: 17k QPS in parts of 4-8 on one CPU, 12-14k one
 * query at a time, 9k for a batch of 1000 in one part).  Without (exact
 * scans), a part reads every record: one part a CPU, at least PART_EXACT
 * queries each.  Each CPU takes the next part not yet taken, and runs it
 * on a read transaction of its own, all of them on one snapshot. */
#define PART_ANN 8
#define PART_EXACT 16

typedef struct cpu_job {
	search *parts;        /* the batch's, all of them */
	size_t nparts;        /* how many */
	_Atomic size_t *next; /* the first part no job has taken yet */
	_Atomic int *failed;  /* set by a job that failed: the others stop */
	vf_txn *txn;          /* this CPU's read transaction */
	const float *queries; /* the batch */
	size_t nq, per;       /* queries in all; in a part */
	uint32_t dim;
	const vf_probe_policy *pol;
	int rc;
	uint64_t pages;       /* major faults while it searched */
	char err[256];
} cpu_job;

/* The calling thread's major faults when it last counted them: a search
 * counts from there, so that it costs one getrusage() and not two (a
 * system call of about a microsecond, 5-9% of a query of a small set
 * held in memory), and a search that ends within FAULT_LOOK_NS of its
 * start makes none: a page it waited to read from disk takes longer than
 * that, so such a search read nothing, or its few pages (one that another
 * reader had nearly brought in) are counted with the next search that
 * looks.  Faults the thread takes between two searches are counted in the
 * next one that looks; a thread's first search reads its count first. */
#define FAULT_LOOK_NS 50000
static _Thread_local struct {
	uint64_t faults;
	int known;
} thread_seen;

static uint64_t mono_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void *cpu_run(void *arg)
{
	cpu_job *j = arg;
	if (!thread_seen.known) {
		thread_seen.faults = vf_thread_major_faults();
		thread_seen.known = 1;
	}
	uint64_t t0 = mono_ns();
	/* the parts in batch order, each taken by the first CPU free for it
	 * (fixed shares left one CPU idle while the other, slowed by another
	 * program, still had parts to search) */
	for (;;) {
		size_t p = atomic_fetch_add(j->next, 1);
		if (p >= j->nparts || atomic_load(j->failed))
			break;
		size_t from = p * j->per;
		size_t n = j->nq - from < j->per ? j->nq - from : j->per;
		j->parts[p].txn = j->txn;
		j->rc = search_run(&j->parts[p], j->queries + from * j->dim, n, from, j->pol,
				   j->err, sizeof j->err);
		if (j->rc) {
			atomic_store(j->failed, 1);
			break;
		}
	}
	j->pages = 0;
	if (mono_ns() - t0 >= FAULT_LOOK_NS) {
		uint64_t f = vf_thread_major_faults();
		j->pages = f - thread_seen.faults;
		thread_seen.faults = f;
	}
	if (j->rc == 0 && j->nparts)
		vf_prefetch_note(j->parts[0].v, j->pages);
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

/* The first of v[0..n) that is NaN or infinite, or n.  Its exponent is all
 * ones: adding the exponent's lowest bit carries into bit 31, which no
 * other exponent reaches; ands, adds and ors eight lanes at a time, which
 * the compiler vectorizes, and a second look only when there is one. */
static size_t first_nonfinite(const float *v, size_t n)
{
	typedef uint32_t bits32 __attribute__((may_alias));
	const bits32 *w = (const bits32 *)(const void *)v;
	uint32_t ex8[8] = {0}, ex = 0;
	size_t i = 0;
	for (; i + 8 <= n; i += 8)
		for (int l = 0; l < 8; l++)
			ex8[l] |= (w[i + l] & 0x7f800000u) + 0x00800000u;
	for (; i < n; i++)
		ex |= (w[i] & 0x7f800000u) + 0x00800000u;
	for (int l = 0; l < 8; l++)
		ex |= ex8[l];
	for (i = 0; ex >> 31 && i < n; i++)
		if (!isfinite(v[i]))
			return i;
	return n;
}

int vecfs_search(vecfs *v, const float *queries, size_t nq, uint32_t dim,
		 const vecfs_query_opts *opts, vecfs_results **out, char *err,
		 size_t errlen)
{
	return vf_search_threads(v, queries, nq, dim, opts, 0, out, err, errlen);
}

int vf_search_threads(vecfs *v, const float *queries, size_t nq, uint32_t dim,
		      const vecfs_query_opts *opts, int threads, vecfs_results **out,
		      char *err, size_t errlen)
{
	double t0 = now_us();
	vecfs_query_opts o = opts ? *opts : (vecfs_query_opts){0};
	vf_txn *txn[VF_PARALLEL_MAX] = {0};
	cpu_job jobs[VF_PARALLEL_MAX];
	search *parts = NULL;
	size_t nparts, per;
	int rc, n = threads > 0 && threads < v->threads ? threads : v->threads;

	*out = NULL;
	if (nq == 0) {
		vf_seterr(err, errlen, "no query vector");
		return -EINVAL;
	}
	size_t bad = first_nonfinite(queries, nq * dim);
	if (bad < nq * dim) {
		vf_seterr(err, errlen, "query %zu: value %zu is not finite", bad / dim + 1,
			  bad % dim + 1);
		return -EINVAL;
	}
	if ((rc = vf_read_begin(v->store, &txn[0])))
		return rc;
	vf_fset *fset = NULL; /* a filter's matches in this snapshot */
	uint64_t tested = 0;
	if (o.filter && (rc = vf_fset_get(v, txn[0], o.filter, o.filter_len, &fset, &tested, err,
						  errlen))) {
		vf_read_end(v->store, txn[0]);
		return rc;
	}
	if (n > VF_PARALLEL_MAX)
		n = VF_PARALLEL_MAX;
	vf_probe_policy pol;
	if ((rc = probe_policy_resolve(v, txn[0], &o, fset, dim, &pol, err, errlen))) {
		probe_policy_end(v, &pol);
		vf_fset_put(v, fset);
		vf_read_end(v->store, txn[0]);
		return rc;
	}
	uint64_t active = pol.active;
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
	parts = vf_calloc(nparts, sizeof *parts);
	if (!parts) {
		probe_policy_end(v, &pol);
		vf_fset_put(v, fset);
		vf_read_end(v->store, txn[0]);
		for (int t = 1; t < n; t++)
			vf_read_end(v->store, txn[t]);
		return -ENOMEM;
	}
	_Atomic size_t next = 0;
	_Atomic int failed = 0;
	for (size_t p = 0; p < nparts; p++) {
		parts[p].v = v;
		parts[p].active = active;
		parts[p].fset = fset;
		parts[p].prefetch = vf_prefetch_wanted(v);
	}
	/* (the jobs a search runs: jobs[0..n), each on the snapshot of txn[0]:
	 * open_more()) */
	for (int t = 0; t < n; t++)
		jobs[t] = (cpu_job){parts, nparts, &next, &failed, txn[t], queries, nq, per, dim,
				    &pol, 0, 0, ""};
	vf_parallel_on(v->pool, cpu_run, jobs, sizeof *jobs, n);
	for (int t = 0; t < n && rc == 0; t++)
		if ((rc = jobs[t].rc) && jobs[t].err[0])
			vf_seterr(err, errlen, "%s", jobs[t].err);
	if (rc == 0)
		rc = collect(parts, (int)nparts, out);
	if (rc == 0) {
		double us = now_us() - t0;
		(*out)->explain.micros = (uint64_t)us;
		for (int t = 0; t < n; t++)
			(*out)->explain.pages_read += jobs[t].pages;
		(*out)->explain.k = pol.k;
		(*out)->explain.nprobe = pol.target > 0 ? 0 : pol.nprobe;
		(*out)->explain.recall_target = pol.target;
		(*out)->explain.refine = pol.refine;
		(*out)->explain.filter_passed = fset ? fset->n : 0;
		(*out)->explain.filter_tested = tested;
		(*out)->snapshot = vf_txn_id(txn[0]);
		if (!o.uncounted)
			record_latency(v, nq, us, (*out)->explain.pages_read);
	}
	if (rc == -EIO && err && errlen && !err[0])
		vf_seterr(err, errlen, "a posting block or record failed its checksum or is damaged");
	for (size_t p = 0; p < nparts; p++)
		search_free(&parts[p]);
	free(parts);
	probe_policy_end(v, &pol);
	vf_fset_put(v, fset);
	for (int t = 0; t < n; t++)
		vf_read_end(v->store, txn[t]);
	/* (no read transaction held: the sampler takes its own) */
	if (rc == 0 && !exact && !o.filter && v->on_search)
		v->on_search(v, queries, nq, dim, *out);
	return rc;
}
