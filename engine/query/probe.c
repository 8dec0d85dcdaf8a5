/*
 * engine/query/probe.c - probing: each query's nprobe nearest centroids, the
 * probed clusters' postings located (and remembered for the snapshot) and
 * prefetched, then scored cluster by cluster for the queries that probe
 * each one.
 */
#include "io.h"
#include "search_internal.h"
#include "prefetch.h"

#include <errno.h>
#include <math.h>
#include <string.h>

#include "keys.h"
#include "math/math.h"

typedef struct cluster_work {
	uint32_t cluster;
	uint32_t rank;        /* best probe rank among its queries */
	uint32_t first, count;/* range in the query list */
} cluster_work;

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
	entry *ne = vf_realloc(*ents, nc * sizeof *ne);
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
	if (ne)
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
		g->located = vf_calloc(g->meta.nlist, sizeof(located));
	if (g->located) {
		located *l = (located *)g->located + c;
		l->txnid = s->txnid;
		l->epoch = s->epoch;
		l->n = (uint32_t)n;
		if (n)
			memcpy(l->e, e, n * sizeof(entry));
	}
	pthread_mutex_unlock(&g->located_mu);
}

/* Keep what a scan of cluster c's entries e[0..n) (as located_get() gave
 * them) verified, for the searches after it in the same snapshot. */
static void located_mark(search *s, uint32_t c, const entry *e, size_t n)
{
	vf_gen *g = s->g;
	pthread_mutex_lock(&g->located_mu);
	located *l = g->located ? (located *)g->located + c : NULL;
	if (l && l->txnid == s->txnid && l->epoch == s->epoch && l->n == n)
		for (size_t i = 0; i < n; i++)
			if (l->e[i].data == e[i].data && l->e[i].len == e[i].len)
				l->e[i].checked |= e[i].checked;
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
			e->checked = 0;
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
	/* and its centroid, whose distance to each query the scan begins
	 * with (cold in a large index: 5.8% of a query of the 1M set) */
	const char *cent = (const char *)(s->g->centroids + (size_t)c * s->dim);
	for (size_t o = 0; o < sizeof(float) * s->dim; o += 64)
		__builtin_prefetch(cent + o);
	return 0;
}

/* Start fetching the first batches of the blocks of a located cluster (its
 * block headers were prefetched when it was located), and the slots of
 * the verified-column cache that their checks will read. */
static void prefetch_cluster(const search *s, const entry *ents, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		vf_block b;
		if (ents[i].kind != VF_PK_BLOCK || vf_entry_block_open(&ents[i], &b))
			continue;
		if (ents[i].checked != VF_CHECKED_ALL) /* (else not needed) */
			vf_block_prefetch_checks(s->v->vcache, &b);
		for (uint32_t bt = 0; bt < PF_BATCHES && bt < b.nbatch; bt++)
			prefetch_batch(&b, bt);
	}
}

static int cmp_probe(const void *a, const void *b)
{
	const cluster_work *x = a, *y = b;
	if (x->rank != y->rank)
		return x->rank < y->rank ? -1 : 1;
	return x->cluster < y->cluster ? -1 : x->cluster > y->cluster;
}

/* vf_best_sorted() of score[idx[0..m)] (idx NULL: of score[0..m)). */
static inline uint32_t best_sorted_of(const float *score, const uint32_t *idx, uint32_t m,
				      uint32_t np, float *pd, uint32_t *pc)
{
	uint32_t n = 0;
	for (uint32_t j = 0; j < m; j++) {
		uint32_t c = idx ? idx[j] : j;
		float sc = score[c];
		uint32_t i;
		if (n < np)
			i = n++;
		else if (sc < pd[n - 1])
			i = n - 1;
		else
			continue;
		vf_insert_sorted(pd, pc, i, sc, c);
	}
	return n;
}

uint32_t vf_best_sorted(const float *score, uint32_t nl, uint32_t np, float *pd,
			uint32_t *pc)
{
	return best_sorted_of(score, NULL, nl, np, pd, pc);
}

