/*
 * layout/block.c - posting block and delta posting formats.
 */
#include "block.h"

#include <errno.h>
#include <math.h>
#include <string.h>

#define BLOCK_MAGIC 0x31425656u /* "VVB1" */
#define DELTA_MAGIC 0x31445656u /* "VVD1" */
#define ALIGN 64

typedef struct block_hdr {
	uint32_t magic;
	uint32_t n, nbatch, pdim, bits;
	uint32_t pad;
	struct { uint32_t off, len; uint64_t sum; } col[VF_NCOL];
	uint64_t hdr_sum; /* over everything above */
} block_hdr;

static size_t up(size_t x) { return (x + ALIGN - 1) & ~(size_t)(ALIGN - 1); }

static void col_lens(uint32_t n, uint32_t pdim, uint32_t bits, uint32_t len[VF_NCOL])
{
	uint32_t nb = (n + VF_BATCH - 1) / VF_BATCH;
	len[VF_COL_SIGN] = nb * (pdim / 4) * 16;
	len[VF_COL_PLANES] = n * bits * (pdim / 8);
	len[VF_COL_F1] = 3 * nb * VF_BATCH * 4;
	len[VF_COL_F2] = 3 * n * 4;
	len[VF_COL_IDS] = n * 8;
	len[VF_COL_SEQS] = n * 8;
}

size_t vf_block_size(uint32_t n, uint32_t pdim, uint32_t bits)
{
	uint32_t len[VF_NCOL];
	size_t off = up(sizeof(block_hdr));
	col_lens(n, pdim, bits, len);
	for (int c = 0; c < VF_NCOL; c++)
		off = up(off + len[c]);
	return off;
}

/* Pack sign planes (plane 0 of each code) for 4-bit look-ups. */
static void pack_signs(uint8_t *dst, const vf_code *codes, uint32_t n, uint32_t pdim,
		       uint32_t bits)
{
	uint32_t groups = pdim / 4, nb = (n + VF_BATCH - 1) / VF_BATCH;
	memset(dst, 0, (size_t)nb * groups * 16);
	for (uint32_t i = 0; i < n; i++) {
		const uint8_t *sign = codes[i].planes;
		uint32_t b = i / VF_BATCH, j = i % VF_BATCH;
		uint8_t *batch = dst + (size_t)b * groups * 16;
		for (uint32_t g = 0; g < groups; g++) {
			uint8_t nib = (sign[g / 2] >> (4 * (g & 1))) & 15;
			batch[g * 16 + (j & 15)] |= (uint8_t)(nib << (j >= 16 ? 4 : 0));
		}
	}
	(void)bits;
}

void vf_block_write(uint8_t *buf, const vf_code *codes, uint32_t n,
		    uint32_t pdim, uint32_t bits)
{
	block_hdr h;
	uint32_t len[VF_NCOL];
	size_t off = up(sizeof h), total = vf_block_size(n, pdim, bits);
	uint32_t nb = (n + VF_BATCH - 1) / VF_BATCH, np = nb * VF_BATCH;
	size_t pb = (size_t)bits * (pdim / 8);

	memset(buf, 0, total);
	memset(&h, 0, sizeof h);
	h.magic = BLOCK_MAGIC;
	h.n = n;
	h.nbatch = nb;
	h.pdim = pdim;
	h.bits = bits;
	col_lens(n, pdim, bits, len);
	for (int c = 0; c < VF_NCOL; c++) {
		h.col[c].off = (uint32_t)off;
		h.col[c].len = len[c];
		off = up(off + len[c]);
	}
	pack_signs(buf + h.col[VF_COL_SIGN].off, codes, n, pdim, bits);
	uint8_t *planes = buf + h.col[VF_COL_PLANES].off;
	float *f1 = (float *)(buf + h.col[VF_COL_F1].off);
	float *f2 = (float *)(buf + h.col[VF_COL_F2].off);
	uint8_t *ids = buf + h.col[VF_COL_IDS].off;
	uint8_t *seqs = buf + h.col[VF_COL_SEQS].off;
	for (uint32_t i = 0; i < np; i++) {
		if (i < n) {
			const vf_code *c = &codes[i];
			memcpy(planes + i * pb, c->planes, pb);
			f1[i] = c->add;
			f1[np + i] = c->r1;
			f1[2 * np + i] = c->e1;
			f2[i] = c->rb;
			f2[n + i] = c->eb;
			f2[2 * n + i] = c->cdot;
			memcpy(ids + 8 * i, &c->id, 8);
			memcpy(seqs + 8 * i, &c->seq, 8);
		} else {
			f1[i] = INFINITY; /* padding never survives */
			f1[np + i] = 0;
			f1[2 * np + i] = 0;
		}
	}
	for (int c = 0; c < VF_NCOL; c++)
		h.col[c].sum = vf_checksum(buf + h.col[c].off, h.col[c].len);
	h.hdr_sum = vf_checksum(&h, offsetof(block_hdr, hdr_sum));
	memcpy(buf, &h, sizeof h);
}

