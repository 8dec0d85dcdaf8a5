/*
 * layout/block.h - posting blocks: the codes of up to a few thousand vectors
 * of one cluster, stored column-wise so a scan pass reads only the columns
 * it needs.  Each column has its own XXH3 checksum; the header has one too.
 *
 * Columns:
 *   SIGN    sign planes, packed for 4-bit table look-ups: per batch of 32
 *           vectors, per group of 4 dimensions, 16 bytes whose low nibbles
 *           are vectors 0..15 and high nibbles vectors 16..31.
 *   F1      first-pass factors, per batch: add[32], r1[32], e1[32]
 *           (padding slots have add = +inf), so a batch is one stream.
 *   PASS2   per vector, what the second pass reads besides the sign plane
 *           (which is in SIGN): bit planes 1..bits-1 of pdim bits each
 *           (plane p = bit bits-1-p of the code; plane 0 is the sign bit),
 *           then the factors rb, eb, cdot; records are padded to 16, 32 or
 *           a multiple of 64 bytes, so a survivor of the first pass touches
 *           as few cache lines as its record's size allows (one, for 128
 *           dimensions at 4 bits).
 *   IDS     per vector: record id u64, record sequence number u64 (its top
 *           bit set when the record has a payload).
 *   KEYS    (n+1) u32 offsets, then the record keys (for maintenance and
 *           verify; queries take keys from the records they re-rank).
 * Full-precision vectors are not copied here: re-rank reads them from the
 * records (one copy of every vector in the store, checksummed there).
 * A delta posting holds one vector's code (all of the above) in a value of
 * its own.
 */
#ifndef VF_BLOCK_H
#define VF_BLOCK_H

#include <stddef.h>
#include <stdint.h>

#include "checksum.h"

#define VF_BATCH 32
#define VF_BLOCK_MAX 4096 /* vectors per block */
#define VF_BLOCK_LEAD 16  /* where LMDB puts a value on overflow pages: after
			   * the page header; columns are aligned from there */

enum { VF_COL_SIGN, VF_COL_F1, VF_COL_PASS2, VF_COL_IDS, VF_COL_KEYS,
       VF_NCOL };

#define VF_SEQ_PAYLOAD (1ULL << 63) /* in a stored seq: the record has a payload */

/* One encoded vector, as the encoder produces it. */
typedef struct vf_code {
	uint64_t id, seq;
	int has_payload;
	float add, r1, e1;   /* first pass */
	float rb, eb, cdot;  /* second pass */
	const uint8_t *planes; /* bits * pdim/8 bytes */
	const char *key;
	uint32_t keylen;
} vf_code;

typedef struct vf_block {
	const uint8_t *base;
	size_t len;
	uint32_t n, nbatch, pdim, bits, dim;
	uint32_t stride;     /* bytes of a PASS2 record */
	const uint8_t *col[VF_NCOL];
	uint32_t col_len[VF_NCOL];
	uint64_t col_sum[VF_NCOL];
} vf_block;

static inline size_t vf_plane_bytes(uint32_t pdim) { return pdim / 8; }

/* Bytes of a PASS2 record: planes 1..bits-1 and three floats, padded. */
static inline uint32_t vf_pass2_stride(uint32_t pdim, uint32_t bits)
{
	uint32_t x = (bits - 1) * (pdim / 8) + 12;
	return x <= 16 ? 16 : x <= 32 ? 32 : (x + 63) & ~63u;
}

/* Bytes a block of codes[0..n) takes. */
size_t vf_block_size(const vf_code *codes, uint32_t n, uint32_t pdim, uint32_t bits);
/* Write a block of codes[0..n) into buf (vf_block_size bytes). */
void vf_block_write(uint8_t *buf, const vf_code *codes, uint32_t n, uint32_t dim,
		    uint32_t pdim, uint32_t bits);
/* Parse and check the header: -EIO when malformed or its checksum fails. */
int vf_block_open(const void *p, size_t len, vf_block *out);
/* The same for a value whose header vf_block_open() accepted before at
 * this place in the same snapshot (the bytes cannot have changed): only
 * its checksum is not computed again. */
int vf_block_open_known(const void *p, size_t len, vf_block *out);
/* The bytes from the start of the value through the end of the last of
 * the columns a scan reads (sign, F1, pass 2, ids): all but the keys,
 * which only maintenance and verify read (vf_block_open() keeps every
 * column inside the value). */
