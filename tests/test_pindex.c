/*
 * test_pindex.c - the payload index: the terms a payload gives, the
 * index kept with every write (puts, overwrites, deletes), the planner's
 * sets (a superset of the matches, narrow when the filter is selective),
 * the matches it leads to equal to a pass over every record's payload, an
 * index built for a store that had none, and a damaged index found by
 * verify and made anew by salvage.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "query/filter.h"
#include "query/filtered.h"
#include "handle.h"
#include "query/payload_index.h"
#include "record.h"
#include "testutil.h"

/* ------------------------------------------------------------ terms */

typedef struct got {
	char text[4096];
	size_t n;
} got;

static int collect(const vf_term *t, void *ctx)
{
	got *g = ctx;
	size_t o = strlen(g->text);
	o += (size_t)snprintf(g->text + o, sizeof g->text - o, "%.*s=", (int)t->plen, t->path);
	if (t->type == VF_T_NUM)
		snprintf(g->text + o, sizeof g->text - o, "#%g;", t->num);
	else if (t->type == VF_T_STR)
		snprintf(g->text + o, sizeof g->text - o, "s%.*s;", (int)t->slen, t->s);
	else
		snprintf(g->text + o, sizeof g->text - o, "%c;", t->type);
	g->n++;
	return 0;
}

static int terms(const char *payload, got *g)
{
	memset(g, 0, sizeof *g);
	return vf_payload_terms(payload, strlen(payload), collect, g);
}

static void test_terms(void **state)
{
	(void)state;
	got g;
	assert_int_equal(terms("{\"a\": {\"b\": [1, \"x\", {\"c\": 2}, [3]]}, \"t\": true, "
			       "\"n\": null, \"f\": false, \"s\": \"\\u00e9\\\"\", \"z\": -0}", &g), 0);
	assert_string_equal(g.text, "a.b=#1;a.b=sx;t=t;n=n;f=f;s=s\xc3\xa9\";z=#0;");
	/* not an object, or nothing: no term, and nothing can match a field */
	assert_int_equal(terms("[1, 2]", &g), 0);
	assert_int_equal(g.n, 0);
	assert_int_equal(terms("\"x\"", &g), 0);
	assert_int_equal(terms("{}", &g), 0);
	assert_int_equal(g.n, 0);
	/* a key twice: both terms */
	assert_int_equal(terms("{\"k\": 1, \"k\": 2}", &g), 0);
	assert_string_equal(g.text, "k=#1;k=#2;");
	/* partial: not JSON, a string too long or with a NUL, too many terms,
	 * too deep, a path too long or starting with 0xff, a number too long */
	assert_int_equal(terms("{\"a\": 1, \"b\": ", &g), VF_TERMS_PARTIAL);
	assert_int_equal(terms("{\"a\": tru}", &g), VF_TERMS_PARTIAL);
	assert_int_equal(terms("{\"a\": \"x\\u0000y\"}", &g), VF_TERMS_PARTIAL);
	char big[8192];
	int o = snprintf(big, sizeof big, "{\"a\": \"");
	memset(big + o, 'q', VF_TERM_STR_MAX + 1);
	snprintf(big + o + VF_TERM_STR_MAX + 1, sizeof big - (size_t)o - VF_TERM_STR_MAX - 1, "\"}");
	assert_int_equal(terms(big, &g), VF_TERMS_PARTIAL);
	big[o + VF_TERM_STR_MAX] = '"'; /* exactly the longest */
	big[o + VF_TERM_STR_MAX + 1] = '}';
	big[o + VF_TERM_STR_MAX + 2] = 0;
	assert_int_equal(terms(big, &g), 0);
	o = snprintf(big, sizeof big, "{\"a\": [");
	for (int i = 0; i < VF_TERMS_MAX; i++)
		o += snprintf(big + o, sizeof big - (size_t)o, "%d, ", i);
	snprintf(big + o, sizeof big - (size_t)o, "99]}");
	assert_int_equal(terms(big, &g), VF_TERMS_PARTIAL);
	assert_int_equal(g.n, VF_TERMS_MAX);
	o = 0;
	for (int i = 0; i < VF_TERM_DEPTH; i++)
		o += snprintf(big + o, sizeof big - (size_t)o, "{\"d\": ");
	o += snprintf(big + o, sizeof big - (size_t)o, "1");
	for (int i = 0; i < VF_TERM_DEPTH; i++)
		o += snprintf(big + o, sizeof big - (size_t)o, "}");
	assert_int_equal(terms(big, &g), 0); /* VF_TERM_DEPTH objects: indexed */
	assert_string_equal(g.text, "d.d.d.d.d.d.d.d=#1;");
	memmove(big + 6, big, strlen(big) + 1);
	memcpy(big, "{\"d\": ", 6);
	strcat(big, "}");
	assert_int_equal(terms(big, &g), VF_TERMS_PARTIAL);
	o = snprintf(big, sizeof big, "{\"");
	memset(big + o, 'p', VF_TERM_PATH_MAX + 1);
	snprintf(big + o + VF_TERM_PATH_MAX + 1, 16, "\": 1}");
	assert_int_equal(terms(big, &g), VF_TERMS_PARTIAL);
	assert_int_equal(terms("{\"\\u00ff\": 1}", &g), 0); /* UTF-8 c3 bf: fine */
	o = snprintf(big, sizeof big, "{\"a\": 1");
	memset(big + o, '0', 130);
	snprintf(big + o + 130, 8, "}");
	assert_int_equal(terms(big, &g), VF_TERMS_PARTIAL);
}

