/*
 * test_codecs.c - the library's pure codecs (engine/codec/): the parsers
 * of the ingest formats (vecfs_rows_*) give the same rows whatever the
 * write pieces, at every split offset; their bounds and reasons; the JSON
 * scanner; a query's input grammar.
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
#include <malloc.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codec/json.h"
#include "codec/number.h"
#include "testutil.h"
#include "vecfs.h"

/* ------------------------------------------------------------ rows as text */

typedef struct got {
	char *s;         /* every row, rendered */
	size_t len, cap;
	int64_t mem;     /* bytes the parser holds */
	int64_t mem_max; /* refuse past it (0: never) */
	int stop_at;     /* fail the callback at this row (0: never) */
	int rows;
} got;

static void addf(got *g, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	if (g->len + (size_t)n + 1 > g->cap) {
		g->cap = (g->len + (size_t)n + 1) * 2;
		g->s = realloc(g->s, g->cap);
		assert_non_null(g->s);
	}
	va_start(ap, fmt);
	vsnprintf(g->s + g->len, (size_t)n + 1, fmt, ap);
	va_end(ap);
	g->len += (size_t)n;
}

static int on_row(void *arg, const vecfs_parsed_row *r)
{
	got *g = arg;
	if (g->stop_at && ++g->rows == g->stop_at)
		return -ECANCELED;
	addf(g, "%llu|", (unsigned long long)r->where);
	if (r->key)
		addf(g, "k=%.*s|", (int)r->keylen, r->key);
	for (uint32_t i = 0; i < r->dim; i++)
		addf(g, "%.9g,", r->vec[i]);
	if (r->payload)
		addf(g, "|p=%.*s", (int)r->payload_len, r->payload);
	addf(g, "|n%d f%d\n", r->numeric_key, r->filter);
	return 0;
}

static int on_mem(void *arg, int64_t delta)
{
	got *g = arg;
	if (delta > 0 && g->mem_max && g->mem + delta > g->mem_max)
		return -1;
	g->mem += delta;
	return 0;
}

/* The rows of data fed in pieces of the sizes cuts gives (0-terminated;
 * none: one feed), then ended; the parser's answer and reason appended. */
static char *parse_cut(vecfs_rows_format fmt, const void *data, size_t len, const size_t *cuts)
{
	got g = {0};
	vecfs_rows *r = vecfs_rows_new(fmt, on_row, on_mem, &g);
	assert_non_null(r);
	const char *p = data;
	int rc = 0;
	size_t off = 0;
	for (size_t c = 0; cuts && cuts[c] && rc == 0; c++) {
		size_t n = cuts[c] < len - off ? cuts[c] : len - off;
		rc = vecfs_rows_feed(r, p + off, n);
		off += n;
	}
	if (rc == 0)
		rc = vecfs_rows_feed(r, p + off, len - off);
	if (rc == 0)
		rc = vecfs_rows_end(r);
	uint64_t where;
	const char *why = vecfs_rows_error(r, &where);
	addf(&g, "rc=%d at %llu: %s\n", rc, (unsigned long long)where, why ? why : "-");
	vecfs_rows_free(r);
	assert_int_equal(g.mem, 0); /* all it asked for, given back */
	return g.s;
}

/* Whole, split in two at every offset, and a byte at a time: the same. */
static char *same_any_split(vecfs_rows_format fmt, const void *data, size_t len)
{
	char *whole = parse_cut(fmt, data, len, NULL);
	for (size_t k = 1; k < len; k++) {
		size_t cuts[] = {k, 0};
		char *s = parse_cut(fmt, data, len, cuts);
		if (strcmp(s, whole))
			fail_msg("split at %zu of %zu:\n%s\nwhole:\n%s", k, len, s, whole);
		free(s);
	}
	size_t *ones = malloc((len + 1) * sizeof *ones);
	assert_non_null(ones);
	for (size_t k = 0; k < len; k++)
		ones[k] = 1;
	ones[len] = 0;
	char *s = parse_cut(fmt, data, len, ones);
	assert_string_equal(s, whole);
	free(s);
	free(ones);
	return whole;
}

static void test_text_rows_any_split(void **state)
{
	(void)state;
	const char csv[] = "\xEF\xBB\xBF# a comment\n"
			   "a,1,2,3\r\n"
			   "\n"
			   "\"q,\"\"k\"\"\" , 4,5,6\n"
			   "7,\t1e3 ,-0.5,2\n"
			   "last,0,0,1";
	char *s = same_any_split(VECFS_ROWS_CSV, csv, sizeof csv - 1);
	assert_string_equal(s, "2|k=a|1,2,3,|n0 f0\n"
			       "4|k=q,\"k\"|4,5,6,|n0 f0\n"
			       "5|k=7|1000,-0.5,2,|n1 f0\n"
			       "6|k=last|0,0,1,|n0 f0\n"
			       "rc=0 at 0: -\n");
	free(s);
	const char txt[] = "x 1 2\n\"a b\"  3 4\n";
	s = same_any_split(VECFS_ROWS_TXT, txt, sizeof txt - 1);
	assert_string_equal(s, "1|k=x|1,2,|n0 f0\n2|k=a b|3,4,|n0 f0\nrc=0 at 0: -\n");
	free(s);
	const char tsv[] = "k1\t1,5\t2\n";
	s = same_any_split(VECFS_ROWS_TSV, tsv, sizeof tsv - 1);
	assert_string_equal(s, "rc=-22 at 1: value 1 '1,5' is not a number\n");
	free(s);
}

/* Rows' numbers as strtof() reads them, bit for bit, in every text format:
 * random floats printed "%.9g" and "%.17g", whole numbers and numbers
 * with trailing garbage (refused), 24 to a row. */
typedef struct want_rows {
	const float *want;
	size_t rows, dim;
} want_rows;

static int check_row(void *arg, const vecfs_parsed_row *r)
{
	want_rows *w = arg;
	if (r->dim != w->dim)
		fail_msg("row %llu: %u numbers", (unsigned long long)r->where, r->dim);
	if (memcmp(r->vec, w->want + w->rows * w->dim, sizeof(float) * w->dim))
		fail_msg("row %llu: not strtof()'s numbers", (unsigned long long)r->where);
	w->rows++;
	return 0;
}

