/*
 * tests/fuzz/fuzz_json.c - the JSON scanner (engine/codec/json.h): the
 * input checked as one value (vf_json_value) at a depth limit taken from
 * byte 0, and every string in it decoded (vf_json_string) and walked
 * (vf_json_str_next): positions stay within the text, a refusal says why,
 * the two string readers agree on the bytes.
 */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "codec/json.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	size_t max_depth = data[0];
	const char *p = (const char *)data + 1;
	size_t n = size - 1;
	uint8_t stack[256 / 8 + 1];
	uint32_t depth = 0, values = 0;
	char why[160] = "";
	size_t i = 0;
	int rc = vf_json_value(p, n, &i, max_depth, stack, &depth, &values, why, sizeof why);
	if (i > n || (rc && !why[0]) || (rc != 0 && rc != -EINVAL && rc != -E2BIG))
		abort();
	if (rc == 0 && depth > max_depth + 1)
		abort();
	/* every '"' as the start of a string */
	char *out = malloc(n + 1);
	if (!out)
		return 0;
	for (size_t s = 0; s < n; s++) {
		if (p[s] != '"')
			continue;
		size_t a = s, b = s + 1, ol = 0, k = 0;
		int ra = vf_json_string(p, n, &a, out, &ol, why, sizeof why);
		if (a > n || ol > n - s)
			abort();
		unsigned char u[4];
		int m;
		while ((m = vf_json_str_next(p, n, &b, u)) > 0) {
			if (ra == 0 && (k + (size_t)m > ol || memcmp(out + k, u, (size_t)m)))
				abort();
			k += (size_t)m;
		}
		if (ra == 0 && (m != 0 || k != ol || a != b))
			abort();
	}
	free(out);
	return 0;
}