/* ------------------------------------------------------------ the index */

#define D 4

/* A payload of a mix the planner meets: numbers, strings, words, arrays,
 * nested objects, keys twice, text that is not JSON, long strings. */
static void random_payload(rng *r, char *buf, size_t n)
{
	static const char *const words[] = {"red", "green", "blue", "r\\u00e9d", "", "a\\\"b"};
	int o = snprintf(buf, n, "{");
	uint64_t x = rng_next(r);
	if (x % 11 == 0) { /* not JSON */
		snprintf(buf, n, "{\"a\": %d, \"b\": ", (int)(x % 7));
		return;
	}
	if (x % 5 != 0) {
		if (x % 4 == 0)
			o += snprintf(buf + o, n - (size_t)o, "\"a\": [%d, %d, \"%d\"], ",
				      (int)(rng_next(r) % 20), (int)(rng_next(r) % 20),
				      (int)(rng_next(r) % 20));
		else if (x % 7 == 0)
			o += snprintf(buf + o, n - (size_t)o, "\"a\": %.2f, ", rng_unif(r) * 20);
		else
			o += snprintf(buf + o, n - (size_t)o, "\"a\": %d, ", (int)(rng_next(r) % 20));
	}
	if (x % 3 != 0)
		o += snprintf(buf + o, n - (size_t)o, "\"b\": \"%s\", ", words[rng_next(r) % 6]);
	if (x % 13 == 0)
		o += snprintf(buf + o, n - (size_t)o, "\"b\": true, ");
	if (x % 17 == 0)
		o += snprintf(buf + o, n - (size_t)o, "\"b\": \"%0300d\", ", 7);
	o += snprintf(buf + o, n - (size_t)o, "\"c\": {\"d\": %d, \"e\": null}, ",
		      (int)(rng_next(r) % 100));
	snprintf(buf + o, n - (size_t)o, "\"i\": %d}", (int)(x % 1000));
}

