/*
 * tests/test_ingest.c - the parsers of files written into ingest/
 * (fs/ingest.c), driven directly against a store: files of every format,
 * handed over in write() pieces of every size (1 byte to the whole file),
 * then closed (ingest_commit).
 *
 * A reference reading of each file, written here from SPEC.md's ingest/
 * section and independent of the parsers (numbers through strtof, its own
 * JSON and .npy header readers), says what the file holds: the rows to
 * commit, or that it is to be rejected, and where.  Valid files must commit
 * exactly those rows (bit-exact vectors, keys, payloads); mutated files must
 * either commit exactly what the reference reads, or fail with -EINVAL and
 * one `errors` line naming the file (and the line or row), leaving the store
 * as it was: nothing of a rejected file is applied.  A model of the whole
 * store is kept alongside and compared with it.
 *
 * Numbers are read as strtof reads them, however long; keys and every
 * JSON string (payloads too) must be strictly UTF-8.  Where SPEC.md leaves
 * the outcome open (an .npy header that numpy.save would not write) either
 * outcome is accepted, but still all or nothing, and what is committed must
 * be what the file says.
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
#include <sys/resource.h>
#include <unistd.h>

#include <cmocka.h>

#include "../fs/daemon.h"
#include "../fs/errors.h"
#include "../fs/ingest.h"
#include "testutil.h"
#include "vecfs.h"

#define FDIM 6                      /* the fuzzed store's dimension */
#define FUZZ_CASES 4000
#define LINE_LIMIT ((size_t)4 << 20) /* a text line's bytes (fs/ingest.c) */
#define NPY_HDR_LIMIT ((size_t)1 << 20)

/* ------------------------------------------------------------ errors */

/* The daemon context (not mounted) that the files of the running test are
 * written to; made anew by run_init(), for the store of the test. */
static fs_daemon dmn;
static int dmn_up;

static fs_daemon *daemon_for(fixture *f, vecfs *v)
{
	if (dmn_up)
		fs_daemon_fini(&dmn);
	assert_int_equal(fs_daemon_init(&dmn, f->dir, SESSIONS_DEFAULT,
				     (size_t)QUERY_INPUT_MB_DEFAULT << 20), 0);
	dmn.store = v;
	dmn_up = 1;
	return &dmn;
}

/* `errors` of that daemon: how many lines it got, the last one (to check
 * that a rejection leaves one line naming the file). */
static unsigned errors_now(void)
{
	return dmn_up ? (unsigned)fs_errors_count(&dmn.errors) : 0;
}

static const char *last_error(void)
{
	static char last[1100];
	last[0] = 0;
	if (dmn_up)
		fs_errors_last(&dmn.errors, last, sizeof last);
	return last;
}
#define err_count errors_now()
#define err_last last_error()

/* A write at the end of the file, by lock owner 1. */
static int wr(ingest *in, const char *p, size_t n)
{
	return fs_ingest_write(in, p, n, fs_ingest_size(in), 1);
}

/* ------------------------------------------------------------ bytes */

typedef struct bytes {
	uint8_t *p;
	size_t n, cap;
} bytes;

static void by_reserve(bytes *b, size_t extra)
{
	if (b->n + extra <= b->cap)
		return;
	size_t nc = b->cap ? b->cap : 256;
	while (nc < b->n + extra)
		nc *= 2;
	uint8_t *np = realloc(b->p, nc);
	assert_non_null(np);
	b->p = np;
	b->cap = nc;
}

static void by_add(bytes *b, const void *d, size_t n)
{
	if (!n)
		return;
	by_reserve(b, n);
	memcpy(b->p + b->n, d, n);
	b->n += n;
}

static void by_adds(bytes *b, const char *s)
{
	by_add(b, s, strlen(s));
}

static void by_byte(bytes *b, uint8_t c)
{
	by_add(b, &c, 1);
}

static void by_printf(bytes *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void by_printf(bytes *b, const char *fmt, ...)
{
	char tmp[512];
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
	va_end(ap);
	assert_true(n >= 0 && (size_t)n < sizeof tmp);
	by_add(b, tmp, (size_t)n);
}

static void by_insert(bytes *b, size_t at, const void *d, size_t n)
{
	by_reserve(b, n);
	memmove(b->p + at + n, b->p + at, b->n - at);
	memcpy(b->p + at, d, n);
	b->n += n;
}

static void by_erase(bytes *b, size_t at, size_t n)
{
	memmove(b->p + at, b->p + at + n, b->n - at - n);
	b->n -= n;
}

static void by_free(bytes *b)
{
	free(b->p);
	memset(b, 0, sizeof *b);
}

static uint64_t rnd(rng *r, uint64_t n)
{
	return n ? rng_next(r) % n : 0;
}

static uint32_t f2u(float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	return u;
}

static float u2f(uint32_t u)
{
	float f;
	memcpy(&f, &u, 4);
	return f;
}

static void put_le32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
	p[2] = (uint8_t)(v >> 16);
	p[3] = (uint8_t)(v >> 24);
}

static uint32_t get_le32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* ------------------------------------------------------------ formats */

enum { K_CSV, K_TSV, K_TXT, K_JSONL, K_FVECS, K_BVECS, K_NPY, K_KINDS };

static const char *const kind_ext[K_KINDS] = {".csv", ".tsv", ".txt", ".jsonl", ".fvecs", ".bvecs", ".npy"};

static int is_text(int kind)
{
	return kind <= K_JSONL;
}

/* ------------------------------------------------------------ the model */

/* What the store should hold: key -> vector and payload. */
typedef struct mrec {
	char *key;
	size_t klen;
	float *vec;
	uint8_t *pay;
	size_t plen;
} mrec;

typedef struct model {
	uint32_t dim;
	uint64_t next_key;
	mrec *r;
	size_t n, cap;
	size_t *slot; /* index + 1, 0 = empty */
	size_t nslot;
} model;

static uint64_t key_hash(const char *k, size_t n)
{
	uint64_t h = 1469598103934665603ULL;
	for (size_t i = 0; i < n; i++)
		h = (h ^ (uint8_t)k[i]) * 1099511628211ULL;
	return h;
}

static mrec *model_find(const model *m, const char *k, size_t n)
{
	if (!m->nslot)
		return NULL;
	for (size_t i = key_hash(k, n) & (m->nslot - 1);; i = (i + 1) & (m->nslot - 1)) {
		size_t s = m->slot[i];
		if (!s)
			return NULL;
		mrec *r = &m->r[s - 1];
		if (r->klen == n && !memcmp(r->key, k, n))
			return r;
	}
}

static void model_rehash(model *m, size_t nslot)
{
	free(m->slot);
	m->slot = calloc(nslot, sizeof *m->slot);
	assert_non_null(m->slot);
	m->nslot = nslot;
	for (size_t j = 0; j < m->n; j++) {
		size_t i = key_hash(m->r[j].key, m->r[j].klen) & (nslot - 1);
		while (m->slot[i])
			i = (i + 1) & (nslot - 1);
		m->slot[i] = j + 1;
	}
}

static void model_put(model *m, const char *k, size_t klen, const float *vec, const uint8_t *pay,
		      size_t plen)
{
	mrec *r = model_find(m, k, klen);
	if (!r) {
		if (m->n == m->cap) {
			m->cap = m->cap ? m->cap * 2 : 256;
			m->r = realloc(m->r, m->cap * sizeof *m->r);
			assert_non_null(m->r);
		}
		r = &m->r[m->n++];
		memset(r, 0, sizeof *r);
		r->key = malloc(klen ? klen : 1);
		assert_non_null(r->key);
		memcpy(r->key, k, klen);
		r->klen = klen;
		if (m->n * 2 > m->nslot)
			model_rehash(m, m->nslot ? m->nslot * 2 : 512);
		else {
			size_t i = key_hash(k, klen) & (m->nslot - 1);
			while (m->slot[i])
				i = (i + 1) & (m->nslot - 1);
			m->slot[i] = m->n;
		}
	}
	free(r->vec);
	free(r->pay);
	r->vec = malloc(sizeof(float) * m->dim);
	assert_non_null(r->vec);
	memcpy(r->vec, vec, sizeof(float) * m->dim);
	r->pay = NULL;
	r->plen = plen;
	if (plen) {
		r->pay = malloc(plen);
		assert_non_null(r->pay);
		memcpy(r->pay, pay, plen);
	}
}

static void model_free(model *m)
{
	for (size_t i = 0; i < m->n; i++) {
		free(m->r[i].key);
		free(m->r[i].vec);
		free(m->r[i].pay);
	}
	free(m->r);
	free(m->slot);
	memset(m, 0, sizeof *m);
}

/* ------------------------------------------------------------ reading back */

static float got_vec[VECFS_DIM_MAX];
static uint8_t got_pay[VECFS_PAYLOAD_MAX + 16];

/* 0 when the store holds r exactly; else why not, in why. */
static int record_differs(vecfs *v, const mrec *r, uint32_t dim, char *why, size_t cap)
{
	uint32_t d = 0;
	size_t plen = 0;
	int rc = vecfs_get(v, r->key, r->klen, got_vec, VECFS_DIM_MAX, &d, got_pay, sizeof got_pay, &plen);
	if (rc) {
		snprintf(why, cap, "vecfs_get(%.*s): %d", (int)r->klen, r->key, rc);
		return 1;
	}
	if (d != dim) {
		snprintf(why, cap, "key %.*s: dim %u, expected %u", (int)r->klen, r->key, d, dim);
		return 1;
	}
	for (uint32_t i = 0; i < dim; i++)
		if (f2u(got_vec[i]) != f2u(r->vec[i]) || !isfinite(got_vec[i])) {
			snprintf(why, cap, "key %.*s: value %u is %a (0x%08x), expected %a (0x%08x)",
				 (int)r->klen, r->key, i + 1, (double)got_vec[i], f2u(got_vec[i]),
				 (double)r->vec[i], f2u(r->vec[i]));
			return 1;
		}
	if (plen != r->plen || (plen && memcmp(got_pay, r->pay, plen))) {
		snprintf(why, cap, "key %.*s: payload of %zu bytes differs (expected %zu)", (int)r->klen,
			 r->key, plen, r->plen);
		return 1;
	}
	return 0;
}

/* Every key of the store is in the model with its content, and the counts agree. */
typedef struct scan {
	const model *m;
	vecfs *v;
	size_t seen;
	char last[VECFS_KEY_MAX + 1];
	size_t lastlen;
	char why[512];
} scan;

static int scan_key(void *arg, const char *key, size_t keylen)
{
	scan *s = arg;
	const mrec *r = model_find(s->m, key, keylen);
	s->seen++;
	memcpy(s->last, key, keylen);
	s->lastlen = keylen;
	if (!r) {
		snprintf(s->why, sizeof s->why, "the store holds key '%.*s' the model does not", (int)keylen, key);
		return 1;
	}
	return record_differs(s->v, r, s->m->dim, s->why, sizeof s->why);
}

static void check_whole_store(vecfs *v, const model *m)
{
	scan s = {m, v, 0, "", 0, ""};
	for (;;) {
		size_t before = s.seen;
		int rc = vecfs_keys(v, s.lastlen ? s.last : NULL, s.lastlen, 1000, scan_key, &s);
		if (rc)
			fail_msg("%s", s.why[0] ? s.why : "vecfs_keys failed");
		if (s.seen - before < 1000)
			break;
	}
	if (s.seen != m->n)
		fail_msg("the store lists %zu keys, the model has %zu", s.seen, m->n);
	vecfs_stats st = stats(v);
	assert_int_equal(st.records, m->n);
	assert_int_equal(st.next_key, m->next_key);
}

/* ------------------------------------------------------------ the reference */

enum { V_ACCEPT, V_REJECT, V_EITHER };

typedef struct orow {
	char *key; /* NULL: assigned */
	size_t klen;
	float *vec;
	uint8_t *pay;
	size_t plen;
	uint64_t line; /* the text line it was read from */
} orow;

typedef struct oracle {
	int verdict;
	uint64_t where;  /* line or row of the rejection (0: the file as a whole) */
	int where_known; /* nothing open came before the rejection */
	int amb;         /* something open was read */
	uint32_t sdim;   /* the store's dim (0 unset) */
	int cosine;      /* the store's metric is cosine: no zero vectors */
	uint32_t dim;    /* the file's: the store's, else its first row's */
	orow *rows;      /* rows read (up to the rejection) */
	size_t n, cap;
	float *tmp;
} oracle;

static void or_init(oracle *o, uint32_t sdim, int cosine)
{
	memset(o, 0, sizeof *o);
	o->sdim = sdim;
	o->cosine = cosine;
	o->dim = sdim;
	o->tmp = malloc(sizeof(float) * (VECFS_DIM_MAX + 1));
	assert_non_null(o->tmp);
}

static void or_free(oracle *o)
{
	for (size_t i = 0; i < o->n; i++) {
		free(o->rows[i].key);
		free(o->rows[i].vec);
		free(o->rows[i].pay);
	}
	free(o->rows);
	free(o->tmp);
}

/* The file is rejected at `where`; returns -1 to stop reading. */
static int or_reject(oracle *o, uint64_t where)
{
	o->verdict = V_REJECT;
	o->where = where;
	o->where_known = !o->amb;
	return -1;
}

static void or_row(oracle *o, const char *key, size_t klen, const float *vec, uint32_t dim,
		   const uint8_t *pay, size_t plen)
{
	if (o->n == o->cap) {
		o->cap = o->cap ? o->cap * 2 : 64;
		o->rows = realloc(o->rows, o->cap * sizeof *o->rows);
		assert_non_null(o->rows);
	}
	orow *r = &o->rows[o->n++];
	memset(r, 0, sizeof *r);
	if (key) {
		r->key = malloc(klen ? klen : 1);
		assert_non_null(r->key);
		memcpy(r->key, key, klen);
		r->klen = klen;
	}
	r->vec = malloc(sizeof(float) * dim);
	assert_non_null(r->vec);
	memcpy(r->vec, vec, sizeof(float) * dim);
	if (plen) {
		r->pay = malloc(plen);
		assert_non_null(r->pay);
		memcpy(r->pay, pay, plen);
		r->plen = plen;
	}
}

/* Finite values, and not all zero under cosine. */
static int vec_ok(const oracle *o, const float *v, uint32_t d)
{
	int nonzero = 0;
	for (uint32_t i = 0; i < d; i++) {
		if (!isfinite(v[i]))
			return 0;
		nonzero |= v[i] != 0;
	}
	return nonzero || !o->cosine;
}

/* Length of the UTF-8 sequence at p: strictly (no overlongs, surrogates or
 * code points past U+10FFFF), or structurally (lead byte and continuation
 * bytes only); 0 when it is not one. */
