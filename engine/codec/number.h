/*
 * engine/codec/number.h - the plain decimal the text codecs' tokenizers
 * read a number with in one pass (number.c).
 */
#ifndef VECFS_CODEC_NUMBER_H
#define VECFS_CODEC_NUMBER_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "vecfs.h" /* vecfs_parse_float() */

/* A plain decimal, [+-]digits[.digits][(e|E)[+-]digits], at the start of
 * s[0..n), read up to the first byte that cannot go on it: 0 with *out
 * the float vecfs_parse_float() gives that token and *used its length,
 * or 1: not one it reads (vecfs_parse_float() decides). */
int vf_decimal_prefix(const char *s, size_t n, float *out, size_t *used);
/* Eight bytes at p, the first in the lowest. */
static inline uint64_t vf_load8(const char *p)
{
	uint64_t v;
	memcpy(&v, p, 8);
	return v;
}

/* How many of the eight bytes of v, from the first, are digits: a byte
 * not in '0'..'9' has its top bit set in b + 0x46 (from ':' up) or b -
 * 0x30 (below '0'); the carries and borrows of the whole word only reach
 * bytes above the first such byte. */
static inline int vf_digit_run(uint64_t v)
{
	uint64_t nd = ((v + 0x4646464646464646ull) | (v - 0x3030303030303030ull)) &
		      0x8080808080808080ull;
	return nd ? __builtin_ctzll(nd) >> 3 : 8;
}

/* The value of the first k (1..8) digits of v: moved to the top of the
 * word (zeros before them), then paired, paired again and again. */
static inline uint64_t vf_digits_value(uint64_t v, int k)
{
	v = (v << (8 * (8 - k))) & 0x0f0f0f0f0f0f0f0full;
	v = v * 10 + (v >> 8);
	return (((v & 0x000000ff000000ffull) * (100 + (1000000ull << 32))) +
		(((v >> 16) & 0x000000ff000000ffull) * (1 + (10000ull << 32)))) >> 32;
}

/* The float nearest (-1)^neg M 10^E, as both readers round it: 0 with
 * *out, or 1 when it is not theirs to decide.  |E| <= 22, so 10^|E| is an
 * exact double.  M <= 2^53 is one too: M * 10^E (or M / 10^-E) is then the
 * correctly rounded double of the number, and rounding it to float gives
 * the float nearest the number unless the double lies exactly halfway
 * between two floats (it may have been rounded onto that point).  A
 * larger M (16 to 19 digits: what prints a double in full) is rounded
 * once more, on its way to a double: the quotient is then within one and
 * a half units of its last place of the number, so it rounds to the same
 * float unless it lies within two such units of a halfway point.  strtof decides those,
 * and anything from 3.4e38 on (the float range's end).  An integer below
 * 2^24 is its own float. */
static inline int vf_decimal_value(uint64_t m, int e10, int neg, float *out)
{
	static const double pow10[23] = {
		1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,  1e8,  1e9,  1e10, 1e11,
		1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22,
	};
	const uint64_t half = UINT64_C(1) << 28; /* a double has 29 more fraction bits */
	float f;
	if (e10 == 0 && m < (UINT64_C(1) << 24)) { /* (0 too, without a branch of its own) */
		f = (float)m;
	} else if (m == 0) {
		f = 0.0f;
	} else {
		if (e10 < -22 || e10 > 22)
			return 1;
		double d = e10 < 0 ? (double)m / pow10[-e10] : (double)m * pow10[e10];
		uint64_t bits, low;
		memcpy(&bits, &d, sizeof bits);
		low = bits & ((UINT64_C(1) << 29) - 1);
		if (m <= (UINT64_C(1) << 53) ? low == half : low + 2 >= half && low <= half + 2)
			return 1;
		if (!(d < 3.4e38))
			return 1;
		f = (float)d;
	}
	*out = neg ? -f : f;
	return 0;
}

/* The most common numbers of text input, [-]D[.F] with at most 7 digits
 * in D and at most 15 in F (19 in all: "%.9g" of a float below 1 has up
 * to 13), read eight digits a step: the same value and length as
 * vf_decimal_prefix() (the same digits M and exponent, rounded by the
 * same vf_decimal_value()), or 1 for anything else, or with fewer than 18
 * bytes in s[0..n) (each look reads eight; F past 7 digits wants room
 * for a second look at F's ninth byte on). */
static inline int vf_decimal_fast(const char *s, size_t n, float *out, size_t *used)
{
	static const uint64_t i10[9] = {1,	 10,	  100,	    1000,     10000,
					100000, 1000000, 10000000, 100000000};
	if (n < 18)
		return 1;
	const char *p = s;
	int neg = *p == '-';
	p += neg;
	uint64_t w = vf_load8(p);
	int k1 = vf_digit_run(w);
	if (k1 == 0 || k1 == 8)
		return 1;
	uint64_t m = vf_digits_value(w, k1);
	int k2 = 0;
	p += k1;
	if (*p == '.') {
		w = vf_load8(p + 1);
		k2 = vf_digit_run(w);
		if (k2 == 0)
			return 1;
		m = m * i10[k2] + vf_digits_value(w, k2);
		if (k2 == 8) {
			/* F's ninth byte on: its eight bytes must lie in s[0..n) */
			if ((size_t)(p - s) + 17 > n)
				return 1;
			w = vf_load8(p + 9);
			int k3 = vf_digit_run(w);
			if (k3 == 8 || k1 + 8 + k3 > 19)
				return 1;
			if (k3)
				m = m * i10[k3] + vf_digits_value(w, k3);
			k2 += k3;
		}
		p += 1 + k2;
	}
	if (*p == 'e' || *p == 'E')
		return 1;
	*used = (size_t)(p - s);
	return vf_decimal_value(m, -k2, neg, out);
}

/* vecfs_parse_float() of the token s[0..n), which lies in `room` bytes
 * that may be read from s (room >= n: the rest of its line): the one-pass
 * reader first, which gives the same float when it takes the whole token,
 * for tokens of up to 17 bytes ("%.9g" prints at most 15; longer ones,
 * "%.17g"'s, have more digits after the point than it reads, and reading
 * them twice cost more than it saved). */
static inline int vf_parse_token(const char *s, size_t n, size_t room, float *out)
{
	size_t used;
	float f;
	if (n <= 17 && vf_decimal_fast(s, room, &f, &used) == 0 && used == n) {
		*out = f;
		return 0;
	}
	return vecfs_parse_float(s, n, out);
}

#endif
