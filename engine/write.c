/*
 * engine/write.c - puts and deletes: one LMDB transaction per batch, with
 * delta postings and tombstones in the active generation so new rows are
 * searchable at once and stale postings are never returned.
 */
#include "internal.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "assign.h"
#include "changes.h"
#include "keys.h"
#include "record.h"

/* ------------------------------------------------------------ validation */

static int key_ok(const char *k, size_t len)
{
	if (len == 0 || len > VECFS_KEY_MAX)
		return 0;
	if ((len == 1 && k[0] == '.') || (len == 2 && k[0] == '.' && k[1] == '.'))
		return 0;
	for (size_t i = 0; i < len; i++)
		if (k[i] == '/' || k[i] == '\0' || k[i] == '\t' || k[i] == '\n')
			return 0;
	/* UTF-8 well-formedness */
	const unsigned char *s = (const unsigned char *)k;
	for (size_t i = 0; i < len;) {
		unsigned c = s[i];
		size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
		if (n == 0 || i + n > len)
			return 0;
		for (size_t j = 1; j < n; j++)
			if ((s[i + j] & 0xC0) != 0x80)
				return 0;
		i += n;
	}
	return 1;
}

static int row_check(const vecfs_config *cfg, const vecfs_row *row, uint32_t dim,
		     char *err, size_t errlen)
{
	const vecfs_config c = *cfg;
	if (dim == 0 || dim > VECFS_DIM_MAX) {
		vf_seterr(err, errlen, "dimension %u is out of range 1..%d", dim, VECFS_DIM_MAX);
		return -EINVAL;
	}
	if (c.dim && dim != c.dim) {
		vf_seterr(err, errlen, "dimension %u, the store has dim %u", dim, c.dim);
		return -EINVAL;
	}
	if (row->key && !key_ok(row->key, row->keylen)) {
		vf_seterr(err, errlen,
			  "bad key: keys are 1-255 bytes of UTF-8 without '/', NUL, tab or newline, and not '.' or '..'");
		return -EINVAL;
	}
	if (row->payload_len > VECFS_PAYLOAD_MAX) {
		vf_seterr(err, errlen, "payload of %zu bytes exceeds %d", row->payload_len,
			  VECFS_PAYLOAD_MAX);
		return -EINVAL;
	}
	double n2 = 0;
	for (uint32_t i = 0; i < dim; i++) {
		if (!isfinite(row->vec[i])) {
			vf_seterr(err, errlen, "value %u is %s", i + 1,
				  isnan(row->vec[i]) ? "NaN" : "infinite");
			return -EINVAL;
		}
		n2 += (double)row->vec[i] * row->vec[i];
	}
	if (c.metric == VECFS_COSINE && n2 == 0) {
		vf_seterr(err, errlen, "zero vector under the cosine metric");
		return -EINVAL;
	}
	return 0;
}

int vecfs_row_check(vecfs *v, const vecfs_row *row, uint32_t dim, char *err,
		    size_t errlen)
{
	vecfs_config c;
	int rc = vecfs_config_get(v, &c);
	return rc ? rc : row_check(&c, row, dim, err, errlen);
}

/* ------------------------------------------------------------ posting writer */

int vf_pw_init(vf_posting_writer *w, vecfs *v, vf_gen *g)
{
	memset(w, 0, sizeof *w);
	w->v = v;
	w->g = g;
	int rc = vf_encoder_init(&w->enc, &g->rot, g->meta.bits, g->meta.metric == VECFS_DOT);
	if (rc)
		return rc;
	w->planes = malloc((size_t)g->meta.bits * g->meta.pdim / 8);
	w->buf = malloc(vf_delta_size(g->meta.dim, g->meta.pdim, g->meta.bits, VECFS_KEY_MAX));
	w->tmp = malloc(sizeof(float) * g->meta.dim);
	if (!w->planes || !w->buf || !w->tmp) {
		vf_pw_free(w);
		return -ENOMEM;
	}
	return 0;
}

void vf_pw_free(vf_posting_writer *w)
{
	vf_encoder_free(&w->enc);
	free(w->planes);
	free(w->buf);
	free(w->tmp);
	w->planes = w->buf = NULL;
	w->tmp = NULL;
}

static int bump_manifest(MDB_txn *txn, vf_store *s, uint64_t gen, uint32_t c,
			 int dd, int dt)
{
	vf_manifest m;
	int rc = vf_load_manifest(txn, s, gen, c, &m);
	if (rc)
		return rc;
	m.deltas += dd;
	m.tombstones += dt;
	return vf_save_manifest(txn, s, gen, c, &m);
}