/* A filter over those fields, built from a grammar. */
static int random_filter(rng *r, char *buf, size_t n, int depth)
{
	static const char *const vals[] = {"3", "7", "7.5", "\"red\"", "\"r\\u00e9d\"", "\"\"",
					   "true", "null", "\"3\"", "-1", "19"};
	static const char *const paths[] = {"a", "b", "c.d", "i", "c.e", "c"};
	uint64_t x = rng_next(r);
	const char *p = paths[x % 6], *v = vals[rng_next(r) % 11];
	int o = 0;
	switch (depth < 2 ? x % 12 : x % 7) {
	case 0:
	case 1:
		return snprintf(buf, n, "{\"%s\": %s}", p, v);
	case 2:
		return snprintf(buf, n, "{\"%s\": {\"$in\": [%s, %s]}}", p, v,
				vals[rng_next(r) % 11]);
	case 3:
		return snprintf(buf, n, "{\"%s\": {\"$gt\": %s}}", p, v);
	case 4:
		return snprintf(buf, n, "{\"%s\": {\"$lte\": %s, \"$gte\": %s}}", p, v,
				vals[rng_next(r) % 11]);
	case 5:
		return snprintf(buf, n, "{\"%s\": {\"$lt\": %s}}", p, v);
	case 6:
		return snprintf(buf, n, "{\"%s\": {\"$ne\": %s}}", p, v);
	case 7:
	case 8:
	case 9:
	case 10: {
		const char *op = x % 12 == 10 ? "$not" : x % 2 ? "$and" : "$or";
		if (x % 12 == 10) {
			o = snprintf(buf, n, "{\"$not\": ");
			o += random_filter(r, buf + o, n - (size_t)o, depth + 1);
			return o + snprintf(buf + o, n - (size_t)o, "}");
		}
		o = snprintf(buf, n, "{\"%s\": [", op);
		int kids = 1 + (int)(rng_next(r) % 3);
		for (int k = 0; k < kids; k++) {
			o += random_filter(r, buf + o, n - (size_t)o, depth + 1);
			if (k + 1 < kids)
				o += snprintf(buf + o, n - (size_t)o, ", ");
		}
		return o + snprintf(buf + o, n - (size_t)o, "]}");
	}
	default:
		return snprintf(buf, n, "{\"i\": {\"$gte\": %d, \"$lt\": %d}, \"%s\": %s}",
				(int)(x % 900), (int)(x % 900) + 10, p, v);
	}
}

#define PAY_MAX 1024

typedef struct model {
	size_t n;
	char (*pay)[PAY_MAX];
	unsigned char *alive;
} model;

static void put_rows(vecfs *v, model *m, rng *r, size_t first, size_t count)
{
	vecfs_row *rows = calloc(count, sizeof *rows);
	char (*keys)[16] = calloc(count, sizeof *keys);
	float *x = calloc(count * D, sizeof(float));
	assert_true(rows && keys && x);
	for (size_t i = 0; i < count; i++) {
		size_t k = first + i;
		snprintf(keys[i], sizeof keys[i], "p%zu", k);
		for (int j = 0; j < D; j++)
			x[i * D + j] = (float)rng_gauss(r);
		if (rng_next(r) % 9 == 0) {
			m->pay[k][0] = 0; /* no payload */
		} else {
			random_payload(r, m->pay[k], sizeof m->pay[k]);
			rows[i].payload = m->pay[k];
			rows[i].payload_len = strlen(m->pay[k]);
		}
		m->alive[k] = 1;
		rows[i].key = keys[i];
		rows[i].keylen = strlen(keys[i]);
		rows[i].vec = x + i * D;
	}
	char err[256] = "";
	assert_int_equal(vecfs_put(v, rows, count, D, NULL, err, sizeof err), 0);
	free(rows);
	free(keys);
	free(x);
}

static long key_of(vf_txn *txn, vecfs *v, uint64_t id)
{
	vf_val d;
	vf_record r;
	assert_int_equal(vf_records_get(txn, v->store, id, &d), 0);
	assert_int_equal(vf_record_fields(d.data, d.len, &r), 0);
	char k[16] = "";
	memcpy(k, r.key, r.keylen < 15 ? r.keylen : 15);
	return key_index(k, "p");
}

