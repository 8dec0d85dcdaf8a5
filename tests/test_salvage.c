/*
 * test_salvage.c - damaged values in the store's file: bytes flipped in
 * record values, key entries, every column of a posting block and a delta
 * posting, right in data.mdb.  verify names the damage, a delete of a
 * damaged record works, and vecfs_salvage() leaves a store that verify
 * passes, with every undamaged record still found.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <pthread.h>
#include <time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "handle.h"
#include "keys.h"
#include "record.h"
#include "testutil.h"
#include "maint/maint.h"
#include "write/write.h"

#define N 300
#define D 16

typedef struct world {
	fixture *f;
	dataset ds;
	unsigned char alive[N];
	char lost[8][32];
	int nlost;
} world;

static void world_open(world *w)
{
	w->f->v = fx_open(w->f, NULL);
}

/* Flip one byte at `off` of every copy of val[0..len) in data.mdb (old
 * copies in free pages too), with the store closed; those followed by
 * after[0..alen) only, when after is set.  Returns how many. */
static int flip_in_file(world *w, const void *val, size_t len, size_t off,
			const void *after, size_t alen)
{
	char path[128];
	fx_close(w->f);
	snprintf(path, sizeof path, "%s/data.mdb", w->f->dir);
	FILE *fp = fopen(path, "r+b");
	assert_non_null(fp);
	fseek(fp, 0, SEEK_END);
	long sz = ftell(fp);
	uint8_t *buf = malloc((size_t)sz);
	assert_non_null(buf);
	rewind(fp);
	assert_int_equal(fread(buf, 1, (size_t)sz, fp), (size_t)sz);
	int n = 0;
	for (uint8_t *p = buf; (p = memmem(p, (size_t)(buf + sz - p), val, len));
	     p++) {
		if (after && (p + len + alen > buf + sz || memcmp(p + len, after, alen)))
			continue;
		p[off] ^= 0x5a;
		n++;
	}
	rewind(fp);
	assert_int_equal(fwrite(buf, 1, (size_t)sz, fp), (size_t)sz);
	fclose(fp);
	free(buf);
	world_open(w);
	return n;
}

/* A copy of the value of key k in family dbi. */
static uint8_t *value_copy(vecfs *v, vf_dbi dbi, const void *k, size_t kl, size_t *len)
{
	vf_txn *txn;
	vf_val d;
	assert_int_equal(vf_read_begin(v->store, &txn), 0);
	assert_int_equal(vf_get(txn, dbi, k, kl, &d), 0);
	uint8_t *c = malloc(d.len);
	memcpy(c, d.data, d.len);
	*len = d.len;
	vf_read_end(v->store, txn);
	return c;
}

static uint64_t id_of(vecfs *v, const char *key)
{
	vf_txn *txn;
	uint64_t id;
	assert_int_equal(vf_read_begin(v->store, &txn), 0);
	assert_int_equal(vf_keys_get(txn, v->store, key, strlen(key), &id), 0);
	vf_read_end(v->store, txn);
	return id;
}

/* The first posting value of `kind` in the active generation. */
static uint8_t *posting_copy(vecfs *v, int kind, size_t *len)
{
	vf_txn *txn;
	vf_cursor *cur;
	vf_val k, d;
	uint8_t p[8], *c = NULL;
	vf_be64(p, vecfs_active(v));
	assert_int_equal(vf_read_begin(v->store, &txn), 0);
	assert_int_equal(vf_cursor_open(txn, v->store->postings, &cur), 0);
	for (int rc = vf_cursor_prefix(cur, p, 8, &k, &d, VF_SEEK); rc == 0;
	     rc = vf_cursor_prefix(cur, p, 8, &k, &d, VF_NEXT))
		if (vf_postkey_kind(k.data) == kind) {
			c = malloc(d.len);
			memcpy(c, d.data, d.len);
			*len = d.len;
			break;
		}
	vf_cursor_close(cur);
	vf_read_end(v->store, txn);
	assert_non_null(c);
	return c;
}

static void expect_verify(vecfs *v, int ok, const char *word)
{
	char msg[512] = "";
	int rc = vecfs_verify(v, msg, sizeof msg);
	if ((rc == 0) != ok || (word && !strstr(msg, word)))
		print_message("%s\n", msg);
	assert_int_equal(rc == 0, ok);
	if (word)
		assert_non_null(strstr(msg, word));
}

