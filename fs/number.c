/*
 * fs/number.c - decimal parsing and float formatting (C locale).
 *
 * parse_float() reads the usual plain decimals itself and leaves the rest
 * (hexadecimal floats, inf, nan, more than 19 significant digits, large
 * exponents, ties) to strtof(): a query vector of 128 numbers is parsed in
 * about a fifth of the time strtof() alone takes.
 */
#include "number.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void trim(const char **s, size_t *n)
{
	const char *p = *s;
	size_t len = *n;
	while (len && (*p == ' ' || *p == '\t' || *p == '\r')) {
		p++;
		len--;
	}
	while (len && (p[len - 1] == ' ' || p[len - 1] == '\t' || p[len - 1] == '\r'))
		len--;
	*s = p;
	*n = len;
}

int parse_uint(const char *s, size_t n, uint64_t max, uint64_t *out)
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
 * M and a power of ten 10^E, |E| <= 22: M and 10^|E| are exact doubles, so
 * M * 10^E (or M / 10^-E) is the correctly rounded double of the number.
 * Rounding that double to float gives the float nearest the number unless
 * the double lies exactly halfway between two floats (it may have been
 * rounded onto that point): then strtof decides.  M <= 2^53 and |E| <= 22
 * keep the result far from float overflow and subnormals.
 * Returns 0 with *out set, or 1: not handled here. */
static int parse_plain_decimal(const char *s, size_t n, float *out)
{
	static const double pow10[23] = {
		1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,  1e8,  1e9,  1e10, 1e11,
		1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22,
	};
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
		e10 += eneg ? -x : x;
	}
	if (p != end)
		return 1;
	if (m == 0) {
		*out = neg ? -0.0f : 0.0f;
		return 0;
	}
	if (m > (UINT64_C(1) << 53) || e10 < -22 || e10 > 22)
		return 1;
	double d = e10 < 0 ? (double)m / pow10[-e10] : (double)m * pow10[e10];
	uint64_t bits;
	memcpy(&bits, &d, sizeof bits);
	/* a double has 29 more fraction bits than a float: halfway is 1000...0 */
	if ((bits & ((UINT64_C(1) << 29) - 1)) == UINT64_C(1) << 28)
		return 1;
	float f = (float)d;
	*out = neg ? -f : f;
	return 0;
}

int parse_float(const char *s, size_t n, float *out)
{
	char small[128], *buf = small;
	int rc = 0;
	if (n == 0)
		return -EINVAL;
	if (parse_plain_decimal(s, n, out) == 0)
		return 0;
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
