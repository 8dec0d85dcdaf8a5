/*
 * engine/gen/calibrate.c - the probing rule's thresholds (calibrate.h),
 * measured when a generation is built.
 *
 * Sample queries are records spread evenly over the snapshot.  Their 100
 * nearest other records are found exactly (every record streamed once per
 * CPU in cache-sized chunks), with each one's cluster.  Ranking the
 * clusters as a query would probe them then tells, for any (tau, cap),
 * how many clusters each sample query probes and which of its true k
 * nearest lie in them.  For a cap, the mean recall is monotone in tau:
 * tau is found by bisection.
 */
#include "calibrate.h"

#include <errno.h>
#include <stdio.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "io.h"
#include "math/math.h"

static const float targets[VF_CAL_NT] = {0.80f,  0.85f, 0.90f,  0.93f,  0.95f, 0.97f,
					 0.98f,  0.99f, 0.995f, 0.998f, 0.999f, 0.9995f};
static const uint32_t kvals[VF_CAL_NK] = {1, 10, 100}; /* at most 255 (sim.hits) */

#define CAL_QUERIES 500     /* sample queries ... */
#define CAL_QUERIES_BIG 300 /* ... and from CAL_BIG records on (the brute
			     * force costs queries x records) */
#define CAL_BIG 250000
#define CAL_M 200       /* nearest kept per sample query: twice the largest k */
#define CAL_CHUNK 1024  /* records per chunk streamed through the cache */
#define CAL_RANKS 8192  /* clusters followed per query at most */
#define CAL_MARGIN 0.5f /* calibrate to t + 0.5 (1 - t) */

typedef struct nb { /* a neighbour of a sample query */
	float d;
	uint64_t id;
} nb;
TOPK_HEAP(nbheap, nb, KEY_DIST)

typedef struct sq {      /* one sample query */
	uint64_t self;   /* its record (not its own neighbour) */
	float *q;        /* index space */
	nbheap h;        /* the M nearest */
} sq;

typedef struct bf_job {   /* brute force: queries [q0, q1) over all records */
	sq *qs;
	uint32_t q0, q1;
	uint64_t n;
	uint32_t dim;
	vecfs_metric metric;
	vf_vec_fn vec;
	const void *varg;
	int (*tick)(void *, int);
	void *targ;
	float max_norm2;
	int rc;
} bf_job;

static void *bf_run(void *arg)
{
	bf_job *j = arg;
	const vf_kernels *kn = vf_kernels_get();
	float *buf = vf_malloc(sizeof(float) * CAL_CHUNK * j->dim);
	float *dots = vf_malloc(sizeof(float) * (CAL_CHUNK + VF_PANEL));
	float *qn2 = vf_malloc(sizeof(float) * (j->q1 - j->q0 + 1));
	if (!buf || !dots || !qn2) {
		j->rc = -ENOMEM;
		goto out;
	}
	for (uint32_t qi = j->q0; qi < j->q1; qi++)
		qn2[qi - j->q0] = kn->dot(j->qs[qi].q, j->qs[qi].q, j->dim);
	/* each chunk of records as panels (kmeans.h): every sample query's
	 * distances to it in one blocked product */
	for (uint64_t c0 = 0; c0 < j->n; c0 += CAL_CHUNK) {
		uint64_t cn = j->n - c0 < CAL_CHUNK ? j->n - c0 : CAL_CHUNK;
		vf_cindex ci;
		for (uint64_t i = 0; i < cn; i++)
			j->vec(j->varg, c0 + i, buf + i * j->dim);
		if (vf_cindex_init(&ci, buf, (uint32_t)cn, j->dim)) {
			j->rc = -ENOMEM;
			break;
		}
		for (uint64_t i = 0; i < cn; i++)
			if (ci.norms[i] > j->max_norm2)
				j->max_norm2 = ci.norms[i];
		for (uint32_t qi = j->q0; qi < j->q1; qi++) {
			sq *s = &j->qs[qi];
			vf_cindex_dots(&ci, s->q, dots);
			for (uint64_t i = 0; i < cn; i++) {
				if (c0 + i == s->self)
					continue;
				float d = j->metric == VECFS_DOT
						  ? -dots[i]
						  : ci.norms[i] - 2 * dots[i] + qn2[qi - j->q0];
				if (d == d)
					nbheap_push(&s->h, (nb){d, c0 + i});
			}
		}
		vf_cindex_free(&ci);
		if (j->tick && (c0 / CAL_CHUNK) % 64 == 0 &&
		    j->tick(j->targ, (int)(c0 * 100 / j->n))) {
			j->rc = -ECANCELED;
			break;
		}
	}
out:
	free(buf);
	free(dots);
	free(qn2);
	return NULL;
}

