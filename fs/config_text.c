/*
 * fs/config_text.c - the `key = value` lines written to `config`: checked
 * line by line, applied all at once.
 */
#include "config_text.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "errors.h"
#include "number.h"

enum { CK_U32, CK_U64, CK_METRIC, CK_RECALL };
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
	{"recall_target", CK_RECALL, offsetof(vecfs_config, recall_target)},
	{"k", CK_U32, offsetof(vecfs_config, k)},
	{"refine", CK_U32, offsetof(vecfs_config, refine)},
	{"auto_build", CK_U64, offsetof(vecfs_config, auto_build)},
	{"compact_deltas", CK_U32, offsetof(vecfs_config, compact_deltas)},
	{"keep_generations", CK_U32, offsetof(vecfs_config, keep_generations)},
	{"rebalance_ratio", CK_U32, offsetof(vecfs_config, rebalance_ratio)},
};

/* One line of config text into c: 0, or -EINVAL with an errors line. */
int config_line(err_log *log, const char *s, size_t n, unsigned line, vecfs_config *c)
{
	trim(&s, &n);
	if (n == 0 || s[0] == '#')
		return 0;
	const char *eq = memchr(s, '=', n);
	if (!eq) {
		errlog(log, "config: line %u: expected `key = value`, got '%.*s'", line, (int)(n > 80 ? 80 : n),
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
		errlog(log, "config: line %u: unknown key '%.*s' (keys: dim, metric, nlist, bits, nprobe, recall_target, k, refine, auto_build, compact_deltas, keep_generations, rebalance_ratio)",
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
			errlog(log, "config: line %u: bad value '%.*s' for metric (l2, cosine or dot)", line,
			       (int)(vn > 80 ? 80 : vn), v);
			return -EINVAL;
		}
		memcpy(field, &mv, sizeof mv);
		break;
	}
	case CK_RECALL: {
		float f;
		if (parse_float(v, vn, &f) || !(f > 0 && f <= 1)) {
			errlog(log, "config: line %u: bad value '%.*s' for recall_target (a number in (0, 1])",
			       line, (int)(vn > 80 ? 80 : vn), v);
			return -EINVAL;
		}
		memcpy(field, &f, sizeof f);
		break;
	}
	case CK_U32:
	case CK_U64:
		if (parse_uint(v, vn, config_keys[i].type == CK_U32 ? UINT32_MAX : UINT64_MAX, &u)) {
			errlog(log, "config: line %u: bad value '%.*s' for %s (a non-negative integer)", line,
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

int config_apply_text(vecfs *v, err_log *log, const char *text, size_t len)
{
	vecfs_config c;
	int rc = vecfs_config_get(v, &c);
	if (rc) {
		errlog_err(log, rc, "config: cannot read the current settings: %s", strerror(-rc));
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
		if ((rc = config_line(log, s, n, line, &c)))
			return rc;
	}
	char err[256] = "";
	rc = vecfs_config_set(v, &c, err, sizeof err);
	if (rc) {
		if (!err[0])
			snprintf(err, sizeof err, "%s", strerror(-rc));
		if (!strncmp(err, "config:", 7))
			errlog_err(log, rc, "%s", err);
		else
			errlog_err(log, rc, "config: %s", err);
	}
	return rc;
}
