/*
 * tests/fuzz/fuzz_rows.c - the library's parsers of the ingest formats
 * (vecfs_rows_*, engine/codec/rows.c).  Byte 0 picks the format (b % 8),
 * byte 1 a piece size (1 + b); the rest is the file.  It is parsed whole
 * and in pieces of that size: the rows, the answer and the reason must be
 * the same; a refusal says why (or is the callback's); rows are within
 * bounds; all memory asked for is given back.
 */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vecfs.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

typedef struct run {
	uint64_t hash;   /* of every row */
	int64_t mem;
	uint64_t rows;
} run;

static uint64_t mix(uint64_t h, const void *p, size_t n)
{
	const unsigned char *s = p;
	for (size_t i = 0; i < n; i++)
		h = (h ^ s[i]) * 0x100000001b3ULL;
	return h;
}

static int on_row(void *arg, const vecfs_parsed_row *r)
{
	run *u = arg;
	if (r->dim > VECFS_DIM_MAX || (r->dim && !r->vec) || r->where == 0)
		abort();
	if (r->key && r->keylen > VECFS_ROWS_LINE_MAX)
		abort();
	u->hash = mix(u->hash, &r->where, sizeof r->where);
	u->hash = mix(u->hash, &r->keylen, sizeof r->keylen);
	if (r->key)
		u->hash = mix(u->hash, r->key, r->keylen);
	if (r->dim)
		u->hash = mix(u->hash, r->vec, sizeof(float) * r->dim);
	if (r->payload)
		u->hash = mix(u->hash, r->payload, r->payload_len);
	u->hash = mix(u->hash, &r->numeric_key, sizeof r->numeric_key);
	u->rows++;
	return u->rows == 1000 ? -ECANCELED : 0; /* the callback's own refusal */
}

static int on_mem(void *arg, int64_t delta)
{
	run *u = arg;
	if (delta > 0 && u->mem + delta > ((int64_t)16 << 20))
		return -1;
	u->mem += delta;
	return 0;
}

static void parse(vecfs_rows_format fmt, const uint8_t *p, size_t n, size_t piece, run *u,
		  char *why, size_t wl)
{
	vecfs_rows *r = vecfs_rows_new(fmt, on_row, on_mem, u);
	if (!r)
		abort();
	int rc = 0;
	for (size_t o = 0; rc == 0 && o < n; o += piece)
		rc = vecfs_rows_feed(r, p + o, n - o < piece ? n - o : piece);
	if (rc == 0)
		rc = vecfs_rows_end(r);
	if (rc != 0 && rc != -EINVAL && rc != -E2BIG && rc != -ENOMEM && rc != -ECANCELED)
		abort();
	uint64_t where = 0;
	const char *w = vecfs_rows_error(r, &where);
	if (rc && rc != -ECANCELED && !w)
		abort(); /* the parser's refusal says why */
	snprintf(why, wl, "%d %llu %s", rc, (unsigned long long)where, w ? w : "");
	vecfs_rows_release(r);
	if (u->mem != 0)
		abort();
	vecfs_rows_free(r);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 2)
		return 0;
	vecfs_rows_format fmt = (vecfs_rows_format)(data[0] % 8);
	size_t piece = 1 + (size_t)data[1];
	run a = {0xcbf29ce484222325ULL, 0, 0}, b = a;
	char wa[600], wb[600];
	parse(fmt, data + 2, size - 2, size, &a, wa, sizeof wa);
	parse(fmt, data + 2, size - 2, piece, &b, wb, sizeof wb);
	if (a.hash != b.hash || a.rows != b.rows || strcmp(wa, wb))
		abort(); /* the pieces change nothing */
	return 0;
}
