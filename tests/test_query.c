/*
 * tests/test_query.c - query sessions (fs/query.c) driven directly against
 * a store: `in` written in pieces of every size (1 byte to the whole input),
 * sometimes started over by a write at offset 0, then closed
 * (qs_in_flush); then out, out.json and stats read back.
 *
 * A reference reading of `in`, written here from SPEC.md's query/ section
 * and independent of fs/query.c's parsers (numbers through strtof), says
 * what the input holds: the options and the query vectors, or that it is to
 * be rejected, and at which line.  An accepted input must run exactly the
 * reference's vectors with its options: out, out.json and stats are checked
 * against vecfs_search called on the same store with the same vectors and
 * options (same keys, the same float distances, the same counts).  A
 * rejected one must fail with -EINVAL and leave exactly one `errors` line
 * naming query/ID/in (and the reference's line, where it names a line), and
 * no results.  Where SPEC.md leaves the reading open (a `#` line, a comma
 * with no number on a side, a CR inside the line's blanks, values past the
 * library's bounds) either outcome is accepted, but an accepted input must
 * still run what the lenient reading says.
 *
 * out must print each distance so that strtof reads back the same float,
 * one line a hit and one empty line between the results of consecutive
 * vectors; out.json must be valid JSON (checked by a strict reader here)
 * with the same keys, distances and payloads.  The input bounds (EFBIG for
 * one `in`, ENOSPC for all sessions together) refuse the write, log a line,
 * and the close then fails without running any part of the input.
 */
#include <errno.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "../fs/daemon.h"
#include "../fs/ops.h"
#include "../fs/render.h"
#include "../fs/sbuf.h"
#include "testutil.h"
#include "vecfs.h"

#define QD 6             /* the store's dimension */
#define NREC 240         /* its records */
#define FUZZ_CASES 3000
#define IN_BOUND ((size_t)256 << 20) /* one `in` (README: EFBIG past it) */

/* ------------------------------------------------------------ errors */

/* `errors` of the daemon context of the running test (world_make()):
 * lines counted, the latest one. */
static fs_daemon *errs_of;

static const char *last_error(void)
{
	static char last[1100];
	fs_errors_last(&errs_of->errors, last, sizeof last);
	return last;
}
#define nerr ((unsigned)fs_errors_count(&errs_of->errors))
#define lasterr last_error()

/* ------------------------------------------------------------ a byte string */

typedef struct str {
	char *p;
	size_t n, cap;
} str;

static void s_put(str *s, const void *d, size_t n)
{
	if (s->n + n + 1 > s->cap) {
		size_t c = s->cap * 2 + n + 64;
		s->p = realloc(s->p, c);
		assert_non_null(s->p);
		s->cap = c;
	}
	if (n)
		memmove(s->p + s->n, d, n);
	s->n += n;
	s->p[s->n] = 0;
}

static void s_cat(str *s, const char *z)
{
	s_put(s, z, strlen(z));
}

