/*
 * engine/gen/build.c - building a generation from a snapshot: sample, train
 * k-means, assign and encode every record (all cores), sort by cluster,
 * pack posting blocks, publish.  The blocks are written in several
 * transactions while the generation is `building` (invisible to queries);
 * the last transaction stores centroids and the assignment map, brings the
 * generation up to date with writes made during the build, marks it
 * `ready` and (optionally) flips `active`, atomically.
 */
#include "attrs.h"
#include "handle.h"
#include "gen.h"
#include "io.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "assign.h"
#include "calibrate.h"
#include "math/math.h"
#include "keys.h"
#include "record.h"

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

typedef struct build_ctx {
	vecfs *v;
	vf_genmeta m;
	vf_task t;
	/* snapshot */
	uint64_t n;
	uint64_t *ids, *seqs;
	const uint8_t **vecs;   /* into the read transaction's map */
	uint8_t *kinds;         /* how each holds its numbers (VF_VEC_*) */
	const char **keys;      /* likewise */
	uint32_t *keylens;
	uint8_t *has_payload;
	/* results */
	float *centroids;
	uint32_t *assign;       /* per row */
	uint8_t *planes;        /* n * pb */
	vf_code *codes;
	size_t pb;
} build_ctx;

static int kmeans_tick(void *arg, int pct)
{
	return vf_task_report(&((build_ctx *)arg)->t, "train", pct);
}

static int calibrate_tick(void *arg, int pct)
{
	return vf_task_report(&((build_ctx *)arg)->t, "calibrate", pct);
}

static void load_vec(const build_ctx *b, uint64_t i, float *out)
{
	vf_record r = {.dim = b->m.dim, .kind = b->kinds[i], .vec = b->vecs[i]};
	vf_record_floats(&r, out);
	if (b->m.metric == VECFS_COSINE)
		vf_to_index_space(VECFS_COSINE, out, out, b->m.dim);
}

static void calib_vec(const void *arg, uint64_t i, float *out)
{
	load_vec(arg, i, out);
}

/* ------------------------------------------------------------ encode */

typedef struct enc_job {
	build_ctx *b;
	const vf_gen *g;        /* centroids, rotation, rotated centroids */
	uint64_t lo, hi;
	int rc;
	int reporter;
} enc_job;

#define ENC_CHUNK 4096

static void *enc_run(void *arg)
{
	enc_job *j = arg;
	build_ctx *b = j->b;
	const vf_gen *g = j->g;
	uint32_t dim = b->m.dim;
	vf_encoder enc;
	float *buf = vf_malloc(sizeof(float) * ENC_CHUNK * dim);
	if (!buf || vf_gen_encoder_init(&enc, g)) {
		free(buf);
		j->rc = -ENOMEM;
		return NULL;
	}
	for (uint64_t c0 = j->lo; c0 < j->hi; c0 += ENC_CHUNK) {
		uint64_t cn = j->hi - c0 < ENC_CHUNK ? j->hi - c0 : ENC_CHUNK;
		for (uint64_t i = 0; i < cn; i++)
			load_vec(b, c0 + i, buf + i * dim);
		vf_nearest(&g->ci, buf, cn, b->assign + c0, NULL, 1);
		for (uint64_t i = 0; i < cn; i++) {
			uint64_t r = c0 + i;
			uint32_t c = b->assign[r];
			vf_code *code = &b->codes[r];
			vf_encode(&enc, buf + i * dim, g->centroids + (size_t)c * dim,
				  g->rc + (size_t)c * b->m.pdim, b->planes + r * b->pb, code);
			code->id = b->ids[r];
			code->seq = b->seqs[r];
			code->key = b->keys[r];
			code->keylen = b->keylens[r];
			code->has_payload = b->has_payload[r];
		}
		if (j->reporter) {
			int pct = (int)((c0 + cn - j->lo) * 100 / (j->hi - j->lo));
			if (vf_task_report(&b->t, "encode", pct)) {
				j->rc = -ECANCELED;
				break;
			}
		} else {
			int stop = vf_task_cancelled(&b->t);
			if (stop) {
				j->rc = -ECANCELED;
				break;
			}
		}
	}
	vf_encoder_free(&enc);
	free(buf);
	return NULL;
}

