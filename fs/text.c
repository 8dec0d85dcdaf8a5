/*
 * fs/text.c - text helpers: growing buffers, JSON strings, and the
 * `key = value` files README, config and stats.
 */
#include "fs.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- sbuf */

void sb_init(sbuf *b)
{
	memset(b, 0, sizeof *b);
}

void sb_free(sbuf *b)
{
	free(b->p);
	sb_init(b);
}

void sb_reset(sbuf *b)
{
	b->len = 0;
	b->oom = 0;
	if (b->p)
		b->p[0] = 0;
}

int sb_reserve(sbuf *b, size_t extra)
{
	if (b->oom)
		return -ENOMEM;
	if (b->len + extra + 1 <= b->cap)
		return 0;
	size_t nc = b->cap ? b->cap : 256;
	while (nc < b->len + extra + 1) {
		if (nc > SIZE_MAX / 2) {
			b->oom = 1;
			return -ENOMEM;
		}
		nc *= 2;
	}
	char *np = realloc(b->p, nc);
	if (!np) {
		b->oom = 1;
		return -ENOMEM;
	}
	b->p = np;
	b->cap = nc;
	return 0;
}

void sb_add(sbuf *b, const void *data, size_t n)
{
	if (sb_reserve(b, n))
		return;
	memcpy(b->p + b->len, data, n);
	b->len += n;
	b->p[b->len] = 0;
}

void sb_adds(sbuf *b, const char *s)
{
	sb_add(b, s, strlen(s));
}

void sb_printf(sbuf *b, const char *fmt, ...)
{
	va_list ap;
	char small[256];
	va_start(ap, fmt);
	int n = vsnprintf(small, sizeof small, fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	if ((size_t)n < sizeof small) {
		sb_add(b, small, (size_t)n);
		return;
	}
	if (sb_reserve(b, (size_t)n))
		return;
	va_start(ap, fmt);
	vsnprintf(b->p + b->len, (size_t)n + 1, fmt, ap);
	va_end(ap);
	b->len += (size_t)n;
}

char *sb_take(sbuf *b, size_t *len)
{
	char *p = b->p;
	if (b->oom) {
		free(p);
		sb_init(b);
		*len = 0;
		return NULL;
	}
	if (!p) {
		p = calloc(1, 1);
		*len = 0;
	} else {
		*len = b->len;
	}
	sb_init(b);
	return p;
}

/* ---------------------------------------------------------------- JSON */

void sb_json_string(sbuf *b, const char *s, size_t n)
{
	static const char hex[] = "0123456789abcdef";
	sb_add(b, "\"", 1);
	size_t run = 0;
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];
		if (c >= 0x20 && c != '"' && c != '\\')
			continue;
		sb_add(b, s + run, i - run);
		run = i + 1;
		char esc[8];
		switch (c) {
		case '"': sb_add(b, "\\\"", 2); break;
		case '\\': sb_add(b, "\\\\", 2); break;
		case '\n': sb_add(b, "\\n", 2); break;
		case '\r': sb_add(b, "\\r", 2); break;
		case '\t': sb_add(b, "\\t", 2); break;
		default:
			esc[0] = '\\';
			esc[1] = 'u';
			esc[2] = '0';
			esc[3] = '0';
			esc[4] = hex[c >> 4];
			esc[5] = hex[c & 15];
			sb_add(b, esc, 6);
		}
	}
	sb_add(b, s + run, n - run);
	sb_add(b, "\"", 1);
}

/* ---------------------------------------------------------------- README */

void render_readme(sbuf *b)
{
	sb_adds(b,
		"vecfs " VECFS_VERSION " - a vector-search index used through plain files.\n"
		"\n"
		"  ingest/          create NAME.csv|.tsv|.txt|.jsonl|.ndjson|.fvecs|.bvecs|.npy here,\n"
		"                   write it, close it: every row is committed at once, or none\n"
		"  records/KEY      one stored vector as text; `rm records/KEY` deletes it\n"
		"  query/ID/        `mkdir query/ID`, write vectors (and a line like\n"
		"                   `k=10 nprobe=32 refine=10 mode=ann|exact`) to in, close it,\n"
		"                   read out (KEY<TAB>DISTANCE), out.json or stats\n"
		"  generations/     index generations; `ln -sfn GEN generations/active` flips\n"
		"  ctl              write a command: build, build stage, compact, rebalance, verify\n"
		"  config           settings as `key = value` lines; write lines to change them\n"
		"  stats            counters as `key = value` lines\n"
		"  errors           the most recent error messages, oldest first\n"
		"  backup           read it for a consistent copy of the store (save as data.mdb)\n");
}