static void s_fmt(str *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void s_fmt(str *s, const char *fmt, ...)
{
	va_list ap, again;
	va_start(ap, fmt);
	va_copy(again, ap);
	int k = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	assert_true(k >= 0);
	char *t = malloc((size_t)k + 1);
	assert_non_null(t);
	vsnprintf(t, (size_t)k + 1, fmt, again);
	va_end(again);
	s_put(s, t, (size_t)k);
	free(t);
}

/* Replace n bytes at `at` by d[0..dn). */
static void s_splice(str *s, size_t at, size_t n, const void *d, size_t dn)
{
	if (at > s->n)
		at = s->n;
	if (n > s->n - at)
		n = s->n - at;
	str t = {0};
	s_put(&t, s->p, at);
	s_put(&t, d, dn);
	s_put(&t, s->p + at + n, s->n - at - n);
	free(s->p);
	*s = t;
	if (!s->p)
		s_put(s, "", 0);
}

static void s_drop(str *s)
{
	free(s->p);
	*s = (str){0};
}

/* Uniform in [0, n), 0 for n = 0. */
static uint64_t pick(rng *r, uint64_t n)
{
	uint64_t x = rng_next(r);
	return n ? x % n : 0;
}

static uint32_t fbits(float f)
{
	union {
		float f;
		uint32_t u;
	} c = {f};
	return c.u;
}

static void le32_put(str *s, uint32_t v)
{
	unsigned char b[4] = {(unsigned char)v, (unsigned char)(v >> 8), (unsigned char)(v >> 16),
			      (unsigned char)(v >> 24)};
	s_put(s, b, 4);
}

static uint32_t le32_at(const char *p)
{
	const unsigned char *u = (const unsigned char *)p;
	return (uint32_t)u[0] | (uint32_t)u[1] << 8 | (uint32_t)u[2] << 16 | (uint32_t)u[3] << 24;
}

/* ------------------------------------------------------------ the store */

/* Keys with bytes JSON escapes, UTF-8 and a blank; every third record has a
 * payload. */
static void key_of(size_t i, char *k, size_t cap)
{
	static const char *const pre[] = {"r", "q\"t", "b\\s", "c\x01", "\xc3\xa9", "s p", "u\x1f"};
	snprintf(k, cap, "%s%zu", pre[i % 7], i);
}

static void payload_of(size_t i, char *p, size_t cap)
{
	if (i % 3)
		p[0] = 0;
	else
		snprintf(p, cap, "{\"i\":%zu,\"s\":[\"x\\\"y\",null,true,-1.5e3]}", i);
}

typedef struct world {
	vecfs *v;
	dataset ds;
	uint64_t gen;
	fs_daemon dm; /* not mounted: its sessions query v */
} world;

static void world_make(world *w, fixture *f, int with_gen)
{
	memset(w, 0, sizeof *w);
	w->v = fx_open(f, NULL);
	set_config(w->v, QD, VECFS_L2);
	vecfs_config c;
	char err[256] = "";
	assert_int_equal(vecfs_config_get(w->v, &c), 0);
	c.nlist = 8;
	assert_int_equal(vecfs_config_set(w->v, &c, err, sizeof err), 0);
	ds_make(&w->ds, 0x9e55, NREC, QD, 8);
	vecfs_row rows[NREC];
	static char keys[NREC][32], pays[NREC][96];
	for (size_t i = 0; i < NREC; i++) {
		key_of(i, keys[i], sizeof keys[i]);
		payload_of(i, pays[i], sizeof pays[i]);
		rows[i] = (vecfs_row){keys[i], strlen(keys[i]), w->ds.x + i * QD, pays[i], strlen(pays[i])};
	}
	size_t bad = 0;
	int rc = vecfs_put(w->v, rows, NREC, QD, &bad, err, sizeof err);
	if (rc)
		print_message("vecfs_put: %s\n", err);
	assert_int_equal(rc, 0);
	if (with_gen)
		w->gen = build(w->v, 1);
	assert_int_equal(fs_daemon_init(&w->dm, f->dir, SESSIONS_DEFAULT, (size_t)1 << 40), 0);
	w->dm.store = w->v;
	errs_of = &w->dm;
}

static void world_free(world *w)
{
	assert_int_equal(w->dm.query_input.used, 0);
	assert_int_equal(w->dm.query_results.used, 0);
	assert_int_equal(w->dm.query_output.used, 0);
	fs_daemon_fini(&w->dm); /* before the store closes: a search ahead may use it */
	ds_free(&w->ds);
}

/* ------------------------------------------------------------ the reference */

enum { ACCEPT, REJECT, EITHER };

typedef struct qref {
	int verdict;
	unsigned line;  /* the rejected line (0: the input as a whole, or a row) */
	int line_known; /* no open reading came before it */
	int open;       /* something open was read */
	vecfs_query_opts o;
	float *v;
	size_t nq, cap;
} qref;

static int ref_reject(qref *q, unsigned line)
{
	q->verdict = REJECT;
	q->line = line;
	q->line_known = !q->open;
	return -1;
}

static void ref_add(qref *q, const float *v)
{
	if (q->nq == q->cap) {
		q->cap = q->cap ? 2 * q->cap : 8;
		q->v = realloc(q->v, q->cap * QD * sizeof(float));
		assert_non_null(q->v);
	}
	memcpy(q->v + q->nq++ * QD, v, QD * sizeof(float));
}

static int is_sep(char c)
{
	return c == ' ' || c == '\t' || c == ',';
}

static int is_blank_cr(char c)
{
	return c == ' ' || c == '\t' || c == '\r';
}

/* A positive integer written in decimal digits: 0 and its value, or -1. */
static int ref_number(const char *s, size_t n, float *out);

static int ref_count(const char *s, size_t n, uint32_t *out)
{
	uint64_t v = 0;
	if (!n)
		return -1;
	for (size_t i = 0; i < n; i++) {
		if (s[i] < '0' || s[i] > '9')
			return -1;
		v = v * 10 + (uint64_t)(s[i] - '0');
		if (v > UINT32_MAX)
			return -1;
	}
	if (!v)
		return -1;
	*out = (uint32_t)v;
	return 0;
}

/* `name=value` tokens separated by blanks (a comma between them: open). */
static int ref_options(qref *q, const char *s, size_t n, unsigned line)
{
	size_t i = 0;
	while (i < n) {
		if (s[i] == ',')
			q->open = 1;
		if (is_sep(s[i])) {
			i++;
			continue;
		}
		size_t b = i;
		while (i < n && !is_sep(s[i]))
			i++;
		const char *t = s + b, *eq = memchr(t, '=', i - b);
		if (!eq)
			return ref_reject(q, line);
		size_t nl = (size_t)(eq - t), vl = i - b - nl - 1;
		const char *val = eq + 1;
		uint32_t u;
		if (nl == 4 && !memcmp(t, "mode", 4)) {
			if (vl == 3 && !memcmp(val, "ann", 3))
				q->o.exact = 0;
			else if (vl == 5 && !memcmp(val, "exact", 5))
				q->o.exact = 1;
			else
				return ref_reject(q, line);
			continue;
		}
		if (nl == 6 && !memcmp(t, "recall", 6)) {
			float f;
			if (ref_number(val, vl, &f) || !(f > 0 && f <= 1))
				return ref_reject(q, line);
			q->o.recall = f;
			continue;
		}
		/* nprobe=0: chosen per query */
		size_t zeros = 0;
		while (zeros < vl && val[zeros] == '0')
			zeros++;
		if (nl == 6 && !memcmp(t, "nprobe", 6) && vl && zeros == vl) {
			q->o.nprobe = 0;
			q->o.auto_nprobe = 1;
			continue;
		}
		if (ref_count(val, vl, &u))
			return ref_reject(q, line);
		if (nl == 6 && !memcmp(t, "nprobe", 6))
			q->o.auto_nprobe = 0;
		if (nl == 1 && t[0] == 'k')
			q->o.k = u;
		else if (nl == 6 && !memcmp(t, "nprobe", 6))
			q->o.nprobe = u;
		else if (nl == 6 && !memcmp(t, "refine", 6))
			q->o.refine = u;
		else
			return ref_reject(q, line);
		/* the library's bounds are not SPEC's: either outcome */
		if (q->o.k > 100000 || q->o.refine > 1000)
			q->open = 1;
	}
	return 0;
}

/* A float32 as strtof reads it in the C locale, the whole token, finite. */
static int ref_number(const char *s, size_t n, float *out)
{
	char small[64], *z = n < sizeof small ? small : malloc(n + 1);
	assert_non_null(z);
	memcpy(z, s, n);
	z[n] = 0;
	char *end;
	errno = 0;
	float f = n && !strchr(" \t\r\n\v\f", z[0]) ? strtof(z, &end) : 0;
	int ok = n && !strchr(" \t\r\n\v\f", z[0]) && end == z + n && isfinite(f);
	if (z != small)
		free(z);
	*out = f;
	return ok ? 0 : -1;
}

/* `dim` numbers separated by blanks or a comma, optionally in [ ]. */
static int ref_vector(qref *q, const char *s, size_t n, unsigned line)
{
	float v[QD];
	int bracket = s[0] == '[';
	if (bracket) {
		if (n < 2 || s[n - 1] != ']')
			return ref_reject(q, line);
		s++;
		n -= 2;
		/* a CR inside the brackets, among blanks: open (read as a blank) */
		for (; n && is_blank_cr(s[0]); s++, n--)
			q->open |= s[0] == '\r';
		for (; n && is_blank_cr(s[n - 1]); n--)
			q->open |= s[n - 1] == '\r';
	}
	size_t cnt = 0, i = 0;
	int commas = 0, first = 1;
	while (i <= n) {
		if (i < n && is_sep(s[i])) {
			commas += s[i] == ',';
			i++;
			continue;
		}
		/* a run of separators ends here: one comma between two numbers */
		if (commas > 1 || (commas && (first || i == n)))
			q->open = 1;
		commas = 0;
		if (i == n)
			break;
		size_t b = i;
		while (i < n && !is_sep(s[i]))
			i++;
		float f;
		if (ref_number(s + b, i - b, &f))
			return ref_reject(q, line);
		if (cnt < QD)
			v[cnt] = f;
		cnt++;
		first = 0;
	}
	if (cnt == 0 && !bracket) {
		q->open = 1; /* separators only */
		return 0;
	}
	if (cnt != QD)
		return ref_reject(q, line);
	ref_add(q, v);
	return 0;
}

static void ref_text(qref *q, const char *p, size_t n)
{
	unsigned line = 0;
	size_t pos = 0;
	while (pos < n) {
		const char *s = p + pos, *nl = memchr(s, '\n', n - pos);
		size_t len = nl ? (size_t)(nl - s) : n - pos;
		pos += len + (nl != NULL);
		line++;
		if (len && s[len - 1] == '\r') /* CRLF */
			len--;
		for (int pass = 0; pass < 2; pass++) {
			while (len && (s[0] == ' ' || s[0] == '\t' || (pass && s[0] == '\r')))
				s++, len--;
			while (len && (s[len - 1] == ' ' || s[len - 1] == '\t' || (pass && s[len - 1] == '\r')))
				len--;
			if (!pass && len && (s[0] == '\r' || s[len - 1] == '\r'))
				q->open = 1; /* a CR among the blanks */
		}
		if (!len)
			continue;
		if (s[0] == '#') {
			q->open = 1; /* SPEC has no comments in `in` */
			continue;
		}
		int rc = memchr(s, '=', len) ? ref_options(q, s, len, line) : ref_vector(q, s, len, line);
		if (rc)
			return;
	}
	if (!q->nq)
		ref_reject(q, 0);
}

/* The whole input is fvecs rows: the same dim in every row header. */
static int fvecs_rows(const char *p, size_t n, uint32_t *dim)
{
	if (n < 8)
		return 0;
	uint32_t d = le32_at(p);
	size_t row = 4 + 4 * (size_t)d;
	if (d < 1 || d > VECFS_DIM_MAX || n % row)
		return 0;
	for (size_t at = 0; at < n; at += row)
		if (le32_at(p + at) != d)
			return 0;
	*dim = d;
	return 1;
}

static void ref_read(qref *q, const char *p, size_t n)
{
	memset(q, 0, sizeof *q);
	uint32_t d;
	if (fvecs_rows(p, n, &d)) {
		if (d != QD) {
			ref_reject(q, 0);
			return;
		}
		for (size_t at = 0; at < n; at += 4 + 4 * QD) {
			float v[QD];
			memcpy(v, p + at + 4, sizeof v);
			for (int j = 0; j < QD; j++)
				if (!isfinite(v[j])) {
					ref_reject(q, 0);
					return;
				}
			ref_add(q, v);
		}
	} else {
		ref_text(q, p, n);
	}
	if (q->verdict != REJECT && q->open)
		q->verdict = EITHER;
}

/* ------------------------------------------------------------ reading out */

/* A number token that strtof reads whole, to exactly want. */
static int roundtrips(const char *s, size_t n, float want)
{
	char t[64];
	if (!n || n >= sizeof t)
		return 0;
	memcpy(t, s, n);
	t[n] = 0;
	char *end;
	float f = strtof(t, &end);
	return end == t + n && fbits(f) == fbits(want);
}

/* out: per vector its hits, KEY<TAB>DISTANCE lines, one empty line between
 * vectors.  0, or why not in why. */
static int out_differs(const char *o, size_t n, const vecfs_results *r, char *why, size_t cap)
{
	size_t at = 0;
	for (size_t i = 0; i < r->nq; i++) {
		if (i) {
			if (at >= n || o[at] != '\n') {
				snprintf(why, cap, "no empty line before the results of vector %zu (byte %zu)", i + 1, at);
				return 1;
			}
			at++;
		}
		for (size_t j = 0; j < r->count[i]; j++) {
			const vecfs_hit *h = &r->hits[i][j];
			if (n - at < h->keylen + 1 || memcmp(o + at, h->key, h->keylen) || o[at + h->keylen] != '\t') {
				snprintf(why, cap, "vector %zu rank %zu: not key '%s' and a tab (byte %zu)", i + 1,
					 j + 1, h->key, at);
				return 1;
			}
			at += h->keylen + 1;
			const char *e = memchr(o + at, '\n', n - at);
			if (!e || !roundtrips(o + at, (size_t)(e - o) - at, h->distance)) {
				snprintf(why, cap, "vector %zu rank %zu: distance '%.*s' does not read back as %.9g",
					 i + 1, j + 1, e ? (int)(e - o - (ptrdiff_t)at) : 20, o + at,
					 (double)h->distance);
				return 1;
			}
			at = (size_t)(e - o) + 1;
		}
	}
	if (at != n) {
		snprintf(why, cap, "%zu bytes after the last result", n - at);
		return 1;
	}
	return 0;
}

/* ---- JSON, read strictly (RFC 8259) */

typedef struct jin {
	const char *p, *e;
	const char *fail;
	char why[96];
} jin;

static int jfail(jin *j, const char *what)
{
	if (!j->fail) {
		snprintf(j->why, sizeof j->why, "%s, at '%.24s'", what, j->p);
		j->fail = j->why;
	}
	return -1;
}

static void jskip(jin *j)
{
	while (j->p < j->e && strchr(" \t\r\n", *j->p) && *j->p)
		j->p++;
}

static int jlit(jin *j, char c)
{
	jskip(j);
	if (j->p >= j->e || *j->p != c)
		return -1;
	j->p++;
	return 0;
}

static int jstr(jin *j, str *out)
{
	if (jlit(j, '"'))
		return jfail(j, "a string expected");
	while (j->p < j->e) {
		unsigned char c = (unsigned char)*j->p++;
		if (c == '"')
			return 0;
		if (c < 0x20)
			return jfail(j, "a control byte in a string");
		if (c != '\\') {
			if (out)
				s_put(out, &c, 1);
			continue;
		}
		if (j->p >= j->e)
			break;
		char x = *j->p++;
		const char *from = "\"\\/bfnrt", *to = "\"\\/\b\f\n\r\t", *k = strchr(from, x);
		if (x && k) {
			if (out)
				s_put(out, to + (k - from), 1);
			continue;
		}
		if (x != 'u' || j->e - j->p < 4)
			return jfail(j, "a bad escape");
		unsigned cp = 0;
		for (int i = 0; i < 4; i++) {
			char h = *j->p++;
			int d = h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10
				: h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
			if (d < 0)
				return jfail(j, "a bad \\u escape");
			cp = cp * 16 + (unsigned)d;
		}
		if (cp >= 0x80)
			return jfail(j, "a \\u escape past ASCII (keys here are escaped only below 0x20)");
		if (out) {
			unsigned char b = (unsigned char)cp;
			s_put(out, &b, 1);
		}
	}
	return jfail(j, "an unterminated string");
}

/* -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)? */
static int jnum(jin *j, const char **s, size_t *n)
{
	jskip(j);
	const char *b = j->p, *p = j->p, *e = j->e;
#define DIGITS(p) ((p) < e && *(p) >= '0' && *(p) <= '9')
	if (p < e && *p == '-')
		p++;
	if (p < e && *p == '0')
		p++;
	else if (DIGITS(p))
		while (DIGITS(p))
			p++;
	else
		return jfail(j, "a number expected");
	if (p < e && *p == '.') {
		p++;
		if (!DIGITS(p))
			return jfail(j, "no digit after '.'");
		while (DIGITS(p))
			p++;
	}
	if (p < e && (*p == 'e' || *p == 'E')) {
		p++;
		if (p < e && (*p == '+' || *p == '-'))
			p++;
		if (!DIGITS(p))
			return jfail(j, "no digit in the exponent");
		while (DIGITS(p))
			p++;
	}
#undef DIGITS
	j->p = p;
	*s = b;
	*n = (size_t)(p - b);
	return 0;
}

static int jvalue(jin *j, int depth)
{
	jskip(j);
	if (depth > 64 || j->p >= j->e)
		return jfail(j, "a value expected");
	const char *s;
	size_t n;
	char c = *j->p;
	if (c == '"')
		return jstr(j, NULL);
	if (c == '{' || c == '[') {
		char close = c == '{' ? '}' : ']';
		j->p++;
		if (jlit(j, close) == 0)
			return 0;
		do {
			if (c == '{' && (jstr(j, NULL) || jlit(j, ':')))
				return jfail(j, "a member expected");
			if (jvalue(j, depth + 1))
				return -1;
		} while (jlit(j, ',') == 0);
		return jlit(j, close) ? jfail(j, "an unclosed object or array") : 0;
	}
	static const char *const words[] = {"true", "false", "null"};
	for (int i = 0; i < 3; i++)
		if ((size_t)(j->e - j->p) >= strlen(words[i]) && !memcmp(j->p, words[i], strlen(words[i]))) {
			j->p += strlen(words[i]);
			return 0;
		}
	return jnum(j, &s, &n);
}

/* One hit object: key, distance and payload, each once. */
static int jhit(jin *j, const vecfs_hit *h)
{
	int seen = 0;
	if (jlit(j, '{'))
		return jfail(j, "a hit is not an object");
	do {
		str name = {0}, key = {0};
		if (jstr(j, &name) || jlit(j, ':')) {
			s_drop(&name);
			return jfail(j, "a member expected");
		}
		int bit = !strcmp(name.p, "key") ? 1 : !strcmp(name.p, "distance") ? 2 : !strcmp(name.p, "payload") ? 4 : 0;
		s_drop(&name);
		if (!bit || (seen & bit))
			return jfail(j, "an unknown or repeated member in a hit");
		seen |= bit;
		const char *s;
		size_t n;
		if (bit == 1) {
			int rc = jstr(j, &key);
			int same = rc == 0 && key.n == h->keylen && !memcmp(key.p, h->key, key.n);
			s_drop(&key);
			if (!same)
				return jfail(j, "a key differs");
		} else if (bit == 2) {
			if (jnum(j, &s, &n) || !roundtrips(s, n, h->distance))
				return jfail(j, "a distance differs");
		} else {
			jskip(j);
			const char *b = j->p;
			if (jvalue(j, 0))
				return -1;
			int none = j->p - b == 4 && !memcmp(b, "null", 4);
			if (h->payload_len ? (size_t)(j->p - b) != h->payload_len || memcmp(b, h->payload, h->payload_len)
					   : !none)
				return jfail(j, "a payload differs");
		}
	} while (jlit(j, ',') == 0);
	if (jlit(j, '}') || seen != 7)
		return jfail(j, "a hit without key, distance or payload");
	return 0;
}

/* out.json: {"generation": G|null, "results": [[hit, ...], ...]}. */
static const char *json_differs(const char *t, size_t n, const vecfs_results *r)
{
	static jin j;
	j = (jin){t, t + n, NULL, ""};
	int seen = 0;
	if (jlit(&j, '{'))
		return "not an object";
	do {
		str name = {0};
		if (jstr(&j, &name) || jlit(&j, ':')) {
			s_drop(&name);
			return j.fail ? j.fail : "a member expected";
		}
		int gen = !strcmp(name.p, "generation"), res = !strcmp(name.p, "results");
		s_drop(&name);
		if ((!gen && !res) || (seen & (gen ? 1 : 2)))
			return "an unknown or repeated member";
		seen |= gen ? 1 : 2;
		if (gen) {
			jskip(&j);
			const char *s;
			size_t l;
			char want[32];
			snprintf(want, sizeof want, "%llu", (unsigned long long)r->generation);
			if (r->generation ? jnum(&j, &s, &l) || l != strlen(want) || memcmp(s, want, l)
					  : j.e - j.p < 4 || memcmp(j.p, "null", 4))
				return "generation differs";
			if (!r->generation)
				j.p += 4;
			continue;
		}
		if (jlit(&j, '['))
			return "results is not an array";
		for (size_t i = 0; i < r->nq; i++) {
			if ((i && jlit(&j, ',')) || jlit(&j, '['))
				return "fewer result arrays than vectors";
			for (size_t k = 0; k < r->count[i]; k++)
				if ((k && jlit(&j, ',')) || jhit(&j, &r->hits[i][k]))
					return j.fail ? j.fail : "fewer hits than expected";
			if (jlit(&j, ']'))
				return "more hits than expected";
		}
		if (jlit(&j, ']'))
			return "more result arrays than vectors";
	} while (jlit(&j, ',') == 0);
	if (jlit(&j, '}') || seen != 3)
		return "not closed, or a member missing";
	jskip(&j);
	return j.p == j.e ? NULL : "bytes after the object";
}

/* stats: the `key = value` line's value, or NULL. */
static const char *stat_of(const char *st, const char *key, char *val, size_t cap)
{
	size_t kl = strlen(key);
	for (const char *l = st; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL)
		if (!strncmp(l, key, kl) && !strncmp(l + kl, " = ", 3)) {
			size_t n = strcspn(l + kl + 3, "\n");
			snprintf(val, cap, "%.*s", (int)n, l + kl + 3);
			return val;
		}
	return NULL;
}

static int stat_is(const char *st, const char *key, unsigned long long want)
{
	char v[64], w[32];
	snprintf(w, sizeof w, "%llu", want);
	return stat_of(st, key, v, sizeof v) && !strcmp(v, w);
}

/* ------------------------------------------------------------ a session */

typedef struct fed {
	int wrc;            /* the first failed write's error */
	int frc;            /* the close's */
	int ran;
	unsigned err_real;  /* errors lines before the input's own writes */
	size_t kept;        /* bytes of the input taken */
} fed;

/* Hand p[0..n) over in write pieces: one byte, a few, up to 4 KiB, random
 * sizes up to the rest, or all at once; with `restart`, first some other
 * bytes that a write at offset 0 then replaces. */
static void feed(qsession *q, rng *r, const char *p, size_t n, const char *junk, size_t jn, fed *f,
		 const char *prev, size_t prevn)
{
	memset(f, 0, sizeof *f);
	size_t off = 0;
	for (size_t at = 0; at < jn;) {
		size_t c = 1 + pick(r, jn - at);
		fs_qs_in_write(q, junk + at, c, off); /* may fail: the restart forgets that */
		at += c;
		off += c;
	}
	f->err_real = nerr;
	int how = (int)pick(r, 6);
	if (how == 0 && n > 3000)
		how = 2;
	off = 0;
	if (!p)
		p = "";
	do {
		size_t left = n - off, c = how == 0 ? 1 : how == 1 ? 1 + pick(r, 6) : how == 2 ? 1 + pick(r, 4096)
			: how == 3 ? 1 + pick(r, left) : how == 4 ? (pick(r, 2) ? 1 + pick(r, 3) : 1 + pick(r, left))
			: left;
		if (c > left)
			c = left;
		int rc = fs_qs_in_write(q, p + off, c, off);
		if (rc && !f->wrc) {
			f->wrc = rc;
			f->kept = off + c;
			/* a program that goes on writing: refused without another line */
			if (!pick(r, 3))
				break;
		} else if (rc) {
			assert_int_equal(rc, -EINVAL);
		}
		off += c;
	} while (off < n);
	if (!f->wrc)
		f->kept = n;
	/* the query runs at the close: until then out is what it was */
	size_t cn = 0;
	char *cur = fs_qs_render(q, QS_OUT, &cn);
	assert_non_null(cur);
	if (cn != prevn || memcmp(cur, prev, cn))
		fail_msg("out changed before the close of in");
	free(cur);
	f->frc = fs_qs_in_flush(q, &f->ran);
}

/* ------------------------------------------------------------ one case */

typedef struct runner {
	world *w;
	qsession *q;
	const char *id;
	rng r;
	unsigned cases, accepted, rejected, open;
} runner;

static void show(const char *p, size_t n)
{
	size_t m = n < 600 ? n : 600;
	print_message("in, %zu bytes%s: \"", n, n > m ? " (the first 600)" : "");
	for (size_t i = 0; i < m; i++) {
		unsigned char c = (unsigned char)p[i];
		print_message(c >= 0x20 && c < 0x7f && c != '\\' ? "%c" : c == '\n' ? "\\n" : "\\x%02x", c);
	}
	print_message("\"\n");
}

#define BAD(...)                                                                          \
	do {                                                                              \
		print_message(__VA_ARGS__);                                               \
		print_message("\n  reference: %s (line %u%s, %zu vectors), write %d, close %d, " \
			      "last error: %s\n",                                         \
			      R->verdict == ACCEPT ? "accept" : R->verdict == REJECT ? "reject" : "either", \
			      R->line, R->line_known ? "" : " not known", R->nq, F->wrc, F->frc, \
			      nerr != F->err_real ? lasterr : "(none)");                   \
		show(p, n);                                                               \
		fail();                                                                   \
	} while (0)

/* The session's three files against the reference's search. */
static void check_results(runner *t, const qref *R, const char *p, size_t n, const fed *F)
{
	vecfs_results *er = NULL;
	char why[512] = "";
	int src = vecfs_search(t->w->v, R->v, R->nq, QD, &R->o, &er, why, sizeof why);
	if (src)
		BAD("accepted, but the reference's search fails: %d %s", src, why);
	size_t on = 0, jn = 0, sn = 0;
	char *out = fs_qs_render(t->q, QS_OUT, &on), *js = fs_qs_render(t->q, QS_JSON, &jn);
	char *st = fs_qs_render(t->q, QS_STATS, &sn);
	assert_non_null(out);
	assert_non_null(js);
	assert_non_null(st);
	assert_int_equal(fs_qs_size(t->q, QS_OUT), on);
	assert_int_equal(fs_qs_size(t->q, QS_JSON), jn);
	assert_int_equal(fs_qs_size(t->q, QS_STATS), sn);
	if (out_differs(out, on, er, why, sizeof why))
		BAD("out: %s\nout was:\n%.*s", why, (int)(on < 2000 ? on : 2000), out);
	const char *jw = json_differs(js, jn, er);
	if (jw)
		BAD("out.json: %s\nout.json was:\n%.*s", jw, (int)(jn < 2000 ? jn : 2000), js);
	const vecfs_explain *e = &er->explain;
	char mode[16];
	if (!stat_is(st, "queries", R->nq) || !stat_is(st, "dim", QD) || !stat_is(st, "k", e->k) ||
	    !stat_is(st, "nprobe", e->nprobe) || !stat_is(st, "refine", e->refine) ||
	    !stat_of(st, "mode", mode, sizeof mode) || strcmp(mode, R->o.exact ? "exact" : "ann") ||
	    (er->generation ? !stat_is(st, "generation", er->generation)
			    : !stat_of(st, "generation", mode, sizeof mode) || strcmp(mode, "none")))
		BAD("stats differ from the reference's run (k %u nprobe %u refine %u):\n%s", e->k, e->nprobe,
		    e->refine, st);
	/* the options given are the ones run */
	if ((R->o.k && e->k != R->o.k) || (R->o.nprobe && e->nprobe != R->o.nprobe) ||
	    (R->o.refine && e->refine != R->o.refine) || (R->o.exact && er->generation))
		BAD("the library did not run the options given");
	/* min(k, live records) results, in either mode (an ann run probes
	 * more clusters when the first ones hold fewer), also for a vector
	 * whose distances overflow float32 (+inf) */
	for (size_t i = 0; i < er->nq; i++)
		if (er->count[i] != (e->k < NREC ? e->k : NREC))
			BAD("vector %zu: %zu results, not min(k, live records) (k %u nprobe %u refine %u, %s)", i + 1,
			    er->count[i], e->k, e->nprobe, e->refine, R->o.exact ? "exact" : "ann");
	vecfs_results_free(er);
	free(out);
	free(js);
	free(st);
}

/* Feed one input to the runner's session and check the outcome against the
 * reference.  must_accept: the input was made valid.  Returns 1 if it ran,
 * 0 if it was refused. */
/* The line an errors line names after `after` (0: none). */
static unsigned line_named(const char *e, const char *after)
{
	const char *a = strstr(e, after);
	if (!a)
		return UINT_MAX; /* not this session's line at all */
	a += strlen(after);
	return strncmp(a, "line ", 5) == 0 ? (unsigned)strtoul(a + 5, NULL, 10) : 0;
}

/* The query call (fs_qs_call(), an ioctl of in) of the whole input that
 * the write path just ran with result rc: the same errno, or the same
 * bytes of out; one errors line naming the same line when it fails, none
 * when it succeeds; out as the write path left it; and ERANGE, with no
 * errors line, when the results are one byte longer than its room. */
static void check_call(runner *t, const char *p, size_t n, int rc, const qref *R, const fed *F)
{
	char wline[1100], want[96], cwant[96];
	snprintf(wline, sizeof wline, "%s", lasterr);
	snprintf(want, sizeof want, "query/%s/in: ", t->id);
	snprintf(cwant, sizeof cwant, "query/%s/in (call): ", t->id);
	unsigned e0 = nerr;
	size_t ol = 0, ol2 = 0;
	char *o = fs_qs_render(t->q, QS_OUT, &ol);
	assert_non_null(o);
	sbuf b;
	fs_sb_init(&b);
	int crc = fs_qs_call(t->q, p, n, &b, 1u << 20);
	if (crc != rc)
		BAD("the query call returned %d, the write path %d", crc, rc);
	if (crc == 0 && (b.len != ol || memcmp(b.p, o, ol)))
		BAD("the query call's results are not out's (%zu bytes, out %zu)", b.len, ol);
	if (nerr != e0 + (crc != 0))
		BAD("the query call made %u errors lines", nerr - e0);
	if (crc && line_named(lasterr, cwant) != line_named(wline, want))
		BAD("the query call's errors line names line %u, the write path's %u",
		    line_named(lasterr, cwant), line_named(wline, want));
	char *o2 = fs_qs_render(t->q, QS_OUT, &ol2);
	assert_non_null(o2);
	if (ol2 != ol || memcmp(o, o2, ol))
		BAD("the query call changed out");
	if (crc == 0 && ol > 0) {
		sbuf c;
		fs_sb_init(&c);
		unsigned e1 = nerr;
		int r2 = fs_qs_call(t->q, p, n, &c, ol - 1);
		if (r2 != -ERANGE || nerr != e1)
			BAD("results one byte past the query call's room: %d, %u errors lines", r2,
			    nerr - e1);
		fs_sb_free(&c);
	}
	fs_sb_free(&b);
	free(o);
	free(o2);
}

static int run_in(runner *t, const char *p, size_t n, const char *junk, size_t jn, int must_accept)
{
	qref ref;
	fed f = {0};
	const qref *R = &ref;
	const fed *F = &f;
	ref_read(&ref, p, n);
	if (must_accept && ref.verdict != ACCEPT)
		BAD("a generated input is not valid to the reference");
	size_t prev_len = 0;
	char *prev = fs_qs_render(t->q, QS_OUT, &prev_len);
	assert_non_null(prev);
	feed(t->q, &t->r, p, n, junk, jn, &f, prev, prev_len);
	t->cases++;
	t->open += ref.verdict == EITHER;
	if (!f.ran)
		BAD("the close after a write did not run anything");
	assert_int_equal(t->w->dm.query_input.used, fs_qs_in_size(t->q));
	if (fs_qs_in_size(t->q) != f.kept)
		BAD("in holds %zu bytes, %zu were taken", fs_qs_in_size(t->q), f.kept);
	int rc = f.wrc ? f.wrc : f.frc;
	if (f.wrc && f.frc != -EINVAL)
		BAD("a write failed, but the close did not fail with EINVAL");
	if (rc == 0) {
		if (ref.verdict == REJECT)
			BAD("accepted, but the input is not valid");
		if (nerr != f.err_real)
			BAD("accepted with an errors line");
		check_results(t, R, p, n, F);
		t->accepted++;
	} else {
		if (rc != -EINVAL)
			BAD("rejected with %d, not EINVAL", rc);
		if (ref.verdict == ACCEPT)
			BAD("rejected, but the input is valid");
		if (nerr != f.err_real + 1)
			BAD("rejected with %u errors lines, not one", nerr - f.err_real);
		char want[96];
		snprintf(want, sizeof want, "query/%s/in: ", t->id);
		if (strncmp(lasterr, want, strlen(want)))
			BAD("the errors line does not begin with %s", want);
		const char *ln = strstr(lasterr, ": line ");
		if (ln && ref.line_known && ref.line && strtoul(ln + 7, NULL, 10) != ref.line)
			BAD("the errors line names another line than the reference's %u", ref.line);
		if (!ln && ref.line_known && ref.line)
			BAD("the errors line names no line; the reference rejects line %u", ref.line);
		size_t l1 = 1, l2 = 1;
		char *o = fs_qs_render(t->q, QS_OUT, &l1), *j = fs_qs_render(t->q, QS_JSON, &l2);
		if (!o || !j || l1 || l2 || fs_qs_size(t->q, QS_STATS))
			BAD("rejected, but results are left to read");
		free(o);
		free(j);
		t->rejected++;
	}
	check_call(t, p, n, rc, R, F);
	/* a second close with nothing written runs nothing */
	int ran = 1;
	assert_int_equal(fs_qs_in_flush(t->q, &ran), 0);
	assert_int_equal(ran, 0);
	free(prev);
	free(ref.v);
	return rc == 0;
}

/* ------------------------------------------------------------ making inputs */

/* A float as text in one of the ways people write numbers. */
static void put_num(rng *r, str *s, float v)
{
	switch (pick(r, 9)) {
	case 0: s_fmt(s, "%g", (double)v); break;
	case 1: s_fmt(s, "%a", (double)v); break;
	case 2: s_fmt(s, "%.3f", (double)v); break;
	case 3: s_fmt(s, "%+.9e", (double)v); break;
	case 4: s_fmt(s, "%.0f", (double)v); break;
	case 5: s_fmt(s, "%.20f", (double)v); break;
	default: s_fmt(s, "%.9g", (double)v); break;
	}
}

/* A query point: a record's vector, or near one, or small integers. */
static void make_point(rng *r, const world *w, float *v)
{
	size_t i = pick(r, NREC);
	int how = (int)pick(r, 4);
	for (int j = 0; j < QD; j++)
		v[j] = how == 0 ? w->ds.x[i * QD + j]
		       : how == 1 ? (float)((int)pick(r, 21) - 10)
				  : w->ds.x[i * QD + j] + (float)rng_gauss(r) * 0.5f;
}

static const char *const eols[] = {"\n", "\r\n"};

static void put_options(rng *r, str *s)
{
	int any = 0;
	static const char *const blanks[] = {" ", "  ", "\t", " \t "};
	for (int i = 0, m = (int)pick(r, 16); i < 4; i++) {
		if (!(m >> i & 1))
			continue;
		if (any)
			s_cat(s, blanks[pick(r, 4)]);
		any = 1;
		if (i == 0)
			s_fmt(s, "k=%u", pick(r, 5) ? 1 + (unsigned)pick(r, 12) : 1 + (unsigned)pick(r, 400));
		else if (i == 1)
			s_fmt(s, "nprobe=%u", 1 + (unsigned)pick(r, pick(r, 2) ? 4 : 40));
		else if (i == 2)
			s_fmt(s, "refine=%u", 1 + (unsigned)pick(r, pick(r, 2) ? 3 : 60));
		else
			s_cat(s, pick(r, 3) ? "mode=exact" : "mode=ann");
	}
	if (!any)
		s_cat(s, "mode=exact");
}

/* A valid `in`: text (options, vectors in one of several spellings, LF or
 * CRLF, blank lines) or binary fvecs rows. */
static void make_in(rng *r, const world *w, size_t nvec, str *s)
{
	float v[QD];
	if (!pick(r, 5)) {
		for (size_t i = 0; i < (nvec ? nvec : 1); i++) {
			make_point(r, w, v);
			le32_put(s, QD);
			s_put(s, v, sizeof v);
		}
		return;
	}
	const char *eol = eols[pick(r, 2)];
	static const char *const seps[] = {" ", ", ", ",", "\t", "  ", " ,"};
	const char *sep = seps[pick(r, 6)];
	int opt_at = pick(r, 3) ? 0 : (int)pick(r, (uint64_t)nvec + 1), opts = (int)pick(r, 4);
	for (size_t i = 0; i <= nvec; i++) {
		if (opts && (int)i == opt_at) {
			if (!pick(r, 4))
				s_cat(s, " ");
			put_options(r, s);
			s_cat(s, pick(r, 3) ? eol : " \t" "\n");
		}
		if (!pick(r, 10))
			s_cat(s, pick(r, 2) ? eol : "  \t\n");
		if (i == nvec)
			break;
		make_point(r, w, v);
		int br = !pick(r, 3);
		if (br)
			s_cat(s, pick(r, 2) ? "[" : "[ ");
		for (int j = 0; j < QD; j++) {
			if (j)
				s_cat(s, sep);
			put_num(r, s, v[j]);
		}
		if (br)
			s_cat(s, pick(r, 2) ? "]" : " ]");
		if (i + 1 < nvec || pick(r, 5))
			s_cat(s, eol);
	}
}

/* ------------------------------------------------------------ mutations */

static const char *const odd_words[] = {
	"nan", "-nan", "NAN(1)", "inf", "-Infinity", "1e39", "-3.5e38", "3.40282347e38", "1e-50", "0x1p-149",
	"0x1p128", "1e", "--1", "+.5", ".", "abc", "1.5.5", "\xc3\xa9", "\xff", "[1", "1]", "[]", "[", "]",
	"k=0", "k=-1", "k=abc", "k=", "=3", "k==3", "mode=fast", "mode=", "mode=EXACT", "foo=1", "K=3",
	"k=100001", "refine=1001", "nprobe=0", "nprobe=00", "recall=0.9", "recall=1", "recall=0",
	"recall=1.5", "recall=-0.5", "recall=1e-50", "recall=", "k=99999999999", "refine=4294967296", "k=007", "nprobe=4096",
	"k=+3", "k=3 mode=exact", "#", "# note", ",", ",,", "1,,2", "k", "mode=exact,k=2",
};

static const char *const odd_bits[] = {
	"\n", "\r", "\r\n", "\t", " ", ",", "#", "=", "[", "]", "-", "e", ".", "\x0b", "\x0c", "\xff", "k=2\n",
	"mode=exact\n", "[]\n", "\n\n",
};

/* Line i's start and length (without its LF), or the end and 0 past the
 * last line; returns how many lines s has. */
static size_t line_at(const str *s, size_t i, size_t *b, size_t *l)
{
	size_t count = 0, start = 0;
	*b = s->n;
	*l = 0;
	for (size_t k = 0; k <= s->n; k++) {
		if (k < s->n && s->p[k] != '\n')
			continue;
		if (k == s->n && k == start)
			break; /* no line after the last LF */
		if (count++ == i) {
			*b = start;
			*l = k - start;
		}
		start = k + 1;
	}
	return count;
}

/* A random token: a run of bytes that are not blanks, commas, brackets or
 * line ends. */
static int token_at(rng *r, const str *s, size_t *b, size_t *l)
{
	size_t starts[512], k = 0;
	for (size_t i = 0; i < s->n && k < 512; i++)
		if (!strchr(" \t\r\n,[]", s->p[i]) && (i == 0 || strchr(" \t\r\n,[]", s->p[i - 1])))
			starts[k++] = i;
	if (!k)
		return 0;
	*b = starts[pick(r, k)];
	for (*l = 0; *b + *l < s->n && !strchr(" \t\r\n,[]", s->p[*b + *l]); ++*l)
		;
	return 1;
}

static void mutate_text(rng *r, str *s)
{
	size_t b, l, b2, l2, lines = line_at(s, SIZE_MAX, &b, &l);
	switch (pick(r, 12)) {
	case 0: /* a token replaced by an odd word */
	case 1:
	case 2:
		if (token_at(r, s, &b, &l)) {
			const char *w = odd_words[pick(r, sizeof odd_words / sizeof *odd_words)];
			s_splice(s, b, l, w, strlen(w));
		}
		return;
	case 3: /* a token dropped or repeated: a dimension short or long */
		if (token_at(r, s, &b, &l)) {
			if (pick(r, 2))
				s_splice(s, b, l, "", 0);
			else
				s_splice(s, b + l, 0, s->p + b - (b > 0), l + (b > 0));
		}
		return;
	case 4: /* a line duplicated, deleted, or two swapped */
		if (!lines)
			return;
		line_at(s, pick(r, lines), &b, &l);
		if (pick(r, 2)) {
			char *c = malloc(l + 1);
			assert_non_null(c);
			memcpy(c, s->p + b, l);
			c[l] = '\n';
			line_at(s, pick(r, lines), &b2, &l2);
			s_splice(s, b2, 0, c, l + 1);
			free(c);
		} else {
			s_splice(s, b, l + (b + l < s->n), "", 0);
		}
		return;
	case 5: { /* line ends: all CRLF, all LF, or the last one gone */
		str t = {0};
		int how = (int)pick(r, 3);
		for (size_t i = 0; i < s->n; i++) {
			if (how == 0 && s->p[i] == '\n' && (i == 0 || s->p[i - 1] != '\r'))
				s_put(&t, "\r", 1);
			if (how == 1 && s->p[i] == '\r' && i + 1 < s->n && s->p[i + 1] == '\n')
				continue;
			s_put(&t, s->p + i, 1);
		}
		if (how == 2 && t.n && t.p[t.n - 1] == '\n')
			t.n--;
		s_drop(s);
		*s = t;
		return;
	}
	case 6: /* a long line: blanks, or a number of hundreds of digits */
		if (!lines)
			return;
		line_at(s, pick(r, lines), &b, &l);
		if (pick(r, 2)) {
			size_t pad = 1 + pick(r, 30000);
			char *sp = malloc(pad);
			assert_non_null(sp);
			memset(sp, pick(r, 2) ? ' ' : '\t', pad);
			s_splice(s, pick(r, 2) ? b : b + l, 0, sp, pad);
			free(sp);
		} else if (token_at(r, s, &b, &l)) {
			str t = {0};
			s_cat(&t, pick(r, 2) ? "0." : "2");
			for (size_t i = 0, d = 100 + pick(r, 300); i < d; i++)
				s_fmt(&t, "%d", (int)pick(r, 10));
			if (pick(r, 3) == 0)
				s_cat(&t, "e-40");
			s_splice(s, b, l, t.p, t.n);
			s_drop(&t);
		}
		return;
	case 7: /* a line of options inserted */
	case 8: {
		const char *w = odd_words[pick(r, sizeof odd_words / sizeof *odd_words)];
		str t = {0};
		s_cat(&t, pick(r, 2) && strchr(w, '=') ? w : "k=3 nprobe=2");
		s_cat(&t, "\n");
		line_at(s, pick(r, lines + 1), &b, &l);
		s_splice(s, b, 0, t.p, t.n);
		s_drop(&t);
		return;
	}
	default: { /* odd bytes inserted */
		const char *w = odd_bits[pick(r, sizeof odd_bits / sizeof *odd_bits)];
		s_splice(s, pick(r, s->n + 1), 0, w, strlen(w));
		return;
	}
	}
}

static void mutate_rows(rng *r, str *s)
{
	size_t row = 4 + 4 * QD, rows = s->n / row;
	if (!rows)
		return;
	char *at = s->p + pick(r, rows) * row;
	static const uint32_t dims[] = {0, 1, QD - 1, QD + 1, VECFS_DIM_MAX, VECFS_DIM_MAX + 1, 0xffffffffu, 0x0a0a0a0au};
	static const uint32_t vals[] = {0x7fc00000u, 0xff800000u, 0x7f800000u, 0x7f7fffffu, 0x00000001u, 0x80000000u};
	str t = {0};
	switch (pick(r, 5)) {
	case 0: /* a row's dim */
		le32_put(&t, dims[pick(r, 8)]);
		memcpy(at, t.p, 4);
		break;
	case 1: /* a value: NaN, infinite, the largest, the least */
		le32_put(&t, vals[pick(r, 6)]);
		memcpy(at + 4 + 4 * pick(r, QD), t.p, 4);
		break;
	case 2: /* cut short */
		s->n -= 1 + pick(r, s->n < 2 * row ? s->n - 1 : 2 * row);
		break;
	case 3: /* text after the rows */
		s_cat(s, "1 2 3 4 5 6\n");
		break;
	default: /* all the rows made one of another dimension */
		le32_put(&t, (uint32_t)(s->n / 4 - 1));
		memcpy(s->p, t.p, 4);
		break;
	}
	s_drop(&t);
}

static void mutate(rng *r, str *s)
{
	uint32_t d;
	if (!s->p)
		s_put(s, "", 0);
	switch (pick(r, 10)) {
	case 0: /* bytes set at random */
		for (int k = 1 + (int)pick(r, 3); k && s->n; k--)
			s->p[pick(r, s->n)] = (char)rng_next(r);
		return;
	case 1: /* cut short */
		s->n = pick(r, s->n + 1);
		return;
	case 2: /* a range gone */
		if (s->n) {
			size_t b = pick(r, s->n);
			s_splice(s, b, 1 + pick(r, 12), "", 0);
		}
		return;
	case 3: { /* NUL bytes, or random bytes, inserted */
		char junk[6] = {0};
		size_t k = 1 + pick(r, 6);
		if (pick(r, 2))
			for (size_t i = 0; i < k; i++)
				junk[i] = (char)rng_next(r);
		s_splice(s, pick(r, s->n + 1), 0, junk, k);
		return;
	}
	case 4: /* emptied */
		s->n = pick(r, 3) ? 0 : s->n > 0;
		return;
	default:
		if (fvecs_rows(s->p, s->n, &d))
			mutate_rows(r, s);
		else
			mutate_text(r, s);
		return;
	}
}

/* ------------------------------------------------------------ tests */

static void runner_init(runner *t, world *w, const char *id, uint64_t seed)
{
	memset(t, 0, sizeof *t);
	t->w = w;
	t->id = id;
	t->r.s = seed;
	t->q = fs_qs_new(&w->dm, id);
	assert_non_null(t->q);
}

static void runner_free(runner *t)
{
	fs_qs_free(t->q);
	t->q = NULL;
}

static void run_z(runner *t, const char *in, int must_accept)
{
	run_in(t, in, strlen(in), NULL, 0, must_accept);
}

/* A test's state: the store (with a generation), and a session on it. */
typedef struct bench {
	fixture *fx;
	world w;
	runner t;
} bench;

static int bench_setup(void **state)
{
	if (fx_setup(state))
		return -1;
	bench *b = calloc(1, sizeof *b);
	if (!b)
		return -1;
	b->fx = *state;
	world_make(&b->w, b->fx, 1);
	runner_init(&b->t, &b->w, "q1", 0);
	*state = b;
	return 0;
}

static runner *bench_runner(void **state, uint64_t seed)
{
	bench *b = *state;
	b->t.r.s = seed;
	return &b->t;
}

static int bench_teardown(void **state)
{
	bench *b = *state;
	runner_free(&b->t);
	world_free(&b->w);
	*state = b->fx;
	free(b);
	return fx_teardown(state);
}

/* Inputs written out by hand: each spelling SPEC allows, each refusal. */
static void test_examples(void **state)
{
	runner *t = bench_runner(state, 0x51);
	world *w = t->w;
	size_t n = 0;
	char *o = fs_qs_render(t->q, QS_OUT, &n);
	assert_int_equal(n, 0); /* before any input, out reads empty */
	free(o);
	static const char *const good[] = {
		"k=3\n1 0 0 0 0 0\n0 0 0.7 0.7 0 0\n",
		"k=2 mode=exact\n[1, 2, 3, 4, 5, 6]\n9 10 11 12 13 14\n",
		"mode=exact k=5 nprobe=3 refine=4\r\n1,2,3,4,5,6\r\n",
		"[ 1 2 3 4 5 6 ]",
		"1e0 -2 .5 0x1p2 5. 6e-1\n\n\n  \t\n",
		"k=1\nk=4\n1 1 1 1 1 1\nmode=ann\n",
		"nprobe=1 refine=1 k=7\n1 2 3 4 5 6\n-1 -2 -3 -4 -5 -6",
		"k=400 mode=exact\n0 0 0 0 0 0\n",
		"\t1\t2\t3\t4\t5\t6\t\n",
		"k=0007\n1 2 3 4 5 6\n",
		/* distances past float32's range: out and out.json stay readable */
		"k=3 mode=exact\n3.4e38 0 0 0 0 -3e38\n",
	};
	for (size_t i = 0; i < sizeof good / sizeof *good; i++)
		run_z(t, good[i], 1);
	/* refused, and the line named */
	static const struct {
		const char *in, *says;
		size_t len; /* 0: strlen */
	} bad[] = {
		{"", "no query vector", 0},
		{"k=3\n", "no query vector", 0},
		{"\n\n", "no query vector", 0},
		{"k=x\n1 2 3 4 5 6\n", "line 1: ", 0},
		{"k=0\n1 2 3 4 5 6\n", "line 1: ", 0},
		{"1 2 3 4 5 6\nmode=fast\n", "line 2: ", 0},
		{"1 2 3 4 5 6\nfoo=1\n", "line 2: ", 0},
		{"1 2 3 4 5\n", "line 1: ", 0},
		{"1 2 3 4 5 6\n1 2 3 4 5 6 7\n", "line 2: ", 0},
		{"1 2 x 4 5 6\n", "line 1: ", 0},
		{"1 2 3 4 5 1e39\n", "line 1: ", 0},
		{"[1 2 3 4 5 6\n", "line 1: ", 0},
		{"1 2 3 4 5 6]\n", "line 1: ", 0},
		{"1 2 3", "line 1: ", 0},
		{"2", "line 1: ", 0},
		{"1 2 3 4 5 6\n1 2 3 4 5\n", "line 2: ", 0},
		{"k=2\n1 2 3 4 5 6\n1 2 3", "line 3: ", 0},
		{"1 2 3 4 5 nan\n", "line 1: ", 0},
		{"k=2\ninf 2 3 4 5 6\n", "line 2: ", 0},
		{"k=2\n1 2 3 4 5 6\n[]\n", "line 3: ", 0},
		{"1 2 3 4 5 6\n\x00\n", "line 2: ", 14},
		{"1 2 3 4 5 6\n1 2\x003 4 5 6\n", "line 2: ", 25},
		{"k=3 1 2 3 4 5 6\n", "line 1: ", 0},
		/* options bounded by the library, a filter: the line that gave them */
		{"k=2\r\n\r\n# c\r\nrefine=2000\r\n1 2 3 4 5 6\r\n", "line 4: bad value '2000' for refine", 0},
		{"1 2 3 4 5 6\n\nk=200000\n", "line 3: bad value '200000' for k", 0},
		{"k=2\n\nfilter={\"$bad\": 1}\n1 2 3 4 5 6\n", "line 3: filter: unknown operator", 0},
		{"k=2\r\nfilter={\"a\": \r\n1 2 3 4 5 6\r\n2 3 4 5 6 7", "line 2: filter: ", 0},
	};
	for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
		run_in(t, bad[i].in, bad[i].len ? bad[i].len : strlen(bad[i].in), NULL, 0, 0);
		if (!strstr(lasterr, bad[i].says))
			fail_msg("'%s': the errors line '%s' does not say '%s'", bad[i].in, lasterr, bad[i].says);
	}
	assert_int_equal(t->rejected, sizeof bad / sizeof *bad);
	/* binary rows: each row a vector */
	str b = {0};
	float v[QD];
	for (int i = 0; i < 3; i++) {
		memcpy(v, w->ds.x + (size_t)i * 17 * QD, sizeof v);
		le32_put(&b, QD);
		s_put(&b, v, sizeof v);
	}
	assert_int_equal(run_in(t, b.p, b.n, NULL, 0, 1), 1);
	b.n -= 3; /* a row cut short */
	run_in(t, b.p, b.n, NULL, 0, 0);
	s_drop(&b);
	le32_put(&b, QD + 1); /* rows of another dimension */
	for (int i = 0; i <= QD; i++)
		s_put(&b, &(float){1.0f}, 4);
	run_in(t, b.p, b.n, NULL, 0, 0);
	s_drop(&b);
}