static void test_rows_numbers_as_strtof(void **state)
{
	(void)state;
	enum { ROWS = 400, DIM = 24 };
	static const vecfs_rows_format fmts[] = {VECFS_ROWS_CSV, VECFS_ROWS_TSV, VECFS_ROWS_TXT,
						 VECFS_ROWS_JSONL};
	static const char *const forms[] = {"%.9g", "%.17g", "%.0f", "%.6f"};
	uint64_t r = 7;
	float *want = malloc(sizeof(float) * ROWS * DIM);
	char *text = malloc((size_t)ROWS * DIM * 40 + ROWS * 64);
	assert_non_null(want);
	assert_non_null(text);
	for (size_t f = 0; f < 4; f++) {
		size_t pos = 0;
		for (size_t i = 0; i < ROWS; i++) {
			const char *sep = fmts[f] == VECFS_ROWS_CSV ? "," : fmts[f] == VECFS_ROWS_TSV ? "\t" : " ";
			if (fmts[f] == VECFS_ROWS_JSONL)
				pos += (size_t)sprintf(text + pos, "{\"key\": \"k%zu\", \"vector\": [", i);
			else
				pos += (size_t)sprintf(text + pos, "k%zu", i);
			for (size_t j = 0; j < DIM; j++) {
				r = r * 6364136223846793005ull + 1442695040888963407ull;
				double x = ((double)(r >> 11) / 9007199254740992.0 - 0.5) *
					   (j % 3 == 0 ? 2e4 : j % 3 == 1 ? 2.0 : 0.02);
				char num[48];
				snprintf(num, sizeof num, forms[(i + j) % 4], x);
				want[i * DIM + j] = strtof(num, NULL);
				pos += (size_t)sprintf(text + pos, "%s%s",
						       fmts[f] == VECFS_ROWS_JSONL ? (j ? ", " : "") : sep, num);
			}
			pos += (size_t)sprintf(text + pos, fmts[f] == VECFS_ROWS_JSONL ? "]}\n" : "\n");
		}
		want_rows w = {want, 0, DIM};
		vecfs_rows *p = vecfs_rows_new(fmts[f], check_row, NULL, &w);
		assert_non_null(p);
		assert_int_equal(vecfs_rows_feed(p, text, pos), 0);
		assert_int_equal(vecfs_rows_end(p), 0);
		assert_int_equal(w.rows, ROWS);
		vecfs_rows_free(p);
		/* a number with a byte after it that no number takes, far from the
		 * line's end (where the one-pass reader looks): refused */
		const char *bad = fmts[f] == VECFS_ROWS_JSONL ? "{\"vector\": [0.5x, 1, 2, 3, 4, 5, 6, 7, 8]}\n"
				  : fmts[f] == VECFS_ROWS_CSV ? "k,0.5x,1,2,3,4,5,6,7,8,9\n"
				  : fmts[f] == VECFS_ROWS_TSV ? "k\t0.5x\t1\t2\t3\t4\t5\t6\t7\t8\t9\n"
							    : "k 0.5x 1 2 3 4 5 6 7 8 9\n";
		w = (want_rows){want, 0, DIM};
		p = vecfs_rows_new(fmts[f], check_row, NULL, &w);
		assert_non_null(p);
		assert_int_equal(vecfs_rows_feed(p, bad, strlen(bad)), -EINVAL);
		vecfs_rows_free(p);
	}
	free(want);
	free(text);
}

static void test_jsonl_rows_any_split(void **state)
{
	(void)state;
	const char jl[] = "{\"key\": \"a\\u00e9\\ud83d\\ude00\", \"vector\": [1, -2.5e1],"
			  " \"payload\": {\"t\": [true, null, \"x\\n\"]}}\n"
			  "  {\"vector\":[3,4],\"other\":{\"deep\":[[[]]]},\"\\u006bey\":\"b\"}  \n";
	char *s = same_any_split(VECFS_ROWS_JSONL, jl, sizeof jl - 1);
	assert_string_equal(s, "1|k=a\xC3\xA9\xF0\x9F\x98\x80|1,-25,"
			       "|p={\"t\": [true, null, \"x\\n\"]}|n0 f0\n"
			       "2|k=b|3,4,|n0 f0\n"
			       "rc=0 at 0: -\n");
	free(s);
}

static void test_keys_rows_any_split(void **state)
{
	(void)state;
	const char keys[] = "a\r\n  \n\"b\"\"c\"\nfilter={\"x\": 1}\nd e\n";
	char *s = same_any_split(VECFS_ROWS_KEYS, keys, sizeof keys - 1);
	assert_string_equal(s, "1|k=a||n0 f0\n3|k=b\"c||n0 f0\n4||p={\"x\": 1}|n0 f1\n"
			       "5|k=d e||n0 f0\nrc=0 at 0: -\n");
	free(s);
	const char two[] = "filter={}\nfilter={}\n";
	s = parse_cut(VECFS_ROWS_KEYS, two, sizeof two - 1, NULL);
	assert_non_null(strstr(s, "rc=-22 at 2: a second filter= line (line 1 has one)"));
	free(s);
}

static void put_le32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
	p[2] = (uint8_t)(v >> 16);
	p[3] = (uint8_t)(v >> 24);
}

static void test_binary_rows_any_split(void **state)
{
	(void)state;
	uint8_t fv[2 * (4 + 12)], bv[2 * (4 + 3)];
	for (int r = 0; r < 2; r++) {
		put_le32(fv + r * 16, 3);
		put_le32(bv + r * 7, 3);
		for (int i = 0; i < 3; i++) {
			float f = (float)(r * 10 + i) + 0.5f;
			memcpy(fv + r * 16 + 4 + 4 * i, &f, 4);
			bv[r * 7 + 4 + i] = (uint8_t)(200 + r * 10 + i);
		}
	}
	char *s = same_any_split(VECFS_ROWS_FVECS, fv, sizeof fv);
	assert_string_equal(s, "1|0.5,1.5,2.5,|n0 f0\n2|10.5,11.5,12.5,|n0 f0\nrc=0 at 0: -\n");
	free(s);
	s = same_any_split(VECFS_ROWS_BVECS, bv, sizeof bv);
	assert_string_equal(s, "1|200,201,202,|n0 f0\n2|210,211,212,|n0 f0\nrc=0 at 0: -\n");
	free(s);
	/* a truncated last row is told at the end */
	s = parse_cut(VECFS_ROWS_FVECS, fv, sizeof fv - 1, NULL);
	assert_non_null(strstr(s, "rc=-22 at 2: truncated: 15 of 16 bytes"));
	free(s);
}

