/*
 * tests/fuzz/fuzz_block.c - posting blocks and delta postings as read from
 * the store (layout/block.c): vf_block_open and vf_block_check, then every
 * accessor of every vector of a block that passed them; vf_delta_open,
 * then the code it returns.  Any bytes must be rejected or read within
 * their length.
 *
 * The first input byte is the mode: bit 0 a delta (else a block); bit 1
 * seal: write the magic and the checksums the bytes would need (and for a
 * delta the expected dim, pdim and bits), so the checks behind the
 * checksums are reached.  A delta's dim, pdim and bits come from the next
 * three bytes.  The rest is the value, copied to a buffer of its exact size.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_read.h"
#include "block.h"
#include "checksum.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The block header as block.c stores it (what sealing writes to). */
#define HDR_MAGIC 0x35425656u
#define HDR_COLS 24     /* VF_NCOL of {u32 off, u32 len, u64 sum} */
#define HDR_SUM 104     /* u64 over bytes 0..104 */
#define HDR_SIZE 112
#define DELTA_MAGIC 0x33445656u
#define DELTA_HDR 56

static uint32_t ld32(const uint8_t *p)
{
	uint32_t v;
	memcpy(&v, p, 4);
	return v;
}

static void block(uint8_t *v, size_t len, int seal)
{
	if (seal && len >= HDR_SIZE) {
		uint32_t m = HDR_MAGIC;
		memcpy(v, &m, 4);
		for (int c = 0; c < VF_NCOL; c++) {
			uint8_t *col = v + HDR_COLS + 16 * c;
			uint32_t off = ld32(col), cl = ld32(col + 4);
			if ((size_t)off + cl <= len) {
				uint64_t s = vf_checksum(v + off, cl);
				memcpy(col + 8, &s, 8);
			}
		}
		uint64_t hs = vf_checksum(v, HDR_SUM);
		memcpy(v + HDR_SUM, &hs, 8);
	}
	vf_block b;
	if (vf_block_open(v, len, &b))
		return;
	for (int c = 0; c < VF_NCOL; c++)
		if (vf_block_check(NULL, &b, c))
			return;
	size_t cb = (size_t)b.bits * vf_plane_bytes(b.pdim);
	uint8_t *code = cb <= ((size_t)64 << 20) ? malloc(cb ? cb : 1) : NULL;
	for (uint32_t i = 0; i < b.n; i++) {
		uint32_t kl = 0;
		const char *k = vf_block_key(&b, i, &kl);
		if (k)
			fz_read(k, kl);
		fz_sink += vf_block_id(&b, i) + vf_block_seq(&b, i) + (uint64_t)vf_block_has_payload(&b, i);
		float f = 0;
		for (int w = 0; w < 3; w++)
			f += vf_block_f1(&b, w, i) + vf_block_f2(&b, w, i);
		fz_sink += f > 0;
		if (code)
			vf_block_planes(&b, i, code);
	}
	free(code);
}

static void delta(uint8_t *v, size_t len, uint32_t dim, uint32_t pdim, uint32_t bits, int seal)
{
	if (seal && len >= DELTA_HDR + 8) {
		uint32_t m = DELTA_MAGIC;
		uint16_t pd = (uint16_t)pdim, bt = (uint16_t)bits;
		memcpy(v, &m, 4);
		memcpy(v + 4, &pd, 2);
		memcpy(v + 6, &bt, 2);
		memcpy(v + 48, &dim, 4);
		uint64_t s = vf_checksum(v, len - 8);
		memcpy(v + len - 8, &s, 8);
	}
	vf_code c;
	if (vf_delta_open(v, len, dim, pdim, bits, &c))
		return;
	fz_read(c.planes, (size_t)bits * vf_plane_bytes(pdim));
	fz_read(c.key, c.keylen);
	fz_sink += c.id + c.seq + (uint64_t)c.has_payload;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	int mode = data[0];
	size_t skip = 1;
	uint32_t dim = 0, pdim = 0, bits = 0;
	if (mode & 1) {
		if (size < 4)
			return 0;
		pdim = 64u * (1 + data[1] % 4);
		bits = 1 + data[2] % 8;
		dim = 1 + data[3] % pdim;
		skip = 4;
	}
	size_t len = size - skip;
	uint8_t *v = malloc(len ? len : 1);
	if (!v)
		return 0;
	memcpy(v, data + skip, len);
	if (mode & 1)
		delta(v, len, dim, pdim, bits, mode & 2);
	else
		block(v, len, mode & 2);
	free(v);
	return 0;
}
