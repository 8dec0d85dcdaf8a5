/*
 * tests/fuzz/fuzz_filter.c - payload filters (engine/filter.c): the input
 * up to its first NUL byte is a filter's text, the rest a payload (no NUL:
 * the whole input is both).  Compiling gives 0, EINVAL, E2BIG or ENOMEM;
 * a compiled filter matches the payload (copied to a buffer of its exact
 * size) or not, and {"$not": filter} gives the opposite answer, on the
 * payload and on no payload.  The payload's terms (vf_payload_terms(),
 * what the payload index keeps) are the same on a second walk, and when
 * the filter matches a payload whose terms are complete, no field test
 * that the index would answer rules the payload out: a set made from the
 * index holds every match.
 */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "query/filter.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static vf_filter *compile(const char *text, size_t len)
{
	vf_filter *f = NULL;
	char err[128];
	int rc = vf_filter_compile(text, len, &f, err, sizeof err);
	if (rc != 0 && rc != -EINVAL && rc != -E2BIG && rc != -ENOMEM)
		abort();
	if ((rc == 0) != (f != NULL))
		abort();
	return f;
}

/* ------------------------------------------------------------ the terms */

#define MAXT (VF_TERMS_MAX + 1)
typedef struct terms {
	size_t n;
	uint8_t type[MAXT];
	double num[MAXT];
	char path[MAXT][VF_TERM_PATH_MAX];
	uint32_t plen[MAXT];
	char s[MAXT][VF_TERM_STR_MAX];
	uint32_t slen[MAXT];
} terms;

static int keep(const vf_term *t, void *ctx)
{
	terms *ts = ctx;
	if (ts->n == MAXT || t->plen > VF_TERM_PATH_MAX || t->slen > VF_TERM_STR_MAX ||
	    memchr(t->path, 0, t->plen) || (t->plen && (uint8_t)t->path[0] == 0xff) ||
	    (t->type == VF_T_STR && memchr(t->s, 0, t->slen)) ||
	    (t->type == VF_T_NUM && (t->num != t->num || (t->num == 0 && 1 / t->num < 0))))
		abort(); /* past a bound the walk promised */
	size_t i = ts->n++;
	ts->type[i] = t->type;
	ts->num[i] = t->num;
	memcpy(ts->path[i], t->path, t->plen);
	ts->plen[i] = t->plen;
	if (t->type == VF_T_STR)
		memcpy(ts->s[i], t->s, t->slen);
	ts->slen[i] = t->slen;
	return 0;
}

/* Term i against operand a (same path): <0, 0, >0, or 2 of other types. */
static int term_cmp(const terms *ts, size_t i, const vf_term *a)
{
	if (ts->type[i] != a->type)
		return 2;
	if (a->type == VF_T_NUM)
		return ts->num[i] < a->num ? -1 : ts->num[i] > a->num;
	if (a->type != VF_T_STR)
		return 0;
	uint32_t l = ts->slen[i] < a->slen ? ts->slen[i] : a->slen;
	int c = memcmp(ts->s[i], a->s, l); /* any size: 2 is not "other types" */
	return c ? (c > 0) - (c < 0) : ts->slen[i] < a->slen ? -1 : ts->slen[i] > a->slen;
}

/* What a set from the index says of this payload: 1 in it (or the index
 * cannot tell), 0 ruled out. */
static int indexed(const vf_filter *f, uint32_t node, const terms *ts)
{
	vf_fnode_view x;
	vf_filter_view(f, node, &x);
	switch (x.op) {
	case VF_FN_AND:
		for (uint32_t k = 0; k < x.n; k++)
			if (!indexed(f, vf_filter_kid(f, node, k), ts))
				return 0;
		return 1;
	case VF_FN_OR:
		for (uint32_t k = 0; k < x.n; k++)
			if (indexed(f, vf_filter_kid(f, node, k), ts))
				return 1;
		return 0;
	case VF_FN_OTHER:
		return 1;
	}
	for (uint32_t k = 0; k < x.n; k++) {
		vf_term a;
		if (vf_filter_operand(f, node, k, &a))
			return 1;
		for (size_t i = 0; i < ts->n; i++) {
			if (ts->plen[i] != x.plen || memcmp(ts->path[i], x.path, x.plen))
				continue;
			int c = term_cmp(ts, i, &a);
			if (c == 2 || ((x.op >= VF_FN_GT) && a.type != VF_T_NUM && a.type != VF_T_STR))
				continue;
			if (((x.op == VF_FN_EQ || x.op == VF_FN_IN) && c == 0) ||
			    (x.op == VF_FN_GT && c > 0) || (x.op == VF_FN_GTE && c >= 0) ||
			    (x.op == VF_FN_LT && c < 0) || (x.op == VF_FN_LTE && c <= 0))
				return 1;
		}
	}
	return 0;
}

static terms ts1, ts2;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *text = (const char *)data;
	const uint8_t *nul = memchr(data, 0, size);
	size_t tlen = nul ? (size_t)(nul - data) : size;
	const uint8_t *pl = nul ? nul + 1 : data;
	size_t plen = nul ? size - tlen - 1 : size;
	vf_filter *f = compile(text, tlen);
	if (!f)
		return 0;
	char *payload = malloc(plen ? plen : 1);
	char *neg = malloc(tlen + 16);
	if (!payload || !neg)
		abort();
	memcpy(payload, pl, plen);
	memcpy(neg, "{\"$not\": ", 9);
	memcpy(neg + 9, text, tlen);
	neg[9 + tlen] = '}';
	vf_filter *g = compile(neg, tlen + 10);
	int m = vf_filter_match(f, payload, plen), n0 = vf_filter_match(f, NULL, 0);
	if ((m != 0 && m != 1) || (n0 != 0 && n0 != 1))
		abort();
	if (g && (vf_filter_match(g, payload, plen) != !m || vf_filter_match(g, NULL, 0) != !n0))
		abort();
	ts1.n = ts2.n = 0;
	int t1 = vf_payload_terms(payload, plen, keep, &ts1);
	int t2 = vf_payload_terms(payload, plen, keep, &ts2);
	if ((t1 != 0 && t1 != VF_TERMS_PARTIAL) || t1 != t2 || ts1.n != ts2.n ||
	    ts1.n > VF_TERMS_MAX)
		abort();
	for (size_t i = 0; i < ts1.n; i++)
		if (ts1.type[i] != ts2.type[i] || ts1.plen[i] != ts2.plen[i] ||
		    memcmp(ts1.path[i], ts2.path[i], ts1.plen[i]) ||
		    (ts1.type[i] == VF_T_NUM && ts1.num[i] != ts2.num[i]))
			abort();
	if (t1 == 0 && m && !indexed(f, vf_filter_root(f), &ts1))
		abort(); /* a match the index would leave out */
	vf_filter_free(g);
	vf_filter_free(f);
	free(neg);
	free(payload);
	return 0;
}
