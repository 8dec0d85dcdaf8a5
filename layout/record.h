/*
 * layout/record.h - the value of a record: sequence number, vector, user key
 * and payload in one LMDB value, so a re-rank reads one value per candidate;
 * and the two key families that hold records: records (id -> value) and
 * keys (user key -> id).
 *
 *   off 0  seq u64 | 8 dim u32 | 12 keylen u16 | 14 flags u16 | 16 plen u32
 *   | 20 sum u32 | 24 dim float32 | key bytes | payload bytes
 * sum: a checksum (XXH3) of the rest of the value, checked on every decode:
 * the record is the one copy of its vector that re-rank reads.
 */
#ifndef VF_RECORD_H
#define VF_RECORD_H

#include <stddef.h>
#include <stdint.h>

#include "store.h"

#define VF_RECORD_HDR 24

typedef struct vf_record {
	uint64_t seq;
	uint32_t dim;
	const void *vec;     /* dim float32, not necessarily aligned */
	const char *key;
	uint32_t keylen;
	const void *payload;
	uint32_t plen;
} vf_record;

size_t vf_record_size(uint32_t dim, size_t keylen, size_t plen);
void vf_record_encode(uint8_t *buf, uint64_t seq, uint32_t dim, const float *vec,
		      const char *key, size_t keylen, const void *payload,
		      size_t plen);
/* -EIO when the value is malformed or fails its checksum; on a checksum
 * failure of a value whose sizes agree, out->key and the rest point where
 * they would be (unchecked: what can be read of a damaged record), else
 * out->key is NULL. */
int vf_record_decode(const void *data, size_t len, vf_record *out);
/* The fields as vf_record_decode() finds them, the checksum not checked
 * (for a pass that only reads payloads): 0, or -EIO when the sizes do not
 * add up (out->key then NULL). */
int vf_record_fields(const void *data, size_t len, vf_record *out);

/* The value of record id (-ENOENT when there is none); write it; delete it. */
int vf_records_get(vf_txn *txn, vf_store *s, uint64_t id, vf_val *out);
int vf_records_put(vf_txn *txn, vf_store *s, uint64_t id, const void *data, size_t len);
/* Write the record of a new id: appended when it sorts after every id, so
 * that ids written in order fill leaf pages whole (a page split in the
 * middle leaves both halves half empty), else put in place. */
int vf_records_add(vf_txn *txn, vf_store *s, uint64_t id, const void *data, size_t len);
int vf_records_del(vf_txn *txn, vf_store *s, uint64_t id);
/* The id of a user key (-ENOENT when there is none, -EIO when its value is
 * not an id); write it; delete it. */
int vf_keys_get(vf_txn *txn, vf_store *s, const void *key, size_t keylen, uint64_t *id);
int vf_keys_put(vf_txn *txn, vf_store *s, const void *key, size_t keylen, uint64_t id);
/* Give key the id *id unless it has one: 0 when it was new, else -EEXIST
 * and its id in *id. */
int vf_keys_claim(vf_txn *txn, vf_store *s, const void *key, size_t keylen, uint64_t *id);
int vf_keys_del(vf_txn *txn, vf_store *s, const void *key, size_t keylen);

#endif