static void on_lost(void *arg, const char *key, size_t keylen)
{
	world *w = arg;
	assert_true(w->nlost < 8);
	snprintf(w->lost[w->nlost++], sizeof w->lost[0], "%.*s", (int)keylen, key);
}

/* Every live row is found by key and by an exact query for its vector. */
static void check_all(world *w)
{
	vecfs *v = w->f->v;
	uint64_t live = 0;
	for (size_t i = 0; i < N; i++) {
		char key[32];
		float got[D];
		uint32_t dim;
		snprintf(key, sizeof key, "k%zu", i);
		int rc = vecfs_get(v, key, strlen(key), got, D, &dim, NULL, 0, NULL);
		if (!w->alive[i]) {
			assert_int_equal(rc, -ENOENT);
			continue;
		}
		live++;
		assert_int_equal(rc, 0);
		assert_memory_equal(got, w->ds.x + i * D, sizeof got);
		vecfs_results *r = search1(v, w->ds.x + i * D, D, 1, 1);
		assert_int_equal(r->count[0], 1);
		assert_string_equal(r->hits[0][0].key, key);
		vecfs_results_free(r);
	}
	assert_int_equal(stats(v).records, live);
	for (int q = 0; q < 5; q++) {
		vecfs_results *r = search1(v, w->ds.x + (size_t)q * 37 * D, D, 10, 0);
		check_hits(r->hits[0], r->count[0], VECFS_L2, w->ds.x, N, D, w->alive, "k",
			   w->ds.x + (size_t)q * 37 * D);
		vecfs_results_free(r);
	}
}

static vecfs_salvage_info salvage(world *w)
{
	vecfs_salvage_info info;
	char err[256] = "";
	w->nlost = 0;
	int rc = vecfs_salvage(w->f->v, on_lost, w, &info, err, sizeof err);
	if (rc)
		print_message("salvage: %s\n", err);
	assert_int_equal(rc, 0);
	expect_verify(w->f->v, 1, NULL);
	check_all(w);
	return info;
}

static void world_make(world *w, fixture *f)
{
	memset(w, 0, sizeof *w);
	w->f = f;
	ds_make(&w->ds, 5, N, D, 6);
	world_open(w);
	set_config(f->v, D, VECFS_L2);
	vecfs_config c;
	char err[256];
	assert_int_equal(vecfs_config_get(f->v, &c), 0);
	c.nlist = 4;
	c.compact_deltas = 1000000;
	c.rebalance_ratio = 0;
	assert_int_equal(vecfs_config_set(f->v, &c, err, sizeof err), 0);
	put_range(f->v, w->ds.x, 0, N, D, "k");
	memset(w->alive, 1, N);
	build(f->v, 1);
}

/* A record that fails its checksum: verify says damaged, a delete removes
 * it, salvage removes others and reports their keys. */
static void test_damaged_records(void **state)
{
	world w;
	world_make(&w, *state);
	size_t len;
	const char *victims[] = {"k5", "k6", "k7"};
	for (int i = 0; i < 3; i++) {
		uint64_t id = id_of(w.f->v, victims[i]);
		vf_key64 k = vf_key_u64(id);
		uint8_t *val = value_copy(w.f->v, w.f->v->store->records, k.b, sizeof k.b, &len);
		assert_true(flip_in_file(&w, val, len, VF_RECORD_HDR + 4, NULL, 0) >= 1);
		free(val);
	}
	expect_verify(w.f->v, 0, "damaged");
	assert_int_equal(vecfs_delete(w.f->v, "k5", 2), 0);
	w.alive[5] = 0;
	w.alive[6] = w.alive[7] = 0;
	vecfs_salvage_info info = salvage(&w);
	assert_int_equal(info.records_dropped, 2);
	assert_int_equal(info.keys_lost, 2);
	assert_int_equal(w.nlost, 2);
	assert_string_equal(w.lost[0], "k6");
	assert_string_equal(w.lost[1], "k7");
	ds_free(&w.ds);
}

/* A key entry whose record id was damaged: the record is intact, so its
 * key is made again and nothing is lost. */
