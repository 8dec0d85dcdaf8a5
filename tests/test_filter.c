/*
 * test_filter.c - payload filters: every operator and edge case of the
 * evaluator (engine/filter.c) on payload texts, malformed filters and the
 * limits, failed allocations; and filtered searches against a brute-force
 * filtered scan, exact and ANN, with deltas, deletes, upserts, rows the
 * generation does not cover, and batches; searches on several threads
 * while writes go on.
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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "query/filter.h"
#include "query/filtered.h"
#include "io.h"
#include "testutil.h"
#include "vecfs.h"

/* ------------------------------------------------------------ evaluator */

static int match_text(const char *filter, const char *payload)
{
	vf_filter *f = NULL;
	char err[200] = "";
	int rc = vf_filter_compile(filter, strlen(filter), &f, err, sizeof err);
	if (rc)
		print_message("filter %s: %d %s\n", filter, rc, err);
	assert_int_equal(rc, 0);
	int m = vf_filter_match(f, payload, payload ? strlen(payload) : 0);
	vf_filter_free(f);
	return m;
}

typedef struct mcase {
	const char *filter, *payload; /* payload NULL: none */
	int want;
} mcase;

static const mcase cases[] = {
	/* $eq, bare: JSON equality, numbers by value, no cross-type equality */
	{"{\"a\": 1}", "{\"a\": 1}", 1},
	{"{\"a\": 1}", "{\"a\": 1.0}", 1},
	{"{\"a\": 100}", "{\"a\": 1e2}", 1},
	{"{\"a\": -0.5}", "{\"a\": -5E-1}", 1},
	{"{\"a\": 1}", "{\"a\": \"1\"}", 0},
	{"{\"a\": 1}", "{\"a\": true}", 0},
	{"{\"a\": true}", "{\"a\": 1}", 0},
	{"{\"a\": true}", "{\"a\": true}", 1},
	{"{\"a\": false}", "{\"a\": true}", 0},
	{"{\"a\": null}", "{\"a\": null}", 1},
	{"{\"a\": null}", "{}", 0},
	{"{\"a\": {\"$eq\": \"x\"}}", "{\"a\": \"x\"}", 1},
	{"{\"a\": {\"$eq\": \"x\"}}", "{\"a\": \"xy\"}", 0},
	{"{\"a\": \"\"}", "{\"a\": \"\"}", 1},
	{"{\"a\": \"\\u00e9\"}", "{\"a\": \"\xc3\xa9\"}", 1},
	{"{\"a\": \"\xc3\xa9\"}", "{\"a\": \"\\u00e9\"}", 1},
	{"{\"a\": \"\\ud83d\\ude00\"}", "{\"a\": \"\xf0\x9f\x98\x80\"}", 1},
	{"{\"a\": \"x\\ny\\\"\"}", "{\"a\": \"x\\u000ay\\\"\"}", 1},
	{"{\"a\\\"b\": 1}", "{\"a\\\"b\": 1}", 1},
	/* $ne */
	{"{\"a\": {\"$ne\": 1}}", "{\"a\": 2}", 1},
	{"{\"a\": {\"$ne\": 1}}", "{\"a\": 1}", 0},
	{"{\"a\": {\"$ne\": 1}}", "{\"a\": \"1\"}", 1},
	{"{\"a\": {\"$ne\": 1}}", "{}", 1},
	{"{\"a\": {\"$ne\": 1}}", NULL, 1},
	/* comparisons: numbers with numbers, strings with strings by bytes */
	{"{\"a\": {\"$gt\": 1}}", "{\"a\": 2}", 1},
	{"{\"a\": {\"$gt\": 1}}", "{\"a\": 1}", 0},
	{"{\"a\": {\"$gte\": 1}}", "{\"a\": 1}", 1},
	{"{\"a\": {\"$lt\": 1}}", "{\"a\": 1}", 0},
	{"{\"a\": {\"$lte\": 1}}", "{\"a\": 1.0}", 1},
	{"{\"a\": {\"$lt\": 0}}", "{\"a\": -1e-9}", 1},
	{"{\"a\": {\"$gt\": \"a\"}}", "{\"a\": \"b\"}", 1},
	{"{\"a\": {\"$gt\": \"a\"}}", "{\"a\": \"ab\"}", 1},
	{"{\"a\": {\"$gt\": \"ab\"}}", "{\"a\": \"a\"}", 0},
	{"{\"a\": {\"$lt\": \"a\"}}", "{\"a\": \"Z\"}", 1},
	{"{\"a\": {\"$gt\": \"z\"}}", "{\"a\": \"\xc3\xa9\"}", 1},
	{"{\"a\": {\"$gte\": \"en\", \"$lte\": \"fr\"}}", "{\"a\": \"en\"}", 1},
	{"{\"a\": {\"$gte\": \"en\", \"$lte\": \"fr\"}}", "{\"a\": \"fr\"}", 1},
	{"{\"a\": {\"$gte\": \"en\", \"$lte\": \"fr\"}}", "{\"a\": \"it\"}", 0},
	{"{\"a\": {\"$gt\": 1}}", "{\"a\": \"2\"}", 0},
	{"{\"a\": {\"$lt\": \"z\"}}", "{\"a\": 1}", 0},
	{"{\"a\": {\"$gt\": null}}", "{\"a\": 1}", 0},
	{"{\"a\": {\"$gt\": true}}", "{\"a\": true}", 0},
	{"{\"a\": {\"$lt\": 1}}", "{}", 0},
	{"{\"a\": {\"$lt\": 1}}", NULL, 0},
	{"{\"a\": {\"$gt\": 1, \"$lt\": 3}}", "{\"a\": 2}", 1},
	{"{\"a\": {\"$gt\": 1, \"$lt\": 3}}", "{\"a\": 3}", 0},
	/* $in, $nin */
	{"{\"a\": {\"$in\": [1, \"x\", null]}}", "{\"a\": \"x\"}", 1},
	{"{\"a\": {\"$in\": [1, \"x\", null]}}", "{\"a\": null}", 1},
	{"{\"a\": {\"$in\": [1, \"x\"]}}", "{\"a\": 2}", 0},
	{"{\"a\": {\"$in\": []}}", "{\"a\": 2}", 0},
	{"{\"a\": {\"$in\": [1]}}", "{}", 0},
	{"{\"a\": {\"$nin\": [1, 2]}}", "{\"a\": 3}", 1},
	{"{\"a\": {\"$nin\": [1, 2]}}", "{\"a\": 2.0}", 0},
	{"{\"a\": {\"$nin\": []}}", "{\"a\": 2}", 1},
	{"{\"a\": {\"$nin\": [1]}}", "{}", 1},
	{"{\"a\": {\"$nin\": [1]}}", NULL, 1},
	/* $exists */
	{"{\"a\": {\"$exists\": true}}", "{\"a\": null}", 1},
	{"{\"a\": {\"$exists\": true}}", "{\"b\": 1}", 0},
	{"{\"a\": {\"$exists\": false}}", "{\"b\": 1}", 1},
	{"{\"a\": {\"$exists\": false}}", "{\"a\": 1}", 0},
	{"{\"a\": {\"$exists\": false}}", NULL, 1},
	{"{\"a\": {\"$exists\": true}}", NULL, 0},
	/* arrays: any element for $eq, $in and comparisons; none for $ne, $nin;
	 * a bare array compares the whole array */
	{"{\"t\": \"a\"}", "{\"t\": [\"a\", \"b\"]}", 1},
	{"{\"t\": \"c\"}", "{\"t\": [\"a\", \"b\"]}", 0},
	{"{\"t\": {\"$ne\": \"a\"}}", "{\"t\": [\"a\", \"b\"]}", 0},
	{"{\"t\": {\"$ne\": \"a\"}}", "{\"t\": [\"b\"]}", 1},
	{"{\"t\": [\"a\", \"b\"]}", "{\"t\": [\"a\", \"b\"]}", 1},
	{"{\"t\": [\"a\", \"b\"]}", "{\"t\": [ \"a\" ,\"b\" ]}", 1},
	{"{\"t\": [\"b\", \"a\"]}", "{\"t\": [\"a\", \"b\"]}", 0},
	{"{\"t\": [\"a\"]}", "{\"t\": [\"a\", \"b\"]}", 0},
	{"{\"t\": [\"a\", \"b\"]}", "{\"t\": [\"a\"]}", 0},
	{"{\"t\": []}", "{\"t\": []}", 1},
	{"{\"t\": []}", "{\"t\": [1]}", 0},
	{"{\"t\": [\"a\"]}", "{\"t\": [[\"a\"], \"b\"]}", 1},
	{"{\"t\": {\"$eq\": [\"a\", \"b\"]}}", "{\"t\": [\"a\", \"b\"]}", 1},
	{"{\"t\": {\"$gt\": 5}}", "{\"t\": [1, 7]}", 1},
	{"{\"t\": {\"$gt\": 5}}", "{\"t\": [1, 2]}", 0},
	{"{\"t\": {\"$gt\": 5}}", "{\"t\": []}", 0},
	{"{\"t\": {\"$in\": [\"x\", \"b\"]}}", "{\"t\": [\"a\", \"b\"]}", 1},
	{"{\"t\": {\"$nin\": [\"x\", \"b\"]}}", "{\"t\": [\"a\", \"b\"]}", 0},
	{"{\"t\": {\"$nin\": [\"x\", \"y\"]}}", "{\"t\": [\"a\", \"b\"]}", 1},
	{"{\"t\": 1}", "{\"t\": [[1]]}", 0},
	/* objects: members in any order, no others */
	{"{\"o\": {\"x\": 1, \"y\": [1, 2]}}", "{\"o\": {\"y\": [1, 2], \"x\": 1}}", 1},
	{"{\"o\": {\"x\": 1}}", "{\"o\": {\"x\": 1, \"y\": 2}}", 0},
	{"{\"o\": {\"x\": 1, \"y\": 2}}", "{\"o\": {\"x\": 1}}", 0},
	{"{\"o\": {}}", "{\"o\": {}}", 1},
	{"{\"o\": {}}", "{\"o\": {\"x\": 1}}", 0},
	{"{\"o\": {\"$gt\": 1, \"b\": 2}}", "{\"o\": {\"b\": 2, \"$gt\": 1}}", 1},
	/* dotted paths reach into nested objects (not arrays) */
	{"{\"o.x\": 1}", "{\"o\": {\"x\": 1}}", 1},
	{"{\"o.x\": 1}", "{\"o\": {\"y\": {\"x\": 1}}}", 0},
	{"{\"o.x\": 1}", "{\"o\": [{\"x\": 1}]}", 0},
	{"{\"o.x.y\": {\"$gte\": 2}}", "{\"o\": {\"x\": {\"y\": 2}}}", 1},
	{"{\"o.x\": {\"$exists\": false}}", "{\"o\": 5}", 1},
	{"{\"o.x\": {\"$exists\": true}}", "{\"o\": {\"x\": null}}", 1},
	{"{\"o.x\": 1}", "{\"o.x\": 1}", 0},
	/* logic: top level and operators ANDed; $and, $or, $not */
	{"{\"a\": 1, \"b\": 2}", "{\"a\": 1, \"b\": 2}", 1},
	{"{\"a\": 1, \"b\": 2}", "{\"a\": 1, \"b\": 3}", 0},
	{"{\"$and\": [{\"a\": 1}, {\"b\": 2}]}", "{\"a\": 1, \"b\": 2}", 1},
	{"{\"$and\": [{\"a\": 1}, {\"b\": 2}]}", "{\"a\": 1}", 0},
	{"{\"$or\": [{\"a\": 1}, {\"b\": 2}]}", "{\"b\": 2}", 1},
	{"{\"$or\": [{\"a\": 1}, {\"b\": 2}]}", "{\"b\": 1}", 0},
	{"{\"$and\": []}", "{}", 1},
	{"{\"$or\": []}", "{}", 0},
	{"{\"$not\": {\"a\": 1}}", "{\"a\": 1}", 0},
	{"{\"$not\": {\"a\": 1}}", "{\"a\": 2}", 1},
	{"{\"$not\": {\"a\": 1}}", "{}", 1},
	{"{\"$not\": {\"a\": 1}}", NULL, 1},
	{"{\"$not\": {\"a\": {\"$exists\": false}}}", NULL, 0},
	{"{\"$not\": {\"a\": 1}, \"a\": {\"$exists\": true}}", "{}", 0},
	{"{\"$or\": [{\"$and\": [{\"a\": 1}, {\"b\": {\"$lt\": 3}}]}, {\"c\": 9}]}", "{\"a\": 1, \"b\": 2}", 1},
	{"{\"$or\": [{\"$and\": [{\"a\": 1}, {\"b\": {\"$lt\": 3}}]}, {\"c\": 9}]}", "{\"a\": 1, \"b\": 4, \"c\": 9}", 1},
	{"{\"$or\": [{\"$and\": [{\"a\": 1}, {\"b\": {\"$lt\": 3}}]}, {\"c\": 9}]}", "{\"a\": 1, \"b\": 4}", 0},
	{"{}", "{\"a\": 1}", 1},
	{"{}", NULL, 1},
	/* payloads: not objects, white space, the last of duplicate names,
	 * bytes that are not JSON */
	{"{\"a\": 1}", NULL, 0},
	{"{\"a\": 1}", "", 0},
	{"{\"a\": 1}", "[1, 2]", 0},
	{"{\"a\": 1}", "5", 0},
	{"{\"a\": {\"$ne\": 1}}", "[1]", 1},
	{"{\"a\": 2}", " {\n\t\"a\" : [ 1 , 2 ] } ", 1},
	{"{\"a\": 2}", "{\"a\": 1, \"a\": 2}", 1},
	{"{\"a\": 1}", "{\"a\": 1, \"a\": 2}", 0},
	{"{\"a\": 1}", "{\"a\": 1", 0},
	{"{\"a\": 1}", "{\"a\": ", 0},
	{"{\"a\": 1}", "{\"b\": \"unterminated", 0},
	{"{\"a\": 1}", "{\"b\": [[[}, \"a\": 1}", 0},
	{"{\"a\": \"x\"}", "{\"a\": \"x\\", 0},
	{"{\"a\": \"x\"}", "{\"a\": \"\\u12\"}", 0},
	{"{\"a\": [1]}", "{\"a\": [1", 0},
	{"{\"a\": {\"x\": 1}}", "{\"a\": {\"x\": 1", 0},
};