/* k, nprobe, refine and mode change the run as the library has them: mode
 * exact is the brute-force top k, and a small nprobe is not. */
static void test_options_take_effect(void **state)
{
	runner *t = bench_runner(state, 0x52);
	world *w = t->w;
	str s = {0};
	unsigned differ = 0;
	for (int i = 0; i < 60; i++) {
		float v[QD];
		ds_fresh(&w->ds, v);
		unsigned k = 1 + (unsigned)(i % 13);
		for (int m = 0; m < 3; m++) {
			s.n = 0;
			s_fmt(&s, m == 0 ? "k=%u mode=exact\n" : m == 1 ? "k=%u nprobe=1 refine=1\n" : "k=%u nprobe=8 refine=50\n", k);
			for (int j = 0; j < QD; j++)
				s_fmt(&s, "%.9g ", (double)v[j]);
			s_cat(&s, "\n");
			assert_int_equal(run_in(t, s.p, s.n, NULL, 0, 1), 1);
			size_t sn = 0, on = 0;
			char *st = fs_qs_render(t->q, QS_STATS, &sn), *out = fs_qs_render(t->q, QS_OUT, &on);
			if (m == 0) {
				/* the brute-force top k */
				size_t idx[16];
				double d[16];
				size_t got = knn_ref(VECFS_L2, w->ds.x, NREC, QD, NULL, v, k, idx, d);
				assert_int_equal(got, k);
				const char *line = out;
				for (size_t r = 0; r < k; r++) {
					const char *tab = strchr(line, '\t');
					assert_non_null(tab);
					float dist = strtof(tab + 1, NULL);
					assert_true(fabs(dist - d[r]) <= 1e-4 * (1 + d[r]));
					line = strchr(tab, '\n') + 1;
				}
				assert_true(stat_is(st, "clusters_probed", 0));
				char g[16];
				assert_string_equal(stat_of(st, "generation", g, sizeof g), "none");
			} else {
				assert_true(stat_is(st, "generation", w->gen));
				assert_true(stat_is(st, "clusters_probed", m == 1 ? 1 : 8));
				if (m == 1 && strcmp(out, "") && (i % 13) > 3) {
					/* compare with the exact run: nprobe 1 misses some */
					vecfs_results *ex = search1(w->v, v, QD, k, 1);
					char why[256];
					differ += out_differs(out, on, ex, why, sizeof why) != 0;
					vecfs_results_free(ex);
				}
			}
			assert_true(stat_is(st, "k", k));
			free(st);
			free(out);
		}
	}
	print_message("options: %u of the nprobe=1 runs differ from the exact top k\n", differ);
	assert_true(differ > 0);
	s_drop(&s);
}