float vf_kth_smallest(const vf_kernels *kn, const float *v, uint32_t n, uint32_t k, float *buf,
		      uint32_t *idx)
{
	if (k == 0 || n < k)
		return INFINITY;
	if (k <= VF_KTH_SORTED_MAX) {
		for (uint32_t j = 0; j < k; j++)
			vf_insert_sorted(buf, idx, j, v[j] == v[j] ? v[j] : INFINITY, j);
		kn->best_rest(v, k, n, k, buf, idx);
		return buf[k - 1];
	}
	fheap h = {buf, 0, k};
	for (uint32_t j = 0; j < n; j++)
		if (v[j] < fheap_top(&h))
			fheap_push(&h, v[j]);
	return fheap_top(&h);
}

uint32_t vf_within_sorted(const float *score, uint32_t nl, float width, uint32_t want,
			  uint32_t *near, float *pd, uint32_t *pc, float *next)
{
	float mn = INFINITY;
	for (uint32_t c = 0; c < nl; c++)
		mn = score[c] < mn ? score[c] : mn;
	float lim = mn + width;
	if (!(lim >= mn) || isinf(lim) || want == 0)
		return 0; /* NaN, no finite limit: the caller ranks them all */
	uint32_t m = 0;
	float nx = INFINITY;
	for (uint32_t c = 0; c < nl; c++) { /* no branch on the data */
		float sc = score[c];
		near[m] = c;
		m += sc <= lim;
		nx = sc > lim && sc < nx ? sc : nx;
	}
	if (m > want) { /* more within than wanted: the one after is one of them */
		best_sorted_of(score, near, m, want + 1, pd, pc);
		*next = pd[want];
		return want;
	}
	for (uint32_t j = 0; j < m; j++) /* few: by insertion, ties in index order */
		vf_insert_sorted(pd, pc, j, score[near[j]], near[j]);
	*next = nx;
	return m;
}

uint32_t vf_best_heap(const float *score, uint32_t nl, uint32_t np, float *pd, uint32_t *pc)
{
	uint32_t n = 0;
	for (uint32_t c = 0; c < nl; c++) {
		float sc = score[c];
		if (n < np) {
			uint32_t i = n++;
			while (i > 0 && pd[(i - 1) / 2] < sc) {
				pd[i] = pd[(i - 1) / 2];
				pc[i] = pc[(i - 1) / 2];
				i = (i - 1) / 2;
			}
			pd[i] = sc;
			pc[i] = c;
		} else if (sc < pd[0]) {
			uint32_t i = 0;
			for (;;) {
				uint32_t l = 2 * i + 1, m = i;
				float mv = sc;
				if (l < n && pd[l] > mv)
					m = l, mv = pd[l];
				if (l + 1 < n && pd[l + 1] > mv)
					m = l + 1;
				if (m == i)
					break;
				pd[i] = pd[m];
				pc[i] = pc[m];
				i = m;
			}
			pd[i] = sc;
			pc[i] = c;
		}
	}
	/* heap-sort ascending (below) */
	for (uint32_t e = n; e > 1; e--) {
		float td = pd[0];
		uint32_t tc = pc[0];
		pd[0] = pd[e - 1];
		pc[0] = pc[e - 1];
		pd[e - 1] = td;
		pc[e - 1] = tc;
		uint32_t i = 0, m2 = e - 1;
		for (;;) {
			uint32_t l = 2 * i + 1, m = i;
			if (l < m2 && pd[l] > pd[m])
				m = l;
			if (l + 1 < m2 && pd[l + 1] > pd[m])
				m = l + 1;
			if (m == i)
				break;
			float fd = pd[i];
			uint32_t fc = pc[i];
			pd[i] = pd[m];
			pc[i] = pc[m];
			pd[m] = fd;
			pc[m] = fc;
			i = m;
		}
	}
	return n;
}

/* Probe scores of panels p0..p1 in place (the padding's too). */
static void scores_of(const search *s, float *dots, size_t p0, size_t p1)
{
	const float *norms = s->g->ci.norms;
	for (size_t j = p0 * VF_PANEL; j < p1 * VF_PANEL; j++)
		dots[j] = s->metric == VECFS_DOT ? -dots[j] : norms[j] - 2 * dots[j];
}

/* The panels whose flag is 0 and that hold a cluster with a lower bound
 * not above t (pmin: each panel's smallest) scored (their flags set); -1
 * when a sum is not finite. */