static void test_operators(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		int m = match_text(cases[i].filter, cases[i].payload);
		if (m != cases[i].want)
			print_message("filter %s on %s: %d, expected %d\n", cases[i].filter,
				      cases[i].payload ? cases[i].payload : "(none)", m, cases[i].want);
		assert_int_equal(m, cases[i].want);
	}
}

/* A payload far deeper than any filter: skipped without recursion. */
static void test_deep_payload(void **state)
{
	(void)state;
	const size_t n = 300000;
	char *p = malloc(2 * n + 64);
	assert_non_null(p);
	size_t o = (size_t)sprintf(p, "{\"a\": ");
	memset(p + o, '[', n);
	memset(p + o + n, ']', n);
	o += 2 * n;
	o += (size_t)sprintf(p + o, ", \"b\": 1}");
	assert_int_equal(match_text("{\"b\": 1}", p), 1);
	assert_int_equal(match_text("{\"a\": 1}", p), 0);
	assert_int_equal(match_text("{\"a\": [[1]]}", p), 0);
	assert_int_equal(match_text("{\"a\": {\"$gt\": 1}}", p), 0);
	p[o - 3] = 0; /* cut after "b": */
	assert_int_equal(match_text("{\"b\": 1}", p), 0);
	memset(p, '{', 2 * n); /* no JSON at all */
	p[2 * n] = 0;
	assert_int_equal(match_text("{\"b\": 1}", p), 0);
	assert_int_equal(match_text("{\"b\": {\"$ne\": 1}}", p), 1);
	free(p);
}

