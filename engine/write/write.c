/*
 * engine/write/write.c - puts and deletes: one LMDB transaction per write, with
 * delta postings and tombstones in the active generation so new rows are
 * searchable at once and stale postings are never returned.
 */
#include "io.h"
#include "write.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "attrs.h"
#include "gen/gen.h"
#include "query/query.h"
#include "record.h"
#include "maint/maint.h"

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

int vecfs_key_valid(const char *key, size_t len)
{
	return key_ok(key, len);
}

int vf_row_check(const vecfs_config *cfg, const vecfs_row *row, uint32_t dim,
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
	/* one branch-free pass over the bits: an exponent of all ones is NaN
	 * or infinite (adding its lowest bit carries into bit 31, which no
	 * other exponent reaches); any bit but the sign makes the vector
	 * nonzero.  Only ands, adds and ors, eight lanes at a time, so the
	 * compiler vectorizes it. */
	typedef uint32_t bits32 __attribute__((may_alias));
	const bits32 *w = (const bits32 *)(const void *)row->vec;
	uint32_t inf8[8] = {0}, nz8[8] = {0}, inf = 0, nz = 0, i = 0;
	for (; i + 8 <= dim; i += 8)
		for (int l = 0; l < 8; l++) {
			inf8[l] |= (w[i + l] & 0x7f800000u) + 0x00800000u;
			nz8[l] |= w[i + l] & 0x7fffffffu;
		}
	for (; i < dim; i++) {
		inf |= (w[i] & 0x7f800000u) + 0x00800000u;
		nz |= w[i] & 0x7fffffffu;
	}
	for (int l = 0; l < 8; l++) {
		inf |= inf8[l];
		nz |= nz8[l];
	}
	inf >>= 31;
	for (i = 0; inf && i < dim; i++)
		if (!isfinite(row->vec[i])) {
			vf_seterr(err, errlen, "value %u is %s", i + 1,
				  isnan(row->vec[i]) ? "NaN" : "infinite");
			return -EINVAL;
		}
	if (c.metric == VECFS_COSINE && nz == 0) {
		vf_seterr(err, errlen, "zero vector under the cosine metric");
		return -EINVAL;
	}
	return 0;
}

int vf_row_check_at(const vecfs_config *cfg, const vecfs_row *rows, size_t i, uint32_t dim,
		    uint64_t number, size_t *bad_row, char *err, size_t errlen)
{
	char why[200];
	int rc = vf_row_check(cfg, &rows[i], dim, why, sizeof why);
	if (rc) {
		if (bad_row)
			*bad_row = i;
		vf_seterr(err, errlen, "row %llu: %s", (unsigned long long)number, why);
	}
	return rc;
}

int vecfs_row_check(vecfs *v, const vecfs_row *row, uint32_t dim, char *err,
		    size_t errlen)
{
	vecfs_config c;
	int rc = vecfs_config_get(v, &c);
	return rc ? rc : vf_row_check(&c, row, dim, err, errlen);
}

int vecfs_row_check_config(const vecfs_config *c, const vecfs_row *row, uint32_t dim,
			   char *err, size_t errlen)
{
	return vf_row_check(c, row, dim, err, errlen);
}