/* What the simulation needs of one sample query: the rule's ratio at each
 * rank (score gap over scale, ascending with the rank), and for each k the
 * ranks of its true k nearest. */
typedef struct sim {
	float *ratio;     /* [ranks] */
	float *cd;        /* [ranks] score + scale (distances for l2 and cosine) */
	uint32_t *gt;     /* ranks of the clusters of its nearest, nearest first */
	float *dk;        /* their distances (+ scale for dot) */
	uint8_t *hits;    /* [ranks + 1], for the k simulated: how many of its
			   * true k nearest lie in ranks [0, r) */
} sim;

typedef struct ent {
	uint32_t id;
	float d;
} ent;

static int cmp_ent_d(const void *a, const void *b)
{
	const ent *x = a, *y = b;
	return x->d < y->d ? -1 : x->d > y->d;
}

float vf_calib_scale(vecfs_metric m, float qn2, float max_norm)
{
	return m == VECFS_DOT ? sqrtf(qn2) * max_norm : qn2;
}

/* The clusters' order for sample query s (as probe.c ranks them), the
 * rule's ratio by rank and the ranks of its true nearest.  cl, rank_of,
 * dots, ents: scratch. */
static void prepare(const vf_gen *g, vecfs_metric metric, const sq *s, const uint32_t *assign,
		    float max_norm, uint32_t ranks, ent *cl, uint32_t *rank_of, float *dots,
		    ent *ents, uint32_t kept, sim *m)
{
	const vf_kernels *kn = vf_kernels_get();
	uint32_t nl = g->meta.nlist, dim = g->meta.dim;
	vf_cindex_probe_dots(&g->ci, s->q, dots);
	float scale = vf_calib_scale(metric, kn->dot(s->q, s->q, dim), max_norm);
	for (uint32_t c = 0; c < nl; c++)
		cl[c] = (ent){c, metric == VECFS_DOT ? -dots[c] : g->ci.norms[c] - 2 * dots[c]};
	qsort(cl, nl, sizeof *cl, cmp_ent_d);
	for (uint32_t r = 0; r < nl; r++)
		rank_of[cl[r].id] = r;
	for (uint32_t r = 0; r < ranks; r++) {
		float gap = cl[r].d - cl[0].d;
		m->ratio[r] = scale > 0 ? gap / scale : gap > 0 ? INFINITY : 0;
		m->cd[r] = cl[r].d + scale;
	}
	for (uint32_t i = 0; i < s->h.n; i++)
		ents[i] = (ent){(uint32_t)i, s->h.v[i].d};
	qsort(ents, s->h.n, sizeof *ents, cmp_ent_d);
	for (uint32_t i = 0; i < kept; i++) {
		if (i >= s->h.n) { /* fewer neighbours than kept: distances that were
				    * not numbers (past float32) were left out */
			m->gt[i] = UINT32_MAX; /* in no cluster probed */
			m->dk[i] = INFINITY;
			continue;
		}
		m->gt[i] = rank_of[assign[s->h.v[ents[i].id].id]];
		m->dk[i] = ents[i].d + (metric == VECFS_DOT ? scale : 0);
	}
}