typedef struct plan_tally {
	size_t filters, narrowed, all, candidates, matches; /* of those narrowed */
} plan_tally;

/* The filter's text: the planner's set holds every match, and the
 * filtered set (index or pass, as the store decides) is exactly them. */
static void check_filter(vecfs *v, model *m, const char *text, plan_tally *t)
{
	unsigned char *want = malloc(m->n), *seen = malloc(m->n);
	assert_true(want && seen);
	{
		vf_filter *f;
		assert_int_equal(vf_filter_compile(text, strlen(text), &f, NULL, 0), 0);
		size_t nwant = 0;
		for (size_t i = 0; i < m->n; i++)
			nwant += want[i] = m->alive[i] &&
					   vf_filter_match(f, m->pay[i][0] ? m->pay[i] : NULL,
							   strlen(m->pay[i]));
		vf_txn *txn;
		assert_int_equal(vf_read_begin(v->store, &txn), 0);
		uint64_t *ids;
		size_t n;
		int rc = vf_pidx_candidates(txn, v->store, f, SIZE_MAX, &ids, &n);
		assert_true(rc == 0 || rc == VF_PIDX_ALL);
		t->filters++;
		if (rc == 0) {
			t->narrowed++;
			t->candidates += n;
			t->matches += nwant;
			memset(seen, 0, m->n);
			for (size_t i = 0; i < n; i++) {
				if (i)
					assert_true(ids[i] > ids[i - 1]);
				vf_val d;
				if (vf_records_get(txn, v->store, ids[i], &d) == 0)
					seen[key_of(txn, v, ids[i])] = 1;
			}
			for (size_t i = 0; i < m->n; i++)
				if (want[i] && !seen[i])
					fail_msg("filter %s: p%zu (%s) matches but the index misses it",
						 text, i, m->pay[i]);
			free(ids);
		} else {
			t->all++;
		}
		vf_fset *s;
		char err[256];
		assert_int_equal(vf_fset_get(v, txn, text, strlen(text), &s, NULL, err, sizeof err), 0);
		memset(seen, 0, m->n);
		size_t nset = 0;
		for (size_t i = 0; i < m->n; i++)
			if (m->alive[i]) {
				/* the set by id: each live key's id */
				uint64_t id;
				char k[24];
				snprintf(k, sizeof k, "p%zu", i);
				assert_int_equal(vf_keys_get(txn, v->store, k, strlen(k), &id), 0);
				if (vf_fset_has(s, id)) {
					nset++;
					if (!want[i])
						fail_msg("filter %s: p%zu (%s) is in the set, no match", text,
							 i, m->pay[i]);
				}
			}
		if (nset != nwant || s->n != nwant)
			fail_msg("filter %s: %zu in the set (%zu counted), %zu match", text, nset, s->n,
				 nwant);
		vf_fset_put(v, s);
		vf_read_end(v->store, txn);
		vf_filter_free(f);
	}
	free(want);
	free(seen);
}

/* Each of nf random filters, as check_filter. */
static void check_filters(vecfs *v, model *m, rng *r, size_t nf, plan_tally *t)
{
	for (size_t q = 0; q < nf; q++) {
		char text[2048];
		random_filter(r, text, sizeof text, 0);
		check_filter(v, m, text, t);
	}
}

static void check_index(vecfs *v)
{
	vf_txn *txn;
	char err[256] = "";
	assert_int_equal(vf_read_begin(v->store, &txn), 0);
	int rc = vf_pidx_check(txn, v->store, err, sizeof err);
	vf_read_end(v->store, txn);
	if (rc)
		fail_msg("index check: %d %s", rc, err);
	char msg[512];
	rc = vecfs_verify(v, msg, sizeof msg);
	if (rc)
		fail_msg("%s", msg);
}

