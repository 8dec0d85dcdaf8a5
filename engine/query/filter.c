/*
 * engine/query/filter.c - payload filters.  Compiling: the text is checked as
 * JSON by a loop with a bit stack (no recursion, any depth), its size,
 * depth and value count against the limits, then parsed into values and
 * compiled into a tree of logical and field nodes.  Matching: the tree is
 * walked (its depth is bounded by the limits); a field's value is found by
 * walking the payload's objects along the dotted path, and other values
 * are skipped by counting brackets, so a deep payload costs no stack.
 */
#include "filter.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codec/codec.h"
#include "io.h"
#include "vecfs.h"

enum { J_NULL, J_FALSE, J_TRUE, J_NUM, J_STR, J_ARR, J_OBJ };

typedef struct jv { /* a value of the filter's text */
	uint8_t t;
	uint32_t n, first, next; /* members or elements: the first, then next
				  * (0: none; value 0 is the root) */
	double num;
	const char *s, *key;     /* decoded: the string; the member name */
	uint32_t slen, klen;
} jv;

enum { F_AND, F_OR, F_NOT, F_EQ, F_NE, F_GT, F_GTE, F_LT, F_LTE, F_IN, F_NIN, F_EXISTS };

typedef struct fnode {
	uint8_t op;
	uint8_t exists;          /* F_EXISTS: wanted */
	uint32_t first, n;       /* F_AND, F_OR, F_NOT: kids[first..first + n) */
	const char *path;        /* the others: the field's dotted path */
	uint32_t plen;
	const jv *arg;           /* the operand */
} fnode;

struct vf_filter {
	jv *v;
	uint32_t nv, capv;
	char *pool;              /* decoded strings */
	size_t npool;
	fnode *f;
	uint32_t nf, capf;
	uint32_t *kids;
	uint32_t nk;
	uint32_t root;
};