/* An .npy v1.0 file of rows x dim values of the dtype descr (8: f8). */
static size_t npy_make(uint8_t *out, const char *descr, int rows, int dim)
{
	char dict[128];
	int dl = snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': (%d, %d), }",
			  descr, rows, dim);
	size_t hl = (size_t)dl + 1;
	while ((10 + hl) % 64)
		hl++;
	memcpy(out, "\x93NUMPY\x01\x00", 8);
	out[8] = (uint8_t)hl;
	out[9] = (uint8_t)(hl >> 8);
	memcpy(out + 10, dict, (size_t)dl);
	memset(out + 10 + dl, ' ', hl - (size_t)dl - 1);
	out[10 + hl - 1] = '\n';
	size_t o = 10 + hl;
	for (int i = 0; i < rows * dim; i++) {
		if (descr[2] == '8') {
			double d = i * 0.25;
			memcpy(out + o, &d, 8);
			o += 8;
		} else {
			float f = (float)i * 0.25f;
			memcpy(out + o, &f, 4);
			o += 4;
		}
	}
	return o;
}

static void test_npy_rows_any_split(void **state)
{
	(void)state;
	uint8_t buf[512];
	size_t n = npy_make(buf, "<f4", 2, 2);
	char *s = same_any_split(VECFS_ROWS_NPY, buf, n);
	assert_string_equal(s, "1|0,0.25,|n0 f0\n2|0.5,0.75,|n0 f0\nrc=0 at 0: -\n");
	free(s);
	n = npy_make(buf, "<f8", 2, 2);
	s = same_any_split(VECFS_ROWS_NPY, buf, n);
	assert_string_equal(s, "1|0,0.25,|n0 f0\n2|0.5,0.75,|n0 f0\nrc=0 at 0: -\n");
	free(s);
	/* fewer rows than the header declares */
	s = parse_cut(VECFS_ROWS_NPY, buf, n - 16, NULL);
	assert_non_null(strstr(s, "truncated: the header declares 2 rows, the file holds 1"));
	free(s);
	/* a version it does not read is told whatever the pieces (it was
	 * "truncated" when the bytes after the version came apart) */
	s = same_any_split(VECFS_ROWS_NPY, "\x93NUMPY\x8dor\"\x87", 11);
	assert_string_equal(s, "rc=-22 at 0: .npy format version 141 is not supported\n");
	free(s);
	n = npy_make(buf, ">f4", 1, 2);
	s = parse_cut(VECFS_ROWS_NPY, buf, n, NULL);
	assert_non_null(strstr(s, "rc=-22 at 0: dtype '>f4': expected little-endian"));
	free(s);
}

/* Bad rows: the line or row, and why. */
static void test_rows_reasons(void **state)
{
	(void)state;
	static const struct {
		vecfs_rows_format fmt;
		const char *in, *want;
	} cases[] = {
		{VECFS_ROWS_CSV, "id,x,y\n", "rc=-22 at 1: value 1 'x' is not a number (a header? remove it"},
		{VECFS_ROWS_CSV, "a,1,,2\n", "rc=-22 at 1: field 3 is empty"},
		{VECFS_ROWS_CSV, "a,1e99\n", "rc=-22 at 1: value 1 '1e99' overflows float32"},
		{VECFS_ROWS_CSV, "\"ab,1\n", "rc=-22 at 1: the quoted key has no closing quote"},
		{VECFS_ROWS_CSV, "\"\",1\n", "rc=-22 at 1: the quoted key \"\" is empty"},
		{VECFS_ROWS_JSONL, "{\"key\":\"a\",\"vector\":[1],\"key\":\"b\"}", "rc=-22 at 1: \"key\" given twice"},
		{VECFS_ROWS_JSONL, "{\"key\":\"a\"}", "rc=-22 at 1: no \"vector\" (or an empty one)"},
		{VECFS_ROWS_JSONL, "{\"key\":\"a\\ud800\",\"vector\":[1]}",
		 "rc=-22 at 1: malformed JSON: unpaired surrogate in \\u escape at column 16"},
		{VECFS_ROWS_JSONL, "{\"key\":\"\xC3\x28\",\"vector\":[1]}",
		 "rc=-22 at 1: malformed JSON: a string is not valid UTF-8 at column 11"},
		{VECFS_ROWS_JSONL, "{\"key\":\"a\",\"vector\":[1],\"p\":tru}",
		 "rc=-22 at 1: malformed JSON: unexpected character 't' at column 29"},
		{VECFS_ROWS_JSONL, "{\"key\":\"a\",\"vector\":[1.]}",
		 "rc=-22 at 1: malformed JSON: bad number at column 22"},
		{VECFS_ROWS_JSONL, "{\"key\":\"a\",\"vector\":[1], \"x\": \"\\q\"}",
		 "rc=-22 at 1: malformed JSON: bad escape '\\q' at column 34"},
		{VECFS_ROWS_JSONL, "{\"key\":\"a\",\"vector\":[1], \"x\": [1",
		 "rc=-22 at 1: malformed JSON: expected ',' or ']' at the end of the line"},
		{VECFS_ROWS_FVECS, "\x00\x00\x00\x00", "rc=-22 at 1: dimension 0 is out of range 1..16384"},
		{VECFS_ROWS_NPY, "\x93NUMPZ", "rc=-22 at 0: not an .npy file (no \\x93NUMPY magic)"},
		{VECFS_ROWS_NPY, "\x93NUM", "rc=-22 at 0: truncated .npy header (4 bytes)"},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		size_t len = cases[i].fmt == VECFS_ROWS_FVECS ? 4 : strlen(cases[i].in);
		char *s = parse_cut(cases[i].fmt, cases[i].in, len, NULL);
		if (!strstr(s, cases[i].want))
			fail_msg("case %zu: %s\nwanted: %s", i, s, cases[i].want);
		free(s);
	}
}

