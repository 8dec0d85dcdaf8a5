/*
 * layout/assign.h - per-generation assignment map: for each record id, the
 * cluster holding its newest posting in that generation (or none).  Writes
 * use it to find the posting an upsert or delete makes stale.  Stored in
 * chunks of 1024 ids, zstd-compressed with a content checksum: it is a cold
 * column (read once per write, never by queries) and cluster numbers
 * compress well.
 */
#ifndef VF_ASSIGN_H
#define VF_ASSIGN_H

#include <stdint.h>

#include "store.h"

#define VF_ASSIGN_CHUNK 1024u
#define VF_ASSIGN_NONE 0xFFFFFFFFu

/* *cluster = VF_ASSIGN_NONE when the id has no posting there. */
int vf_assign_get(vf_txn *txn, vf_store *s, uint64_t gen, uint64_t id,
		  uint32_t *cluster);
int vf_assign_set(vf_txn *txn, vf_store *s, uint64_t gen, uint64_t id,
		  uint32_t cluster);
/* A write transaction's view of one generation's map: chunks are read and
 * decompressed once, changed in memory, and compressed back by flush (call
 * it before the transaction commits). */
typedef struct vf_assign_cache {
	uint64_t gen;
	struct vf_assign_chunk *slots; /* open addressing by chunk number */
	size_t cap, n;
} vf_assign_cache;

void vf_assign_cache_init(vf_assign_cache *c, uint64_t gen);
int vf_assign_cache_get(vf_assign_cache *c, vf_txn *txn, vf_store *s, uint64_t id,
			uint32_t *cluster);
int vf_assign_cache_set(vf_assign_cache *c, vf_txn *txn, vf_store *s, uint64_t id,
			uint32_t cluster);
int vf_assign_cache_flush(vf_assign_cache *c, vf_txn *txn, vf_store *s);
void vf_assign_cache_free(vf_assign_cache *c);

/* Write a whole map for ids [0, n) (build time). */
int vf_assign_write(vf_txn *txn, vf_store *s, uint64_t gen, const uint32_t *map,
		    uint64_t n);

#endif