int vf_pw_apply(vf_posting_writer *w, MDB_txn *txn, uint64_t id, uint64_t seq,
		const float *vec, const char *key, uint32_t keylen, int has_payload,
		uint32_t *cluster)
{
	vf_store *s = w->v->store;
	vf_gen *g = w->g;
	uint32_t old;
	int rc = vf_assign_get(txn, s, g->id, id, &old);
	if (rc)
		return rc;
	if (old != VF_ASSIGN_NONE) {
		/* kill every posting of id in that cluster older than seq */
		vf_postkey tk = vf_post_key(g->id, old, VF_PK_TOMB, id);
		if ((rc = vf_put(txn, s->postings, tk.b, sizeof tk.b, &seq, 8, 0)) ||
		    (rc = bump_manifest(txn, s, g->id, old, 0, 1)))
			return rc;
	}
	uint32_t c = VF_ASSIGN_NONE;
	if (vec) {
		if (vf_to_index_space((vecfs_metric)g->meta.metric, vec, w->tmp, g->meta.dim))
			return -EINVAL;
		c = vf_gen_nearest(g, w->tmp);
		vf_code code;
		vf_encode(&w->enc, w->tmp, g->centroids + (size_t)c * g->meta.dim,
			  g->rc + (size_t)c * g->meta.pdim, w->planes, &code);
		code.id = id;
		code.seq = seq;
		code.vec = vec;
		code.key = key;
		code.keylen = keylen;
		code.has_payload = has_payload;
		vf_delta_write(w->buf, &code, g->meta.dim, g->meta.pdim, g->meta.bits);
		vf_postkey dk = vf_post_key(g->id, c, VF_PK_DELTA, seq);
		if ((rc = vf_put(txn, s->postings, dk.b, sizeof dk.b, w->buf,
				 vf_delta_size(g->meta.dim, g->meta.pdim, g->meta.bits, keylen),
				 0)) ||
		    (rc = bump_manifest(txn, s, g->id, c, 1, 0)))
			return rc;
	}
	if (cluster)
		*cluster = c;
	if (old != c)
		rc = vf_assign_set(txn, s, g->id, id, c);
	return rc;
}

/* ------------------------------------------------------------ sync */

int vf_sync_generation(vecfs *v, MDB_txn *txn, vf_gen *g, vf_genmeta *m,
		       const vf_counters *cnt)
{
	vf_dirty d;
	vf_posting_writer w;
	float *vec = NULL;
	int rc;
	if (m->synced_seq >= cnt->seq)
		return 0;
	vf_dirty_init(&d);
	if ((rc = vf_dirty_load(txn, v->store, m->synced_seq, cnt->seq, &d)))
		goto out;
	if ((rc = vf_pw_init(&w, v, g)))
		goto out;
	vec = malloc(sizeof(float) * m->dim);
	if (!vec) {
		rc = -ENOMEM;
		goto out_w;
	}
	for (uint64_t i = 0; i < d.cap && rc == 0; i++) {
		const vf_dirty_entry *e = &d.slots[i];
		if (!e->id || e->ch.gen == g->id)
			continue; /* posted to g when written: already exact */
		const float *src = NULL;
		vf_record r = {0};
		if (e->ch.op == VF_OP_PUT) {
			vf_key64 k = vf_key_u64(e->ch.id);
			MDB_val rv;
			if ((rc = vf_mdb_err(vf_get(txn, v->store->records, k.b, 8, &rv))))
				break;
			if ((rc = vf_record_decode(rv.mv_data, rv.mv_size, &r)))
				break;
			memcpy(vec, r.vec, sizeof(float) * m->dim);
			src = vec;
		}
		rc = vf_pw_apply(&w, txn, e->ch.id, e->seq, src, r.key, r.keylen, r.plen > 0, NULL);
	}
	if (rc == 0)
		m->synced_seq = cnt->seq;
	free(vec);
out_w:
	vf_pw_free(&w);
out:
	vf_dirty_free(&d);
	return rc;
}

int vf_count_unindexed(vecfs *v, MDB_txn *txn, uint64_t gen, uint64_t *out)
{
	vf_genmeta m;
	vf_counters cnt;
	vf_dirty d;
	int rc;
	*out = 0;
	if ((rc = vf_load_genmeta(txn, v->store, gen, &m)) ||
	    (rc = vf_load_counters(txn, v->store, &cnt)))
		return rc;
	vf_dirty_init(&d);
	rc = vf_dirty_load(txn, v->store, m.synced_seq, cnt.seq, &d);
	for (uint64_t i = 0; rc == 0 && i < d.cap; i++)
		if (d.slots[i].id && d.slots[i].ch.op == VF_OP_PUT && d.slots[i].ch.gen != gen)
			(*out)++;
	vf_dirty_free(&d);
	return rc;
}