static int compile_rc(const char *text, size_t len)
{
	vf_filter *f = NULL;
	char err[200] = "";
	int rc = vf_filter_compile(text, len, &f, err, sizeof err);
	assert_true(rc != 0 || f != NULL);
	assert_true(rc == 0 || (f == NULL && strncmp(err, "filter: ", 8) == 0));
	vf_filter_free(f);
	return rc;
}

static void test_malformed(void **state)
{
	(void)state;
	static const char *const bad[] = {
		"", " ", "{", "}", "[\"a\"]", "1", "\"a\"", "null", "{\"a\": }", "{a: 1}",
		"{\"a\": 1} x", "{\"a\": 1}}", "{\"a\": 1,}", "{\"a\" 1}", "{\"a\": [1,]}", ",",
		"{\"a\": 01}", "{\"a\": 1.}", "{\"a\": -}", "{\"a\": .5}", "{\"a\": 1e}",
		"{\"a\": tru}", "{\"a\": nul}", "{\"a\": \"x\ny\"}", "{\"a\": \"\\ud800\"}",
		"{\"a\": \"\\udc00\"}", "{\"a\": \"\\x\"}", "{\"a\": \"\\u12g4\"}",
		"{\"a\": {\"$regex\": \"x\"}}", "{\"a\": {\"$eq\": 1, \"$foo\": 2}}",
		"{\"$nor\": [{\"a\": 1}]}", "{\"$where\": 1}", "{\"a\": {\"$in\": 1}}",
		"{\"a\": {\"$nin\": {\"x\": 1}}}", "{\"$and\": {\"a\": 1}}", "{\"$and\": [1]}",
		"{\"$or\": [[]]}", "{\"$or\": \"x\"}", "{\"$not\": []}", "{\"$not\": 1}",
		"{\"a\": {\"$exists\": 1}}", "{\"a\": {\"$exists\": \"yes\"}}",
		"{\"a\": 1}\0", "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[",
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		size_t len = strlen(bad[i]) + (i == sizeof bad / sizeof bad[0] - 2);
		int rc = compile_rc(bad[i], len);
		if (rc != -EINVAL)
			print_message("filter %s: %d, expected EINVAL\n", bad[i], rc);
		assert_int_equal(rc, -EINVAL);
	}
}

