/*
 * layout/record.h - the value of a record: sequence number, vector, user key
 * and payload in one LMDB value, so a re-rank reads one value per candidate;
 * and the two key families that hold records: records (id -> value) and
 * keys (user key -> id).
 *
 *   off 0  seq u64 | 8 dim u32 | 12 keylen u16 | 14 flags u16 | 16 plen u32
 *   | 20 sum u32 | 24 the vector | key bytes | payload bytes
 * sum: a checksum (XXH3) of the rest of the value, checked on every decode:
 * the record is the one copy of its vector that re-rank reads.
 * flags bit 0 (VF_VEC_U8): the vector is dim bytes, each number an integer
 * 0..255 (what image and SIFT-like features often are), instead of dim
 * float32: the same floats, a quarter of the bytes for re-rank to read.
 * Other flags are not defined: a value with one is malformed (-EIO).
 */
#ifndef VF_RECORD_H
#define VF_RECORD_H

#include <stddef.h>
#include <stdint.h>

#include "store.h"

#define VF_RECORD_HDR 24

/* How a record holds its vector (the flags' bit 0). */
enum { VF_VEC_F32 = 0, VF_VEC_U8 = 1 };

typedef struct vf_record {
	uint64_t seq;
	uint32_t dim;
	int kind;            /* VF_VEC_F32 or VF_VEC_U8 */
	const void *vec;     /* dim float32 (not necessarily aligned) or dim
			      * bytes, as kind says: vf_record_floats() */
	const char *key;
	uint32_t keylen;
	const void *payload;
	uint32_t plen;
} vf_record;

/* The kind that holds vec[0..dim) in the fewest bytes and gives back the
 * very same floats: VF_VEC_U8 when each is an integer from 0 to 255 (+0,
 * not -0), else VF_VEC_F32. */
int vf_record_kind(const float *vec, uint32_t dim);
size_t vf_record_size(uint32_t dim, int kind, size_t keylen, size_t plen);
/* kind: vf_record_kind(vec, dim), or VF_VEC_F32 (VF_VEC_U8 for a vector
 * it does not fit would lose its numbers). */
void vf_record_encode(uint8_t *buf, uint64_t seq, uint32_t dim, int kind, const float *vec,
		      const char *key, size_t keylen, const void *payload,
		      size_t plen);
/* A record's vector (r->vec, r->kind, r->dim) as r->dim floats into out
 * (room for r->dim floats: a caller checks r->dim against the store's). */
void vf_record_floats(const vf_record *r, float *out);
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
