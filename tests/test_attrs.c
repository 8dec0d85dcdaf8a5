/*
 * test_attrs.c - what file tools see of a store without reading it whole:
 * the export's and the backup's sizes agree with what vecfs_export() and
 * vecfs_backup() write, through puts, upserts, deletes one and many,
 * builds and reopening; the export's lines; the times each kind of change
 * moves and the ones it leaves alone.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "testutil.h"

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* What vecfs_export() writes: into a temporary file, read back whole
 * (caller frees), its length in *len. */
static char *export_text(vecfs *v, size_t *len)
{
	char path[] = "/tmp/vecfs-export-XXXXXX";
	int fd = mkstemp(path);
	assert_true(fd >= 0);
	unlink(path);
	uint64_t bytes = 0;
	assert_int_equal(vecfs_export(v, fd, &bytes), 0);
	struct stat st;
	assert_int_equal(fstat(fd, &st), 0);
	assert_int_equal((uint64_t)st.st_size, bytes);
	char *buf = malloc((size_t)st.st_size + 1);
	assert_non_null(buf);
	assert_int_equal(pread(fd, buf, (size_t)st.st_size, 0), st.st_size);
	buf[st.st_size] = 0;
	close(fd);
	*len = (size_t)st.st_size;
	return buf;
}

static uint64_t backup_len(vecfs *v)
{
	char path[] = "/tmp/vecfs-backup-XXXXXX";
	int fd = mkstemp(path);
	assert_true(fd >= 0);
	unlink(path);
	assert_int_equal(vecfs_backup(v, fd), 0);
	struct stat st;
	assert_int_equal(fstat(fd, &st), 0);
	close(fd);
	return (uint64_t)st.st_size;
}

static vecfs_attrs attrs(vecfs *v)
{
	vecfs_attrs a;
	assert_int_equal(vecfs_attrs_get(v, &a), 0);
	return a;
}

/* The kept sizes are those of what would be written. */
static void expect_sizes(vecfs *v, const char *when)
{
	size_t len;
	char *text = export_text(v, &len);
	vecfs_attrs a = attrs(v);
	uint64_t b = backup_len(v);
	if (a.export_bytes != len || a.backup_bytes != b)
		fail_msg("%s: export %llu kept, %zu written; backup %llu kept, %llu written", when,
			 (unsigned long long)a.export_bytes, len, (unsigned long long)a.backup_bytes,
			 (unsigned long long)b);
	free(text);
}

static void put_rows(vecfs *v, size_t first, size_t n, uint32_t d, uint64_t seed, int payloads)
{
	rng r = {.s = seed};
	vecfs_row *rows = calloc(n, sizeof *rows);
	float *x = malloc(sizeof(float) * n * d);
	char (*keys)[32] = calloc(n, 32), (*pay)[48] = calloc(n, 48);
	assert_true(rows && x && keys && pay);
	for (size_t i = 0; i < n; i++) {
		for (uint32_t j = 0; j < d; j++)
			x[i * d + j] = (float)rng_gauss(&r) * (j % 3 ? 1.0f : 1e-3f);
		/* keys that JSON escapes: quotes, backslashes, control characters */
		snprintf(keys[i], 32, (i % 7) ? "k%zu" : "q\"\\\x01%zu", first + i);
		snprintf(pay[i], 48, "{\"i\":%zu,\"s\":\"\\u00e9\"}", first + i);
		rows[i] = (vecfs_row){keys[i], strlen(keys[i]), x + i * d,
				      payloads && i % 2 ? pay[i] : NULL, payloads && i % 2 ? strlen(pay[i]) : 0};
	}
	assert_int_equal(vecfs_put(v, rows, n, d, NULL, NULL, 0), 0);
	free(rows);
	free(x);
	free(keys);
	free(pay);
}

static void test_sizes_follow_writes(void **state)
{
	fixture *f = *state;
	vecfs *v = fx_open(f, NULL);
	enum { D = 24 };
	set_config(v, D, VECFS_L2);
	expect_sizes(v, "empty");
	put_rows(v, 0, 3000, D, 1, 1);
	expect_sizes(v, "puts");
	put_rows(v, 1000, 1500, D, 2, 0); /* upserts, payloads dropped */
	expect_sizes(v, "upserts");
	build(v, 1);
	put_rows(v, 2500, 1000, D, 3, 1); /* with a generation: delta postings */
	expect_sizes(v, "puts into a generation");
	for (int i = 0; i < 200; i++) {
		char k[16];
		snprintf(k, sizeof k, "k%d", 3 * i + 1);
		vecfs_delete(v, k, strlen(k));
	}
	expect_sizes(v, "deletes");
	vecfs_key some[600];
	char kb[600][16];
	for (int i = 0; i < 600; i++) {
		snprintf(kb[i], 16, "k%d", 2 * i + 1500);
		some[i] = (vecfs_key){kb[i], strlen(kb[i])};
	}
	uint64_t gone;
	const char *flt = "{\"i\": {\"$lt\": 300}}";
	assert_int_equal(vecfs_delete_many(v, some, 600, flt, strlen(flt), &gone, NULL, 0), 0);
	assert_true(gone > 600);
	expect_sizes(v, "a delete of many, freed pages listed");
	assert_int_equal(vecfs_compact(v, NULL, NULL, 0), 0);
	expect_sizes(v, "compacted");
	fx_close(f);
	v = fx_open(f, NULL);
	expect_sizes(v, "reopened");
	assert_int_equal(vecfs_delete_many(v, NULL, 0, "{}", 2, &gone, NULL, 0), 0);
	expect_sizes(v, "all deleted");
}