/* The same input in write pieces of every size, with and without other
 * bytes first that a write at offset 0 replaces, gives the same out. */
static void test_pieces(void **state)
{
	runner *t = bench_runner(state, 0x53);
	world *w = t->w;
	for (int i = 0; i < 150; i++) {
		str s = {0}, junk = {0};
		make_in(&t->r, w, i == 0 ? 300 : pick(&t->r, 4) ? 1 + pick(&t->r, 5) : 1 + pick(&t->r, 60), &s);
		char *first = NULL;
		size_t fn = 0;
		for (int k = 0; k < 6; k++) {
			junk.n = 0;
			if (k >= 3) {
				/* something else first: valid, cut, or refused */
				make_in(&t->r, w, 1 + pick(&t->r, 3), &junk);
				if (k == 4)
					junk.n = pick(&t->r, junk.n + 1);
				if (k == 5)
					s_cat(&junk, "1 2 x\n");
			}
			assert_int_equal(run_in(t, s.p, s.n, junk.p, junk.n, 1), 1);
			size_t on = 0;
			char *out = fs_qs_render(t->q, QS_OUT, &on);
			if (!first) {
				first = out;
				fn = on;
				continue;
			}
			if (on != fn || memcmp(out, first, on))
				fail_msg("input %d: another splitting gave another out", i);
			free(out);
		}
		free(first);
		s_drop(&s);
		s_drop(&junk);
	}
}