static int encode_all(build_ctx *b, const vf_gen *g)
{
	int nt = b->v->threads, rc = 0;
	enc_job jobs[VF_PARALLEL_MAX];
	if (b->n < 4096)
		nt = 1;
	if (nt > VF_PARALLEL_MAX)
		nt = VF_PARALLEL_MAX;
	for (int t = 0; t < nt; t++)
		jobs[t] = (enc_job){b, g, b->n * t / nt, b->n * (t + 1) / nt, 0, t == 0};
	vf_parallel(enc_run, jobs, sizeof *jobs, nt);
	for (int t = 0; t < nt && !rc; t++)
		rc = jobs[t].rc;
	return rc;
}

/* ------------------------------------------------------------ blocks */

typedef struct blocks_job {
	build_ctx *b;
	const uint64_t *order;   /* rows sorted by cluster */
	const uint64_t *cstart;  /* nlist + 1 offsets into order */
	uint32_t c_lo, c_hi;     /* clusters written by this transaction */
	vf_code *tmp;
	uint8_t *buf;
	size_t bufcap;
} blocks_job;

static int blocks_fn(vf_txn *txn, void *arg)
{
	blocks_job *j = arg;
	build_ctx *b = j->b;
	vf_store *s = b->v->store;
	int rc;
	for (uint32_t c = j->c_lo; c < j->c_hi; c++) {
		uint64_t lo = j->cstart[c], hi = j->cstart[c + 1];
		vf_manifest mf = {0};
		uint32_t nblocks = (uint32_t)((hi - lo + VF_BLOCK_TARGET - 1) / VF_BLOCK_TARGET);
		for (uint32_t bi = 0; bi < nblocks; bi++) {
			/* spread the cluster evenly over its blocks */
			uint64_t a = lo + (hi - lo) * bi / nblocks;
			uint64_t e = lo + (hi - lo) * (bi + 1) / nblocks;
			uint32_t cnt = (uint32_t)(e - a);
			for (uint32_t i = 0; i < cnt; i++)
				j->tmp[i] = b->codes[j->order[a + i]];
			size_t sz = vf_block_size(j->tmp, cnt, b->m.pdim, b->m.bits);
			if (sz > j->bufcap) {
				uint8_t *nb = vf_realloc(j->buf, sz);
				if (!nb)
					return -ENOMEM;
				j->buf = nb;
				j->bufcap = sz;
			}
			vf_block_write(j->buf, j->tmp, cnt, b->m.dim, b->m.pdim, b->m.bits);
			if ((rc = vf_posting_put(txn, s, b->m.id, c, VF_PK_BLOCK, bi, j->buf, sz)))
				return rc;
			mf.vectors += cnt;
		}
		mf.blocks = nblocks;
		if ((rc = vf_save_manifest(txn, s, b->m.id, c, &mf)))
			return rc;
	}
	return 0;
}

/* Read the snapshot: ids, seqs and pointers to every live vector.  A
 * record that fails its checksum is left out (and reported): the
 * generation covers the others; b->n becomes how many it holds. */
