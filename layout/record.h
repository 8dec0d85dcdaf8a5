/*
 * layout/record.h - the value of a record: sequence number, vector, user key
 * and payload in one LMDB value, so a re-rank reads one value per candidate.
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
/* -EIO when the value is malformed or fails its checksum. */
int vf_record_decode(const void *data, size_t len, vf_record *out);

#endif