/* Valid inputs, mutated: each runs what the reference reads, or is refused
 * with one errors line and no results. */
static void test_fuzz(void **state)
{
	runner *t = bench_runner(state, 0xf00d5eedULL);
	world *w = t->w;
	unsigned kinds[2][2] = {{0}};
	for (int i = 0; i < FUZZ_CASES; i++) {
		str s = {0};
		make_in(&t->r, w, pick(&t->r, 6) ? pick(&t->r, 5) : pick(&t->r, 40), &s);
		uint32_t d;
		int binary = fvecs_rows(s.p, s.n, &d);
		for (int m = pick(&t->r, 6) ? 1 + (int)pick(&t->r, pick(&t->r, 3) ? 1 : 3) : 0; m > 0; m--)
			mutate(&t->r, &s);
		str junk = {0};
		if (!pick(&t->r, 8))
			make_in(&t->r, w, 1, &junk);
		kinds[binary][run_in(t, s.p, s.n, junk.p, junk.n, 0)]++;
		s_drop(&s);
		s_drop(&junk);
	}
	print_message("fuzz: %u inputs, %u ran, %u refused, %u open to either; text %u/%u, "
		      "fvecs %u/%u (ran/refused)\n",
		      t->cases, t->accepted, t->rejected, t->open, kinds[0][1], kinds[0][0], kinds[1][1],
		      kinds[1][0]);
	for (int k = 0; k < 2; k++) {
		assert_true(kinds[k][0] > 50);
		assert_true(kinds[k][1] > 50);
	}
}