/* Bytes that are not UTF-8 (a stray byte, a cut sequence, an overlong
 * form, a surrogate, past U+10FFFF), in a value or a name: EINVAL, saying
 * so; UTF-8 itself is taken. */
static void test_not_utf8(void **state)
{
	(void)state;
	static const char *const bad[] = {
		"{\"a\": \"\xff\"}", "{\"a\": \"x\xc3\"}", "{\"\xc3\x28\": 1}", "{\"a\": \"\xc0\xaf\"}",
		"{\"a\": \"\xed\xa0\x80\"}", "{\"a\": \"\xf4\x90\x80\x80\"}",
		"{\"a\": {\"$in\": [\"ok\", \"\x80\"]}}",
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		vf_filter *f = NULL;
		char err[256] = "";
		int rc = vf_filter_compile(bad[i], strlen(bad[i]), &f, err, sizeof err);
		vf_filter_free(f);
		if (rc != -EINVAL || !strstr(err, "UTF-8"))
			print_message("filter %zu: %d '%s', expected EINVAL (not UTF-8)\n", i, rc, err);
		assert_int_equal(rc, -EINVAL);
		assert_non_null(strstr(err, "not valid UTF-8"));
	}
	const char *good = "{\"caf\xc3\xa9\": \"\xe2\x82\xac \xf0\x9f\x98\x80\"}";
	assert_int_equal(compile_rc(good, strlen(good)), 0);
}