/* JSON nested past 256 levels is a limit (E2BIG), not a malformed line. */
static void test_jsonl_depth(void **state)
{
	(void)state;
	char buf[1200];
	for (int deep = 256; deep <= 258; deep++) {
		int o = snprintf(buf, sizeof buf, "{\"key\":\"a\",\"vector\":[1],\"payload\":");
		for (int i = 0; i < deep; i++)
			buf[o++] = '[';
		for (int i = 0; i < deep; i++)
			buf[o++] = ']';
		memcpy(buf + o, "}\n", 3);
		char *s = parse_cut(VECFS_ROWS_JSONL, buf, strlen(buf), NULL);
		if (deep <= 257 && !strstr(s, "rc=0"))
			fail_msg("%d: %s", deep, s);
		if (deep <= 257)
			assert_non_null(strstr(s, "rc=0"));
		else
			assert_non_null(strstr(s, "rc=-7 at 1: nested too deeply (more than 256 levels)"));
		free(s);
	}
}

/* A line longer than the limit fails when its bytes pass it; a parser's
 * memory is asked for, and a refusal fails the feed. */
static void test_rows_bounds(void **state)
{
	(void)state;
	size_t len = VECFS_ROWS_LINE_MAX + 10;
	char *big = malloc(len);
	assert_non_null(big);
	memset(big, '1', len);
	size_t cuts[] = {4096, 0};
	char *s = parse_cut(VECFS_ROWS_CSV, big, len, cuts);
	assert_non_null(strstr(s, "rc=-22 at 1: longer than 4194304 bytes"));
	free(s);
	free(big);

	got g = {0};
	g.mem_max = 100;
	vecfs_rows *r = vecfs_rows_new(VECFS_ROWS_CSV, on_row, on_mem, &g);
	assert_int_equal(vecfs_rows_feed(r, "a,1\n", 4), -ENOMEM);
	assert_int_equal(g.mem, 0);
	vecfs_rows_free(r);

	/* the callback's failure stops the feed, without a reason of the parser's */
	got h = {0};
	h.stop_at = 2;
	r = vecfs_rows_new(VECFS_ROWS_CSV, on_row, on_mem, &h);
	assert_int_equal(vecfs_rows_feed(r, "a,1\nb,2\nc,3\n", 12), -ECANCELED);
	assert_null(vecfs_rows_error(r, NULL));
	assert_int_equal(vecfs_rows_count(r), 1);
	/* the place is kept across release; reset starts again */
	vecfs_rows_reset(r);
	h.stop_at = 0;
	assert_int_equal(vecfs_rows_feed(r, "x,1\n", 4), 0);
	vecfs_rows_release(r);
	assert_int_equal(h.mem, 0);
	assert_int_equal(vecfs_rows_feed(r, "y,2\n", 4), 0);
	assert_int_equal(vecfs_rows_count(r), 2);
	vecfs_rows_free(r);
	assert_non_null(strstr(h.s, "1|k=x|1,|n0 f0\n2|k=y|2,|n0 f0\n"));
	free(h.s);
	free(g.s);

	assert_int_equal(vecfs_rows_format_of("a.ndjson"), VECFS_ROWS_JSONL);
	assert_int_equal(vecfs_rows_format_of("a.npy"), VECFS_ROWS_NPY);
	assert_int_equal(vecfs_rows_format_of(".csv"), -1);
}

/* Bytes of the heap in use. */
static size_t heap_used(void)
{
	struct mallinfo2 mi = mallinfo2();
	return mi.uordblks + mi.hblkhd;
}

/* What the parser holds is what it asked of mem: a short key on a long
 * line (a JSON line padded with blanks, a quoted key before a long run of
 * numbers) takes a buffer of the key's size, counted. */
static void test_rows_memory_counted(void **state)
{
	(void)state;
	size_t pad = (size_t)2 << 20;
	static const struct {
		vecfs_rows_format fmt;
		const char *head, *tail;
	} lines[] = {
		{VECFS_ROWS_JSONL, "{\"key\": \"k\", \"vector\": [1, 2]", "}\n"},
		{VECFS_ROWS_CSV, "\"k\",1,", "2\n"},
		{VECFS_ROWS_KEYS, "\"k\"", "\n"},
	};
	for (size_t t = 0; t < sizeof lines / sizeof lines[0]; t++) {
		size_t hl = strlen(lines[t].head), tl = strlen(lines[t].tail);
		char *line = malloc(hl + pad + tl);
		assert_non_null(line);
		memcpy(line, lines[t].head, hl);
		memset(line + hl, ' ', pad);
		memcpy(line + hl + pad, lines[t].tail, tl);
		got g = {0};
		vecfs_rows *r = vecfs_rows_new(lines[t].fmt, on_row, on_mem, &g);
		assert_non_null(r);
		size_t before = heap_used();
		assert_int_equal(vecfs_rows_feed(r, line, hl + pad + tl), 0);
		size_t held = heap_used() - before;
		free(line);
		assert_non_null(strstr(g.s, "k=k|"));
		/* the rendered rows (g.s) are the test's own */
		held = held > g.cap ? held - g.cap : 0;
		if (held > (size_t)g.mem + 4096)
			fail_msg("format %d: the parser holds %zu bytes, counted %lld", (int)lines[t].fmt,
				 held, (long long)g.mem);
		vecfs_rows_free(r);
		assert_int_equal(g.mem, 0);
		free(g.s);
	}
}

/* ------------------------------------------------------------ JSON scanner */

