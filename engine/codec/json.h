/*
 * engine/codec/json.h - the JSON scanner: white space, strings (escapes,
 * \u surrogate pairs, UTF-8 checked), numbers, literals, and a whole value
 * checked without recursion against a depth limit.  Positions are byte
 * offsets into p[0..n); nothing is allocated.  The ingest of .jsonl rows
 * (codec/rows.c) and payload filters (filter.c) read JSON through it.
 */
#ifndef VECFS_CODEC_JSON_H
#define VECFS_CODEC_JSON_H

#include <stddef.h>
#include <stdint.h>

/* Past the white space (space, tab, CR, LF) at p[i]. */
static inline size_t vf_json_ws(const char *p, size_t n, size_t i)
{
	while (i < n && (p[i] == ' ' || p[i] == '\t' || p[i] == '\r' || p[i] == '\n'))
		i++;
	return i;
}

/* The escape at p[*i] ('\\'): its UTF-8 bytes in u (1-4 of them, a
 * surrogate pair as one character), *i past it; -1 when it is not a JSON
 * escape, *i where that was seen and why (wl bytes) saying what. */
int vf_json_escape(const char *p, size_t n, size_t *i, unsigned char u[4], char *why, size_t wl);

/* The next decoded bytes of the string whose body continues at p[*i]
 * (its bytes are not checked as UTF-8 here): how many went to u (1-4), 0
 * at the closing quote (*i then past it), -1 when it is not a JSON
 * string. */
int vf_json_str_next(const char *p, size_t n, size_t *i, unsigned char u[4]);

/* The string at p[*i] ('"'), its raw bytes checked as UTF-8: 0 and *i past
 * its closing quote, its decoded bytes in out[0..*outlen) when out is not
 * NULL (out holds as many bytes as the string's text: decoding never
 * lengthens);
 * -EINVAL with *i where the fault was seen and why. */
int vf_json_string(const char *p, size_t n, size_t *i, char *out, size_t *outlen, char *why,
		   size_t wl);

/* The end of the number at p[i], or 0 with why ("expected a number" when
 * none starts there, "bad number" when its fraction or exponent has no
 * digit). */
size_t vf_json_number(const char *p, size_t n, size_t i, char *why, size_t wl);

/* The value at p[*i] (after white space), checked whole: 0 and *i past
 * it; -EINVAL with *i where the fault was seen and why; -E2BIG when a
 * value lies more than max_depth containers deep (*i at it).  stack holds
 * max_depth / 8 + 1 bytes (a bit a container level).  *depth: the deepest
 * nesting of containers seen, *values: the values seen (either may be
 * NULL). */
int vf_json_value(const char *p, size_t n, size_t *i, size_t max_depth, uint8_t *stack,
		  uint32_t *depth, uint32_t *values, char *why, size_t wl);

#endif