static void test_damaged_key_entry(void **state)
{
	world w;
	world_make(&w, *state);
	uint64_t id = id_of(w.f->v, "k42");
	assert_true(flip_in_file(&w, "k42", 3, 3 + 7, &id, 8) >= 1);
	expect_verify(w.f->v, 0, NULL);
	vecfs_salvage_info info = salvage(&w);
	assert_int_equal(info.keys_lost, 0);
	assert_int_equal(info.keys_restored, 1);
	assert_int_equal(w.nlost, 0);
	ds_free(&w.ds);
}

/* A byte flipped in each column of a posting block, in its header and in a
 * delta posting: the generation is dropped, every row is still found. */
static void test_damaged_postings(void **state)
{
	world w;
	world_make(&w, *state);
	for (int col = -2; col < VF_NCOL; col++) {
		if (col > -2)
			build(w.f->v, 1);
		size_t len, off;
		uint8_t *val;
		if (col == -2) { /* a delta posting: an update after the build */
			float x[D];
			memcpy(x, w.ds.x + 9 * D, sizeof x);
			x[0] += 0.5f;
			assert_int_equal(put_one(w.f->v, "k9", x, D), 0);
			memcpy(w.ds.x + 9 * D, x, sizeof x);
			val = posting_copy(w.f->v, VF_PK_DELTA, &len);
			off = len / 2;
		} else {
			vf_block b;
			val = posting_copy(w.f->v, VF_PK_BLOCK, &len);
			assert_int_equal(vf_block_open(val, len, &b), 0);
			/* -1: the header, which holds the column checksums */
			off = col < 0 ? 24 : (size_t)(b.col[col] - b.base) + b.col_len[col] / 2;
		}
		assert_true(flip_in_file(&w, val, len, off, NULL, 0) >= 1);
		free(val);
		expect_verify(w.f->v, 0, NULL);
		vecfs_salvage_info info = salvage(&w);
		assert_true(info.generations_dropped >= 1);
		assert_int_equal(info.keys_lost, 0);
		assert_int_equal(vecfs_active(w.f->v), 0);
	}
	/* PASS2 again, at its factors (the end of a vector's record) */
	build(w.f->v, 1);
	size_t len;
	vf_block b;
	uint8_t *val = posting_copy(w.f->v, VF_PK_BLOCK, &len);
	assert_int_equal(vf_block_open(val, len, &b), 0);
	size_t off = (size_t)(b.col[VF_COL_PASS2] - b.base) +
		     (size_t)(b.bits - 1) * vf_plane_bytes(b.pdim) + 4;
	assert_true(flip_in_file(&w, val, len, off, NULL, 0) >= 1);
	free(val);
	salvage(&w);
	ds_free(&w.ds);
}

/* Flip a byte at offset off of the record of key, in the file. */
static void damage_record(world *w, const char *key, size_t off)
{
	size_t len;
	uint64_t id = id_of(w->f->v, key);
	vf_key64 k = vf_key_u64(id);
	uint8_t *val = value_copy(w->f->v, w->f->v->store->records, k.b, sizeof k.b, &len);
	assert_true(flip_in_file(w, val, len, off, NULL, 0) >= 1);
	free(val);
}

/* A build leaves a damaged record out and reports its key, rather than
 * fail; salvage then removes it. */
static void test_build_skips_damaged(void **state)
{
	world w;
	world_make(&w, *state);
	damage_record(&w, "k11", VF_RECORD_HDR + 8);
	vecfs_set_lost_fn(w.f->v, on_lost, &w);
	uint64_t gen;
	char err[256] = "";
	int rc = vecfs_build(w.f->v, 1, &gen, NULL, NULL, err, sizeof err);
	if (rc)
		print_message("build: %s\n", err);
	assert_int_equal(rc, 0);
	assert_int_equal(w.nlost, 1);
	assert_string_equal(w.lost[0], "k11");
	vecfs_gen_info gi;
	assert_int_equal(vecfs_gen_info_get(w.f->v, gen, &gi), 0);
	assert_int_equal(gi.covered, N - 1);
	expect_verify(w.f->v, 0, "damaged");
	w.alive[11] = 0;
	vecfs_salvage_info info = salvage(&w);
	assert_int_equal(info.keys_lost, 1);
	assert_string_equal(w.lost[0], "k11");
	ds_free(&w.ds);
}