int vf_block_open(const void *p, size_t len, vf_block *out)
{
	block_hdr h;
	uint32_t want[VF_NCOL];
	if (len < sizeof h)
		return -EIO;
	memcpy(&h, p, sizeof h);
	if (h.magic != BLOCK_MAGIC ||
	    h.hdr_sum != vf_checksum(&h, offsetof(block_hdr, hdr_sum)))
		return -EIO;
	if (h.n == 0 || h.n > VF_BLOCK_MAX || h.pdim % 64 || h.bits < 1 || h.bits > 8 ||
	    h.nbatch != (h.n + VF_BATCH - 1) / VF_BATCH)
		return -EIO;
	col_lens(h.n, h.pdim, h.bits, want);
	out->base = p;
	out->len = len;
	out->n = h.n;
	out->nbatch = h.nbatch;
	out->pdim = h.pdim;
	out->bits = h.bits;
	for (int c = 0; c < VF_NCOL; c++) {
		if (h.col[c].len != want[c] || (size_t)h.col[c].off + h.col[c].len > len)
			return -EIO;
		out->col[c] = (const uint8_t *)p + h.col[c].off;
		out->col_len[c] = h.col[c].len;
		out->col_sum[c] = h.col[c].sum;
	}
	return 0;
}

int vf_block_check(vf_vcache *cache, const vf_block *b, int col)
{
	return vf_verify(cache, b->col[col], b->col_len[col], b->col_sum[col]);
}

uint64_t vf_block_id(const vf_block *b, uint32_t i)
{
	uint64_t v;
	memcpy(&v, b->col[VF_COL_IDS] + 8 * (size_t)i, 8);
	return v;
}

uint64_t vf_block_seq(const vf_block *b, uint32_t i)
{
	uint64_t v;
	memcpy(&v, b->col[VF_COL_SEQS] + 8 * (size_t)i, 8);
	return v;
}

const uint8_t *vf_block_f1(const vf_block *b, int which)
{
	return b->col[VF_COL_F1] + (size_t)which * b->nbatch * VF_BATCH * 4;
}

const uint8_t *vf_block_f2(const vf_block *b, int which)
{
	return b->col[VF_COL_F2] + (size_t)which * b->n * 4;
}

/* delta: magic u32 | pdim u16 | bits u16 | id u64 | seq u64 | 6 floats |
 * planes | xxh3 u64 of everything before it */
#define DELTA_HDR 48

size_t vf_delta_size(uint32_t pdim, uint32_t bits)
{
	return DELTA_HDR + (size_t)bits * (pdim / 8) + 8;
}

void vf_delta_write(uint8_t *buf, const vf_code *c, uint32_t pdim, uint32_t bits)
{
	uint32_t magic = DELTA_MAGIC;
	uint16_t pd = (uint16_t)pdim, bt = (uint16_t)bits;
	float f[6] = {c->add, c->r1, c->e1, c->rb, c->eb, c->cdot};
	size_t pb = (size_t)bits * (pdim / 8);
	memcpy(buf, &magic, 4);
	memcpy(buf + 4, &pd, 2);
	memcpy(buf + 6, &bt, 2);
	memcpy(buf + 8, &c->id, 8);
	memcpy(buf + 16, &c->seq, 8);
	memcpy(buf + 24, f, 24);
	memcpy(buf + DELTA_HDR, c->planes, pb);
	uint64_t sum = vf_checksum(buf, DELTA_HDR + pb);
	memcpy(buf + DELTA_HDR + pb, &sum, 8);
}

int vf_delta_open(const void *p, size_t len, uint32_t pdim, uint32_t bits,
		  vf_code *out)
{
	const uint8_t *b = p;
	uint32_t magic;
	uint16_t pd, bt;
	uint64_t sum;
	float f[6];
	size_t pb = (size_t)bits * (pdim / 8);
	if (len != vf_delta_size(pdim, bits))
		return -EIO;
	memcpy(&magic, b, 4);
	memcpy(&pd, b + 4, 2);
	memcpy(&bt, b + 6, 2);
	memcpy(&sum, b + DELTA_HDR + pb, 8);
	if (magic != DELTA_MAGIC || pd != pdim || bt != bits ||
	    sum != vf_checksum(b, DELTA_HDR + pb))
		return -EIO;
	memcpy(&out->id, b + 8, 8);
	memcpy(&out->seq, b + 16, 8);
	memcpy(f, b + 24, 24);
	out->add = f[0];
	out->r1 = f[1];
	out->e1 = f[2];
	out->rb = f[3];
	out->eb = f[4];
	out->cdot = f[5];
	out->planes = b + DELTA_HDR;
	return 0;
}