static int score_panels_below(const search *s, const query *q, float *dots, const float *pmin,
			      float t, int32_t *done)
{
	size_t npan = s->g->ci.npanels;
	for (size_t p = 0; p < npan; p++)
		if (!done[p] && !(pmin[p] > t))
			done[p] = 2; /* wanted */
	for (size_t p = 0; p < npan;) {
		if (done[p] != 2) {
			p++;
			continue;
		}
		size_t e = p;
		while (e < npan && done[e] == 2)
			done[e++] = 1;
		if (vf_cindex_probe_panels(&s->g->ci, q->q, p, e, dots))
			return -1;
		scores_of(s, dots, p, e);
		p = e;
	}
	return 0;
}

/* The probe scores of q into dots (nlist entries and the padding): every
 * cluster's that the ranking below can take (within `width` of the
 * nearest, and the nearest one past them; or the `np` nearest), as
 * vf_cindex_probe_dots() gives them, the others +inf.  When the
 * generation has an 8-bit copy of its centroids (vf_cindex), its bounds
 * say which panels can hold those, and only they are scored in binary16;
 * otherwise, or when a bound or sum is not finite, all of them.  lo, hi,
 * raw: room as dots (or NULL: all).  Returns 1 when some were left at
 * +inf. */
static int probe_scores(const search *s, const query *q, float *dots, float *lo, float *hi,
			int32_t *raw, int within, float width, uint32_t np)
{
	const vf_cindex *ci = &s->g->ci;
	uint32_t nl = s->g->meta.nlist;
	size_t npan = ci->npanels;
	float t = NAN, *pmin = hi + npan * VF_PANEL, *phmin = pmin + npan;
	if (lo && vf_cindex_probe_bounds(ci, q->q, s->metric == VECFS_DOT, raw, lo, hi, pmin,
					 phmin) == 0) {
		if (within) {
			float u = INFINITY;
			for (size_t p = 0; p < npan; p++)
				u = phmin[p] < u ? phmin[p] : u;
			t = u + width; /* the nearest's score + width is no more */
		} else if (np <= VF_KTH_SORTED_MAX && (size_t)np * 8 <= nl) {
			float buf[VF_KTH_SORTED_MAX];
			uint32_t idx[VF_KTH_SORTED_MAX];
			t = vf_kth_smallest(s->kn, hi, nl, np, buf, idx);
		}
	}
	if (isfinite(t)) {
		int32_t *done = raw; /* (read: a flag a panel) */
		memset(done, 0, sizeof(int32_t) * ci->npanels);
		int rc = score_panels_below(s, q, dots, pmin, t, done);
		/* the nearest past `width`, for the second look: none of those
		 * not scored is below the one found */
		float mn = INFINITY, nx = INFINITY;
		for (uint32_t j = 0; within && rc == 0 && j < nl; j++)
			mn = done[j / VF_PANEL] && dots[j] < mn ? dots[j] : mn;
		for (int more = within; rc == 0 && more;) {
			float lim = mn + width;
			nx = INFINITY;
			for (uint32_t j = 0; j < nl; j++)
				nx = done[j / VF_PANEL] && dots[j] > lim && dots[j] < nx ? dots[j] : nx;
			more = 0;
			for (size_t p = 0; p < ci->npanels && !more; p++)
				more = !done[p] && pmin[p] < nx;
			if (more)
				rc = score_panels_below(s, q, dots, pmin, nx, done);
		}
		if (rc == 0) {
			for (size_t p = 0; p < ci->npanels; p++)
				if (!done[p])
					for (size_t j = p * VF_PANEL; j < (p + 1) * VF_PANEL; j++)
						dots[j] = INFINITY;
			return 1;
		}
	}
	vf_cindex_probe_dots(ci, q->q, dots);
	scores_of(s, dots, 0, ci->npanels);
	return 0;
}

/* nprobe nearest centroids of q, nearest first.  With a recall target, the
 * first pass probes those within tau * scale of the nearest (nprobe at
 * most), which are few: they are found by a scan and sorted alone
 * (vf_within_sorted(); near: nlist entries of room), and the score of the
 * one after them is kept for the second look, which lists more only when
 * that one is near enough (vf_probe_more()).  Otherwise, and with `list`,
 * the nearest nprobe (list) are ranked, twice nprobe with a target. */
