/*
 * engine/query/filtered.h - a filtered search's set: the records of the
 * search's snapshot whose payloads match its filter, by record id.
 */
#ifndef VF_FILTERED_H
#define VF_FILTERED_H

#include "filter.h"
#include "handle.h"

/* Sets this small are scored record by record, exactly, in every mode. */
#define VF_FSET_EXACT 1024

typedef struct vf_fset {
	uint64_t *ids;   /* ascending; NULL past VF_FSET_EXACT when bits is set */
	size_t n;
	uint64_t *bits;  /* by id below nbits, when that is small enough; else NULL */
	uint64_t nbits;
	uint64_t tested; /* payloads tested to find it: the index's candidates, or all */
	/* in the store's cache: the snapshot, the filter's text; users */
	uint64_t txnid;
	char *text;
	size_t len;
	int refs;
	uint64_t used;
} vf_fset;

/* The live records of txn's snapshot that the filter text[0..len)
 * matches: from the store's cache of recent ones (*tested 0), else
 * compiled and found through the payload index or by one pass over the
 * records (*tested: the payloads tested; tested may be NULL).  0, -EINVAL,
 * -E2BIG (vf_filter_compile()), -ENOMEM or a read error, with a reason.
 * vf_fset_put() when done. */
int vf_fset_get(vecfs *v, vf_txn *txn, const char *text, size_t len, vf_fset **out,
		uint64_t *tested, char *err, size_t errlen);
void vf_fset_put(vecfs *v, vf_fset *s);
/* The same set found anew, never from the cache nor kept in it: for a
 * write transaction, whose snapshot changes as it writes. */
int vf_fset_find(vecfs *v, vf_txn *txn, const char *text, size_t len, vf_fset **out, char *err,
		 size_t errlen);
/* At close. */
void vf_fset_cache_free(vecfs *v);
/* The clusters a query with set s (NULL: none) probes by default when
 * nprobe would do without one: more when few of the live records match. */
uint32_t vf_fset_nprobe(const vf_fset *s, uint64_t live, uint32_t nprobe);

static inline int vf_fset_has(const vf_fset *s, uint64_t id)
{
	if (s->bits)
		return id < s->nbits && (s->bits[id / 64] >> (id % 64) & 1);
	size_t lo = 0, hi = s->n;
	while (lo < hi) {
		size_t m = lo + (hi - lo) / 2;
		if (s->ids[m] < id)
			lo = m + 1;
		else
			hi = m;
	}
	return lo < s->n && s->ids[lo] == id;
}

#endif
