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

#include <lmdb.h>
#include <stdint.h>

#include "store.h"

#define VF_ASSIGN_CHUNK 1024u
#define VF_ASSIGN_NONE 0xFFFFFFFFu

/* *cluster = VF_ASSIGN_NONE when the id has no posting there. */
int vf_assign_get(MDB_txn *txn, vf_store *s, uint64_t gen, uint64_t id,
		  uint32_t *cluster);
int vf_assign_set(MDB_txn *txn, vf_store *s, uint64_t gen, uint64_t id,
		  uint32_t cluster);
/* Write a whole map for ids [0, n) (build time). */
int vf_assign_write(MDB_txn *txn, vf_store *s, uint64_t gen, const uint32_t *map,
		    uint64_t n);

#endif