/* ------------------------------------------------------------ put */

typedef struct put_job {
	vecfs *v;
	const vecfs_row *rows;
	size_t n;
	uint32_t dim;
	const uint8_t *skip;   /* rows superseded later in the batch */
	size_t *bad_row;
	char *err;
	size_t errlen;
} put_job;

/* Load the active generation (if any) and a posting writer for it. */
static int open_active(vecfs *v, MDB_txn *txn, vf_gen **g, vf_genmeta *m,
		       vf_posting_writer *w)
{
	uint64_t a = vf_load_active(txn, v->store);
	int rc;
	*g = NULL;
	if (!a)
		return 0;
	if ((rc = vf_gen_get(v, txn, a, g)))
		return rc;
	if ((rc = vf_load_genmeta(txn, v->store, a, m)) || (rc = vf_pw_init(w, v, *g))) {
		vf_gen_put(v, *g);
		*g = NULL;
	}
	return rc;
}

static void close_active(vecfs *v, vf_gen *g, vf_posting_writer *w)
{
	if (g) {
		vf_pw_free(w);
		vf_gen_put(v, g);
	}
}

static int put_fn(MDB_txn *txn, void *arg)
{
	put_job *j = arg;
	vf_store *s = j->v->store;
	vf_stored_config sc;
	vf_counters cnt;
	vf_gen *g = NULL;
	vf_genmeta gm;
	vf_posting_writer w;
	uint8_t *rec = NULL;
	size_t reccap = 0;
	int rc;

	if ((rc = vf_load_config(txn, s, &sc)) || (rc = vf_load_counters(txn, s, &cnt)))
		return rc;
	if (sc.dim == 0) {
		sc.dim = j->dim;
		if ((rc = vf_put(txn, s->meta, VF_META_CONFIG, strlen(VF_META_CONFIG), &sc,
				 sizeof sc, 0)))
			return rc;
	} else if (sc.dim != j->dim) {
		vf_seterr(j->err, j->errlen, "row 1: dimension %u, the store has dim %u",
			  j->dim, sc.dim);
		if (j->bad_row)
			*j->bad_row = 0;
		return -EINVAL;
	}
	if ((rc = open_active(j->v, txn, &g, &gm, &w)))
		return rc;
	uint64_t seq_before = cnt.seq;
	for (size_t i = 0; i < j->n; i++) {
		const vecfs_row *r = &j->rows[i];
		char kbuf[24];
		const char *key = r->key;
		size_t klen = r->keylen;
		uint64_t id;
		MDB_val v;
		if (j->skip && j->skip[i])
			continue;
		if (!key) {
			klen = (size_t)snprintf(kbuf, sizeof kbuf, "%llu",
						(unsigned long long)cnt.next_key++);
			key = kbuf;
		}
		rc = vf_get(txn, s->keys, key, klen, &v);
		if (rc == 0 && v.mv_size == 8) {
			memcpy(&id, v.mv_data, 8);
		} else if (rc == MDB_NOTFOUND) {
			id = cnt.next_id++;
			cnt.live++;
			if ((rc = vf_put(txn, s->keys, key, klen, &id, 8, 0)))
				break;
		} else {
			rc = rc ? rc : -EIO;
			break;
		}
		uint64_t seq = ++cnt.seq;
		size_t need = vf_record_size(j->dim, klen, r->payload_len);
		if (need > reccap) {
			uint8_t *nr = realloc(rec, need);
			if (!nr) {
				rc = -ENOMEM;
				break;
			}
			rec = nr;
			reccap = need;
		}
		vf_record_encode(rec, seq, j->dim, r->vec, key, klen, r->payload,
				 r->payload_len);
		vf_key64 rk = vf_key_u64(id);
		if ((rc = vf_put(txn, s->records, rk.b, 8, rec, need, 0)))
			break;
		vf_change ch = {id, 0, 0, VF_OP_PUT};
		if (g) {
			if ((rc = vf_pw_apply(&w, txn, id, seq, r->vec, key, (uint32_t)klen,
					       r->payload_len > 0, &ch.cluster)))
				break;
			ch.gen = g->id;
		}
		if ((rc = vf_change_put(txn, s, seq, &ch)))
			break;
		cnt.ingest_rows++;
	}
	if (rc == 0 && g && gm.synced_seq == seq_before) {
		gm.synced_seq = cnt.seq;
		rc = vf_save_genmeta(txn, s, &gm);
	}
	if (rc == 0)
		rc = vf_save_counters(txn, s, &cnt);
	free(rec);
	close_active(j->v, g, &w);
	return rc;
}

