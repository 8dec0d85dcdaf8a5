/*
 * engine/filtered.c - filtered search.  Before the search, one pass over
 * the snapshot's records evaluates the filter on each payload and keeps
 * the ids that match.  A small set is then scored record by record
 * (exact); otherwise the scans check each posting and row against the set
 * before it can become a candidate (score.c), and a query probes more
 * clusters until it has min(k, matches) results (search.c).
 */
#include "filtered.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "io.h"
#include "keys.h"
#include "record.h"
#include "search_internal.h"

void vf_fset_free(vf_fset *s)
{
	if (!s)
		return;
	vf_filter_free(s->filter);
	free(s->ids);
	free(s->bits);
	free(s);
}

static int ids_push(vf_fset *s, size_t *cap, uint64_t id)
{
	if (s->n == *cap) {
		size_t nc = *cap ? *cap * 2 : 1024;
		uint64_t *n = vf_realloc(s->ids, nc * sizeof *n);
		if (!n)
			return -ENOMEM;
		s->ids = n;
		*cap = nc;
	}
	s->ids[s->n++] = id;
	return 0;
}

int vf_fset_build(vecfs *v, vf_txn *txn, const char *text, size_t len, vf_fset **out,
		  char *err, size_t errlen)
{
	vf_fset *s = vf_calloc(1, sizeof *s);
	vf_cursor *cur;
	vf_val k, d;
	size_t cap = 0;
	int rc;
	*out = NULL;
	if (!s)
		return -ENOMEM;
	if ((rc = vf_filter_compile(text, len, &s->filter, err, errlen))) {
		vf_fset_free(s);
		return rc;
	}
	if ((rc = vf_cursor_open(txn, v->store->records, &cur))) {
		vf_fset_free(s);
		return vf_store_err(rc);
	}
	/* a damaged record matches nothing here; the scans that read it
	 * report it */
	for (rc = vf_cursor_get(cur, &k, &d, VF_FIRST); rc == 0;
	     rc = vf_cursor_get(cur, &k, &d, VF_NEXT)) {
		vf_record r;
		if (k.len != 8 || vf_record_decode(d.data, d.len, &r))
			continue;
		if (vf_filter_match(s->filter, r.payload, r.plen) &&
		    (rc = ids_push(s, &cap, vf_rd_be64(k.data))))
			break;
	}
	vf_cursor_close(cur);
	if (rc != -ENOENT) {
		vf_fset_free(s);
		return rc;
	}
	/* a bitmap by id when it is at most 8 times the ids' own memory */
	uint64_t top = s->n ? s->ids[s->n - 1] + 1 : 0;
	if (s->n && top / 8 <= 64 * (uint64_t)s->n) {
		s->bits = vf_calloc((size_t)(top + 63) / 64, 8);
		if (!s->bits) {
			vf_fset_free(s);
			return -ENOMEM;
		}
		s->nbits = top;
		for (size_t i = 0; i < s->n; i++)
			s->bits[s->ids[i] / 64] |= 1ULL << (s->ids[i] % 64);
	}
	*out = s;
	return 0;
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
		for (size_t qi = 0; qi < s->nq; qi++) {
			query *q = &s->qs[qi];
			float dd = exact_dist(s, q, r.vec);
			q->ex.reranked++;
			if (hheap_admits(&q->top, dd))
				hheap_push(&q->top, (hit){dd, fs->ids[i], r.key, r.keylen, r.payload,
							  r.plen});
		}
	}
	return 0;
}
