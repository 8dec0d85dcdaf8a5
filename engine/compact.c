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

static int cmp_code(const vf_code *x, const vf_code *y)
{
	return x->id < y->id ? -1 : x->id > y->id;
}

static int cmp_code_q(const void *a, const void *b)
{
	return cmp_code(a, b);
}

/* Posting i of an opened block whose columns were checked, as a code
 * pointing into the block: 0, or -EIO when its vector or key is damaged. */
static int block_code(const vf_block *b, uint32_t i, vf_code *code)
{
	code->id = vf_block_id(b, i);
	code->seq = vf_block_seq(b, i);
	code->has_payload = vf_block_has_payload(b, i);
	code->add = vf_block_f1(b, 0, i);
	code->r1 = vf_block_f1(b, 1, i);
	code->e1 = vf_block_f1(b, 2, i);
	code->rb = vf_block_f2(b, 0, i);
	code->eb = vf_block_f2(b, 1, i);
	code->cdot = vf_block_f2(b, 2, i);
	code->planes = vf_block_planes(b, i);
	code->vec = vf_block_vec(b, i);
	if (vf_block_vec_check(b, i) || !(code->key = vf_block_key(b, i, &code->keylen)))
		return -EIO;
	return 0;
}

/* Open a posting block and check every column. */
static int block_open_checked(const MDB_val *d, vf_block *b)
{
	int rc = vf_block_open(d->mv_data, d->mv_size, b);
	for (int col = 0; col < VF_NCOL && rc == 0; col++)
		rc = vf_block_check(NULL, b, col);
	return rc;
}

/* Pack codes[0..n) (in that order) into evenly filled posting blocks
 * 0, 1, ... of cluster c of generation m and save its manifest. */
static int write_blocks(MDB_txn *txn, vf_store *s, const vf_genmeta *m, uint32_t c,
			const vf_code *codes, size_t n, uint8_t **buf, size_t *bufcap)
{
	vf_manifest mf = {0};
	uint32_t nblocks = (uint32_t)((n + VF_BLOCK_TARGET - 1) / VF_BLOCK_TARGET);
	int rc;
	for (uint32_t bi = 0; bi < nblocks; bi++) {
		size_t a = n * bi / nblocks, e = n * (bi + 1) / nblocks;
		size_t sz = vf_block_size(codes + a, (uint32_t)(e - a), m->dim, m->pdim, m->bits);
		if (sz > *bufcap) {
			uint8_t *nb = realloc(*buf, sz);
			if (!nb)
				return -ENOMEM;
			*buf = nb;
			*bufcap = sz;
		}
		vf_block_write(*buf, codes + a, (uint32_t)(e - a), m->dim, m->pdim, m->bits);
		vf_postkey bk = vf_post_key(m->id, c, VF_PK_BLOCK, bi);
		if ((rc = vf_put(txn, s->postings, bk.b, sizeof bk.b, *buf, sz, 0)))
			return vf_mdb_err(rc);
		mf.vectors += e - a;
	}
	mf.blocks = nblocks;
	return vf_save_manifest(txn, s, m->id, c, &mf);
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
			if ((rc = block_open_checked(&d, &b)))
				break;
			for (uint32_t i = 0; i < b.n && rc == 0; i++) {
				vf_code code;
				if (vf_posting_stale(&tombs, &none, vf_block_id(&b, i), vf_block_seq(&b, i)))
					continue;
				if ((rc = block_code(&b, i, &code)) == 0)
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
	qsort(f->codes, f->n, sizeof *f->codes, cmp_code_q);
	return write_blocks(txn, s, m, c, f->codes, f->n, buf, bufcap);
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
		cnt.compactions++;
		if ((rc = vf_save_genmeta(txn, s, &m)) == 0)
			rc = vf_save_counters(txn, s, &cnt);
	}
out:
	vf_gen_put(j->v, g);
	free(f.codes);
	free(f.data);
	free(buf);
	return rc;
}

