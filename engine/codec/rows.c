/*
 * engine/codec/rows.c - the ingest formats as incremental parsers
 * (vecfs_rows_*, vecfs.h): delimited text (.csv .tsv .txt, quoted keys,
 * a header told apart), `delete`'s keys, JSON lines, .fvecs, .bvecs and
 * .npy.  Bytes come in pieces split anywhere; a row goes to the callback
 * as soon as it is complete.  No I/O, no store, no state but the parser's.
 */
#include "vecfs.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"
#include "number.h"
#include "text.h"

#define LINE_KEEP ((size_t)64 << 10) /* a line buffer larger is freed after its line */
#define JSON_DEPTH 256                /* nesting of a JSON line's values */

struct vecfs_rows {
	vecfs_rows_format fmt;
	vecfs_rows_fn emit;
	vecfs_rows_mem_fn mem;
	void *arg;
	int dead;
	char why[512];
	uint64_t where;
	uint64_t emitted;     /* rows the callback took */
	uint32_t dim;         /* binary: expected (0: any) */
	int dim_from_store;
	float *vec;           /* VECFS_DIM_MAX + 1 floats, with row: the scratch */
	uint8_t *row;         /* binary: the row being read */
	int scratch;          /* vec (and row) are allocated and counted */
	/* text */
	char *line;           /* the partial line; .npy: the header */
	size_t llen, lcap;
	uint64_t lineno;      /* lines completed */
	char *key;            /* a decoded key */
	size_t kcap;
	uint64_t filter_line; /* KEYS: the filter= line's number */
	/* binary */
	size_t rowlen, rowneed;
	uint64_t rowno;       /* rows completed */
	int npy_stage;        /* 0: magic and length, 1: header, 2: data */
	int npy_f8;           /* '<f8': float64 values, converted to float32 */
	size_t npy_hlen;
	uint64_t npy_rows;
};

int vecfs_rows_format_of(const char *name)
{
	static const struct {
		const char *ext;
		int fmt;
	} ends[] = {
		{".csv", VECFS_ROWS_CSV},      {".tsv", VECFS_ROWS_TSV},     {".txt", VECFS_ROWS_TXT},
		{".jsonl", VECFS_ROWS_JSONL},  {".ndjson", VECFS_ROWS_JSONL}, {".fvecs", VECFS_ROWS_FVECS},
		{".bvecs", VECFS_ROWS_BVECS},  {".npy", VECFS_ROWS_NPY},
	};
	size_t n = strlen(name);
	for (size_t i = 0; i < sizeof ends / sizeof ends[0]; i++) {
		size_t e = strlen(ends[i].ext);
		if (n > e && !strcmp(name + n - e, ends[i].ext))
			return ends[i].fmt;
	}
	return -1;
}

static int is_text(const vecfs_rows *r)
{
	return r->fmt <= VECFS_ROWS_JSONL;
}