/* One line a live record, in key order, as JSON; numbers read back to
 * the same floats. */
static void test_export_lines(void **state)
{
	fixture *f = *state;
	vecfs *v = fx_open(f, NULL);
	set_config(v, 3, VECFS_L2);
	const float a[3] = {1.0f, -0.0f, 3.4028235e38f}, b[3] = {1e-45f, -2.5f, 0.1f};
	vecfs_row rows[] = {
		{"b", 1, b, "{\"x\":[1,2]}", 11},
		{"a\"\\\t", 4, a, NULL, 0},
	};
	/* a tab is no key: the quote and backslash are */
	rows[1].keylen = 3;
	assert_int_equal(vecfs_put(v, rows, 2, 3, NULL, NULL, 0), 0);
	size_t len;
	char *t = export_text(v, &len);
	const char *want = "{\"key\":\"a\\\"\\\\\",\"vector\":[1.00000000e+00,-0.00000000e+00,3.40282347e+38]}\n"
			   "{\"key\":\"b\",\"vector\":[1.40129846e-45,-2.50000000e+00,1.00000001e-01],"
			   "\"payload\":{\"x\":[1,2]}}\n";
	assert_string_equal(t, want);
	free(t);
}

static void test_times(void **state)
{
	fixture *f = *state;
	uint64_t t0 = now_ns();
	vecfs *v = fx_open(f, NULL);
	vecfs_attrs a0 = attrs(v);
	assert_true(a0.created_ns >= t0 && a0.created_ns <= now_ns());
	set_config(v, 4, VECFS_L2);
	vecfs_attrs a1 = attrs(v);
	assert_true(a1.config_ns > a0.config_ns);
	assert_int_equal(a1.created_ns, a0.created_ns);
	const float x[4] = {1, 2, 3, 4};
	uint64_t before = now_ns();
	put_one(v, "one", x, 4);
	put_one(v, "two", x, 4);
	uint64_t after = now_ns(), t1, t2, t1b;
	assert_int_equal(vecfs_record_time(v, "one", 3, &t1), 0);
	assert_int_equal(vecfs_record_time(v, "two", 3, &t2), 0);
	assert_true(before <= t1 && t1 < t2 && t2 <= after);
	vecfs_attrs a2 = attrs(v);
	assert_int_equal(a2.records_ns, t2);
	assert_int_equal(a2.config_ns, a1.config_ns);
	assert_int_equal(vecfs_record_time(v, "nope", 4, &t1b), -ENOENT);
	/* a build: generations move, records do not */
	build(v, 1);
	vecfs_attrs a3 = attrs(v);
	assert_true(a3.gens_ns > a2.gens_ns);
	assert_int_equal(a3.records_ns, a2.records_ns);
	assert_int_equal(vecfs_record_time(v, "one", 3, &t1b), 0);
	assert_int_equal(t1b, t1);
	/* an upsert moves its record only; a delete moves the records' time */
	put_one(v, "two", x, 4);
	assert_int_equal(vecfs_record_time(v, "one", 3, &t1b), 0);
	assert_int_equal(t1b, t1);
	assert_int_equal(vecfs_record_time(v, "two", 3, &t2), 0);
	assert_true(t2 > a3.records_ns);
	del_key(v, "one");
	vecfs_attrs a4 = attrs(v);
	assert_true(a4.records_ns > t2);
	/* nothing moves while nothing is written, across a reopen too */
	fx_close(f);
	v = fx_open(f, NULL);
	vecfs_attrs a5 = attrs(v);
	assert_int_equal(a5.created_ns, a4.created_ns);
	assert_int_equal(a5.config_ns, a4.config_ns);
	assert_int_equal(a5.records_ns, a4.records_ns);
	assert_int_equal(a5.gens_ns, a4.gens_ns);
	assert_int_equal(vecfs_record_time(v, "two", 3, &t1b), 0);
	assert_int_equal(t1b, t2);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_sizes_follow_writes, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_export_lines, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_times, fx_setup, fx_teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