static char *nest(const char *open, const char *mid, const char *close, size_t n, size_t *len)
{
	size_t lo = strlen(open), lm = strlen(mid), lc = strlen(close);
	char *t = malloc(n * (lo + lc) + lm + 1), *w = t;
	assert_non_null(t);
	for (size_t i = 0; i < n; i++, w += lo)
		memcpy(w, open, lo);
	memcpy(w, mid, lm);
	w += lm;
	for (size_t i = 0; i < n; i++, w += lc)
		memcpy(w, close, lc);
	*w = 0;
	*len = (size_t)(w - t);
	return t;
}

static void test_limits(void **state)
{
	(void)state;
	size_t len;
	/* 31 $not around a field: 32 levels, the most there may be */
	char *t = nest("{\"$not\": ", "{\"a\": 1}", "}", VF_FILTER_MAX_DEPTH - 1, &len);
	assert_int_equal(compile_rc(t, len), 0);
	assert_int_equal(match_text(t, "{\"a\": 1}"), (VF_FILTER_MAX_DEPTH - 1) % 2 == 0);
	free(t);
	t = nest("{\"$not\": ", "{\"a\": 1}", "}", VF_FILTER_MAX_DEPTH, &len);
	assert_int_equal(compile_rc(t, len), -E2BIG);
	free(t);
	/* deep and long: the byte limit; deep and short: the depth limit */
	t = nest("{\"a\": ", "1", "}", 100000, &len);
	assert_int_equal(compile_rc(t, len), -E2BIG);
	free(t);
	t = nest("[", "1", "]", 5000, &len);
	assert_int_equal(compile_rc(t, len), -E2BIG);
	free(t);
	/* a malformed one is EINVAL at any depth */
	t = nest("[", "1", "", 5000, &len);
	assert_int_equal(compile_rc(t, len), -EINVAL);
	free(t);
	/* bytes */
	t = malloc(VF_FILTER_MAX_BYTES + 16);
	assert_non_null(t);
	len = (size_t)sprintf(t, "{\"a\": \"");
	memset(t + len, 'x', VF_FILTER_MAX_BYTES - len - 2);
	memcpy(t + VF_FILTER_MAX_BYTES - 2, "\"}", 3);
	assert_int_equal(compile_rc(t, VF_FILTER_MAX_BYTES), 0);
	memset(t + VF_FILTER_MAX_BYTES - 2, 'x', 1);
	memcpy(t + VF_FILTER_MAX_BYTES - 1, "\"}", 3);
	assert_int_equal(compile_rc(t, VF_FILTER_MAX_BYTES + 1), -E2BIG);
	/* values */
	len = (size_t)sprintf(t, "{\"a\": {\"$in\": [");
	for (int i = 0; i < VF_FILTER_MAX_NODES; i++)
		t[len++] = '1', t[len++] = ',';
	len += (size_t)sprintf(t + len - 1, "]}}") - 1;
	assert_true(len < VF_FILTER_MAX_BYTES);
	assert_int_equal(compile_rc(t, len), -E2BIG);
	free(t);
}

/* ------------------------------------------------------------ allocations */

static long fail_at = -1, calls;

static void *fi_malloc(size_t n)
{
	return calls++ == fail_at ? NULL : malloc(n);
}
static void *fi_calloc(size_t n, size_t s)
{
	return calls++ == fail_at ? NULL : calloc(n, s);
}
static void *fi_realloc(void *p, size_t n)
{
	return calls++ == fail_at ? NULL : realloc(p, n);
}

/* Each allocation of a compile fails in turn: ENOMEM, nothing leaks
 * (ASan), and the filter compiles once none fails. */
static void test_out_of_memory(void **state)
{
	(void)state;
	const char *text = "{\"a\": {\"$in\": [1, \"x\"]}, \"$or\": [{\"b\": 1}, {\"$not\": {\"c\": 2}}]}";
	vf_io_ops.malloc = fi_malloc;
	vf_io_ops.calloc = fi_calloc;
	vf_io_ops.realloc = fi_realloc;
	int rc;
	for (fail_at = 0;; fail_at++) {
		vf_filter *f = NULL;
		calls = 0;
		rc = vf_filter_compile(text, strlen(text), &f, NULL, 0);
		vf_filter_free(f);
		if (rc == 0)
			break;
		assert_int_equal(rc, -ENOMEM);
	}
	vf_io_reset();
	assert_true(fail_at > 3);
}