static int snapshot(build_ctx *b, vf_txn *txn, uint64_t *id_limit)
{
	vf_cursor *cur;
	vf_val k, d;
	uint64_t i = 0;
	int rc = vf_cursor_open(txn, b->v->store->records, &cur);
	if (rc)
		return vf_store_err(rc);
	*id_limit = 0;
	for (rc = vf_cursor_get(cur, &k, &d, VF_FIRST); rc == 0 && i < b->n;
	     rc = vf_cursor_get(cur, &k, &d, VF_NEXT)) {
		vf_record r;
		if (vf_record_decode(d.data, d.len, &r)) {
			if (b->v->lost_fn)
				b->v->lost_fn(b->v->lost_arg, r.key ? r.key : "",
					      r.key ? r.keylen : 0);
			continue;
		}
		if (r.dim != b->m.dim) {
			rc = -EIO;
			break;
		}
		b->ids[i] = vf_rd_be64(k.data);
		b->seqs[i] = r.seq;
		b->vecs[i] = r.vec;
		b->kinds[i] = (uint8_t)r.kind;
		b->keys[i] = r.key;
		b->keylens[i] = r.keylen;
		b->has_payload[i] = r.plen > 0;
		if (b->ids[i] + 1 > *id_limit)
			*id_limit = b->ids[i] + 1;
		i++;
	}
	vf_cursor_close(cur);
	if (rc == -ENOENT || rc == 0) {
		rc = i ? 0 : -EIO;
		b->n = i;
		b->m.covered = i;
	}
	return rc;
}

