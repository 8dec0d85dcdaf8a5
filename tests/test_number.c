/*
 * test_number.c - number parsing and formatting as users write and read
 * numbers (engine/codec/number.c): vecfs_parse_float() must give exactly
 * what strtof() gives, for every token, on its fast path and off it; and
 * the daemon's trimming of blanks (fs/text.h).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../fs/text.h"
#include "vecfs.h"
#include "testutil.h"

/* strtof's answer for a whole token: 0, -EINVAL or -ERANGE, and the value */
static int reference(const char *s, float *out)
{
	char *end;
	size_t n = strlen(s);
	if (n == 0 || n >= 128 || strchr(" \t\n\r\f\v", s[0]))
		return -EINVAL;
	errno = 0;
	float f = strtof(s, &end);
	if (end != s + n)
		return -EINVAL;
	if (errno == ERANGE && isinf(f))
		return -ERANGE;
	*out = f;
	return 0;
}

static uint64_t next(uint64_t *lcg)
{
	*lcg = *lcg * 6364136223846793005ULL + 1442695040888963407ULL;
	return *lcg;
}

static uint32_t bits_of(float f)
{
	uint32_t b;
	memcpy(&b, &f, sizeof b);
	return b;
}

/* vecfs_parse_float(s) == strtof(s), bit for bit; returns 1 when they differ */
static int differs(const char *s)
{
	float a = 12345.0f, b = 12345.0f;
	int ra = vecfs_parse_float(s, strlen(s), &a);
	int rb = reference(s, &b);
	if (ra != rb || (ra == 0 && bits_of(a) != bits_of(b) && !(isnan(a) && isnan(b)))) {
		print_error("'%s': parse_float %d %a, strtof %d %a\n", s, ra, (double)a, rb,
			    (double)b);
		return 1;
	}
	return 0;
}

static void test_parse_float_tokens(void **state)
{
	(void)state;
	static const char *tok[] = {
		"0", "-0", "+0", "0.0", ".5", "5.", "-.5", "+5", "1", "-1", "00001",
		"0.000000000000000000001", "1e-22", "1e22", "1e23", "1e-23", "1e-45",
		"1.4e-45", "1e-46", "3.4028235e38", "3.4028236e38", "3.5e38", "1e39",
		"-1e39", "16777217", "16777216.5", "0.1", "0.2", "0.3", "1.17549435e-38",
		"123456789012345678", "1234567890123456789", "12345678901234567890",
		"9007199254740993", "9007199254740992", "0.30000000000000000001",
		"inf", "-inf", "infinity", "nan", "NAN", "0x1p3", "0x1.8p1", "1e", "e5",
		".", "-", "+", "", " 1", "1 ", "--1", "1.2.3", "1e+", "1e-", "1e5x",
		"1,5", "١", "1e99999999999", "1e-99999999999", "0e99999", "-0.0e-5",
		"4.2E+1", "7E-3", "2.5e+00", "340282346638528859811704183484516925440",
	};
	int bad = 0;
	for (size_t i = 0; i < sizeof tok / sizeof tok[0]; i++)
		bad += differs(tok[i]);
	assert_int_equal(bad, 0);
}

/* random floats in the formats programs print them with */
static void test_parse_float_printed(void **state)
{
	(void)state;
	static const char *fmt[] = {"%.9g", "%.6g", "%.3f", "%e", "%.17g", "%.12e", "%g",
				    "%.20g", "%.1f", "%.8f"};
	uint64_t lcg = 42;
	char s[128];
	int bad = 0;
	for (int i = 0; i < 200000 && bad < 10; i++) {
		uint32_t u = (uint32_t)(next(&lcg) >> 32);
		float f;
		if (i % 3 == 0) { /* any finite float, all exponents */
			memcpy(&f, &u, sizeof f);
			if (!isfinite(f))
				continue;
		} else { /* the usual range of embeddings and features */
			f = (float)((double)(u >> 8) / (1 << 24) * 200.0 - 100.0) /
			    (float)(1 << (u & 15));
		}
		snprintf(s, sizeof s, fmt[i % 10], (double)f);
		bad += differs(s);
	}
	assert_int_equal(bad, 0);
}

/* decimals near and at the halfway points between two floats: the double
 * nearest such a decimal may be the halfway point itself */
