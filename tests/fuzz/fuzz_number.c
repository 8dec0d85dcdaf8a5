/*
 * tests/fuzz/fuzz_number.c - the readers of a number in text
 * (engine/codec/number.h, number.c): the one-pass readers
 * vf_decimal_fast() and vf_decimal_prefix() at the input's start, and
 * vecfs_parse_float() of the whole input, each against strtof() of the
 * same bytes: a reader that takes a token gives strtof()'s float of it,
 * bit for bit, and stops where strtof() stops in the whole input;
 * declining is always allowed.  The input is the readers' room exactly, so a look past its end
 * is the address sanitizer's to see.
 */
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "vecfs.h"
#include "codec/number.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* strtof() of s[0..n) as a C string: its float, and the bytes it took. */
static float ref(const char *s, size_t n, size_t *took)
{
	char *c = malloc(n + 1);
	if (!c)
		abort();
	memcpy(c, s, n);
	c[n] = 0;
	char *end;
	float f = strtof(c, &end);
	*took = (size_t)(end - c);
	free(c);
	return f;
}

/* A reader's answer: 0 (the token s[0..used), its float f) or 1.  A token
 * read is strtof()'s float of it, and where strtof() stops in all of
 * s[0..n) too, unless a hexadecimal float goes on after its "0". */
static void check(int rc, const char *s, size_t n, float f, size_t used)
{
	if (rc == 1)
		return;
	if (rc != 0 || used == 0 || used > n)
		abort();
	size_t took;
	float want = ref(s, used, &took);
	if (took != used || memcmp(&f, &want, sizeof f))
		abort();
	if (used < n && (s[used] == 'x' || s[used] == 'X'))
		return;
	(void)ref(s, n, &took);
	if (took != used)
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *s = (const char *)data;
	float f = 0;
	size_t used = 0;
	check(vf_decimal_fast(s, size, &f, &used), s, size, f, used);
	used = 0;
	check(size ? vf_decimal_prefix(s, size, &f, &used) : 1, s, size, f, used);
	/* the whole input: a number (strtof()'s, as all of it) or a refusal */
	int rc = vecfs_parse_float(s, size, &f);
	if (rc == 0) {
		size_t took;
		float want = ref(s, size, &took);
		if (took != size || memcmp(&f, &want, sizeof f))
			abort();
	} else if (rc != -EINVAL && rc != -ERANGE && rc != -ENOMEM) {
		abort();
	}
	return 0;
}
