/*
 * engine/query/filter.h - payload filters: the JSON text of a query's filter
 * compiled into a bounded tree, evaluated against a record's payload
 * (its JSON bytes as stored).
 */
#ifndef VF_FILTER_H
#define VF_FILTER_H

#include <stddef.h>
#include <stdint.h>

/* Limits of a filter: past them, -E2BIG. */
#define VF_FILTER_MAX_BYTES 65536 /* of its text */
#define VF_FILTER_MAX_DEPTH 32    /* nesting of JSON objects and arrays */
#define VF_FILTER_MAX_NODES 16384 /* JSON values */

typedef struct vf_filter vf_filter;

/* Compile text[0..len): 0, -EINVAL (not JSON, or not a filter), -E2BIG
 * (past a limit above) or -ENOMEM, with a reason in err. */
int vf_filter_compile(const char *text, size_t len, vf_filter **out, char *err,
		      size_t errlen);
void vf_filter_free(vf_filter *f);

/* 1 when the payload (JSON bytes; NULL or plen 0: none) matches f, else 0.
 * Bytes that are not JSON match as far as they can be read: never a read
 * past plen, and no recursion that the payload drives. */
int vf_filter_match(const vf_filter *f, const void *payload, size_t plen);

/* ------------------------------------------------------------ for an index
 *
 * The terms of a payload: each scalar value (string, number, true, false,
 * null) at the dotted path of the object members that lead to it, and
 * each scalar element of an array there.  Every record that a field test
 * ($eq, $in or a comparison with a scalar operand) matches has a term of
 * that path and a value that passes the test: an index of the terms finds
 * a superset of the matches. */

#define VF_TERM_PATH_MAX 200 /* bytes of a path */
#define VF_TERM_STR_MAX 256  /* bytes of a string value (decoded) */
#define VF_TERMS_MAX 64      /* terms of one payload */
#define VF_TERM_DEPTH 8      /* objects nested along a path */

enum { VF_T_NULL = 'n', VF_T_FALSE = 'f', VF_T_TRUE = 't', VF_T_NUM = '#', VF_T_STR = 's' };

typedef struct vf_term {
	const char *path; /* dotted member names: no NUL, not starting with 0xFF */
	uint32_t plen;
	uint8_t type;     /* VF_T_* */
	double num;       /* VF_T_NUM (never -0) */
	const char *s;    /* VF_T_STR: decoded bytes, no NUL */
	uint32_t slen;
} vf_term;

/* fn is called for each term (its pointers valid during the call); a
 * nonzero return stops the walk and is returned.  Returns 0 when every
 * term was given; VF_TERMS_PARTIAL when the payload is not all indexable
 * (not JSON, past a bound above): the terms given so far are its first
 * ones, the same for the same bytes each time, and the record must be
 * treated as matching anything. */
#define VF_TERMS_PARTIAL 1
typedef int (*vf_term_fn)(const vf_term *t, void *ctx);
int vf_payload_terms(const void *payload, size_t plen, vf_term_fn fn, void *ctx);

/* A read-only view of a compiled filter, node by node, for a planner. */
enum { VF_FN_AND, VF_FN_OR, VF_FN_EQ, VF_FN_IN, VF_FN_GT, VF_FN_GTE, VF_FN_LT, VF_FN_LTE,
       VF_FN_OTHER /* $not, $ne, $nin, $exists */ };
typedef struct vf_fnode_view {
	int op;           /* VF_FN_* */
	uint32_t n;       /* AND, OR: kids; IN: operand elements; EQ..LTE: 1 */
	const char *path; /* field tests */
	uint32_t plen;
} vf_fnode_view;
uint32_t vf_filter_root(const vf_filter *f);
void vf_filter_view(const vf_filter *f, uint32_t node, vf_fnode_view *out);
/* Kid k of an AND or OR node. */
uint32_t vf_filter_kid(const vf_filter *f, uint32_t node, uint32_t k);
/* Operand k of a field test (element k of $in's array) as a term's value
 * (t->type, num, s, slen; no path): 0, or -1 when it is not a scalar. */
int vf_filter_operand(const vf_filter *f, uint32_t node, uint32_t k, vf_term *t);

#endif