static int probe(search *s, query *q, float *dots, uint32_t *near, uint32_t list)
{
	const vf_gen *g = s->g;
	uint32_t nl = g->meta.nlist, np = s->nprobe < nl ? s->nprobe : nl;
	int within = s->target > 0 && !list && near;
	uint32_t rank = np; /* how many the ranking below keeps */
	if (s->target > 0) /* as many again, for the second look */
		rank = rank < nl / 2 ? 2 * rank : nl;
	if (list)
		rank = list < nl ? list : nl;
	size_t room = (size_t)g->ci.npanels * VF_PANEL;
	float *blo = dots + room, *bhi = blo + room;
	int32_t *raw = (int32_t *)(bhi + 2 * room); /* (after pmin) */
	int some = probe_scores(s, q, dots, blo, bhi, raw, within, s->tau * q->scale, rank);
	q->more = 0;
	if (within) {
		uint32_t n = vf_within_sorted(dots, nl, s->tau * q->scale, np, near, q->pdist,
					      q->probe, &q->next);
		if (n > 0) {
			q->listed = q->np = n;
			q->more = n < nl;
			return (int)n;
		}
		if (some) /* (no finite limit: ranked below, all scored) */
			probe_scores(s, q, dots, NULL, NULL, NULL, 0, 0, 0);
	}
	np = rank;
	uint32_t n;
	if (np <= VF_BEST_SORTED_MAX) { /* vf_best_sorted(), the rest by the kernel */
		n = best_sorted_of(dots, NULL, np, np, q->pdist, q->probe);
		if (n == np && np < nl)
			s->kn->best_rest(dots, np, nl, np, q->pdist, q->probe);
	} else {
		n = vf_best_heap(dots, nl, np, q->pdist, q->probe);
	}
	/* with a recall target: the nearest, then those within tau * scale
	 * of it (calibrate.h) */
	q->listed = n;
	q->np = n < s->nprobe ? n : s->nprobe;
	if (s->target > 0 && q->np > 1) {
		float lim = q->pdist[0] + s->tau * q->scale;
		uint32_t lo = 1, hi = q->np;
		while (lo < hi) {
			uint32_t mid = lo + (hi - lo) / 2;
			if (q->pdist[mid] > lim)
				hi = mid;
			else
				lo = mid + 1;
		}
		q->np = lo;
	}
	return (int)n;
}

/* Room for probe(): the scores, their bounds (lo, hi, then each panel's
 * smallest lo and hi) and the 8-bit sums, a panel's worth of clusters
 * each. */
static float *probe_room(const search *s)
{
	return vf_malloc(sizeof(float) * 5 * s->g->ci.npanels * VF_PANEL);
}

