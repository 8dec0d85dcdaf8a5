/*
 * fs/config_text.c - the `key = value` lines written to `config`: checked
 * line by line, applied all at once.
 */
#include "config_text.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "errors.h"
#include "text.h"

/* One line of config text into c: 0, or -EINVAL with an errors line. */
int fs_config_line(err_log *log, const char *s, size_t n, unsigned line, vecfs_config *c)
{
	fs_trim(&s, &n);
	if (n == 0 || s[0] == '#')
		return 0;
	const char *eq = memchr(s, '=', n);
	if (!eq) {
		fs_errlog(log, "config: line %u: expected `key = value`, got '%.*s'", line, (int)(n > 80 ? 80 : n),
		       s);
		return -EINVAL;
	}
	const char *k = s, *v = eq + 1;
	size_t kn = (size_t)(eq - s), vn = n - kn - 1;
	fs_trim(&k, &kn);
	fs_trim(&v, &vn);
	const vecfs_setting *st = vecfs_setting_find(k, kn);
	if (!st) {
		fs_errlog(log, "config: line %u: unknown key '%.*s' (keys: %s)", line, (int)(kn > 80 ? 80 : kn), k,
		       vecfs_setting_names());
		return -EINVAL;
	}
	if (vecfs_setting_parse(st, v, vn, c)) {
		char values[64];
		fs_errlog(log, "config: line %u: bad value '%.*s' for %s (%s)", line, (int)(vn > 80 ? 80 : vn), v,
		       st->name, vecfs_setting_values(st, values, sizeof values));
		return -EINVAL;
	}
	return 0;
}

int fs_config_apply_text(vecfs *v, err_log *log, const char *text, size_t len)
{
	vecfs_config c;
	int rc = vecfs_config_get(v, &c);
	if (rc) {
		fs_errlog_err(log, rc, "config: cannot read the current settings: %s", strerror(-rc));
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
		if ((rc = fs_config_line(log, s, n, line, &c)))
			return rc;
	}
	char err[256] = "";
	rc = vecfs_config_set(v, &c, err, sizeof err);
	if (rc) {
		if (!err[0])
			snprintf(err, sizeof err, "%s", strerror(-rc));
		if (!strncmp(err, "config:", 7))
			fs_errlog_err(log, rc, "%s", err);
		else
			fs_errlog_err(log, rc, "config: %s", err);
	}
	return rc;
}