/* A rebalance of a generation that holds a damaged record's posting works:
 * the record is left out of its calibration sample (its posting keeps the
 * centroid's code, as a stale one does) rather than fail the rebalance. */
static void test_rebalance_with_damage(void **state)
{
	world w;
	world_make(&w, *state);
	damage_record(&w, "k12", VF_RECORD_HDR + 8);
	uint64_t before = vecfs_active(w.f->v), gen = 0;
	char err[256] = "";
	int rc = vecfs_rebalance(w.f->v, 1, &gen, NULL, NULL, err, sizeof err);
	if (rc)
		print_message("rebalance: %s\n", err);
	assert_int_equal(rc, 0);
	assert_true(gen != 0 && gen != before && vecfs_active(w.f->v) == gen);
	w.alive[12] = 0;
	vecfs_salvage_info info = salvage(&w);
	assert_int_equal(info.keys_lost, 1);
	assert_string_equal(w.lost[0], "k12");
	ds_free(&w.ds);
}


/* A posting planted in the active generation as a write puts one: record
 * id's posting of version seq with vector vec and key `key` (the record's
 * own posting stays where it is). */
typedef struct plant {
	vecfs *v;
	uint64_t id, seq;
	const float *vec;
	const char *key;
} plant;

static int plant_fn(vf_txn *txn, void *arg)
{
	plant *p = arg;
	vf_gen *g;
	vf_posting_writer w;
	int rc = vf_gen_get(p->v, txn, vf_load_active(txn, p->v->store), &g);
	if (rc)
		return rc;
	if ((rc = vf_pw_init(&w, p->v, g)) == 0) {
		rc = vf_pw_apply(&w, txn, p->id, p->seq, p->vec, p->key, (uint32_t)strlen(p->key), 0,
				 NULL, NULL);
		if (rc == 0)
			rc = vf_pw_flush(&w, txn);
		vf_pw_free(&w);
	}
	vf_gen_put(p->v, g);
	return rc;
}

/* Record id and version of a key. */
static void record_of(vecfs *v, const char *key, uint64_t *id, uint64_t *seq)
{
	vf_txn *txn;
	vf_val d;
	vf_record r;
	assert_int_equal(vf_read_begin(v->store, &txn), 0);
	assert_int_equal(vf_keys_get(txn, v->store, key, strlen(key), id), 0);
	assert_int_equal(vf_records_get(txn, v->store, *id, &d), 0);
	assert_int_equal(vf_record_decode(d.data, d.len, &r), 0);
	*seq = r.seq;
	vf_read_end(v->store, txn);
}

/* ANN at x probing every cluster: `key` first, no key twice, no `gone`. */
static void found_once(vecfs *v, const float *x, const char *key, const char *gone)
{
	vecfs_query_opts o = {.k = 5, .nprobe = 100000};
	vecfs_results *r = search_opts(v, x, 1, D, &o);
	assert_true(r->count[0] > 0);
	assert_string_equal(r->hits[0][0].key, key);
	for (size_t h = 0; h < r->count[0]; h++) {
		assert_string_not_equal(r->hits[0][h].key, gone);
		for (size_t i = 0; i < h; i++)
			assert_string_not_equal(r->hits[0][i].key, r->hits[0][h].key);
	}
	vecfs_results_free(r);
}

/* Postings that disagree with their records (an older version of a record
 * posted beside its own posting, in another cluster; a posting of a record
 * that does not exist): verify names them, compaction and rebalance refuse
 * to fold or copy them (EIO and a line, nothing changed), salvage posts the
 * records again from the records, after which all of it passes. */