static int fail(vecfs_rows *r, int rc, uint64_t where, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static int fail(vecfs_rows *r, int rc, uint64_t where, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(r->why, sizeof r->why, fmt, ap);
	va_end(ap);
	r->where = where;
	r->dead = 1;
	return rc;
}

static int charge(vecfs_rows *r, int64_t delta)
{
	return r->mem ? r->mem(r->arg, delta) : 0;
}

static size_t row_size(const vecfs_rows *r)
{
	if (r->fmt == VECFS_ROWS_NPY)
		return (size_t)8 * VECFS_DIM_MAX;
	if (r->fmt == VECFS_ROWS_FVECS || r->fmt == VECFS_ROWS_BVECS)
		return 4 + (size_t)4 * VECFS_DIM_MAX;
	return 0;
}

static size_t scratch_size(const vecfs_rows *r)
{
	return sizeof(float) * (VECFS_DIM_MAX + 1) + row_size(r);
}

static int scratch_get(vecfs_rows *r)
{
	if (r->scratch)
		return 0;
	if (charge(r, (int64_t)scratch_size(r)))
		return fail(r, -ENOMEM, 0, "out of memory");
	r->vec = malloc(sizeof(float) * (VECFS_DIM_MAX + 1));
	if (row_size(r))
		r->row = malloc(row_size(r));
	if (!r->vec || (row_size(r) && !r->row)) {
		free(r->vec);
		free(r->row);
		r->vec = NULL;
		r->row = NULL;
		charge(r, -(int64_t)scratch_size(r));
		return fail(r, -ENOMEM, 0, "out of memory");
	}
	r->scratch = 1;
	return 0;
}

/* Add n bytes to the line (or .npy header) buffer, its growth asked for. */
static int line_add(vecfs_rows *r, const void *p, size_t n, uint64_t where)
{
	size_t cap = r->lcap ? r->lcap : 256;
	while (cap < r->llen + n + 1)
		cap *= 2;
	if (cap > r->lcap) {
		if (charge(r, (int64_t)(cap - r->lcap)))
			return fail(r, -ENOMEM, where, "out of memory");
		char *nl = realloc(r->line, cap);
		if (!nl) {
			charge(r, -(int64_t)(cap - r->lcap));
			return fail(r, -ENOMEM, where, "out of memory");
		}
		r->line = nl;
		r->lcap = cap;
	}
	memcpy(r->line + r->llen, p, n);
	r->llen += n;
	r->line[r->llen] = 0;
	return 0;
}

static void line_drop(vecfs_rows *r)
{
	free(r->line);
	charge(r, -(int64_t)r->lcap);
	r->line = NULL;
	r->llen = r->lcap = 0;
}

/* A buffer for a key of at most n bytes, its growth asked for. */
static char *key_buf(vecfs_rows *r, size_t n, uint64_t where)
{
	if (n + 1 > r->kcap) {
		if (charge(r, (int64_t)(n + 1 - r->kcap))) {
			fail(r, -ENOMEM, where, "out of memory");
			return NULL;
		}
		char *k = realloc(r->key, n + 1);
		if (!k) {
			charge(r, -(int64_t)(n + 1 - r->kcap));
			fail(r, -ENOMEM, where, "out of memory");
			return NULL;
		}
		r->key = k;
		r->kcap = n + 1;
	}
	return r->key;
}

static int put(vecfs_rows *r, const vecfs_parsed_row *row)
{
	int rc = r->emit(r->arg, row);
	if (rc) {
		r->dead = 1;
		r->why[0] = 0;
		return rc;
	}
	r->emitted++;
	return 0;
}

/* ---------------------------------------------------------------- delimited text */

/* The separator of a line (or of what follows its quoted key): .csv a
 * comma, else a tab; .tsv a tab, else a comma; .txt a comma; else 0, blanks. */
static char line_sep(vecfs_rows_format fmt, const char *s, size_t n)
{
	if (fmt == VECFS_ROWS_TSV)
		return memchr(s, '\t', n) ? '\t' : memchr(s, ',', n) ? ',' : 0;
	return memchr(s, ',', n) ? ',' : fmt == VECFS_ROWS_CSV && memchr(s, '\t', n) ? '\t' : 0;
}

/* A key double-quoted as in RFC 4180 at s[0] ("" inside is one quote),
 * decoded into r->key (*klen bytes); *end: just past the closing quote. */
static int quoted_key(vecfs_rows *r, const char *s, size_t n, size_t *klen, size_t *end)
{
	uint64_t where = r->lineno;
	size_t i = 1, close;
	for (;;) {
		const char *q = memchr(s + i, '"', n - i);
		if (!q)
			return fail(r, -EINVAL, where, "the quoted key has no closing quote");
		close = (size_t)(q - s);
		if (close + 1 < n && s[close + 1] == '"') {
			i = close + 2;
			continue;
		}
		break;
	}
	/* between the quotes, a quote is always doubled */
	char *k = key_buf(r, close - 1, where);
	if (!k)
		return -ENOMEM;
	size_t o = 0;
	for (i = 1; i < close; i++) {
		k[o++] = s[i];
		i += s[i] == '"';
	}
	*end = close + 1;
	if (o == 0)
		return fail(r, -EINVAL, where, "the quoted key \"\" is empty");
	*klen = o;
	return 0;
}

/* The file's first row, whose first value is not a number: a header
 * (`id,x,y,z`) when no value after it (s[0..n), what follows the field,
 * fields split by sep, or blanks) is a number either. */
static int header_like(const vecfs_rows *r, const char *s, size_t n, char sep)
{
	if (r->emitted)
		return 0;
	size_t pos = 0;
	while (pos < n) {
		while (pos < n && (sep ? s[pos] == sep : vf_text_blank(s[pos])))
			pos++;
		size_t st = pos;
		while (pos < n && (sep ? s[pos] != sep : !vf_text_blank(s[pos])))
			pos++;
		const char *f = s + st;
		size_t fl = pos - st;
		float v;
		vf_text_trim(&f, &fl);
		if (fl && vecfs_parse_float(f, fl, &v) == 0)
			return 0;
	}
	return 1;
}

static int delim_line(vecfs_rows *r, const char *s, size_t n)
{
	uint64_t where = r->lineno;
	const char *key = NULL;
	size_t klen = 0;
	size_t pos = 0;
	int quoted = s[0] == '"';
	if (quoted) {
		int rc = quoted_key(r, s, n, &klen, &pos);
		if (rc)
			return rc;
		key = r->key;
	}
	char sep = line_sep(r->fmt, s + pos, n - pos);
	if (quoted) {
		/* after the closing quote: blanks, then the separator */
		size_t q = pos;
		while (pos < n && vf_text_blank(s[pos]) && s[pos] != sep)
			pos++;
		if (pos == n)
			return fail(r, -EINVAL, where, "a key and no numbers (expected KEY then the vector)");
		if (sep ? s[pos] != sep : pos == q)
			return fail(r, -EINVAL, where, "text after the closing quote of the key (expected %s)",
				    sep == ',' ? "a comma" : sep ? "a tab" : "a blank");
		if (sep)
			pos++;
	}
	uint32_t cnt = 0;
	unsigned field = quoted;
	while (pos <= n) {
		const char *f;
		size_t fl;
		if (sep) {
			const char *e = memchr(s + pos, sep, n - pos);
			size_t end = e ? (size_t)(e - s) : n;
			f = s + pos;
			fl = end - pos;
			pos = end + 1;
			vf_text_trim(&f, &fl);
			field++;
			if (fl == 0)
				return fail(r, -EINVAL, where, "field %u is empty", field);
		} else {
			while (pos < n && vf_text_blank(s[pos]))
				pos++;
			if (pos >= n)
				break;
			size_t st = pos;
			while (pos < n && !vf_text_blank(s[pos]))
				pos++;
			f = s + st;
			fl = pos - st;
			field++;
		}
		if (!key) {
			key = f;
			klen = fl;
			continue;
		}
		if (cnt >= VECFS_DIM_MAX)
			return fail(r, -EINVAL, where, "more than %d numbers", VECFS_DIM_MAX);
		int rc = vf_parse_token(f, fl, (size_t)(s + n - f), &r->vec[cnt]);
		if (rc == -ENOMEM)
			return fail(r, -ENOMEM, where, "out of memory");
		if (rc == -ERANGE)
			return fail(r, -EINVAL, where, "value %u '%.*s' overflows float32", cnt + 1,
				    (int)(fl > 40 ? 40 : fl), f);
		if (rc)
			return fail(r, -EINVAL, where, "value %u '%.*s' is not a number%s", cnt + 1,
				    (int)(fl > 40 ? 40 : fl), f,
				    cnt == 0 && header_like(r, s + (pos < n ? pos : n), n - (pos < n ? pos : n), sep)
					    ? " (a header? remove it or start it with #)" : "");
		cnt++;
	}
	if (cnt == 0)
		return fail(r, -EINVAL, where, "a key and no numbers (expected KEY then the vector)");
	float k;
	vecfs_parsed_row row = {where, key, klen, r->vec, cnt, NULL, 0, 0, 0};
	row.numeric_key = !quoted && klen <= 64 && vecfs_parse_float(key, klen, &k) == 0;
	return put(r, &row);
}

/* ---------------------------------------------------------------- delete's keys */

/* A key (the whole line, or double-quoted as in a .csv file), or the one
 * filter= line; blank lines are skipped. */
static int keys_line(vecfs_rows *r, const char *s, size_t n)
{
	uint64_t where = r->lineno;
	if (n && s[n - 1] == '\r')
		n--;
	size_t b = 0;
	while (b < n && vf_text_blank(s[b]))
		b++;
	if (b == n)
		return 0;
	vecfs_parsed_row row = {where, s, n, NULL, 0, NULL, 0, 0, 0};
	if (n >= 7 && !memcmp(s, "filter=", 7)) {
		if (r->filter_line)
			return fail(r, -EINVAL, where, "a second filter= line (line %llu has one): at most one",
				    (unsigned long long)r->filter_line);
		r->filter_line = where;
		row.key = NULL;
		row.keylen = 0;
		row.payload = s + 7;
		row.payload_len = n - 7;
		row.filter = 1;
		return put(r, &row);
	}
	if (s[0] == '"') {
		size_t end;
		int rc = quoted_key(r, s, n, &row.keylen, &end);
		if (rc)
			return rc;
		while (end < n && vf_text_blank(s[end]))
			end++;
		if (end < n)
			return fail(r, -EINVAL, where, "text after the closing quote of the key");
		row.key = r->key;
	}
	return put(r, &row);
}

/* ---------------------------------------------------------------- JSON lines */

typedef struct jl {
	const char *p;
	size_t n, i;
	char err[160];
	int deep;
} jl;

static int jfail(jl *j, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int jfail(jl *j, const char *fmt, ...)
{
	if (!j->err[0]) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(j->err, sizeof j->err, fmt, ap);
		va_end(ap);
	}
	return -EINVAL;
}

/* After a member or element: 1 when a ',' follows, 0 when `close` does
 * (either consumed), -1 when neither does. */
static int jnext(jl *j, char close)
{
	j->i = vf_json_ws(j->p, j->n, j->i);
	if (j->i < j->n && (j->p[j->i] == ',' || j->p[j->i] == close))
		return j->p[j->i++] == ',';
	return -1;
}

/* Any value, checked and skipped. */
static int jskip(jl *j)
{
	uint8_t stack[JSON_DEPTH / 8 + 1];
	int rc = vf_json_value(j->p, j->n, &j->i, JSON_DEPTH, stack, NULL, NULL, j->err, sizeof j->err);
	if (rc == -E2BIG)
		j->deep = 1;
	return rc ? -EINVAL : 0;
}

/* The "vector" array at j->i, into r->vec. */
static int jvector(vecfs_rows *r, jl *j, uint32_t *cnt)
{
	if (j->i >= j->n || j->p[j->i] != '[')
		return jfail(j, "\"vector\" is not an array");
	j->i = vf_json_ws(j->p, j->n, j->i + 1);
	*cnt = 0;
	if (j->i < j->n && j->p[j->i] == ']') {
		j->i++;
		return 0;
	}
	for (;;) {
		j->i = vf_json_ws(j->p, j->n, j->i);
		size_t st = j->i, e;
		if (!(st < j->n && (j->p[st] == '-' || (j->p[st] >= '0' && j->p[st] <= '9'))))
			return jfail(j, "element %u of \"vector\" is not a number", *cnt + 1);
		if (!(e = vf_json_number(j->p, j->n, st, j->err, sizeof j->err)))
			return -EINVAL;
		j->i = e;
		if (*cnt >= VECFS_DIM_MAX)
			return jfail(j, "more than %d numbers in \"vector\"", VECFS_DIM_MAX);
		int fr = vf_parse_token(j->p + st, e - st, j->n - st, &r->vec[*cnt]);
		if (fr == -ENOMEM)
			return -ENOMEM;
		if (fr == -ERANGE)
			return jfail(j, "element %u of \"vector\" (%.*s) overflows float32", *cnt + 1,
				     (int)(e - st > 40 ? 40 : e - st), j->p + st);
		if (fr)
			return jfail(j, "element %u of \"vector\" is not a number", *cnt + 1);
		(*cnt)++;
		int more = jnext(j, ']');
		if (more < 0)
			return jfail(j, "expected ',' or ']' in \"vector\"");
		if (!more)
			return 0;
	}
}

static int json_members(vecfs_rows *r, jl *j, size_t *klen, uint32_t *cnt, const char **payload,
			size_t *plen)
{
	int have_key = 0, have_vec = 0, have_pay = 0;
	j->i = vf_json_ws(j->p, j->n, j->i);
	if (j->i >= j->n || j->p[j->i] != '{')
		return jfail(j, "expected a JSON object");
	j->i = vf_json_ws(j->p, j->n, j->i + 1);
	if (j->i < j->n && j->p[j->i] == '}') {
		j->i++;
	} else {
		for (;;) {
			char name[64];
			size_t nl = 0, st;
			j->i = vf_json_ws(j->p, j->n, j->i);
			if (j->i >= j->n || j->p[j->i] != '"')
				return jfail(j, "expected a member name");
			st = j->i;
			if (vf_json_string(j->p, j->n, &j->i, NULL, NULL, j->err, sizeof j->err))
				return -EINVAL;
			/* a name of more bytes than this is none of ours */
			if (j->i - st <= sizeof name)
				vf_json_string(j->p, j->n, &st, name, &nl, NULL, 0);
			else
				nl = sizeof name + 1;
			j->i = vf_json_ws(j->p, j->n, j->i);
			if (j->i >= j->n || j->p[j->i] != ':')
				return jfail(j, "expected ':'");
			j->i = vf_json_ws(j->p, j->n, j->i + 1);
			int is_key = nl == 3 && !memcmp(name, "key", 3);
			int is_vec = nl == 6 && !memcmp(name, "vector", 6);
			int is_pay = nl == 7 && !memcmp(name, "payload", 7);
			/* a member given twice: which one is meant is not known
			 * (JSON readers differ), so the line is refused */
			if ((is_key && have_key) || (is_vec && have_vec) || (is_pay && have_pay))
				return jfail(j, "\"%.*s\" given twice", (int)nl, name);
			if (is_key) {
				if (j->i >= j->n || j->p[j->i] != '"')
					return jfail(j, "\"key\" is not a string");
				/* decoded, the key is no longer than its text */
				size_t e = j->i;
				if (vf_json_string(j->p, j->n, &e, NULL, NULL, j->err, sizeof j->err)) {
					j->i = e;
					return -EINVAL;
				}
				char *k = key_buf(r, e - j->i - 2, r->lineno);
				if (!k)
					return -ENOMEM;
				vf_json_string(j->p, j->n, &j->i, k, klen, NULL, 0);
				have_key = 1;
			} else if (is_vec) {
				int rc = jvector(r, j, cnt);
				if (rc)
					return rc;
				have_vec = 1;
			} else if (is_pay) {
				st = j->i;
				if (jskip(j))
					return -EINVAL;
				*payload = j->p + st;
				*plen = j->i - st;
				have_pay = 1;
			} else if (jskip(j)) {
				return -EINVAL;
			}
			int more = jnext(j, '}');
			if (more < 0)
				return jfail(j, "expected ',' or '}'");
			if (!more)
				break;
		}
	}
	j->i = vf_json_ws(j->p, j->n, j->i);
	if (j->i != j->n)
		return jfail(j, "text after the object");
	if (!have_key)
		return jfail(j, "no \"key\"");
	if (!have_vec || *cnt == 0)
		return jfail(j, "no \"vector\" (or an empty one)");
	return 0;
}

static int json_line(vecfs_rows *r, const char *s, size_t n)
{
	uint64_t where = r->lineno;
	jl j = {s, n, 0, "", 0};
	size_t klen = 0;
	uint32_t cnt = 0;
	const char *payload = NULL;
	size_t plen = 0;
	int rc = json_members(r, &j, &klen, &cnt, &payload, &plen);
	if (rc == -ENOMEM)
		return r->dead ? rc : fail(r, rc, where, "out of memory");
	if (rc) {
		if (j.deep)
			return fail(r, -E2BIG, where, "%s", j.err);
		if (!strncmp(j.err, "no \"", 4) || strstr(j.err, "\"vector\"") || strstr(j.err, "\"key\"") ||
		    strstr(j.err, " given twice"))
			return fail(r, -EINVAL, where, "%s", j.err);
		if (j.i >= j.n)
			return fail(r, -EINVAL, where, "malformed JSON: %s at the end of the line", j.err);
		return fail(r, -EINVAL, where, "malformed JSON: %s at column %zu", j.err, j.i + 1);
	}
	vecfs_parsed_row row = {where, r->key, klen, r->vec, cnt, payload, plen, 0, 0};
	return put(r, &row);
}

/* ---------------------------------------------------------------- text lines */

static int text_line(vecfs_rows *r, const char *s, size_t n)
{
	/* a UTF-8 byte order mark opens the text, not its first key */
	if (++r->lineno == 1 && n >= 3 && !memcmp(s, "\xEF\xBB\xBF", 3)) {
		s += 3;
		n -= 3;
	}
	if (r->fmt == VECFS_ROWS_KEYS)
		return keys_line(r, s, n);
	vf_text_trim(&s, &n);
	if (n == 0)
		return 0;
	if (r->fmt == VECFS_ROWS_JSONL)
		return json_line(r, s, n);
	if (s[0] == '#')
		return 0;
	return delim_line(r, s, n);
}

static int text_feed(vecfs_rows *r, const char *p, size_t n)
{
	while (n) {
		const char *nl = memchr(p, '\n', n);
		size_t take = nl ? (size_t)(nl - p) : n;
		if (r->llen + take > VECFS_ROWS_LINE_MAX)
			return fail(r, -EINVAL, r->lineno + 1, "longer than %zu bytes", VECFS_ROWS_LINE_MAX);
		if (!nl)
			return line_add(r, p, take, r->lineno + 1);
		int rc;
		if (r->llen) {
			if ((rc = line_add(r, p, take, r->lineno + 1)))
				return rc;
			rc = text_line(r, r->line, r->llen);
			if (r->lcap > LINE_KEEP)
				line_drop(r);
			else
				r->llen = 0;
		} else {
			rc = text_line(r, p, take);
		}
		if (rc)
			return rc;
		p += take + 1;
		n -= take + 1;
	}
	return 0;
}

/* ---------------------------------------------------------------- binary rows */

static uint32_t rd_le32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static float rd_lef32(const uint8_t *p)
{
	uint32_t u = rd_le32(p);
	float f;
	memcpy(&f, &u, 4);
	return f;
}

static double rd_lef64(const uint8_t *p)
{
	uint64_t u = (uint64_t)rd_le32(p) | (uint64_t)rd_le32(p + 4) << 32;
	double d;
	memcpy(&d, &u, 8);
	return d;
}

/* The header dict of an .npy file, NUL-terminated. */
static int npy_dict(vecfs_rows *r, char *buf)
{
	char *d = strstr(buf, "'descr'");
	char *fo = strstr(buf, "'fortran_order'");
	char *sh = strstr(buf, "'shape'");
	if (!d || !fo || !sh || buf[0] != '{')
		return fail(r, -EINVAL, 0, "not an .npy header (no descr, fortran_order and shape)");
	/* a key given twice: which one numpy would take is not ours to guess */
	const char *twice = strstr(d + 1, "'descr'") ? "descr" :
			    strstr(fo + 1, "'fortran_order'") ? "fortran_order" :
			    strstr(sh + 1, "'shape'") ? "shape" : NULL;
	if (twice)
		return fail(r, -EINVAL, 0, "'%s' given twice in the .npy header", twice);
	d = strchr(d + 7, ':');
	if (!d)
		return fail(r, -EINVAL, 0, "bad .npy header");
	d++;
	while (*d == ' ')
		d++;
	r->npy_f8 = !strncmp(d, "'<f8'", 5) || !strncmp(d, "\"<f8\"", 5);
	if (!r->npy_f8 && strncmp(d, "'<f4'", 5) && strncmp(d, "\"<f4\"", 5)) {
		char *e = strchr(d, ',');
		int l = e ? (int)(e - d) : 10;
		return fail(r, -EINVAL, 0,
			    "dtype %.*s: expected little-endian float32 ('<f4') or float64 ('<f8')", l, d);
	}
	fo = strchr(fo + 15, ':');
	if (!fo)
		return fail(r, -EINVAL, 0, "bad .npy header");
	fo++;
	while (*fo == ' ')
		fo++;
	if (!strncmp(fo, "True", 4))
		return fail(r, -EINVAL, 0, "fortran_order is True: expected a C-order array");
	if (strncmp(fo, "False", 5))
		return fail(r, -EINVAL, 0, "bad fortran_order in the .npy header");
	sh = strchr(sh + 7, '(');
	if (!sh)
		return fail(r, -EINVAL, 0, "bad shape in the .npy header");
	sh++;
	uint64_t dims[3];
	int nd = 0;
	for (;;) {
		while (*sh == ' ')
			sh++;
		if (*sh == ')')
			break;
		char *e;
		if (*sh < '0' || *sh > '9')
			return fail(r, -EINVAL, 0, "bad shape in the .npy header");
		errno = 0;
		unsigned long long v = strtoull(sh, &e, 10);
		if (errno == ERANGE)
			return fail(r, -EINVAL, 0, "shape value %.24s... is too large", sh);
		if (nd < 3)
			dims[nd] = v;
		nd++;
		sh = e;
		while (*sh == ' ' || *sh == 'L')
			sh++;
		if (*sh == ',')
			sh++;
		else if (*sh != ')')
			return fail(r, -EINVAL, 0, "bad shape in the .npy header");
	}
	if (nd != 2)
		return fail(r, -EINVAL, 0, "shape has %d dimensions: expected a 2-D array (rows, dim)", nd);
	if (dims[1] == 0 || dims[1] > VECFS_DIM_MAX)
		return fail(r, -EINVAL, 0, "dimension %llu is out of range 1..%d",
			    (unsigned long long)dims[1], VECFS_DIM_MAX);
	r->npy_rows = dims[0];
	r->rowneed = (size_t)dims[1] * (r->npy_f8 ? 8 : 4);
	r->npy_stage = 2;
	return 0;
}

static int npy_feed_header(vecfs_rows *r, const uint8_t **pp, size_t *np)
{
	const uint8_t *p = *pp;
	size_t n = *np;
	int rc = 0;
	while (n && r->npy_stage < 2) {
		size_t want = r->npy_stage == 0 ? 10 : r->npy_hlen;
		if (r->npy_stage == 0 && r->llen >= 8 && (unsigned char)r->line[6] >= 2)
			want = 12;
		size_t take = want > r->llen ? want - r->llen : 0;
		if (take > n)
			take = n;
		if ((rc = line_add(r, p, take, 0)))
			break;
		p += take;
		n -= take;
		if (r->llen >= 6 && memcmp(r->line, "\x93NUMPY", 6)) {
			rc = fail(r, -EINVAL, 0, "not an .npy file (no \\x93NUMPY magic)");
			break;
		}
		/* the version as soon as its byte is in: what follows it is
		 * read by it (whatever the pieces, the same answer) */
		if (r->npy_stage == 0 && r->llen >= 7 && (uint8_t)r->line[6] != 1 &&
		    (uint8_t)r->line[6] != 2 && (uint8_t)r->line[6] != 3) {
			rc = fail(r, -EINVAL, 0, ".npy format version %u is not supported",
				  (unsigned)(uint8_t)r->line[6]);
			break;
		}
		if (r->llen < want)
			continue;
		if (r->npy_stage == 0) {
			const uint8_t *h = (const uint8_t *)r->line;
			unsigned major = h[6];
			size_t hl;
			if (major == 1) {
				hl = (size_t)h[8] | (size_t)h[9] << 8;
				r->npy_hlen = 10 + hl;
			} else { /* 2 or 3 */
				if (r->llen < 12)
					continue;
				hl = rd_le32(h + 8);
				r->npy_hlen = 12 + hl;
			}
			if (hl > VECFS_ROWS_NPY_HEADER_MAX) {
				rc = fail(r, -EINVAL, 0, ".npy header of %zu bytes is too long", hl);
				break;
			}
			r->npy_stage = 1;
		} else {
			size_t off = (unsigned char)r->line[6] == 1 ? 10 : 12;
			/* the dict, NUL-terminated in place (line_add() keeps a byte) */
			memmove(r->line, r->line + off, r->llen - off);
			r->line[r->llen - off] = 0;
			rc = npy_dict(r, r->line);
			if (rc == 0)
				line_drop(r);
			break;
		}
	}
	*pp = p;
	*np = n;
	return rc;
}

static int bin_row_done(vecfs_rows *r)
{
	uint64_t where = ++r->rowno;
	uint32_t dim;
	if (r->fmt == VECFS_ROWS_NPY) {
		dim = (uint32_t)(r->rowneed / (r->npy_f8 ? 8 : 4));
		if (where > r->npy_rows)
			return fail(r, -EINVAL, where, "data beyond the %llu rows the header declares",
				    (unsigned long long)r->npy_rows);
		for (uint32_t i = 0; i < dim && !r->npy_f8; i++)
			r->vec[i] = rd_lef32(r->row + 4 * i);
		for (uint32_t i = 0; i < dim && r->npy_f8; i++) {
			double v = rd_lef64(r->row + 8 * i);
			r->vec[i] = (float)v;
			/* NaN and ±Inf pass on to the row check, which names them */
			if (isfinite(v) && isinf(r->vec[i]))
				return fail(r, -EINVAL, where, "value %u (%g) overflows float32", i + 1, v);
		}
	} else if (r->fmt == VECFS_ROWS_FVECS) {
		dim = rd_le32(r->row);
		for (uint32_t i = 0; i < dim; i++)
			r->vec[i] = rd_lef32(r->row + 4 + 4 * i);
	} else {
		dim = rd_le32(r->row);
		for (uint32_t i = 0; i < dim; i++)
			r->vec[i] = (float)r->row[4 + i];
	}
	vecfs_parsed_row row = {where, NULL, 0, r->vec, dim, NULL, 0, 0, 0};
	return put(r, &row);
}

static int bin_feed(vecfs_rows *r, const uint8_t *p, size_t n)
{
	int rc;
	if (r->fmt == VECFS_ROWS_NPY && r->npy_stage < 2) {
		if ((rc = npy_feed_header(r, &p, &n)))
			return rc;
	}
	while (n) {
		size_t take = r->rowneed - r->rowlen;
		if (take > n)
			take = n;
		memcpy(r->row + r->rowlen, p, take);
		r->rowlen += take;
		p += take;
		n -= take;
		if (r->rowlen < r->rowneed)
			break;
		if (r->fmt != VECFS_ROWS_NPY && r->rowneed == 4) {
			int32_t d = (int32_t)rd_le32(r->row);
			if (d <= 0 || d > VECFS_DIM_MAX)
				return fail(r, -EINVAL, r->rowno + 1, "dimension %d is out of range 1..%d", d,
					    VECFS_DIM_MAX);
			if (r->dim && (uint32_t)d != r->dim)
				return fail(r, -EINVAL, r->rowno + 1, "dimension %d, expected %u (%s)", d, r->dim,
					    r->dim_from_store ? "the store's dim"
							      : "the dimension of the file's first row");
			r->rowneed = 4 + (size_t)d * (r->fmt == VECFS_ROWS_FVECS ? 4 : 1);
			continue;
		}
		if ((rc = bin_row_done(r)))
			return rc;
		r->rowlen = 0;
		if (r->fmt != VECFS_ROWS_NPY)
			r->rowneed = 4;
	}
	return 0;
}

/* ---------------------------------------------------------------- interface */

vecfs_rows *vecfs_rows_new(vecfs_rows_format fmt, vecfs_rows_fn emit, vecfs_rows_mem_fn mem,
			   void *arg)
{
	if ((int)fmt < VECFS_ROWS_CSV || fmt > VECFS_ROWS_NPY || !emit)
		return NULL;
	vecfs_rows *r = calloc(1, sizeof *r);
	if (!r)
		return NULL;
	r->fmt = fmt;
	r->emit = emit;
	r->mem = mem;
	r->arg = arg;
	vecfs_rows_reset(r);
	return r;
}

int vecfs_rows_feed(vecfs_rows *r, const void *buf, size_t len)
{
	if (r->dead)
		return -EINVAL;
	if (!len)
		return 0;
	int rc = scratch_get(r);
	if (rc)
		return rc;
	return is_text(r) ? text_feed(r, buf, len) : bin_feed(r, buf, len);
}

int vecfs_rows_end(vecfs_rows *r)
{
	if (r->dead)
		return -EINVAL;
	if (is_text(r)) {
		if (!r->llen)
			return 0;
		int rc = text_line(r, r->line, r->llen);
		r->llen = 0;
		return rc;
	}
	if (r->fmt == VECFS_ROWS_NPY) {
		if (r->npy_stage < 2)
			return fail(r, -EINVAL, 0, "truncated .npy header (%zu bytes)", r->llen);
		if (r->rowlen)
			return fail(r, -EINVAL, r->rowno + 1, "truncated: %zu of %zu bytes", r->rowlen,
				    r->rowneed);
		if (r->rowno < r->npy_rows)
			return fail(r, -EINVAL, r->rowno + 1,
				    "truncated: the header declares %llu rows, the file holds %llu",
				    (unsigned long long)r->npy_rows, (unsigned long long)r->rowno);
		return 0;
	}
	if (r->rowlen)
		return fail(r, -EINVAL, r->rowno + 1, "truncated: %zu of %zu bytes", r->rowlen, r->rowneed);
	return 0;
}

const char *vecfs_rows_error(const vecfs_rows *r, uint64_t *where)
{
	if (where)
		*where = r->where;
	return r->dead && r->why[0] ? r->why : NULL;
}

void vecfs_rows_expect_dim(vecfs_rows *r, uint32_t dim, int from_store)
{
	r->dim = dim;
	r->dim_from_store = from_store;
}

uint64_t vecfs_rows_count(const vecfs_rows *r)
{
	return r->emitted;
}

void vecfs_rows_release(vecfs_rows *r)
{
	line_drop(r);
	r->filter_line = 0; /* a commit took it */
	free(r->key);
	charge(r, -(int64_t)r->kcap);
	r->key = NULL;
	r->kcap = 0;
	if (r->scratch)
		charge(r, -(int64_t)scratch_size(r));
	free(r->vec);
	free(r->row);
	r->vec = NULL;
	r->row = NULL;
	r->scratch = 0;
}

void vecfs_rows_reset(vecfs_rows *r)
{
	vecfs_rows_release(r);
	r->dead = 0;
	r->why[0] = 0;
	r->where = 0;
	r->emitted = 0;
	r->dim = 0;
	r->dim_from_store = 0;
	r->lineno = r->rowno = 0;
	r->filter_line = 0;
	r->rowlen = 0;
	r->rowneed = r->fmt == VECFS_ROWS_NPY ? 0 : 4;
	r->npy_stage = 0;
	r->npy_f8 = 0;
	r->npy_hlen = 0;
	r->npy_rows = 0;
}

void vecfs_rows_free(vecfs_rows *r)
{
	if (!r)
		return;
	vecfs_rows_release(r);
	free(r);
}
