/*
 * tests/fuzz/fuzz_options.c - the library's line codecs of settings and
 * query options (engine/codec/settings.c): the input is a query's options line
 * (vecfs_query_opts_parse) and, split at its first '=', a setting's name
 * and value (vecfs_setting_parse).  Parsing gives 0 or EINVAL with a
 * reason; what parses renders, and the rendering parses back to the same
 * value; a filter points into the line; options out of bounds are refused.
 */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "vecfs.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void options(const char *s, size_t n)
{
	vecfs_query_opts o;
	char why[256];
	memset(&o, 0, sizeof o);
	why[0] = 0;
	int rc = vecfs_query_opts_parse(s, n, &o, why, sizeof why);
	if (rc != 0 && rc != -EINVAL)
		abort();
	if (rc == -EINVAL && !why[0])
		abort(); /* a refusal says why */
	if (o.k > VECFS_K_MAX || o.refine > VECFS_REFINE_MAX)
		abort();
	if (o.recall != 0 && !(o.recall > 0 && o.recall <= 1))
		abort();
	if (o.auto_nprobe && o.nprobe)
		abort();
	if (o.filter && (o.filter < s || o.filter + o.filter_len > s + n))
		abort();
}

static void setting(const char *s, size_t n)
{
	const char *eq = memchr(s, '=', n);
	if (!eq)
		return;
	const vecfs_setting *st = vecfs_setting_find(s, (size_t)(eq - s));
	if (!st)
		return;
	vecfs_config c, back;
	char text[64], again[64];
	vecfs_config_defaults(&c);
	int rc = vecfs_setting_parse(st, eq + 1, n - (size_t)(eq - s) - 1, &c);
	if (rc == -EINVAL)
		return;
	if (rc != 0)
		abort();
	int len = vecfs_setting_format(st, &c, text, sizeof text);
	if (len <= 0 || (size_t)len >= sizeof text)
		abort();
	back = c;
	if (vecfs_setting_parse(st, text, (size_t)len, &back))
		abort(); /* a rendering that does not parse */
	vecfs_setting_format(st, &back, again, sizeof again);
	if (strcmp(text, again))
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	/* a copy of the exact size: reads past it are caught */
	char *s = malloc(size ? size : 1);
	if (!s)
		return 0;
	memcpy(s, data, size);
	options(s, size);
	setting(s, size);
	free(s);
	return 0;
}