/* ---------------------------------------------------------------- config */

int render_config(vecfs *v, sbuf *b)
{
	vecfs_config c;
	int rc = vecfs_config_get(v, &c);
	if (rc)
		return rc;
	sb_printf(b, "dim = %u\n", c.dim);
	sb_printf(b, "metric = %s\n", vecfs_metric_name(c.metric));
	sb_printf(b, "nlist = %u\n", c.nlist);
	sb_printf(b, "bits = %u\n", c.bits);
	sb_printf(b, "nprobe = %u\n", c.nprobe);
	sb_printf(b, "k = %u\n", c.k);
	sb_printf(b, "refine = %u\n", c.refine);
	sb_printf(b, "auto_build = %llu\n", (unsigned long long)c.auto_build);
	sb_printf(b, "compact_deltas = %u\n", c.compact_deltas);
	sb_printf(b, "keep_generations = %u\n", c.keep_generations);
	sb_printf(b, "rebalance_ratio = %u\n", c.rebalance_ratio);
	return b->oom ? -ENOMEM : 0;
}

enum { CK_U32, CK_U64, CK_METRIC };
static const struct {
	const char *name;
	int type;
	size_t off;
} config_keys[] = {
	{"dim", CK_U32, offsetof(vecfs_config, dim)},
	{"metric", CK_METRIC, offsetof(vecfs_config, metric)},
	{"nlist", CK_U32, offsetof(vecfs_config, nlist)},
	{"bits", CK_U32, offsetof(vecfs_config, bits)},
	{"nprobe", CK_U32, offsetof(vecfs_config, nprobe)},
	{"k", CK_U32, offsetof(vecfs_config, k)},
	{"refine", CK_U32, offsetof(vecfs_config, refine)},
	{"auto_build", CK_U64, offsetof(vecfs_config, auto_build)},
	{"compact_deltas", CK_U32, offsetof(vecfs_config, compact_deltas)},
	{"keep_generations", CK_U32, offsetof(vecfs_config, keep_generations)},
	{"rebalance_ratio", CK_U32, offsetof(vecfs_config, rebalance_ratio)},
};

/* One line of config text into c: 0, or -EINVAL with an errors line. */
int config_line(const char *s, size_t n, unsigned line, vecfs_config *c)
{
	trim(&s, &n);
	if (n == 0 || s[0] == '#')
		return 0;
	const char *eq = memchr(s, '=', n);
	if (!eq) {
		errlog("config: line %u: expected `key = value`, got '%.*s'", line, (int)(n > 80 ? 80 : n),
		       s);
		return -EINVAL;
	}
	const char *k = s, *v = eq + 1;
	size_t kn = (size_t)(eq - s), vn = n - kn - 1;
	trim(&k, &kn);
	trim(&v, &vn);
	size_t i;
	for (i = 0; i < sizeof config_keys / sizeof config_keys[0]; i++)
		if (strlen(config_keys[i].name) == kn && !memcmp(config_keys[i].name, k, kn))
			break;
	if (i == sizeof config_keys / sizeof config_keys[0]) {
		errlog("config: line %u: unknown key '%.*s' (keys: dim, metric, nlist, bits, nprobe, k, refine, auto_build, compact_deltas, keep_generations, rebalance_ratio)",
		       line, (int)(kn > 80 ? 80 : kn), k);
		return -EINVAL;
	}
	char *field = (char *)c + config_keys[i].off;
	uint64_t u;
	switch (config_keys[i].type) {
	case CK_METRIC: {
		char m[16];
		vecfs_metric mv;
		if (vn >= sizeof m || (memcpy(m, v, vn), m[vn] = 0, vecfs_metric_parse(m, &mv))) {
			errlog("config: line %u: bad value '%.*s' for metric (l2, cosine or dot)", line,
			       (int)(vn > 80 ? 80 : vn), v);
			return -EINVAL;
		}
		memcpy(field, &mv, sizeof mv);
		break;
	}
	case CK_U32:
	case CK_U64:
		if (parse_uint(v, vn, config_keys[i].type == CK_U32 ? UINT32_MAX : UINT64_MAX, &u)) {
			errlog("config: line %u: bad value '%.*s' for %s (a non-negative integer)", line,
			       (int)(vn > 80 ? 80 : vn), v, config_keys[i].name);
			return -EINVAL;
		}
		if (config_keys[i].type == CK_U32) {
			uint32_t u32 = (uint32_t)u;
			memcpy(field, &u32, sizeof u32);
		} else {
			memcpy(field, &u, sizeof u);
		}
		break;
	}
	return 0;
}