static size_t utf8_len(const uint8_t *p, const uint8_t *e, int strict)
{
	uint8_t c = p[0];
	size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
	if (!n || (size_t)(e - p) < n)
		return 0;
	for (size_t i = 1; i < n; i++)
		if ((p[i] & 0xC0) != 0x80)
			return 0;
	if (!strict || n == 1)
		return n;
	uint32_t cp = n == 2 ? c & 0x1F : n == 3 ? c & 0x0F : c & 0x07;
	for (size_t i = 1; i < n; i++)
		cp = cp << 6 | (p[i] & 0x3F);
	static const uint32_t least[5] = {0, 0, 0x80, 0x800, 0x10000};
	if (cp < least[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
		return 0;
	return n;
}

static int utf8_ok(const uint8_t *p, size_t n, int strict)
{
	const uint8_t *e = p + n;
	while (p < e) {
		size_t l = utf8_len(p, e, strict);
		if (!l)
			return 0;
		p += l;
	}
	return 1;
}

/* A key as SPEC.md has it: 1-255 bytes of UTF-8 (strictly: no overlong
 * form, surrogate or code point past U+10FFFF) without '/', NUL, tab or
 * newline, not "." or "..".  -1 bad, 0 good. */
static int key_verdict(const char *k, size_t n)
{
	if (n == 0 || n > VECFS_KEY_MAX)
		return -1;
	if ((n == 1 && k[0] == '.') || (n == 2 && k[0] == '.' && k[1] == '.'))
		return -1;
	for (size_t i = 0; i < n; i++)
		if (k[i] == '/' || k[i] == '\0' || k[i] == '\t' || k[i] == '\n')
			return -1;
	return utf8_ok((const uint8_t *)k, n, 1) ? 0 : -1;
}

/* A number token as strtof reads it in the C locale: -1 not a number, an
 * overflow, NaN or infinite; 0 a finite float. */
static int number_verdict(const char *s, size_t n, float *out)
{
	char small[160];
	char *buf = n < sizeof small ? small : malloc(n + 1);
	assert_non_null(buf);
	memcpy(buf, s, n);
	buf[n] = 0;
	int v = 0;
	char *end;
	if (n == 0 || strchr(" \t\n\v\f\r", buf[0])) {
		v = -1;
	} else {
		errno = 0;
		float f = strtof(buf, &end);
		if (end != buf + n || (errno == ERANGE && isinf(f)) || !isfinite(f))
			v = -1;
		else {
			*out = f;
			v = 0;
		}
	}
	if (buf != small)
		free(buf);
	return v;
}

static int blank(uint8_t c)
{
	return c == ' ' || c == '\t' || c == '\r';
}

static void trim_blanks(const uint8_t **s, size_t *n)
{
	while (*n && blank(**s)) {
		(*s)++;
		(*n)--;
	}
	while (*n && blank((*s)[*n - 1]))
		(*n)--;
}

/* Finish a line's row: dimension, key, and the row.  lamb: the line held
 * something open.  -1 rejected. */
static int line_row(oracle *o, uint64_t lineno, const char *key, size_t klen, uint32_t cnt,
		    const uint8_t *pay, size_t plen, int lamb)
{
	uint32_t want = o->dim ? o->dim : cnt;
	if (cnt != want)
		return or_reject(o, lineno);
	int kv = key_verdict(key, klen);
	if (kv < 0 || !vec_ok(o, o->tmp, cnt))
		return or_reject(o, lineno);
	if (kv > 0 || lamb)
		o->amb = 1;
	o->dim = want;
	or_row(o, key, klen, o->tmp, cnt, pay, plen);
	o->rows[o->n - 1].line = lineno;
	return 0;
}

/* The fields of a .csv/.tsv/.txt line from pos (key: the quoted key, or
 * NULL: the first field is the key). */
static int delim_fields_ref(oracle *o, const uint8_t *s, size_t n, uint64_t lineno, char sep,
			    const uint8_t *key, size_t klen, size_t pos)
{
	uint32_t cnt = 0;
	int lamb = 0;
	for (;;) {
		const uint8_t *f;
		size_t fl;
		if (sep) {
			if (pos > n)
				break;
			const uint8_t *e = memchr(s + pos, sep, n - pos);
			size_t end = e ? (size_t)(e - s) : n;
			f = s + pos;
			fl = end - pos;
			pos = end + 1;
			trim_blanks(&f, &fl);
			if (!fl)
				return or_reject(o, lineno);
		} else {
			while (pos < n && blank(s[pos]))
				pos++;
			if (pos >= n)
				break;
			size_t st = pos;
			while (pos < n && !blank(s[pos]))
				pos++;
			f = s + st;
			fl = pos - st;
		}
		if (!key) {
			key = f;
			klen = fl;
			continue;
		}
		if (cnt >= VECFS_DIM_MAX)
			return or_reject(o, lineno);
		int v = number_verdict((const char *)f, fl, &o->tmp[cnt]);
		if (v < 0)
			return or_reject(o, lineno);
		lamb |= v;
		cnt++;
	}
	if (cnt == 0)
		return or_reject(o, lineno);
	return line_row(o, lineno, (const char *)key, klen, cnt, NULL, 0, lamb);
}

/* A .csv/.tsv/.txt line (trimmed, not blank, not a comment).  A key may be
 * double-quoted as in RFC 4180 ("" is one quote); the separator is then
 * chosen from what follows the closing quote. */
static int delim_line_ref(oracle *o, int kind, const uint8_t *s, size_t n, uint64_t lineno)
{
	const uint8_t *key = NULL;
	size_t klen = 0, pos = 0;
	bytes qk = {0};
	if (s[0] == '"') {
		for (pos = 1;; pos++) {
			if (pos == n) {
				by_free(&qk);
				return or_reject(o, lineno);
			}
			if (s[pos] != '"') {
				by_byte(&qk, s[pos]);
				continue;
			}
			if (pos + 1 == n || s[pos + 1] != '"')
				break;
			by_byte(&qk, '"');
			pos++;
		}
		pos++;
		if (!qk.n) {
			by_free(&qk);
			return or_reject(o, lineno);
		}
		key = qk.p;
		klen = qk.n;
	}
	int comma = memchr(s + pos, ',', n - pos) != NULL, tab = memchr(s + pos, '\t', n - pos) != NULL;
	char sep = kind == K_TSV ? (tab ? '\t' : comma ? ',' : 0) : comma ? ',' : (kind == K_CSV && tab) ? '\t' : 0;
	if (key) {
		/* blanks, then the separator (at least one blank when there is none) */
		size_t st = pos;
		while (pos < n && blank(s[pos]) && s[pos] != (uint8_t)sep)
			pos++;
		int ok = pos < n && (sep ? s[pos] == (uint8_t)sep : pos > st);
		if (!ok) {
			by_free(&qk);
			return or_reject(o, lineno);
		}
		if (sep)
			pos++;
	}
	int rc = delim_fields_ref(o, s, n, lineno, sep, key, klen, pos);
	by_free(&qk);
	return rc;
}

/* ---- JSON, read strictly (RFC 8259) */

typedef struct jr {
	const uint8_t *p, *e;
	int amb; /* bytes that are not UTF-8 outside the key, a lone surrogate, deep nesting */
} jr;

static void jr_ws(jr *j)
{
	while (j->p < j->e && (*j->p == ' ' || *j->p == '\t' || *j->p == '\r' || *j->p == '\n'))
		j->p++;
}

static int jr_hex4(jr *j, unsigned *out)
{
	if (j->e - j->p < 4)
		return -1;
	unsigned v = 0;
	for (int i = 0; i < 4; i++) {
		uint8_t c = j->p[i];
		int h = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
			: c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
		if (h < 0)
			return -1;
		v = v * 16 + (unsigned)h;
	}
	j->p += 4;
	*out = v;
	return 0;
}

static void put_cp(bytes *b, unsigned cp)
{
	if (cp < 0x80) {
		by_byte(b, (uint8_t)cp);
	} else if (cp < 0x800) {
		by_byte(b, (uint8_t)(0xC0 | cp >> 6));
		by_byte(b, (uint8_t)(0x80 | (cp & 0x3F)));
	} else if (cp < 0x10000) {
		by_byte(b, (uint8_t)(0xE0 | cp >> 12));
		by_byte(b, (uint8_t)(0x80 | ((cp >> 6) & 0x3F)));
		by_byte(b, (uint8_t)(0x80 | (cp & 0x3F)));
	} else {
		by_byte(b, (uint8_t)(0xF0 | cp >> 18));
		by_byte(b, (uint8_t)(0x80 | ((cp >> 12) & 0x3F)));
		by_byte(b, (uint8_t)(0x80 | ((cp >> 6) & 0x3F)));
		by_byte(b, (uint8_t)(0x80 | (cp & 0x3F)));
	}
}

/* A string at '"', decoded into out (may be NULL). */
static int jr_string(jr *j, bytes *out, int is_key)
{
	j->p++;
	while (j->p < j->e) {
		uint8_t c = *j->p;
		if (c == '"') {
			j->p++;
			return 0;
		}
		if (c < 0x20)
			return -1;
		if (c == '\\') {
			if (j->e - j->p < 2)
				return -1;
			c = j->p[1];
			j->p += 2;
			unsigned cp;
			switch (c) {
			case '"': case '\\': case '/': cp = c; break;
			case 'b': cp = '\b'; break;
			case 'f': cp = '\f'; break;
			case 'n': cp = '\n'; break;
			case 'r': cp = '\r'; break;
			case 't': cp = '\t'; break;
			case 'u':
				if (jr_hex4(j, &cp))
					return -1;
				if (cp >= 0xD800 && cp <= 0xDBFF && j->e - j->p >= 6 && j->p[0] == '\\' &&
				    j->p[1] == 'u') {
					const uint8_t *save = j->p;
					unsigned lo;
					j->p += 2;
					if (jr_hex4(j, &lo))
						return -1;
					if (lo >= 0xDC00 && lo <= 0xDFFF)
						cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
					else
						j->p = save;
				}
				if (cp >= 0xD800 && cp <= 0xDFFF)
					j->amb = 1;
				break;
			default:
				return -1;
			}
			if (out)
				put_cp(out, cp);
			continue;
		}
		size_t l = 1;
		if (c >= 0x80) {
			l = utf8_len(j->p, j->e, 1);
			if (!l)
				return -1; /* every string is UTF-8, a payload's too */
		}
		if (out)
			by_add(out, j->p, l);
		j->p += l;
	}
	return -1;
}

static int jr_number(jr *j, const uint8_t **s, size_t *n)
{
	const uint8_t *p = j->p, *e = j->e;
	*s = p;
	if (p < e && *p == '-')
		p++;
	if (p < e && *p == '0')
		p++;
	else if (p < e && *p >= '1' && *p <= '9')
		while (p < e && *p >= '0' && *p <= '9')
			p++;
	else
		return -1;
	if (p < e && *p == '.') {
		p++;
		if (!(p < e && *p >= '0' && *p <= '9'))
			return -1;
		while (p < e && *p >= '0' && *p <= '9')
			p++;
	}
	if (p < e && (*p == 'e' || *p == 'E')) {
		p++;
		if (p < e && (*p == '+' || *p == '-'))
			p++;
		if (!(p < e && *p >= '0' && *p <= '9'))
			return -1;
		while (p < e && *p >= '0' && *p <= '9')
			p++;
	}
	*n = (size_t)(p - *s);
	j->p = p;
	return 0;
}

/* Any value.  The parser bounds nesting at about 256 levels: deeper is
 * rejected, around it is open. */
static int jr_value(jr *j, int depth)
{
	if (depth > 262)
		return -1;
	if (depth >= 250)
		j->amb = 1;
	jr_ws(j);
	if (j->p >= j->e)
		return -1;
	const uint8_t *s;
	size_t n;
	switch (*j->p) {
	case '"':
		return jr_string(j, NULL, 0);
	case '{':
	case '[': {
		uint8_t close = *j->p == '{' ? '}' : ']';
		int obj = close == '}';
		j->p++;
		jr_ws(j);
		if (j->p < j->e && *j->p == close) {
			j->p++;
			return 0;
		}
		for (;;) {
			if (obj) {
				jr_ws(j);
				if (j->p >= j->e || *j->p != '"' || jr_string(j, NULL, 0))
					return -1;
				jr_ws(j);
				if (j->p >= j->e || *j->p != ':')
					return -1;
				j->p++;
			}
			if (jr_value(j, depth + 1))
				return -1;
			jr_ws(j);
			if (j->p < j->e && *j->p == ',') {
				j->p++;
				continue;
			}
			if (j->p < j->e && *j->p == close) {
				j->p++;
				return 0;
			}
			return -1;
		}
	}
	case 't':
		if (j->e - j->p >= 4 && !memcmp(j->p, "true", 4)) {
			j->p += 4;
			return 0;
		}
		return -1;
	case 'f':
		if (j->e - j->p >= 5 && !memcmp(j->p, "false", 5)) {
			j->p += 5;
			return 0;
		}
		return -1;
	case 'n':
		if (j->e - j->p >= 4 && !memcmp(j->p, "null", 4)) {
			j->p += 4;
			return 0;
		}
		return -1;
	default:
		return jr_number(j, &s, &n);
	}
}

/* A .jsonl line (trimmed, not blank): {"key": ..., "vector": [...], "payload": ...}. */
static int json_line_ref(oracle *o, const uint8_t *s, size_t n, uint64_t lineno)
{
	jr j = {s, s + n, 0};
	bytes key = {0}, name = {0};
	int have_key = 0, have_vec = 0, have_pay = 0, bad = 0, lamb = 0;
	uint32_t cnt = 0;
	const uint8_t *pay = NULL;
	size_t plen = 0;
	jr_ws(&j);
	if (j.p >= j.e || *j.p != '{') {
		bad = 1;
		goto out;
	}
	j.p++;
	jr_ws(&j);
	if (j.p < j.e && *j.p == '}') {
		j.p++;
		goto end;
	}
	for (;;) {
		jr_ws(&j);
		name.n = 0;
		if (j.p >= j.e || *j.p != '"' || jr_string(&j, &name, 0)) {
			bad = 1;
			goto out;
		}
		jr_ws(&j);
		if (j.p >= j.e || *j.p != ':') {
			bad = 1;
			goto out;
		}
		j.p++;
		jr_ws(&j);
		if ((name.n == 3 && !memcmp(name.p, "key", 3) && have_key) ||
		    (name.n == 6 && !memcmp(name.p, "vector", 6) && have_vec) ||
		    (name.n == 7 && !memcmp(name.p, "payload", 7) && have_pay)) {
			bad = 1; /* a member given twice */
			goto out;
		}
		if (name.n == 3 && !memcmp(name.p, "key", 3)) {
			key.n = 0;
			if (j.p >= j.e || *j.p != '"' || jr_string(&j, &key, 1)) {
				bad = 1;
				goto out;
			}
			have_key = 1;
		} else if (name.n == 6 && !memcmp(name.p, "vector", 6)) {
			if (j.p >= j.e || *j.p != '[') {
				bad = 1;
				goto out;
			}
			j.p++;
			cnt = 0;
			jr_ws(&j);
			if (j.p < j.e && *j.p == ']') {
				j.p++;
			} else {
				for (;;) {
					const uint8_t *ns;
					size_t nl;
					jr_ws(&j);
					if (cnt >= VECFS_DIM_MAX || jr_number(&j, &ns, &nl)) {
						bad = 1;
						goto out;
					}
					int v = number_verdict((const char *)ns, nl, &o->tmp[cnt]);
					if (v < 0) {
						bad = 1;
						goto out;
					}
					lamb |= v;
					cnt++;
					jr_ws(&j);
					if (j.p < j.e && *j.p == ',') {
						j.p++;
						continue;
					}
					if (j.p < j.e && *j.p == ']') {
						j.p++;
						break;
					}
					bad = 1;
					goto out;
				}
			}
			have_vec = 1;
		} else if (name.n == 7 && !memcmp(name.p, "payload", 7)) {
			const uint8_t *st = j.p;
			if (jr_value(&j, 0)) {
				bad = 1;
				goto out;
			}
			pay = st;
			plen = (size_t)(j.p - st);
			have_pay = 1;
		} else if (jr_value(&j, 0)) {
			bad = 1;
			goto out;
		}
		jr_ws(&j);
		if (j.p < j.e && *j.p == ',') {
			j.p++;
			continue;
		}
		if (j.p < j.e && *j.p == '}') {
			j.p++;
			break;
		}
		bad = 1;
		goto out;
	}
end:
	jr_ws(&j);
	if (j.p != j.e || !have_key || !have_vec || cnt == 0 || plen > VECFS_PAYLOAD_MAX)
		bad = 1;
out:
	by_free(&name);
	if (bad) {
		by_free(&key);
		return or_reject(o, lineno);
	}
	int rc = line_row(o, lineno, key.p ? (const char *)key.p : "", key.n, cnt, pay, plen,
			  lamb | j.amb);
	by_free(&key);
	return rc;
}

static void text_ref(oracle *o, int kind, const uint8_t *p, size_t n)
{
	size_t pos = 0;
	uint64_t lineno = 0;
	while (pos < n) {
		const uint8_t *nl = memchr(p + pos, '\n', n - pos);
		size_t end = nl ? (size_t)(nl - p) : n;
		const uint8_t *s = p + pos;
		size_t len = end - pos;
		lineno++;
		pos = end + 1;
		if (len > LINE_LIMIT) {
			or_reject(o, lineno);
			return;
		}
		trim_blanks(&s, &len);
		if (!len || (kind != K_JSONL && s[0] == '#'))
			continue;
		int rc = kind == K_JSONL ? json_line_ref(o, s, len, lineno)
					 : delim_line_ref(o, kind, s, len, lineno);
		if (rc)
			return;
	}
}

/* TEXMEX rows: int32 dim, then dim float32 (fvecs) or uint8 (bvecs). */
static void texmex_ref(oracle *o, int kind, const uint8_t *p, size_t n)
{
	size_t pos = 0;
	uint64_t row = 0;
	size_t w = kind == K_FVECS ? 4 : 1;
	while (pos < n) {
		row++;
		if (n - pos < 4) {
			or_reject(o, row);
			return;
		}
		int32_t d = (int32_t)get_le32(p + pos);
		if (d <= 0 || d > VECFS_DIM_MAX || (o->dim && (uint32_t)d != o->dim)) {
			or_reject(o, row);
			return;
		}
		pos += 4;
		if (n - pos < (size_t)d * w) {
			or_reject(o, row);
			return;
		}
		for (int32_t i = 0; i < d; i++)
			o->tmp[i] = kind == K_FVECS ? u2f(get_le32(p + pos + 4 * (size_t)i)) : (float)p[pos + (size_t)i];
		if (!vec_ok(o, o->tmp, (uint32_t)d)) {
			or_reject(o, row);
			return;
		}
		pos += (size_t)d * w;
		o->dim = (uint32_t)d;
		or_row(o, NULL, 0, o->tmp, (uint32_t)d, NULL, 0);
	}
}

/* The header dict of an .npy file as numpy.save writes it ('descr',
 * 'fortran_order', 'shape' in single quotes, spaces, a tuple of decimal
 * integers, padding spaces and a newline).  1 when it is one. */
typedef struct npyhdr {
	char descr[32];
	int fortran;
	uint64_t shape[4];
	int nd;
} npyhdr;

static int npy_header_ref(const uint8_t *h, size_t n, npyhdr *out)
{
	size_t i = 1;
	int seen = 0;
	memset(out, 0, sizeof *out);
	if (n == 0 || h[0] != '{')
		return 0;
#define SPACES while (i < n && h[i] == ' ') i++
	SPACES;
	for (;;) {
		if (i < n && h[i] == '}') {
			i++;
			break;
		}
		if (i >= n || h[i] != '\'')
			return 0;
		size_t ks = ++i;
		while (i < n && h[i] != '\'') {
			if (h[i] == '\\' || h[i] < 0x20 || h[i] >= 0x7f)
				return 0;
			i++;
		}
		if (i >= n)
			return 0;
		size_t kl = i++ - ks;
		SPACES;
		if (i >= n || h[i] != ':')
			return 0;
		i++;
		SPACES;
		int which = kl == 5 && !memcmp(h + ks, "descr", 5)           ? 1
			    : kl == 13 && !memcmp(h + ks, "fortran_order", 13) ? 2
			    : kl == 5 && !memcmp(h + ks, "shape", 5)           ? 4
									       : 0;
		if (!which || (seen & which))
			return 0;
		seen |= which;
		if (which == 1) {
			if (i >= n || (h[i] != '\'' && h[i] != '"'))
				return 0;
			uint8_t q = h[i++];
			size_t s = i;
			while (i < n && h[i] != q) {
				if (h[i] == '\\' || h[i] < 0x20 || h[i] >= 0x7f)
					return 0;
				i++;
			}
			if (i >= n || i - s >= sizeof out->descr)
				return 0;
			memcpy(out->descr, h + s, i - s);
			i++;
		} else if (which == 2) {
			if (n - i >= 4 && !memcmp(h + i, "True", 4)) {
				out->fortran = 1;
				i += 4;
			} else if (n - i >= 5 && !memcmp(h + i, "False", 5)) {
				i += 5;
			} else {
				return 0;
			}
		} else {
			if (i >= n || h[i] != '(')
				return 0;
			i++;
			SPACES;
			int comma = 0;
			while (i < n && h[i] != ')') {
				if (h[i] < '0' || h[i] > '9' || (h[i] == '0' && i + 1 < n && h[i + 1] >= '0' && h[i + 1] <= '9'))
					return 0;
				uint64_t v = 0;
				while (i < n && h[i] >= '0' && h[i] <= '9') {
					unsigned d = (unsigned)(h[i] - '0');
					if (v > (UINT64_MAX - d) / 10)
						return 0;
					v = v * 10 + d;
					i++;
				}
				if (out->nd < 4)
					out->shape[out->nd] = v;
				out->nd++;
				SPACES;
				comma = 0;
				if (i < n && h[i] == ',') {
					i++;
					SPACES;
					comma = 1;
				} else if (i < n && h[i] != ')') {
					return 0;
				}
			}
			if (i >= n || (out->nd == 1 && !comma))
				return 0;
			i++;
		}
		SPACES;
		if (i < n && h[i] == ',') {
			i++;
			SPACES;
			continue;
		}
		if (i < n && h[i] == '}') {
			i++;
			break;
		}
		return 0;
	}
	/* the parser reads the dict from the header's first 4 KiB */
	if (seen != 7 || i > 4000)
		return 0;
	SPACES;
#undef SPACES
	if (i < n && h[i] == '\n')
		i++;
	return i == n;
}

/* One .npy row of d values of es bytes (4: float32; 8: float64, which must
 * fit float32) into o->tmp: -1 when it is not a good row. */
static int npy_row_ref(oracle *o, const uint8_t *p, uint32_t d, size_t es)
{
	for (uint32_t i = 0; i < d; i++) {
		if (es == 4) {
			o->tmp[i] = u2f(get_le32(p + 4 * i));
			continue;
		}
		uint64_t u = get_le32(p + 8 * i) | (uint64_t)get_le32(p + 8 * i + 4) << 32;
		double v;
		memcpy(&v, &u, 8);
		o->tmp[i] = (float)v;
		if (isfinite(v) && !isfinite(o->tmp[i]))
			return -1; /* rounds past float32's range */
	}
	return vec_ok(o, o->tmp, d) ? 0 : -1;
}

static void npy_ref(oracle *o, const uint8_t *p, size_t n)
{
	if (n == 0)
		return; /* nothing written: the close commits nothing */
	if (n < 10 || memcmp(p, "\x93NUMPY", 6) || p[6] < 1 || p[6] > 3) {
		or_reject(o, 0);
		return;
	}
	size_t off = p[6] == 1 ? 10 : 12;
	if (n < off) {
		or_reject(o, 0);
		return;
	}
	size_t hl = p[6] == 1 ? (size_t)p[8] | (size_t)p[9] << 8 : get_le32(p + 8);
	if (hl > NPY_HDR_LIMIT || n - off < hl) {
		or_reject(o, 0);
		return;
	}
	if (p[7] != 0)
		o->amb = 1; /* minor version: numpy reads x.0 only */
	npyhdr h;
	int strict = npy_header_ref(p + off, hl, &h);
	const uint8_t *data = p + off + hl;
	size_t dn = n - off - hl;
	if (!strict) {
		/* not numpy.save's header: whatever the parser read of it, rows it
		 * commits are the data read as rows of the store's dim, of float64
		 * where its 'descr' says '<f8' */
		o->amb = 1;
		assert_true(o->sdim != 0);
		const uint8_t *ds = memmem(p + off, hl, "'descr'", 7);
		const uint8_t *c = ds ? memchr(ds, ':', hl - (size_t)(ds - (p + off))) : NULL;
		while (c && c + 1 < p + off + hl && c[1] == ' ')
			c++;
		size_t es = c && p + off + hl - c > 5 && (!memcmp(c + 1, "'<f8'", 5) || !memcmp(c + 1, "\"<f8\"", 5)) ? 8 : 4;
		size_t rowb = es * o->sdim;
		if (dn % rowb) {
			or_reject(o, 0);
			return;
		}
		for (size_t r = 0; r < dn / rowb; r++) {
			if (npy_row_ref(o, data + r * rowb, o->sdim, es)) {
				or_reject(o, 0);
				return;
			}
			or_row(o, NULL, 0, o->tmp, o->sdim, NULL, 0);
		}
		return;
	}
	size_t es = !strcmp(h.descr, "<f8") ? 8 : 4;
	if ((es == 4 && strcmp(h.descr, "<f4")) || h.fortran || h.nd != 2 || h.shape[1] == 0 ||
	    h.shape[1] > VECFS_DIM_MAX) {
		or_reject(o, 0);
		return;
	}
	uint32_t d = (uint32_t)h.shape[1];
	uint64_t rows = h.shape[0];
	size_t rowb = es * (size_t)d;
	uint64_t full = dn / rowb, part = dn % rowb;
	uint64_t upto = full < rows ? full : rows;
	for (uint64_t r = 0; r < upto; r++) {
		if (o->dim && d != o->dim) {
			or_reject(o, r + 1);
			return;
		}
		if (npy_row_ref(o, data + r * rowb, d, es)) {
			or_reject(o, r + 1);
			return;
		}
		o->dim = d;
		or_row(o, NULL, 0, o->tmp, d, NULL, 0);
	}
	if (full > rows || (full == rows && part))
		or_reject(o, rows + 1);
	else if (part || full < rows)
		or_reject(o, full + 1);
}

/* What the file holds, read against a store of dim sdim (0: unset). */
/* In a .csv/.tsv/.txt file a key given twice rejects the file, at the line
 * of its second place (the first such line in the file). */
static void dup_keys_ref(oracle *o)
{
	uint64_t at = 0;
	for (size_t i = 0; i < o->n; i++)
		for (size_t j = 0; j < i; j++)
			if (o->rows[i].klen == o->rows[j].klen &&
			    !memcmp(o->rows[i].key, o->rows[j].key, o->rows[i].klen) &&
			    (!at || o->rows[i].line < at))
				at = o->rows[i].line;
	if (at) {
		int amb = o->amb;
		o->amb = 0;
		or_reject(o, at);
		o->where_known = !amb;
	}
}

static void reference(oracle *o, int kind, const uint8_t *p, size_t n, uint32_t sdim, int cosine)
{
	or_init(o, sdim, cosine);
	if (is_text(kind))
		text_ref(o, kind, p, n);
	else if (kind == K_NPY)
		npy_ref(o, p, n);
	else
		texmex_ref(o, kind, p, n);
	if (is_text(kind) && kind != K_JSONL && o->verdict != V_REJECT)
		dup_keys_ref(o);
	if (o->verdict != V_REJECT && o->amb)
		o->verdict = V_EITHER;
}

/* ------------------------------------------------------------ generating files */

static float gen_value(rng *r)
{
	switch (rnd(r, 20)) {
	case 0: return 0.0f;
	case 1: return -0.0f;
	case 2: return (float)((int)rnd(r, 2001) - 1000);
	case 3: return rnd(r, 2) ? FLT_MAX : -FLT_MAX;
	case 4: return rnd(r, 2) ? FLT_MIN : -FLT_MIN;
	case 5: return u2f((uint32_t)(1 + rnd(r, 0x7fffff)) | (uint32_t)rnd(r, 2) << 31); /* subnormal */
	case 6: { /* any finite bit pattern */
		uint32_t u;
		do
			u = (uint32_t)rng_next(r);
		while (((u >> 23) & 0xff) == 0xff);
		return u2f(u);
	}
	default: return (float)(rng_gauss(r) * pow(10.0, (double)((int)rnd(r, 9) - 4)));
	}
}

/* A number token for v: as many writers print numbers (not always ones that
 * read back to v: the reference reads the token). */
static void num_token(rng *r, float v, int json, char *out, size_t cap)
{
	double d = (double)v;
	int neg = signbit(v) != 0;
	switch (rnd(r, json ? 5 : 11)) {
	case 0: snprintf(out, cap, "%.9g", d); break;
	case 1: snprintf(out, cap, "%.17g", d); break;
	case 2: snprintf(out, cap, "%e", d); break;
	case 3: snprintf(out, cap, "%.6g", d); break;
	case 4:
		if (fabs(d) < 1e6)
			snprintf(out, cap, "%.3f", d);
		else
			snprintf(out, cap, "%.9E", d);
		break;
	case 5: snprintf(out, cap, "%a", d); break;                 /* hexadecimal */
	case 6: snprintf(out, cap, neg ? "%.9g" : "+%.9g", d); break; /* a plus sign */
	case 7: /* ".5", "-.5" */
		snprintf(out, cap, "%.9g", d);
		if (!strncmp(out, "0.", 2))
			memmove(out, out + 1, strlen(out));
		else if (!strncmp(out, "-0.", 3))
			memmove(out + 1, out + 2, strlen(out + 1));
		break;
	case 8: /* "5." */
		if (d == floor(d) && fabs(d) < 1e9)
			snprintf(out, cap, "%.0f.", d);
		else
			snprintf(out, cap, "%.8e", d);
		break;
	case 9: /* leading zeros */
		snprintf(out, cap, neg ? "-000%.9g" : "000%.9g", fabs(d));
		break;
	default: /* an exponent in capitals */
		snprintf(out, cap, "%.7E", d);
		break;
	}
}

static unsigned key_serial;

/* A key for a text line: mode 0 whitespace-separated (no blanks), ',' or
 * '\t' separated (blanks inside allowed, no separator), 'j' for JSON (any). */
/* Existing keys a delimited text file being generated has used already
 * (such a file may give a key once); NULL: no such file. */
static uint8_t *gen_used;

static void gen_key(rng *r, int mode, const model *m, bytes *out)
{
	char k[128];
	unsigned s = key_serial++;
	switch (rnd(r, 10)) {
	case 0: snprintf(k, sizeof k, "%u", s); break; /* like an assigned key */
	case 1: snprintf(k, sizeof k, "ключ-%u", s); break;
	case 2: snprintf(k, sizeof k, "キー%u\xF0\x9F\x98\x80", s); break;
	case 3: snprintf(k, sizeof k, "a.b-c_d:%u;e=f", s); break;
	case 4:
		snprintf(k, sizeof k, mode == 0 ? "w%u" : "two words %u", s);
		break;
	case 5:
		snprintf(k, sizeof k, mode == 'j' ? "q\"uo\\te'%u" : "q\"uote'%u#", s);
		break;
	case 6:
	case 7:
		if (m && m->n) { /* an existing key: replaced */
			size_t at = rnd(r, m->n);
			const mrec *e = &m->r[at];
			int ok = !(gen_used && mode != 'j' && gen_used[at]) && e->klen < sizeof k && e->key[0] != '#' &&
				 utf8_ok((const uint8_t *)e->key, e->klen, 1);
			for (size_t i = 0; ok && i < e->klen; i++)
				if (blank((uint8_t)e->key[i]) || e->key[i] == ',' || (uint8_t)e->key[i] < 0x20)
					ok = 0;
			if (ok) {
				if (gen_used && mode != 'j')
					gen_used[at] = 1;
				by_add(out, e->key, e->klen);
				return;
			}
		}
		/* fall through */
	default: snprintf(k, sizeof k, "k%u", s); break;
	}
	by_adds(out, k);
}

static void json_string(rng *r, bytes *b, const uint8_t *s, size_t n)
{
	by_byte(b, '"');
	for (size_t i = 0; i < n;) {
		uint8_t c = s[i];
		if (c == '"' || c == '\\') {
			by_byte(b, '\\');
			by_byte(b, c);
			i++;
		} else if (c < 0x20) {
			by_printf(b, "\\u%04x", c);
			i++;
		} else if (c >= 0x80) { /* a whole sequence, as it is or as \u escapes */
			size_t l = utf8_len(s + i, s + n, 1);
			assert_true(l >= 2);
			if (rnd(r, 2)) {
				by_add(b, s + i, l);
				i += l;
				continue;
			}
			uint32_t cp = l == 2 ? c & 0x1F : l == 3 ? c & 0x0F : c & 0x07;
			for (size_t j = 1; j < l; j++)
				cp = cp << 6 | (s[i + j] & 0x3F);
			if (cp >= 0x10000)
				by_printf(b, "\\u%04X\\u%04x", 0xD800 + ((cp - 0x10000) >> 10),
					  0xDC00 + ((cp - 0x10000) & 0x3FF));
			else
				by_printf(b, "\\u%04x", cp);
			i += l;
		} else if (c < 0x80 && c != '/' && rnd(r, 12) == 0) {
			by_printf(b, "\\u%04X", c);
			i++;
		} else {
			by_byte(b, c);
			i++;
		}
	}
	by_byte(b, '"');
}

static void json_ws(rng *r, bytes *b)
{
	static const char *const ws[] = {"", "", "", " ", " ", "  ", "\t"};
	by_adds(b, ws[rnd(r, 7)]);
}

/* Any JSON value (a payload, or a member the parser skips). */
static void gen_json(rng *r, bytes *b, int depth)
{
	switch (rnd(r, depth > 3 ? 6 : 9)) {
	case 0: by_adds(b, "null"); break;
	case 1: by_adds(b, rnd(r, 2) ? "true" : "false"); break;
	case 2: {
		char t[64];
		num_token(r, gen_value(r), 1, t, sizeof t);
		by_adds(b, t);
		break;
	}
	case 3: by_adds(b, "-12.5e-3"); break;
	case 4:
	case 5: {
		static const char *const strs[] = {"", "colour", "purple \xC3\xA9t\xC3\xA9", "a\"b\\c/d",
						   "tab\there", "\xE2\x82\xAC 5", "{not: json}", "\xF0\x9F\x8D\x87"};
		const char *s = strs[rnd(r, 8)];
		json_string(r, b, (const uint8_t *)s, strlen(s));
		break;
	}
	case 6:
	case 7: {
		by_byte(b, '[');
		unsigned n = (unsigned)rnd(r, 4);
		for (unsigned i = 0; i < n; i++) {
			if (i)
				by_byte(b, ',');
			json_ws(r, b);
			gen_json(r, b, depth + 1);
		}
		json_ws(r, b);
		by_byte(b, ']');
		break;
	}
	default: {
		by_byte(b, '{');
		unsigned n = (unsigned)rnd(r, 4);
		for (unsigned i = 0; i < n; i++) {
			if (i)
				by_byte(b, ',');
			json_ws(r, b);
			char nm[16];
			snprintf(nm, sizeof nm, "m%u", i);
			json_string(r, b, (const uint8_t *)nm, strlen(nm));
			json_ws(r, b);
			by_byte(b, ':');
			json_ws(r, b);
			gen_json(r, b, depth + 1);
		}
		json_ws(r, b);
		by_byte(b, '}');
	}
	}
}

static void line_end(rng *r, bytes *b)
{
	by_adds(b, rnd(r, 5) ? "\n" : "\r\n");
}

/* Blank and comment lines between rows. */
static void gen_filler(rng *r, int kind, bytes *b)
{
	while (rnd(r, 6) == 0) {
		switch (rnd(r, kind == K_JSONL ? 2 : 4)) {
		case 0: break;
		case 1: by_adds(b, rnd(r, 2) ? "   " : " \t "); break;
		case 2: by_adds(b, "# a comment, 1 2 3"); break;
		default: by_adds(b, "\t#\xE2\x80\x94 indented"); break;
		}
		line_end(r, b);
	}
}

static void gen_text_rows(rng *r, int kind, uint32_t dim, size_t rows, const model *m, bytes *b)
{
	for (size_t i = 0; i < rows; i++) {
		gen_filler(r, kind, b);
		if (rnd(r, 4) == 0)
			by_adds(b, rnd(r, 2) ? " " : "\t");
		if (kind == K_JSONL) {
			bytes key = {0};
			gen_key(r, 'j', m, &key);
			int order = (int)rnd(r, 6), pay = (int)rnd(r, 3), extra = rnd(r, 4) == 0;
			by_byte(b, '{');
			json_ws(r, b);
			int first = 1;
			for (int part = 0; part < 4; part++) {
				/* order: which of key/vector comes first, payload and an extra member placed around */
				int what = (order + part) % 4;
				if ((what == 2 && !pay) || (what == 3 && !extra))
					continue;
				if (!first) {
					json_ws(r, b);
					by_byte(b, ',');
					json_ws(r, b);
				}
				first = 0;
				if (what == 0) {
					by_adds(b, "\"key\"");
					json_ws(r, b);
					by_byte(b, ':');
					json_ws(r, b);
					json_string(r, b, key.p, key.n);
				} else if (what == 1) {
					by_adds(b, rnd(r, 8) ? "\"vector\"" : "\"vec\\u0074or\"");
					json_ws(r, b);
					by_byte(b, ':');
					json_ws(r, b);
					by_byte(b, '[');
					for (uint32_t j = 0; j < dim; j++) {
						char t[64];
						if (j) {
							json_ws(r, b);
							by_byte(b, ',');
						}
						json_ws(r, b);
						num_token(r, gen_value(r), 1, t, sizeof t);
						by_adds(b, t);
					}
					json_ws(r, b);
					by_byte(b, ']');
				} else if (what == 2) {
					by_adds(b, "\"payload\":");
					json_ws(r, b);
					gen_json(r, b, 0);
				} else {
					by_adds(b, rnd(r, 2) ? "\"id\":" : "\"meta\\\"x\": ");
					gen_json(r, b, 0);
				}
			}
			json_ws(r, b);
			by_byte(b, '}');
			by_free(&key);
		} else {
			/* separators: CSV ',' (else '\t', else blanks); TSV '\t'
			 * (else ','); TXT ',' (else blanks and tabs) */
			int mode = (int)rnd(r, 3);
			char sep = kind == K_CSV ? (mode == 0 ? ',' : mode == 1 ? '\t' : 0)
				   : kind == K_TSV ? (mode == 0 ? '\t' : mode == 1 ? ',' : 0)
						   : (mode == 0 ? ',' : 0);
			bytes key = {0};
			if (rnd(r, 5) == 0) {
				/* double-quoted as in RFC 4180: separators, blanks and a
				 * leading '#' inside; a quote doubled */
				gen_key(r, ',', m, &key);
				if (rnd(r, 3) == 0) {
					const char *lead = rnd(r, 2) ? "#" : ", ";
					by_insert(&key, 0, lead, strlen(lead));
				}
				by_byte(b, '"');
				for (size_t j = 0; j < key.n; j++) {
					if (key.p[j] == '"')
						by_byte(b, '"');
					by_byte(b, key.p[j]);
				}
				by_byte(b, '"');
			} else {
				gen_key(r, sep ? sep : 0, m, &key);
				/* no comma may appear where the line is to be split on tabs or blanks */
				int commas_ok = sep == ',' || (kind == K_TSV && sep == '\t');
				for (size_t j = 0; !commas_ok && j < key.n; j++)
					if (key.p[j] == ',')
						key.p[j] = '_';
				/* a line starting with '#' is a comment */
				if (key.n && key.p[0] == '#')
					key.p[0] = '_';
				by_add(b, key.p, key.n);
			}
			by_free(&key);
			for (uint32_t j = 0; j < dim; j++) {
				char t[64];
				if (sep) {
					if (sep == ',' && rnd(r, 3) == 0)
						by_adds(b, kind == K_TSV ? " " : " \t");
					by_byte(b, (uint8_t)sep);
					if (rnd(r, 3) == 0)
						by_adds(b, "  ");
				} else {
					static const char *const gaps[] = {" ", " ", "  ", "\t", " \t "};
					by_adds(b, gaps[rnd(r, kind == K_TXT ? 5 : 3)]);
				}
				num_token(r, gen_value(r), 0, t, sizeof t);
				by_adds(b, t);
			}
		}
		if (rnd(r, 4) == 0)
			by_adds(b, rnd(r, 2) ? "  " : "\t");
		if (i + 1 < rows || rnd(r, 4))
			line_end(r, b);
		else
			return; /* the last line without a newline */
	}
	gen_filler(r, kind, b);
}

static void gen_text(rng *r, int kind, uint32_t dim, size_t rows, const model *m, bytes *b)
{
	if (kind != K_JSONL) {
		gen_used = calloc(m && m->n ? m->n : 1, 1);
		assert_non_null(gen_used);
	}
	gen_text_rows(r, kind, dim, rows, m, b);
	free(gen_used);
	gen_used = NULL;
}

static void gen_texmex(rng *r, int kind, uint32_t dim, size_t rows, bytes *b)
{
	for (size_t i = 0; i < rows; i++) {
		uint8_t w[4];
		put_le32(w, dim);
		by_add(b, w, 4);
		for (uint32_t j = 0; j < dim; j++) {
			if (kind == K_BVECS) {
				by_byte(b, (uint8_t)rng_next(r));
			} else {
				put_le32(w, f2u(gen_value(r)));
				by_add(b, w, 4);
			}
		}
	}
}

/* The header dict (mostly as numpy.save writes it); `bad` picks a defect. */
static void npy_dict(rng *r, bytes *h, uint32_t dim, uint64_t rows, int bad, int f8)
{
	char descr[32] = "'<f4'", fortran[8] = "False", shape[64];
	snprintf(shape, sizeof shape, "(%llu, %u)", (unsigned long long)rows, dim);
	if (rnd(r, 3) == 0)
		snprintf(shape, sizeof shape, "(%llu,%u,)", (unsigned long long)rows, dim);
	descr[3] = f8 ? '8' : '4';
	if (rnd(r, 5) == 0)
		strcpy(descr, f8 ? "\"<f8\"" : "\"<f4\"");
	switch (bad) {
	case 0: break;
	case 1: strcpy(descr, rnd(r, 2) ? "'>f8'" : "'<f2'"); break;
	case 2: strcpy(descr, "'>f4'"); break;
	case 3: strcpy(descr, "'<i4'"); break;
	case 4: strcpy(descr, "'|u1'"); break;
	case 5: strcpy(fortran, "True"); break;
	case 6: snprintf(shape, sizeof shape, "(%llu,)", (unsigned long long)(rows * dim)); break;
	case 7: snprintf(shape, sizeof shape, "(%llu, %u, 1)", (unsigned long long)rows, dim); break;
	case 8: snprintf(shape, sizeof shape, "(%llu, %u)", (unsigned long long)rows, dim + 1); break;
	case 9: snprintf(shape, sizeof shape, "(%llu, %u)", (unsigned long long)rows + 1, dim); break;
	case 10: snprintf(shape, sizeof shape, "(%llu, %u)", (unsigned long long)(rows ? rows - 1 : 0), dim); break;
	case 11: snprintf(shape, sizeof shape, "(%llu, 0)", (unsigned long long)rows); break;
	case 12: snprintf(shape, sizeof shape, "(%llu, 5000)", (unsigned long long)rows); break;
	case 13: strcpy(shape, "()"); break;
	case 14: strcpy(shape, "(18446744073709551615, 6)"); break;
	default: strcpy(descr, "'float32'"); break;
	}
	const char *ks[3] = {"'descr': ", "'fortran_order': ", "'shape': "};
	const char *vs[3] = {descr, fortran, shape};
	int order = rnd(r, 4) == 0 ? (int)rnd(r, 3) : 0;
	by_byte(h, '{');
	for (int i = 0; i < 3; i++) {
		int k = (order + i) % 3;
		if (i)
			by_adds(h, ", ");
		by_adds(h, ks[k]);
		by_adds(h, vs[k]);
	}
	by_adds(h, rnd(r, 2) ? ", }" : "}");
}

/* Valid files are of float32 or (one in four) float64 values. */
static void gen_npy(rng *r, uint32_t dim, size_t rows, int bad, bytes *b)
{
	int major = rnd(r, 4) == 0 ? 2 + (int)rnd(r, 2) : 1;
	size_t pre = major == 1 ? 10 : 12;
	int f8 = !bad && rnd(r, 4) == 0;
	bytes h = {0};
	npy_dict(r, &h, dim, rows, bad, f8);
	/* padded with spaces and a newline so that the data starts at a multiple of 64 */
	size_t total = pre + h.n + 1;
	size_t pad = (64 - total % 64) % 64;
	if (rnd(r, 8) == 0)
		pad = 0; /* numpy reads any length */
	for (size_t i = 0; i < pad; i++)
		by_byte(&h, ' ');
	by_byte(&h, '\n');
	uint8_t head[12] = {0x93, 'N', 'U', 'M', 'P', 'Y', (uint8_t)major, 0};
	if (major == 1) {
		head[8] = (uint8_t)h.n;
		head[9] = (uint8_t)(h.n >> 8);
	} else {
		put_le32(head + 8, (uint32_t)h.n);
	}
	by_add(b, head, pre);
	by_add(b, h.p, h.n);
	by_free(&h);
	for (size_t i = 0; i < rows * dim; i++) {
		uint8_t w[8];
		float v = gen_value(r);
		if (!f8) {
			put_le32(w, f2u(v));
			by_add(b, w, 4);
			continue;
		}
		/* a float64 that rounds to v, or to a neighbour of it */
		double d = rnd(r, 2) ? nextafter((double)v, 0.0) : (double)v;
		uint64_t u;
		memcpy(&u, &d, 8);
		put_le32(w, (uint32_t)u);
		put_le32(w + 4, (uint32_t)(u >> 32));
		by_add(b, w, 8);
	}
}

static void gen_file(rng *r, int kind, uint32_t dim, size_t rows, const model *m, bytes *b)
{
	if (is_text(kind))
		gen_text(r, kind, dim, rows, m, b);
	else if (kind == K_NPY)
		gen_npy(r, dim, rows, 0, b);
	else
		gen_texmex(r, kind, dim, rows, b);
}

/* ------------------------------------------------------------ mutations */

static const char *const odd_tokens[] = {
	"nan", "NaN", "-nan", "nan(123)", "inf", "-inf", "Infinity", "1e39", "-3.5e38", "3.4028236e38",
	"3.40282347e38", "1e-50", "0x1p-149", "0x1p128", "1e", "--1", "1,5", "0x", "+.5", ".", "1e+",
	"abc", "1.5.5", "0", "-0", "1e-45", "\xC3\xA9", "\"1\"", "[1]", "null", "true", "1 2",
	"\xff", "1\x00" "2",
};

static const char *const odd_bytes[] = {
	"\0", "\xff", "\xc0\x80", "\xed\xa0\x80", "\xf4\x90\x80\x80", "\xe2\x82", "\x80", "\n", "\r",
	"\t", ",", " ", "#", "\"", "{", "}", "[", "]", ":", "\\", "\\u", "\\ud800", "nan", "inf", "-",
	"e", ".", "/", "\x0b", "\x0c",
};

static size_t odd_len(const char *s)
{
	return s[0] ? strlen(s) : 1; /* "\0" is one NUL */
}

/* Start and length of line number i (0-based) and the number of lines. */
static size_t line_count(const bytes *b)
{
	size_t n = 0;
	for (size_t i = 0; i < b->n; i++)
		n += b->p[i] == '\n';
	return n + (b->n && b->p[b->n - 1] != '\n');
}

static void line_span(const bytes *b, size_t line, size_t *st, size_t *len)
{
	size_t i = 0;
	while (line && i < b->n)
		if (b->p[i++] == '\n')
			line--;
	size_t e = i;
	while (e < b->n && b->p[e] != '\n')
		e++;
	*st = i;
	*len = e - i;
}

static int tok_char(uint8_t c)
{
	return !strchr(" \t\r\n,[]{}:\"", c) && c;
}

/* A random token (a run of non-separator bytes): its span; 0 when none. */
static int pick_token(rng *r, const bytes *b, size_t *st, size_t *len)
{
	size_t ntok = 0;
	for (size_t i = 0; i < b->n; i++)
		if (tok_char(b->p[i]) && (i == 0 || !tok_char(b->p[i - 1])))
			ntok++;
	if (!ntok)
		return 0;
	size_t want = rnd(r, ntok);
	for (size_t i = 0; i < b->n; i++)
		if (tok_char(b->p[i]) && (i == 0 || !tok_char(b->p[i - 1])) && want-- == 0) {
			size_t e = i;
			while (e < b->n && tok_char(b->p[e]))
				e++;
			*st = i;
			*len = e - i;
			return 1;
		}
	return 0;
}

static void mutate(rng *r, int kind, uint32_t dim, bytes *b)
{
	int op = (int)rnd(r, 20);
	size_t n = b->n;
	by_reserve(b, 1); /* b->p is not NULL below, even for an empty file */
	if (op >= 10) {
		if (is_text(kind))
			goto text_ops;
		if (kind == K_NPY)
			goto npy_ops;
		goto bin_ops;
	}
	switch (op) {
	case 0: /* bytes set to random values */
	case 1:
		for (int k = (int)rnd(r, 4); n && k >= 0; k--)
			b->p[rnd(r, n)] = (uint8_t)rng_next(r);
		return;
	case 2: /* one bit flipped */
		if (n)
			b->p[rnd(r, n)] ^= (uint8_t)(1u << rnd(r, 8));
		return;
	case 3: /* truncated */
		b->n = rnd(r, n + 1);
		return;
	case 4: /* a range deleted */
		if (n) {
			size_t at = rnd(r, n), len = 1 + rnd(r, rnd(r, 2) ? 16 : n - at);
			by_erase(b, at, len < n - at ? len : n - at);
		}
		return;
	case 5: { /* a range duplicated */
		if (!n)
			return;
		size_t at = rnd(r, n), len = 1 + rnd(r, rnd(r, 2) ? 16 : n - at);
		if (len > n - at)
			len = n - at;
		uint8_t *copy = malloc(len);
		assert_non_null(copy);
		memcpy(copy, b->p + at, len);
		by_insert(b, rnd(r, n + 1), copy, len);
		free(copy);
		return;
	}
	case 6:
	case 7: { /* odd bytes inserted */
		const char *s = odd_bytes[rnd(r, sizeof odd_bytes / sizeof *odd_bytes)];
		by_insert(b, rnd(r, n + 1), s, odd_len(s));
		return;
	}
	case 8: /* emptied, or one byte left */
		b->n = rnd(r, 4) ? 0 : n ? 1 : 0;
		return;
	default: { /* random bytes inserted */
		uint8_t junk[8];
		size_t len = 1 + rnd(r, 8);
		for (size_t i = 0; i < len; i++)
			junk[i] = (uint8_t)rng_next(r);
		by_insert(b, rnd(r, n + 1), junk, len);
		return;
	}
	}

text_ops:
	{
		size_t lines = line_count(b), st, len, st2, len2;
		switch (op) {
		case 10: /* a line duplicated */
			if (lines) {
				line_span(b, rnd(r, lines), &st, &len);
				uint8_t *copy = malloc(len + 1);
				assert_non_null(copy);
				memcpy(copy, b->p + st, len);
				copy[len] = '\n';
				line_span(b, rnd(r, lines), &st2, &len2);
				by_insert(b, st2, copy, len + 1);
				free(copy);
			}
			return;
		case 11: /* a line deleted */
			if (lines) {
				line_span(b, rnd(r, lines), &st, &len);
				by_erase(b, st, len + (st + len < b->n));
			}
			return;
		case 12:
		case 13:
		case 14: { /* a token replaced by an odd one */
			if (!pick_token(r, b, &st, &len))
				return;
			const char *t = odd_tokens[rnd(r, sizeof odd_tokens / sizeof *odd_tokens)];
			size_t tl = t == odd_tokens[sizeof odd_tokens / sizeof *odd_tokens - 1] ? 3 : strlen(t);
			by_erase(b, st, len);
			by_insert(b, st, t, tl);
			return;
		}
		case 15: /* a token dropped (a dimension short) */
			if (pick_token(r, b, &st, &len)) {
				while (st > 0 && !tok_char(b->p[st - 1]) && b->p[st - 1] != '\n' &&
				       b->p[st - 1] != '"' && b->p[st - 1] != '[')
					st--, len++;
				by_erase(b, st, len);
			}
			return;
		case 16: /* a token repeated (a dimension long) */
			if (pick_token(r, b, &st, &len)) {
				bytes t = {0};
				by_adds(&t, kind == K_JSONL ? "," : kind == K_TSV ? "\t" : rnd(r, 2) ? " " : ",");
				by_add(&t, b->p + st, len);
				by_insert(b, st + len, t.p, t.n);
				by_free(&t);
			}
			return;
		case 17: { /* a long token: a number of 120-300 digits, or junk */
			if (!pick_token(r, b, &st, &len))
				return;
			bytes t = {0};
			size_t digits = 120 + rnd(r, 180);
			by_adds(&t, rnd(r, 2) ? "0." : "1");
			for (size_t i = 0; i < digits; i++)
				by_byte(&t, (uint8_t)(rnd(r, 4) ? '0' + rnd(r, 10) : '0'));
			if (rnd(r, 3) == 0)
				by_adds(&t, "e-300");
			if (rnd(r, 5) == 0)
				by_byte(&t, 'x');
			by_erase(b, st, len);
			by_insert(b, st, t.p, t.n);
			by_free(&t);
			return;
		}
		case 18: { /* blanks padding a line: long, or past the line bound */
			if (!lines)
				return;
			line_span(b, rnd(r, lines), &st, &len);
			size_t pad = rnd(r, 64) == 0 ? LINE_LIMIT + 1 - rnd(r, 2) * (len + 1) : 1 + rnd(r, 20000);
			uint8_t *sp = malloc(pad);
			assert_non_null(sp);
			memset(sp, kind == K_TSV || kind == K_CSV ? ' ' : "\t "[rnd(r, 2)], pad);
			size_t at = st;
			while (at < st + len && tok_char(b->p[at]))
				at++;
			by_insert(b, rnd(r, 2) ? at : st + len, sp, pad);
			free(sp);
			return;
		}
		default: /* JSON structure broken, or text swapped between lines */
			if (kind == K_JSONL && rnd(r, 2)) {
				static const char *const js[] = {"{", "}", "[", "]", ":", ",", "\""};
				static const char *const names[] = {"\"key\"", "\"vector\"", "\"payload\""};
				switch (rnd(r, 4)) {
				case 0: /* a structural character deleted */
					for (int tries = 0; tries < 50 && b->n; tries++) {
						size_t at = rnd(r, b->n);
						if (strchr("{}[]:,\"", b->p[at])) {
							by_erase(b, at, 1);
							break;
						}
					}
					return;
				case 1: {
					const char *s = js[rnd(r, 7)];
					by_insert(b, rnd(r, b->n + 1), s, strlen(s));
					return;
				}
				case 2: { /* a member name spelt wrong, or a number for its value */
					const char *nm = names[rnd(r, 3)];
					uint8_t *at = memmem(b->p, b->n, nm, strlen(nm));
					if (!at)
						return;
					size_t pos = (size_t)(at - b->p);
					if (rnd(r, 2)) {
						b->p[pos + 2] = 'X';
						return;
					}
					uint8_t *colon = memchr(b->p + pos, ':', b->n - pos);
					if (colon)
						by_insert(b, (size_t)(colon - b->p) + 1, " 5, \"x\":", 8);
					return;
				}
				default: { /* a payload nested deeply */
					size_t depth = rnd(r, 2) ? 240 + rnd(r, 40) : 1 + rnd(r, 3000);
					bytes t = {0};
					by_adds(&t, "\"payload\": ");
					for (size_t i = 0; i < depth; i++)
						by_byte(&t, '[');
					for (size_t i = 0; i < depth; i++)
						by_byte(&t, ']');
					by_adds(&t, ", ");
					uint8_t *at = memchr(b->p, '{', b->n);
					if (at)
						by_insert(b, (size_t)(at - b->p) + 1, t.p, t.n);
					by_free(&t);
					return;
				}
				}
			}
			if (lines >= 2) { /* tails of two lines swapped */
				size_t a = rnd(r, lines), c = rnd(r, lines);
				line_span(b, a < c ? a : c, &st, &len);
				line_span(b, a < c ? c : a, &st2, &len2);
				if (st == st2 || !len || !len2)
					return;
				size_t ca = len / 2, cc = len2 / 2;
				bytes t = {0};
				by_add(&t, b->p + st2 + cc, len2 - cc);
				uint8_t *tail = malloc(len - ca + 1);
				assert_non_null(tail);
				memcpy(tail, b->p + st + ca, len - ca);
				by_erase(b, st2 + cc, len2 - cc);
				by_insert(b, st2 + cc, tail, len - ca);
				by_erase(b, st + ca, len - ca);
				by_insert(b, st + ca, t.p, t.n);
				free(tail);
				by_free(&t);
			}
			return;
		}
	}

bin_ops:
	{
		/* rows of 4 + dim values: the dim field, or (fvecs) a value made odd */
		size_t stride = 4 + (kind == K_FVECS ? 4 : 1) * (size_t)dim, rows = n / stride;
		if (!rows)
			return;
		size_t row = rnd(r, rows);
		if (op < 15 || kind == K_BVECS) {
			static const uint32_t dims[] = {0, 0xffffffffu, 1, 4096, 4097, 0x7fffffffu, 0x80000000u, 65536};
			uint32_t d = rnd(r, 3) == 0 ? dims[rnd(r, 8)] : dim + (rnd(r, 2) ? 1u : (uint32_t)-1);
			put_le32(b->p + row * stride, d);
		} else {
			static const uint32_t odd[] = {0x7fc00000u, 0xffc00000u, 0x7f800000u, 0xff800000u,
						       0x7f800001u, 0x00000001u, 0x80000000u, 0x7f7fffffu};
			put_le32(b->p + row * stride + 4 + 4 * rnd(r, dim), odd[rnd(r, 8)]);
		}
		return;
	}

npy_ops:
	{
		/* the header of another shape or type, or an odd value in the data */
		if (n < 10 || memcmp(b->p, "\x93NUMPY", 6))
			return;
		size_t pre = b->p[6] == 1 ? 10 : 12;
		size_t hl = b->p[6] == 1 ? (size_t)b->p[8] | (size_t)b->p[9] << 8 : get_le32(b->p + 8);
		if (pre + hl > n)
			return;
		size_t dn = n - pre - hl;
		if (op < 16) {
			bytes nb = {0};
			gen_npy(r, dim, dn / (4 * dim), 1 + (int)rnd(r, 15), &nb);
			/* keep the data as it was */
			size_t npre = nb.p[6] == 1 ? 10 : 12;
			size_t nhl = nb.p[6] == 1 ? (size_t)nb.p[8] | (size_t)nb.p[9] << 8 : get_le32(nb.p + 8);
			nb.n = npre + nhl;
			by_add(&nb, b->p + pre + hl, dn);
			by_free(b);
			*b = nb;
		} else if (op < 18) {
			static const uint8_t vers[] = {0, 1, 2, 3, 4, 0xff};
			b->p[rnd(r, 2) ? 6 : 7] = vers[rnd(r, 6)];
		} else if (op < 19) { /* the header length field */
			uint32_t v = rnd(r, 2) ? (uint32_t)hl + (uint32_t)rnd(r, 9) - 4 : (uint32_t)rng_next(r);
			if (b->p[6] == 1) {
				b->p[8] = (uint8_t)v;
				b->p[9] = (uint8_t)(v >> 8);
			} else {
				put_le32(b->p + 8, v);
			}
		} else if (dn >= 4) {
			static const uint32_t odd[] = {0x7fc00000u, 0xff800000u, 0x7f800000u, 0x00000001u};
			put_le32(b->p + pre + hl + 4 * rnd(r, dn / 4), odd[rnd(r, 4)]);
		}
		return;
	}
}

/* ------------------------------------------------------------ feeding files */

/* Write the file in pieces as write() calls would hand them over, then
 * close it (commit).  Returns 0 when every write and the commit succeeded,
 * else the first error. */
static int feed(fs_daemon *dm, const char *name, const uint8_t *p, size_t n, rng *r)
{
	int fmt = fs_ingest_format_of(name);
	assert_true(fmt >= 0);
	ingest *in = fs_ingest_new(dm, name, fmt, 1);
	assert_non_null(in);
	int policy = (int)rnd(r, 6);
	if (policy == 0 && n > 4096)
		policy = 2; /* one byte a write only for small files */
	if (policy == 1 && n > 65536)
		policy = 3;
	size_t off = 0;
	int rc = 0;
	while (off < n) {
		size_t left = n - off, c;
		switch (policy) {
		case 0: c = 1; break;
		case 1: c = 1 + rnd(r, 7); break;
		case 2: c = 1 + rnd(r, 4096); break;
		case 3: c = 1 + rnd(r, left); break;
		case 4: c = rnd(r, 2) ? 1 + rnd(r, 3) : 1 + rnd(r, left); break;
		default: c = left; break;
		}
		if (c > left)
			c = left;
		rc = wr(in, (const char *)p + off, c);
		off += c;
		if (rc)
			break;
	}
	assert_int_equal(fs_ingest_size(in), off);
	if (rc) {
		/* the file is dead: it has left ingest/, more writes and the close
		 * fail with the errno of its failure */
		assert_true(fs_ingest_done(in));
		assert_false(fs_ingest_pending(in));
		if (rnd(r, 2))
			assert_int_equal(wr(in, "1", 1), rc);
		assert_int_equal(fs_ingest_commit(in), rc);
	} else {
		rc = fs_ingest_commit(in);
		if (rc == 0) {
			/* a second close with nothing written commits nothing */
			assert_false(fs_ingest_pending(in));
			assert_int_equal(fs_ingest_commit(in), 0);
			if (n)
				assert_true(fs_ingest_done(in));
		} else {
			assert_true(fs_ingest_done(in));
			assert_int_equal(fs_ingest_commit(in), rc);
		}
	}
	fs_ingest_free(in);
	return rc;
}

/* ------------------------------------------------------------ one case */

typedef struct run {
	fs_daemon *dm;
	model md;
	rng r;
	int cosine;
	unsigned cases, committed, rejected, open;
	unsigned rows;
} run;

static void run_init(run *t, fixture *f, uint32_t dim, vecfs_metric metric, uint64_t seed)
{
	memset(t, 0, sizeof *t);
	vecfs *v = f->v ? f->v : fx_open(f, NULL);
	set_config(v, dim, metric);
	t->cosine = metric == VECFS_COSINE;
	t->dm = daemon_for(f, v);
	t->md.dim = dim;
	t->md.next_key = stats(v).next_key;
	t->r.s = seed;
}

static void dump(const char *name, const uint8_t *p, size_t n)
{
	char line[200];
	size_t show = n < 400 ? n : 400;
	print_message("file %s, %zu bytes%s:\n", name, n, n > show ? " (the first 400)" : "");
	for (size_t i = 0; i < show; i += 32) {
		size_t l = 0;
		for (size_t j = i; j < i + 32 && j < show; j++)
			l += (size_t)snprintf(line + l, sizeof line - l, "%02x", p[j]);
		print_message("  %s\n", line);
	}
	print_message("  as text: \"");
	for (size_t i = 0; i < show; i++)
		print_message(p[i] >= 0x20 && p[i] < 0x7f && p[i] != '\\' ? "%c" : "\\x%02x", p[i]);
	print_message("\"\n");
}

#define CASE_FAIL(...)                                                                   \
	do {                                                                             \
		print_message(__VA_ARGS__);                                              \
		print_message("\n  reference: %s (where %llu%s), ingest rc %d, last error: %s\n", \
			      o.verdict == V_ACCEPT ? "accept" : o.verdict == V_REJECT ? "reject" : "either", \
			      (unsigned long long)o.where, o.where_known ? "" : ", not known", rc, \
			      err_count != e0 ? err_last : "(none)");                    \
		dump(name, p, n);                                                        \
		fail();                                                                  \
	} while (0)

/* Feed one file and check the store against the reference reading of it.
 * must_accept: the file was generated valid. */
static void run_file(run *t, const char *name, int kind, const uint8_t *p, size_t n, int must_accept)
{
	vecfs *v = t->dm->store;
	oracle o;
	reference(&o, kind, p, n, t->md.dim, t->cosine);
	vecfs_stats before = stats(v);
	unsigned e0 = err_count;
	int rc = 0;
	char why[600];
	if (must_accept && o.verdict != V_ACCEPT)
		CASE_FAIL("generated file not valid to the reference");
	if (before.records != t->md.n || before.next_key != t->md.next_key || before.dim != t->md.dim)
		CASE_FAIL("store and model differ before the file: %llu records (model %zu)",
			  (unsigned long long)before.records, t->md.n);
	rc = feed(t->dm, name, p, n, &t->r);
	t->cases++;
	if (o.verdict == V_EITHER)
		t->open++;
	if (rc == 0) {
		if (o.verdict == V_REJECT)
			CASE_FAIL("%s: committed, but the file is not valid", name);
		if (err_count != e0)
			CASE_FAIL("%s: committed with an errors line", name);
		t->committed++;
		t->rows += (unsigned)o.n;
		if (!t->md.dim && o.n)
			t->md.dim = o.dim;
		for (size_t i = 0; i < o.n; i++) {
			char kb[32];
			const char *k = o.rows[i].key;
			size_t kl = o.rows[i].klen;
			if (!k) {
				kl = (size_t)snprintf(kb, sizeof kb, "%llu", (unsigned long long)t->md.next_key++);
				k = kb;
			}
			model_put(&t->md, k, kl, o.rows[i].vec, o.rows[i].pay, o.rows[i].plen);
		}
		vecfs_stats after = stats(v);
		if (after.records != t->md.n || after.next_key != t->md.next_key || after.dim != t->md.dim)
			CASE_FAIL("%s: after the commit %llu records, next key %llu, dim %u; expected %zu, %llu, %u",
				  name, (unsigned long long)after.records, (unsigned long long)after.next_key,
				  after.dim, t->md.n, (unsigned long long)t->md.next_key, t->md.dim);
		/* every row of the file, as the last row for its key left it */
		uint64_t assigned = before.next_key;
		for (size_t i = 0; i < o.n; i++) {
			char kb[32];
			const char *k = o.rows[i].key;
			size_t kl = o.rows[i].klen;
			if (!k) {
				kl = (size_t)snprintf(kb, sizeof kb, "%llu", (unsigned long long)assigned++);
				k = kb;
			}
			const mrec *e = model_find(&t->md, k, kl);
			assert_non_null(e);
			if (record_differs(v, e, t->md.dim, why, sizeof why))
				CASE_FAIL("%s: row %zu: %s", name, i + 1, why);
		}
	} else {
		/* nesting past the parser's depth is a limit: E2BIG */
		if (rc != -EINVAL && !(rc == -E2BIG && strstr(err_last, "nested too deeply")))
			CASE_FAIL("%s: failed with %d, expected -EINVAL", name, rc);
		if (o.verdict == V_ACCEPT)
			CASE_FAIL("%s: rejected, but the file is valid", name);
		t->rejected++;
		/* one errors line, naming the file and (where known) the line or row */
		if (err_count != e0 + 1)
			CASE_FAIL("%s: %u errors lines, expected 1", name, err_count - e0);
		char head[300];
		snprintf(head, sizeof head, "ingest/%s: ", name);
		const char *tail = "nothing of the file was committed";
		size_t el = strlen(err_last), tl = strlen(tail);
		if (strncmp(err_last, head, strlen(head)) || el < tl || strcmp(err_last + el - tl, tail))
			CASE_FAIL("%s: errors line does not name the file: %s", name, err_last);
		if (o.where_known) {
			char at[64];
			if (o.where) {
				snprintf(at, sizeof at, ": %s %llu: ", is_text(kind) ? "line" : "row",
					 (unsigned long long)o.where);
				if (!strstr(err_last, at))
					CASE_FAIL("%s: errors line does not say '%s'", name, at);
			} else if (strstr(err_last, ": row ") || strstr(err_last, ": line ")) {
				CASE_FAIL("%s: errors line names a row for a fault of the file", name);
			}
		}
		/* the store is as it was: counts, dim, and the rows the file had so far */
		vecfs_stats after = stats(v);
		if (after.records != before.records || after.next_key != before.next_key ||
		    after.dim != before.dim || after.ingest_rows != before.ingest_rows)
			CASE_FAIL("%s: rejected, but the store changed: %llu records (was %llu), next key %llu (was %llu), dim %u (was %u)",
				  name, (unsigned long long)after.records, (unsigned long long)before.records,
				  (unsigned long long)after.next_key, (unsigned long long)before.next_key,
				  after.dim, before.dim);
		for (size_t i = 0; i < o.n && i < 16; i++) {
			const orow *w = &o.rows[i];
			if (!w->key)
				continue;
			const mrec *e = model_find(&t->md, w->key, w->klen);
			if (e) {
				if (record_differs(v, e, t->md.dim, why, sizeof why))
					CASE_FAIL("%s: rejected, but row %zu changed the store: %s", name, i + 1, why);
			} else if (key_verdict(w->key, w->klen) == 0) {
				uint32_t d;
				int g = vecfs_get(v, w->key, w->klen, got_vec, VECFS_DIM_MAX, &d, NULL, 0, NULL);
				if (g != -ENOENT)
					CASE_FAIL("%s: rejected, but row %zu's key is in the store (%d)", name, i + 1, g);
			}
		}
	}
	for (int i = 0; i < 3 && t->md.n; i++)
		if (record_differs(v, &t->md.r[rnd(&t->r, t->md.n)], t->md.dim, why, sizeof why))
			CASE_FAIL("%s: an earlier record changed: %s", name, why);
	or_free(&o);
}

/* ------------------------------------------------------------ tests */

static void test_format_names(void **state)
{
	(void)state;
	int csv = fs_ingest_format_of("a.csv"), tsv = fs_ingest_format_of("a.tsv"), txt = fs_ingest_format_of("a.txt");
	int jsonl = fs_ingest_format_of("a.jsonl"), fvecs = fs_ingest_format_of("x.fvecs");
	int bvecs = fs_ingest_format_of("x.bvecs"), npy = fs_ingest_format_of("x.npy");
	int all[] = {csv, tsv, txt, jsonl, fvecs, bvecs, npy};
	for (int i = 0; i < 7; i++) {
		assert_true(all[i] >= 0);
		for (int j = 0; j < i; j++)
			assert_int_not_equal(all[i], all[j]);
	}
	assert_int_equal(fs_ingest_format_of("a.ndjson"), jsonl);
	assert_int_equal(fs_ingest_format_of("fruit.more.csv"), csv);
	assert_int_equal(fs_ingest_format_of("x.npy.npy"), npy);
	static const char *const bad[] = {".csv", "a.CSV", "a.csv.tmp", "a.json", "a.fvec", "a.ivecs",
					  "npy", "a.npz", "a", "", "a.csv ", ".npy", "a.tsv~"};
	for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
		assert_int_equal(fs_ingest_format_of(bad[i]), -1);
}

/* Valid files of every format, fed in pieces of every size: each commits
 * exactly its rows. */
static void test_valid_files(void **state)
{
	fixture *f = *state;
	run t;
	fx_open(f, NULL);
	run_init(&t, f, 16, VECFS_L2, 0x5eed0001);
	static const char *const ends[] = {".csv", ".tsv", ".txt", ".jsonl", ".ndjson", ".fvecs", ".bvecs", ".npy"};
	static const int kinds[] = {K_CSV, K_TSV, K_TXT, K_JSONL, K_JSONL, K_FVECS, K_BVECS, K_NPY};
	for (int round = 0; round < 24; round++)
		for (int e = 0; e < 8; e++) {
			bytes b = {0};
			char name[64];
			/* mostly small; one large file per format (past the spool's 1 MiB buffer) */
			size_t rows = round == 0 ? 12000 : round == 1 ? 0 : rnd(&t.r, 4) ? rnd(&t.r, 12) : rnd(&t.r, 300);
			gen_file(&t.r, kinds[e], 16, rows, &t.md, &b);
			snprintf(name, sizeof name, "valid-%d%s", round, ends[e]);
			run_file(&t, name, kinds[e], b.p, b.n, 1);
			by_free(&b);
		}
	assert_int_equal(t.rejected, 0);
	check_whole_store(t.dm->store, &t.md);
	model_free(&t.md);
}

/* With no dim set the first committed row fixes it; a rejected file fixes
 * nothing. */
static void test_first_file_fixes_dim(void **state)
{
	fixture *f = *state;
	run t;
	fx_open(f, NULL);
	run_init(&t, f, 0, VECFS_L2, 0x5eed0002);
	/* rows of two dimensions in one file: rejected at the second, dim stays unset */
	const char *mixed = "a 1 2 3\nb 1 2 3\nc 1 2\n";
	run_file(&t, "mixed.txt", K_TXT, (const uint8_t *)mixed, strlen(mixed), 0);
	assert_int_equal(t.rejected, 1);
	assert_non_null(strstr(err_last, "line 3: 2 numbers, expected 3 (the dimension of the file's first row)"));
	assert_int_equal(stats(t.dm->store).dim, 0);
	bytes b = {0};
	uint8_t w[4];
	put_le32(w, 5);
	by_add(&b, w, 4);
	by_add(&b, "\x01\x02\x03\x04\x05", 5);
	put_le32(w, 4);
	by_add(&b, w, 4);
	by_add(&b, "\x01\x02\x03\x04", 4);
	run_file(&t, "mixed.bvecs", K_BVECS, b.p, b.n, 0);
	assert_non_null(strstr(err_last, "row 2: dimension 4, expected 5 (the dimension of the file's first row)"));
	assert_int_equal(stats(t.dm->store).dim, 0);
	/* an empty file and one of blank lines and comments commit nothing */
	run_file(&t, "empty.npy", K_NPY, (const uint8_t *)"", 0, 1);
	run_file(&t, "blank.csv", K_CSV, (const uint8_t *)"\n\r\n# c\n  \n", 10, 1);
	assert_int_equal(stats(t.dm->store).dim, 0);
	/* the first valid file fixes dim 7 */
	b.n = 0;
	gen_npy(&t.r, 7, 3, 0, &b);
	run_file(&t, "first.npy", K_NPY, b.p, b.n, 1);
	assert_int_equal(stats(t.dm->store).dim, 7);
	assert_int_equal(t.md.dim, 7);
	/* then a file of another dimension is rejected with the store's dim named */
	b.n = 0;
	gen_texmex(&t.r, K_FVECS, 8, 2, &b);
	run_file(&t, "eight.fvecs", K_FVECS, b.p, b.n, 0);
	assert_non_null(strstr(err_last, "row 1: "));
	assert_non_null(strstr(err_last, "the store's dim"));
	const char *six = "{\"key\": \"six\", \"vector\": [1, 2, 3, 4, 5, 6]}\n";
	run_file(&t, "six.jsonl", K_JSONL, (const uint8_t *)six, strlen(six), 0);
	assert_non_null(strstr(err_last, "line 1: 6 numbers, expected 7 (the store's dim)"));
	b.n = 0;
	gen_file(&t.r, K_CSV, 7, 40, &t.md, &b);
	run_file(&t, "seven.csv", K_CSV, b.p, b.n, 1);
	by_free(&b);
	assert_int_equal(t.committed, 4);
	check_whole_store(t.dm->store, &t.md);
	model_free(&t.md);
}

/* In a .csv/.tsv/.txt file a key given twice fails the file, naming both
 * lines; rows of numbers only (no key column) are told to use .npy or
 * .fvecs.  A .jsonl file may give a key twice: its last row wins. */
static void test_dup_keys(void **state)
{
	fixture *f = *state;
	run t;
	fx_open(f, NULL);
	run_init(&t, f, 0, VECFS_L2, 0x5eed0009);
	const char *once = "a,1,2,3\nb,4,5,6\n";
	run_file(&t, "once.csv", K_CSV, (const uint8_t *)once, strlen(once), 1);
	const char *twice = "x,1,2,3\n# a comment\ny,1,1,1\n\nx,7,8,9\nx,1,1,1\n";
	run_file(&t, "twice.csv", K_CSV, (const uint8_t *)twice, strlen(twice), 0);
	assert_int_equal(t.rejected, 1);
	assert_non_null(strstr(err_last, "ingest/twice.csv: line 5: key 'x' given twice, on lines 1 and 5"));
	assert_null(strstr(err_last, "no key column"));
	/* a quoted key is the same key as its plain form */
	const char *quoted = "\"q r\"\t1\t2\t3\n\"q r\"\t3\t2\t1\n";
	run_file(&t, "twice.tsv", K_TSV, (const uint8_t *)quoted, strlen(quoted), 0);
	assert_non_null(strstr(err_last, "line 2: key 'q r' given twice, on lines 1 and 2"));
	/* what numpy.savetxt writes: numbers only, so the first became a key */
	const char *numbers = "1.0 2.0 3.0 4.0\n5.0 6.0 7.0 8.0\n1.0 0.5 0.25 0.125\n";
	run_file(&t, "saved.txt", K_TXT, (const uint8_t *)numbers, strlen(numbers), 0);
	assert_non_null(strstr(err_last, "line 3: key '1.0' given twice, on lines 1 and 3"));
	assert_non_null(strstr(err_last, "no key column"));
	assert_non_null(strstr(err_last, ".npy or .fvecs"));
	assert_int_equal(t.rejected, 3);
	const char *jl = "{\"key\": \"j\", \"vector\": [1, 2, 3]}\n{\"key\": \"j\", \"vector\": [3, 2, 1]}\n";
	run_file(&t, "twice.jsonl", K_JSONL, (const uint8_t *)jl, strlen(jl), 1);
	float vec[3];
	uint32_t d = 0;
	assert_int_equal(vecfs_get(t.dm->store, "j", 1, vec, 3, &d, NULL, 0, NULL), 0);
	assert_true(vec[0] == 3 && vec[1] == 2 && vec[2] == 1);
	check_whole_store(t.dm->store, &t.md);
	model_free(&t.md);
}

/* The errors line of a bad key names it, control characters escaped (as
 * errors escapes them), bytes that are not UTF-8 and NUL as \xHH, a long
 * one cut; a first line of text that reads as a header says it may be one. */
static void test_error_lines(void **state)
{
	fixture *f = *state;
	run t;
	fx_open(f, NULL);
	run_init(&t, f, 3, VECFS_L2, 0x5eed0021);
	static const struct {
		const char *name;
		int kind;
		const char *text;
		size_t len;
		const char *want;
	} cases[] = {
		{"slash.csv", K_CSV, "ok,1,2,3\na/b,1,2,3\n", 0, "line 2: bad key 'a/b' (it holds '/'): keys are"},
		{"dot.tsv", K_TSV, "..\t1\t2\t3\n", 0, "line 1: bad key '..' (. and .. are not keys): keys are"},
		{"nl.jsonl", K_JSONL, "{\"key\": \"a\\nb\", \"vector\": [1, 2, 3]}\n", 0,
		 "line 1: bad key 'a\\nb' (it holds a newline): keys are"},
		{"nul.jsonl", K_JSONL, "{\"key\": \"a\\u0000b\", \"vector\": [1, 2, 3]}\n", 0,
		 "line 1: bad key 'a\\x00b' (it holds NUL): keys are"},
		{"latin1.csv", K_CSV, "caf\xe9,1,2,3\n", 0, "line 1: bad key 'caf\\xe9' (not UTF-8): keys are"},
		{"header.csv", K_CSV, "id,x,y,z\na,1,2,3\n", 0,
		 "line 1: value 1 'x' is not a number (a header? remove it or start it with #)"},
		{"header.txt", K_TXT, "# made by hand\n\nkey x y z\na 1 2 3\n", 0,
		 "line 3: value 1 'x' is not a number (a header? remove it or start it with #)"},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		size_t n = cases[i].len ? cases[i].len : strlen(cases[i].text);
		run_file(&t, cases[i].name, cases[i].kind, (const uint8_t *)cases[i].text, n, 0);
		if (!strstr(err_last, cases[i].want))
			fail_msg("%s: errors line '%s', wanted '%s'", cases[i].name, err_last, cases[i].want);
		assert_non_null(strstr(err_last, cases[i].name));
	}
	/* a word among numbers after a good row is no header */
	const char *later = "a,1,2,3\nb,x,2,3\n";
	run_file(&t, "later.csv", K_CSV, (const uint8_t *)later, strlen(later), 0);
	assert_non_null(strstr(err_last, "line 2: value 1 'x' is not a number"));
	assert_null(strstr(err_last, "header"));
	/* a long key: cut, its length given */
	char longkey[400];
	memset(longkey, 'k', 300);
	snprintf(longkey + 300, sizeof longkey - 300, ",1,2,3\n");
	run_file(&t, "long.csv", K_CSV, (const uint8_t *)longkey, strlen(longkey), 0);
	assert_non_null(strstr(err_last, "line 1: bad key 'kkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkk"));
	assert_non_null(strstr(err_last, "...' (300 bytes): keys are"));
	assert_null(strstr(err_last, "kkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkk"));
	check_whole_store(t.dm->store, &t.md);
	model_free(&t.md);
}

/* Under cosine a zero vector is rejected, the whole file with it. */
static void test_cosine_zero_vector(void **state)
{
	fixture *f = *state;
	run t;
	fx_open(f, NULL);
	run_init(&t, f, 3, VECFS_COSINE, 0x5eed0003);
	const char *good = "a,1,0,0\nb,0,-0.5,0\n";
	const char *bad = "c,1,1,1\nd,0,-0,0\ne,1,2,3\n";
	run_file(&t, "good.csv", K_CSV, (const uint8_t *)good, strlen(good), 1);
	run_file(&t, "zero.csv", K_CSV, (const uint8_t *)bad, strlen(bad), 0);
	assert_non_null(strstr(err_last, "line 2: zero vector under the cosine metric"));
	bytes b = {0};
	uint8_t w[4];
	put_le32(w, 3);
	by_add(&b, w, 4);
	by_add(&b, "\x00\x00\x00", 3);
	run_file(&t, "zero.bvecs", K_BVECS, b.p, b.n, 0);
	by_free(&b);
	assert_int_equal(t.committed, 1);
	assert_int_equal(t.rejected, 2);
	assert_int_equal(vecfs_get(t.dm->store, "c", 1, got_vec, VECFS_DIM_MAX, &(uint32_t){0}, NULL, 0, NULL),
			 -ENOENT);
	check_whole_store(t.dm->store, &t.md);
	model_free(&t.md);
}

/* A dead file refuses more; a cancelled one commits nothing; a close with
 * nothing written since the last commits nothing; a close after more
 * writes commits just those. */
static void test_file_states(void **state)
{
	fixture *f = *state;
	run t;
	fx_open(f, NULL);
	run_init(&t, f, 2, VECFS_L2, 0x5eed0004);
	vecfs *v = t.dm->store;
	int csv = fs_ingest_format_of("s.csv");

	ingest *in = fs_ingest_new(t.dm, "s.csv", csv, 1);
	assert_non_null(in);
	assert_int_equal(fs_ingest_commit(in), 0); /* nothing written */
	assert_false(fs_ingest_done(in));
	assert_int_equal(wr(in, "a,1,2\nb,3", 9), 0);
	assert_true(fs_ingest_pending(in));
	assert_int_equal(wr(in, ",4\n", 3), 0);
	assert_int_equal(stats(v).records, 0); /* nothing before the close */
	assert_int_equal(fs_ingest_commit(in), 0);
	assert_int_equal(stats(v).records, 2);
	assert_int_equal(fs_ingest_commit(in), 0);
	/* written again through a descriptor still open: the next close commits that */
	assert_int_equal(wr(in, "c,5,6\n", 6), 0);
	assert_int_equal(fs_ingest_commit(in), 0);
	assert_int_equal(stats(v).records, 3);
	/* and a bad row after a commit leaves the committed rows alone */
	unsigned e0 = err_count;
	assert_int_equal(wr(in, "d,7,8\ne,9\n", 10), -EINVAL);
	assert_int_equal(err_count, e0 + 1);
	assert_non_null(strstr(err_last, "committed 3 rows"));
	assert_int_equal(wr(in, "f,1,1\n", 6), -EINVAL);
	assert_int_equal(fs_ingest_commit(in), -EINVAL);
	assert_int_equal(stats(v).records, 3);
	assert_int_equal(vecfs_get(v, "d", 1, got_vec, VECFS_DIM_MAX, &(uint32_t){0}, NULL, 0, NULL), -ENOENT);
	fs_ingest_free(in);

	/* unlinked while open: nothing is committed, writes are swallowed */
	in = fs_ingest_new(t.dm, "gone.fvecs", fs_ingest_format_of("gone.fvecs"), 1);
	assert_non_null(in);
	uint8_t row[12];
	put_le32(row, 2);
	put_le32(row + 4, f2u(1.0f));
	put_le32(row + 8, f2u(2.0f));
	assert_int_equal(wr(in, (const char *)row, 12), 0);
	fs_ingest_cancel(in);
	assert_true(fs_ingest_done(in));
	assert_int_equal(wr(in, (const char *)row, 12), 0);
	assert_int_equal(fs_ingest_commit(in), 0);
	assert_int_equal(stats(v).records, 3);
	assert_int_equal(stats(v).next_key, 0);
	fs_ingest_free(in);

	/* freed without a close: nothing committed, nothing leaked */
	in = fs_ingest_new(t.dm, "dropped.npy", fs_ingest_format_of("dropped.npy"), 1);
	assert_non_null(in);
	bytes b = {0};
	gen_npy(&t.r, 2, 5, 0, &b);
	assert_int_equal(wr(in, (const char *)b.p, b.n), 0);
	fs_ingest_free(in);
	by_free(&b);
	assert_int_equal(stats(v).records, 3);
	model_free(&t.md);
}

/* The bounds: line length, payload size, nesting, dimension. */
static void test_bounds(void **state)
{
	fixture *f = *state;
	run t;
	fx_open(f, NULL);
	run_init(&t, f, 3, VECFS_L2, 0x5eed0005);
	bytes b = {0};

	/* a line of exactly 4 MiB is read; one byte more is refused */
	by_adds(&b, "long");
	while (b.n < LINE_LIMIT - 6)
		by_byte(&b, ' ');
	by_adds(&b, "1 2 3");
	while (b.n < LINE_LIMIT)
		by_byte(&b, ' ');
	by_byte(&b, '\n');
	run_file(&t, "long.txt", K_TXT, b.p, b.n, 1);
	b.p[0] = 'L';
	by_insert(&b, 4, " ", 1);
	run_file(&t, "longer.txt", K_TXT, b.p, b.n, 0);
	assert_non_null(strstr(err_last, "line 1: longer than"));

	/* a payload of 64 KiB is kept; one byte more is refused */
	b.n = 0;
	by_adds(&b, "{\"key\": \"p\", \"vector\": [1, 2, 3], \"payload\": \"");
	for (size_t i = 0; i < VECFS_PAYLOAD_MAX - 2; i++)
		by_byte(&b, (uint8_t)('a' + i % 26));
	by_adds(&b, "\"}\n");
	run_file(&t, "pay.jsonl", K_JSONL, b.p, b.n, 1);
	by_insert(&b, b.n - 3, "z", 1);
	b.p[9] = 'q';
	run_file(&t, "paybig.jsonl", K_JSONL, b.p, b.n, 0);
	assert_non_null(strstr(err_last, "payload of 65537 bytes"));

	/* nesting: 200 levels are a payload, 100000 are refused with E2BIG (no
	 * stack overflow) */
	b.n = 0;
	by_adds(&b, "{\"key\": \"deep\", \"vector\": [1, 2, 3], \"payload\": ");
	for (int i = 0; i < 100; i++)
		by_adds(&b, "{\"a\":[");
	for (int i = 0; i < 100; i++)
		by_adds(&b, "]}");
	by_adds(&b, "}\n");
	run_file(&t, "deep.jsonl", K_JSONL, b.p, b.n, 1);
	b.n = 0;
	by_adds(&b, "{\"key\": \"deeper\", \"vector\": [1, 2, 3], \"x\": ");
	for (int i = 0; i < 100000; i++)
		by_byte(&b, '[');
	by_adds(&b, "\n");
	/* a limit, not a malformed line: E2BIG */
	unsigned e0 = err_count;
	assert_int_equal(feed(t.dm, "deeper.jsonl", b.p, b.n, &t.r), -E2BIG);
	assert_int_equal(err_count, e0 + 1);
	assert_non_null(strstr(err_last, "nested too deeply"));

	/* a number of 128 bytes and more is read as strtof reads it */
	b.n = 0;
	by_adds(&b, "tok,1.");
	for (int i = 0; i < 300; i++)
		by_byte(&b, '0');
	by_adds(&b, ",2,3\n");
	run_file(&t, "tok.csv", K_CSV, b.p, b.n, 1);

	/* keys and JSON strings are UTF-8 strictly: an overlong form, a
	 * surrogate, a code point past U+10FFFF, raw bytes in a payload */
	static const char *const not_utf8[] = {
		"a\xC0\x80" "b,1,2,3\n", "c\xED\xA0\x80,1,2,3\n", "d\xF4\x90\x80\x80,1,2,3\n",
	};
	for (size_t i = 0; i < sizeof not_utf8 / sizeof *not_utf8; i++) {
		run_file(&t, "utf8.csv", K_CSV, (const uint8_t *)not_utf8[i], strlen(not_utf8[i]), 0);
		assert_non_null(strstr(err_last, "bad key"));
	}
	static const char pay[] = "{\"key\": \"p8\", \"vector\": [1, 2, 3], \"payload\": \"\xFF\xFE\"}\n";
	run_file(&t, "pay8.jsonl", K_JSONL, (const uint8_t *)pay, strlen(pay), 0);
	assert_non_null(strstr(err_last, "not valid UTF-8"));
	static const char good8[] = "\xC3\xA9\xE2\x82\xAC\xF0\x9D\x84\x9E,1,2,3\n";
	run_file(&t, "good8.csv", K_CSV, (const uint8_t *)good8, strlen(good8), 1);

	/* dim fields past VECFS_DIM_MAX */
	b.n = 0;
	uint8_t w[4];
	put_le32(w, VECFS_DIM_MAX + 1);
	by_add(&b, w, 4);
	run_file(&t, "wide.fvecs", K_FVECS, b.p, b.n, 0);
	assert_non_null(strstr(err_last, "row 1: dimension 16385 is out of range 1..16384"));
	by_free(&b);
	check_whole_store(t.dm->store, &t.md);
	model_free(&t.md);

	/* a row of VECFS_DIM_MAX numbers is one; one more is refused */
	fx_close(f);
	char sub[] = "wide";
	fx_open(f, sub);
	run_init(&t, f, 0, VECFS_L2, 0x5eed0006);
	char dir[PATH_MAX];
	snprintf(dir, sizeof dir, "%s/%s", f->dir, sub);
	t.dm->store_dir = dir;
	bytes c = {0};
	by_adds(&c, "w");
	for (int i = 0; i < VECFS_DIM_MAX; i++)
		by_printf(&c, ",%d", i % 7 - 3);
	by_adds(&c, "\n");
	run_file(&t, "wide.csv", K_CSV, c.p, c.n, 1);
	c.p[0] = 'x';
	c.n--;
	by_adds(&c, ",1\n");
	run_file(&t, "wider.csv", K_CSV, c.p, c.n, 0);
	assert_non_null(strstr(err_last, "more than 16384 numbers"));
	by_free(&c);
	assert_int_equal(stats(t.dm->store).dim, VECFS_DIM_MAX);
	check_whole_store(t.dm->store, &t.md);
	model_free(&t.md);
}

/* A record's presence. */
static int has_key(vecfs *v, const char *k)
{
	return vecfs_get(v, k, strlen(k), got_vec, VECFS_DIM_MAX, &(uint32_t){0}, NULL, 0, NULL) == 0;
}

/* Keys double-quoted as in RFC 4180 in .csv, .tsv and .txt; a quote left
 * open or an empty quoted key rejects the file; a row of numbers one short
 * of dim is told it may lack its key. */
static void test_quoted_keys(void **state)
{
	fixture *f = *state;
	run t;
	fx_open(f, NULL);
	run_init(&t, f, 3, VECFS_L2, 0x5eed0009);
	vecfs *v = t.dm->store;
	static const struct {
		int kind;
		const char *name, *text, *keys[3];
	} good[] = {
		{K_CSV, "q.csv", "\"a, b\",1,2,3\n\"say \"\"hi\"\"\" , 2,2,3\n\"#not a comment\",3,2,3\n",
		 {"a, b", "say \"hi\"", "#not a comment"}},
		{K_TXT, "q.txt", "\"two words\" 5 2 3\n  \"x\"\"y\"\t6 2 3\n\"1,5\",1,2,3\n", {"two words", "x\"y", "1,5"}},
		{K_TSV, "q.tsv", "\"tab, key\"\t7\t2\t3\n\"\"\"\"\t8\t2\t3\r\n\"a b\" ,9,2,3\n", {"tab, key", "\"", "a b"}},
	};
	for (size_t i = 0; i < sizeof good / sizeof *good; i++) {
		run_file(&t, good[i].name, good[i].kind, (const uint8_t *)good[i].text, strlen(good[i].text), 1);
		for (int k = 0; k < 3; k++)
			assert_true(has_key(v, good[i].keys[k]));
	}
	assert_int_equal(t.committed, 3);
	static const struct {
		const char *text, *why;
	} bad[] = {
		{"ok9,1,1,1\n\"unterminated,1,2,3\n", "line 2: the quoted key has no closing quote"},
		{"ok9,1,1,1\n\"\",1,2,3\n", "line 2: the quoted key \"\" is empty"},
		{"ok9,1,1,1\n\"a\"b,1,2,3\n", "line 2: text after the closing quote of the key"},
		{"ok9,1,1,1\n\"a\"\n", "line 2: a key and no numbers"},
		{"ok9,1,1,1\n\"a\"\"\n", "line 2: the quoted key has no closing quote"},
		{"ok9,1,1,1\n\"a\",\n", "line 2: field 2 is empty"},
		{"ok9 1 1 1\n\"a\"1 2 3\n", "line 2: text after the closing quote of the key (expected a blank)"},
		{"ok9,1,1,1\n1.5,2,3\n", "line 2: 2 numbers, expected 3 (the store's dim); missing key column?"},
	};
	for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
		char name[32];
		snprintf(name, sizeof name, "bad%zu.%s", i, i == 6 ? "txt" : "csv");
		run_file(&t, name, i == 6 ? K_TXT : K_CSV, (const uint8_t *)bad[i].text, strlen(bad[i].text), 0);
		if (!strstr(err_last, bad[i].why))
			fail_msg("%s: errors line '%s', expected '%s'", name, err_last, bad[i].why);
		assert_false(has_key(v, "ok9"));
	}
	/* a key that is not a number, or a row two short: no hint */
	run_file(&t, "short.csv", K_CSV, (const uint8_t *)"k,2,3\n", 6, 0);
	assert_null(strstr(err_last, "missing key"));
	run_file(&t, "shorter.csv", K_CSV, (const uint8_t *)"1,3\n", 4, 0);
	assert_null(strstr(err_last, "missing key"));
	assert_int_equal(t.rejected, 10);
	check_whole_store(v, &t.md);
	model_free(&t.md);
}

/* An .npy file (version 1.0) of `rows` rows of `dim` float64 values, in
 * the byte order `descr` names ('<f8' or '>f8'). */
/* The magic, version 1.0 and the header dict `h` padded as numpy pads it. */
static void npy_start(bytes *b, bytes *h)
{
	while ((10 + h->n + 1) % 64)
		by_byte(h, ' ');
	by_byte(h, '\n');
	by_add(b, "\x93NUMPY\x01\x00", 8);
	by_byte(b, (uint8_t)h->n);
	by_byte(b, (uint8_t)(h->n >> 8));
	by_add(b, h->p, h->n);
}

static void npy_f8_file(bytes *b, const char *descr, uint32_t rows, uint32_t dim, const double *vals)
{
	bytes h = {0};
	by_printf(&h, "{'descr': '%s', 'fortran_order': False, 'shape': (%u, %u), }", descr, rows, dim);
	npy_start(b, &h);
	by_free(&h);
	for (size_t i = 0; i < (size_t)rows * dim; i++) {
		uint8_t w[8];
		memcpy(w, &vals[i], 8);
		if (descr[0] == '>')
			for (int j = 0; j < 4; j++) {
				uint8_t c = w[j];
				w[j] = w[7 - j];
				w[7 - j] = c;
			}
		by_add(b, w, 8);
	}
}

/* .npy of little-endian float64: converted to float32; a value past
 * float32's range, big-endian data or a truncated file rejects the file. */
static void test_npy_float64(void **state)
{
	fixture *f = *state;
	run t;
	fx_open(f, NULL);
	run_init(&t, f, 4, VECFS_L2, 0x5eed000a);
	vecfs *v = t.dm->store;
	const double good[] = {0.1, 1.0 / 3, -2.5, 1e-3, 3.0, -0.0, 123456.789, 0x1p-20, 1e30, -1e-30, 7.0, 0.5,
			       FLT_MAX, -FLT_MAX, 1e-46, 0x1.fffffefffffffp127};
	bytes b = {0};
	npy_f8_file(&b, "<f8", 4, 4, good);
	run_file(&t, "f8.npy", K_NPY, b.p, b.n, 1);
	uint32_t d;
	assert_int_equal(vecfs_get(v, "1", 1, got_vec, VECFS_DIM_MAX, &d, NULL, 0, NULL), 0);
	assert_int_equal(d, 4);
	for (int i = 0; i < 4; i++)
		assert_true(f2u(got_vec[i]) == f2u((float)good[4 + i]));
	/* a float64 a little past FLT_MAX that rounds to it is FLT_MAX */
	assert_int_equal(vecfs_get(v, "3", 1, got_vec, VECFS_DIM_MAX, &d, NULL, 0, NULL), 0);
	assert_true(got_vec[0] == FLT_MAX && got_vec[1] == -FLT_MAX && got_vec[2] == 0 && got_vec[3] == FLT_MAX);
	const double over[] = {1, 2, 3, 4, 1e39, 1, 1, 1};
	const double inf[] = {1, 2, 3, 4, 1, INFINITY, 1, 1};
	const double big[] = {1, 2, 3, 4, 1, -3.5e38, 1, 1};
	const struct {
		const char *name, *descr, *why;
		const double *vals;
		size_t cut;
	} bad[] = {
		{"over.npy", "<f8", "row 2: value 1 (1e+39) overflows float32", over, 0},
		{"big.npy", "<f8", "row 2: value 2 (-3.5e+38) overflows float32", big, 0},
		{"inf.npy", "<f8", "row 2: ", inf, 0},
		{"be.npy", ">f8", "dtype '>f8': expected little-endian float32 ('<f4') or float64 ('<f8')", over, 0},
		{"cut.npy", "<f8", "row 2: truncated: 20 of 32 bytes", over, 12},
	};
	for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
		b.n = 0;
		npy_f8_file(&b, bad[i].descr, 2, 4, bad[i].vals);
		b.n -= bad[i].cut;
		run_file(&t, bad[i].name, K_NPY, b.p, b.n, 0);
		if (!strstr(err_last, bad[i].why))
			fail_msg("%s: errors line '%s', expected '%s'", bad[i].name, err_last, bad[i].why);
	}
	by_free(&b);
	assert_int_equal(t.committed, 1);
	assert_int_equal(t.rejected, 5);
	assert_int_equal(stats(v).records, 4);
	check_whole_store(v, &t.md);
	model_free(&t.md);
}