/* A build, with build_mu held. */
static int build_locked(build_ctx *b, int activate, uint64_t *gen_out)
{
	vecfs *v = b->v;
	vf_txn *txn = NULL;
	vf_counters cnt;
	vecfs_config sc;
	vf_gen g;
	vf_calib cal;
	float *center = NULL;
	uint32_t *idmap = NULL;
	uint64_t *order = NULL, *cstart = NULL, id_limit = 0;
	int rc, have_gen = 0, registered = 0;
	double t0 = now_s();

	VF_ASSERT_HELD(&v->build_mu);
	memset(&g, 0, sizeof g);
	/* the snapshot stays open until the generation is published, and the
	 * map cannot grow under it: make room for the new blocks first (three
	 * times the record bytes covers vectors, codes, keys and page slack) */
	if ((rc = vf_store_reserve(v->store, VF_GEN_RESERVE(v->store))))
		return rc;
	if ((rc = vf_read_begin(v->store, &txn)))
		return rc;
	if ((rc = vf_load_counters(txn, v->store, &cnt)) ||
	    (rc = vf_load_config(txn, v->store, &sc)))
		goto out;
	if (cnt.live == 0 || sc.dim == 0) {
		vf_seterr(b->t.err, b->t.errlen, "build: the store has no records");
		rc = -ENOENT;
		goto out;
	}
	b->n = cnt.live;
	b->m.state = VECFS_GEN_BUILDING;
	b->m.metric = sc.metric;
	b->m.created = (uint64_t)time(NULL);
	b->m.snap_seq = cnt.seq;
	b->m.covered = cnt.live;
	b->m.parent = vf_load_active(txn, v->store);
	b->m.dim = sc.dim;
	b->m.pdim = vf_padded_dim(sc.dim);
	b->m.bits = sc.bits;
	b->m.flags = v->gen_flags;
	b->m.nlist = sc.nlist ? (sc.nlist < b->n ? sc.nlist : (uint32_t)b->n) : vf_auto_nlist(b->n);
	snprintf(b->m.phase, sizeof b->m.phase, "sample");
	if ((rc = vf_gen_register(v, &b->m)))
		goto out;
	registered = 1;
	b->m.seed = sc.seed ^ (b->m.id * 0x9e3779b97f4a7c15ULL);

	rc = -ENOMEM;
	b->pb = (size_t)b->m.bits * b->m.pdim / 8;
	b->ids = vf_malloc(sizeof(uint64_t) * b->n);
	b->seqs = vf_malloc(sizeof(uint64_t) * b->n);
	b->vecs = vf_malloc(sizeof(void *) * b->n);
	b->keys = vf_malloc(sizeof(char *) * b->n);
	b->keylens = vf_malloc(sizeof(uint32_t) * b->n);
	b->has_payload = vf_malloc(b->n);
	b->kinds = vf_malloc(b->n);
	b->centroids = vf_malloc(sizeof(float) * b->m.nlist * b->m.dim);
	if (!b->ids || !b->seqs || !b->vecs || !b->keys || !b->keylens || !b->has_payload ||
	    !b->kinds || !b->centroids)
		goto out;
	if ((rc = snapshot(b, txn, &id_limit)))
		goto out;

	/* train on a bounded sample, spread evenly over the snapshot */
	int iters;
	uint64_t ns = vf_train_sample(b->n, b->m.nlist, b->m.dim, &iters);
	float *sample = vf_malloc(sizeof(float) * ns * b->m.dim);
	if (!sample) {
		rc = -ENOMEM;
		goto out;
	}
	for (uint64_t i = 0; i < ns; i++)
		load_vec(b, i * b->n / ns, sample + i * b->m.dim);
	if (vf_task_report(&b->t, "train", 0)) {
		free(sample);
		rc = -ECANCELED;
		goto out;
	}
	rc = vf_kmeans(sample, ns, b->m.dim, b->m.nlist, iters, b->m.seed, v->threads,
		       b->centroids, kmeans_tick, b);
	/* the centre of the first-pass tables: the sample's mean, without
	 * norm outliers */
	if (rc == 0 && (b->m.flags & VF_GEN_QUERY_TABLE)) {
		if (!(center = vf_malloc(sizeof(float) * b->m.dim)))
			rc = -ENOMEM;
		else
			rc = vf_robust_mean(sample, ns, b->m.dim, center);
	}
	free(sample);
	if (rc)
		goto out;

	/* assign and encode everything */
	rc = -ENOMEM;
	b->assign = vf_malloc(sizeof(uint32_t) * b->n);
	b->planes = vf_malloc(b->pb * b->n);
	b->codes = vf_malloc(sizeof(vf_code) * b->n);
	if (!b->assign || !b->planes || !b->codes)
		goto out;
	if ((rc = vf_gen_routing(&g, &b->m, b->centroids, center)))
		goto out;
	have_gen = 1;
	if (vf_task_report(&b->t, "encode", 0)) {
		rc = -ECANCELED;
		goto out;
	}
	if ((rc = encode_all(b, &g)))
		goto out;
	/* the stopping rule's thresholds, from sample queries */
	if (vf_task_report(&b->t, "calibrate", 0)) {
		rc = -ECANCELED;
		goto out;
	}
	if ((rc = vf_calibrate(&g, b->m.metric, b->n, calib_vec, b, b->assign, v->threads,
			       b->m.seed, calibrate_tick, b, &cal)))
		goto out;
	g.cal = &cal;

	/* sort rows by cluster (stable: ids stay ascending) */
	rc = -ENOMEM;
	order = vf_malloc(sizeof(uint64_t) * b->n);
	cstart = vf_calloc((size_t)b->m.nlist + 1, sizeof(uint64_t));
	idmap = vf_malloc(sizeof(uint32_t) * (id_limit ? id_limit : 1));
	if (!order || !cstart || !idmap)
		goto out;
	for (uint64_t i = 0; i < b->n; i++)
		cstart[b->assign[i] + 1]++;
	for (uint32_t c = 0; c < b->m.nlist; c++)
		cstart[c + 1] += cstart[c];
	{
		uint64_t *fill = vf_malloc(sizeof(uint64_t) * b->m.nlist);
		if (!fill)
			goto out;
		memcpy(fill, cstart, sizeof(uint64_t) * b->m.nlist);
		for (uint64_t i = 0; i < b->n; i++)
			order[fill[b->assign[i]]++] = i;
		free(fill);
	}
	memset(idmap, 0xFF, sizeof(uint32_t) * (id_limit ? id_limit : 1));
	for (uint64_t i = 0; i < b->n; i++)
		idmap[b->ids[i]] = b->assign[i];

	/* publish blocks in bounded transactions while still `building` */
	if (vf_task_report(&b->t, "publish", 0)) {
		rc = -ECANCELED;
		goto out;
	}
	blocks_job bj = {b, order, cstart, 0, 0, NULL, NULL, 0};
	bj.tmp = vf_malloc(sizeof(vf_code) * VF_BLOCK_TARGET * 2);
	if (!bj.tmp) {
		rc = -ENOMEM;
		goto out;
	}
	size_t per_vec = b->pb + 64; /* code, factors, id, key */
	while (bj.c_hi < b->m.nlist) {
		bj.c_lo = bj.c_hi;
		uint64_t bytes = 0;
		while (bj.c_hi < b->m.nlist && bytes < VF_PUBLISH_TXN_BYTES) {
			bytes += (cstart[bj.c_hi + 1] - cstart[bj.c_hi]) * per_vec + 256;
			bj.c_hi++;
		}
		if ((rc = vf_write(v->store, blocks_fn, &bj)))
			break;
		if (vf_task_report(&b->t, "publish", (int)((uint64_t)bj.c_hi * 99 / b->m.nlist))) {
			rc = -ECANCELED;
			break;
		}
	}
	free(bj.tmp);
	free(bj.buf);
	if (rc)
		goto out;
	vf_read_end(v->store, txn);
	txn = NULL;

	b->m.build_seconds = now_s() - t0;
	if ((rc = vf_gen_publish(v, &b->m, b->centroids, idmap, id_limit, &g, activate, 0)))
		goto out;
	*gen_out = b->m.id;
	rc = 0;
out:
	if (txn)
		vf_read_end(v->store, txn);
	if (rc == -ECANCELED)
		vf_seterr(b->t.err, b->t.errlen, "build: cancelled");
	else if (rc && b->t.err && !b->t.err[0])
		vf_seterr(b->t.err, b->t.errlen, "build: %s", strerror(-rc));
	if (rc && registered)
		vf_gen_abandon(v, &b->m);
	if (have_gen)
		vf_gen_routing_free(&g);
	free(center);
	free(idmap);
	free(order);
	free(cstart);
	free(b->ids);
	free(b->seqs);
	free(b->vecs);
	free(b->keys);
	free(b->keylens);
	free(b->has_payload);
	free(b->kinds);
	free(b->centroids);
	free(b->assign);
	free(b->planes);
	free(b->codes);
	return rc;
}