int config_apply_text(vecfs *v, const char *text, size_t len)
{
	vecfs_config c;
	int rc = vecfs_config_get(v, &c);
	if (rc) {
		errlog("config: cannot read the current settings: %s", strerror(-rc));
		return rc;
	}
	size_t pos = 0;
	unsigned line = 0;
	while (pos < len) {
		const char *s = text + pos;
		const char *nl = memchr(s, '\n', len - pos);
		size_t n = nl ? (size_t)(nl - s) : len - pos;
		pos += n + (nl ? 1 : 0);
		line++;
		if ((rc = config_line(s, n, line, &c)))
			return rc;
	}
	char err[256] = "";
	rc = vecfs_config_set(v, &c, err, sizeof err);
	if (rc) {
		if (!err[0])
			snprintf(err, sizeof err, "%s", strerror(-rc));
		if (!strncmp(err, "config:", 7))
			errlog("%s", err);
		else
			errlog("config: %s", err);
	}
	return rc;
}

/* ---------------------------------------------------------------- stats */

int render_stats(vecfs *v, sbuf *b)
{
	vecfs_stats s;
	int rc = vecfs_stats_get(v, &s);
	if (rc)
		return rc;
	sb_printf(b, "dim = %u\n", s.dim);
	sb_printf(b, "metric = %s\n", vecfs_metric_name(s.metric));
	sb_printf(b, "records = %llu\n", (unsigned long long)s.records);
	sb_printf(b, "deleted = %llu\n", (unsigned long long)s.deleted);
	sb_printf(b, "generations = %llu\n", (unsigned long long)s.generations);
	if (s.active)
		sb_printf(b, "active = %llu\n", (unsigned long long)s.active);
	else
		sb_adds(b, "active = none\n");
	sb_printf(b, "unindexed = %llu\n", (unsigned long long)s.unindexed);
	sb_printf(b, "delta_postings = %llu\n", (unsigned long long)s.delta_postings);
	sb_printf(b, "store_bytes = %llu\n", (unsigned long long)s.store_bytes);
	sb_printf(b, "ingest_rows = %llu\n", (unsigned long long)s.ingest_rows);
	sb_printf(b, "queries = %llu\n", (unsigned long long)s.queries);
	sb_printf(b, "p50_us = %llu\n", (unsigned long long)s.p50_us);
	sb_printf(b, "p99_us = %llu\n", (unsigned long long)s.p99_us);
	sb_printf(b, "next_key = %llu\n", (unsigned long long)s.next_key);
	sb_printf(b, "compactions = %llu\n", (unsigned long long)s.compactions);
	sb_printf(b, "rebalances = %llu\n", (unsigned long long)s.rebalances);
	sb_printf(b, "cluster_imbalance = %.3f\n", s.cluster_imbalance);
	sb_printf(b, "maintenance = %s\n", s.maintenance ? "running" : "idle");
	sb_printf(b, "kernels = %s\n", vecfs_kernel_name());
	return b->oom ? -ENOMEM : 0;
}
