/*
 * engine/settings.c - the settings by name: the rows of VECFS_SETTINGS
 * (vecfs.h) as a table, their defaults, bounds, parsing and rendering.
 * No I/O, no state.
 */
#include "vecfs.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

static const vecfs_setting rows[] = {
#define ROW_(slot, name, type, def, lo, hi, meaning)                                               \
	{ #name, VECFS_SETTING_##type, slot, offsetof(vecfs_config, name), (double)(def),         \
	  (double)(lo), (double)(hi), meaning },
	VECFS_SETTINGS(ROW_)
#undef ROW_
};

#define NROWS (sizeof rows / sizeof rows[0])

const vecfs_setting *vecfs_settings(size_t *n)
{
	*n = NROWS;
	return rows;
}

const vecfs_setting *vecfs_setting_find(const char *name, size_t len)
{
	for (size_t i = 0; i < NROWS; i++)
		if (strlen(rows[i].name) == len && !memcmp(rows[i].name, name, len))
			return &rows[i];
	return NULL;
}

const char *vecfs_setting_names(void)
{
#define NAME_(slot, name, type, def, lo, hi, meaning) ", " #name
	/* ", dim, metric, ...": past the first separator */
	static const char names[] = VECFS_SETTINGS(NAME_);
#undef NAME_
	return names + 2;
}

const char *vecfs_setting_values(const vecfs_setting *st, char *buf, size_t cap)
{
	switch (st->type) {
	case VECFS_SETTING_METRIC:
		snprintf(buf, cap, "l2, cosine or dot");
		break;
	case VECFS_SETTING_RATIO:
		snprintf(buf, cap, "a number in (%g, %g]", st->min, st->max);
		break;
	case VECFS_SETTING_OFF32:
		snprintf(buf, cap, "0 (never) or %.0f..%.0f", st->min, st->max);
		break;
	case VECFS_SETTING_U32:
	case VECFS_SETTING_U64:
		if (st->max >= (st->type == VECFS_SETTING_U32 ? (double)UINT32_MAX : (double)UINT64_MAX))
			snprintf(buf, cap, st->min > 0 ? "a positive integer" : "a non-negative integer");
		else
			snprintf(buf, cap, "an integer in %.0f..%.0f", st->min, st->max);
		break;
	}
	return buf;
}

/* Whether integer u is one of the values of st. */
static int uint_ok(const vecfs_setting *st, uint64_t u)
{
	if (st->type == VECFS_SETTING_OFF32 && u == 0)
		return 1;
	return (double)u >= st->min && (double)u <= st->max;
}

int vecfs_setting_parse(const vecfs_setting *st, const char *text, size_t len, vecfs_config *c)
{
	char *field = (char *)c + st->offset;
	switch (st->type) {
	case VECFS_SETTING_METRIC: {
		char m[16];
		vecfs_metric mv;
		if (len >= sizeof m)
			return -EINVAL;
		memcpy(m, text, len);
		m[len] = 0;
		if (vecfs_metric_parse(m, &mv))
			return -EINVAL;
		memcpy(field, &mv, sizeof mv);
		return 0;
	}
	case VECFS_SETTING_RATIO: {
		float f;
		if (vecfs_parse_float(text, len, &f) || !(f > st->min && f <= st->max))
			return -EINVAL;
		memcpy(field, &f, sizeof f);
		return 0;
	}
	case VECFS_SETTING_U32:
	case VECFS_SETTING_OFF32:
	case VECFS_SETTING_U64: {
		uint64_t u;
		int wide = st->type == VECFS_SETTING_U64;
		if (vecfs_parse_uint(text, len, wide ? UINT64_MAX : UINT32_MAX, &u) || !uint_ok(st, u))
			return -EINVAL;
		if (wide) {
			memcpy(field, &u, sizeof u);
		} else {
			uint32_t u32 = (uint32_t)u;
			memcpy(field, &u32, sizeof u32);
		}
		return 0;
	}
	}
	return -EINVAL;
}

int vecfs_setting_format(const vecfs_setting *st, const vecfs_config *c, char *out, size_t cap)
{
	const char *field = (const char *)c + st->offset;
	switch (st->type) {
	case VECFS_SETTING_METRIC: {
		vecfs_metric m;
		memcpy(&m, field, sizeof m);
		return snprintf(out, cap, "%s", vecfs_metric_name(m));
	}
	case VECFS_SETTING_RATIO: {
		float f;
		memcpy(&f, field, sizeof f);
		/* kept in millionths: six digits say it */
		return snprintf(out, cap, "%.6g", (double)f);
	}
	case VECFS_SETTING_U64: {
		uint64_t u;
		memcpy(&u, field, sizeof u);
		return snprintf(out, cap, "%llu", (unsigned long long)u);
	}
	case VECFS_SETTING_U32:
	case VECFS_SETTING_OFF32: {
		uint32_t u;
		memcpy(&u, field, sizeof u);
		return snprintf(out, cap, "%u", u);
	}
	}
	return snprintf(out, cap, "?");
}