/* A member given twice in a .jsonl line ("key", "vector", "payload"), or a
 * key twice in an .npy header: which one is meant is not known, so the
 * file fails with EINVAL and an errors line naming it; other members may
 * repeat. */
static void test_members_twice(void **state)
{
	fixture *f = *state;
	run t;
	fx_open(f, NULL);
	run_init(&t, f, 3, VECFS_L2, 0x5eed000b);
	vecfs *v = t.dm->store;
	static const struct {
		const char *text, *why;
	} bad[] = {
		{"{\"key\":\"ok\",\"vector\":[1,2,3]}\n{\"key\":\"a\",\"vector\":[1,2,3],\"key\":\"b\"}\n",
		 "line 2: \"key\" given twice"},
		{"{\"key\":\"ok\",\"vector\":[1,2,3]}\n{\"vector\":[1,2,3],\"key\":\"a\",\"vector\":[4,5,6]}\n",
		 "line 2: \"vector\" given twice"},
		{"{\"key\":\"ok\",\"vector\":[1,2,3]}\n{\"key\":\"a\",\"payload\":1,\"vector\":[1,2,3],\"payload\":{}}\n",
		 "line 2: \"payload\" given twice"},
		{"{\"key\":\"ok\",\"vector\":[1,2,3]}\n{\"k\\u0065y\":\"a\",\"vector\":[1,2,3],\"key\":\"b\"}\n",
		 "line 2: \"key\" given twice"},
	};
	for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
		char name[32];
		snprintf(name, sizeof name, "twice%zu.jsonl", i);
		run_file(&t, name, K_JSONL, (const uint8_t *)bad[i].text, strlen(bad[i].text), 0);
		if (!strstr(err_last, bad[i].why))
			fail_msg("%s: errors line '%s', expected '%s'", name, err_last, bad[i].why);
		assert_false(has_key(v, "ok"));
	}
	const char *other = "{\"key\":\"ok\",\"x\":1,\"vector\":[1,2,3],\"x\":2}\n";
	run_file(&t, "other.jsonl", K_JSONL, (const uint8_t *)other, strlen(other), 1);
	assert_true(has_key(v, "ok"));

	static const char *hdr[] = {
		"{'descr': '<f4', 'fortran_order': False, 'shape': (1, 3), 'shape': (2, 3), }",
		"{'descr': '<f4', 'fortran_order': False, 'descr': '<f8', 'shape': (1, 3), }",
		"{'fortran_order': False, 'descr': '<f4', 'shape': (1, 3), 'fortran_order': True, }",
	};
	static const char *hwhy[] = {"'shape' given twice", "'descr' given twice",
				     "'fortran_order' given twice"};
	for (size_t i = 0; i < sizeof hdr / sizeof *hdr; i++) {
		bytes b = {0}, h = {0};
		by_adds(&h, hdr[i]);
		npy_start(&b, &h);
		float row[6] = {1, 2, 3, 4, 5, 6};
		by_add(&b, row, sizeof row);
		char name[32];
		snprintf(name, sizeof name, "twice%zu.npy", i);
		run_file(&t, name, K_NPY, b.p, b.n, 0);
		if (!strstr(err_last, hwhy[i]))
			fail_msg("%s: errors line '%s', expected '%s'", name, err_last, hwhy[i]);
		by_free(&b);
		by_free(&h);
	}
	assert_int_equal(t.rejected, 7);
	assert_int_equal(t.committed, 1);
	check_whole_store(v, &t.md);
	model_free(&t.md);
}