/* The bounds on input: one `in` (EFBIG), all sessions together (ENOSPC).
 * A refused write leaves a line, the close then fails with EINVAL and no
 * part of the input runs; a write at offset 0 starts over. */
static void test_bounds(void **state)
{
	runner *a = bench_runner(state, 0x54), other, *b = &other;
	world *w = a->w;
	runner_init(b, w, "q2", 0x55);
	const char *one = "k=2 mode=exact\n1 2 3 4 5 6\n";
	size_t ol = strlen(one);
	int ran = 0;
	unsigned e0;

	/* results first, so that a failed close is seen to clear them */
	run_z(a, one, 1);
	/* one `in` past IN_BOUND: a write that would pass it is refused, before
	 * anything of it is read (the buffer's pages stay untouched) */
	char *huge = malloc(IN_BOUND);
	assert_non_null(huge);
	e0 = nerr;
	assert_int_equal(fs_qs_in_write(a->q, one, ol, 0), 0);
	assert_int_equal(fs_qs_in_write(a->q, huge, IN_BOUND - ol + 1, ol), -EFBIG);
	assert_int_equal(nerr, e0 + 1);
	assert_non_null(strstr(lasterr, "query/q1/in: more than 256 MiB"));
	assert_int_equal(fs_qs_in_size(a->q), ol);
	assert_int_equal(fs_qs_in_write(a->q, "1 2 3 4 5 6\n", 12, ol), -EINVAL);
	assert_int_equal(fs_qs_in_flush(a->q, &ran), -EINVAL);
	assert_int_equal(nerr, e0 + 1);
	assert_int_equal(fs_qs_size(a->q, QS_OUT), 0);
	free(huge);
	run_z(a, one, 1); /* and a write at offset 0 starts over */

	/* the shared budget */
	w->dm.query_input.max = 4096;
	str s = {0};
	s_cat(&s, "mode=exact\n");
	while (s.n < 3000)
		s_cat(&s, "1 2 3 4 5 6\n");
	run_in(a, s.p, s.n, NULL, 0, 1); /* q1 holds 3000-odd bytes */
	assert_int_equal(w->dm.query_input.used, s.n);
	e0 = nerr;
	assert_int_equal(fs_qs_in_write(b->q, one, ol, 0), 0);
	assert_int_equal(fs_qs_in_write(b->q, s.p, 2000, ol), -ENOSPC);
	assert_int_equal(nerr, e0 + 1);
	assert_non_null(strstr(lasterr, "query/q2/in: the query input of all sessions together is at its bound"));
	assert_int_equal(fs_qs_in_flush(b->q, &ran), -EINVAL);
	assert_int_equal(ran, 1);
	assert_int_equal(nerr, e0 + 1);
	assert_int_equal(fs_qs_size(b->q, QS_OUT), 0);
	assert_int_equal(w->dm.query_input.used, s.n + ol);
	/* a refused first write: nothing is held, a write at offset 0 starts over */
	assert_int_equal(fs_qs_in_write(b->q, s.p, 2000, 0), -ENOSPC);
	assert_int_equal(w->dm.query_input.used, s.n);
	assert_int_equal(fs_qs_in_flush(b->q, &ran), -EINVAL);
	assert_int_equal(fs_qs_in_write(b->q, one, ol, 0), 0);
	assert_int_equal(fs_qs_in_flush(b->q, &ran), 0);
	assert_true(fs_qs_size(b->q, QS_OUT) > 0);
	/* and without a close between */
	assert_int_equal(fs_qs_in_write(b->q, s.p, 2000, 0), -ENOSPC);
	assert_int_equal(fs_qs_in_write(b->q, one, ol, 0), 0);
	assert_int_equal(fs_qs_in_flush(b->q, &ran), 0);
	assert_true(fs_qs_size(b->q, QS_OUT) > 0);
	/* q1's input given back (truncated, cleared, ended) makes room */
	fs_qs_in_truncate(a->q);
	assert_int_equal(w->dm.query_input.used, ol);
	assert_int_equal(fs_qs_in_write(b->q, s.p, s.n, 0), 0);
	assert_int_equal(fs_qs_in_flush(b->q, &ran), 0);
	fs_qs_clear(b->q);
	assert_int_equal(fs_qs_size(b->q, QS_OUT), 0);
	assert_int_equal(w->dm.query_input.used, 0);
	/* a removed session refuses input */
	fs_qs_end(a->q);
	e0 = nerr;
	assert_int_equal(fs_qs_in_write(a->q, one, ol, 0), -ENOENT);
	assert_int_equal(nerr, e0 + 1);
	assert_non_null(strstr(lasterr, "query/q1/in: the session was removed"));
	assert_int_equal(fs_qs_in_flush(a->q, &ran), 0);
	assert_int_equal(w->dm.query_input.used, 0);
	s_drop(&s);
	runner_free(b);
}

/* Results asked for (vectors x k) and rendered text held are bounded
 * daemon-wide: past a bound the close fails with E2BIG, leaves one errors
 * line and no results; what a session holds is given back when its results
 * go. */
static void test_result_bounds(void **state)
{
	runner *a = bench_runner(state, 0x56), other, *b = &other;
	world *w = a->w;
	runner_init(b, w, "q2", 0x57);
	int ran = 0;
	unsigned e0;
	str s = {0};
	s_cat(&s, "k=100 mode=exact\n");
	for (int i = 0; i < 20; i++)
		s_cat(&s, "1 2 3 4 5 6\n");
	w->dm.query_results.max = 1500;
	/* 20 x 100 is past the bound */
	run_z(a, "k=2 mode=exact\n1 2 3 4 5 6\n", 1);
	e0 = nerr;
	assert_int_equal(fs_qs_in_write(a->q, s.p, s.n, 0), 0);
	assert_int_equal(fs_qs_in_flush(a->q, &ran), -E2BIG);
	assert_int_equal(nerr, e0 + 1);
	assert_non_null(strstr(lasterr, "query/q1/in: 20 query vectors x k=100 = 2000 results, more than the bound of 1500"));
	assert_int_equal(fs_qs_size(a->q, QS_OUT), 0);
	assert_int_equal(w->dm.query_results.used, 0);
	/* 10 x 100 fits, and is held while its results are */
	const char *ten = strchr(s.p, '\n') + 1 + 10 * 12;
	assert_int_equal(fs_qs_in_write(a->q, s.p, (size_t)(ten - s.p), 0), 0);
	assert_int_equal(fs_qs_in_flush(a->q, &ran), 0);
	assert_true(fs_qs_size(a->q, QS_OUT) > 0);
	assert_int_equal(w->dm.query_results.used, 1000);
	/* then another session's 10 x 100 does not */
	e0 = nerr;
	assert_int_equal(fs_qs_in_write(b->q, s.p, (size_t)(ten - s.p), 0), 0);
	assert_int_equal(fs_qs_in_flush(b->q, &ran), -E2BIG);
	assert_int_equal(nerr, e0 + 1);
	assert_non_null(strstr(lasterr, "query/q2/in: the results of all sessions together are at their bound"));
	/* until the first one's results go */
	fs_qs_clear(a->q);
	assert_int_equal(w->dm.query_results.used, 0);
	assert_int_equal(fs_qs_in_write(b->q, s.p, (size_t)(ten - s.p), 0), 0);
	assert_int_equal(fs_qs_in_flush(b->q, &ran), 0);
	assert_int_equal(w->dm.query_results.used, 1000);
	size_t outlen = fs_qs_size(b->q, QS_OUT);
	assert_int_equal(w->dm.query_output.used, outlen);
	fs_qs_clear(b->q);
	assert_int_equal(w->dm.query_output.used, 0);
	/* rendered text: out past the room fails the close; out.json past it
	 * fails its rendering, with an errors line */
	w->dm.query_output.max = outlen / 2;
	e0 = nerr;
	assert_int_equal(fs_qs_in_write(b->q, s.p, (size_t)(ten - s.p), 0), 0);
	assert_int_equal(fs_qs_in_flush(b->q, &ran), -E2BIG);
	assert_int_equal(nerr, e0 + 1);
	assert_non_null(strstr(lasterr, "query/q2/in: the results' text is past the room left"));
	assert_int_equal(w->dm.query_results.used, 0);
	assert_int_equal(w->dm.query_output.used, 0);
	w->dm.query_output.max = outlen + 10;
	assert_int_equal(fs_qs_in_write(b->q, s.p, (size_t)(ten - s.p), 0), 0);
	assert_int_equal(fs_qs_in_flush(b->q, &ran), 0);
	sbuf js;
	fs_sb_init(&js);
	e0 = nerr;
	assert_int_equal(fs_qs_render_into(b->q, QS_JSON, &js), -E2BIG);
	assert_int_equal(nerr, e0 + 1);
	assert_non_null(strstr(lasterr, "query/q2/out.json: past the room left"));
	fs_sb_free(&js);
	assert_int_equal(w->dm.query_output.used, outlen);
	w->dm.query_results.max = QUERY_RESULTS_DEFAULT;
	w->dm.query_output.max = (size_t)QUERY_OUTPUT_MB_DEFAULT << 20;
	s_drop(&s);
	runner_free(b);
	fs_qs_clear(a->q);
	assert_int_equal(w->dm.query_results.used, 0);
	assert_int_equal(w->dm.query_output.used, 0);
}