static void test_json_scanner(void **state)
{
	(void)state;
	char out[64], why[160];
	size_t i = 0, ol = 0;
	const char s1[] = "\"a\\\"\\u00e9\\ud83d\\ude00\\n\"x";
	assert_int_equal(vf_json_string(s1, sizeof s1 - 1, &i, out, &ol, why, sizeof why), 0);
	assert_int_equal(i, sizeof s1 - 2);
	assert_int_equal(ol, 9);
	assert_memory_equal(out, "a\"\xC3\xA9\xF0\x9F\x98\x80\n", 9);
	static const struct {
		const char *s, *why;
	} bad[] = {
		{"\"\\udc00\"", "unpaired surrogate"}, {"\"\\ud800\\u0041\"", "unpaired surrogate"},
		{"\"\\u12zz\"", "bad \\u escape"},        {"\"\\u12", "truncated \\u escape"},
		{"\"\xED\xA0\x80\"", "not valid UTF-8"}, {"\"a\tb\"", "control character"},
		{"\"abc", "unterminated string"},        {"\"\\", "unterminated string"},
	};
	for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
		i = 0;
		why[0] = 0;
		assert_int_equal(vf_json_string(bad[k].s, strlen(bad[k].s), &i, NULL, NULL, why, sizeof why),
				 -EINVAL);
		if (!strstr(why, bad[k].why))
			fail_msg("%s: %s", bad[k].s, why);
	}
	assert_int_equal(vf_json_number("-0.5e+3,", 8, 0, NULL, 0), 7);
	assert_int_equal(vf_json_number("01", 2, 0, NULL, 0), 1);
	assert_int_equal(vf_json_number("1.e", 3, 0, why, sizeof why), 0);
	assert_string_equal(why, "bad number");
	uint8_t stack[4];
	uint32_t depth, nv;
	const char v[] = " {\"a\": [1, {\"b\": null}], \"c\": \"d\"} ,";
	i = 0;
	assert_int_equal(vf_json_value(v, sizeof v - 1, &i, 16, stack, &depth, &nv, why, sizeof why), 0);
	assert_int_equal(i, sizeof v - 3);
	assert_int_equal(depth, 3);
	assert_int_equal(nv, 6);
	i = 0;
	assert_int_equal(vf_json_value("[[[1]]]", 7, &i, 2, stack, NULL, NULL, why, sizeof why), -E2BIG);
	i = 0;
	assert_int_equal(vf_json_value("[[1]]", 5, &i, 2, stack, NULL, NULL, why, sizeof why), 0);
	static const char *const notjson[] = {"{\"a\" 1}", "{1:2}", "[1,]", "[1 2]", "nul", "", "{\"a\":1,}"};
	for (size_t k = 0; k < sizeof notjson / sizeof notjson[0]; k++) {
		i = 0;
		assert_int_equal(vf_json_value(notjson[k], strlen(notjson[k]), &i, 16, stack, NULL, NULL,
					       why, sizeof why), -EINVAL);
	}
}

/* ------------------------------------------------------------ query input */

/* rows .fvecs rows of two numbers: row r is (r, r + 0.5). */
static void fvecs_pairs(uint8_t *fv, int rows)
{
	for (int r = 0; r < rows; r++) {
		put_le32(fv + 12 * r, 2);
		float a = (float)r, b = (float)r + 0.5f;
		memcpy(fv + 12 * r + 4, &a, 4);
		memcpy(fv + 12 * r + 8, &b, 4);
	}
}

static void test_query_lines(void **state)
{
	(void)state;
	vecfs_query_opts o;
	float v[VECFS_DIM_MAX];
	uint32_t dim = 0;
	char why[200];
	memset(&o, 0, sizeof o);
	assert_int_equal(vecfs_query_line_parse("  # x", 5, &o, v, &dim, why, sizeof why), 0);
	assert_int_equal(vecfs_query_line_parse(" , \t", 4, &o, v, &dim, why, sizeof why), 0);
	assert_int_equal(vecfs_query_line_parse("k=7", 3, &o, v, &dim, why, sizeof why), 1);
	assert_int_equal(o.k, 7);
	assert_int_equal(vecfs_query_line_parse("[1, 2\t3 ]\r", 10, &o, v, &dim, why, sizeof why), 2);
	assert_int_equal(dim, 3);
	assert_true(v[0] == 1 && v[1] == 2 && v[2] == 3);
	assert_int_equal(vecfs_query_line_parse("[1 2", 4, &o, v, &dim, why, sizeof why), -EINVAL);
	assert_string_equal(why, "'[' without a closing ']'");
	assert_int_equal(vecfs_query_line_parse("[ ]", 3, &o, v, &dim, why, sizeof why), -EINVAL);
	assert_int_equal(vecfs_query_line_parse("1 nan", 5, &o, v, &dim, why, sizeof why), -EINVAL);
	assert_string_equal(why, "'nan' is not a finite number");
	assert_int_equal(vecfs_query_line_parse("1 x", 3, &o, v, &dim, why, sizeof why), -EINVAL);
	assert_string_equal(why, "'x' is not a number");

	uint8_t fv[2 * 12];
	fvecs_pairs(fv, 2);
	size_t rows;
	float out[4];
	assert_int_equal(vecfs_fvecs_rows(fv, sizeof fv, &dim, &rows, out), 1);
	assert_int_equal(dim, 2);
	assert_int_equal(rows, 2);
	assert_true(out[3] == 1.5f);
	assert_int_equal(vecfs_fvecs_rows(fv, sizeof fv - 1, &dim, &rows, NULL), 0);
	put_le32(fv + 12, 3);
	assert_int_equal(vecfs_fvecs_rows(fv, sizeof fv, &dim, &rows, NULL), 0);
}

/* A whole input gathered as query/ID/in takes it: lines counted across
 * pieces, each vector's line and the filter's kept (a failure found when
 * the query runs names them), the store's dimension asked of the first
 * vector, a copy its own, binary rows in place of text. */