int vecfs_build(vecfs *v, int activate, uint64_t *gen_out,
		vecfs_progress_fn progress, void *parg, char *err, size_t errlen)
{
	build_ctx b;
	uint64_t gen = 0;
	memset(&b, 0, sizeof b);
	b.v = v;
	vf_task_init(&b.t, v, &b.m, progress, parg, err, errlen);
	pthread_mutex_lock(&v->build_mu);
	int rc = build_locked(&b, activate, &gen);
	pthread_mutex_unlock(&v->build_mu);
	vf_task_end(&b.t);
	if (rc == 0)
		vf_retire_generations(v, gen);
	if (rc == 0 && gen_out)
		*gen_out = gen;
	return rc;
}

/* ------------------------------------------------------------ automatic first build */

static void *auto_run(void *arg)
{
	vecfs *v = arg;
	uint64_t gen;
	vecfs_build(v, 1, &gen, NULL, NULL, NULL, 0);
	return NULL;
}

void vf_maybe_auto_build(vecfs *v)
{
	vecfs_config c;
	vecfs_stats st;
	if (vecfs_config_get(v, &c) || c.auto_build == 0)
		return;
	pthread_mutex_lock(&v->stat_mu);
	int busy = v->auto_running || v->closing;
	pthread_mutex_unlock(&v->stat_mu);
	if (busy)
		return;
	vf_txn *txn;
	if (vf_read_begin(v->store, &txn))
		return;
	vf_counters cnt;
	int rc = vf_load_counters(txn, v->store, &cnt);
	uint64_t active = vf_load_active(txn, v->store);
	vf_read_end(v->store, txn);
	(void)st;
	if (rc || active || cnt.live < c.auto_build)
		return;
	pthread_mutex_lock(&v->stat_mu);
	if (!v->auto_running && !v->closing &&
	    vf_thread_start(&v->auto_thread, auto_run, v) == 0)
		v->auto_running = 1;
	pthread_mutex_unlock(&v->stat_mu);
}
