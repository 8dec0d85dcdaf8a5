/*
 * engine/compact.c - maintenance of a generation: compaction folds a
 * cluster's delta postings into packed posting blocks and drops the
 * postings that tombstones or newer versions made dead; rebalancing
 * publishes a new generation.
 */
#include "internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "changes.h"
#include "keys.h"

/* The live postings of one cluster, copied out of the store (the values
 * they came from are deleted in the same transaction). */
typedef struct fold {
	vf_code *codes;
	uint8_t *data;       /* planes | vector | key of each code */
	size_t n, cap, len, dcap;
} fold;

static int fold_add(fold *f, const vf_code *c, uint32_t dim, size_t pbytes)
{
	size_t need = pbytes + (size_t)dim * 4 + c->keylen;
	if (f->n == f->cap) {
		size_t nc = f->cap ? f->cap * 2 : 256;
		vf_code *n = realloc(f->codes, nc * sizeof *n);
		if (!n)
			return -ENOMEM;
		f->codes = n;
		f->cap = nc;
	}
	if (f->len + need > f->dcap) {
		size_t nc = f->dcap ? f->dcap * 2 : 1 << 16;
		while (nc < f->len + need)
			nc *= 2;
		uint8_t *n = realloc(f->data, nc);
		if (!n)
			return -ENOMEM;
		f->data = n;
		f->dcap = nc;
	}
	vf_code *o = &f->codes[f->n++];
	*o = *c;
	/* store offsets now, pointers once the data stops moving */
	o->planes = (const uint8_t *)(uintptr_t)f->len;
	memcpy(f->data + f->len, c->planes, pbytes);
	memcpy(f->data + f->len + pbytes, c->vec, (size_t)dim * 4);
	memcpy(f->data + f->len + pbytes + (size_t)dim * 4, c->key, c->keylen);
	f->len += need;
	return 0;
}

static int cmp_code(const void *a, const void *b)
{
	const vf_code *x = a, *y = b;
	return x->id < y->id ? -1 : x->id > y->id;
}

typedef struct compact_job {
	vecfs *v;
	uint32_t rewritten;
	char *err;
	size_t errlen;
} compact_job;

/* Rewrite cluster c of g from its live postings. */
static int compact_cluster(MDB_txn *txn, vf_store *s, const vf_genmeta *m, uint32_t c,
			   fold *f, uint8_t **buf, size_t *bufcap)
{
	vf_postkey start = vf_post_key(m->id, c, VF_PK_TOMB, 0);
	MDB_val k = {sizeof start.b, start.b}, d;
	MDB_cursor *cur;
	vf_tombs tombs = {0};
	vf_dirty none;
	size_t pbytes = (size_t)m->bits * (m->pdim / 8);
	int rc;
	vf_dirty_init(&none); /* the generation was synced just before */
	f->n = f->len = 0;
	if ((rc = mdb_cursor_open(txn, s->postings, &cur)))
		return vf_mdb_err(rc);
	/* collect live postings, deleting every tombstone, block and delta */
	for (rc = mdb_cursor_get(cur, &k, &d, MDB_SET_RANGE); rc == 0;
	     rc = mdb_cursor_get(cur, &k, &d, MDB_GET_CURRENT)) {
		const uint8_t *kb = k.mv_data;
		if (k.mv_size != sizeof start.b || memcmp(kb, start.b, 12))
			break;
		uint8_t kind = vf_postkey_kind(kb);
		if (kind == VF_PK_TOMB) {
			uint64_t ks;
			if (d.mv_size != 8) {
				rc = -EIO;
				break;
			}
			memcpy(&ks, d.mv_data, 8);
			if ((rc = vf_tombs_add(&tombs, vf_postkey_sub(kb), ks)))
				break;
		} else if (kind == VF_PK_BLOCK) {
			vf_block b;
			if ((rc = vf_block_open(d.mv_data, d.mv_size, &b)))
				break;
			for (int col = 0; col < VF_NCOL && rc == 0; col++)
				rc = vf_block_check(NULL, &b, col);
			for (uint32_t i = 0; i < b.n && rc == 0; i++) {
				vf_code code;
				code.id = vf_block_id(&b, i);
				code.seq = vf_block_seq(&b, i);
				if (vf_posting_stale(&tombs, &none, code.id, code.seq))
					continue;
				code.has_payload = vf_block_has_payload(&b, i);
				code.add = vf_block_f1(&b, 0, i);
				code.r1 = vf_block_f1(&b, 1, i);
				code.e1 = vf_block_f1(&b, 2, i);
				code.rb = vf_block_f2(&b, 0, i);
				code.eb = vf_block_f2(&b, 1, i);
				code.cdot = vf_block_f2(&b, 2, i);
				code.planes = vf_block_planes(&b, i);
				code.vec = vf_block_vec(&b, i);
				if (vf_block_vec_check(&b, i) ||
				    !(code.key = vf_block_key(&b, i, &code.keylen))) {
					rc = -EIO;
					break;
				}
				rc = fold_add(f, &code, m->dim, pbytes);
			}
			if (rc)
				break;
		} else if (kind == VF_PK_DELTA) {
			vf_code code;
			if ((rc = vf_delta_open(d.mv_data, d.mv_size, m->dim, m->pdim, m->bits, &code)))
				break;
			if (!vf_posting_stale(&tombs, &none, code.id, code.seq) &&
			    (rc = fold_add(f, &code, m->dim, pbytes)))
				break;
		}
		if (kind != VF_PK_MANIFEST && (rc = mdb_cursor_del(cur, 0)))
			break;
		if (kind == VF_PK_MANIFEST && (rc = mdb_cursor_get(cur, &k, &d, MDB_NEXT)))
			break;
	}
	mdb_cursor_close(cur);
	vf_tombs_free(&tombs);
	if (rc == MDB_NOTFOUND || rc == EINVAL)
		rc = 0;
	if (rc)
		return vf_mdb_err(rc);
	/* pointers into the copied data, in id order */
	for (size_t i = 0; i < f->n; i++) {
		vf_code *o = &f->codes[i];
		uint8_t *p = f->data + (uintptr_t)o->planes;
		o->planes = p;
		o->vec = p + pbytes;
		o->key = (const char *)p + pbytes + (size_t)m->dim * 4;
	}
	qsort(f->codes, f->n, sizeof *f->codes, cmp_code);
	vf_manifest mf = {0};
	uint32_t nblocks = (uint32_t)((f->n + VF_BLOCK_TARGET - 1) / VF_BLOCK_TARGET);
	for (uint32_t bi = 0; bi < nblocks; bi++) {
		size_t a = f->n * bi / nblocks, e = f->n * (bi + 1) / nblocks;
		size_t sz = vf_block_size(f->codes + a, (uint32_t)(e - a), m->dim, m->pdim, m->bits);
		if (sz > *bufcap) {
			uint8_t *nb = realloc(*buf, sz);
			if (!nb)
				return -ENOMEM;
			*buf = nb;
			*bufcap = sz;
		}
		vf_block_write(*buf, f->codes + a, (uint32_t)(e - a), m->dim, m->pdim, m->bits);
		vf_postkey bk = vf_post_key(m->id, c, VF_PK_BLOCK, bi);
		if ((rc = vf_put(txn, s->postings, bk.b, sizeof bk.b, *buf, sz, 0)))
			return vf_mdb_err(rc);
		mf.vectors += e - a;
	}
	mf.blocks = nblocks;
	return vf_save_manifest(txn, s, m->id, c, &mf);
}