static void test_index_follows_writes(void **state)
{
	fixture *fx = *state;
	const size_t N = 3000;
	model m = {N, calloc(N, PAY_MAX), calloc(N, 1)};
	assert_true(m.pay && m.alive);
	rng r = {.s = 11};
	vecfs *v = fx_open(fx, NULL);
	set_config(v, D, VECFS_L2);
	plan_tally t = {0};
	put_rows(v, &m, &r, 0, 2000);
	check_index(v);
	check_filters(v, &m, &r, 150, &t);
	/* overwrites with new payloads (some with none), deletes, more rows */
	for (int round = 0; round < 3; round++) {
		for (size_t i = 0; i < 300; i++) {
			size_t k = rng_next(&r) % 2000;
			put_rows(v, &m, &r, k, 1);
		}
		for (size_t i = 0; i < 200; i++) {
			size_t k = rng_next(&r) % 2000;
			if (m.alive[k]) {
				char key[16];
				snprintf(key, sizeof key, "p%zu", k);
				del_key(v, key);
				m.alive[k] = 0;
			}
		}
		put_rows(v, &m, &r, 2000 + (size_t)round * 300, 300);
		check_index(v);
		check_filters(v, &m, &r, 100, &t);
	}
	build(v, 1); /* with a generation: the writes go on the same */
	put_rows(v, &m, &r, 0, 100);
	fx_close(fx);
	v = fx_open(fx, NULL);
	check_index(v);
	check_filters(v, &m, &r, 150, &t);
	print_message("%zu filters: %zu narrowed by the index (%zu candidates for %zu matches), "
		      "%zu by a pass\n", t.filters, t.narrowed, t.candidates, t.matches, t.all);
	/* the index must do the work for most filters of this grammar, and
	 * its sets must be near the matches, not the whole store */
	assert_true(t.narrowed * 2 > t.filters);
	assert_true(t.candidates < 3 * t.matches + 200 * t.narrowed);
	free(m.pay);
	free(m.alive);
}

/* Filters with strings and paths longer than any the index holds: the
 * records that have such values are marked, tested by every query; the
 * planner's keys for the filter stay within their bounds (a 500-byte
 * path once overflowed the key buffer). */