static void test_parse_float_ties(void **state)
{
	(void)state;
	uint64_t lcg = 7;
	char s[128];
	int bad = 0;
	for (int i = 0; i < 100000 && bad < 10; i++) {
		uint32_t u = (uint32_t)(next(&lcg) >> 33) | 0x00800000u; /* normal, positive */
		u &= 0x7effffffu;
		float f, g;
		memcpy(&f, &u, sizeof f);
		g = nextafterf(f, INFINITY);
		double mid = ((double)f + (double)g) / 2; /* exact */
		snprintf(s, sizeof s, "%.*g", 9 + (i % 11), mid);
		bad += differs(s);
		snprintf(s, sizeof s, "%.*e", 8 + (i % 12), mid);
		bad += differs(s);
	}
	assert_int_equal(bad, 0);
}

/* random digit strings: lengths, points and exponents of every kind */
static void test_parse_float_digit_strings(void **state)
{
	(void)state;
	uint64_t lcg = 99;
	char s[128];
	int bad = 0;
	for (int i = 0; i < 200000 && bad < 10; i++) {
		size_t n = 0;
		uint64_t r = next(&lcg);
		if (r & 1)
			s[n++] = (r & 2) ? '-' : '+';
		int nd = 1 + (int)((r >> 2) % 24), point = (int)((r >> 7) % (nd + 2)) - 1;
		for (int d = 0; d < nd; d++) {
			if (d == point)
				s[n++] = '.';
			s[n++] = (char)('0' + (next(&lcg) >> 40) % 10);
		}
		if ((r >> 12) & 1)
			n += (size_t)snprintf(s + n, sizeof s - n, "e%d", (int)((r >> 13) % 90) - 45);
		s[n] = 0;
		bad += differs(s);
	}
	assert_int_equal(bad, 0);
}

static void test_parse_uint(void **state)
{
	(void)state;
	uint64_t v = 0;
	assert_int_equal(vecfs_parse_uint("42", 2, 100, &v), 0);
	assert_int_equal(v, 42);
	assert_int_equal(vecfs_parse_uint("101", 3, 100, &v), -ERANGE);
	assert_int_equal(vecfs_parse_uint("18446744073709551615", 20, UINT64_MAX, &v), 0);
	assert_true(v == UINT64_MAX);
	assert_int_equal(vecfs_parse_uint("18446744073709551616", 20, UINT64_MAX, &v), -ERANGE);
	assert_int_equal(vecfs_parse_uint("-1", 2, 100, &v), -EINVAL);
	assert_int_equal(vecfs_parse_uint("", 0, 100, &v), -EINVAL);
	assert_int_equal(vecfs_parse_uint("1a", 2, 100, &v), -EINVAL);
}

/* every float printed by fmt_float reads back to itself */
static void test_fmt_float_round_trip(void **state)
{
	(void)state;
	uint64_t lcg = 3;
	char s[64];
	for (int i = 0; i < 100000; i++) {
		uint32_t u = (uint32_t)(next(&lcg) >> 32);
		float f, g = 0;
		memcpy(&f, &u, sizeof f);
		if (!isfinite(f))
			continue;
		int n = vecfs_format_float(s, sizeof s, f);
		assert_true(n > 0 && (size_t)n < sizeof s);
		assert_int_equal(vecfs_parse_float(s, (size_t)n, &g), 0);
		assert_int_equal(bits_of(g), bits_of(f));
	}
}

static void expect_as_printf(float f)
{
	char want[64], got[64];
	snprintf(want, sizeof want, "%.9g", (double)f);
	int n = vecfs_format_float(got, sizeof got, f);
	if (n != (int)strlen(want) || strcmp(got, want) != 0)
		fail_msg("vecfs_format_float(%a) = \"%s\", printf gives \"%s\"", (double)f, got, want);
}

/* vecfs_format_float is printf's "%.9g" byte for byte: random floats of every
 * exponent, floats on both sides of each power of ten (where the decimal
 * exponent is guessed from log10), ties, integers, signs and zeros */
static void test_fmt_float_as_printf(void **state)
{
	(void)state;
	uint64_t lcg = 11;
	for (int i = 0; i < 600000; i++) {
		uint32_t u = (uint32_t)(next(&lcg) >> 32);
		float f;
		memcpy(&f, &u, sizeof f);
		expect_as_printf(f);
	}
	for (int k = -45; k <= 38; k++) {
		float f = (float)pow(10.0, k);
		float lo = f, hi = f;
		for (int i = 0; i < 300; i++) {
			expect_as_printf(lo);
			expect_as_printf(hi);
			expect_as_printf(-hi);
			lo = nextafterf(lo, 0.0f);
			hi = nextafterf(hi, INFINITY);
		}
		/* 9.99999999x 10^k: nine digits that round up to ten */
		float g = (float)(9.9999999995 * pow(10.0, k));
		for (int i = 0; i < 50; i++, g = nextafterf(g, 0.0f))
			expect_as_printf(g);
	}
	for (int i = 0; i <= 200000; i++) {
		expect_as_printf((float)i);
		expect_as_printf((float)i / 1024.0f); /* short binary fractions */
		expect_as_printf(1e9f + (float)i * 128.0f); /* ten digits: rounding and ties */
	}
	expect_as_printf(0.0f);
	expect_as_printf(-0.0f);
	expect_as_printf(INFINITY);
	expect_as_printf(-INFINITY);
	expect_as_printf(NAN);
	expect_as_printf(FLT_MAX);
	expect_as_printf(FLT_MIN);
	expect_as_printf(1e-22f);
	expect_as_printf(16777216.0f);
	expect_as_printf(0.5f);
	expect_as_printf(2147483648.0f);
}

