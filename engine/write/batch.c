/*
 * engine/write/batch.c - large writes: rows staged in the store (spooled from
 * memory) and committed in chunks, or dropped.
 */
#include "io.h"
#include "write.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "keys.h"
#include "record.h"
#include "gen/gen.h"
#include "maint/maint.h"

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

static int spool_fn(vf_txn *txn, void *arg)
{
	vecfs_batch *b = arg;
	uint64_t row = b->spooled;
	for (size_t off = 0; off < b->len; row++) {
		uint32_t n32;
		uint8_t k[16];
		memcpy(&n32, b->buf + off, 4);
		vf_be64(k, b->id);
		vf_be64(k + 8, row);
		int rc = vf_put(txn, b->v->store->staging, k, 16, b->buf + off + 4, n32, VF_APPEND);
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
	vecfs_batch *b = vf_calloc(1, sizeof *b);
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
	int rc;
	for (size_t i = 0; i < n; i++) {
		if ((rc = vf_row_check_at(&b->cfg, rows, i, b->dim, b->rows + 1, bad_row, err,
					  errlen)) ||
		    (rc = batch_append(b, &rows[i])))
			return rc;
		b->rows++;
		if (b->len >= b->v->spool_bytes && (rc = batch_spool(b)))
			return rc;
	}
	return 0;
}

static int drop_staged_fn(vf_txn *txn, void *arg)
{
	vecfs_batch *b = arg;
	uint8_t k0[8];
	vf_be64(k0, b->id);
	return vf_drop_prefix(txn, b->v->store->staging, k0, 8);
}

typedef struct commit_job {
	vecfs_batch *b;
	char *err;
	size_t errlen;
	int maint_due;
	uint64_t live;
} commit_job;

/* Staged rows are committed a chunk at a time: a chunk is prepared
 * (vf_prepare(): nearest centroids and codes on every CPU), then its rows are
 * put in order.  A chunk holds at most VF_NEAR_CHUNK rows and about
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
	return n >= VF_NEAR_CHUNK || bytes >= COMMIT_CHUNK_BYTES;
}

/* Put the n staged records of buf[0..len) (u32 length, record) in order. */
static int put_records(vf_put_ctx *c, const uint8_t *buf, size_t len, size_t n)
{
	vecfs_row *rows = vf_malloc(sizeof *rows * (n ? n : 1));
	/* staged vectors may be unaligned: rows take aligned copies */
	float *vecs = vf_malloc(sizeof(float) * c->dim * (n ? n : 1));
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
	vf_prepared pre = {0};
	if (rc == 0 && c->g && n > 1 && (rc = vf_prepare(c->v, c->g, rows, n, NULL, &pre)) == 0)
		c->pre = &pre;
	for (i = 0; rc == 0 && i < n; i++)
		rc = vf_put_row(c, &rows[i]);
	c->pre = NULL;
	vf_prepared_free(&pre);
	free(vecs);
	free(rows);
	return rc;
}

static int put_chunk(vf_put_ctx *c, staged_chunk *k)
{
	int rc = put_records(c, k->buf, k->len, k->n);
	k->len = k->n = 0;
	return rc;
}

/* All rows, staged ones first (in order), then the ones in memory, in one
 * transaction; the staging area is emptied in the same transaction. */
static int commit_fn(vf_txn *txn, void *arg)
{
	commit_job *j = arg;
	vecfs_batch *b = j->b;
	vf_put_ctx c;
	staged_chunk k = {0};
	int rc = vf_put_begin(&c, b->v, txn, b->dim, j->err, j->errlen);
	c.maint_due = &j->maint_due;
	c.live = &j->live;
	if (rc == 0 && b->spooled) {
		vf_cursor *cur;
		uint8_t k0[8];
		vf_be64(k0, b->id);
		vf_val key, d;
		if ((rc = vf_cursor_open(txn, b->v->store->staging, &cur)) == 0) {
			for (rc = vf_cursor_prefix(cur, k0, 8, &key, &d, VF_SEEK); rc == 0;
			     rc = vf_cursor_prefix(cur, k0, 8, &key, &d, VF_NEXT))
				if ((rc = chunk_add(&k, d.data, d.len)) ||
				    (chunk_full(k.n, k.len) && (rc = put_chunk(&c, &k))))
					break;
			vf_cursor_close(cur);
			if (rc == -ENOENT)
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
	return vf_put_end(&c, rc);
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