/* Who commits (a close by a lock owner that wrote), writes that do not
 * append, empty files, staged files, the buffer budget, a byte order mark,
 * long .npy headers. */
static void test_rules(void **state)
{
	fixture *f = *state;
	run t;
	fx_open(f, NULL);
	run_init(&t, f, 3, VECFS_L2, 0x5eed0007);
	vecfs *v = t.dm->store;
	int csv = fs_ingest_format_of("a.csv"), npy = fs_ingest_format_of("a.npy");
	unsigned e0;

	/* a close by an owner that did not write commits nothing */
	ingest *in = fs_ingest_new(t.dm, "o.csv", csv, 10);
	assert_int_equal(fs_ingest_write(in, "o1,1,", 5, 0, 1), 0);
	assert_int_equal(fs_ingest_close(in, 2, 11), 0);
	assert_false(fs_ingest_done(in));
	assert_int_equal(fs_ingest_write(in, "2,3\n", 4, 5, 1), 0);
	assert_int_equal(fs_ingest_write(in, "o2,1,2,3\n", 9, 9, 3), 0);
	assert_int_equal(fs_ingest_close(in, 2, 11), 0);
	assert_false(has_key(v, "o1"));
	assert_int_equal(fs_ingest_close(in, 3, 12), 0); /* another writer */
	assert_true(fs_ingest_done(in));
	assert_true(has_key(v, "o1") && has_key(v, "o2"));
	/* the owners start over at a commit: a new file of the same name */
	assert_int_equal(fs_ingest_write(in, "o3,1,2,3\n", 9, 18, 1), 0);
	assert_int_equal(fs_ingest_close(in, 3, 12), 0);
	assert_false(has_key(v, "o3"));
	assert_int_equal(fs_ingest_close(in, 1, 10), 0);
	assert_true(has_key(v, "o3"));
	fs_ingest_free(in);

	/* writes append */
	in = fs_ingest_new(t.dm, "off.csv", csv, 10);
	assert_int_equal(fs_ingest_write(in, "w1,1,2,3\n", 9, 0, 1), 0);
	e0 = err_count;
	assert_int_equal(fs_ingest_write(in, "w2,1,2,3\n", 9, 0, 1), -EINVAL);
	assert_int_equal(err_count, e0 + 1);
	assert_non_null(strstr(err_last, "ingest/off.csv: a write at offset 0, but the file holds 9 bytes"));
	assert_true(fs_ingest_done(in));
	assert_int_equal(fs_ingest_close(in, 1, 10), -EINVAL);
	assert_false(has_key(v, "w1"));
	fs_ingest_free(in);

	/* closed with nothing ever written, by the process that made it */
	in = fs_ingest_new(t.dm, "e.csv", csv, 10);
	assert_int_equal(fs_ingest_close(in, 5, 11), 0); /* another process */
	assert_false(fs_ingest_done(in));
	assert_int_equal(fs_ingest_close(in, 5, 10), 0);
	assert_false(fs_ingest_done(in));
	fs_ingest_release(in);
	assert_true(fs_ingest_done(in));
	fs_ingest_free(in);
	in = fs_ingest_new(t.dm, "e.npy", npy, 10);
	e0 = err_count;
	/* the creator's close: EINVAL, but the file stays (a shell closing
	 * the descriptor it dup'ed for a redirection); the last close ends it */
	assert_int_equal(fs_ingest_close(in, 5, 10), -EINVAL);
	assert_int_equal(err_count, e0);
	assert_false(fs_ingest_done(in));
	fs_ingest_release(in);
	assert_int_equal(err_count, e0 + 1);
	assert_non_null(strstr(err_last, "ingest/e.npy: empty"));
	assert_true(fs_ingest_done(in));
	fs_ingest_free(in);

	/* staged: no close commits; a bad row waits, silent, for the rename */
	assert_int_equal(fs_ingest_format_staged("a.csv.part"), csv);
	assert_int_equal(fs_ingest_format_staged("a.part"), -1);
	assert_int_equal(fs_ingest_format_staged("a.csv.part.part"), -1);
	assert_int_equal(fs_ingest_format_staged(".part"), -1);
	in = fs_ingest_new(t.dm, "s.csv.part", fs_ingest_format_staged("s.csv.part"), 10);
	e0 = err_count;
	assert_int_equal(fs_ingest_write(in, "s1,1,2,3\ns2,1,x,3\n", 18, 0, 1), 0);
	assert_int_equal(fs_ingest_write(in, "s3,1,2,3\n", 9, 18, 2), 0);
	assert_int_equal(fs_ingest_close(in, 1, 10), 0);
	fs_ingest_release(in);
	assert_int_equal(err_count, e0);
	assert_false(fs_ingest_done(in));
	assert_int_equal(fs_ingest_rename(in, 0), -EINVAL);
	assert_int_equal(err_count, e0 + 1);
	assert_non_null(strstr(err_last, "ingest/s.csv.part: line 2: "));
	assert_true(fs_ingest_done(in));
	assert_false(has_key(v, "s1"));
	fs_ingest_free(in);
	/* renamed with flags (RENAME_NOREPLACE), then without, as coreutils mv
	 * does after an EINVAL: EINVAL both times, one errors line; the file
	 * stays after both, and a further plain rename takes it away; a bad
	 * last line found only at the rename, and a key twice, alike */
	static const char *const kept[] = {"k1,1,2,3\nk2,1,x,3\n", "k1,1,2,3\nk2,1,2", "k1,1,2,3\nk1,1,2,3\n"};
	for (size_t i = 0; i < sizeof kept / sizeof kept[0]; i++) {
		in = fs_ingest_new(t.dm, "k.csv.part", csv, 10);
		e0 = err_count;
		assert_int_equal(fs_ingest_write(in, kept[i], strlen(kept[i]), 0, 1), 0);
		assert_int_equal(fs_ingest_rename(in, 1), -EINVAL);
		assert_int_equal(err_count, e0 + 1);
		assert_non_null(strstr(err_last, "ingest/k.csv.part: line 2: "));
		assert_false(fs_ingest_done(in));
		assert_int_equal(fs_ingest_rename(in, 1), -EINVAL);
		assert_false(fs_ingest_done(in));
		assert_int_equal(fs_ingest_rename(in, 0), -EINVAL);
		assert_false(fs_ingest_done(in));
		assert_int_equal(fs_ingest_rename(in, 0), -EINVAL);
		assert_true(fs_ingest_done(in));
		assert_int_equal(err_count, e0 + 1);
		assert_false(has_key(v, "k1"));
		fs_ingest_free(in);
	}
	in = fs_ingest_new(t.dm, "g.csv.part", csv, 10);
	assert_int_equal(fs_ingest_write(in, "g1,1,2,3\ng2,1,2", 15, 0, 1), 0);
	assert_int_equal(fs_ingest_close(in, 1, 10), 0);
	assert_int_equal(fs_ingest_write(in, ",3\n", 3, 15, 2), 0);
	fs_ingest_release(in);
	assert_false(has_key(v, "g1"));
	assert_int_equal(fs_ingest_rename(in, 1), 0);
	assert_true(has_key(v, "g1") && has_key(v, "g2"));
	fs_ingest_free(in);
	/* truncated (opened with O_TRUNC): a staged file starts over */
	in = fs_ingest_new(t.dm, "z.csv.part", csv, 10);
	assert_int_equal(fs_ingest_write(in, "z1,1,2,3\nz2,x\n", 14, 0, 1), 0);
	fs_ingest_truncate(in);
	assert_int_equal(fs_ingest_size(in), 0);
	assert_int_equal(fs_ingest_write(in, "z3,1,2,3\n", 9, 0, 1), 0);
	assert_int_equal(fs_ingest_rename(in, 0), 0);
	assert_true(has_key(v, "z3"));
	assert_false(has_key(v, "z1"));
	fs_ingest_free(in);

	/* a byte order mark opens the text: not part of the first key */
	in = fs_ingest_new(t.dm, "bom.csv", csv, 10);
	assert_int_equal(fs_ingest_write(in, "\xEF\xBB\xBF" "bom,1,2,3\n", 13, 0, 1), 0);
	assert_int_equal(fs_ingest_close(in, 1, 10), 0);
	assert_true(has_key(v, "bom"));
	fs_ingest_free(in);

	/* an .npy header of 6000 bytes is read whole */
	bytes b = {0};
	char dict[6100];
	int dl = snprintf(dict, sizeof dict, "{'descr': '<f4', 'fortran_order': False, %*s'shape': (2, 3), }",
			  6000, "");
	by_add(&b, "\x93NUMPY\x01\x00", 8);
	uint8_t hl[2] = {(uint8_t)((dl + 1) & 0xff), (uint8_t)((dl + 1) >> 8)};
	by_add(&b, hl, 2);
	by_add(&b, dict, (size_t)dl);
	by_adds(&b, "\n");
	for (int i = 0; i < 6; i++) {
		uint8_t w[4];
		put_le32(w, f2u((float)i));
		by_add(&b, w, 4);
	}
	uint64_t next = stats(v).next_key;
	assert_int_equal(feed(t.dm, "long.npy", b.p, b.n, &t.r), 0);
	assert_int_equal(stats(v).next_key, next + 2);
	/* a shape past unsigned long long is refused for what it is */
	char *sh = strstr((char *)b.p + 10, "(2, 3)");
	assert_non_null(sh);
	by_free(&b);
	by_add(&b, "\x93NUMPY\x01\x00", 8);
	dl = snprintf(dict, sizeof dict, "{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999999, 3), }");
	hl[0] = (uint8_t)((dl + 1) & 0xff);
	hl[1] = (uint8_t)((dl + 1) >> 8);
	by_add(&b, hl, 2);
	by_add(&b, dict, (size_t)dl);
	by_adds(&b, "\n");
	e0 = err_count;
	assert_int_equal(feed(t.dm, "huge.npy", b.p, b.n, &t.r), -EINVAL);
	assert_non_null(strstr(err_last, "is too large"));
	by_free(&b);

	/* the budget: the buffers of all open files together */
	assert_int_equal(atomic_load(&t.dm->ingest_used), 0);
	t.dm->ingest_max = (size_t)3 << 20; /* a partial line of 1200 KiB holds 2 MiB */
	ingest *a = fs_ingest_new(t.dm, "a.txt", fs_ingest_format_of("a.txt"), 10);
	ingest *c = fs_ingest_new(t.dm, "c.txt", fs_ingest_format_of("c.txt"), 10);
	char *big = malloc(1200 << 10);
	assert_non_null(big);
	memset(big, ' ', 1200 << 10);
	big[0] = 'a';
	assert_int_equal(fs_ingest_write(a, big, 1200 << 10, 0, 1), 0);
	big[0] = 'c';
	e0 = err_count;
	assert_int_equal(fs_ingest_write(c, big, 1200 << 10, 0, 1), -ENOMEM);
	assert_int_equal(err_count, e0 + 1);
	assert_non_null(strstr(err_last, "ingest_buffer_mb"));
	/* a failed file says why at every later call: the first failure's errno */
	assert_int_equal(fs_ingest_write(c, "x", 1, 1200 << 10, 1), -ENOMEM);
	assert_int_equal(fs_ingest_close(c, 1, 10), -ENOMEM);
	assert_int_equal(err_count, e0 + 1);
	fs_ingest_free(c);
	fs_ingest_cancel(a); /* what it held is free again */
	c = fs_ingest_new(t.dm, "c.txt", fs_ingest_format_of("c.txt"), 10);
	assert_int_equal(fs_ingest_write(c, big, 1200 << 10, 0, 1), 0);
	assert_int_equal(fs_ingest_write(c, " 1 2 3\n", 7, 1200 << 10, 1), 0);
	assert_int_equal(fs_ingest_close(c, 1, 10), 0);
	assert_true(has_key(v, "c"));
	fs_ingest_free(c);
	fs_ingest_free(a);
	assert_int_equal(atomic_load(&t.dm->ingest_used), 0);
	free(big);
	model_free(&t.md);
}

