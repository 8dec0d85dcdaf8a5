/*
 * tests/fuzz/fuzz_filter.c - payload filters (engine/filter.c): the input
 * up to its first NUL byte is a filter's text, the rest a payload (no NUL:
 * the whole input is both).  Compiling gives 0, EINVAL, E2BIG or ENOMEM;
 * a compiled filter matches the payload (copied to a buffer of its exact
 * size) or not, and {"$not": filter} gives the opposite answer, on the
 * payload and on no payload.
 */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "filter.h"

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
	vf_filter_free(g);
	vf_filter_free(f);
	free(neg);
	free(payload);
	return 0;
}