/* With build_mu held: one maintenance job at a time, like builds. */
static int compact_locked(vecfs *v, uint32_t *clusters, char *err, size_t errlen)
{
	compact_job j = {v, 0, err, errlen};
	int rc = vf_write(v->store, compact_fn, &j);
	if (rc == 0 && clusters)
		*clusters = j.rewritten;
	if (rc && rc != -ENOENT && err && errlen && !err[0])
		vf_seterr(err, errlen, "compact: %s", strerror(-rc));
	return rc;
}

int vecfs_compact(vecfs *v, uint32_t *clusters, char *err, size_t errlen)
{
	pthread_mutex_lock(&v->build_mu);
	int rc = compact_locked(v, clusters, err, errlen);
	pthread_mutex_unlock(&v->build_mu);
	return rc;
}

static int count_rebalance_fn(MDB_txn *txn, void *arg)
{
	vecfs *v = arg;
	vf_counters cnt;
	int rc = vf_load_counters(txn, v->store, &cnt);
	if (rc)
		return rc;
	cnt.rebalances++;
	return vf_save_counters(txn, v->store, &cnt);
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
	int rc = vecfs_build(v, activate, gen_out, progress, parg, err, errlen);
	if (rc == 0)
		rc = vf_write(v->store, count_rebalance_fn, v);
	return rc;
}

/* ------------------------------------------------------------ background */

static void *maint_run(void *arg)
{
	vecfs *v = arg;
	pthread_mutex_lock(&v->stat_mu);
	for (;;) {
		while (!v->maint_due && !v->closing)
			pthread_cond_wait(&v->maint_cv, &v->stat_mu);
		if (v->closing)
			break;
		v->maint_due = 0;
		pthread_mutex_unlock(&v->stat_mu);
		/* a failure here (no active generation any more, no room) leaves
		 * the deltas in place: queries stay correct, only slower */
		vecfs_compact(v, NULL, NULL, 0);
		pthread_mutex_lock(&v->stat_mu);
	}
	pthread_mutex_unlock(&v->stat_mu);
	return NULL;
}

void vf_maint_start(vecfs *v)
{
	pthread_cond_init(&v->maint_cv, NULL);
	v->maint_started = pthread_create(&v->maint_thread, NULL, maint_run, v) == 0;
}

void vf_maint_stop(vecfs *v)
{
	pthread_mutex_lock(&v->stat_mu);
	v->closing = 1;
	pthread_cond_broadcast(&v->maint_cv);
	pthread_mutex_unlock(&v->stat_mu);
	if (v->maint_started)
		pthread_join(v->maint_thread, NULL);
	v->maint_started = 0;
	pthread_cond_destroy(&v->maint_cv);
}

void vf_maint_kick(vecfs *v, uint64_t max_deltas)
{
	vecfs_config c;
	if (!max_deltas || vecfs_config_get(v, &c) || max_deltas < c.compact_deltas)
		return;
	pthread_mutex_lock(&v->stat_mu);
	v->maint_due = 1;
	pthread_cond_signal(&v->maint_cv);
	pthread_mutex_unlock(&v->stat_mu);
}

/* ------------------------------------------------------------ retention */

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

void vf_retire_generations(vecfs *v, uint64_t keep)
{
	vecfs_config c;
	uint64_t ids[1024];
	size_t n = 0;
	if (vecfs_config_get(v, &c) || vecfs_gen_list(v, ids, 1024, &n))
		return;
	if (n > 1024)
		n = 1024;
	uint64_t active = vecfs_active(v);
	qsort(ids, n, sizeof ids[0], cmp_u64);
	size_t others = 0; /* `keep` counts among them, but stays */
	for (size_t i = 0; i < n; i++)
		others += ids[i] != active;
	/* oldest first, until keep_generations others are left */
	for (size_t i = 0; i < n && others > c.keep_generations; i++) {
		if (ids[i] == active || ids[i] == keep)
			continue;
		vecfs_gen_info gi;
		if (vecfs_gen_info_get(v, ids[i], &gi) || gi.state == VECFS_GEN_BUILDING)
			continue;
		if (vecfs_gen_remove(v, ids[i]) == 0)
			others--;
	}
}
