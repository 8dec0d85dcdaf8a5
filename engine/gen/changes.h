/*
 * engine/gen/changes.h - the dirty set read from the change log (whose entries,
 * one per committed put or delete keyed by sequence number, are in
 * layout/meta.h): the records changed after a generation's synced_seq,
 * whose postings in that generation cannot be trusted without checking;
 * and the tombstones of a cluster.
 */
#ifndef VF_CHANGES_H
#define VF_CHANGES_H

#include <stdint.h>

#include "meta.h"
#include "store.h"

typedef struct vf_dirty_entry {
	uint64_t id;   /* 0 slot marker is id+1 internally */
	uint64_t seq;  /* latest change */
	vf_change ch;
} vf_dirty_entry;

typedef struct vf_dirty {
	vf_dirty_entry *slots;
	uint64_t cap, n;  /* cap is a power of two */
} vf_dirty;

void vf_dirty_init(vf_dirty *d);
void vf_dirty_free(vf_dirty *d);
/* Load the latest change of every id changed in (from, to]. */
int vf_dirty_load(vf_txn *txn, vf_store *s, uint64_t from, uint64_t to, vf_dirty *d);
const vf_dirty_entry *vf_dirty_find(const vf_dirty *d, uint64_t id);

/* The tombstones of one cluster: id -> kill seq (postings of id with a
 * lower seq are dead). */
typedef struct vf_tombs {
	uint64_t *id, *seq;
	uint32_t cap, n;
} vf_tombs;

void vf_tombs_free(vf_tombs *t);
void vf_tombs_clear(vf_tombs *t);
int vf_tombs_add(vf_tombs *t, uint64_t id, uint64_t seq);
/* Is id in t?  1 (its seq in *seq when seq is not NULL) or 0. */
int vf_tombs_has(const vf_tombs *t, uint64_t id, uint64_t *seq);

/* Is posting (id, seq) of a generation superseded or deleted, given its
 * cluster's tombstones and the generation's dirty set? */
int vf_posting_stale(const vf_tombs *t, const vf_dirty *d, uint64_t id, uint64_t seq);

#endif
