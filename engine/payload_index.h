/*
 * engine/payload_index.h - the index of records' payloads: the terms of
 * each payload (filter.h) as keys of the store's `payloads` family,
 * written in the transaction that writes the record, and the planner that
 * turns a filter into the few records that can match it.
 */
#ifndef VF_PAYLOAD_INDEX_H
#define VF_PAYLOAD_INDEX_H

#include <stddef.h>
#include <stdint.h>

#include "filter.h"
#include "store.h"

/* A record's payload into the index, or out of it (the same bytes it
 * went in with).  0 or a store error. */
int vf_pidx_add(vf_txn *txn, vf_store *s, uint64_t id, const void *payload, size_t plen);
int vf_pidx_remove(vf_txn *txn, vf_store *s, uint64_t id, const void *payload, size_t plen);
/* The payload of record id as it is stored (none: nothing to do) out of
 * the index, before the record is overwritten or deleted. */
int vf_pidx_remove_record(vf_txn *txn, vf_store *s, uint64_t id);

/* Does txn's snapshot have a complete index?  (A store made before the
 * index has none until a write open builds it.) */
int vf_pidx_ready(vf_txn *txn, vf_store *s);
/* The index made anew from every record; then ready.  *indexed counts
 * the records with a payload. */
int vf_pidx_rebuild(vf_txn *txn, vf_store *s, uint64_t *indexed);

/* The records that can match f, by the index: 0 and ids[0..*n) ascending
 * (a superset of the matches; free() it), or VF_PIDX_ALL when the index
 * cannot narrow them to at most `budget` (or has none), or an error. */
#define VF_PIDX_ALL 1
int vf_pidx_candidates(vf_txn *txn, vf_store *s, const vf_filter *f, size_t budget,
		       uint64_t **ids, size_t *n);

/* Every record's terms are in the index and nothing else is: 0, or
 * -EIO with the first difference in err. */
int vf_pidx_check(vf_txn *txn, vf_store *s, char *err, size_t errlen);

#endif
