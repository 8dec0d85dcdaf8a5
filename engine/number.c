/*
 * engine/number.c - float32 printed in the C locale, so that it reads
 * back to the same float: "%.9g" (vecfs_format_float) and a fixed-width
 * "%.8e" (vecfs_format_float_e), without printf.  No I/O, no state.
 */
#include "vecfs.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
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

static u128 pow10_u128(int n)
{
	u128 p = 1;
	while (n-- > 0)
		p *= 10;
	return p;
}

/* q = num / den rounded half to even. */
static uint64_t div_round_even(u128 num, u128 den)
{
	u128 q = num / den, r = num - q * den;
	if (r > den - r || (r == den - r && (q & 1)))
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
		d = div_round_even((u128)m * pow10_u128(8 - x), (u128)1 << -e);
	}
	return d;
}

/* The nine significant digits D of a normal float of magnitude a >= 1e-22
 * (bits: its bits) and its decimal exponent *x: |f| ~ D * 10^(*x - 8). */
static uint64_t nine_digits_of(uint32_t bits, double a, int *x)
{
	uint32_t m = (bits & 0x7fffff) | 0x800000;
	int e = (int)((bits >> 23) & 0xff) - 150;
	*x = (int)floor(log10(a));
	uint64_t d = nine_digits(m, e, *x);
	if (d < 100000000u) { /* log10 rounded up across a power of ten */
		(*x)--;
		d = nine_digits(m, e, *x);
	} else if (d >= 1000000000u) { /* rounded to ten digits */
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
		/* %g drops trailing zeros */
		int nd = 9;
		while (nd > 1 && d % 10 == 0) {
			d /= 10;
			nd--;
		}
		char dig[9];
		put_digits(dig, d, nd);
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
	put_digits(dig, d, 9);
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
