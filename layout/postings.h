/*
 * layout/postings.h - writing the postings family: one entry of a cluster
 * of a generation (a posting block, a delta posting or a tombstone; the
 * manifest is in meta.h), keyed as layout/keys.h lays out.
 */
#ifndef VF_POSTINGS_H
#define VF_POSTINGS_H

#include <stddef.h>
#include <stdint.h>

#include "store.h"

/* Entry `sub` of kind `kind` (VF_PK_BLOCK: block number, VF_PK_DELTA: the
 * change's seq, VF_PK_TOMB: the record id) of cluster c of generation gen. */
int vf_posting_put(vf_txn *txn, vf_store *s, uint64_t gen, uint32_t c, uint8_t kind,
		   uint64_t sub, const void *data, size_t len);

#endif
