/*
 * engine/codec/json.c - the JSON scanner (see json.h).  No I/O, no state,
 * no allocation: a value's containers are tracked in a bit stack the
 * caller gives, so a deep text costs no C stack.
 */
#include "json.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "vecfs.h"

static int say(char *why, size_t wl, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int say(char *why, size_t wl, const char *fmt, ...)
{
	if (why && wl) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(why, wl, fmt, ap);
		va_end(ap);
	}
	return -EINVAL;
}

static int hexval(char c)
{
	return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
	       : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

static int hex4(const char *p, size_t n, size_t *i, unsigned *out, char *why, size_t wl)
{
	if (n - *i < 4)
		return say(why, wl, "truncated \\u escape");
	unsigned v = 0;
	for (int k = 0; k < 4; k++) {
		int h = hexval(p[*i + (size_t)k]);
		if (h < 0)
			return say(why, wl, "bad \\u escape");
		v = v * 16 + (unsigned)h;
	}
	*i += 4;
	*out = v;
	return 0;
}

static int utf8_put(unsigned char u[4], unsigned cp)
{
	if (cp < 0x80) {
		u[0] = (unsigned char)cp;
		return 1;
	}
	if (cp < 0x800) {
		u[0] = (unsigned char)(0xC0 | cp >> 6);
		u[1] = (unsigned char)(0x80 | (cp & 0x3F));
		return 2;
	}
	if (cp < 0x10000) {
		u[0] = (unsigned char)(0xE0 | cp >> 12);
		u[1] = (unsigned char)(0x80 | (cp >> 6 & 0x3F));
		u[2] = (unsigned char)(0x80 | (cp & 0x3F));
		return 3;
	}
	u[0] = (unsigned char)(0xF0 | cp >> 18);
	u[1] = (unsigned char)(0x80 | (cp >> 12 & 0x3F));
	u[2] = (unsigned char)(0x80 | (cp >> 6 & 0x3F));
	u[3] = (unsigned char)(0x80 | (cp & 0x3F));
	return 4;
}

int vf_json_escape(const char *p, size_t n, size_t *i, unsigned char u[4], char *why, size_t wl)
{
	if (*i + 1 >= n) {
		*i = n;
		say(why, wl, "unterminated string");
		return -1;
	}
	char c = p[*i + 1];
	*i += 2;
	unsigned cp;
	switch (c) {
	case '"': case '\\': case '/': u[0] = (unsigned char)c; return 1;
	case 'b': u[0] = '\b'; return 1;
	case 'f': u[0] = '\f'; return 1;
	case 'n': u[0] = '\n'; return 1;
	case 'r': u[0] = '\r'; return 1;
	case 't': u[0] = '\t'; return 1;
	case 'u':
		if (hex4(p, n, i, &cp, why, wl))
			return -1;
		if (cp >= 0xD800 && cp < 0xDC00) {
			unsigned lo;
			if (n - *i < 6 || p[*i] != '\\' || p[*i + 1] != 'u') {
				say(why, wl, "unpaired surrogate in \\u escape");
				return -1;
			}
			*i += 2;
			if (hex4(p, n, i, &lo, why, wl))
				return -1;
			if (lo < 0xDC00 || lo > 0xDFFF) {
				say(why, wl, "unpaired surrogate in \\u escape");
				return -1;
			}
			cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
		} else if (cp >= 0xDC00 && cp <= 0xDFFF) {
			say(why, wl, "unpaired surrogate in \\u escape");
			return -1;
		}
		return utf8_put(u, cp);
	default:
		say(why, wl, "bad escape '\\%c'", c);
		return -1;
	}
}

int vf_json_str_next(const char *p, size_t n, size_t *i, unsigned char u[4])
{
	if (*i >= n)
		return -1;
	unsigned char c = (unsigned char)p[*i];
	if (c == '"') {
		(*i)++;
		return 0;
	}
	if (c < 0x20)
		return -1;
	if (c != '\\') {
		u[0] = c;
		(*i)++;
		return 1;
	}
	return vf_json_escape(p, n, i, u, NULL, 0);
}

int vf_json_string(const char *p, size_t n, size_t *i, char *out, size_t *outlen, char *why,
		   size_t wl)
{
	size_t k = *i + 1, o = 0;
	while (k < n) {
		size_t run = k;
		while (k < n && p[k] != '"' && p[k] != '\\' && (unsigned char)p[k] >= 0x20)
			k++;
		/* a payload goes out as it is: its strings must be UTF-8 too */
		if (!vecfs_utf8_valid(p + run, k - run)) {
			*i = k;
			return say(why, wl, "a string is not valid UTF-8");
		}
		if (out) {
			memcpy(out + o, p + run, k - run);
			o += k - run;
		}
		if (k >= n)
			break;
		if (p[k] == '"') {
			*i = k + 1;
			if (outlen)
				*outlen = o;
			return 0;
		}
		if (p[k] != '\\') {
			*i = k + 1;
			return say(why, wl, "control character in a string");
		}
		unsigned char u[4];
		int m = vf_json_escape(p, n, &k, u, why, wl);
		if (m < 0) {
			*i = k;
			return -EINVAL;
		}
		if (out) {
			memcpy(out + o, u, (size_t)m);
			o += (size_t)m;
		}
	}
	*i = n;
	return say(why, wl, "unterminated string");
}

size_t vf_json_number(const char *p, size_t n, size_t i, char *why, size_t wl)
{
	if (i < n && p[i] == '-')
		i++;
	if (i < n && p[i] == '0')
		i++;
	else if (i < n && p[i] >= '1' && p[i] <= '9')
		while (i < n && p[i] >= '0' && p[i] <= '9')
			i++;
	else
		return (size_t)(say(why, wl, "expected a number") & 0);
	if (i < n && p[i] == '.') {
		if (++i >= n || p[i] < '0' || p[i] > '9')
			return (size_t)(say(why, wl, "bad number") & 0);
		while (i < n && p[i] >= '0' && p[i] <= '9')
			i++;
	}
	if (i < n && (p[i] == 'e' || p[i] == 'E')) {
		i++;
		if (i < n && (p[i] == '+' || p[i] == '-'))
			i++;
		if (i >= n || p[i] < '0' || p[i] > '9')
			return (size_t)(say(why, wl, "bad number") & 0);
		while (i < n && p[i] >= '0' && p[i] <= '9')
			i++;
	}
	return i;
}

/* The scalar at p[i]: its end, or 0 with why. */
static size_t scalar(const char *p, size_t n, size_t i, char *why, size_t wl)
{
	static const char *const words[] = {"true", "false", "null"};
	switch (p[i]) {
	case '"':
		return vf_json_string(p, n, &i, NULL, NULL, why, wl) ? 0 : i;
	case 't': case 'f': case 'n': {
		const char *w = words[p[i] == 't' ? 0 : p[i] == 'f' ? 1 : 2];
		size_t l = strlen(w);
		if (n - i < l || memcmp(p + i, w, l))
			return (size_t)(say(why, wl, "unexpected character '%c'", p[i]) & 0);
		return i + l;
	}
	default:
		return vf_json_number(p, n, i, why, wl);
	}
}

int vf_json_value(const char *p, size_t n, size_t *at, size_t max_depth, uint8_t *stack,
		  uint32_t *depth, uint32_t *values, char *why, size_t wl)
{
	size_t d = 0, i = *at, e;
	uint32_t md = 0, nv = 0;
	int rc = -EINVAL;
	for (;;) {
		/* a value at p[i], d containers deep */
		if (d > max_depth) {
			say(why, wl, "nested too deeply (more than %zu levels)", max_depth);
			rc = -E2BIG;
			goto out;
		}
		nv += nv < UINT32_MAX;
		i = vf_json_ws(p, n, i);
		if (i >= n) {
			say(why, wl, "unexpected end of line");
			goto out;
		}
		if (p[i] == '{' || p[i] == '[') {
			int o = p[i] == '{';
			if (o)
				stack[d / 8] |= (uint8_t)(1u << d % 8);
			else
				stack[d / 8] &= (uint8_t)~(1u << d % 8);
			d++;
			md = d > md ? (uint32_t)(d < UINT32_MAX ? d : UINT32_MAX) : md;
			i = vf_json_ws(p, n, i + 1);
			if (i < n && p[i] == (o ? '}' : ']')) {
				d--;
				i++;
			} else if (o) {
				goto member;
			} else {
				continue;
			}
		} else {
			if (!(e = scalar(p, n, i, why, wl))) {
				/* a string's fault is where it was seen; a
				 * word's or number's, where it starts */
				if (p[i] == '"')
					vf_json_string(p, n, &i, NULL, NULL, NULL, 0);
				goto out;
			}
			i = e;
		}
		/* after a value: a separator, or the ends of containers */
		for (;;) {
			if (d == 0) {
				rc = 0;
				goto out;
			}
			i = vf_json_ws(p, n, i);
			int o = stack[(d - 1) / 8] >> (d - 1) % 8 & 1;
			if (i < n && p[i] == (o ? '}' : ']')) {
				d--;
				i++;
				continue;
			}
			if (i >= n || p[i] != ',') {
				say(why, wl, o ? "expected ',' or '}'" : "expected ',' or ']'");
				goto out;
			}
			i++;
			if (o)
				goto member;
			break;
		}
		continue;
	member:
		/* a member name and its ':' at p[i] */
		i = vf_json_ws(p, n, i);
		if (i >= n || p[i] != '"') {
			say(why, wl, "expected a member name");
			goto out;
		}
		if (vf_json_string(p, n, &i, NULL, NULL, why, wl))
			goto out;
		i = vf_json_ws(p, n, i);
		if (i >= n || p[i] != ':') {
			say(why, wl, "expected ':'");
			goto out;
		}
		i++;
	}
out:
	*at = i;
	if (depth)
		*depth = md;
	if (values)
		*values = nv;
	return rc;
}