static void test_query_input(void **state)
{
	(void)state;
	vecfs_query_input qi, cp;
	char why[200] = "";
	unsigned line = 9;
	memset(&qi, 0, sizeof qi);
	const char *a = "# two queries\nk=3\n1 2\n";
	assert_int_equal(vecfs_query_input_text(&qi, a, strlen(a), why, sizeof why), 0);
	const char *b = "filter={\"a\":1}\n\n3,4";
	assert_int_equal(vecfs_query_input_text(&qi, b, strlen(b), why, sizeof why), 0);
	assert_int_equal(qi.lines, 6);
	assert_int_equal(qi.nq, 2);
	assert_int_equal(qi.dim, 2);
	assert_int_equal(qi.opts.k, 3);
	assert_int_equal(qi.vline[0], 3);
	assert_int_equal(qi.vline[1], 6);
	assert_int_equal(qi.filter_line, 4);
	assert_string_equal(qi.filter, "{\"a\":1}");
	assert_ptr_equal(qi.opts.filter, qi.filter);
	assert_int_equal(vecfs_query_input_line_of(&qi, "query 2: no such thing"), 6);
	assert_int_equal(vecfs_query_input_line_of(&qi, "filter: bad"), 4);
	assert_int_equal(vecfs_query_input_line_of(&qi, "query 3: past the end"), 0);

	assert_int_equal(vecfs_query_input_copy(&cp, &qi), 0);
	vecfs_query_input_free(&qi); /* the copy holds its own memory */
	assert_int_equal(cp.nq, 2);
	assert_true(cp.vecs[0] == 1 && cp.vecs[1] == 2 && cp.vecs[2] == 3 && cp.vecs[3] == 4);
	assert_int_equal(cp.vline[1], 6);
	assert_string_equal(cp.filter, "{\"a\":1}");
	assert_ptr_equal(cp.opts.filter, cp.filter);
	/* a vector of another length fails on its own line; what came before stays */
	assert_int_equal(vecfs_query_input_text(&cp, "5 6 7\n", 6, why, sizeof why), -EINVAL);
	assert_string_equal(why, "3 numbers, the vectors before have 2");
	assert_int_equal(cp.lines, 7);
	assert_int_equal(cp.nq, 2);
	vecfs_query_input_free(&cp);
	assert_null(cp.vecs);

	/* the first vector must have the store's dimension */
	memset(&qi, 0, sizeof qi);
	qi.want_dim = 3;
	assert_int_equal(vecfs_query_input_parse(&qi, "k=1\n1 2\n", 8, &line, why, sizeof why), -EINVAL);
	assert_string_equal(why, "2 numbers, the store has dim 3");
	assert_int_equal(line, 2);
	vecfs_query_input_free(&qi);
	memset(&qi, 0, sizeof qi);
	assert_int_equal(vecfs_query_input_parse(&qi, "# none\n", 7, &line, why, sizeof why), -EINVAL);
	assert_string_equal(why, "no query vector");
	assert_int_equal(line, 0);
	vecfs_query_input_free(&qi);
	memset(&qi, 0, sizeof qi);
	assert_int_equal(vecfs_query_input_parse(&qi, "", 0, &line, why, sizeof why), -EINVAL);
	assert_string_equal(why, "no query vector (empty)");
	vecfs_query_input_free(&qi);

	/* binary rows: no lines, "query N" names the row itself */
	uint8_t fv[3 * 12];
	fvecs_pairs(fv, 3);
	memset(&qi, 0, sizeof qi);
	assert_int_equal(vecfs_query_input_parse(&qi, fv, sizeof fv, &line, why, sizeof why), 0);
	assert_int_equal(qi.nq, 3);
	assert_int_equal(qi.dim, 2);
	assert_null(qi.vline);
	assert_true(qi.vecs[4] == 2 && qi.vecs[5] == 2.5f);
	assert_int_equal(vecfs_query_input_line_of(&qi, "query 2: x"), 0);
	/* text after binary rows is refused, not written past them */
	assert_int_equal(vecfs_query_input_text(&qi, "1 2\n", 4, why, sizeof why), -EINVAL);
	assert_string_equal(why, "text after binary rows");
	assert_int_equal(vecfs_query_input_copy(&cp, &qi), 0);
	assert_null(cp.vline);
	assert_int_equal(cp.nq, 3);
	vecfs_query_input_free(&cp);
	assert_int_equal(vecfs_query_input_fvecs(&qi, "1 2\n", 4), 0); /* not rows */
	vecfs_query_input_free(&qi);
}

/* The input as a whole text, and as its head parsed into qi and its
 * tail (from a newline) into an input of its own, joined: the same
 * vectors, lines and outcome when vecfs_query_input_append() joins them
 * (1), or when it declines (0) and the head's input takes the tail
 * itself, as a caller then does. */
static int joined_same(const char *text, uint32_t want_dim, size_t cut, int *joined)
{
	vecfs_query_input whole, head, tail;
	char w1[200] = "", w2[200] = "", w3[8];
	memset(&whole, 0, sizeof whole);
	memset(&head, 0, sizeof head);
	memset(&tail, 0, sizeof tail);
	whole.want_dim = head.want_dim = want_dim;
	size_t n = strlen(text);
	int r1 = vecfs_query_input_text(&whole, text, n, w1, sizeof w1);
	int r2 = vecfs_query_input_text(&head, text, cut, w2, sizeof w2);
	*joined = -1;
	if (r2 == 0 && vecfs_query_input_text(&tail, text + cut, n - cut, w3, sizeof w3) == 0) {
		*joined = vecfs_query_input_append(&head, &tail);
		assert_true(*joined >= 0);
	}
	if (r2 == 0 && *joined != 1)
		r2 = vecfs_query_input_text(&head, text + cut, n - cut, w2, sizeof w2);
	int same = r1 == r2 && whole.lines == head.lines && whole.nq == head.nq &&
		   strcmp(w1, w2) == 0 && (r1 || whole.dim == head.dim) &&
		   whole.opts.k == head.opts.k && whole.opt_lines == head.opt_lines &&
		   (!whole.nq || (!memcmp(whole.vecs, head.vecs, whole.nq * whole.dim * sizeof(float)) &&
				  !memcmp(whole.vline, head.vline, whole.nq * sizeof(unsigned))));
	vecfs_query_input_free(&whole);
	vecfs_query_input_free(&head);
	vecfs_query_input_free(&tail);
	return same;
}

/* Text parsed in pieces at once and joined in order (the daemon's `in`
 * on several CPUs) gives what it gives parsed in one go, cut after every
 * line: vectors after vectors are joined; a tail with an option line, a
 * vector of another dimension than the head's or the store's, or after
 * binary rows is not, and parsed again in order it fails on the line it
 * would have. */
