/*
 * engine/filter.h - payload filters: the JSON text of a query's filter
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

#endif