static inline size_t vf_block_scan_bytes(const vf_block *b)
{
	size_t end = 0;
	for (int c = VF_COL_SIGN; c <= VF_COL_IDS; c++) {
		size_t e = (size_t)(b->col[c] - b->base) + b->col_len[c];
		end = e > end ? e : end;
	}
	return end;
}
/* Check one column's checksum (cached): 0 or -EIO. */
int vf_block_check(vf_vcache *cache, const vf_block *b, int col);
/* vf_verify_prefetch() of the columns a scan checks (sign, F1, pass 2,
 * ids): for a block scanned next. */
void vf_block_prefetch_checks(const vf_vcache *cache, const vf_block *b);

/* Column accessors (unaligned-safe loads). */
/* The PASS2 record of vector i: planes 1..bits-1, then rb, eb, cdot. */
static inline const uint8_t *vf_block_pass2_at(const vf_block *b, uint32_t i)
{
	return b->col[VF_COL_PASS2] + (size_t)i * b->stride;
}
/* The full code of vector i (bits planes of pdim/8 bytes) into out. */
void vf_block_planes(const vf_block *b, uint32_t i, uint8_t *out);
/* The sign plane of slot j (0..31) of a batch of the SIGN column (groups
 * rows of 16 bytes, a multiple of 16): out[g/2] = its nibble of group g |
 * that of group g+1 << 4, a nibble being (batch[16g + j%16] >> (j >= 16 ?
 * 4 : 0)) & 15.  vf_block_sign_with() takes another function that writes
 * the same bytes (a faster one). */
typedef void (*vf_sign_gather_fn)(const uint8_t *batch, uint32_t groups, uint32_t j,
				  uint8_t *out);
void vf_sign_gather(const uint8_t *batch, uint32_t groups, uint32_t j, uint8_t *out);
/* Only the sign plane (plane 0) of code i, into out (pdim/8 bytes), by
 * `sign`; planes 1..bits-1 are the first bytes of its PASS2 record
 * (vf_block_pass2_at). */
void vf_block_sign_with(const vf_block *b, uint32_t i, uint8_t *out, vf_sign_gather_fn sign);
/* Where vector i's record id (u64) is stored. */
static inline const uint8_t *vf_block_id_at(const vf_block *b, uint32_t i)
{
	return b->col[VF_COL_IDS] + 16 * (size_t)i;
}
uint64_t vf_block_id(const vf_block *b, uint32_t i);
uint64_t vf_block_seq(const vf_block *b, uint32_t i);      /* flag removed */
int vf_block_has_payload(const vf_block *b, uint32_t i);
/* Key of vector i; NULL when the offsets are damaged. */
const char *vf_block_key(const vf_block *b, uint32_t i, uint32_t *len);
/* The F1 factors of batch bt: add at +0, r1 at +128, e1 at +256 bytes. */
static inline const uint8_t *vf_block_f1_batch(const vf_block *b, uint32_t bt)
{
	return b->col[VF_COL_F1] + (size_t)bt * VF_BATCH * 12;
}
/* which: 0 add, 1 r1, 2 e1 (first pass); 0 rb, 1 eb, 2 cdot (second). */
float vf_block_f1(const vf_block *b, int which, uint32_t i);
static inline const uint8_t *vf_block_f2_at(const vf_block *b, uint32_t i)
{
	return vf_block_pass2_at(b, i) + (size_t)(b->bits - 1) * vf_plane_bytes(b->pdim);
}
float vf_block_f2(const vf_block *b, int which, uint32_t i);

/* Delta postings. */
size_t vf_delta_size(uint32_t pdim, uint32_t bits, uint32_t keylen);
void vf_delta_write(uint8_t *buf, const vf_code *c, uint32_t dim, uint32_t pdim,
		    uint32_t bits);
/* Where a delta posting stores its record id (u64). */
static inline const uint8_t *vf_delta_id_at(const void *p)
{
	return (const uint8_t *)p + 8;
}
/* Parse a delta and check its checksum: -EIO on mismatch. */
int vf_delta_open(const void *p, size_t len, uint32_t dim, uint32_t pdim,
		  uint32_t bits, vf_code *out);
/* The same with the verified-value cache (a query re-reading a delta). */
int vf_delta_open_cached(vf_vcache *cache, const void *p, size_t len, uint32_t dim,
			 uint32_t pdim, uint32_t bits, vf_code *out);

static inline float vf_ldf(const uint8_t *p, size_t i)
{
	float f;
	__builtin_memcpy(&f, p + 4 * i, 4);
	return f;
}

#endif
