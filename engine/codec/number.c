/*
 * engine/codec/number.c - numbers as users write and read them, in the C
 * locale: float32 printed so that it reads back to the same float, "%.9g"
 * (vecfs_format_float) and a fixed-width "%.8e" (vecfs_format_float_e),
 * without printf; decimal integers and floats parsed (vecfs_parse_uint,
 * vecfs_parse_float).  No I/O, no state.
 *
 * vecfs_parse_float() reads the usual plain decimals itself and leaves the
 * rest (hexadecimal floats, inf, nan, more than 19 significant digits,
 * large exponents, ties) to strtof(): a query vector of 128 numbers is
 * parsed in about a fifth of the time strtof() alone takes.
 */
#include "vecfs.h"
#include "number.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- vecfs_format_float
 *
 * "%.9g" of a float32, byte for byte, without printf: distances are
 * printed ten to a query, and printf's exact conversion took 7% of a
 * query's time in the daemon.  A float is m * 2^e (m < 2^24); its nine
 * significant digits are m * 10^(8-X) / 2^-e (or m * 2^e / 10^(X-8)),
 * rounded half to even as printf rounds the exact value.  Both fit 128-bit
 * integers for 1e-22 <= |f|; smaller numbers (and inf, nan) go to
 * snprintf. */

typedef unsigned __int128 u128;

/* 10^n for 0 <= n <= 38 (10^38 < 2^127). */
static u128 pow10_u128(int n)
{
	static const uint64_t p[20] = {
		1ull, 10ull, 100ull, 1000ull, 10000ull, 100000ull, 1000000ull, 10000000ull,
		100000000ull, 1000000000ull, 10000000000ull, 100000000000ull, 1000000000000ull,
		10000000000000ull, 100000000000000ull, 1000000000000000ull, 10000000000000000ull,
		100000000000000000ull, 1000000000000000000ull, 10000000000000000000ull,
	};
	return n < 20 ? (u128)p[n] : (u128)p[19] * p[n - 19];
}

/* q = num / den rounded half to even. */
static uint64_t div_round_even(u128 num, u128 den)
{
	u128 q = num / den, r = num - q * den;
	if (r > den - r || (r == den - r && (q & 1)))
		q++;
	return (uint64_t)q;
}

/* The same for den = 2^s (0 < s < 128): a shift, not a division. */
static uint64_t shift_round_even(u128 num, int s)
{
	u128 q = num >> s, r = num & (((u128)1 << s) - 1), half = (u128)1 << (s - 1);
	if (r > half || (r == half && (q & 1)))
		q++;
	return (uint64_t)q;
}

/* Nine significant digits of |f| = m * 2^e rounded at decimal exponent x
 * (10^x <= |f| < 10^(x+1) guessed): the digits D, or 0 when x was wrong
 * (D out of [10^8, 10^9)). */
static uint64_t nine_digits(uint32_t m, int e, int x)
{
	uint64_t d;
	if (e >= 0) {
		u128 v = (u128)m << e;
		d = x >= 8 ? div_round_even(v, pow10_u128(x - 8)) : (uint64_t)(v * pow10_u128(8 - x));
	} else {
		d = shift_round_even((u128)m * pow10_u128(8 - x), -e);
	}
	return d;
}

/* The nine significant digits D of a normal float of magnitude a >= 1e-22
 * (bits: its bits) and its decimal exponent *x: |f| ~ D * 10^(*x - 8).
 * The exponent is guessed from the binary one (floor(E log10 2), then one
 * up where a reaches the next power of ten), and set right by the digits
 * when the guess was one off (powers of ten below 1 are not exact
 * doubles). */
static uint64_t nine_digits_of(uint32_t bits, double a, int *x)
{
	static const double p10[] = { /* 10^-22 .. 10^39 */
		1e-22, 1e-21, 1e-20, 1e-19, 1e-18, 1e-17, 1e-16, 1e-15, 1e-14, 1e-13, 1e-12,
		1e-11, 1e-10, 1e-9,  1e-8,  1e-7,  1e-6,  1e-5,  1e-4,  1e-3,  1e-2,  1e-1,
		1e0,   1e1,   1e2,   1e3,   1e4,   1e5,   1e6,   1e7,   1e8,   1e9,   1e10,
		1e11,  1e12,  1e13,  1e14,  1e15,  1e16,  1e17,  1e18,  1e19,  1e20,  1e21,
		1e22,  1e23,  1e24,  1e25,  1e26,  1e27,  1e28,  1e29,  1e30,  1e31,  1e32,
		1e33,  1e34,  1e35,  1e36,  1e37,  1e38,  1e39,
	};
	uint32_t m = (bits & 0x7fffff) | 0x800000;
	int e = (int)((bits >> 23) & 0xff) - 150;
	int g = ((e + 23) * 1233) >> 12; /* floor(E log10 2), |E| < 128 */
	if (g < -22)
		g = -22;
	if (g + 1 <= 39 && a >= p10[g + 1 + 22])
		g++;
	*x = g;
	uint64_t d = nine_digits(m, e, *x);
	if (d < 100000000u) { /* the guess one too high */
		(*x)--;
		d = nine_digits(m, e, *x);
	} else if (d >= 1000000000u) { /* one too low, or rounded to ten digits */
		(*x)++;
		d = nine_digits(m, e, *x);
	}
	if (d >= 1000000000u) { /* 9.99999999995 and up: 1e(x+1) */
		(*x)++;
		d = 100000000u;
	}
	return d;
}

