/*
 * engine/postings_writer.c - delta postings and tombstones written into a
 * live generation for changed records.
 */
#include "io.h"
#include "write.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "changes.h"
#include "keys.h"

int vf_pw_init(vf_posting_writer *w, vecfs *v, vf_gen *g)
{
	memset(w, 0, sizeof *w);
	w->v = v;
	w->g = g;
	vf_assign_cache_init(&w->assign, g->id);
	int rc = vf_gen_encoder_init(&w->enc, g);
	if (rc)
		return rc;
	w->planes = vf_malloc((size_t)g->meta.bits * g->meta.pdim / 8);
	w->buf = vf_malloc(vf_delta_size(g->meta.pdim, g->meta.bits, VECFS_KEY_MAX));
	w->tmp = vf_malloc(sizeof(float) * g->meta.dim);
	w->mf = vf_malloc(sizeof(vf_manifest) * g->meta.nlist);
	w->mf_state = vf_calloc(g->meta.nlist, 1);
	if (!w->planes || !w->buf || !w->tmp || !w->mf || !w->mf_state) {
		vf_pw_free(w);
		return -ENOMEM;
	}
	return 0;
}

void vf_pw_free(vf_posting_writer *w)
{
	free(w->pend);
	free(w->pbytes);
	w->pend = NULL;
	w->pbytes = NULL;
	w->npend = w->pendcap = w->pbytes_len = w->pbytes_cap = 0;
	vf_encoder_free(&w->enc);
	vf_assign_cache_free(&w->assign);
	free(w->planes);
	free(w->buf);
	free(w->tmp);
	free(w->mf);
	free(w->mf_state);
	w->planes = w->buf = w->mf_state = NULL;
	w->tmp = NULL;
	w->mf = NULL;
}

/* A posting kept for later: its key, and where its value is in pbytes. */
struct vf_pw_pending {
	vf_postkey k;
	uint32_t len;
	uint64_t off;
	size_t order; /* its place in w->pend: the later of two equal keys wins */
};

static int pend_cmp(const void *a, const void *b)
{
	const struct vf_pw_pending *x = a, *y = b;
	int r = memcmp(x->k.b, y->k.b, sizeof x->k.b);
	return r ? r : (x->order > y->order) - (x->order < y->order);
}

/* Write the kept postings in key order: a stable counting sort by cluster
 * (the keys share their generation), each cluster's run sorted by key only
 * if it is not already (deltas are kept in rising seq), then one cursor. */
static int pend_write(vf_posting_writer *w, vf_txn *txn)
{
	if (w->npend == 0)
		return 0;
	vf_store *s = w->v->store;
	uint32_t nl = w->g->meta.nlist;
	size_t *start = vf_calloc((size_t)nl + 1, sizeof *start);
	struct vf_pw_pending *sorted = vf_malloc(sizeof *sorted * w->npend);
	vf_cursor *cur = NULL;
	int rc = 0;
	if (!start || !sorted) {
		rc = -ENOMEM;
		goto out;
	}
	for (size_t i = 0; i < w->npend; i++)
		start[vf_postkey_cluster(w->pend[i].k.b) + 1]++;
	for (uint32_t c = 0; c < nl; c++)
		start[c + 1] += start[c];
	for (size_t i = 0; i < w->npend; i++)
		sorted[start[vf_postkey_cluster(w->pend[i].k.b)]++] = w->pend[i];
	for (size_t lo = 0, hi; lo < w->npend; lo = hi) {
		uint32_t c = vf_postkey_cluster(sorted[lo].k.b);
		for (hi = lo + 1; hi < w->npend && vf_postkey_cluster(sorted[hi].k.b) == c; hi++)
			;
		for (size_t i = lo + 1; i < hi; i++)
			if (pend_cmp(&sorted[i - 1], &sorted[i]) > 0) {
				qsort(sorted + lo, hi - lo, sizeof *sorted, pend_cmp);
				break;
			}
	}
	if ((rc = vf_cursor_open(txn, s->postings, &cur)))
		goto out;
	for (size_t i = 0; i < w->npend && rc == 0; i++)
		rc = vf_cursor_put(cur, sorted[i].k.b, sizeof sorted[i].k.b,
				   w->pbytes + sorted[i].off, sorted[i].len);
	vf_cursor_close(cur);
out:
	free(start);
	free(sorted);
	w->npend = 0;
	w->pbytes_len = 0;
	return rc;
}

