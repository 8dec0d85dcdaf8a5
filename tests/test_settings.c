/*
 * tests/test_settings.c - the settings table (VECFS_SETTINGS): every row
 * parses, renders and is stored as itself, its bounds hold, and README.md's
 * table of settings is the table's, row for row.
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "testutil.h"
#include "vecfs.h"

static int parse(const vecfs_setting *st, const char *text, vecfs_config *c)
{
	return vecfs_setting_parse(st, text, strlen(text), c);
}

static const char *format(const vecfs_setting *st, const vecfs_config *c, char *buf, size_t cap)
{
	vecfs_setting_format(st, c, buf, cap);
	return buf;
}

/* Defaults render and read back as themselves; the values next to each
 * bound are refused; names are found and listed. */
static void test_rows(void **state)
{
	(void)state;
	size_t n;
	const vecfs_setting *rows = vecfs_settings(&n);
	vecfs_config d;
	vecfs_config_defaults(&d);
	assert_true(n >= 12);
	for (size_t i = 0; i < n; i++) {
		const vecfs_setting *st = &rows[i];
		char a[64], b[64];
		vecfs_config c = d;
		assert_ptr_equal(vecfs_setting_find(st->name, strlen(st->name)), st);
		assert_non_null(strstr(vecfs_setting_names(), st->name));
		for (size_t j = 0; j < i; j++)
			assert_int_not_equal(rows[j].slot, st->slot);
		format(st, &d, a, sizeof a);
		assert_int_equal(parse(st, a, &c), 0);
		assert_string_equal(format(st, &c, b, sizeof b), a);
		assert_int_equal(memcmp(&c, &d, sizeof c), 0);
		assert_int_equal(parse(st, "", &c), -EINVAL);
		assert_int_equal(parse(st, "x", &c), -EINVAL);
		if (st->type == VECFS_SETTING_U32 || st->type == VECFS_SETTING_OFF32 ||
		    st->type == VECFS_SETTING_U64) {
			char t[32];
			snprintf(t, sizeof t, "%.0f", st->min);
			assert_int_equal(parse(st, t, &c), 0);
			if (st->max < 4e9) {
				snprintf(t, sizeof t, "%.0f", st->max);
				assert_int_equal(parse(st, t, &c), 0);
				snprintf(t, sizeof t, "%.0f", st->max + 1);
				assert_int_equal(parse(st, t, &c), -EINVAL);
			}
			if (st->min > 0) {
				snprintf(t, sizeof t, "%.0f", st->min - 1);
				assert_int_equal(parse(st, t, &c),
						 st->type == VECFS_SETTING_OFF32 && st->min == 1 ? 0 : -EINVAL);
			}
			assert_int_equal(parse(st, "-1", &c), -EINVAL);
		}
		if (st->type == VECFS_SETTING_OFF32)
			assert_int_equal(parse(st, "0", &c), 0);
		if (st->type == VECFS_SETTING_RATIO) {
			assert_int_equal(parse(st, "0", &c), -EINVAL);
			assert_int_equal(parse(st, "1", &c), 0);
			assert_int_equal(parse(st, "1.0001", &c), -EINVAL);
			assert_int_equal(parse(st, "nan", &c), -EINVAL);
		}
	}
	assert_null(vecfs_setting_find("dims", 4));
	assert_non_null(vecfs_setting_find("dims", 3));
	/* rebalance_ratio: 0 (never) or 2..1000, not 1 */
	const vecfs_setting *rr = vecfs_setting_find("rebalance_ratio", 15);
	assert_non_null(rr);
	vecfs_config c = d;
	assert_int_equal(parse(rr, "1", &c), -EINVAL);
	assert_int_equal(parse(rr, "0", &c), 0);
	assert_int_equal(c.rebalance_ratio, 0);
}

/* Every setting away from its default is stored and read back: set, then
 * get after a reopen.  Values out of bounds are refused with the setting
 * named. */
static void test_stored(void **state)
{
	fixture *f = *state;
	size_t n;
	const vecfs_setting *rows = vecfs_settings(&n);
	vecfs *v = fx_open(f, NULL);
	vecfs_config c, got;
	char err[256] = "";
	vecfs_config_defaults(&c);
	for (size_t i = 0; i < n; i++) {
		const vecfs_setting *st = &rows[i];
		char t[32];
		switch (st->type) {
		case VECFS_SETTING_METRIC:
			snprintf(t, sizeof t, "dot");
			break;
		case VECFS_SETTING_RATIO:
			snprintf(t, sizeof t, "0.875");
			break;
		default:
			snprintf(t, sizeof t, "%.0f", st->max < 4e9 ? st->max : st->min + 7);
		}
		assert_int_equal(parse(st, t, &c), 0);
	}
	c.seed = 12345;
	assert_int_equal(vecfs_config_set(v, &c, err, sizeof err), 0);
	fx_close(f);
	v = fx_open(f, NULL);
	assert_int_equal(vecfs_config_get(v, &got), 0);
	for (size_t i = 0; i < n; i++) {
		char a[64], b[64];
		assert_string_equal(format(&rows[i], &got, a, sizeof a), format(&rows[i], &c, b, sizeof b));
	}
	assert_true(got.seed == 12345);

	vecfs_config bad = got;
	bad.bits = 9;
	assert_int_equal(vecfs_config_set(v, &bad, err, sizeof err), -EINVAL);
	assert_non_null(strstr(err, "bits must be"));
	bad = got;
	bad.rebalance_ratio = 1;
	assert_int_equal(vecfs_config_set(v, &bad, err, sizeof err), -EINVAL);
	assert_non_null(strstr(err, "rebalance_ratio"));
	bad = got;
	bad.recall_target = 0;
	assert_int_equal(vecfs_config_set(v, &bad, err, sizeof err), -EINVAL);
	assert_non_null(strstr(err, "recall_target"));
	assert_int_equal(vecfs_config_get(v, &bad), 0);
	assert_int_equal(memcmp(&bad, &got, sizeof bad), 0);
	fx_close(f);
}

/* README.md's table under "## Configuration": | `key` | meaning | default |,
 * the rows of VECFS_SETTINGS in order, word for word. */
static void test_readme_table(void **state)
{
	(void)state;
	FILE *fp = fopen("README.md", "r");
	if (!fp)
		fail_msg("README.md: %s (run from the top of the source tree)", strerror(errno));
	char line[1024];
	int in_section = 0;
	size_t n, row = 0;
	const vecfs_setting *rows = vecfs_settings(&n);
	vecfs_config d;
	vecfs_config_defaults(&d);
	while (fgets(line, sizeof line, fp)) {
		if (!strncmp(line, "## ", 3)) {
			if (in_section)
				break;
			in_section = !strcmp(line, "## Configuration\n");
			continue;
		}
		if (!in_section || strncmp(line, "| `", 3))
			continue;
		assert_true(row < n);
		char want[1024], def[64];
		vecfs_setting_format(&rows[row], &d, def, sizeof def);
		snprintf(want, sizeof want, "| `%s` | %s | %s |\n", rows[row].name, rows[row].meaning, def);
		if (strcmp(line, want))
			fail_msg("README.md's row %zu:\n  %s differs from the settings table's:\n  %s", row + 1,
				 line, want);
		row++;
	}
	fclose(fp);
	assert_int_equal(row, n);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_rows),
		cmocka_unit_test_setup_teardown(test_stored, fx_setup, fx_teardown),
		cmocka_unit_test(test_readme_table),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
