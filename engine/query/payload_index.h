/*
 * engine/query/payload_index.h - the index of records' payloads: the terms of
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

/* Changes of the index kept to be applied together, sorted by key: a
 * write of many rows then descends the tree to neighbouring keys, not
 * to random ones.  Zeroed to start; applied by vf_pidx_flush() (also when
 * it holds VF_PIDX_BATCH_BYTES), then freed. */
#define VF_PIDX_BATCH_BYTES ((size_t)16 << 20)
struct vf_pidx_op {
	uint32_t off;
	uint16_t len;
	uint8_t del;
	uint32_t seq;
};
typedef struct vf_pidx_batch {
	uint8_t *arena;
	size_t used, cap;
	struct vf_pidx_op *ops;
	size_t n, capn;
} vf_pidx_batch;
int vf_pidx_flush(vf_txn *txn, vf_store *s, vf_pidx_batch *b);
void vf_pidx_batch_free(vf_pidx_batch *b);

/* A record's payload into the index; the payload of record id as it is
 * stored (none: nothing to do) out of it, before the record is
 * overwritten or deleted.  With b, into b; else at once.  0 or a store
 * error. */
int vf_pidx_add(vf_txn *txn, vf_store *s, vf_pidx_batch *b, uint64_t id, const void *payload,
		size_t plen);
int vf_pidx_remove_record(vf_txn *txn, vf_store *s, vf_pidx_batch *b, uint64_t id);

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
