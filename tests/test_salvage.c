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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "keys.h"
#include "record.h"
#include "testutil.h"

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

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_damaged_records, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_damaged_key_entry, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_damaged_postings, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_build_skips_damaged, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_rebalance_with_damage, fx_setup, fx_teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