static int fail(char *err, size_t errlen, int rc, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static int fail(char *err, size_t errlen, int rc, const char *fmt, ...)
{
	if (err && errlen) {
		int o = snprintf(err, errlen, "filter: ");
		va_list ap;
		va_start(ap, fmt);
		if (o > 0 && (size_t)o < errlen)
			vsnprintf(err + o, errlen - (size_t)o, fmt, ap);
		va_end(ap);
	}
	return rc;
}

/* ------------------------------------------------------------ JSON tokens */

#define ws vf_json_ws
#define str_next vf_json_str_next

/* The string at p[*i] (its opening quote) compared by bytes with s[0..sl):
 * 0 and *cmp (<0, 0, >0), *i past the string; -1 when it is not one. */
static int str_cmp(const char *p, size_t n, size_t *i, const char *s, size_t sl, int *cmp)
{
	unsigned char u[4];
	size_t k = 0, e;
	int c = 0, m;
	if (*i >= n || p[*i] != '"')
		return -1;
	(*i)++;
	for (e = *i; e < n && p[e] != '"' && p[e] != '\\' && (unsigned char)p[e] >= 0x20; e++)
		;
	if (e < n && p[e] == '"') { /* no escapes: the bytes as they are */
		size_t l = e - *i;
		c = memcmp(p + *i, s, l < sl ? l : sl);
		*cmp = c ? c : l < sl ? -1 : l > sl;
		*i = e + 1;
		return 0;
	}
	while ((m = str_next(p, n, i, u)) > 0)
		for (int j = 0; j < m; j++, k++)
			if (c == 0)
				c = k >= sl ? 1 : (int)u[j] - (int)(unsigned char)s[k];
	if (m < 0)
		return -1;
	if (c == 0 && k < sl)
		c = -1;
	*cmp = c;
	return 0;
}

/* The end of the number at p[i], or 0 when there is none. */
static size_t num_end(const char *p, size_t n, size_t i)
{
	return vf_json_number(p, n, i, NULL, 0);
}

/* The value of the number p[a..b): 0, or -1 without memory for a long one. */
static int num_value(const char *p, size_t a, size_t b, double *out)
{
	/* an integer of up to 15 digits is exact as a double: no strtod */
	size_t i = a + (p[a] == '-'), j = i;
	uint64_t u = 0;
	while (j < b && j - i < 15 && p[j] >= '0' && p[j] <= '9')
		u = u * 10 + (uint64_t)(p[j++] - '0');
	if (j == b) {
		*out = p[a] == '-' ? -(double)u : (double)u;
		return 0;
	}
	char buf[128], *t = buf;
	if (b - a >= sizeof buf && !(t = vf_malloc(b - a + 1)))
		return -1;
	memcpy(t, p + a, b - a);
	t[b - a] = 0;
	*out = strtod(t, NULL);
	if (t != buf)
		free(t);
	return 0;
}

/* The end of the literal word (true, false, null) at p[i], or 0. */
static size_t word_end(const char *p, size_t n, size_t i, const char *w)
{
	size_t l = strlen(w);
	return n - i >= l && !memcmp(p + i, w, l) ? i + l : 0;
}

/* The end of the string, number or word at p[i], or 0 when it is none. */
static size_t scalar_end(const char *p, size_t n, size_t i)
{
	unsigned char u[4];
	int m;
	if (i >= n)
		return 0;
	switch (p[i]) {
	case '"':
		i++;
		while ((m = str_next(p, n, &i, u)) > 0)
			;
		return m == 0 ? i : 0;
	case 't':
		return word_end(p, n, i, "true");
	case 'f':
		return word_end(p, n, i, "false");
	case 'n':
		return word_end(p, n, i, "null");
	default:
		return num_end(p, n, i);
	}
}

/* The end of the value at p[i] (objects and arrays by counting brackets,
 * nothing else checked of them), or 0 when none can be read there. */
static size_t skip_value(const char *p, size_t n, size_t i)
{
	if (i >= n)
		return 0;
	if (p[i] != '{' && p[i] != '[')
		return scalar_end(p, n, i);
	size_t depth = 0;
	while (i < n) {
		char c = p[i];
		if (c == '"') {
			if (!(i = scalar_end(p, n, i)))
				return 0;
			continue;
		}
		if (c == '{' || c == '[')
			depth++;
		else if ((c == '}' || c == ']') && --depth == 0)
			return i + 1;
		i++;
	}
	return 0;
}

/* ------------------------------------------------------------ parsing */

/* The string at p[*i] decoded into the pool. */
static void str_decode(vf_filter *f, const char *p, size_t n, size_t *i, const char **s,
		       uint32_t *sl)
{
	unsigned char u[4];
	int m;
	char *d = f->pool + f->npool;
	(*i)++;
	while ((m = str_next(p, n, i, u)) > 0) {
		memcpy(f->pool + f->npool, u, (size_t)m);
		f->npool += (size_t)m;
	}
	*s = d;
	*sl = (uint32_t)(f->pool + f->npool - d);
}

/* The value at p[*i] of a text vf_json_value() passed, as f->v[returned]
 * (depth: bounded by the check). */
static uint32_t parse(vf_filter *f, const char *p, size_t n, size_t *i)
{
	uint32_t me = f->nv++;
	jv *v = &f->v[me];
	memset(v, 0, sizeof *v);
	*i = ws(p, n, *i);
	char c = p[*i];
	if (c == '{' || c == '[') {
		char close = c == '{' ? '}' : ']';
		uint32_t last = 0;
		v->t = c == '{' ? J_OBJ : J_ARR;
		*i = ws(p, n, *i + 1);
		while (p[*i] != close) {
			const char *key = NULL;
			uint32_t klen = 0;
			if (c == '{') {
				str_decode(f, p, n, i, &key, &klen);
				*i = ws(p, n, *i) + 1; /* ':' */
			}
			uint32_t k = parse(f, p, n, i);
			v = &f->v[me];
			f->v[k].key = key;
			f->v[k].klen = klen;
			if (last)
				f->v[last].next = k;
			else
				v->first = k;
			last = k;
			v->n++;
			*i = ws(p, n, *i);
			if (p[*i] == ',')
				*i = ws(p, n, *i + 1);
		}
		(*i)++;
		return me;
	}
	size_t e = scalar_end(p, n, *i);
	switch (c) {
	case '"':
		v->t = J_STR;
		str_decode(f, p, n, i, &v->s, &v->slen);
		break;
	case 't': v->t = J_TRUE; break;
	case 'f': v->t = J_FALSE; break;
	case 'n': v->t = J_NULL; break;
	default:
		v->t = J_NUM;
		if (num_value(p, *i, e, &v->num))
			v->num = 0; /* (a number of 128 digits and more, no memory) */
		break;
	}
	*i = e;
	return me;
}

/* ------------------------------------------------------------ compiling */

static int new_node(vf_filter *f, uint8_t op, uint32_t *out)
{
	if (f->nf >= f->capf)
		return -E2BIG;
	*out = f->nf++;
	memset(&f->f[*out], 0, sizeof(fnode));
	f->f[*out].op = op;
	return 0;
}

/* A logical node of op with n kids, their slots reserved. */
static int new_logical(vf_filter *f, uint8_t op, uint32_t n, uint32_t *out)
{
	int rc = new_node(f, op, out);
	if (rc)
		return rc;
	if (f->nk + n > f->capf)
		return -E2BIG;
	f->f[*out].first = f->nk;
	f->f[*out].n = n;
	f->nk += n;
	return 0;
}

static const struct {
	const char *name;
	uint8_t op;
} ops[] = {{"$eq", F_EQ}, {"$ne", F_NE}, {"$gt", F_GT}, {"$gte", F_GTE}, {"$lt", F_LT},
	   {"$lte", F_LTE}, {"$in", F_IN}, {"$nin", F_NIN}, {"$exists", F_EXISTS}};

static int is_op_object(const vf_filter *f, const jv *c)
{
	if (c->t != J_OBJ || c->n == 0)
		return 0;
	for (uint32_t k = c->first; k; k = f->v[k].next)
		if (f->v[k].klen == 0 || f->v[k].key[0] != '$')
			return 0;
	return 1;
}

/* A field's test: op of the value at path with operand a. */
static int field_node(vf_filter *f, uint8_t op, const char *path, uint32_t plen, const jv *a,
		      uint32_t *out, char *err, size_t errlen)
{
	int rc = new_node(f, op, out);
	if (rc)
		return fail(err, errlen, rc, "more than %d parts", VF_FILTER_MAX_NODES);
	fnode *x = &f->f[*out];
	x->path = path;
	x->plen = plen;
	x->arg = a;
	x->exists = a->t == J_TRUE;
	return 0;
}

/* One operator of a field's condition object. */
static int compile_op(vf_filter *f, const char *path, uint32_t plen, const jv *a,
		      uint32_t *out, char *err, size_t errlen)
{
	size_t o;
	for (o = 0; o < sizeof ops / sizeof ops[0]; o++)
		if (strlen(ops[o].name) == a->klen && !memcmp(ops[o].name, a->key, a->klen))
			break;
	if (o == sizeof ops / sizeof ops[0])
		return fail(err, errlen, -EINVAL, "unknown operator '%.*s' (on field '%.*s')",
			    (int)(a->klen > 40 ? 40 : a->klen), a->key, (int)(plen > 40 ? 40 : plen), path);
	uint8_t op = ops[o].op;
	if ((op == F_IN || op == F_NIN) && a->t != J_ARR)
		return fail(err, errlen, -EINVAL, "%s takes an array (on field '%.*s')", ops[o].name,
			    (int)(plen > 40 ? 40 : plen), path);
	if (op == F_EXISTS && a->t != J_TRUE && a->t != J_FALSE)
		return fail(err, errlen, -EINVAL, "$exists takes true or false (on field '%.*s')",
			    (int)(plen > 40 ? 40 : plen), path);
	return field_node(f, op, path, plen, a, out, err, errlen);
}

static int compile_doc(vf_filter *f, const jv *d, uint32_t *out, char *err, size_t errlen);

/* One member of a filter object: a logical operator or a field. */
static int compile_member(vf_filter *f, const jv *m, uint32_t *out, char *err, size_t errlen)
{
	int rc;
	uint32_t me;
	if (m->klen && m->key[0] == '$') {
		int and = m->klen == 4 && !memcmp(m->key, "$and", 4);
		int or = m->klen == 3 && !memcmp(m->key, "$or", 3);
		if (m->klen == 4 && !memcmp(m->key, "$not", 4)) {
			if (m->t != J_OBJ)
				return fail(err, errlen, -EINVAL, "$not takes a filter object");
			if ((rc = new_logical(f, F_NOT, 1, &me)))
				return fail(err, errlen, rc, "more than %d parts", VF_FILTER_MAX_NODES);
			*out = me;
			return compile_doc(f, m, &f->kids[f->f[me].first], err, errlen);
		}
		if (!and && !or)
			return fail(err, errlen, -EINVAL, "unknown operator '%.*s' (logical ones: $and, $or, $not)",
				    (int)(m->klen > 40 ? 40 : m->klen), m->key);
		if (m->t != J_ARR)
			return fail(err, errlen, -EINVAL, "%s takes an array of filter objects",
				    and ? "$and" : "$or");
		if ((rc = new_logical(f, and ? F_AND : F_OR, m->n, &me)))
			return fail(err, errlen, rc, "more than %d parts", VF_FILTER_MAX_NODES);
		*out = me;
		uint32_t j = 0;
		for (uint32_t k = m->first; k; k = f->v[k].next, j++) {
			if (f->v[k].t != J_OBJ)
				return fail(err, errlen, -EINVAL, "%s takes an array of filter objects",
					    and ? "$and" : "$or");
			if ((rc = compile_doc(f, &f->v[k], &f->kids[f->f[me].first + j], err, errlen)))
				return rc;
		}
		return 0;
	}
	if (!is_op_object(f, m)) /* a bare value: $eq */
		return field_node(f, F_EQ, m->key, m->klen, m, out, err, errlen);
	if ((rc = new_logical(f, F_AND, m->n, &me)))
		return fail(err, errlen, rc, "more than %d parts", VF_FILTER_MAX_NODES);
	*out = me;
	uint32_t j = 0;
	for (uint32_t k = m->first; k; k = f->v[k].next, j++)
		if ((rc = compile_op(f, m->key, m->klen, &f->v[k], &f->kids[f->f[me].first + j], err,
				     errlen)))
			return rc;
	return 0;
}

/* A filter object: its members ANDed. */
static int compile_doc(vf_filter *f, const jv *d, uint32_t *out, char *err, size_t errlen)
{
	uint32_t me;
	int rc;
	if (d->t != J_OBJ)
		return fail(err, errlen, -EINVAL, "a filter is a JSON object");
	if ((rc = new_logical(f, F_AND, d->n, &me)))
		return fail(err, errlen, rc, "more than %d parts", VF_FILTER_MAX_NODES);
	*out = me;
	uint32_t j = 0;
	for (uint32_t k = d->first; k; k = f->v[k].next, j++)
		if ((rc = compile_member(f, &f->v[k], &f->kids[f->f[me].first + j], err, errlen)))
			return rc;
	return 0;
}

void vf_filter_free(vf_filter *f)
{
	if (!f)
		return;
	free(f->v);
	free(f->pool);
	free(f->f);
	free(f->kids);
	free(f);
}

int vf_filter_compile(const char *text, size_t len, vf_filter **out, char *err, size_t errlen)
{
	uint32_t depth, nv;
	*out = NULL;
	if (len > VF_FILTER_MAX_BYTES)
		return fail(err, errlen, -E2BIG, "%zu bytes, more than %d", len, VF_FILTER_MAX_BYTES);
	/* strings are compared by bytes: bytes that are not UTF-8 would
	 * match nothing a payload (JSON, so UTF-8) can hold */
	if (!vecfs_utf8_valid(text, len))
		return fail(err, errlen, -EINVAL, "not valid UTF-8");
	/* one JSON value, checked at any depth: a bit a level */
	uint8_t *stack = vf_calloc(len / 8 + 1, 1);
	if (!stack)
		return fail(err, errlen, -ENOMEM, "out of memory");
	size_t bad = 0;
	int rc = vf_json_value(text, len, &bad, len, stack, &depth, &nv, NULL, 0);
	free(stack);
	if (rc == 0 && (bad = ws(text, len, bad)) != len)
		rc = -EINVAL;
	if (rc)
		return fail(err, errlen, -EINVAL, "not JSON at byte %zu", bad + 1);
	if (depth > VF_FILTER_MAX_DEPTH)
		return fail(err, errlen, -E2BIG, "nested %u deep, more than %d", depth,
			    VF_FILTER_MAX_DEPTH);
	if (nv > VF_FILTER_MAX_NODES)
		return fail(err, errlen, -E2BIG, "%u values, more than %d", nv, VF_FILTER_MAX_NODES);
	vf_filter *f = vf_calloc(1, sizeof *f);
	if (!f)
		return fail(err, errlen, -ENOMEM, "out of memory");
	f->capv = nv;
	f->capf = 2 * nv + 2; /* ($not: two nodes for one value) */
	f->v = vf_malloc(sizeof(jv) * nv);
	f->pool = vf_malloc(len + 1);
	f->f = vf_malloc(sizeof(fnode) * f->capf);
	f->kids = vf_malloc(sizeof(uint32_t) * f->capf);
	if (!f->v || !f->pool || !f->f || !f->kids) {
		vf_filter_free(f);
		return fail(err, errlen, -ENOMEM, "out of memory");
	}
	size_t i = 0;
	parse(f, text, len, &i);
	if ((rc = compile_doc(f, &f->v[0], &f->root, err, errlen))) {
		vf_filter_free(f);
		return rc;
	}
	*out = f;
	return 0;
}

/* ------------------------------------------------------------ matching */

/* Where the field at the dotted path is in the payload: 1 and *at, or 0. */
static int lookup(const char *p, size_t n, const char *path, uint32_t plen, size_t *at)
{
	size_t i = ws(p, n, 0);
	for (uint32_t s = 0; s <= plen;) {
		const char *dot = memchr(path + s, '.', plen - s);
		uint32_t e = dot ? (uint32_t)(dot - path) : plen;
		size_t found = 0;
		if (i >= n || p[i] != '{')
			return 0;
		i = ws(p, n, i + 1);
		if (i < n && p[i] == '}')
			return 0;
		for (;;) { /* the last member of that name counts */
			int c;
			if (str_cmp(p, n, &i, path + s, e - s, &c))
				return 0;
			i = ws(p, n, i);
			if (i >= n || p[i] != ':')
				return 0;
			i = ws(p, n, i + 1);
			if (c == 0)
				found = i + 1;
			if (!(i = skip_value(p, n, i)))
				return 0;
			i = ws(p, n, i);
			if (i < n && p[i] == ',') {
				i = ws(p, n, i + 1);
				continue;
			}
			if (i < n && p[i] == '}')
				break;
			return 0;
		}
		if (!found)
			return 0;
		i = found - 1;
		s = e + 1;
	}
	*at = i;
	return 1;
}

/* The number at p[i]: 1 and *x, or 0. */
static int number_at(const char *p, size_t n, size_t i, double *x)
{
	size_t e = num_end(p, n, i);
	return e && num_value(p, i, e, x) == 0;
}

/* Is the payload value at p[i] equal to a as JSON (numbers by value)?
 * The recursion follows a, whose depth the limits bound. */
static int val_eq(const vf_filter *f, const char *p, size_t n, size_t i, const jv *a)
{
	double x;
	int c;
	if (i >= n)
		return 0;
	switch (a->t) {
	case J_NULL:
		return word_end(p, n, i, "null") != 0;
	case J_TRUE:
		return word_end(p, n, i, "true") != 0;
	case J_FALSE:
		return word_end(p, n, i, "false") != 0;
	case J_NUM:
		return number_at(p, n, i, &x) && x == a->num;
	case J_STR:
		return p[i] == '"' && str_cmp(p, n, &i, a->s, a->slen, &c) == 0 && c == 0;
	case J_ARR: {
		if (p[i] != '[')
			return 0;
		i = ws(p, n, i + 1);
		for (uint32_t k = a->first; k; k = f->v[k].next) {
			if (i >= n || p[i] == ']' || !val_eq(f, p, n, i, &f->v[k]) ||
			    !(i = skip_value(p, n, i)))
				return 0;
			i = ws(p, n, i);
			if (i < n && p[i] == ',')
				i = ws(p, n, i + 1);
			else if (f->v[k].next)
				return 0;
		}
		return i < n && p[i] == ']';
	}
	case J_OBJ: {
		uint32_t m = 0;
		if (p[i] != '{')
			return 0;
		i = ws(p, n, i + 1);
		if (i < n && p[i] == '}')
			return a->n == 0;
		for (;;) {
			size_t ki = i;
			uint32_t k;
			for (k = a->first; k; k = f->v[k].next) {
				ki = i;
				if (str_cmp(p, n, &ki, f->v[k].key, f->v[k].klen, &c))
					return 0;
				if (c == 0)
					break;
			}
			if (!k)
				return 0;
			i = ws(p, n, ki);
			if (i >= n || p[i] != ':')
				return 0;
			i = ws(p, n, i + 1);
			if (!val_eq(f, p, n, i, &f->v[k]) || !(i = skip_value(p, n, i)))
				return 0;
			m++;
			i = ws(p, n, i);
			if (i < n && p[i] == ',') {
				i = ws(p, n, i + 1);
				continue;
			}
			return i < n && p[i] == '}' && m == a->n;
		}
	}
	}
	return 0;
}

/* $gt, $gte, $lt, $lte of the value at p[i] against a: numbers with
 * numbers, strings with strings by bytes; anything else does not match. */
static int val_cmp(const char *p, size_t n, size_t i, const jv *a, uint8_t op)
{
	int c;
	double x;
	if (i >= n)
		return 0;
	if (a->t == J_NUM && p[i] != '"') {
		if (!number_at(p, n, i, &x))
			return 0;
		c = x < a->num ? -1 : x > a->num;
	} else if (a->t == J_STR && p[i] == '"') {
		if (str_cmp(p, n, &i, a->s, a->slen, &c))
			return 0;
	} else {
		return 0;
	}
	switch (op) {
	case F_GT: return c > 0;
	case F_GTE: return c >= 0;
	case F_LT: return c < 0;
	default: return c <= 0;
	}
}

static int test_one(const vf_filter *f, uint8_t op, const jv *a, const char *p, size_t n, size_t i)
{
	return op == F_EQ || op == F_NE || op == F_IN || op == F_NIN ? val_eq(f, p, n, i, a)
								    : val_cmp(p, n, i, a, op);
}

/* The value at p[i] passes op with a, or, an array, one of its elements does. */
static int test_value(const vf_filter *f, uint8_t op, const jv *a, const char *p, size_t n,
		      size_t i)
{
	if (test_one(f, op, a, p, n, i))
		return 1;
	if (p[i] != '[')
		return 0;
	i = ws(p, n, i + 1);
	if (i < n && p[i] == ']')
		return 0;
	for (;;) {
		if (test_one(f, op, a, p, n, i))
			return 1;
		if (!(i = skip_value(p, n, i)))
			return 0;
		i = ws(p, n, i);
		if (i >= n || p[i] != ',')
			return 0;
		i = ws(p, n, i + 1);
	}
}

static int eval(const vf_filter *f, uint32_t ni, const char *p, size_t n)
{
	const fnode *x = &f->f[ni];
	size_t at = 0;
	int found;
	switch (x->op) {
	case F_AND:
		for (uint32_t k = 0; k < x->n; k++)
			if (!eval(f, f->kids[x->first + k], p, n))
				return 0;
		return 1;
	case F_OR:
		for (uint32_t k = 0; k < x->n; k++)
			if (eval(f, f->kids[x->first + k], p, n))
				return 1;
		return 0;
	case F_NOT:
		return !eval(f, f->kids[x->first], p, n);
	}
	found = p && n && lookup(p, n, x->path, x->plen, &at);
	switch (x->op) {
	case F_EXISTS:
		return found == x->exists;
	case F_NE:
		return !(found && test_value(f, F_EQ, x->arg, p, n, at));
	case F_IN:
	case F_NIN: {
		int any = 0;
		for (uint32_t k = x->arg->first; found && k && !any; k = f->v[k].next)
			any = test_value(f, F_EQ, &f->v[k], p, n, at);
		return x->op == F_IN ? any : !any;
	}
	default:
		return found && test_value(f, x->op, x->arg, p, n, at);
	}
}

int vf_filter_match(const vf_filter *f, const void *payload, size_t plen)
{
	return eval(f, f->root, payload, payload ? plen : 0);
}

/* ------------------------------------------------------------ terms of a payload */

typedef struct walk {
	vf_term_fn fn;
	void *ctx;
	char path[VF_TERM_PATH_MAX];
	char val[VF_TERM_STR_MAX];
	unsigned terms;
	int stop; /* VF_TERMS_PARTIAL, or fn's nonzero return */
} walk;

static void give(walk *w, vf_term *t, uint32_t pl)
{
	if (w->terms++ == VF_TERMS_MAX) {
		w->stop = VF_TERMS_PARTIAL;
		return;
	}
	t->path = w->path;
	t->plen = pl;
	int rc = w->fn(t, w->ctx);
	if (rc)
		w->stop = rc;
}

/* The scalar at p[i] given as a term of path[0..pl): past it, or 0 when
 * it is no scalar (w->stop set when the walk must end). */
static size_t walk_scalar(walk *w, const char *p, size_t n, size_t i, uint32_t pl)
{
	vf_term t = {0};
	size_t e;
	if (p[i] == '"') {
		unsigned char u[4];
		int m;
		uint32_t l = 0;
		i++;
		while ((m = str_next(p, n, &i, u)) > 0)
			for (int j = 0; j < m; j++) {
				if (l == VF_TERM_STR_MAX || u[j] == 0)
					w->stop = VF_TERMS_PARTIAL;
				else
					w->val[l++] = (char)u[j];
			}
		if (m < 0)
			return 0;
		t.type = VF_T_STR;
		t.s = w->val;
		t.slen = l;
		e = i;
	} else if ((e = word_end(p, n, i, "true"))) {
		t.type = VF_T_TRUE;
	} else if ((e = word_end(p, n, i, "false"))) {
		t.type = VF_T_FALSE;
	} else if ((e = word_end(p, n, i, "null"))) {
		t.type = VF_T_NULL;
	} else if ((e = num_end(p, n, i))) {
		if (e - i >= 128) { /* num_value() would allocate: not the same each time */
			w->stop = VF_TERMS_PARTIAL;
			return 0;
		}
		num_value(p, i, e, &t.num);
		t.type = VF_T_NUM;
		if (t.num == 0)
			t.num = 0; /* -0 == 0 */
	} else {
		return 0;
	}
	if (!w->stop)
		give(w, &t, pl);
	return e;
}

/* The array at p[i] (its '['), its scalar elements terms of path[0..pl). */
static size_t walk_array(walk *w, const char *p, size_t n, size_t i, uint32_t pl)
{
	i = ws(p, n, i + 1);
	if (i < n && p[i] == ']')
		return i + 1;
	for (;;) {
		if (i >= n)
			return 0;
		i = p[i] == '{' || p[i] == '[' ? skip_value(p, n, i) : walk_scalar(w, p, n, i, pl);
		if (!i || w->stop)
			return 0;
		i = ws(p, n, i);
		if (i < n && p[i] == ',')
			i = ws(p, n, i + 1);
		else if (i < n && p[i] == ']')
			return i + 1;
		else
			return 0;
	}
}

/* The object at p[i] (its '{') whose members' paths go on from
 * path[0..pl): past it, or 0 (the walk ends). */
static size_t walk_object(walk *w, const char *p, size_t n, size_t i, uint32_t pl, int depth)
{
	i = ws(p, n, i + 1);
	if (i < n && p[i] == '}')
		return i + 1;
	for (;;) {
		unsigned char u[4];
		int m;
		uint32_t q = pl;
		if (i >= n || p[i] != '"')
			return 0;
		if (pl && q < VF_TERM_PATH_MAX)
			w->path[q++] = '.';
		else if (pl)
			w->stop = VF_TERMS_PARTIAL;
		i++;
		while ((m = str_next(p, n, &i, u)) > 0)
			for (int j = 0; j < m; j++) {
				if (q == VF_TERM_PATH_MAX || u[j] == 0 || (q == 0 && u[j] == 0xff))
					w->stop = VF_TERMS_PARTIAL;
				else
					w->path[q++] = (char)u[j];
			}
		if (m < 0 || w->stop)
			return 0;
		i = ws(p, n, i);
		if (i >= n || p[i] != ':')
			return 0;
		i = ws(p, n, i + 1);
		if (i >= n)
			return 0;
		if (p[i] == '{') {
			if (depth == VF_TERM_DEPTH)
				w->stop = VF_TERMS_PARTIAL;
			else
				i = walk_object(w, p, n, i, q, depth + 1);
		} else if (p[i] == '[') {
			i = walk_array(w, p, n, i, q);
		} else {
			i = walk_scalar(w, p, n, i, q);
		}
		if (!i || w->stop)
			return 0;
		i = ws(p, n, i);
		if (i < n && p[i] == ',')
			i = ws(p, n, i + 1);
		else if (i < n && p[i] == '}')
			return i + 1;
		else
			return 0;
	}
}

int vf_payload_terms(const void *payload, size_t plen, vf_term_fn fn, void *ctx)
{
	const char *p = payload;
	if (!p || !plen)
		return 0;
	size_t i = ws(p, plen, 0);
	if (i >= plen || p[i] != '{')
		return 0; /* no field of it can match */
	walk *w = &(walk){.fn = fn, .ctx = ctx};
	if (walk_object(w, p, plen, i, 0, 1))
		return 0;
	return w->stop ? w->stop : VF_TERMS_PARTIAL;
}

/* ------------------------------------------------------------ the view */

uint32_t vf_filter_root(const vf_filter *f)
{
	return f->root;
}

void vf_filter_view(const vf_filter *f, uint32_t node, vf_fnode_view *out)
{
	const fnode *x = &f->f[node];
	*out = (vf_fnode_view){.op = VF_FN_OTHER, .n = 1, .path = x->path, .plen = x->plen};
	switch (x->op) {
	case F_AND: out->op = VF_FN_AND; out->n = x->n; break;
	case F_OR: out->op = VF_FN_OR; out->n = x->n; break;
	case F_EQ: out->op = VF_FN_EQ; break;
	case F_IN: out->op = VF_FN_IN; out->n = x->arg->n; break;
	case F_GT: out->op = VF_FN_GT; break;
	case F_GTE: out->op = VF_FN_GTE; break;
	case F_LT: out->op = VF_FN_LT; break;
	case F_LTE: out->op = VF_FN_LTE; break;
	}
}

uint32_t vf_filter_kid(const vf_filter *f, uint32_t node, uint32_t k)
{
	return f->kids[f->f[node].first + k];
}

int vf_filter_operand(const vf_filter *f, uint32_t node, uint32_t k, vf_term *t)
{
	const fnode *x = &f->f[node];
	const jv *a = x->arg;
	if (x->op == F_IN) {
		uint32_t e = a->first;
		for (uint32_t j = 0; e && j < k; j++)
			e = f->v[e].next;
		if (!e)
			return -1;
		a = &f->v[e];
	}
	memset(t, 0, sizeof *t);
	switch (a->t) {
	case J_NULL: t->type = VF_T_NULL; return 0;
	case J_TRUE: t->type = VF_T_TRUE; return 0;
	case J_FALSE: t->type = VF_T_FALSE; return 0;
	case J_NUM: t->type = VF_T_NUM; t->num = a->num == 0 ? 0 : a->num; return 0;
	case J_STR: t->type = VF_T_STR; t->s = a->s; t->slen = a->slen; return 0;
	}
	return -1;
}