/* ------------------------------------------------------------ searches */

typedef struct pay {
	int has;        /* a payload at all */
	int g;          /* -1: no field g */
	int even;       /* h: "even" or "odd" */
	int t0, t1;     /* tags */
	int nx;
} pay;

static void pay_text(const pay *p, char *buf, size_t n)
{
	int o = snprintf(buf, n, "{");
	if (p->g >= 0)
		o += snprintf(buf + o, n - (size_t)o, "\"g\": %d, ", p->g);
	snprintf(buf + o, n - (size_t)o, "\"h\": \"%s\", \"tags\": [%d, %d], \"n\": {\"x\": %d}}",
		 p->even ? "even" : "odd", p->t0, p->t1, p->nx);
}

static pay pay_make(size_t i, int flip)
{
	pay p = {i % 17 != 0, i % 13 == 0 ? -1 : (int)(i % 10), (i % 2 == 0) ^ flip,
		 (int)(i % 3), (int)(i % 5), (int)(i % 7)};
	return p;
}

/* The filters, and which payloads each matches (by construction). */
static const char *const filters[] = {
	"{\"h\": \"even\"}",
	"{\"$or\": [{\"g\": {\"$gte\": 5}}, {\"n.x\": 0}]}",
	"{\"h\": {\"$ne\": \"odd\"}, \"g\": {\"$nin\": [1, 2]}}",
	"{\"g\": 3}",
	"{\"g\": {\"$exists\": false}}",
	"{\"tags\": 4}",
	"{\"$not\": {\"tags\": {\"$in\": [0, 1, 2]}}}",
	"{\"g\": 99}",
};
#define NFILTERS (sizeof filters / sizeof filters[0])

static int pay_matches(const pay *p, size_t f)
{
	int g = p->has ? p->g : -1;
	switch (f) {
	case 0: return p->has && p->even;
	case 1: return p->has && (g >= 5 || p->nx == 0);
	case 2: return !(p->has && !p->even) && g != 1 && g != 2;
	case 3: return g == 3;
	case 4: return g < 0;
	case 5: return p->has && (p->t0 == 4 || p->t1 == 4);
	case 6: return !(p->has && (p->t0 <= 2 || p->t1 <= 2));
	default: return 0;
	}
}

static void put_pay(vecfs *v, const float *x, size_t first, size_t n, uint32_t d,
		    const pay *pays)
{
	vecfs_row *rows = calloc(n, sizeof *rows);
	char (*keys)[32] = calloc(n, sizeof *keys);
	char (*texts)[160] = calloc(n, sizeof *texts);
	assert_true(rows && keys && texts);
	for (size_t i = 0; i < n; i++) {
		size_t r = first + i;
		snprintf(keys[i], sizeof keys[i], "r%zu", r);
		rows[i].key = keys[i];
		rows[i].keylen = strlen(keys[i]);
		rows[i].vec = x + r * d;
		if (pays[r].has) {
			pay_text(&pays[r], texts[i], sizeof texts[i]);
			rows[i].payload = texts[i];
			rows[i].payload_len = strlen(texts[i]);
		}
	}
	char err[256] = "";
	assert_int_equal(vecfs_put(v, rows, n, d, NULL, err, sizeof err), 0);
	free(rows);
	free(keys);
	free(texts);
}

typedef struct tally {
	size_t hits, want;
} tally;

/* Every filter, exact and ANN, on a batch of nq queries: exact finds the
 * brute-force filtered top k; ANN returns min(k, matches) live matching
 * records at exact distances, and its recall is tallied. */
static void check_filters(vecfs *v, const dataset *ds, size_t N, const unsigned char *alive,
			  const pay *pays, const float *qs, size_t nq, tally *t)
{
	const uint32_t D = ds->d;
	const size_t K = 10;
	unsigned char *mask = malloc(N);
	size_t *idx = malloc(K * sizeof(size_t));
	double *dist = malloc(K * sizeof(double));
	assert_true(mask && idx && dist);
	for (size_t f = 0; f < NFILTERS; f++) {
		size_t m = 0;
		for (size_t i = 0; i < N; i++)
			m += mask[i] = alive[i] && pay_matches(&pays[i], f);
		for (int exact = 1; exact >= 0; exact--) {
			vecfs_query_opts o = {.k = K, .exact = exact, .filter = filters[f],
					      .filter_len = strlen(filters[f])};
			vecfs_results *r = search_opts(v, qs, nq, D, &o);
			assert_int_equal(r->explain.filter_passed, m);
			for (size_t qi = 0; qi < nq; qi++) {
				const float *q = qs + qi * D;
				size_t want = m < K ? m : K;
				if (r->count[qi] != want)
					print_message("filter %s exact %d query %zu: %zu results, %zu match\n",
						      filters[f], exact, qi, r->count[qi], m);
				assert_int_equal(r->count[qi], want);
				if (exact) {
					check_exact(r->hits[qi], r->count[qi], VECFS_L2, ds->x, N, D, mask,
						    "r", q, K);
					continue;
				}
				check_hits(r->hits[qi], r->count[qi], VECFS_L2, ds->x, N, D, mask, "r", q);
				size_t nr = knn_ref(VECFS_L2, ds->x, N, D, mask, q, K, idx, dist);
				for (size_t j = 0; j < r->count[qi]; j++)
					t->hits += r->hits[qi][j].distance <= dist[nr - 1] * (1 + 1e-5) + 1e-6;
				t->want += nr;
			}
			vecfs_results_free(r);
		}
	}
	free(mask);
	free(idx);
	free(dist);
}