/* The first line of the session's out: its key and distance. */
static void first_hit(qsession *q, char *key, size_t cap, float *dist)
{
	size_t n = 0;
	char *out = fs_qs_render(q, QS_OUT, &n);
	assert_non_null(out);
	char *tab = memchr(out, '\t', n);
	assert_non_null(tab);
	snprintf(key, cap, "%.*s", (int)(tab - out), out);
	*dist = strtof(tab + 1, NULL);
	free(out);
}

static void write_flush(qsession *q, const char *in, size_t len, uint64_t off, int flush)
{
	assert_int_equal(fs_qs_in_write(q, in, len, off), 0);
	if (flush) {
		int ran = 0;
		assert_int_equal(fs_qs_in_flush(q, &ran), 0);
		assert_true(ran);
	}
}

/* The search that a complete first write starts ahead of the close
 * (fs/ahead.c) answers the close only while it holds: a write to the store
 * or to `in` in between makes the close search again, and the store counts
 * each query once. */
static void test_search_ahead(void **state)
{
	runner *t = bench_runner(state, 0xa4);
	world *w = t->w;
	qsession *q = t->q;
	const struct timespec settle = {0, 50000000}; /* a search ahead is done */
	float far[QD], other[QD];
	char in[512], in2[512], key[64];
	size_t len = 0, len2 = 0;
	len += (size_t)snprintf(in, sizeof in, "k=3 mode=exact\n");
	len2 += (size_t)snprintf(in2, sizeof in2, "k=3 mode=exact\n");
	for (int j = 0; j < QD; j++) {
		far[j] = 50.0f + (float)j;
		other[j] = -40.0f - (float)j;
		len += (size_t)snprintf(in + len, sizeof in - len, j ? " %g" : "%g", (double)far[j]);
		len2 += (size_t)snprintf(in2 + len2, sizeof in2 - len2, j ? " %g" : "%g",
					 (double)other[j]);
	}
	len += (size_t)snprintf(in + len, sizeof in - len, "\n");
	len2 += (size_t)snprintf(in2 + len2, sizeof in2 - len2, "\n");
	uint64_t queries0 = stats(w->v).queries, ahead0 = fs_ahead_taken(w->dm.ahead);
	float d;

	/* one write, then the close: answered ahead, as the library answers */
	write_flush(q, in, len, 0, 1);
	assert_int_equal(fs_ahead_taken(w->dm.ahead), ahead0 + 1);
	vecfs_results *r = search_opts(w->v, far, 1, QD, &(vecfs_query_opts){.k = 3, .exact = 1});
	first_hit(q, key, sizeof key, &d);
	assert_string_equal(key, r->hits[0][0].key);
	assert_true(d == r->hits[0][0].distance);
	vecfs_results_free(r);
	assert_int_equal(stats(w->v).queries, queries0 + 2); /* this one and the check */

	/* a record written between the write and the close is seen: the store
	 * changed since the search ahead, so the close searches again */
	write_flush(q, in, len, 0, 0);
	nanosleep(&settle, NULL);
	assert_int_equal(put_one(w->v, "near", far, QD), 0);
	int ran = 0;
	assert_int_equal(fs_qs_in_flush(q, &ran), 0);
	first_hit(q, key, sizeof key, &d);
	assert_string_equal(key, "near");
	assert_true(d == 0);
	assert_int_equal(fs_ahead_taken(w->dm.ahead), ahead0 + 1);
	assert_int_equal(stats(w->v).queries, queries0 + 3);

	/* the input rewritten before the close: the close answers the second */
	write_flush(q, in, len, 0, 0);
	nanosleep(&settle, NULL);
	write_flush(q, in2, len2, 0, 1);
	r = search_opts(w->v, other, 1, QD, &(vecfs_query_opts){.k = 3, .exact = 1});
	first_hit(q, key, sizeof key, &d);
	assert_string_equal(key, r->hits[0][0].key);
	vecfs_results_free(r);

	/* rewritten while the search ahead of the first input is queued or
	 * runs: the close does not take that one's results */
	str big = {0};
	s_cat(&big, "k=200 mode=exact\n");
	for (int i = 0; i < 64; i++) /* (searched ahead up to 64) */
		s_put(&big, in + 15, len - 15); /* the vector line of `in` */
	write_flush(q, big.p, big.n, 0, 0);
	write_flush(q, in2, len2, 0, 1);
	size_t n = 0;
	char *out = fs_qs_render(q, QS_OUT, &n);
	assert_non_null(out);
	assert_null(memmem(out, n, "\n\n", 2)); /* the results of one query */
	free(out);
	first_hit(q, key, sizeof key, &d);
	r = search_opts(w->v, other, 1, QD, &(vecfs_query_opts){.k = 3, .exact = 1});
	assert_string_equal(key, r->hits[0][0].key);
	vecfs_results_free(r);
	s_drop(&big);

	/* written in two writes: searched at the close only */
	uint64_t a = fs_ahead_taken(w->dm.ahead);
	write_flush(q, in, 20, 0, 0);
	write_flush(q, in + 20, len - 20, 20, 1);
	first_hit(q, key, sizeof key, &d);
	assert_string_equal(key, "near");
	assert_int_equal(fs_ahead_taken(w->dm.ahead), a);
}

/* Several sessions write and close at once (threads, as clients would):
 * each close gets its own query's results, and none waits for ever for a
 * search ahead another session's close took (a close that waited unlocked
 * once found its job gone and slept on). */
typedef struct many {
	world *w;
	qsession *q;
	int id;
	int bad;
} many;

static void *many_run(void *arg)
{
	many *m = arg;
	char in[256], want[64], got[64];
	for (int i = 0; i < 1500 && !m->bad; i++) {
		float v[QD];
		int len = snprintf(in, sizeof in, "k=1 mode=exact\n");
		for (int j = 0; j < QD; j++) {
			v[j] = (float)((i * 7 + m->id * 13 + j * 3) % 29) - 14.0f;
			len += snprintf(in + len, sizeof in - (size_t)len, j ? " %g" : "%g", (double)v[j]);
		}
		len += snprintf(in + len, sizeof in - (size_t)len, "\n");
		int ran = 0;
		if (fs_qs_in_write(m->q, in, (size_t)len, 0) || fs_qs_in_flush(m->q, &ran) || !ran) {
			m->bad = 1;
			break;
		}
		vecfs_results *r = NULL;
		char err[128];
		vecfs_query_opts o = {.k = 1, .exact = 1, .uncounted = 1};
		if (vecfs_search(m->w->v, v, 1, QD, &o, &r, err, sizeof err) || r->count[0] != 1) {
			m->bad = 2;
			break;
		}
		snprintf(want, sizeof want, "%s", r->hits[0][0].key);
		vecfs_results_free(r);
		float d;
		size_t n = 0;
		char *out = fs_qs_render(m->q, QS_OUT, &n);
		char *tab = out ? memchr(out, '\t', n) : NULL;
		if (!tab) {
			free(out);
			m->bad = 3;
			break;
		}
		snprintf(got, sizeof got, "%.*s", (int)(tab - out), out);
		d = strtof(tab + 1, NULL);
		(void)d;
		free(out);
		if (strcmp(got, want))
			m->bad = 4;
	}
	return NULL;
}

static void test_search_ahead_many(void **state)
{
	runner *t = bench_runner(state, 0xa5);
	world *w = t->w;
	enum { N = 4 };
	many m[N];
	pthread_t th[N];
	alarm(120); /* a close that never returns ends the test */
	for (int i = 0; i < N; i++) {
		char id[16];
		snprintf(id, sizeof id, "m%d", i);
		m[i] = (many){w, fs_qs_new(&w->dm, id), i, 0};
		assert_non_null(m[i].q);
		assert_int_equal(pthread_create(&th[i], NULL, many_run, &m[i]), 0);
	}
	for (int i = 0; i < N; i++)
		assert_int_equal(pthread_join(th[i], NULL), 0);
	alarm(0);
	for (int i = 0; i < N; i++) {
		if (m[i].bad)
			print_message("session %d: failure %d\n", i, m[i].bad);
		assert_int_equal(m[i].bad, 0);
		fs_qs_free(m[i].q);
	}
	print_message("%llu of %d closes answered ahead\n", (unsigned long long)fs_ahead_taken(w->dm.ahead),
		      N * 1500);
}

/* ------------------------------------------------------------ errors lines */

static time_t fake_now = 1796337667; /* 2026-12-03T22:41:07Z */
static time_t fake_clock(time_t *t)
{
	if (t)
		*t = fake_now;
	return fake_now;
}

/* the lines of `errors` now, and how many hold s */
static size_t lines_with(err_log *log, const char *s, size_t *lines)
{
	size_t len, n = 0;
	char *p = fs_errors_render(log, &len);
	assert_non_null(p);
	*lines = 0;
	for (char *l = p, *nl; (nl = strchr(l, '\n')); l = nl + 1) {
		*nl = 0;
		(*lines)++;
		if (strstr(l, s))
			n++;
	}
	free(p);
	return n;
}

/* every line starts with its UTC time; control characters cannot make or
 * garble lines; a flood of one message keeps the others in the ring */
static void test_errors_lines(void **state)
{
	(void)state;
	err_log log;
	fs_errors_init(&log);
	log.clock = fake_clock;
	fs_errlog(&log, "query/%s: bad", "a\nforged line\x1b[2J");
	size_t len, lines;
	char *p = fs_errors_render(&log, &len);
	assert_non_null(p);
	assert_string_equal(p, "2026-12-03T22:41:07Z query/a\\nforged line\\x1b[2J: bad\n");
	free(p);
	fs_errlog(&log, "keep me %d", 1);
	for (int i = 0; i < 10000; i++)
		fs_errlog(&log, "query/%s: mkdir failed", "bad 9");
	fs_errlog(&log, "keep me %d", 2);
	assert_int_equal(fs_errors_count(&log), 10003);
	char last[200];
	fs_errors_last(&log, last, sizeof last);
	assert_string_equal(last, "keep me 2");
	assert_int_equal(lines_with(&log, "keep me", &lines), 2);
	assert_int_equal(lines_with(&log, "mkdir failed", &lines), ERR_BURST + 1);
	assert_int_equal(lines_with(&log, "query/bad 9: mkdir failed ... and 9,990 more like it", &lines), 1);
	assert_int_equal(lines, ERR_BURST + 4);
	/* a new window shows the message again */
	fake_now += ERR_WINDOW_S;
	fs_errlog(&log, "query/%s: mkdir failed", "bad 9");
	fs_errlog(&log, "query/%s: mkdir failed", "x");
	assert_int_equal(lines_with(&log, "query/bad 9: mkdir failed", &lines), ERR_BURST + 2);
	assert_int_equal(lines_with(&log, "query/x: mkdir failed", &lines), 1);
	fs_errors_fini(&log);
}

/* errors is a log: lines are appended at stable offsets, past ERR_KEEP the
 * oldest drop down to the last ERR_LINES at once, and attached to a store
 * directory it is kept there (a cut last line dropped) across remounts */