static void test_query_input_append(void **state)
{
	(void)state;
	static const struct {
		const char *text;
		uint32_t want_dim;
		int joins; /* at every cut after the first line: 1 joined, 0 declined */
	} cases[] = {
		{"1 2\n3 4\n\n# c\n5,6\n[7 8]\n9 10", 0, 1},
		{"1 2\n3 4\n5 6\n", 2, 1},
		{"k=2\n1 2\n3 4\n5 6\n", 2, 1},
		{"1 2\n3 4\nk=2\n5 6\n", 0, -1},          /* joined before the k=, not after */
		{"1 2\n3 4\n5 6 7\n8 9\n", 0, -1},        /* fails on line 3 either way */
		{"1 2 3\n4 5 6\n", 2, -1},                 /* the store's dim: line 1 */
		{"# x\n\n4 5 6\n", 2, -1},                 /* ... line 3, after lines of none */
		{"1 2\nfilter={\"a\":1}\n3 4\n", 0, -1},
		{"1 2\n3 x\n5 6\n", 0, -1},
	};
	for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
		const char *t = cases[c].text;
		int saw[2] = {0, 0};
		for (size_t cut = 0; t[cut]; cut++) {
			if (cut && t[cut - 1] != '\n')
				continue;
			int joined;
			assert_true(joined_same(t, cases[c].want_dim, cut, &joined));
			if (joined >= 0 && cut) /* (a cut at 0 leaves the head nothing) */
				saw[joined] = 1;
		}
		if (cases[c].joins == 1)
			assert_true(saw[1] && !saw[0]);
	}
	/* the declined cases, each cut: */
	int joined;
	assert_true(joined_same("1 2\n3 4\nk=2\n5 6\n", 0, 8, &joined));
	assert_int_equal(joined, 0); /* the tail's option line */
	assert_true(joined_same("1 2\n3 4\nk=2\n5 6\n", 0, 4, &joined));
	assert_int_equal(joined, 0);
	assert_true(joined_same("1 2\n3 4\n5 6 7\n8 9\n", 0, 8, &joined));
	assert_int_equal(joined, -1); /* the tail fails on its own: 2 dims then 3 */
	assert_true(joined_same("1 2\n3 4\n5 6 7\n8 9 1\n", 0, 8, &joined));
	assert_int_equal(joined, 0); /* the tail's 3 numbers against the head's 2 */
	assert_true(joined_same("# x\n\n4 5 6\n", 2, 5, &joined));
	assert_int_equal(joined, 0); /* the store's dim, asked of the tail's first */
	assert_true(joined_same("# x\n\n4 5\n", 2, 5, &joined));
	assert_int_equal(joined, 1);

	/* the head's binary rows: text after them is the head's to refuse */
	uint8_t fv[2 * 12];
	fvecs_pairs(fv, 2);
	vecfs_query_input qi, tail;
	char why[200];
	memset(&qi, 0, sizeof qi);
	memset(&tail, 0, sizeof tail);
	assert_int_equal(vecfs_query_input_fvecs(&qi, fv, sizeof fv), 1);
	assert_int_equal(vecfs_query_input_text(&tail, "1 2\n", 4, why, sizeof why), 0);
	assert_int_equal(vecfs_query_input_append(&qi, &tail), 0);
	assert_int_equal(qi.nq, 2);
	vecfs_query_input_free(&tail);
	assert_int_equal(vecfs_query_input_text(&tail, "# only\n\n", 8, why, sizeof why), 0);
	assert_int_equal(vecfs_query_input_append(&qi, &tail), 1); /* no vector: lines only */
	assert_int_equal(qi.lines, 2);
	assert_int_equal(qi.nq, 2);
	vecfs_query_input_free(&tail);
	vecfs_query_input_free(&qi);

	/* binary rows offered as the text that follows: declined, dst as it
	 * was (they have no lines to count on) */
	memset(&qi, 0, sizeof qi);
	memset(&tail, 0, sizeof tail);
	assert_int_equal(vecfs_query_input_text(&qi, "1 2\n", 4, why, sizeof why), 0);
	assert_int_equal(vecfs_query_input_fvecs(&tail, fv, sizeof fv), 1);
	assert_int_equal(vecfs_query_input_append(&qi, &tail), 0);
	assert_int_equal(qi.nq, 1);
	assert_int_equal(qi.lines, 1);
	vecfs_query_input_free(&tail);
	vecfs_query_input_free(&qi);
}

/* The one-pass readers of a number (codec/number.h) give what strtof()
 * gives the token, and its length, wherever they take it: random
 * [-]D[.F] tokens (leading zeros, 1-8 digits in D, 0-16 in F: up to 24;
 * the readers take 19 at most, so the 16 to 19 that print a double in
 * full too), followed by a separator, a letter or an exponent, then bytes
 * no number takes, in room of 18 bytes or more, or only the token's
 * (vf_decimal_fast() declines when it lacks room for its looks). */