/* A store with its data: N rows of payloads pay_make(i, 0), none put
 * yet, alive all 0, NQ fresh queries. */
typedef struct scene {
	vecfs *v;
	dataset ds;
	unsigned char *alive;
	pay *pays;
	float *qs;
} scene;

static void scene_open(scene *sc, fixture *f, uint32_t d, size_t n, size_t nq, uint64_t seed,
		       uint32_t clusters)
{
	sc->v = fx_open(f, NULL);
	set_config(sc->v, d, VECFS_L2);
	ds_make(&sc->ds, seed, n, d, clusters);
	sc->alive = calloc(n, 1);
	sc->pays = malloc(n * sizeof *sc->pays);
	sc->qs = malloc(nq * d * sizeof(float));
	assert_true(sc->alive && sc->pays && sc->qs);
	for (size_t i = 0; i < n; i++)
		sc->pays[i] = pay_make(i, 0);
	for (size_t i = 0; i < nq; i++)
		ds_fresh(&sc->ds, sc->qs + i * d);
}

static void scene_free(scene *sc)
{
	free(sc->alive);
	free(sc->pays);
	free(sc->qs);
	ds_free(&sc->ds);
}

static void test_filtered_search(void **state)
{
	fixture *f = *state;
	const uint32_t D = 16;
	const size_t NA = 9000, NB = 1500, NC = 600, N = NA + NB + NC, NQ = 40;
	scene sc;
	scene_open(&sc, f, D, N, NQ, 211, 40);
	vecfs *v = sc.v;
	dataset ds = sc.ds;
	unsigned char *alive = sc.alive;
	pay *pays = sc.pays;
	float *qs = sc.qs;
	tally t = {0, 0};

	/* no generation: exact scans */
	put_pay(v, ds.x, 0, NA, D, pays);
	memset(alive, 1, NA);
	check_filters(v, &ds, N, alive, pays, qs, NQ, &t);

	/* A covers the first rows (searched as built); B more; then deltas,
	 * deletes, upserts (new vectors and payloads) */
	uint64_t ga = build(v, 1);
	check_filters(v, &ds, N, alive, pays, qs, NQ, &t);
	put_pay(v, ds.x, NA, NB, D, pays);
	memset(alive + NA, 1, NB);
	uint64_t gb = build(v, 1);
	assert_true(gb != ga);
	put_pay(v, ds.x, NA + NB, NC, D, pays);
	memset(alive + NA + NB, 1, NC);
	for (size_t i = 0; i < N; i += 11) {
		char key[32];
		snprintf(key, sizeof key, "r%zu", i);
		del_key(v, key);
		alive[i] = 0;
	}
	for (size_t i = 4; i < N; i += 23) {
		if (!alive[i])
			continue;
		ds_point(&ds, (ds.label[i] + 3) % ds.nc, ds.x + i * D);
		pays[i] = pay_make(i, 1);
		pays[i].has = 1;
		put_pay(v, ds.x, i, 1, D, pays);
	}
	check_filters(v, &ds, N, alive, pays, qs, NQ, &t);
	vecfs_stats s = stats(v);
	assert_true(s.delta_postings > 0);

	/* back to A: B's and the later rows are not covered */
	char err[256];
	assert_int_equal(vecfs_activate(v, ga, err, sizeof err), 0);
	assert_true(stats(v).unindexed > 0);
	check_filters(v, &ds, N, alive, pays, qs, NQ, &t);

	print_message("filtered ANN recall@10: %zu of %zu\n", t.hits, t.want);
	assert_true(t.hits >= 0.9 * (double)t.want);

	/* a malformed or oversized filter: the search's errno and reason */
	vecfs_results *r = NULL;
	vecfs_query_opts o = {.k = 5, .filter = "{\"a\": {\"$regex\": 1}}"};
	o.filter_len = strlen(o.filter);
	err[0] = 0;
	assert_int_equal(vecfs_search(v, qs, 1, D, &o, &r, err, sizeof err), -EINVAL);
	assert_null(r);
	assert_non_null(strstr(err, "$regex"));
	size_t len;
	char *deep = nest("{\"a\": ", "1", "}", 100000, &len);
	o.filter = deep;
	o.filter_len = len;
	assert_int_equal(vecfs_search(v, qs, 1, D, &o, &r, err, sizeof err), -E2BIG);
	free(deep);
	sc.ds = ds;
	scene_free(&sc);
}