static void test_errors_log(void **state)
{
	fixture *f = *state;
	err_log log;
	char buf[256], path[128], head[64];
	fs_errors_init(&log);
	log.clock = fake_clock;
	/* the lines go to stderr as well: not thousands of them here */
	fflush(stderr);
	int saved = dup(2), null = open("/dev/null", O_WRONLY);
	assert_true(saved >= 0 && null >= 0);
	dup2(null, 2);
	close(null);
	fs_errlog(&log, "before the store: %d", 0);
	assert_int_equal(fs_errors_attach(&log, f->dir), 0);
	for (int i = 1; i < ERR_KEEP - 1; i++)
		fs_errlog(&log, "line %05d", i);
	uint64_t size = fs_errors_size(&log, NULL);
	assert_int_equal(log.lines, ERR_KEEP - 1);
	/* a reader at the end sees what is appended there */
	fs_errlog(&log, "line %05d", ERR_KEEP - 1);
	size_t n = fs_errors_read(&log, size, buf, sizeof buf - 1);
	buf[n] = 0;
	assert_true(n > 20 && !strcmp(buf + 20, " line 01999\n"));
	/* one more: the oldest drop at once, down to ERR_LINES */
	fs_errlog(&log, "line %05d", ERR_KEEP);
	dup2(saved, 2);
	close(saved);
	assert_int_equal(log.lines, ERR_LINES);
	assert_true(fs_errors_size(&log, NULL) < size);
	n = fs_errors_read(&log, 0, head, sizeof head - 1);
	head[n] = 0;
	assert_true(n > 20 && !strncmp(head + 20, " line 01001\n", 12));
	fs_errors_fini(&log);
	/* the file holds the same text; a line cut short at its end (a crash
	 * in the middle of a write) is left out when it is read back */
	snprintf(path, sizeof path, "%s/errors", f->dir);
	FILE *fp = fopen(path, "a");
	assert_non_null(fp);
	fputs("2026-12-03T22:41:07Z cut sh", fp);
	fclose(fp);
	fs_errors_init(&log);
	log.clock = fake_clock;
	assert_int_equal(fs_errors_attach(&log, f->dir), 0);
	assert_int_equal(log.lines, ERR_LINES);
	size_t len;
	char *p = fs_errors_render(&log, &len);
	assert_non_null(p);
	assert_true(strstr(p, "line 02000\n") != NULL && strstr(p, "line 01001\n") != NULL);
	assert_null(strstr(p, "cut sh"));
	assert_null(strstr(p, "before the store"));
	free(p);
	fs_errlog(&log, "after the remount");
	assert_int_equal(lines_with(&log, "after the remount", &len), 1);
	fs_errors_fini(&log);
	struct stat st;
	assert_int_equal(stat(path, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0600);
}

/* only the very same failure is held back: distinct files, distinct
 * reasons and distinct errnos each get their lines, and a resource failure
 * (ENOSPC, ENOMEM, EIO) always gets its own */
static void test_errors_distinct(void **state)
{
	(void)state;
	err_log log;
	size_t lines;
	char name[32];
	fs_errors_init(&log);
	log.clock = fake_clock;
	/* one format, fourteen files: fourteen lines, none summed up */
	for (int i = 1; i <= 14; i++)
		fs_errlog_err(&log, -EINVAL, "ingest/%s: %s%s; %s", (snprintf(name, sizeof name, "bad%d.csv", i), name),
			   "line 2: ", "bad number", "nothing of the file was committed");
	assert_int_equal(lines_with(&log, "bad number", &lines), 14);
	assert_int_equal(lines_with(&log, "more like it", &lines), 0);
	for (int i = 1; i <= 14; i++) {
		snprintf(name, sizeof name, "ingest/bad%d.csv: ", i);
		assert_int_equal(lines_with(&log, name, &lines), 1);
	}
	fs_errors_fini(&log);

	/* one file, the same bad row again and again, with a commit that ran
	 * out of room among them: each ENOSPC has its line */
	fs_errors_init(&log);
	log.clock = fake_clock;
	for (int i = 0; i < 60; i++) {
		fs_errlog_err(&log, -EINVAL, "ingest/%s: %s%s; %s", "a.csv", "line 2: ", "bad number",
			   "nothing of the file was committed");
		if (i % 3 == 2)
			fs_errlog_err(&log, -ENOSPC, "ingest/%s: %s%s; %s", "a.csv", "", "No space left on device",
				   "nothing of the file was committed");
		if (i % 5 == 4)
			fs_errlog_err(&log, ENOMEM, "ingest/%s: %s%s; %s", "a.csv", "", "out of memory",
				   "nothing of the file was committed");
		if (i % 10 == 9)
			fs_errlog_err(&log, -EIO, "records/%s: %s", "k", "Input/output error");
	}
	assert_int_equal(lines_with(&log, "No space left on device", &lines), 20);
	assert_int_equal(lines_with(&log, "out of memory", &lines), 12);
	assert_int_equal(lines_with(&log, "Input/output error", &lines), 6);
	/* the bad rows: ten, then one line for the fifty alike, naming them */
	assert_int_equal(lines_with(&log, "bad number", &lines), ERR_BURST + 1);
	assert_int_equal(lines_with(&log, "ingest/a.csv: line 2: bad number; nothing of the file was committed"
				    " ... and 50 more like it", &lines), 1);
	fs_errors_fini(&log);

	/* alike means the same message: another line number is another line */
	fs_errors_init(&log);
	log.clock = fake_clock;
	for (int i = 0; i < 40; i++)
		fs_errlog(&log, "query/%s/in: line %d: %s", "s", 1 + i % 20, "expected 4 numbers");
	assert_int_equal(lines_with(&log, "expected 4 numbers", &lines), 40);
	assert_int_equal(lines_with(&log, "more like it", &lines), 0);
	fs_errors_fini(&log);
}

/* descriptors of one version of a file share one rendering, freed with
 * the last; a commit makes another version, while the older one stays with
 * its holders; stat renders nothing for a version whose size is known (nor
 * ever for centroids.fvecs); past dm->reads.max an open fails with ENOMEM
 * and an errors line */
static void test_shared_renderings(void **state)
{
	fixture *f = *state;
	world w;
	world_make(&w, f, 1);
	fs_daemon *dm = &w.dm;
	char gname[32], err[256];
	int e;
	snprintf(gname, sizeof gname, "%llu", (unsigned long long)w.gen);
	pthread_mutex_lock(&dm->tree.mu);
	node *g = fs_child_locked(dm, fs_get_node(dm, K_GENS), gname, &e);
	assert_non_null(g);
	g->nlookup++;
	node *cl = fs_child_locked(dm, g, "clusters", &e), *ce = fs_child_locked(dm, g, "centroids.fvecs", &e);
	assert_non_null(cl);
	assert_non_null(ce);
	cl->nlookup++;
	ce->nlookup++;
	pthread_mutex_unlock(&dm->tree.mu);

	struct stat st;
	uint64_t r0 = dm->rendered;
	assert_int_equal(fs_node_attr(dm, cl, &st), 0);
	assert_int_equal(fs_node_attr(dm, cl, &st), 0);
	assert_int_equal(dm->rendered, r0 + 1);
	rendering *a, *b, *c;
	assert_int_equal(fs_rendering_get(dm, cl, &a), 0);
	assert_int_equal(fs_rendering_get(dm, cl, &b), 0);
	assert_ptr_equal(a, b);
	assert_int_equal(dm->rendered, r0 + 2);
	assert_int_equal(a->len, (size_t)st.st_size);
	assert_int_equal(dm->reads.used, a->len);
	/* a commit: the next open renders the new version */
	vecfs_row row = {"another", 7, w.ds.x, NULL, 0};
	size_t bad = 0;
	assert_int_equal(vecfs_put(w.v, &row, 1, QD, &bad, err, sizeof err), 0);
	assert_int_equal(fs_rendering_get(dm, cl, &c), 0);
	assert_ptr_not_equal(a, c);
	assert_int_equal(dm->rendered, r0 + 3);
	assert_int_equal(fs_node_attr(dm, cl, &st), 0);
	assert_int_equal(dm->rendered, r0 + 3);
	assert_int_equal(dm->reads.used, a->len + c->len);
	fs_rendering_put(dm, a);
	fs_rendering_put(dm, b);
	assert_int_equal(dm->reads.used, c->len);
	fs_rendering_put(dm, c);
	assert_int_equal(dm->reads.used, 0);
	assert_null(cl->shared);
	/* centroids.fvecs: its size without rendering it, one rendering for
	 * every version of the store */
	assert_int_equal(fs_node_attr(dm, ce, &st), 0);
	assert_int_equal(dm->rendered, r0 + 3);
	assert_int_equal(fs_rendering_get(dm, ce, &a), 0);
	assert_int_equal(a->len, (size_t)st.st_size);
	assert_int_equal(vecfs_put(w.v, &row, 1, QD, &bad, err, sizeof err), 0);
	assert_int_equal(fs_rendering_get(dm, ce, &b), 0);
	assert_ptr_equal(a, b);
	/* the budget: the shared rendering counts once; another file's is
	 * refused */
	dm->reads.max = a->len + 1;
	size_t n0 = fs_errors_count(&dm->errors);
	assert_int_equal(fs_rendering_get(dm, cl, &c), -ENOMEM);
	assert_int_equal(fs_errors_count(&dm->errors), n0 + 1);
	char last[300];
	fs_errors_last(&dm->errors, last, sizeof last);
	snprintf(err, sizeof err, "generations/%s/clusters: cannot be read now", gname);
	assert_non_null(strstr(last, err));
	fs_rendering_put(dm, a);
	fs_rendering_put(dm, b);
	assert_int_equal(fs_rendering_get(dm, cl, &c), 0);
	fs_rendering_put(dm, c);
	assert_int_equal(dm->reads.used, 0);
	world_free(&w);
}

/* A whole input written synchronously runs at the write: results as the
 * library's, counted once (searched ahead or not), nothing left for the
 * close; a bad input fails the write with EINVAL and leaves no results. */
static void test_write_run(void **state)
{
	runner *t = bench_runner(state, 0xa5);
	world *w = t->w;
	qsession *q = t->q;
	float far[QD];
	char in[512], key[64];
	size_t len = (size_t)snprintf(in, sizeof in, "k=3 mode=exact\n");
	for (int j = 0; j < QD; j++) {
		far[j] = 50.0f + (float)j;
		len += (size_t)snprintf(in + len, sizeof in - len, j ? " %g" : "%g", (double)far[j]);
	}
	len += (size_t)snprintf(in + len, sizeof in - len, "\n");
	uint64_t queries0 = stats(w->v).queries, ahead0 = fs_ahead_taken(w->dm.ahead);
	int ran = 0;
	float d;

	assert_int_equal(fs_qs_in_write_run(q, in, len, &ran), 0);
	assert_true(ran);
	vecfs_results *r = search_opts(w->v, far, 1, QD, &(vecfs_query_opts){.k = 3, .exact = 1});
	first_hit(q, key, sizeof key, &d);
	assert_string_equal(key, r->hits[0][0].key);
	assert_true(d == r->hits[0][0].distance);
	vecfs_results_free(r);
	assert_int_equal(fs_qs_in_flush(q, &ran), 0); /* the close: nothing new */
	assert_false(ran);
	assert_int_equal(stats(w->v).queries, queries0 + 2); /* this one and the check */
	assert_true(fs_ahead_taken(w->dm.ahead) <= ahead0 + 1);

	assert_int_equal(fs_qs_in_write_run(q, "k=x\n1 2\n", 8, &ran), -EINVAL);
	assert_true(ran);
	size_t n = 1;
	char *out = fs_qs_render(q, QS_OUT, &n);
	assert_int_equal(n, 0);
	free(out);
	assert_int_equal(fs_qs_in_flush(q, &ran), 0);
	assert_false(ran);
	assert_int_equal(stats(w->v).queries, queries0 + 2);
}

int main(void)
{
#define TEST(f) cmocka_unit_test_setup_teardown(f, bench_setup, bench_teardown)
	const struct CMUnitTest tests[] = {
		TEST(test_examples), TEST(test_options_take_effect), TEST(test_pieces), TEST(test_fuzz),
		TEST(test_bounds), TEST(test_search_ahead), TEST(test_search_ahead_many), TEST(test_write_run),
		TEST(test_result_bounds), cmocka_unit_test(test_errors_lines),
		cmocka_unit_test(test_errors_distinct),
		cmocka_unit_test_setup_teardown(test_errors_log, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_shared_renderings, fx_setup, fx_teardown),
	};
#undef TEST
	return cmocka_run_group_tests(tests, NULL, NULL);
}