static void expect_e_as_printf(float f)
{
	char want[64], got[64];
	snprintf(want, sizeof want, "%.8e", (double)f);
	int n = vecfs_format_float_e(got, f);
	if (n != (int)strlen(want) || strcmp(got, want) != 0)
		fail_msg("vecfs_format_float_e(%a) = \"%s\", printf gives \"%s\"", (double)f, got, want);
	if (n != VECFS_FLOAT_E_LEN + (signbit(f) ? 1 : 0))
		fail_msg("vecfs_format_float_e(%a) = \"%s\": %d bytes", (double)f, got, n);
	float g = 0;
	assert_int_equal(vecfs_parse_float(got, (size_t)n, &g), 0);
	assert_int_equal(bits_of(g), bits_of(f));
}

/* vecfs_format_float_e is printf's "%.8e" byte for byte, of a length the
 * sign alone sets, and reads back to the same float: every exponent, both
 * sides of each power of ten, subnormals and zeros */
static void test_fmt_float_e(void **state)
{
	(void)state;
	uint64_t lcg = 17;
	for (int i = 0; i < 600000; i++) {
		uint32_t u = (uint32_t)(next(&lcg) >> 32);
		float f;
		memcpy(&f, &u, sizeof f);
		if (isfinite(f))
			expect_e_as_printf(f);
	}
	for (int k = -45; k <= 38; k++) {
		float f = (float)pow(10.0, k), lo = f, hi = f;
		for (int i = 0; i < 100; i++) {
			expect_e_as_printf(lo);
			expect_e_as_printf(-hi);
			lo = nextafterf(lo, 0.0f);
			hi = nextafterf(hi, INFINITY);
		}
	}
	for (int i = 0; i <= 100000; i++)
		expect_e_as_printf((float)i / 8.0f);
	expect_e_as_printf(0.0f);
	expect_e_as_printf(-0.0f);
	expect_e_as_printf(FLT_MAX);
	expect_e_as_printf(-FLT_MAX);
	expect_e_as_printf(FLT_MIN);
	expect_e_as_printf(nextafterf(0.0f, 1.0f));
	expect_e_as_printf(1e-22f);
}

/* a token of any length is read as strtof reads it */
static void test_parse_float_long_tokens(void **state)
{
	(void)state;
	for (size_t len = 120; len < 5000; len = len * 3 / 2) {
		char *s = malloc(len + 1);
		assert_non_null(s);
		memcpy(s, "1.", 2);
		memset(s + 2, '0', len - 3);
		s[len - 1] = '5';
		s[len] = 0;
		float f = 0, want = strtof(s, NULL);
		assert_int_equal(vecfs_parse_float(s, len, &f), 0);
		assert_int_equal(bits_of(f), bits_of(want));
		s[len / 2] = 'x';
		assert_int_equal(vecfs_parse_float(s, len, &f), -EINVAL);
		free(s);
	}
}

static void test_trim(void **state)
{
	(void)state;
	const char *s = " \t 1 2\r\t ";
	size_t n = strlen(s);
	fs_trim(&s, &n);
	assert_int_equal(n, 3);
	assert_memory_equal(s, "1 2", 3);
	s = " \t\r";
	n = 3;
	fs_trim(&s, &n);
	assert_int_equal(n, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_parse_float_tokens),
		cmocka_unit_test(test_parse_float_printed),
		cmocka_unit_test(test_parse_float_ties),
		cmocka_unit_test(test_parse_float_digit_strings),
		cmocka_unit_test(test_parse_uint),
		cmocka_unit_test(test_fmt_float_round_trip),
		cmocka_unit_test(test_fmt_float_as_printf),
		cmocka_unit_test(test_fmt_float_e),
		cmocka_unit_test(test_parse_float_long_tokens),
		cmocka_unit_test(test_trim),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