static void test_disagreeing_postings(void **state)
{
	fixture *f = *state;
	vecfs *v = f->v = fx_open(f, NULL);
	dataset ds;
	char err[256] = "", msg[512];
	set_config(v, D, VECFS_L2);
	ds_make(&ds, 5, N, D, 10);
	put_range(v, ds.x, 0, N, D, "r");
	build(v, 1);
	uint64_t id5, seq5, id7, seq7;
	size_t gens0, ngen;
	record_of(v, "r5", &id5, &seq5);
	record_of(v, "r7", &id7, &seq7);
	const float *far = ds.x + (size_t)200 * D; /* r200's place, not r5's */
	plant older = {v, id5, seq5 - 1, far, "r5"};
	plant ghost = {v, id7 + 100000, 1, ds.x + (size_t)7 * D, "ghost"};
	assert_int_equal(vf_write(v->store, plant_fn, &older), 0);
	assert_int_equal(vf_write(v->store, plant_fn, &ghost), 0);
	assert_int_equal(vecfs_verify(v, msg, sizeof msg), -EIO);
	assert_int_equal(vecfs_gen_list(v, NULL, 0, &gens0), 0);

	assert_int_equal(vecfs_compact(v, NULL, err, sizeof err), -EIO);
	assert_non_null(strstr(err, "salvage repairs it"));
	err[0] = 0;
	assert_int_equal(vecfs_rebalance(v, 1, NULL, NULL, NULL, err, sizeof err), -EIO);
	assert_non_null(strstr(err, "salvage repairs it"));
	assert_int_equal(vecfs_gen_list(v, NULL, 0, &ngen), 0);
	assert_int_equal(ngen, gens0); /* no generation made of it */
	assert_int_equal(vecfs_verify(v, msg, sizeof msg), -EIO);

	vecfs_salvage_info si;
	assert_int_equal(vecfs_salvage(v, NULL, NULL, &si, err, sizeof err), 0);
	assert_int_equal(si.postings_repaired, 2);
	assert_int_equal(si.records_dropped, 0);
	assert_int_equal(si.generations_dropped, 0);
	int rc = vecfs_verify(v, msg, sizeof msg);
	if (rc)
		fail_msg("after salvage: %s", msg);
	found_once(v, ds.x + (size_t)5 * D, "r5", "ghost");
	found_once(v, ds.x + (size_t)7 * D, "r7", "ghost");
	found_once(v, far, "r200", "ghost");
	assert_int_equal(vecfs_compact(v, NULL, err, sizeof err), 0);
	assert_int_equal(vecfs_rebalance(v, 1, NULL, NULL, NULL, err, sizeof err), 0);
	if ((rc = vecfs_verify(v, msg, sizeof msg)))
		fail_msg("after compact and rebalance: %s", msg);
	found_once(v, ds.x + (size_t)5 * D, "r5", "ghost");
	ds_free(&ds);
}

/* The lines the store's owner heard (vecfs_set_notice_fn). */
typedef struct heard_lines {
	pthread_mutex_t mu;
	char text[2048];
	int n;
} heard_lines;

static void hear(void *arg, const char *line)
{
	heard_lines *h = arg;
	pthread_mutex_lock(&h->mu);
	size_t len = strlen(h->text);
	snprintf(h->text + len, sizeof h->text - len, "%s\n", line);
	h->n++;
	pthread_mutex_unlock(&h->mu);
}

/* A compaction in the background that meets a posting which disagrees
 * with its record refuses it, as in the foreground, and the owner hears
 * why (the daemon writes it to errors): not silence. */
static void test_background_refusal_heard(void **state)
{
	fixture *f = *state;
	vecfs *v = f->v = fx_open(f, NULL);
	dataset ds;
	char msg[512];
	heard_lines h = {.mu = PTHREAD_MUTEX_INITIALIZER};
	vecfs_set_notice_fn(v, hear, &h);
	set_config(v, D, VECFS_L2);
	ds_make(&ds, 7, N, D, 10);
	put_range(v, ds.x, 0, N, D, "r");
	build(v, 1);
	uint64_t id5, seq5;
	record_of(v, "r5", &id5, &seq5);
	plant older = {v, id5, seq5 - 1, ds.x + (size_t)200 * D, "r5"};
	assert_int_equal(vf_write(v->store, plant_fn, &older), 0);
	assert_int_equal(vecfs_verify(v, msg, sizeof msg), -EIO);
	vf_maint_kick(v, VF_MAINT_NOW);
	for (int i = 0; i < 2000; i++) { /* up to 20 s */
		pthread_mutex_lock(&h.mu);
		int n = h.n;
		pthread_mutex_unlock(&h.mu);
		if (n && !vf_maint_busy(v))
			break;
		struct timespec ts = {0, 10000000};
		nanosleep(&ts, NULL);
	}
	pthread_mutex_lock(&h.mu);
	if (!strstr(h.text, "compaction in the background failed: ") ||
	    !strstr(h.text, "salvage repairs it"))
		fail_msg("heard: '%s'", h.text);
	pthread_mutex_unlock(&h.mu);
	vecfs_set_notice_fn(v, NULL, NULL);
	ds_free(&ds);
}