/* Load the active generation (if any) and a posting writer for it. */
static int open_active(vecfs *v, vf_txn *txn, vf_gen **g, vf_genmeta *m,
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

int vf_put_begin(vf_put_ctx *c, vecfs *v, vf_txn *txn, uint32_t dim, char *err,
		     size_t errlen)
{
	vecfs_config sc;
	uint32_t version;
	int rc;
	memset(c, 0, sizeof *c);
	c->v = v;
	c->txn = txn;
	c->dim = dim;
	if ((rc = vf_load_config_version(txn, v->store, &sc, &version)) ||
	    (rc = vf_load_counters(txn, v->store, &c->cnt)))
		return rc;
	c->compact_deltas = sc.compact_deltas;
	if (sc.dim == 0) { /* the first write fixes dim: a change of config */
		sc.dim = dim;
		if ((rc = vf_config_save(txn, v->store, &sc)) ||
		    (rc = vf_attrs_touch(txn, v->store, VF_TIME_CONFIG)))
			return rc;
	} else if (sc.dim != dim) {
		vf_seterr(err, errlen, "row 1: dimension %u, the store has dim %u", dim, sc.dim);
		return -EINVAL;
	} else if (version < VF_CONFIG_VERSION && (rc = vf_config_save(txn, v->store, &sc))) {
		/* the write may hold a vector in bytes, which a binary that
		 * reads version 3 at most would take for damage: the store
		 * says so first, in the write's own transaction */
		return rc;
	}
	c->seq_before = c->cnt.seq;
	return open_active(v, txn, &c->g, &c->gm, &c->w);
}

/* An assigned key: the decimal digits of n (at most 20) into buf, as
 * "%llu" prints them, and their number (without snprintf()'s cost in
 * every keyless row's put). */
static size_t key_assigned(char *buf, uint64_t n)
{
	char rev[20];
	size_t len = 0;
	do {
		rev[len++] = (char)('0' + n % 10);
		n /= 10;
	} while (n);
	for (size_t i = 0; i < len; i++)
		buf[i] = rev[len - 1 - i];
	return len;
}

/* One row: record, key, change log entry and (with an active generation)
 * its delta posting. */
int vf_put_row(vf_put_ctx *c, const vecfs_row *r)
{
	vf_store *s = c->v->store;
	char kbuf[24];
	const char *key = r->key;
	size_t klen = r->keylen;
	uint64_t id;
	int rc;
	if (!key) {
		klen = key_assigned(kbuf, c->cnt.next_key++);
		key = kbuf;
	}
	id = c->cnt.next_id;
	rc = vf_keys_claim(c->txn, s, key, klen, &id);
	int fresh = rc == 0;
	uint64_t len;
	vf_val old;
	if (fresh) {
		c->cnt.next_id++;
		c->cnt.live++;
	} else if (rc != -EEXIST || (rc = vf_pidx_remove_record(c->txn, s, &c->pidx, id))) {
		return rc;
	} else if (vf_records_get(c->txn, s, id, &old) == 0 && vf_export_len_of(old.data, old.len, &len) == 0) {
		c->export_delta -= (int64_t)len; /* the version it replaces */
	}
	uint64_t seq = ++c->cnt.seq;
	int kind = vf_record_kind(r->vec, c->dim);
	size_t need = vf_record_size(c->dim, kind, klen, r->payload_len);
	if (need > c->reccap) {
		uint8_t *nr = vf_realloc(c->rec, need);
		if (!nr)
			return -ENOMEM;
		c->rec = nr;
		c->reccap = need;
	}
	vf_record_encode(c->rec, seq, c->dim, kind, r->vec, key, klen, r->payload, r->payload_len);
	if (vf_export_len_of(c->rec, need, &len) == 0)
		c->export_delta += (int64_t)len;
	if ((rc = (fresh ? vf_records_add : vf_records_put)(c->txn, s, id, c->rec, need)) ||
	    (rc = vf_pidx_add(c->txn, s, &c->pidx, id, r->payload, r->payload_len)))
		return rc;
	vf_change ch = {id, 0, 0, VF_OP_PUT};
	if (c->g) {
		const vf_precode *pc = vf_prepared_next(c->pre);
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
int vf_put_end(vf_put_ctx *c, int rc)
{
	vf_store *s = c->v->store;
	if (rc == 0)
		rc = vf_pidx_flush(c->txn, s, &c->pidx);
	vf_pidx_batch_free(&c->pidx);
	if (rc == 0 && c->cnt.seq > c->seq_before)
		rc = vf_attrs_write(c->txn, s, c->export_delta, c->seq_before + 1);
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
	const vecfs_config *cfg; /* what rows are checked against */
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

static int put_fn(vf_txn *txn, void *arg)
{
	put_job *j = arg;
	vf_put_ctx c;
	int rc = vf_put_begin(&c, j->v, txn, j->dim, j->err, j->errlen);
	c.maint_due = &j->maint_due;
	c.live = &j->live;
	if (rc) {
		if (rc == -EINVAL && j->bad_row)
			*j->bad_row = 0;
		return vf_put_end(&c, rc);
	}
	/* one row alone is encoded as it is put; more are prepared a chunk at a
	 * time, ahead of the writer on threads of their own (vf_preparer) */
	vf_preparer *pp = NULL;
	if (c.g && j->n > 1 && !c.v->no_preparer &&
	    vf_preparer_start(&pp, c.v, c.g, j->rows, j->n, j->skip))
		pp = NULL; /* no memory for it: every row is encoded as it is put */
	size_t k = 0, step = pp ? vf_preparer_chunk(pp) : VF_NEAR_CHUNK;
	for (size_t from = 0; from < j->n && rc == 0; from += step, k++) {
		size_t next = j->n - from < step ? j->n : from + step;
		c.pre = pp ? vf_preparer_take(pp, k) : NULL;
		for (size_t i = from; i < next && rc == 0; i++) {
			/* checked here, not in a pass of its own before: the row
			 * is in the cache now (the chunk's preparation read it) */
			if ((rc = vf_row_check_at(j->cfg, j->rows, i, j->dim, i + 1, j->bad_row,
						  j->err, j->errlen)))
				break;
			if (!(j->skip && j->skip[i]))
				rc = vf_put_row(&c, &j->rows[i]);
		}
		if (pp)
			vf_preparer_release(pp, k);
	}
	c.pre = NULL;
	vf_preparer_stop(pp);
	return vf_put_end(&c, rc);
}

static uint64_t key_hash(const char *k, size_t n)
{
	uint64_t h = 1469598103934665603ULL;
	for (size_t i = 0; i < n; i++)
		h = (h ^ (unsigned char)k[i]) * 1099511628211ULL;
	return h;
}

/* Mark rows whose key appears again later in the batch.  With `unique`, a
 * key given twice fails instead: -EINVAL, *first and *again the rows of its
 * first two places. */
static int mark_superseded(const vecfs_row *rows, size_t n, int unique, uint8_t **skip,
			   size_t *first, size_t *again)
{
	size_t keyed = 0;
	for (size_t i = 0; i < n; i++)
		keyed += rows[i].key != NULL;
	*skip = NULL;
	if (keyed == 0)
		return 0; /* keys all assigned: none can repeat */
	size_t cap = 16;
	while (cap < keyed * 2)
		cap *= 2;
	size_t *slot = vf_malloc(sizeof(size_t) * cap);
	uint8_t *sk = unique ? NULL : vf_calloc(n ? n : 1, 1);
	if (!slot || (!unique && !sk)) {
		free(slot);
		free(sk);
		return -ENOMEM;
	}
	memset(slot, 0xFF, sizeof(size_t) * cap);
	int any = 0, rc = 0;
	/* from the end, so that the last row for a key is the one kept; in
	 * file order when a second place is a failure, so that it names the
	 * first two */
	for (size_t r = 0; r < n && rc == 0; r++) {
		size_t i = unique ? r : n - 1 - r;
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
				if (unique) {
					*first = slot[h];
					*again = i;
					rc = -EINVAL;
				} else {
					sk[i] = 1;
					any = 1;
				}
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
	return rc;
}

/* The map space to ask for before a put of rows[0..n): each record (its
 * vector, key and payload) twice over, and 256 bytes for its posting, its
 * change, its key's entry and the trees' own (a 1M x 128 put into a
 * generation takes about 930 bytes a row; this asks 1,280).  An estimate,
 * made before the rows are checked: keys and payloads count up to their
 * limits, and rows of another dimension than the store's ask nothing (the
 * put will refuse them). */
static uint64_t put_bytes(const vecfs_config *cfg, const vecfs_row *rows, size_t n, uint32_t dim)
{
	if (dim == 0 || dim > VECFS_DIM_MAX || (cfg->dim && dim != cfg->dim))
		return 0;
	uint64_t b = 0;
	for (size_t i = 0; i < n; i++)
		b += (rows[i].keylen < VECFS_KEY_MAX ? rows[i].keylen : VECFS_KEY_MAX) +
		     (rows[i].payload_len < VECFS_PAYLOAD_MAX ? rows[i].payload_len : VECFS_PAYLOAD_MAX);
	return 2 * (b + (uint64_t)n * 4 * dim) + (uint64_t)n * 256;
}

static int put_rows(vecfs *v, const vecfs_row *rows, size_t n, uint32_t dim, int unique,
		    size_t *bad_row, size_t *first_row, char *err, size_t errlen)
{
	uint8_t *skip = NULL;
	int rc;
	vecfs_config cfg;
	size_t first = 0, again = 0;
	if (n == 0)
		return 0;
	if ((rc = vecfs_config_get(v, &cfg)))
		return rc;
	if ((rc = mark_superseded(rows, n, unique, &skip, &first, &again))) {
		if (rc == -EINVAL) {
			if (bad_row)
				*bad_row = again;
			if (first_row)
				*first_row = first;
			vf_seterr(err, errlen, "key '%.*s' given twice, rows %zu and %zu",
				   (int)rows[again].keylen, rows[again].key, first + 1, again + 1);
		}
		return rc;
	}
	/* room in the map first: a put that fills it is aborted and put again
	 * from its first row once the map has grown (vf_write()), as often as
	 * it fills it (a 1M-row file into an empty store: twice).  Only asked
	 * for: without the room the put still runs, and fails as it would. */
	(void)vf_store_reserve(v->store, put_bytes(&cfg, rows, n, dim));
	put_job j = {v, &cfg, rows, n, dim, skip, bad_row, err, errlen, 0, 0};
	rc = vf_write(v->store, put_fn, &j);
	free(skip);
	if (rc == 0) {
		vf_hint_reserve(v->store, j.live);
		vf_maybe_auto_build(v);
		vf_maint_kick(v, j.maint_due);
	}
	return rc;
}

int vecfs_put(vecfs *v, const vecfs_row *rows, size_t n, uint32_t dim,
	      size_t *bad_row, char *err, size_t errlen)
{
	return put_rows(v, rows, n, dim, 0, bad_row, NULL, err, errlen);
}

int vecfs_put_unique(vecfs *v, const vecfs_row *rows, size_t n, uint32_t dim,
		     size_t *bad_row, size_t *first_row, char *err, size_t errlen)
{
	return put_rows(v, rows, n, dim, 1, bad_row, first_row, err, errlen);
}

int vf_forget_records(vecfs *v, vf_txn *txn, const uint64_t *ids, size_t n,
		      vf_counters *cnt, int *maint_due)
{
	vf_store *s = v->store;
	vf_gen *g = NULL;
	vf_genmeta gm;
	vf_posting_writer w;
	int rc;
	if ((rc = open_active(v, txn, &g, &gm, &w)))
		return rc;
	uint64_t seq_before = cnt->seq;
	for (size_t i = 0; i < n && rc == 0; i++) {
		uint64_t seq = ++cnt->seq;
		vf_change ch = {ids[i], 0, 0, VF_OP_DEL};
		if (g)
			rc = vf_pw_apply(&w, txn, ids[i], seq, NULL, NULL, 0, 0, NULL, NULL);
		if (rc == 0)
			rc = vf_change_put(txn, s, seq, &ch);
		cnt->deleted++;
	}
	if (rc == 0 && g)
		rc = vf_pw_flush(&w, txn);
	if (rc == 0 && g) {
		if (gm.synced_seq == seq_before)
			gm.synced_seq = cnt->seq;
		gm.pending += w.added;
		rc = vf_save_genmeta(txn, s, &gm);
		vecfs_config sc;
		if (rc == 0 && maint_due && (rc = vf_load_config(txn, s, &sc)) == 0)
			*maint_due = vf_maint_due(&w, &gm, cnt->live, sc.compact_deltas);
	}
	close_active(v, g, &w);
	return rc;
}

/* Remove record id of key[0..klen) and its key entry; its postings are
 * forgotten by the caller (vf_forget_records()). */
static int drop_record(vf_txn *txn, vf_store *s, uint64_t id, const char *key, size_t klen,
		       vf_counters *cnt)
{
	vf_val d;
	uint64_t len = 0;
	int rc;
	if ((rc = vf_records_get(txn, s, id, &d)) == 0 && (rc = vf_export_len_of(d.data, d.len, &len)) == 0)
		rc = vf_attrs_write(txn, s, -(int64_t)len, 0);
	if (rc || (rc = vf_keys_del(txn, s, key, klen)) || (rc = vf_pidx_remove_record(txn, s, NULL, id)) ||
	    (rc = vf_records_del(txn, s, id)))
		return rc;
	cnt->live--;
	return 0;
}

typedef struct del_many_job {
	vecfs *v;
	const vecfs_key *sorted; /* the keys, in key order */
	size_t n;
	const char *filter;
	size_t filter_len;
	char *err;
	size_t errlen;
	uint64_t deleted;
	int maint_due;
} del_many_job;

static int id_add(uint64_t **ids, size_t *n, size_t *cap, uint64_t id)
{
	if (VF_GROW(*ids, *n, *cap, 1024))
		return -ENOMEM;
	(*ids)[(*n)++] = id;
	return 0;
}

static int key_cmp(const void *a, const void *b)
{
	const vecfs_key *x = a, *y = b;
	int c = memcmp(x->key, y->key, x->len < y->len ? x->len : y->len);
	return c ? c : (x->len > y->len) - (x->len < y->len);
}

static int id_cmp(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return (x > y) - (x < y);
}

/* Two passes, each in the order of its table (so that each touches its
 * pages once): the key entries of the named keys, then the records of
 * their ids and of the filter's, with their payload index entries. */
static int del_many_fn(vf_txn *txn, void *arg)
{
	del_many_job *j = arg;
	vf_store *s = j->v->store;
	vf_counters cnt;
	vf_fset *set = NULL;
	vf_pidx_batch pb = {0};
	uint64_t *ids = NULL, id;
	size_t n = 0, cap = 0, named;
	uint64_t gone = 0; /* of the export's length */
	int rc;
	j->deleted = 0;
	if ((rc = vf_load_counters(txn, s, &cnt)))
		return rc;
	/* the filter's records as the snapshot has them before any delete */
	if (j->filter && (rc = vf_fset_find(j->v, txn, j->filter, j->filter_len, &set, j->err, j->errlen)))
		return rc;
	for (size_t i = 0; i < j->n && rc == 0; i++) {
		const vecfs_key *k = &j->sorted[i];
		if (!key_ok(k->key, k->len))
			continue; /* no such key can exist */
		if ((rc = vf_keys_get(txn, s, k->key, k->len, &id)) == -ENOENT) {
			rc = 0; /* missing, or named twice */
			continue;
		}
		if (rc == 0 && (rc = vf_keys_del(txn, s, k->key, k->len)) == 0)
			rc = id_add(&ids, &n, &cap, id);
	}
	named = n;
	for (size_t i = 0; set && rc == 0 && i < (set->ids ? set->n : set->nbits); i++)
		if (set->ids || (set->bits[i / 64] >> (i % 64) & 1))
			rc = id_add(&ids, &n, &cap, set->ids ? set->ids[i] : i);
	vf_fset_put(j->v, set);
	if (rc == 0 && n)
		qsort(ids, n, sizeof *ids, id_cmp);
	size_t kept = 0;
	for (size_t i = 0; i < n && rc == 0; i++) {
		vf_val rv;
		vf_record r;
		if (i && ids[i] == ids[i - 1])
			continue; /* named and matched */
		if ((rc = vf_records_get(txn, s, ids[i], &rv)) || (rc = vf_record_decode(rv.data, rv.len, &r)))
			break;
		gone += vf_export_line_len(&r);
		/* a record the filter matched keeps its key entry until now (one
		 * named by its key lost it in the first pass); the key copied
		 * out of the page, which the writes may move */
		char key[VECFS_KEY_MAX];
		size_t klen = r.keylen <= sizeof key ? r.keylen : sizeof key;
		memcpy(key, r.key, klen);
		if (named < n && (rc = vf_keys_del(txn, s, key, klen)) == -ENOENT)
			rc = 0;
		if (rc == 0 && (rc = vf_pidx_remove_record(txn, s, &pb, ids[i])) == 0 &&
		    (rc = vf_records_del(txn, s, ids[i])) == 0) {
			cnt.live--;
			ids[kept++] = ids[i];
		}
	}
	if (rc == 0)
		rc = vf_pidx_flush(txn, s, &pb);
	vf_pidx_batch_free(&pb);
	if (rc == 0 && kept)
		rc = vf_forget_records(j->v, txn, ids, kept, &cnt, &j->maint_due);
	if (rc == 0 && kept)
		rc = vf_save_counters(txn, s, &cnt);
	if (rc == 0 && kept)
		rc = vf_attrs_write(txn, s, -(int64_t)gone, 0);
	free(ids);
	if (rc == 0)
		j->deleted = kept;
	return rc;
}

int vecfs_delete_many(vecfs *v, const vecfs_key *keys, size_t n, const char *filter,
		      size_t filter_len, uint64_t *deleted, char *err, size_t errlen)
{
	vecfs_key *sorted = n ? vf_malloc(n * sizeof *sorted) : NULL;
	if (deleted)
		*deleted = 0;
	if (n && !sorted)
		return -ENOMEM;
	if (n) {
		memcpy(sorted, keys, n * sizeof *sorted);
		qsort(sorted, n, sizeof *sorted, key_cmp);
	}
	del_many_job j = {v, sorted, n, filter, filter_len, err, errlen, 0, 0};
	int rc = vf_write(v->store, del_many_fn, &j);
	free(sorted);
	if (rc == 0) {
		if (deleted)
			*deleted = j.deleted;
		vf_maint_kick(v, j.maint_due);
	}
	return rc;
}

typedef struct del_job {
	vecfs *v;
	const char *key;
	size_t keylen;
	int maint_due;
} del_job;

static int del_fn(vf_txn *txn, void *arg)
{
	del_job *j = arg;
	vf_store *s = j->v->store;
	vf_counters cnt;
	uint64_t id;
	int rc;
	if (j->keylen == 0 || j->keylen > VECFS_KEY_MAX)
		return -ENOENT;
	if ((rc = vf_load_counters(txn, s, &cnt)))
		return rc;
	if ((rc = vf_keys_get(txn, s, j->key, j->keylen, &id)))
		return rc;
	if ((rc = drop_record(txn, s, id, j->key, j->keylen, &cnt)))
		return rc;
	if ((rc = vf_forget_records(j->v, txn, &id, 1, &cnt, &j->maint_due)))
		return rc;
	return vf_save_counters(txn, s, &cnt);
}

int vecfs_delete(vecfs *v, const char *key, size_t keylen)
{
	del_job j = {v, key, keylen, 0};
	int rc = vf_write(v->store, del_fn, &j);
	if (rc == 0)
		vf_maint_kick(v, j.maint_due);
	return rc;
}