static void test_beyond_bounds(void **state)
{
	fixture *fx = *state;
	const size_t N = 12;
	model m = {N, calloc(N, PAY_MAX), calloc(N, 1)};
	assert_true(m.pay && m.alive);
	vecfs *v = fx_open(fx, NULL);
	set_config(v, D, VECFS_L2);
	char a255[256], a270[271], a300[301], path[601];
	memset(a255, 'a', 255), a255[255] = 0;
	memset(a270, 'a', 270), a270[270] = 0;
	memset(a300, 'a', 300), a300[300] = 0;
	memset(path, 'x', 600), path[600] = 0;
	const char *short_s[] = {"b", "m", "z", ""};
	vecfs_row rows[12];
	char keys[12][16];
	float x[12 * D];
	for (size_t i = 0; i < N; i++) {
		if (i < 4)
			snprintf(m.pay[i], PAY_MAX, "{\"s\": \"%s\"}", short_s[i]);
		else if (i == 4)
			snprintf(m.pay[i], PAY_MAX, "{\"s\": \"%s\"}", a255);
		else if (i == 5)
			snprintf(m.pay[i], PAY_MAX, "{\"s\": \"%sx\"}", a300);
		else if (i == 6)
			snprintf(m.pay[i], PAY_MAX, "{\"s\": \"%s\"}", a300);
		else if (i < 10)
			snprintf(m.pay[i], PAY_MAX, "{\"%s\": %zu, \"s\": \"m\"}", path, i - 7);
		else
			snprintf(m.pay[i], PAY_MAX, "{\"%.199s\": %zu}", path, i - 10);
		m.alive[i] = 1;
		snprintf(keys[i], sizeof keys[i], "p%zu", i);
		for (int j = 0; j < D; j++)
			x[i * D + j] = (float)(i + (size_t)j);
		rows[i] = (vecfs_row){.key = keys[i], .keylen = strlen(keys[i]), .vec = x + i * D,
				      .payload = m.pay[i], .payload_len = strlen(m.pay[i])};
	}
	char err[256] = "";
	assert_int_equal(vecfs_put(v, rows, N, D, NULL, err, sizeof err), 0);
	check_index(v);
	static const char *const forms[] = {
		"{\"s\": \"%2$sx\"}",
		"{\"s\": \"%2$s\"}",
		"{\"s\": {\"$gt\": \"%2$s\"}}",
		"{\"s\": {\"$gte\": \"%2$s\"}}",
		"{\"s\": {\"$lt\": \"%2$s\"}}",
		"{\"s\": {\"$lte\": \"%2$sx\"}}",
		"{\"s\": {\"$gte\": \"%3$s\", \"$lte\": \"b\"}}",
		"{\"s\": {\"$gt\": \"%4$s\", \"$lt\": \"%2$s\"}}",
		"{\"s\": {\"$in\": [\"%2$sx\", \"m\"]}}",
		"{\"%1$s\": 1}",
		"{\"%1$s\": {\"$gt\": 0}}",
		"{\"%1$s\": {\"$gte\": 0, \"$lt\": 2}}",
		"{\"%1$s\": {\"$in\": [0, 2]}}",
		"{\"$and\": [{\"%1$s\": 1}, {\"s\": \"m\"}]}",
		"{\"$or\": [{\"%1$s\": 1}, {\"s\": \"b\"}]}",
		"{\"%1$.199s\": 1}",
		"{\"%1$.199s\": {\"$lte\": 1}}",
		"{\"%1$.200s\": 1}",
		"{\"%1$.199s\": \"%2$s\"}",
		"{\"%1$.199s\": {\"$gt\": \"%2$s\"}}",
	};
	plan_tally t = {0};
	for (size_t i = 0; i < sizeof forms / sizeof forms[0]; i++) {
		char text[2048];
		snprintf(text, sizeof text, forms[i], path, a300, a270, a255);
		check_filter(v, &m, text, &t);
	}
	free(m.pay);
	free(m.alive);
}

/* A selective filter on a larger store: a small set, nowhere near the
 * store, and a search over it returns only matches. */