/* Record key rewritten as version `seq`, with no change logged: the
 * generation's posting of it disagrees with it. */
typedef struct rewrite {
	vecfs *v;
	const char *key;
	uint64_t seq;
} rewrite;

static int rewrite_fn(vf_txn *txn, void *arg)
{
	rewrite *w = arg;
	vf_store *s = w->v->store;
	uint64_t id;
	vf_val d;
	vf_record r;
	int rc = vf_keys_get(txn, s, w->key, strlen(w->key), &id);
	if (rc || (rc = vf_records_get(txn, s, id, &d)) || (rc = vf_record_decode(d.data, d.len, &r)))
		return rc;
	size_t len = vf_record_size(r.dim, r.kind, r.keylen, r.plen);
	uint8_t *buf = malloc(len);
	float *vec = malloc(sizeof(float) * r.dim);
	char *key = malloc(r.keylen);
	if (!buf || !vec || !key) {
		rc = -ENOMEM;
	} else {
		vf_record_floats(&r, vec);
		memcpy(key, r.key, r.keylen);
		vf_record_encode(buf, w->seq, r.dim, r.kind, vec, key, r.keylen, NULL, 0);
		rc = vf_records_put(txn, s, id, buf, len);
	}
	free(buf);
	free(vec);
	free(key);
	return rc;
}

/* A posting block whose posting disagrees with its record, in a cluster a
 * compaction leaves alone: a rebalance refuses to copy it (EIO, the record
 * named, no generation made); salvage repairs it and the rebalance then
 * passes. */
static void test_rebalance_refuses_disagreeing_blocks(void **state)
{
	fixture *f = *state;
	vecfs *v = f->v = fx_open(f, NULL);
	dataset ds;
	char err[256] = "", msg[512], want[96];
	set_config(v, D, VECFS_L2);
	ds_make(&ds, 6, N, D, 10);
	put_range(v, ds.x, 0, N, D, "r");
	uint64_t before = build(v, 1), id9, seq9;
	size_t ngen;
	record_of(v, "r9", &id9, &seq9);
	rewrite rw = {v, "r9", seq9 - 1};
	assert_int_equal(vf_write(v->store, rewrite_fn, &rw), 0);
	assert_int_equal(vecfs_verify(v, msg, sizeof msg), -EIO);
	assert_int_equal(vecfs_rebalance(v, 1, NULL, NULL, NULL, err, sizeof err), -EIO);
	snprintf(want, sizeof want, "record id %llu has a posting that does not match the record "
		 "(salvage repairs it)", (unsigned long long)id9);
	if (!strstr(err, want))
		fail_msg("rebalance said: %s", err);
	assert_int_equal(vecfs_gen_list(v, NULL, 0, &ngen), 0);
	assert_int_equal(ngen, 1);
	assert_int_equal(vecfs_active(v), before);

	vecfs_salvage_info si;
	assert_int_equal(vecfs_salvage(v, NULL, NULL, &si, err, sizeof err), 0);
	assert_int_equal(si.postings_repaired, 1);
	int rc = vecfs_verify(v, msg, sizeof msg);
	if (rc)
		fail_msg("after salvage: %s", msg);
	uint64_t gen = 0;
	assert_int_equal(vecfs_rebalance(v, 1, &gen, NULL, NULL, err, sizeof err), 0);
	assert_true(gen != before && vecfs_active(v) == gen);
	if ((rc = vecfs_verify(v, msg, sizeof msg)))
		fail_msg("after rebalance: %s", msg);
	found_once(v, ds.x + (size_t)9 * D, "r9", "ghost");
	ds_free(&ds);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_damaged_records, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_damaged_key_entry, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_damaged_postings, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_disagreeing_postings, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_rebalance_refuses_disagreeing_blocks, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_background_refusal_heard, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_build_skips_damaged, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_rebalance_with_damage, fx_setup, fx_teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
