/*
 * engine/write.c - puts and deletes: one LMDB transaction per batch, with
 * delta postings and tombstones in the active generation so new rows are
 * searchable at once and stale postings are never returned.
 */
#include "internal.h"
#include "parallel.h"

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
	return vecfs_utf8_valid(k, len);
}

int vecfs_utf8_valid(const char *text, size_t len)
{
	const unsigned char *s = (const unsigned char *)text;
	for (size_t i = 0; i < len;) {
		unsigned c = s[i];
		size_t n = c < 0x80 ? 1 : c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3
			 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
		if (n == 0 || i + n > len)
			return 0;
		/* the second byte's range: where the first alone cannot tell */
		unsigned lo = c == 0xE0 ? 0xA0 : c == 0xF0 ? 0x90 : 0x80;
		unsigned hi = c == 0xED ? 0x9F : c == 0xF4 ? 0x8F : 0xBF;
		if (n > 1 && (s[i + 1] < lo || s[i + 1] > hi))
			return 0;
		for (size_t j = 2; j < n; j++)
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
	vf_assign_cache_init(&w->assign, g->id);
	int rc = vf_encoder_init(&w->enc, &g->rot, g->meta.bits, g->meta.metric == VECFS_DOT);
	if (rc)
		return rc;
	w->planes = malloc((size_t)g->meta.bits * g->meta.pdim / 8);
	w->buf = malloc(vf_delta_size(g->meta.pdim, g->meta.bits, VECFS_KEY_MAX));
	w->tmp = malloc(sizeof(float) * g->meta.dim);
	w->mf = malloc(sizeof(vf_manifest) * g->meta.nlist);
	w->mf_state = calloc(g->meta.nlist, 1);
	if (!w->planes || !w->buf || !w->tmp || !w->mf || !w->mf_state) {
		vf_pw_free(w);
		return -ENOMEM;
	}
	return 0;
}

void vf_pw_free(vf_posting_writer *w)
{
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

int vf_pw_flush(vf_posting_writer *w, MDB_txn *txn)
{
	vf_store *s = w->v->store;
	for (uint32_t c = 0; c < w->g->meta.nlist; c++)
		if (w->mf_state[c] == 2) {
			int rc = vf_save_manifest(txn, s, w->g->id, c, &w->mf[c]);
			if (rc)
				return rc;
			w->mf_state[c] = 1;
		}
	return vf_assign_cache_flush(&w->assign, txn, s);
}

static int bump_manifest(vf_posting_writer *w, MDB_txn *txn, uint32_t c, int dd, int dt)
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

int vf_pw_apply(vf_posting_writer *w, MDB_txn *txn, uint64_t id, uint64_t seq,
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
		vf_postkey tk = vf_post_key(g->id, old, VF_PK_TOMB, id);
		if ((rc = vf_put(txn, s->postings, tk.b, sizeof tk.b, &seq, 8, 0)) ||
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
		vf_postkey dk = vf_post_key(g->id, c, VF_PK_DELTA, seq);
		if ((rc = vf_put(txn, s->postings, dk.b, sizeof dk.b, w->buf,
				 vf_delta_size(g->meta.pdim, g->meta.bits, keylen),
				 0)) ||
		    (rc = bump_manifest(w, txn, c, 1, 0)))
			return rc;
	}
	if (cluster)
		*cluster = c;
	if (old != c)
		rc = vf_assign_cache_set(&w->assign, txn, s, id, c);
	return rc;
}

/* Live records whose current version is newer than the generation's packed
 * blocks: they sit in delta postings or are scanned exactly. */
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
	rc = vf_dirty_load(txn, v->store, m.blocks_seq, cnt.seq, &d);
	for (uint64_t i = 0; rc == 0 && i < d.cap; i++)
		if (d.slots[i].id && d.slots[i].ch.op == VF_OP_PUT)
			(*out)++;
	vf_dirty_free(&d);
	return rc;
}

/* ------------------------------------------------------------ put */

typedef struct prepared prepared; /* rows' clusters and codes: see prepare() */
static const vf_precode *prepared_next(prepared *p);

/* Writing rows into one transaction: begin, a row at a time, end. */
typedef struct put_ctx {
	vecfs *v;
	MDB_txn *txn;
	vf_counters cnt;
	vf_gen *g;            /* the active generation, if any */
	vf_genmeta gm;
	vf_posting_writer w;
	uint64_t seq_before;
	uint32_t dim;
	uint8_t *rec;
	size_t reccap;
	int *maint_due;        /* out: compaction is due */
	uint64_t *live;        /* out: live records after the write */
	prepared *pre;         /* clusters and codes of the rows to come, in order */
	uint32_t compact_deltas;
} put_ctx;

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

static int put_begin(put_ctx *c, vecfs *v, MDB_txn *txn, uint32_t dim, char *err,
		     size_t errlen)
{
	vf_stored_config sc;
	int rc;
	memset(c, 0, sizeof *c);
	c->v = v;
	c->txn = txn;
	c->dim = dim;
	if ((rc = vf_load_config(txn, v->store, &sc)) ||
	    (rc = vf_load_counters(txn, v->store, &c->cnt)))
		return rc;
	c->compact_deltas = sc.compact_deltas;
	if (sc.dim == 0) {
		sc.dim = dim;
		if ((rc = vf_put(txn, v->store->meta, VF_META_CONFIG, strlen(VF_META_CONFIG), &sc,
				 sizeof sc, 0)))
			return rc;
	} else if (sc.dim != dim) {
		vf_seterr(err, errlen, "row 1: dimension %u, the store has dim %u", dim, sc.dim);
		return -EINVAL;
	}
	c->seq_before = c->cnt.seq;
	return open_active(v, txn, &c->g, &c->gm, &c->w);
}

/* One row: record, key, change log entry and (with an active generation)
 * its delta posting. */
static int put_row(put_ctx *c, const vecfs_row *r)
{
	vf_store *s = c->v->store;
	char kbuf[24];
	const char *key = r->key;
	size_t klen = r->keylen;
	uint64_t id;
	MDB_val v;
	int rc;
	if (!key) {
		klen = (size_t)snprintf(kbuf, sizeof kbuf, "%llu",
					(unsigned long long)c->cnt.next_key++);
		key = kbuf;
	}
	rc = vf_get(c->txn, s->keys, key, klen, &v);
	if (rc == 0 && v.mv_size == 8) {
		memcpy(&id, v.mv_data, 8);
	} else if (rc == MDB_NOTFOUND) {
		id = c->cnt.next_id++;
		c->cnt.live++;
		if ((rc = vf_put(c->txn, s->keys, key, klen, &id, 8, 0)))
			return rc;
	} else {
		return rc ? rc : -EIO;
	}
	uint64_t seq = ++c->cnt.seq;
	size_t need = vf_record_size(c->dim, klen, r->payload_len);
	if (need > c->reccap) {
		uint8_t *nr = realloc(c->rec, need);
		if (!nr)
			return -ENOMEM;
		c->rec = nr;
		c->reccap = need;
	}
	vf_record_encode(c->rec, seq, c->dim, r->vec, key, klen, r->payload, r->payload_len);
	vf_key64 rk = vf_key_u64(id);
	if ((rc = vf_put(c->txn, s->records, rk.b, 8, c->rec, need, 0)))
		return rc;
	vf_change ch = {id, 0, 0, VF_OP_PUT};
	if (c->g) {
		const vf_precode *pc = prepared_next(c->pre);
		if ((rc = vf_pw_apply(&c->w, c->txn, id, seq, r->vec, key, (uint32_t)klen,
				      r->payload_len > 0, pc, &ch.cluster)))
			return rc;
		ch.gen = c->g->id;
	}
	if ((rc = vf_change_put(c->txn, s, seq, &ch)))
		return rc;
	c->cnt.ingest_rows++;
	return 0;
}

/* Save counters (and the generation's sync point); free the context. */
static int put_end(put_ctx *c, int rc)
{
	vf_store *s = c->v->store;
	if (rc == 0 && c->g)
		rc = vf_pw_flush(&c->w, c->txn);
	if (rc == 0 && c->g) {
		if (c->gm.synced_seq == c->seq_before)
			c->gm.synced_seq = c->cnt.seq;
		c->gm.pending += c->w.added;
		rc = vf_save_genmeta(c->txn, s, &c->gm);
		if (rc == 0 && c->maint_due)
			*c->maint_due = vf_maint_due(&c->w, &c->gm, c->cnt.live, c->compact_deltas);
	}
	if (rc == 0)
		rc = vf_save_counters(c->txn, s, &c->cnt);
	if (rc == 0 && c->live)
		*c->live = c->cnt.live;
	free(c->rec);
	close_active(c->v, c->g, &c->w);
	return rc;
}

typedef struct put_job {
	vecfs *v;
	const vecfs_row *rows;
	size_t n;
	uint32_t dim;
	const uint8_t *skip;   /* rows superseded later in the batch */
	size_t *bad_row;
	char *err;
	size_t errlen;
	int maint_due;
	uint64_t live;
} put_job;

#define NEAR_CHUNK 4096 /* rows prepared together */

/* With an active generation, rows are prepared a chunk at a time before
 * they are written: their nearest centroids found together (the centroids
 * read once for 64 rows), then their codes, on every CPU.  put_row() takes
 * them in order; a row without one (put_row would refuse it, or there was
 * no chunk) is encoded by vf_pw_apply() itself. */
struct prepared {
	size_t n, next;
	vf_precode *pc;      /* .code.planes NULL: none */
	uint8_t *planes;     /* pbytes a row */
	uint32_t *near;
	float *x;            /* the rows in index space, dim floats each */
	uint8_t *bad;
	size_t cap;
};

static const vf_precode *prepared_next(prepared *p)
{
	if (!p || p->next >= p->n)
		return NULL;
	const vf_precode *c = &p->pc[p->next++];
	return c->code.planes ? c : NULL;
}

static void prepared_free(prepared *p)
{
	free(p->pc);
	free(p->planes);
	free(p->near);
	free(p->x);
	free(p->bad);
	memset(p, 0, sizeof *p);
}

typedef struct encode_job {
	const vf_gen *g;
	prepared *p;
	size_t from, to;
	int rc;
} encode_job;

static void *encode_run(void *arg)
{
	encode_job *j = arg;
	const vf_gen *g = j->g;
	prepared *p = j->p;
	uint32_t dim = g->meta.dim, pdim = g->meta.pdim;
	size_t pbytes = (size_t)g->meta.bits * pdim / 8;
	vf_encoder enc;
	j->rc = vf_encoder_init(&enc, &g->rot, g->meta.bits, g->meta.metric == VECFS_DOT);
	if (j->rc)
		return NULL;
	for (size_t i = j->from; i < j->to; i++) {
		uint32_t c = p->near[i];
		if (p->bad[i] || c >= g->meta.nlist)
			continue;
		p->pc[i].cluster = c;
		vf_encode(&enc, p->x + i * dim, g->centroids + (size_t)c * dim,
			  g->rc + (size_t)c * pdim, p->planes + i * pbytes, &p->pc[i].code);
	}
	vf_encoder_free(&enc);
	return NULL;
}

/* Prepare rows[0..n) but those `skip` marks (superseded later in the same
 * write, so put_row never sees them).  Returns 0 or -ENOMEM. */
static int prepare(vecfs *v, const vf_gen *g, const vecfs_row *rows, size_t n,
		   const uint8_t *skip, prepared *p)
{
	uint32_t dim = g->meta.dim;
	size_t pbytes = (size_t)g->meta.bits * g->meta.pdim / 8, m = 0;
	if (p->cap < n) {
		prepared_free(p);
		p->pc = malloc(sizeof *p->pc * n);
		p->planes = malloc(pbytes * n);
		p->near = malloc(sizeof *p->near * n);
		p->x = malloc(sizeof *p->x * dim * n);
		p->bad = malloc(n);
		if (!p->pc || !p->planes || !p->near || !p->x || !p->bad) {
			prepared_free(p);
			return -ENOMEM;
		}
		p->cap = n;
	}
	for (size_t i = 0; i < n; i++) {
		if (skip && skip[i])
			continue;
		p->bad[m] = vf_to_index_space((vecfs_metric)g->meta.metric, rows[i].vec,
					      p->x + m * dim, dim) != 0;
		if (p->bad[m])
			memset(p->x + m * dim, 0, sizeof(float) * dim);
		p->pc[m].code.planes = NULL;
		m++;
	}
	p->n = m;
	p->next = 0;
	vf_nearest(&g->ci, p->x, m, p->near, NULL, v->threads);
	int threads = m < 64 ? 1 : v->threads;
	encode_job jobs[VF_PARALLEL_MAX];
	int rc = 0;
	if (threads > VF_PARALLEL_MAX)
		threads = VF_PARALLEL_MAX;
	for (int t = 0; t < threads; t++)
		jobs[t] = (encode_job){g, p, m * t / threads, m * (t + 1) / threads, 0};
	vf_parallel(encode_run, jobs, sizeof *jobs, threads);
	for (int t = 0; t < threads; t++)
		if (jobs[t].rc)
			rc = jobs[t].rc;
	if (rc)
		p->n = 0; /* vf_pw_apply() encodes them itself */
	return rc == -ENOMEM ? 0 : rc;
}

/* ------------------------------------------------------------ sync */

/* The puts of a chunk of the dirty set, copied out of their records (the
 * writes that follow may move the records' pages). */
typedef struct sync_chunk {
	vecfs_row *rows;
	uint64_t *id, *seq;
	float *vecs;
	size_t *koff;
	char *keys;
	size_t n, klen, kcap;
} sync_chunk;

static void sync_chunk_free(sync_chunk *k)
{
	free(k->rows);
	free(k->id);
	free(k->seq);
	free(k->vecs);
	free(k->koff);
	free(k->keys);
}

/* Copy the record of e into chunk slot k->n.  0 (added or, with `later`,
 * skipped because a later change deleted it) or -errno. */
static int sync_take(sync_chunk *k, MDB_txn *txn, vf_store *s, const vf_dirty_entry *e,
		     uint32_t dim, int later)
{
	vf_key64 key = vf_key_u64(e->ch.id);
	MDB_val rv;
	vf_record r;
	int got = vf_get(txn, s->records, key.b, 8, &rv), rc;
	if (got == MDB_NOTFOUND && later)
		return 0; /* deleted by a change after the chunk's end */
	if ((rc = vf_mdb_err(got)) || (rc = vf_record_decode(rv.mv_data, rv.mv_size, &r)))
		return rc;
	if (vf_bytes_reserve((uint8_t **)&k->keys, &k->kcap, k->klen + r.keylen + 1))
		return -ENOMEM;
	size_t i = k->n++;
	memcpy(k->vecs + i * dim, r.vec, sizeof(float) * dim);
	memcpy(k->keys + k->klen, r.key, r.keylen);
	k->koff[i] = k->klen;
	k->klen += r.keylen;
	k->id[i] = e->ch.id;
	k->seq[i] = e->seq;
	k->rows[i] = (vecfs_row){.key = NULL, .keylen = r.keylen, .vec = k->vecs + i * dim,
				 .payload = NULL, .payload_len = r.plen};
	return 0;
}

int vf_sync_generation(vecfs *v, MDB_txn *txn, vf_gen *g, vf_genmeta *m, uint64_t to,
		       const vf_counters *cnt)
{
	vf_dirty d;
	vf_posting_writer w;
	sync_chunk k = {0};
	prepared pre = {0};
	uint32_t dim = m->dim;
	int rc;
	if (to == 0 || to > cnt->seq)
		to = cnt->seq;
	if (m->synced_seq >= to)
		return 0;
	vf_dirty_init(&d);
	if ((rc = vf_dirty_load(txn, v->store, m->synced_seq, to, &d)))
		goto out;
	if ((rc = vf_pw_init(&w, v, g)))
		goto out;
	k.rows = malloc(sizeof *k.rows * NEAR_CHUNK);
	k.id = malloc(sizeof *k.id * NEAR_CHUNK);
	k.seq = malloc(sizeof *k.seq * NEAR_CHUNK);
	k.vecs = malloc(sizeof(float) * dim * NEAR_CHUNK);
	k.koff = malloc(sizeof *k.koff * NEAR_CHUNK);
	if (!k.rows || !k.id || !k.seq || !k.vecs || !k.koff) {
		rc = -ENOMEM;
		goto out_w;
	}
	/* deletes as they come; puts a chunk at a time, prepared together on
	 * every CPU (nearest centroid, code) like the rows of a write */
	for (uint64_t i = 0; i <= d.cap && rc == 0; i++) {
		const vf_dirty_entry *e = i < d.cap ? &d.slots[i] : NULL;
		if (e && (!e->id || e->ch.gen == g->id))
			continue; /* posted to g when written: already exact */
		if (e && e->ch.op != VF_OP_PUT) {
			rc = vf_pw_apply(&w, txn, e->ch.id, e->seq, NULL, NULL, 0, 0, NULL, NULL);
			continue;
		}
		if (e && (rc = sync_take(&k, txn, v->store, e, dim, to < cnt->seq)))
			break;
		if (k.n < NEAR_CHUNK && e)
			continue;
		/* the chunk is full, or the dirty set ends */
		if (k.n > 1 && (rc = prepare(v, g, k.rows, k.n, NULL, &pre)))
			break;
		for (size_t j = 0; j < k.n && rc == 0; j++)
			rc = vf_pw_apply(&w, txn, k.id[j], k.seq[j], k.rows[j].vec, k.keys + k.koff[j],
					 (uint32_t)k.rows[j].keylen, k.rows[j].payload_len > 0,
					 k.n > 1 ? prepared_next(&pre) : NULL, NULL);
		k.n = k.klen = 0;
	}
	if (rc == 0)
		rc = vf_pw_flush(&w, txn);
	if (rc == 0) {
		m->synced_seq = to;
		m->pending += w.added;
	}
out_w:
	vf_pw_free(&w);
out:
	sync_chunk_free(&k);
	prepared_free(&pre);
	vf_dirty_free(&d);
	return rc;
}

static int put_fn(MDB_txn *txn, void *arg)
{
	put_job *j = arg;
	put_ctx c;
	prepared pre = {0};
	int rc = put_begin(&c, j->v, txn, j->dim, j->err, j->errlen);
	c.maint_due = &j->maint_due;
	c.live = &j->live;
	if (rc) {
		if (rc == -EINVAL && j->bad_row)
			*j->bad_row = 0;
		return put_end(&c, rc);
	}
	int together = c.g && j->n > 1; /* one row alone is encoded as it is put */
	for (size_t from = 0; from < j->n && rc == 0; from += NEAR_CHUNK) {
		size_t n = j->n - from < NEAR_CHUNK ? j->n - from : NEAR_CHUNK;
		const uint8_t *skip = j->skip ? j->skip + from : NULL;
		if (together && (rc = prepare(c.v, c.g, j->rows + from, n, skip, &pre)))
			break;
		c.pre = together ? &pre : NULL;
		for (size_t i = from; i < from + n && rc == 0; i++)
			if (!(j->skip && j->skip[i]))
				rc = put_row(&c, &j->rows[i]);
	}
	c.pre = NULL;
	prepared_free(&pre);
	return put_end(&c, rc);
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
	put_job j = {v, rows, n, dim, skip, bad_row, err, errlen, 0, 0};
	rc = vf_write(v->store, put_fn, &j);
	free(skip);
	if (rc == 0) {
		vf_hint_reserve(v->store, j.live);
		vf_maybe_auto_build(v);
		vf_maint_kick(v, j.maint_due);
	}
	return rc;
}

/* ------------------------------------------------------------ batches */

#define BATCH_SPOOL_BYTES (32u << 20) /* rows kept in memory before spooling */

struct vecfs_batch {
	vecfs *v;
	uint64_t id;
	uint32_t dim;
	vecfs_config cfg;
	uint64_t rows;       /* added so far */
	uint64_t spooled;    /* of which in the staging area */
	/* rows in memory, encoded like staged rows */
	uint8_t *buf;
	size_t len, cap;
	size_t nbuf;
};

/* A staged row: a record value whose seq says whether the key was given
 * (1) or is to be assigned at commit (0). */
static int batch_append(vecfs_batch *b, const vecfs_row *r)
{
	size_t klen = r->key ? r->keylen : 0;
	size_t need = vf_record_size(b->dim, klen, r->payload_len);
	if (vf_bytes_reserve(&b->buf, &b->cap, b->len + need + 4))
		return -ENOMEM;
	uint32_t n32 = (uint32_t)need;
	memcpy(b->buf + b->len, &n32, 4);
	vf_record_encode(b->buf + b->len + 4, r->key ? 1 : 0, b->dim, r->vec, r->key, klen,
			 r->payload, r->payload_len);
	b->len += need + 4;
	b->nbuf++;
	return 0;
}

static int spool_fn(MDB_txn *txn, void *arg)
{
	vecfs_batch *b = arg;
	uint64_t row = b->spooled;
	for (size_t off = 0; off < b->len; row++) {
		uint32_t n32;
		uint8_t k[16];
		memcpy(&n32, b->buf + off, 4);
		vf_be64(k, b->id);
		vf_be64(k + 8, row);
		int rc = vf_put(txn, b->v->store->staging, k, 16, b->buf + off + 4, n32, MDB_APPEND);
		if (rc)
			return rc;
		off += 4 + n32;
	}
	return 0;
}

static int batch_spool(vecfs_batch *b)
{
	int rc = vf_write(b->v->store, spool_fn, b);
	if (rc == 0) {
		b->spooled += b->nbuf;
		b->len = 0;
		b->nbuf = 0;
	}
	return rc;
}

int vecfs_batch_begin(vecfs *v, uint32_t dim, vecfs_batch **out)
{
	vecfs_batch *b = calloc(1, sizeof *b);
	int rc;
	if (!b)
		return -ENOMEM;
	if (dim == 0 || dim > VECFS_DIM_MAX) {
		free(b);
		return -EINVAL;
	}
	if ((rc = vecfs_config_get(v, &b->cfg))) {
		free(b);
		return rc;
	}
	b->v = v;
	b->dim = dim;
	pthread_mutex_lock(&v->stat_mu);
	b->id = ++v->next_batch;
	pthread_mutex_unlock(&v->stat_mu);
	*out = b;
	return 0;
}

uint64_t vecfs_batch_rows(const vecfs_batch *b)
{
	return b->rows;
}

int vecfs_batch_add(vecfs_batch *b, const vecfs_row *rows, size_t n, size_t *bad_row,
		    char *err, size_t errlen)
{
	char why[200];
	int rc;
	for (size_t i = 0; i < n; i++) {
		if ((rc = row_check(&b->cfg, &rows[i], b->dim, why, sizeof why))) {
			if (bad_row)
				*bad_row = i;
			vf_seterr(err, errlen, "row %llu: %s", (unsigned long long)(b->rows + 1), why);
			return rc;
		}
		if ((rc = batch_append(b, &rows[i])))
			return rc;
		b->rows++;
		if (b->len >= BATCH_SPOOL_BYTES && (rc = batch_spool(b)))
			return rc;
	}
	return 0;
}

static int drop_staged_fn(MDB_txn *txn, void *arg)
{
	vecfs_batch *b = arg;
	MDB_cursor *cur;
	uint8_t k0[16];
	vf_be64(k0, b->id);
	vf_be64(k0 + 8, 0);
	MDB_val k = {16, k0}, d;
	int rc = mdb_cursor_open(txn, b->v->store->staging, &cur);
	if (rc)
		return rc;
	for (rc = mdb_cursor_get(cur, &k, &d, MDB_SET_RANGE);
	     rc == 0 && !memcmp(k.mv_data, k0, 8);
	     rc = mdb_cursor_get(cur, &k, &d, MDB_GET_CURRENT))
		if ((rc = mdb_cursor_del(cur, 0)))
			break;
	mdb_cursor_close(cur);
	return rc == MDB_NOTFOUND || rc == EINVAL ? 0 : rc;
}

typedef struct commit_job {
	vecfs_batch *b;
	char *err;
	size_t errlen;
	int maint_due;
	uint64_t live;
} commit_job;

/* Staged rows are committed a chunk at a time: a chunk is prepared
 * (prepare(): nearest centroids and codes on every CPU), then its rows are
 * put in order.  A chunk holds at most NEAR_CHUNK rows and about
 * COMMIT_CHUNK_BYTES of records. */
#define COMMIT_CHUNK_BYTES (8u << 20)

/* Copies of staged values (u32 length, record), as b->buf holds them: the
 * values a cursor returns do not outlive the writes that follow. */
typedef struct staged_chunk {
	uint8_t *buf;
	size_t len, cap, n;
} staged_chunk;

static int chunk_add(staged_chunk *k, const void *data, size_t len)
{
	if (len > UINT32_MAX)
		return -EIO;
	if (vf_bytes_reserve(&k->buf, &k->cap, k->len + len + 4))
		return -ENOMEM;
	uint32_t n32 = (uint32_t)len;
	memcpy(k->buf + k->len, &n32, 4);
	memcpy(k->buf + k->len + 4, data, len);
	k->len += len + 4;
	k->n++;
	return 0;
}

/* Does a chunk of n records in `bytes` bytes take no more? */
static int chunk_full(size_t n, size_t bytes)
{
	return n >= NEAR_CHUNK || bytes >= COMMIT_CHUNK_BYTES;
}

/* Put the n staged records of buf[0..len) (u32 length, record) in order. */
static int put_records(put_ctx *c, const uint8_t *buf, size_t len, size_t n)
{
	vecfs_row *rows = malloc(sizeof *rows * (n ? n : 1));
	/* staged vectors may be unaligned: rows take aligned copies */
	float *vecs = malloc(sizeof(float) * c->dim * (n ? n : 1));
	size_t i = 0;
	int rc = rows && vecs ? 0 : -ENOMEM;
	for (size_t off = 0; rc == 0 && off < len && i < n; i++) {
		uint32_t n32;
		vf_record r;
		memcpy(&n32, buf + off, 4);
		if (n32 > len - off - 4 || vf_record_decode(buf + off + 4, n32, &r) ||
		    r.dim != c->dim) {
			rc = -EIO;
			break;
		}
		memcpy(vecs + i * c->dim, r.vec, sizeof(float) * c->dim);
		rows[i] = (vecfs_row){r.seq ? r.key : NULL, r.keylen, vecs + i * c->dim,
				      r.payload, r.plen};
		off += 4 + n32;
	}
	if (rc == 0 && i != n)
		rc = -EIO;
	prepared pre = {0};
	if (rc == 0 && c->g && n > 1 && (rc = prepare(c->v, c->g, rows, n, NULL, &pre)) == 0)
		c->pre = &pre;
	for (i = 0; rc == 0 && i < n; i++)
		rc = put_row(c, &rows[i]);
	c->pre = NULL;
	prepared_free(&pre);
	free(vecs);
	free(rows);
	return rc;
}

static int put_chunk(put_ctx *c, staged_chunk *k)
{
	int rc = put_records(c, k->buf, k->len, k->n);
	k->len = k->n = 0;
	return rc;
}

/* All rows, staged ones first (in order), then the ones in memory, in one
 * transaction; the staging area is emptied in the same transaction. */
static int commit_fn(MDB_txn *txn, void *arg)
{
	commit_job *j = arg;
	vecfs_batch *b = j->b;
	put_ctx c;
	staged_chunk k = {0};
	int rc = put_begin(&c, b->v, txn, b->dim, j->err, j->errlen);
	c.maint_due = &j->maint_due;
	c.live = &j->live;
	if (rc == 0 && b->spooled) {
		MDB_cursor *cur;
		uint8_t k0[16];
		vf_be64(k0, b->id);
		vf_be64(k0 + 8, 0);
		MDB_val key = {16, k0}, d;
		if ((rc = mdb_cursor_open(txn, b->v->store->staging, &cur)) == 0) {
			for (rc = mdb_cursor_get(cur, &key, &d, MDB_SET_RANGE);
			     rc == 0 && !memcmp(key.mv_data, k0, 8);
			     rc = mdb_cursor_get(cur, &key, &d, MDB_NEXT))
				if ((rc = chunk_add(&k, d.mv_data, d.mv_size)) ||
				    (chunk_full(k.n, k.len) && (rc = put_chunk(&c, &k))))
					break;
			mdb_cursor_close(cur);
			if (rc == MDB_NOTFOUND)
				rc = 0;
		}
		if (rc == 0 && k.n)
			rc = put_chunk(&c, &k);
		if (rc == 0)
			rc = drop_staged_fn(txn, b);
	}
	free(k.buf);
	/* the rows in memory, a chunk at a time */
	for (size_t off = 0; rc == 0 && off < b->len;) {
		size_t end = off, n = 0;
		while (end < b->len && !chunk_full(n, end - off)) {
			uint32_t n32;
			memcpy(&n32, b->buf + end, 4);
			end += 4 + n32;
			n++;
		}
		rc = put_records(&c, b->buf + off, end - off, n);
		off = end;
	}
	return put_end(&c, rc);
}

int vecfs_batch_commit(vecfs_batch *b, char *err, size_t errlen)
{
	commit_job j = {b, err, errlen, 0, 0};
	int rc = b->rows ? vf_write(b->v->store, commit_fn, &j) : 0;
	vecfs *v = b->v;
	if (rc && b->spooled)
		vf_write(v->store, drop_staged_fn, b);
	free(b->buf);
	free(b);
	if (rc == 0) {
		vf_hint_reserve(v->store, j.live);
		vf_maybe_auto_build(v);
		vf_maint_kick(v, j.maint_due);
	}
	return rc;
}

void vecfs_batch_abort(vecfs_batch *b)
{
	if (!b)
		return;
	if (b->spooled)
		vf_write(b->v->store, drop_staged_fn, b);
	free(b->buf);
	free(b);
}

/* ------------------------------------------------------------ delete */

typedef struct del_job {
	vecfs *v;
	const char *key;
	size_t keylen;
	int maint_due;
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
		rc = vf_pw_apply(&w, txn, id, seq, NULL, NULL, 0, 0, NULL, NULL);
	if (rc == 0 && g)
		rc = vf_pw_flush(&w, txn);
	if (rc == 0)
		rc = vf_change_put(txn, s, seq, &ch);
	cnt.live--;
	cnt.deleted++;
	if (rc == 0 && g) {
		if (gm.synced_seq == seq_before)
			gm.synced_seq = cnt.seq;
		gm.pending += w.added;
		rc = vf_save_genmeta(txn, s, &gm);
		vf_stored_config sc;
		if (rc == 0 && (rc = vf_load_config(txn, s, &sc)) == 0)
			j->maint_due = vf_maint_due(&w, &gm, cnt.live, sc.compact_deltas);
	}
	if (rc == 0)
		rc = vf_save_counters(txn, s, &cnt);
	close_active(j->v, g, &w);
	return rc;
}

int vecfs_delete(vecfs *v, const char *key, size_t keylen)
{
	del_job j = {v, key, keylen, 0};
	int rc = vf_write(v->store, del_fn, &j);
	if (rc == 0)
		vf_maint_kick(v, j.maint_due);
	return rc;
}
