/*
 * engine/query/prefetch.c - the reads of a search planned ahead (prefetch.h).
 * A query reads its clusters' posting blocks, then a few dozen records at
 * random places of the store; when those are not in memory, each page
 * fault waits for one read, one after another.  Asked for together
 * (vf_store_prefetch()), the reads overlap, and the faults that follow
 * find the pages in memory or on their way.  Nothing here changes what a
 * search computes: only when its pages arrive.
 */
#include "prefetch.h"

#include <string.h>
#include <time.h>

#include "io.h"
#include "keys.h"

static uint64_t coarse_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* v->prefetch_until: 0 before the first search; then the time until which
 * searches plan their reads (1: none since the last fault's hold). */
int vf_prefetch_wanted(vecfs *v)
{
	int mode = atomic_load_explicit(&v->prefetch_mode, memory_order_relaxed);
	if (mode)
		return mode > 0;
	uint64_t until = __atomic_load_n(&v->prefetch_until, __ATOMIC_RELAXED);
	return until == 0 || coarse_ns() < until;
}

void vf_prefetch_note(vecfs *v, uint64_t pages)
{
	if (pages) {
		__atomic_store_n(&v->prefetch_calm, 0, __ATOMIC_RELAXED);
		__atomic_store_n(&v->prefetch_until, coarse_ns() + VF_PREFETCH_HOLD_NS,
				 __ATOMIC_RELAXED);
		return;
	}
	uint64_t until = __atomic_load_n(&v->prefetch_until, __ATOMIC_RELAXED);
	if (until == 0)
		__atomic_store_n(&v->prefetch_until, 1, __ATOMIC_RELAXED);
	else if (until > 1 && __atomic_add_fetch(&v->prefetch_calm, 1, __ATOMIC_RELAXED) >=
				      VF_PREFETCH_CALM)
		/* the store is in memory again: a few faults (pages another
		 * program pushed out) do not leave every query paying for
		 * the plans for the rest of the hold */
		__atomic_store_n(&v->prefetch_until, 1, __ATOMIC_RELAXED);
}

void vf_prefetch_entries(const search *s, const entry *ents, size_t n)
{
	if (!s->prefetch)
		return;
	/* a block's header first, all of them together; then, each header
	 * read, the columns a scan reads, not the keys after them: ~9% of a
	 * block of the 1M set, and what made its warm pages overflow a
	 * memory cap of a quarter of the store (3-4x fewer QPS) */
	for (size_t i = 0; i < n; i++)
		if (ents[i].kind == VF_PK_BLOCK)
			vf_store_prefetch(ents[i].data, 1);
		else if (ents[i].kind == VF_PK_DELTA)
			vf_store_prefetch(ents[i].data, ents[i].len);
	for (size_t i = 0; i < n; i++) {
		vf_block b;
		if (ents[i].kind == VF_PK_BLOCK)
			vf_store_prefetch(ents[i].data,
					  vf_entry_block_open(&ents[i], &b)
						  ? ents[i].len /* (the scan reports it) */
						  : vf_block_scan_bytes(&b));
	}
}

/* The m-th smallest of a[0..n) (m < n); a is reordered. */
static float select_nth(float *a, size_t n, size_t m)
{
	size_t lo = 0, hi = n - 1;
	while (lo < hi) {
		float p = a[lo + (hi - lo) / 2];
		size_t i = lo, j = hi;
		while (i <= j) {
			while (a[i] < p)
				i++;
			while (a[j] > p)
				j--;
			if (i <= j) {
				float t = a[i];
				a[i] = a[j];
				a[j] = t;
				i++;
				if (j == 0)
					break;
				j--;
			}
		}
		if (m <= j)
			hi = j;
		else if (m >= i)
			lo = i;
		else
			break;
	}
	return a[m];
}

int vf_prefetch_reranks(search *s)
{
	if (!s->prefetch)
		return 0;
	float *lo = NULL;
	size_t cap = 0;
	for (size_t qi = 0; qi < s->nq; qi++) {
		const query *q = &s->qs[qi];
		if (q->np <= q->from) /* (the second look: none for this one) */
			continue;
		float t = fheap_top(&q->ub); /* (what cand_trim() keeps) */
		size_t want = 2 * (size_t)s->k, n = 0;
		if (q->nc > cap) {
			float *nl = vf_realloc(lo, q->nc * sizeof *lo);
			if (!nl) {
				free(lo);
				return -ENOMEM;
			}
			lo = nl;
			cap = q->nc;
		}
		for (size_t i = 0; i < q->nc; i++)
			if (q->cands[i].lo <= t)
				lo[n++] = q->cands[i].lo;
		if (n > want)
			t = select_nth(lo, n, want - 1);
		size_t sent = 0;
		for (size_t i = 0; i < q->nc && sent < want; i++) {
			if (!(q->cands[i].lo <= t))
				continue;
			uint64_t id;
			size_t len;
			memcpy(&id, q->cands[i].idp, 8);
			const void *p = vf_hint_get(s->v->store, NULL, id, &len, NULL);
			if (p)
				vf_store_prefetch(p, len);
			sent++;
		}
	}
	free(lo);
	return 0;
}
