/*
 * layout/block.h - posting blocks: the codes of up to a few thousand vectors
 * of one cluster, stored column-wise so a scan pass reads only the columns
 * it needs.  Each column has its own XXH3 checksum; the header has one too.
 *
 * Columns:
 *   SIGN    sign planes, packed for 4-bit table look-ups: per batch of 32
 *           vectors, per group of 4 dimensions, 16 bytes whose low nibbles
 *           are vectors 0..15 and high nibbles vectors 16..31.
 *   PLANES  per vector, `bits` bit planes of pdim bits (plane 0 = sign bit,
 *           plane p = bit bits-1-p of the code), for the second pass.
 *   F1      first-pass factors: add[], r1[], e1[] (nbatch*32 floats each;
 *           padding slots have add = +inf).
 *   F2      second-pass factors: rb[], eb[], cdot[] (n floats each).
 *   IDS     record ids, u64.     SEQS  record sequence numbers, u64.
 * Delta postings hold one vector each in a small value of their own.
 */
#ifndef VF_BLOCK_H
#define VF_BLOCK_H

#include <stddef.h>
#include <stdint.h>

#include "checksum.h"

#define VF_BATCH 32
#define VF_BLOCK_MAX 4096 /* vectors per block */

enum { VF_COL_SIGN, VF_COL_PLANES, VF_COL_F1, VF_COL_F2, VF_COL_IDS,
       VF_COL_SEQS, VF_NCOL };

/* One encoded vector, as the encoder produces it. */
typedef struct vf_code {
	uint64_t id, seq;
	float add, r1, e1;   /* first pass */
	float rb, eb, cdot;  /* second pass */
	const uint8_t *planes; /* bits * pdim/8 bytes */
} vf_code;

typedef struct vf_block {
	const uint8_t *base;
	size_t len;
	uint32_t n, nbatch, pdim, bits;
	const uint8_t *col[VF_NCOL];
	uint32_t col_len[VF_NCOL];
	uint64_t col_sum[VF_NCOL];
} vf_block;

static inline size_t vf_plane_bytes(uint32_t pdim) { return pdim / 8; }

/* Bytes a block of n vectors takes. */
size_t vf_block_size(uint32_t n, uint32_t pdim, uint32_t bits);
/* Write a block of codes[0..n) into buf (vf_block_size bytes). */
void vf_block_write(uint8_t *buf, const vf_code *codes, uint32_t n,
		    uint32_t pdim, uint32_t bits);
/* Parse and check the header: -EIO when malformed or its checksum fails. */
int vf_block_open(const void *p, size_t len, vf_block *out);
/* Check one column's checksum (cached): 0 or -EIO. */
int vf_block_check(vf_vcache *cache, const vf_block *b, int col);

/* Column accessors (unaligned-safe loads). */
static inline const uint8_t *vf_block_planes(const vf_block *b, uint32_t i)
{
	return b->col[VF_COL_PLANES] + (size_t)i * b->bits * vf_plane_bytes(b->pdim);
}
uint64_t vf_block_id(const vf_block *b, uint32_t i);
uint64_t vf_block_seq(const vf_block *b, uint32_t i);
/* F1 arrays: add, r1, e1 (each nbatch*32); F2: rb, eb, cdot (each n). */
const uint8_t *vf_block_f1(const vf_block *b, int which);
const uint8_t *vf_block_f2(const vf_block *b, int which);

/* Delta postings. */
size_t vf_delta_size(uint32_t pdim, uint32_t bits);
void vf_delta_write(uint8_t *buf, const vf_code *c, uint32_t pdim, uint32_t bits);
/* Parse a delta and check its checksum: -EIO on mismatch. */
int vf_delta_open(const void *p, size_t len, uint32_t pdim, uint32_t bits,
		  vf_code *out);

static inline float vf_ldf(const uint8_t *p, size_t i)
{
	float f;
	__builtin_memcpy(&f, p + 4 * i, 4);
	return f;
}

#endif