static void test_decimal_readers(void **state)
{
	(void)state;
	uint64_t r = 5;
	static const char *const after[] = {" ", ",", "\t", "x", "e5", "E-3", ""};
	size_t fast = 0, tried = 0, fast_long = 0, fast_wide = 0, declined_long = 0;
	for (int i = 0; i < 300000; i++) {
		char tok[48], buf[80];
		size_t t = 0;
		r = r * 6364136223846793005ull + 1442695040888963407ull;
		uint64_t x = r >> 11;
		if (x & 1)
			tok[t++] = '-';
		int k1 = 1 + (int)((x >> 1) % 8), k2 = (int)((x >> 4) % 18);
		for (int d = 0; d < k1; d++) {
			r = r * 6364136223846793005ull + 1442695040888963407ull;
			tok[t++] = (char)('0' + (d == 0 && (x >> 8) % 3 == 0 ? 0 : (r >> 33) % 10));
		}
		if (k2) {
			tok[t++] = '.';
			for (int d = 0; d < k2 - 1; d++) {
				r = r * 6364136223846793005ull + 1442695040888963407ull;
				tok[t++] = (char)('0' + (r >> 33) % 10);
			}
		}
		tok[t] = 0;
		const char *aft = after[(x >> 12) % 7];
		int len = snprintf(buf, sizeof buf, "%s%s||||||||||||||||||", tok, aft);
		size_t n = (x >> 15) % 4 == 0 ? t + strlen(aft) : (size_t)len;
		/* what the token reads as, to where a number cannot go on */
		size_t end = t + (aft[0] == 'e' || aft[0] == 'E' ? strlen(aft) : 0);
		char want_tok[64];
		memcpy(want_tok, buf, end);
		want_tok[end] = 0;
		float want = strtof(want_tok, NULL), val;
		size_t used = 0;
		tried++;
		if (vf_decimal_fast(buf, n, &val, &used) == 0) {
			fast++;
			fast_long += k2 > 9;
			fast_wide += k1 + k2 - 1 > 15; /* M past 2^53 */
			if (used != end || memcmp(&val, &want, 4)) {
				fail_msg("vf_decimal_fast(\"%.*s\") = %a, %zu bytes; strtof: %a, %zu",
					 (int)n, buf, (double)val, used, (double)want, end);
			}
		} else if (n >= 18 && end == t && k1 <= 7 && k2 != 1 && k2 <= 16 &&
			   (k2 <= 8 || (k1 + k2 - 1 <= 19 && n >= (size_t)((x & 1) + k1 + 17))) &&
			   aft[0] != 'e' && aft[0] != 'E' && aft[0]) {
			/* only a double at a halfway point may be declined: exactly
			 * there with 15 digits at most (M below 2^53), within two
			 * units of its last place of it with more (strtod()'s is
			 * within a half of the reader's and the number's) */
			double d = strtod(want_tok, NULL);
			uint64_t bits, low, half = 1ull << 28;
			memcpy(&bits, &d, 8);
			low = bits & ((1ull << 29) - 1);
			if (k1 + k2 - 1 <= 15)
				assert_true(low == half);
			else
				assert_true(low + 4 >= half && low <= half + 4);
			declined_long += k1 + k2 - 1 > 15;
		}
		if (vf_decimal_prefix(buf, n, &val, &used) == 0 &&
		    (used != end || memcmp(&val, &want, 4)))
			fail_msg("vf_decimal_prefix(\"%.*s\") = %a, %zu bytes; strtof: %a, %zu", (int)n,
				 buf, (double)val, used, (double)want, end);
	}
	assert_true(fast > tried / 3);
	assert_true(fast_long > tried / 10); /* F of 9 digits or more */
	assert_true(fast_wide > tried / 50);  /* 16 to 19 digits */
	assert_true(declined_long < tried / 1000);
	float f;
	size_t u;
	/* "%.9g" of a float below 1: 13 bytes, 10 in F */
	assert_int_equal(vf_decimal_fast("-0.0535101593 1 2 3 4 5 6 7", 27, &f, &u), 0);
	assert_true(f == -0.0535101593f && u == 13);
	/* an exponent too long to count, after as many digits after the point:
	 * strtof() decides (overflow), not the sum of the two */
	{
		size_t zn = 100000, tn = zn + 12;
		char *t = malloc(tn + 1);
		assert_non_null(t);
		memcpy(t, "0.", 2);
		memset(t + 2, '0', zn - 1);
		memcpy(t + 1 + zn, "1e1000000", 9);
		tn = 1 + zn + 9;
		t[tn] = 0;
		size_t u2;
		assert_int_equal(vf_decimal_prefix(t, tn, &f, &u2), 1);
		assert_int_equal(vecfs_parse_float(t, tn, &f), -ERANGE);
		free(t);
	}
	/* room for the first looks, not for its F's second: declined */
	assert_int_equal(vf_decimal_fast("-0.0535101593 1 2 3", 18, &f, &u), 1);
	assert_int_equal(vf_decimal_fast("12 34 56 78 90 12", 17, &f, &u), 1); /* 17 bytes */
	assert_int_equal(vf_decimal_fast("12 34 56 78 90 123", 18, &f, &u), 0);
	assert_true(f == 12.0f && u == 2);
}

/* Numbers of 19 digits next to a halfway point between two floats, where
 * the double the readers compute from 19 digits (rounded twice) may fall
 * on the other side of the point than the number: they read strtof()'s
 * float or decline, never another.  Each token is the point itself
 * printed with 15 decimals (19 digits for 1000-9999), or a little above
 * or below it. */
static void test_decimal_near_halfway(void **state)
{
	(void)state;
	uint64_t r = 11;
	size_t read = 0;
	for (int i = 0; i < 200000; i++) {
		r = r * 6364136223846793005ull + 1442695040888963407ull;
		float f = 1000.0f + (float)((r >> 40) % 9000) + (float)((r >> 20) & 0xfffff) / 1048576.0f;
		double h = ((double)f + (double)nextafterf(f, INFINITY)) / 2;
		/* (a double's unit in the last place is 1e-13 to 9e-13 here) */
		double off[] = {0, 1e-12, -1e-12, 3e-13, -3e-13, 4e-12, -4e-12};
		h += off[(r >> 8) % 7];
		char buf[64];
		int len = snprintf(buf, sizeof buf, "%.15f 1 2 3 4 5 6 7 8", h);
		size_t tl = (size_t)(strchr(buf, ' ') - buf);
		char tok[40];
		memcpy(tok, buf, tl);
		tok[tl] = 0;
		float want = strtof(tok, NULL), val;
		size_t used;
		if (vf_decimal_fast(buf, (size_t)len, &val, &used) == 0) {
			read++;
			if (used != tl || memcmp(&val, &want, 4))
				fail_msg("vf_decimal_fast(\"%s\") = %a; strtof: %a", tok, (double)val,
					 (double)want);
		}
		if (vf_decimal_prefix(buf, (size_t)len, &val, &used) == 0 &&
		    (used != tl || memcmp(&val, &want, 4)))
			fail_msg("vf_decimal_prefix(\"%s\") = %a; strtof: %a", tok, (double)val,
				 (double)want);
	}
	assert_true(read > 200000 / 7); /* those a few units away are read */
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_decimal_readers),
		cmocka_unit_test(test_decimal_near_halfway),
		cmocka_unit_test(test_text_rows_any_split),
		cmocka_unit_test(test_jsonl_rows_any_split),
		cmocka_unit_test(test_rows_numbers_as_strtof),
		cmocka_unit_test(test_keys_rows_any_split),
		cmocka_unit_test(test_binary_rows_any_split),
		cmocka_unit_test(test_npy_rows_any_split),
		cmocka_unit_test(test_rows_reasons),
		cmocka_unit_test(test_jsonl_depth),
		cmocka_unit_test(test_rows_bounds),
		cmocka_unit_test(test_rows_memory_counted),
		cmocka_unit_test(test_json_scanner),
		cmocka_unit_test(test_query_lines),
		cmocka_unit_test(test_query_input),
		cmocka_unit_test(test_query_input_append),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