/* Clusters a query probes under (tau, cap): rank 0, then each while its
 * ratio is at most tau. */
static uint32_t stop_at(const float *ratio, uint32_t cap, float tau)
{
	uint32_t lo = 1, hi = cap; /* first r in [1, cap) with ratio[r] > tau */
	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;
		if (ratio[mid] > tau)
			hi = mid;
		else
			lo = mid + 1;
	}
	return lo;
}

/* The sample's mean recall@k under (tau, cap) (sims' hits counted for that
 * k: hits_count); its mean clusters probed in *clusters. */
static double mean_recall(const sim *sims, uint32_t nq, uint32_t k, uint32_t cap, float tau,
			  double *clusters)
{
	double sum = 0, probed = 0;
	for (uint32_t q = 0; q < nq; q++) {
		const sim *m = &sims[q];
		uint32_t st = stop_at(m->ratio, cap, tau);
		probed += st;
		sum += (double)m->hits[st] / k;
	}
	if (clusters)
		*clusters = probed / nq;
	return sum / nq;
}

/* Each sample query's hits by rank for k (sim.hits): its true k nearest
 * counted at their clusters' ranks, then summed up to each rank. */
static void hits_count(sim *sims, uint32_t nq, uint32_t k, uint32_t ranks)
{
	for (uint32_t q = 0; q < nq; q++) {
		uint8_t *h = sims[q].hits;
		memset(h, 0, ranks + 1);
		for (uint32_t i = 0; i < k; i++)
			if (sims[q].gt[i] < ranks)
				h[sims[q].gt[i] + 1]++;
		for (uint32_t r = 1; r <= ranks; r++)
			h[r] += h[r - 1];
	}
}

/* The smallest tau at which the sample reaches `want` with at most cap
 * clusters; -1 when even an infinite one does not. */
static float least_tau(const sim *sims, uint32_t nq, uint32_t k, uint32_t cap, double want)
{
	if (mean_recall(sims, nq, k, cap, INFINITY, NULL) < want)
		return -1;
	float lo = 0, hi = 1e-3f;
	while (hi < 1e6f && mean_recall(sims, nq, k, cap, hi, NULL) < want)
		lo = hi, hi *= 2;
	if (mean_recall(sims, nq, k, cap, hi, NULL) < want)
		return INFINITY;
	if (mean_recall(sims, nq, k, cap, 0, NULL) >= want)
		return 0;
	/* mean(lo) < want <= mean(hi) throughout: once mid is lo or hi (the
	 * two are neighbouring floats) nothing changes any more */
	for (int it = 0; it < 40; it++) {
		float mid = (lo + hi) / 2;
		if (mid == lo || mid == hi)
			break;
		if (mean_recall(sims, nq, k, cap, mid, NULL) >= want)
			hi = mid;
		else
			lo = mid;
	}
	return hi;
}

static int cmp_float(const void *a, const void *b)
{
	float x = *(const float *)a, y = *(const float *)b;
	return x < y ? -1 : x > y;
}

/* gamma for (tau, cap): the 10th percentile over the sample of the first
 * left-out cluster's distance over the k-th distance found (calibrate.h). */
static float second_look(const sim *sims, uint32_t nq, uint32_t k, uint32_t kept,
			 uint32_t ranks, uint32_t cap, float tau, float *look)
{
	uint32_t n = 0;
	for (uint32_t q = 0; q < nq; q++) {
		const sim *m = &sims[q];
		uint32_t st = stop_at(m->ratio, cap, tau);
		if (st >= ranks)
			continue;
		/* the k-th distance the query finds: its k-th nearest among the
		 * sample's `kept` nearest that lie in the clusters probed (none
		 * known: it looks again whatever gamma) */
		float kth = 0;
		for (uint32_t i = 0, f = 0; i < kept; i++)
			if (m->gt[i] < st && ++f == k) {
				kth = m->dk[i];
				break;
			}
		look[n++] = kth > 0 ? m->cd[st] / kth : 0;
	}
	if (n == 0)
		return 0;
	qsort(look, n, sizeof *look, cmp_float);
	return look[(uint32_t)(0.10 * n)];
}