/* The rows of a file wait in one batch of the library (vecfs_batch_*):
 * its write buffer (VECFS_BATCH_BUF) counts against the budget from the
 * first row until the commit; a budget too small for it fails the file at
 * its first row, naming it; the `delete` file hands its keys to a batch of
 * deletes, committed with its filter= line in one commit (a filter alone
 * takes no buffer), and a bad filter fails it at that line, nothing
 * deleted. */
static void test_batch_spool(void **state)
{
	fixture *f = *state;
	run t;
	fx_open(f, NULL);
	run_init(&t, f, 2, VECFS_L2, 0x5eed000d);
	vecfs *v = t.dm->store;
	int csv = fs_ingest_format_of("b.csv");
	assert_int_equal(atomic_load(&t.dm->ingest_used), 0);
	ingest *in = fs_ingest_new(t.dm, "b.csv", csv, 10);
	assert_int_equal(wr(in, "a,1,2\nb,", 8), 0);
	size_t held = atomic_load(&t.dm->ingest_used);
	assert_true(held >= VECFS_BATCH_BUF);
	for (int i = 0; i < 5000; i++) {
		char line[32];
		int n = snprintf(line, sizeof line, "%d,%d\nr%d,", i, i, i);
		assert_int_equal(wr(in, line, (size_t)n), 0);
	}
	assert_int_equal(wr(in, "7,8\n", 4), 0);
	assert_int_equal(atomic_load(&t.dm->ingest_used), held); /* bounded */
	assert_int_equal(stats(v).records, 0);
	assert_int_equal(fs_ingest_close(in, 1, 10), 0);
	assert_int_equal(stats(v).records, 5002);
	assert_int_equal(atomic_load(&t.dm->ingest_used), 0);
	fs_ingest_free(in);

	/* a budget without room for the batch's buffer */
	t.dm->ingest_max = VECFS_BATCH_BUF;
	in = fs_ingest_new(t.dm, "small.csv", csv, 10);
	unsigned e0 = err_count;
	assert_int_equal(wr(in, "s0,1,2\n", 7), -ENOMEM);
	assert_int_equal(err_count, e0 + 1);
	assert_non_null(strstr(err_last, "ingest/small.csv: line 1: "));
	assert_non_null(strstr(err_last, "ingest_buffer_mb"));
	assert_int_equal(fs_ingest_close(in, 1, 10), -ENOMEM);
	fs_ingest_free(in);
	assert_false(has_key(v, "s0"));
	assert_int_equal(atomic_load(&t.dm->ingest_used), 0);

	/* the delete file: a filter alone needs no buffer */
	in = fs_ingest_new_delete(t.dm, 10);
	const char *d1 = "filter={\"nope\":1}\n";
	assert_int_equal(wr(in, d1, strlen(d1)), 0);
	assert_int_equal(fs_ingest_close(in, 1, 10), 0);
	assert_int_equal(atomic_load(&t.dm->last_delete), 0);
	fs_ingest_free(in);
	t.dm->ingest_max = (size_t)64 << 20;
	/* keys (one quoted, one missing) and a filter, in one commit */
	vecfs_row pr = {"p", 1, (const float[]){1, 2}, "{\"g\":1}", 7};
	char err[256];
	assert_int_equal(vecfs_put(v, &pr, 1, 2, NULL, err, sizeof err), 0);
	in = fs_ingest_new_delete(t.dm, 10);
	const char *d2 = "a\n\"r7\"\nmissing\n\nfilter={\"g\":1}\nb\n";
	assert_int_equal(wr(in, d2, strlen(d2)), 0);
	assert_int_equal(stats(v).records, 5003);
	assert_int_equal(fs_ingest_close(in, 1, 10), 0);
	assert_int_equal(atomic_load(&t.dm->last_delete), 4);
	assert_int_equal(stats(v).records, 4999);
	assert_false(has_key(v, "a"));
	assert_false(has_key(v, "p"));
	assert_true(has_key(v, "r8"));
	assert_int_equal(atomic_load(&t.dm->ingest_used), 0);
	fs_ingest_free(in);
	/* a bad filter: its line named, nothing deleted */
	in = fs_ingest_new_delete(t.dm, 10);
	const char *d3 = "r1\nr2\nfilter={\"g\":\n";
	assert_int_equal(wr(in, d3, strlen(d3)), 0);
	e0 = err_count;
	assert_int_equal(fs_ingest_close(in, 1, 10), -EINVAL);
	assert_int_equal(err_count, e0 + 1);
	assert_non_null(strstr(err_last, "delete: line 3: "));
	assert_true(has_key(v, "r1"));
	assert_int_equal(stats(v).records, 4999);
	assert_int_equal(atomic_load(&t.dm->ingest_used), 0);
	fs_ingest_free(in);
	model_free(&t.md);
}