static char *put_digits(char *p, uint64_t v, int n)
{
	for (int i = n - 1; i >= 0; i--) {
		p[i] = (char)('0' + v % 10);
		v /= 10;
	}
	return p + n;
}

/* The nine digits of d < 10^9: the first alone, the other eight as four
 * pairs from a table, none waiting on the one before (put_digits() divides
 * nine times in a row). */
static void put_nine(char *p, uint32_t d)
{
	static const char pairs[201] = "00010203040506070809"
				       "10111213141516171819"
				       "20212223242526272829"
				       "30313233343536373839"
				       "40414243444546474849"
				       "50515253545556575859"
				       "60616263646566676869"
				       "70717273747576777879"
				       "80818283848586878889"
				       "90919293949596979899";
	uint32_t r = d % 100000000u, a = r / 10000u, b = r % 10000u;
	p[0] = (char)('0' + d / 100000000u);
	memcpy(p + 1, pairs + 2 * (a / 100u), 2);
	memcpy(p + 3, pairs + 2 * (a % 100u), 2);
	memcpy(p + 5, pairs + 2 * (b / 100u), 2);
	memcpy(p + 7, pairs + 2 * (b % 100u), 2);
}

int vecfs_format_float(char *out, size_t cap, float f)
{
	uint32_t bits;
	memcpy(&bits, &f, sizeof bits);
	int neg = (int)(bits >> 31), be = (int)((bits >> 23) & 0xff);
	uint32_t frac = bits & 0x7fffff;
	char buf[32], *p = buf;
	if (be == 0xff || (be == 0 && frac) || cap < sizeof buf)
		return snprintf(out, cap, "%.9g", (double)f); /* inf, nan, subnormal */
	if (neg)
		*p++ = '-';
	if (be == 0) { /* zero */
		*p++ = '0';
	} else {
		double a = fabs((double)f);
		if (a < 1e-22)
			return snprintf(out, cap, "%.9g", (double)f);
		int x;
		uint64_t d = nine_digits_of(bits, a, &x);
		char dig[9];
		put_nine(dig, (uint32_t)d);
		/* %g drops trailing zeros */
		int nd = 9;
		while (nd > 1 && dig[nd - 1] == '0')
			nd--;
		if (x < -4 || x >= 9) { /* d.ddde+XX */
			*p++ = dig[0];
			if (nd > 1) {
				*p++ = '.';
				memcpy(p, dig + 1, (size_t)nd - 1);
				p += nd - 1;
			}
			*p++ = 'e';
			*p++ = x < 0 ? '-' : '+';
			int ax = x < 0 ? -x : x;
			p = put_digits(p, (uint64_t)ax, 2); /* |x| <= 38 */
		} else if (x < 0) { /* 0.000ddd */
			*p++ = '0';
			*p++ = '.';
			for (int i = 0; i < -x - 1; i++)
				*p++ = '0';
			memcpy(p, dig, (size_t)nd);
			p += nd;
		} else { /* ddd.ddd or ddd000 */
			int ip = x + 1;
			for (int i = 0; i < ip; i++)
				*p++ = i < nd ? dig[i] : '0';
			if (nd > ip) {
				*p++ = '.';
				memcpy(p, dig + ip, (size_t)(nd - ip));
				p += nd - ip;
			}
		}
	}
	size_t n = (size_t)(p - buf);
	memcpy(out, buf, n);
	out[n] = 0;
	return (int)n;
}


/* "%.8e" of a finite float: sign, one digit, '.', eight digits, 'e', the
 * exponent's sign and two digits (a float32's decimal exponent is within
 * -45..38), so VECFS_FLOAT_E_LEN bytes, one more when negative. */