static void test_selective(void **state)
{
	fixture *fx = *state;
	const size_t N = 20000;
	vecfs *v = fx_open(fx, NULL);
	set_config(v, D, VECFS_L2);
	vecfs_row *rows = calloc(N, sizeof *rows);
	char (*keys)[16] = calloc(N, sizeof *keys);
	char (*pays)[48] = calloc(N, sizeof *pays);
	float *x = calloc(N * D, sizeof(float));
	rng r = {.s = 5};
	assert_true(rows && keys && pays && x);
	for (size_t i = 0; i < N; i++) {
		snprintf(keys[i], sizeof keys[i], "s%zu", i);
		snprintf(pays[i], sizeof pays[i], "{\"sel\": %zu, \"w\": %.3f}", i % 100,
			 (double)i / 1000);
		for (int j = 0; j < D; j++)
			x[i * D + j] = (float)rng_gauss(&r);
		rows[i] = (vecfs_row){.key = keys[i], .keylen = strlen(keys[i]), .vec = x + i * D,
				      .payload = pays[i], .payload_len = strlen(pays[i])};
	}
	char err[256];
	assert_int_equal(vecfs_put(v, rows, N, D, NULL, err, sizeof err), 0);
	build(v, 1);
	static const struct {
		const char *f;
		size_t want, most; /* matches; the index's set at most */
	} cases[] = {
		{"{\"sel\": 7}", 200, 200},
		{"{\"sel\": {\"$in\": [1, 2]}}", 400, 400},
		{"{\"w\": {\"$gte\": 3.5, \"$lt\": 3.6}}", 100, 100},
		{"{\"$and\": [{\"w\": {\"$gt\": 3.5}}, {\"w\": {\"$lte\": 3.6}}]}", 100, 100},
		{"{\"$and\": [{\"sel\": 7}, {\"w\": {\"$lt\": 5}}]}", 50, 200},
		{"{\"$or\": [{\"sel\": 7}, {\"sel\": 8}]}", 400, 400},
		{"{\"sel\": {\"$lt\": 0}}", 0, 0},
	};
	for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
		vf_filter *f;
		assert_int_equal(vf_filter_compile(cases[c].f, strlen(cases[c].f), &f, NULL, 0), 0);
		vf_txn *txn;
		uint64_t *ids;
		size_t n;
		assert_int_equal(vf_read_begin(v->store, &txn), 0);
		assert_int_equal(vf_pidx_candidates(txn, v->store, f, N / 8, &ids, &n), 0);
		vf_read_end(v->store, txn);
		free(ids);
		vf_filter_free(f);
		/* the index narrows each to its matches, or near them */
		if (n < cases[c].want || n > cases[c].most)
			fail_msg("%s: %zu from the index", cases[c].f, n);
		float q[D] = {0};
		vecfs_query_opts o = {.k = 10, .filter = cases[c].f, .filter_len = strlen(cases[c].f)};
		vecfs_results *res = search_opts(v, q, 1, D, &o);
		assert_int_equal(res->explain.filter_passed, cases[c].want);
		assert_int_equal(res->count[0], cases[c].want < 10 ? cases[c].want : 10);
		vecfs_results_free(res);
	}
	/* a filter the index cannot narrow ($ne) is found by a pass */
	vf_filter *f;
	const char *ne = "{\"sel\": {\"$ne\": 7}}";
	assert_int_equal(vf_filter_compile(ne, strlen(ne), &f, NULL, 0), 0);
	vf_txn *txn;
	uint64_t *ids;
	size_t n;
	assert_int_equal(vf_read_begin(v->store, &txn), 0);
	assert_int_equal(vf_pidx_candidates(txn, v->store, f, N / 8, &ids, &n), VF_PIDX_ALL);
	vf_read_end(v->store, txn);
	vf_filter_free(f);
	free(rows);
	free(keys);
	free(pays);
	free(x);
}

/* One write that puts a key several times, payloads changing, then none:
 * the index holds the last one's terms only (its changes are applied
 * sorted, at the end of the write). */
static void test_key_twice_in_one_write(void **state)
{
	fixture *fx = *state;
	vecfs *v = fx_open(fx, NULL);
	set_config(v, D, VECFS_L2);
	float x[D] = {1, 2, 3, 4};
	static const char *const pays[] = {"{\"a\": 1, \"b\": \"x\"}", "{\"a\": 2, \"b\": \"x\"}",
					   "{\"a\": 2}", "{\"a\": 3, \"c\": [1, 1]}", NULL, "{\"a\": 4}"};
	vecfs_row rows[7];
	for (int i = 0; i < 6; i++)
		rows[i] = (vecfs_row){.key = i % 2 ? "u" : "t", .keylen = 1, .vec = x,
				      .payload = pays[i], .payload_len = pays[i] ? strlen(pays[i]) : 0};
	rows[6] = (vecfs_row){.key = "t", .keylen = 1, .vec = x, .payload = "{\"a\": 9}",
			      .payload_len = 8};
	char err[256];
	assert_int_equal(vecfs_put(v, rows, 7, D, NULL, err, sizeof err), 0);
	check_index(v); /* no key left of an earlier payload */
	static const struct {
		const char *f;
		size_t n;
	} cases[] = {{"{\"a\": 9}", 1}, {"{\"a\": 3}", 0}, {"{\"a\": 1}", 0}, {"{\"a\": 4}", 1}, {"{\"a\": 2}", 0},
		     {"{\"b\": \"x\"}", 0}, {"{\"c\": 1}", 0}};
	for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
		vf_filter *f;
		vf_txn *txn;
		uint64_t *ids;
		size_t n;
		assert_int_equal(vf_filter_compile(cases[c].f, strlen(cases[c].f), &f, NULL, 0), 0);
		assert_int_equal(vf_read_begin(v->store, &txn), 0);
		assert_int_equal(vf_pidx_candidates(txn, v->store, f, 100, &ids, &n), 0);
		vf_read_end(v->store, txn);
		if (n != cases[c].n)
			fail_msg("%s: %zu from the index, want %zu", cases[c].f, n, cases[c].n);
		free(ids);
		vf_filter_free(f);
	}
}