static int compact_fn(MDB_txn *txn, void *arg)
{
	compact_job *j = arg;
	vf_store *s = j->v->store;
	vf_counters cnt;
	vf_genmeta m;
	vf_gen *g = NULL;
	fold f = {0};
	uint8_t *buf = NULL;
	size_t bufcap = 0;
	int rc;
	uint64_t active = vf_load_active(txn, s);
	j->rewritten = 0;
	if (!active) {
		vf_seterr(j->err, j->errlen, "compact: there is no active generation");
		return -ENOENT;
	}
	if ((rc = vf_load_counters(txn, s, &cnt)) || (rc = vf_load_genmeta(txn, s, active, &m)) ||
	    (rc = vf_gen_get(j->v, txn, active, &g)))
		return rc;
	/* rows the generation does not cover yet become delta postings first */
	if ((rc = vf_sync_generation(j->v, txn, g, &m, &cnt)))
		goto out;
	for (uint32_t c = 0; c < m.nlist && rc == 0; c++) {
		vf_manifest mf;
		if ((rc = vf_load_manifest(txn, s, m.id, c, &mf)))
			break;
		if (mf.deltas == 0 && mf.tombstones == 0)
			continue;
		rc = compact_cluster(txn, s, &m, c, &f, &buf, &bufcap);
		j->rewritten++;
	}
	if (rc == 0) {
		m.blocks_seq = cnt.seq;
		rc = vf_save_genmeta(txn, s, &m);
	}
out:
	vf_gen_put(j->v, g);
	free(f.codes);
	free(f.data);
	free(buf);
	return rc;
}

int vecfs_compact(vecfs *v, uint32_t *clusters, char *err, size_t errlen)
{
	compact_job j = {v, 0, err, errlen};
	/* one maintenance job at a time, like builds */
	pthread_mutex_lock(&v->build_mu);
	int rc = vf_write(v->store, compact_fn, &j);
	pthread_mutex_unlock(&v->build_mu);
	if (rc == 0 && clusters)
		*clusters = j.rewritten;
	if (rc && rc != -ENOENT && err && errlen && !err[0])
		vf_seterr(err, errlen, "compact: %s", strerror(-rc));
	return rc;
}

int vecfs_rebalance(vecfs *v, int activate, uint64_t *gen_out,
		    vecfs_progress_fn progress, void *parg, char *err, size_t errlen)
{
	/* a fresh generation from the current snapshot: every cluster is
	 * retrained, split and merged as the data now falls */
	if (!vecfs_active(v)) {
		vf_seterr(err, errlen, "rebalance: there is no active generation");
		return -ENOENT;
	}
	return vecfs_build(v, activate, gen_out, progress, parg, err, errlen);
}
