/*
 * engine/codec/settings.c - the settings and a query's options by name: the
 * rows of VECFS_SETTINGS and VECFS_QUERY_OPTIONS (vecfs.h) as tables,
 * their defaults, bounds, parsing and rendering.  No I/O, no state.
 */
#include "vecfs.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

const char *vecfs_metric_name(vecfs_metric m)
{
	switch (m) {
	case VECFS_L2: return "l2";
	case VECFS_COSINE: return "cosine";
	case VECFS_DOT: return "dot";
	}
	return "?";
}

int vecfs_metric_parse(const char *s, vecfs_metric *out)
{
	if (!strcmp(s, "l2"))
		*out = VECFS_L2;
	else if (!strcmp(s, "cosine"))
		*out = VECFS_COSINE;
	else if (!strcmp(s, "dot"))
		*out = VECFS_DOT;
	else
		return -EINVAL;
	return 0;
}

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

/* ---------------------------------------------------------------- query options */

enum { Q_COUNT, Q_AUTO, Q_RATIO, Q_MODE, Q_FILTER };

static const struct qopt {
	const char *name;
	int type;
	size_t offset;
	double min, max;
} qopts[] = {
#define QROW_(name, field, type, lo, hi, meaning)                                                  \
	{ #name, Q_##type, offsetof(vecfs_query_opts, field), (double)(lo), (double)(hi) },
	VECFS_QUERY_OPTIONS(QROW_)
#undef QROW_
};

const char *vecfs_query_opt_names(void)
{
#define QNAME_(name, field, type, lo, hi, meaning) ", " #name
	static const char names[] = VECFS_QUERY_OPTIONS(QNAME_);
#undef QNAME_
	return names + 2;
}

static int qsep(char c)
{
	return c == ' ' || c == '\t' || c == ',';
}

/* The value v (vl bytes) of option q into o: 0, or -EINVAL with why. */
static int qopt_set(const struct qopt *q, const char *v, size_t vl, vecfs_query_opts *o, char *why,
		    size_t wl)
{
	char *field = (char *)o + q->offset;
	int cut = vl > 40 ? 40 : (int)vl;
	switch (q->type) {
	case Q_COUNT:
	case Q_AUTO: {
		uint64_t u;
		int zero_ok = q->type == Q_AUTO;
		if (vecfs_parse_uint(v, vl, UINT32_MAX, &u) || (u == 0 && !zero_ok)) {
			snprintf(why, wl, "bad value '%.*s' for %s (a %s integer)", cut, v, q->name,
				 zero_ok ? "non-negative" : "positive");
			return -EINVAL;
		}
		if ((double)u > q->max) {
			snprintf(why, wl, "bad value '%.*s' for %s (at most %.0f)", cut, v, q->name, q->max);
			return -EINVAL;
		}
		uint32_t u32 = (uint32_t)u;
		memcpy(field, &u32, sizeof u32);
		if (zero_ok)
			o->auto_nprobe = u == 0;
		return 0;
	}
	case Q_RATIO: {
		float f;
		if (vecfs_parse_float(v, vl, &f) || !(f > q->min && f <= q->max)) {
			snprintf(why, wl, "bad value '%.*s' for %s (a number in (%g, %g])", cut, v, q->name,
				 q->min, q->max);
			return -EINVAL;
		}
		memcpy(field, &f, sizeof f);
		return 0;
	}
	case Q_MODE: {
		int exact;
		if (vl == 3 && !memcmp(v, "ann", 3))
			exact = 0;
		else if (vl == 5 && !memcmp(v, "exact", 5))
			exact = 1;
		else {
			snprintf(why, wl, "bad value '%.*s' for %s (ann or exact)", cut, v, q->name);
			return -EINVAL;
		}
		memcpy(field, &exact, sizeof exact);
		return 0;
	}
	case Q_FILTER: {
		memcpy(field, &v, sizeof v);
		memcpy(field + sizeof v, &vl, sizeof vl);
		return 0;
	}
	}
	return -EINVAL;
}

int vecfs_query_opts_parse(const char *s, size_t n, vecfs_query_opts *o, char *why, size_t wl)
{
	size_t pos = 0;
	while (pos < n) {
		while (pos < n && qsep(s[pos]))
			pos++;
		if (pos >= n)
			break;
		size_t st = pos;
		while (pos < n && !qsep(s[pos]) && s[pos] != '=')
			pos++;
		const char *t = s + st;
		size_t nl = pos - st;
		const struct qopt *q = NULL;
		for (size_t i = 0; i < sizeof qopts / sizeof qopts[0]; i++)
			if (strlen(qopts[i].name) == nl && !memcmp(qopts[i].name, t, nl))
				q = &qopts[i];
		if (pos >= n || s[pos] != '=') {
			while (pos < n && !qsep(s[pos]))
				pos++;
			size_t tl = pos - st;
			snprintf(why, wl, "'%.*s' is not name=value (options: %s)", (int)(tl > 40 ? 40 : tl), t,
				 vecfs_query_opt_names());
			return -EINVAL;
		}
		if (!q) {
			snprintf(why, wl, "unknown option '%.*s' (options: %s)", (int)(nl > 40 ? 40 : nl), t,
				 vecfs_query_opt_names());
			return -EINVAL;
		}
		pos++; /* '=' */
		size_t vs = pos;
		if (q->type == Q_FILTER)
			pos = n; /* the rest of the line */
		else
			while (pos < n && !qsep(s[pos]))
				pos++;
		int rc = qopt_set(q, s + vs, pos - vs, o, why, wl);
		if (rc)
			return rc;
	}
	return 0;
}