/* Out of descriptors when the first row needs the spool file: the write
 * fails with EMFILE and an errors line, and so does the close, nothing
 * committed; the next file goes through. */
static void test_out_of_descriptors(void **state)
{
	fixture *f = *state;
	run t;
	fx_open(f, NULL);
	run_init(&t, f, 3, VECFS_L2, 0x5eed000c);
	vecfs *v = t.dm->store;
	struct rlimit old;
	assert_int_equal(getrlimit(RLIMIT_NOFILE, &old), 0);
	struct rlimit low = {64, old.rlim_max};
	assert_int_equal(setrlimit(RLIMIT_NOFILE, &low), 0);
	int fds[64], nfd = 0;
	while (nfd < 64 && (fds[nfd] = dup(0)) >= 0)
		nfd++;
	/* rows enough that the spool file is made while they are written */
	bytes b = {0};
	for (int i = 0; i < 20000; i++)
		by_printf(&b, "m%d,1,2,3\n", i + 1);
	ingest *in = fs_ingest_new(t.dm, "m.csv", fs_ingest_format_of("m.csv"), 10);
	unsigned e0 = err_count;
	int wrc = fs_ingest_write(in, (const char *)b.p, b.n, 0, 1);
	int crc = fs_ingest_close(in, 1, 10);
	by_free(&b);
	fs_ingest_free(in);
	while (nfd > 0)
		close(fds[--nfd]);
	assert_int_equal(setrlimit(RLIMIT_NOFILE, &old), 0);
	assert_int_equal(wrc, -EMFILE);
	assert_int_equal(crc, -EMFILE);
	assert_int_equal(err_count, e0 + 1);
	assert_non_null(strstr(err_last, "ingest/m.csv"));
	assert_false(has_key(v, "m1"));
	const char *ok = "m0,1,2,3\n";
	run_file(&t, "ok.csv", K_CSV, (const uint8_t *)ok, strlen(ok), 1);
	assert_true(has_key(v, "m0"));
	model_free(&t.md);
}