static int keep(vf_posting_writer *w, vf_txn *txn, uint32_t c, uint8_t kind, uint64_t sub,
		const void *data, size_t len)
{
	if (c >= w->g->meta.nlist)
		return -EIO;
	/* past pending_bytes, what is kept is written at once (in key order) */
	if (w->pbytes_len + len > w->v->pending_bytes) {
		int rc = pend_write(w, txn);
		if (rc)
			return rc;
	}
	uint8_t *pend = (uint8_t *)w->pend;
	int rc = vf_bytes_reserve(&pend, &w->pendcap, (w->npend + 1) * sizeof *w->pend);
	w->pend = (struct vf_pw_pending *)(void *)pend;
	if (rc || (rc = vf_bytes_reserve(&w->pbytes, &w->pbytes_cap, w->pbytes_len + len)))
		return rc;
	memcpy(w->pbytes + w->pbytes_len, data, len);
	w->pend[w->npend] = (struct vf_pw_pending){vf_post_key(w->g->id, c, kind, sub),
						   (uint32_t)len, w->pbytes_len, w->npend};
	w->npend++;
	w->pbytes_len += len;
	return 0;
}

int vf_pw_flush(vf_posting_writer *w, vf_txn *txn)
{
	vf_store *s = w->v->store;
	int prc = pend_write(w, txn);
	if (prc)
		return prc;
	for (uint32_t c = 0; c < w->g->meta.nlist; c++)
		if (w->mf_state[c] == 2) {
			int rc = vf_save_manifest(txn, s, w->g->id, c, &w->mf[c]);
			if (rc)
				return rc;
			w->mf_state[c] = 1;
		}
	return vf_assign_cache_flush(&w->assign, txn, s);
}

static int bump_manifest(vf_posting_writer *w, vf_txn *txn, uint32_t c, int dd, int dt)
{
	if (c >= w->g->meta.nlist)
		return -EIO;
	if (!w->mf_state[c]) {
		int rc = vf_load_manifest(txn, w->v->store, w->g->id, c, &w->mf[c]);
		if (rc)
			return rc;
	}
	vf_manifest *m = &w->mf[c];
	m->deltas += dd;
	m->tombstones += dt;
	w->added += (uint64_t)(dd + dt);
	w->mf_state[c] = 2;
	if (m->deltas + m->tombstones > w->max_deltas)
		w->max_deltas = m->deltas + m->tombstones;
	return 0;
}

int vf_pw_apply(vf_posting_writer *w, vf_txn *txn, uint64_t id, uint64_t seq,
		const float *vec, const char *key, uint32_t keylen, int has_payload,
		const vf_precode *pre, uint32_t *cluster)
{
	vf_store *s = w->v->store;
	vf_gen *g = w->g;
	uint32_t old;
	int rc = vf_assign_cache_get(&w->assign, txn, s, id, &old);
	if (rc)
		return rc;
	if (old != VF_ASSIGN_NONE) {
		/* kill every posting of id in that cluster older than seq */
		if ((rc = keep(w, txn, old, VF_PK_TOMB, id, &seq, 8)) ||
		    (rc = bump_manifest(w, txn, old, 0, 1)))
			return rc;
	}
	uint32_t c = VF_ASSIGN_NONE;
	if (vec) {
		vf_code code;
		if (pre) {
			code = pre->code;
			c = pre->cluster;
		} else {
			if (vf_to_index_space((vecfs_metric)g->meta.metric, vec, w->tmp,
					      g->meta.dim))
				return -EINVAL;
			c = vf_gen_nearest(g, w->tmp);
			vf_encode(&w->enc, w->tmp, g->centroids + (size_t)c * g->meta.dim,
				  g->rc + (size_t)c * g->meta.pdim, w->planes, &code);
		}
		code.id = id;
		code.seq = seq;
		code.key = key;
		code.keylen = keylen;
		code.has_payload = has_payload;
		vf_delta_write(w->buf, &code, g->meta.dim, g->meta.pdim, g->meta.bits);
		if ((rc = keep(w, txn, c, VF_PK_DELTA, seq, w->buf,
			       vf_delta_size(g->meta.pdim, g->meta.bits, keylen))) ||
		    (rc = bump_manifest(w, txn, c, 1, 0)))
			return rc;
	}
	if (cluster)
		*cluster = c;
	if (old != c)
		rc = vf_assign_cache_set(&w->assign, txn, s, id, c);
	return rc;
}