int vf_calibrate(const vf_gen *g, vecfs_metric metric, uint64_t n, vf_vec_fn vec,
		 const void *varg, const uint32_t *assign, int threads, uint64_t seed,
		 int (*tick)(void *, int), void *targ, vf_calib *out)
{
	uint32_t dim = g->meta.dim, nl = g->meta.nlist;
	uint32_t nq = n >= CAL_BIG ? CAL_QUERIES_BIG : n < CAL_QUERIES ? (uint32_t)n : CAL_QUERIES;
	uint32_t m = n - 1 < CAL_M ? (uint32_t)(n - 1) : CAL_M;
	uint32_t ranks = nl < CAL_RANKS ? nl : CAL_RANKS;
	int rc = -ENOMEM;
	memset(out, 0, sizeof *out);
	out->version = 1;
	for (uint32_t t = 0; t < VF_CAL_NT; t++)
		out->target[t] = targets[t];
	for (uint32_t ki = 0; ki < VF_CAL_NK; ki++)
		if (kvals[ki] <= m)
			out->k[out->nk++] = kvals[ki];
	if (nq == 0 || out->nk == 0)
		return 0; /* too few records to measure: no rule (queries probe all) */
	uint32_t nk = out->nk;

	sq *qs = vf_calloc(nq, sizeof *qs);
	sim *sims = vf_calloc(nq, sizeof *sims);
	float *qbuf = vf_malloc(sizeof(float) * nq * dim);
	nb *hv = vf_malloc(sizeof(nb) * nq * m);
	float *ratio = vf_malloc(sizeof(float) * (size_t)nq * ranks * 2);
	float *dk = vf_malloc(sizeof(float) * (size_t)nq * m);
	float *look = vf_malloc(sizeof(float) * nq);
	uint32_t *gt = vf_malloc(sizeof(uint32_t) * nq * m);
	uint8_t *hits = vf_malloc((size_t)nq * (ranks + 1));
	ent *cl = vf_malloc(sizeof(ent) * nl);
	uint32_t *rank_of = vf_malloc(sizeof(uint32_t) * nl);
	float *dots = vf_malloc(sizeof(float) * g->ci.npanels * VF_PANEL);
	ent *ents = vf_malloc(sizeof(ent) * m);
	if (!qs || !sims || !qbuf || !hv || !ratio || !dk || !look || !gt || !hits ||
	    !cl || !rank_of || !dots || !ents)
		goto out;
	/* sample queries spread evenly (offset by the seed) */
	for (uint32_t i = 0; i < nq; i++) {
		sq *s = &qs[i];
		s->self = ((uint64_t)i * n / nq + seed % (n / nq)) % n;
		s->q = qbuf + (size_t)i * dim;
		vec(varg, s->self, s->q);
		s->h = (nbheap){hv + (size_t)i * m, 0, m};
	}
	/* exact neighbours */
	bf_job jobs[VF_PARALLEL_MAX];
	int nt = threads < 1 ? 1 : threads > VF_PARALLEL_MAX ? VF_PARALLEL_MAX : threads;
	if ((uint32_t)nt > nq)
		nt = (int)nq;
	for (int t = 0; t < nt; t++)
		jobs[t] = (bf_job){qs, (uint32_t)((uint64_t)nq * t / nt), (uint32_t)((uint64_t)nq * (t + 1) / nt),
				   n, dim, metric, vec, varg, t == 0 ? tick : NULL, targ, 0, 0};
	vf_parallel(bf_run, jobs, sizeof *jobs, nt);
	float max_norm2 = 0;
	for (int t = 0; t < nt; t++) {
		if (jobs[t].rc) {
			rc = jobs[t].rc;
			goto out;
		}
		if (jobs[t].max_norm2 > max_norm2)
			max_norm2 = jobs[t].max_norm2;
	}
	out->max_norm = sqrtf(max_norm2);
	out->queries = nq;
	/* the simulation's inputs */
	for (uint32_t q = 0; q < nq; q++) {
		sims[q].ratio = ratio + (size_t)q * ranks * 2;
		sims[q].cd = sims[q].ratio + ranks;
		sims[q].gt = gt + (size_t)q * m;
		sims[q].dk = dk + (size_t)q * m;
		sims[q].hits = hits + (size_t)q * (ranks + 1);
		prepare(g, metric, &qs[q], assign, out->max_norm, ranks, cl, rank_of, dots, ents,
			m, &sims[q]);
	}
	/* per k and target: the smallest fixed nprobe, then the (tau, cap)
	 * with the fewest clusters on average, fixed nprobes included */
	static const float cap_mul[] = {1, 1.25f, 1.5f, 2, 3, 5, 0};
	for (uint32_t ki = 0; ki < nk; ki++) {
		uint32_t k = out->k[ki];
		hits_count(sims, nq, k, ranks);
		for (uint32_t t = 0; t < VF_CAL_NT; t++) {
			double want = targets[t] + CAL_MARGIN * (1 - targets[t]);
			/* the smallest p in [1, ranks) that reaches it, else ranks
			 * (the mean recall is monotone in p) */
			uint32_t p = 1, hi = ranks;
			while (p < hi) {
				uint32_t mid = p + (hi - p) / 2;
				if (mean_recall(sims, nq, k, mid, INFINITY, NULL) >= want)
					hi = mid;
				else
					p = mid + 1;
			}
			out->nprobe[ki][t] = p;
			float best_tau = INFINITY;
			uint32_t best_cap = p;
			double best = p;
			for (size_t i = 0; i < sizeof cap_mul / sizeof cap_mul[0]; i++) {
				uint64_t cap = cap_mul[i] ? (uint64_t)ceilf(p * cap_mul[i]) : ranks;
				if (cap > ranks)
					cap = ranks;
				float tau = least_tau(sims, nq, k, (uint32_t)cap, want);
				double cl_mean;
				if (tau < 0)
					continue;
				mean_recall(sims, nq, k, (uint32_t)cap, tau, &cl_mean);
				if (cl_mean < best) {
					best = cl_mean;
					best_tau = tau;
					best_cap = (uint32_t)cap;
				}
			}
			out->tau[ki][t] = best_tau;
			out->cap[ki][t] = best_cap;
			out->gamma[ki][t] = second_look(sims, nq, k, m, ranks, best_cap, best_tau, look);
			out->recall[ki][t] = (float)mean_recall(sims, nq, k, best_cap, best_tau, NULL);
			out->clusters[ki][t] = (float)best;
		}
	}
	rc = 0;
out:
	free(qs);
	free(sims);
	free(qbuf);
	free(hv);
	free(ratio);
	free(dk);
	free(look);
	free(gt);
	free(hits);
	free(cl);
	free(rank_of);
	free(dots);
	free(ents);
	return rc;
}

void vf_calib_rule(const vf_calib *c, uint32_t nlist, uint32_t k, float t, vf_stop_rule *r)
{
	r->tau = INFINITY;
	r->cap = nlist;
	r->gamma = 0;
	r->max_norm = c ? c->max_norm : 0;
	if (!c || c->nk == 0 || t > c->target[VF_CAL_NT - 1])
		return;
	uint32_t ki = c->nk - 1;
	for (uint32_t i = 0; i < c->nk; i++)
		if (c->k[i] >= k) {
			ki = i;
			break;
		}
	uint32_t ti = 0;
	while (ti + 1 < VF_CAL_NT && c->target[ti] < t)
		ti++;
	r->tau = c->tau[ki][ti];
	r->gamma = c->gamma[ki][ti];
	r->cap = c->cap[ki][ti] < nlist && c->cap[ki][ti] > 0 ? c->cap[ki][ti] : nlist;
}