/* Valid files of every format, mutated: each is committed exactly as the
 * reference reads it, or rejected leaving the store as it was. */
static void test_fuzz(void **state)
{
	fixture *f = *state;
	run t;
	fx_open(f, NULL);
	run_init(&t, f, FDIM, VECFS_L2, 0xf022f022ULL);
	unsigned per_kind[K_KINDS][2] = {{0}};
	for (int i = 0; i < FUZZ_CASES; i++) {
		int kind = (int)rnd(&t.r, K_KINDS);
		size_t rows = rnd(&t.r, 8) ? rnd(&t.r, 10) : rnd(&t.r, 120);
		/* now and then the whole file is of another dimension */
		uint32_t dim = rnd(&t.r, 25) ? FDIM : FDIM + (rnd(&t.r, 2) ? 1 : -1);
		bytes b = {0};
		if (kind == K_NPY && rnd(&t.r, 6) == 0)
			gen_npy(&t.r, dim, rows, (int)rnd(&t.r, 16), &b);
		else
			gen_file(&t.r, kind, dim, rows, &t.md, &b);
		int nmut = rnd(&t.r, 8) == 0 ? 0 : 1 + (int)rnd(&t.r, rnd(&t.r, 2) ? 1 : 3);
		for (int k = 0; k < nmut; k++)
			mutate(&t.r, kind, dim, &b);
		char name[64];
		const char *ext = kind == K_JSONL && rnd(&t.r, 2) ? ".ndjson" : kind_ext[kind];
		snprintf(name, sizeof name, "fuzz-%d%s", i, ext);
		unsigned c0 = t.committed;
		run_file(&t, name, kind, b.p, b.n, 0);
		per_kind[kind][t.committed != c0]++;
		by_free(&b);
		if (i % 1000 == 999)
			check_whole_store(t.dm->store, &t.md);
	}
	check_whole_store(t.dm->store, &t.md);
	print_message("fuzz: %u files, %u committed (%u rows), %u rejected, %u open to either; "
		      "committed/rejected by format:",
		      t.cases, t.committed, t.rows, t.rejected, t.open);
	for (int k = 0; k < K_KINDS; k++)
		print_message(" %s %u/%u", kind_ext[k] + 1, per_kind[k][1], per_kind[k][0]);
	print_message("\n");
	/* the mutations reach both outcomes in every format */
	for (int k = 0; k < K_KINDS; k++) {
		assert_true(per_kind[k][0] > 20);
		assert_true(per_kind[k][1] > 20);
	}
	model_free(&t.md);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_format_names),
		cmocka_unit_test_setup_teardown(test_valid_files, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_first_file_fixes_dim, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_cosine_zero_vector, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_dup_keys, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_error_lines, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_file_states, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_bounds, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_rules, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_quoted_keys, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_npy_float64, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_members_twice, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_batch_spool, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_out_of_descriptors, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_fuzz, fx_setup, fx_teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