int vf_probe_more(search *s, query *q, uint32_t list)
{
	uint32_t *np = vf_realloc(q->probe, sizeof(uint32_t) * ((size_t)list + 1));
	if (np)
		q->probe = np;
	float *pd = vf_realloc(q->pdist, sizeof(float) * ((size_t)list + 1));
	if (pd)
		q->pdist = pd;
	float *dots = probe_room(s);
	if (!np || !pd || !dots) {
		free(dots);
		return -ENOMEM;
	}
	uint32_t keep = q->np;
	probe(s, q, dots, NULL, list);
	q->np = keep;
	free(dots);
	return 0;
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

/* Counting sort of a[0..n) by the field key of each (below nkey), stable,
 * into out; cnt: room for nkey + 1 counts. */
#define COUNT_SORT(a, n, out, cnt, nkey, key)                                   \
	do {                                                                    \
		memset((cnt), 0, sizeof(uint32_t) * ((size_t)(nkey) + 1));        \
		for (size_t i_ = 0; i_ < (n); i_++)                             \
			(cnt)[(a)[i_].key + 1]++;                                 \
		for (size_t k_ = 1; k_ <= (size_t)(nkey); k_++)                 \
			(cnt)[k_] += (cnt)[k_ - 1];                               \
		for (size_t i_ = 0; i_ < (n); i_++)                             \
			(out)[(cnt)[(a)[i_].key]++] = (a)[i_];                    \
	} while (0)

/* The (cluster, query) pairs of a batch grouped by cluster, each cluster's
 * by rank, ties in query order (as made: by query): two stable counting
 * passes, by rank, then by cluster, through tmp (room for m pairs) and
 * cnt (room for nkey + 1 counts, nkey past every rank and cluster). */
static void pairs_sort(pair *p, size_t m, pair *tmp, uint32_t *cnt, uint32_t nkey)
{
	COUNT_SORT(p, m, tmp, cnt, nkey, rank);
	COUNT_SORT(tmp, m, p, cnt, nkey, cluster);
}

int vf_scan_ivf(search *s, int again)
{
	float *dots = probe_room(s);
	uint32_t *near = again ? NULL : vf_malloc(sizeof(uint32_t) * s->g->meta.nlist);
	pair *pairs = NULL;
	cluster_work *work = NULL;
	uint32_t *qlist = NULL;
	size_t nw = 0, nents = 0, capents = 0, m = 0;
	entry *ents = NULL;
	vf_cursor *cur = NULL;
	int rc = 0;
	if (!dots) {
		rc = -ENOMEM;
		goto out;
	}
	for (size_t i = 0; i < s->nq && !again; i++)
		probe(s, &s->qs[i], dots, near, 0);
	for (size_t i = 0; i < s->nq; i++)
		m += s->qs[i].np - s->qs[i].from;
	pairs = vf_malloc(sizeof(pair) * (m ? m : 1));
	work = vf_malloc(sizeof(cluster_work) * (m ? m : 1));
	qlist = vf_malloc(sizeof(uint32_t) * (m ? m : 1));
	if (!pairs || !work || !qlist) {
		rc = -ENOMEM;
		goto out;
	}
	if ((rc = vf_cursor_open(s->txn, s->v->store->postings, &cur))) {
		rc = vf_store_err(rc);
		goto out;
	}
	if (s->nq == 1) { /* probe order as it is */
		for (uint32_t r = s->qs[0].from; r < s->qs[0].np; r++) {
			work[nw] = (cluster_work){s->qs[0].probe[r], r, (uint32_t)nw, 1};
			qlist[nw++] = 0;
		}
	} else {
		/* group (cluster, query) pairs by cluster; visit clusters in order
		 * of their best rank so every query meets its nearest clusters
		 * early */
		uint32_t nkey = s->g->meta.nlist;
		m = 0;
		for (size_t i = 0; i < s->nq; i++) {
			nkey = s->qs[i].np > nkey ? s->qs[i].np : nkey;
			for (uint32_t r = s->qs[i].from; r < s->qs[i].np; r++)
				pairs[m++] = (pair){s->qs[i].probe[r], r, (uint32_t)i};
		}
		/* (room for the pairs, then for the clusters' work) */
		pair *tmp = vf_malloc(sizeof(cluster_work) * (m ? m : 1));
		uint32_t *cnt = vf_malloc(sizeof(uint32_t) * ((size_t)nkey + 1));
		if (tmp && cnt)
			pairs_sort(pairs, m, tmp, cnt, nkey);
		else
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
		/* made in cluster order: a stable sort by rank orders them as
		 * cmp_probe() does */
		cluster_work *wtmp = tmp && cnt ? (cluster_work *)(void *)tmp : NULL;
		if (wtmp) {
			COUNT_SORT(work, nw, wtmp, cnt, nkey, rank);
			memcpy(work, wtmp, sizeof *work * nw);
		} else {
			qsort(work, nw, sizeof *work, cmp_probe);
		}
		free(tmp);
		free(cnt);
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
		vf_prefetch_entries(s, ents, nents);
		for (size_t i = 0; i < nwin && rc == 0; i++) {
			if (i + 1 < nwin) /* the next cluster's memory while this one scores */
				prefetch_cluster(s, ents + first[i + 1], count[i + 1]);
			entry *ce = ents + first[i];
			uint8_t was[LOCATED_MAX];
			for (size_t k = 0; k < count[i] && k < LOCATED_MAX; k++)
				was[k] = ce[k].checked;
			rc = s->scan_cluster(s, work[w0 + i].cluster, ce, count[i],
					     qlist + work[w0 + i].first, work[w0 + i].count);
			int more = 0;
			for (size_t k = 0; k < count[i] && k < LOCATED_MAX; k++)
				more |= ce[k].checked != was[k];
			if (rc == 0 && more && count[i] <= LOCATED_MAX)
				located_mark(s, work[w0 + i].cluster, ce, count[i]);
		}
	}
out:
	free(ents);
	if (cur)
		vf_cursor_close(cur);
	free(dots);
	free(near);
	free(pairs);
	free(work);
	free(qlist);
	return rc;
}