/* ------------------------------------------------------------ old stores, damage */

static int forget_index(vf_txn *txn, void *arg)
{
	vf_store *s = arg;
	int rc = vf_clear(txn, s->payloads);
	return rc ? rc : vf_del(txn, s->meta, "payload_index", strlen("payload_index"));
}

/* The first term key of the index, deleted. */
static int drop_one_key(vf_txn *txn, void *arg)
{
	vf_store *s = arg;
	vf_cursor *cur;
	vf_val k, d;
	int rc = vf_cursor_open(txn, s->payloads, &cur);
	if (rc == 0 && (rc = vf_cursor_get(cur, &k, &d, VF_FIRST)) == 0)
		rc = vf_cursor_del(cur);
	vf_cursor_close(cur);
	return rc;
}

static void test_old_store_and_damage(void **state)
{
	fixture *fx = *state;
	const size_t N = 500;
	model m = {N, calloc(N, PAY_MAX), calloc(N, 1)};
	rng r = {.s = 23};
	vecfs *v = fx_open(fx, NULL);
	set_config(v, D, VECFS_L2);
	put_rows(v, &m, &r, 0, N);
	/* as a store made before the index: none, and filters still right */
	assert_int_equal(vf_write(v->store, forget_index, v->store), 0);
	plan_tally t = {0};
	check_filters(v, &m, &r, 30, &t);
	assert_int_equal(t.narrowed, 0);
	check_index(v); /* no index: nothing to check */
	fx_close(fx);
	v = fx_open(fx, NULL); /* a write open builds it */
	check_index(v);
	memset(&t, 0, sizeof t);
	check_filters(v, &m, &r, 60, &t);
	assert_true(t.narrowed > 0);
	/* a key lost: verify says so; salvage makes the index anew */
	assert_int_equal(vf_write(v->store, drop_one_key, v->store), 0);
	char msg[512];
	assert_int_equal(vecfs_verify(v, msg, sizeof msg), -EIO);
	assert_non_null(strstr(msg, "payload index"));
	vecfs_salvage_info info;
	char err[256];
	assert_int_equal(vecfs_salvage(v, NULL, NULL, &info, err, sizeof err), 0);
	check_index(v);
	/* a read-only open of a store with an index uses it */
	fx_close(fx);
	vecfs *ro;
	assert_int_equal(vecfs_open_readonly(fx->dir, &ro, err, sizeof err), 0);
	assert_int_equal(vecfs_verify(ro, msg, sizeof msg), 0);
	memset(&t, 0, sizeof t);
	check_filters(ro, &m, &r, 30, &t);
	assert_true(t.narrowed > 0);
	vecfs_close(ro);
	free(m.pay);
	free(m.alive);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_terms),
		cmocka_unit_test_setup_teardown(test_index_follows_writes, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_beyond_bounds, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_selective, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_key_twice_in_one_write, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_old_store_and_damage, fx_setup, fx_teardown),
	};
	return cmocka_run_group_tests_name("pindex", tests, NULL, NULL);
}