int vecfs_format_float_e(char *out, float f)
{
	uint32_t bits;
	memcpy(&bits, &f, sizeof bits);
	int neg = (int)(bits >> 31), be = (int)((bits >> 23) & 0xff);
	uint32_t frac = bits & 0x7fffff;
	char *p = out;
	double a = fabs((double)f);
	if (be == 0xff || (be == 0 && frac) || (be && a < 1e-22)) {
		int n = snprintf(out, 24, "%.8e", (double)f); /* subnormal, tiny, inf, nan */
		return n;
	}
	if (neg)
		*p++ = '-';
	uint64_t d = 0;
	int x = 0;
	if (be)
		d = nine_digits_of(bits, a, &x);
	char dig[9];
	put_nine(dig, (uint32_t)d);
	*p++ = dig[0];
	*p++ = '.';
	memcpy(p, dig + 1, 8);
	p += 8;
	*p++ = 'e';
	*p++ = x < 0 ? '-' : '+';
	p = put_digits(p, (uint64_t)(x < 0 ? -x : x), 2);
	*p = 0;
	return (int)(p - out);
}

/* ---------------------------------------------------------------- parsing */

int vecfs_parse_uint(const char *s, size_t n, uint64_t max, uint64_t *out)
{
	uint64_t v = 0;
	if (n == 0)
		return -EINVAL;
	for (size_t i = 0; i < n; i++) {
		if (s[i] < '0' || s[i] > '9')
			return -EINVAL;
		unsigned d = (unsigned)(s[i] - '0');
		if (v > (max - d) / 10)
			return -ERANGE;
		v = v * 10 + d;
	}
	*out = v;
	return 0;
}

static int is_digit(char c)
{
	return c >= '0' && c <= '9';
}

/* [+-]digits[.digits][(e|E)[+-]digits] with at most 19 significant digits
 * M and its power of ten, rounded by vf_decimal_value() (number.h).
 * Read from the start of s[0..n), up to the first byte that cannot go on
 * the number: returns 0 with *out set and *used its length, or 1: not
 * handled here. */
int vf_decimal_prefix(const char *s, size_t n, float *out, size_t *used)
{
	const char *p = s, *end = s + n;
	uint64_t m = 0;
	int neg = 0, sig = 0, digits = 0, e10 = 0;

	if (p < end && (*p == '+' || *p == '-'))
		neg = *p++ == '-';
	for (; p < end && is_digit(*p); p++, digits++) {
		if (m == 0 && *p == '0')
			continue;
		if (++sig > 19)
			return 1;
		m = m * 10 + (uint64_t)(*p - '0');
	}
	if (p < end && *p == '.') {
		for (p++; p < end && is_digit(*p); p++, digits++) {
			e10--;
			if (m == 0 && *p == '0')
				continue;
			if (++sig > 19)
				return 1;
			m = m * 10 + (uint64_t)(*p - '0');
		}
	}
	if (digits == 0)
		return 1;
	if (p < end && (*p == 'e' || *p == 'E')) {
		int eneg = 0, x = 0;
		p++;
		if (p < end && (*p == '+' || *p == '-'))
			eneg = *p++ == '-';
		if (p == end || !is_digit(*p))
			return 1;
		for (; p < end && is_digit(*p); p++)
			if (x < 100000)
				x = x * 10 + (*p - '0');
		if (x >= 100000)
			return 1; /* stopped counting: strtof decides (a 4 MiB line may
				   * hold 100,000 digits after the point) */
		e10 += eneg ? -x : x;
	}
	*used = (size_t)(p - s);
	return vf_decimal_value(m, e10, neg, out);
}

int vecfs_parse_float(const char *s, size_t n, float *out)
{
	char small[128], *buf = small;
	int rc = 0;
	if (n == 0)
		return -EINVAL;
	size_t used;
	float f0;
	if (vf_decimal_prefix(s, n, &f0, &used) == 0 && used == n) {
		*out = f0;
		return 0;
	}
	/* strtof also skips leading blanks: they are not part of a token here */
	if (s[0] == ' ' || s[0] == '\t' || s[0] == '\n' || s[0] == '\r' || s[0] == '\f' ||
	    s[0] == '\v')
		return -EINVAL;
	if (n >= sizeof small && !(buf = malloc(n + 1)))
		return -ENOMEM; /* a token as long as a line may be */
	memcpy(buf, s, n);
	buf[n] = 0;
	char *endp;
	errno = 0;
	float f = strtof(buf, &endp);
	if (endp != buf + n)
		rc = -EINVAL;
	else if (errno == ERANGE && isinf(f))
		rc = -ERANGE;
	else
		*out = f;
	if (buf != small)
		free(buf);
	return rc;
}