static uint64_t key_hash(const char *k, size_t n)
{
	uint64_t h = 1469598103934665603ULL;
	for (size_t i = 0; i < n; i++)
		h = (h ^ (unsigned char)k[i]) * 1099511628211ULL;
	return h;
}

/* Mark rows whose key appears again later in the batch. */
static int mark_superseded(const vecfs_row *rows, size_t n, uint8_t **skip)
{
	size_t cap = 16;
	while (cap < n * 2)
		cap *= 2;
	size_t *slot = malloc(sizeof(size_t) * cap);
	uint8_t *sk = calloc(n ? n : 1, 1);
	if (!slot || !sk) {
		free(slot);
		free(sk);
		return -ENOMEM;
	}
	memset(slot, 0xFF, sizeof(size_t) * cap);
	int any = 0;
	for (size_t i = n; i-- > 0;) {
		if (!rows[i].key)
			continue;
		size_t h = key_hash(rows[i].key, rows[i].keylen) & (cap - 1);
		for (;; h = (h + 1) & (cap - 1)) {
			if (slot[h] == (size_t)-1) {
				slot[h] = i;
				break;
			}
			const vecfs_row *o = &rows[slot[h]];
			if (o->keylen == rows[i].keylen && !memcmp(o->key, rows[i].key, o->keylen)) {
				sk[i] = 1;
				any = 1;
				break;
			}
		}
	}
	free(slot);
	if (!any) {
		free(sk);
		sk = NULL;
	}
	*skip = sk;
	return 0;
}

int vecfs_put(vecfs *v, const vecfs_row *rows, size_t n, uint32_t dim,
	      size_t *bad_row, char *err, size_t errlen)
{
	char why[200];
	uint8_t *skip = NULL;
	int rc;
	vecfs_config cfg;
	if (n == 0)
		return 0;
	if ((rc = vecfs_config_get(v, &cfg)))
		return rc;
	for (size_t i = 0; i < n; i++)
		if ((rc = row_check(&cfg, &rows[i], dim, why, sizeof why))) {
			if (bad_row)
				*bad_row = i;
			vf_seterr(err, errlen, "row %zu: %s", i + 1, why);
			return rc;
		}
	if ((rc = mark_superseded(rows, n, &skip)))
		return rc;
	put_job j = {v, rows, n, dim, skip, bad_row, err, errlen};
	rc = vf_write(v->store, put_fn, &j);
	free(skip);
	if (rc == 0)
		vf_maybe_auto_build(v);
	return rc;
}

/* ------------------------------------------------------------ delete */

typedef struct del_job {
	vecfs *v;
	const char *key;
	size_t keylen;
} del_job;

static int del_fn(MDB_txn *txn, void *arg)
{
	del_job *j = arg;
	vf_store *s = j->v->store;
	vf_counters cnt;
	vf_gen *g = NULL;
	vf_genmeta gm;
	vf_posting_writer w;
	MDB_val v;
	uint64_t id;
	int rc;
	if (j->keylen == 0 || j->keylen > VECFS_KEY_MAX)
		return -ENOENT;
	if ((rc = vf_load_counters(txn, s, &cnt)))
		return rc;
	if ((rc = vf_get(txn, s->keys, j->key, j->keylen, &v)))
		return rc;
	memcpy(&id, v.mv_data, 8);
	vf_key64 rk = vf_key_u64(id);
	if ((rc = vf_del(txn, s->keys, j->key, j->keylen)) ||
	    (rc = vf_del(txn, s->records, rk.b, 8)))
		return rc;
	if ((rc = open_active(j->v, txn, &g, &gm, &w)))
		return rc;
	uint64_t seq_before = cnt.seq, seq = ++cnt.seq;
	vf_change ch = {id, 0, 0, VF_OP_DEL};
	if (g)
		rc = vf_pw_apply(&w, txn, id, seq, NULL, NULL, 0, 0, NULL);
	if (rc == 0)
		rc = vf_change_put(txn, s, seq, &ch);
	if (rc == 0 && g && gm.synced_seq == seq_before) {
		gm.synced_seq = cnt.seq;
		rc = vf_save_genmeta(txn, s, &gm);
	}
	cnt.live--;
	cnt.deleted++;
	if (rc == 0)
		rc = vf_save_counters(txn, s, &cnt);
	close_active(j->v, g, &w);
	return rc;
}

int vecfs_delete(vecfs *v, const char *key, size_t keylen)
{
	del_job j = {v, key, keylen};
	return vf_write(v->store, del_fn, &j);
}