/* A store large enough that the pass over the payloads is split over the
 * CPUs by id range: the same sets, the same results. */
static void test_split_pass(void **state)
{
	fixture *f = *state;
	const uint32_t D = 4;
	const size_t N = 70000, NQ = 4;
	scene sc;
	scene_open(&sc, f, D, N, NQ, 401, 8);
	vecfs *v = sc.v;
	dataset ds = sc.ds;
	unsigned char *alive = sc.alive;
	pay *pays = sc.pays;
	float *qs = sc.qs;
	put_pay(v, ds.x, 0, N, D, pays);
	memset(alive, 1, N);
	for (size_t i = 0; i < N; i += 701) { /* holes in the ids */
		char key[32];
		snprintf(key, sizeof key, "r%zu", i);
		del_key(v, key);
		alive[i] = 0;
	}
	tally t = {0, 0};
	check_filters(v, &ds, N, alive, pays, qs, NQ, &t);
	assert_int_equal(t.hits, t.want);
	scene_free(&sc);
}

/* Searches on several threads with more filters than the store keeps
 * sets of, while a writer makes new snapshots: each result holds
 * min(k, filter_passed) hits, every one matching its filter. */
typedef struct worker {
	vecfs *v;
	const float *qs;
	uint32_t d;
	int seed, bad;
} worker;

static const char *const shared_filters[] = {
	"{\"h\": \"even\"}", "{\"g\": 3}", "{\"g\": {\"$gte\": 5}}", "{\"tags\": 4}",
	"{\"n.x\": {\"$lt\": 2}}", "{\"$not\": {\"g\": {\"$in\": [1, 2]}}}",
};

static void *search_worker(void *arg)
{
	worker *w = arg;
	for (int i = 0; i < 60 && !w->bad; i++) {
		const char *text = shared_filters[(w->seed + i) % 6];
		vecfs_query_opts o = {.k = 10, .exact = i % 5 == 0, .filter = text,
				      .filter_len = strlen(text)};
		vecfs_results *r = NULL;
		vf_filter *f = NULL;
		if (vecfs_search(w->v, w->qs + (size_t)(i % 8) * w->d, 1, w->d, &o, &r, NULL, 0) ||
		    vf_filter_compile(text, strlen(text), &f, NULL, 0)) {
			w->bad = 1;
			break;
		}
		size_t want = r->explain.filter_passed < 10 ? r->explain.filter_passed : 10;
		w->bad |= r->count[0] != want;
		for (size_t j = 0; j < r->count[0]; j++)
			w->bad |= !vf_filter_match(f, r->hits[0][j].payload, r->hits[0][j].payload_len);
		vf_filter_free(f);
		vecfs_results_free(r);
	}
	return NULL;
}

static void test_concurrent_filters(void **state)
{
	fixture *f = *state;
	const uint32_t D = 8;
	const size_t N = 6000;
	vecfs *v = fx_open(f, NULL);
	set_config(v, D, VECFS_L2);
	dataset ds;
	ds_make(&ds, 307, N + 400, D, 16);
	pay *pays = malloc((N + 400) * sizeof *pays);
	float *qs = malloc(8 * D * sizeof(float));
	assert_true(pays && qs);
	for (size_t i = 0; i < N + 400; i++)
		pays[i] = pay_make(i, 0);
	for (size_t i = 0; i < 8; i++)
		ds_fresh(&ds, qs + i * D);
	put_pay(v, ds.x, 0, N, D, pays);
	build(v, 1);
	pthread_t th[4];
	worker w[4];
	for (int t = 0; t < 4; t++) {
		w[t] = (worker){v, qs, D, t, 0};
		assert_int_equal(pthread_create(&th[t], NULL, search_worker, &w[t]), 0);
	}
	for (size_t i = 0; i < 400; i += 20) /* new snapshots meanwhile */
		put_pay(v, ds.x, N + i, 20, D, pays);
	for (int t = 0; t < 4; t++) {
		pthread_join(th[t], NULL);
		assert_int_equal(w[t].bad, 0);
	}
	free(pays);
	free(qs);
	ds_free(&ds);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_operators),
		cmocka_unit_test(test_deep_payload),
		cmocka_unit_test(test_malformed),
		cmocka_unit_test(test_not_utf8),
		cmocka_unit_test(test_limits),
		cmocka_unit_test(test_out_of_memory),
		cmocka_unit_test_setup_teardown(test_filtered_search, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_split_pass, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_concurrent_filters, fx_setup, fx_teardown),
	};
	return cmocka_run_group_tests_name("filter", tests, NULL, NULL);
}
