/*
 * layout/block.c - posting block and delta posting formats.
 */
#include "block.h"

#include <errno.h>
#include <math.h>
#include <string.h>

#define BLOCK_MAGIC 0x35425656u /* "VVB5" */
#define DELTA_MAGIC 0x33445656u /* "VVD3" */
#define ALIGN 64

typedef struct block_hdr {
	uint32_t magic;
	uint32_t n, nbatch, pdim, bits, dim;
	struct { uint32_t off, len; uint64_t sum; } col[VF_NCOL];
	uint64_t hdr_sum; /* over everything above */
} block_hdr;

/* A block is larger than a page, so LMDB keeps it on overflow pages,
 * VF_BLOCK_LEAD bytes (the page header) after a page boundary.  Column
 * offsets are chosen so that each column starts on a 64-byte line in
 * memory, not merely in the value: then a 64-byte PASS2 record is one
 * cache line, not two.  (The header records the offsets, so a reader
 * follows whatever a writer chose.) */
static size_t up(size_t x)
{
	return ((x + VF_BLOCK_LEAD + ALIGN - 1) & ~(size_t)(ALIGN - 1)) - VF_BLOCK_LEAD;
}

/* Column lengths; the key column's is given (offsets + bytes). */
static void col_lens(uint32_t n, uint32_t pdim, uint32_t bits, uint32_t keys,
		     uint32_t len[VF_NCOL])
{
	uint32_t nb = (n + VF_BATCH - 1) / VF_BATCH;
	len[VF_COL_SIGN] = nb * (pdim / 4) * 16;
	len[VF_COL_F1] = 3 * nb * VF_BATCH * 4;
	len[VF_COL_PASS2] = n * vf_pass2_stride(pdim, bits);
	len[VF_COL_IDS] = n * 16;
	len[VF_COL_KEYS] = keys;
}

static uint32_t keys_len(const vf_code *codes, uint32_t n)
{
	uint32_t k = 4 * (n + 1);
	for (uint32_t i = 0; i < n; i++)
		k += codes[i].keylen;
	return k;
}

size_t vf_block_size(const vf_code *codes, uint32_t n, uint32_t pdim, uint32_t bits)
{
	uint32_t len[VF_NCOL];
	size_t off = up(sizeof(block_hdr));
	col_lens(n, pdim, bits, keys_len(codes, n), len);
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

void vf_block_write(uint8_t *buf, const vf_code *codes, uint32_t n, uint32_t dim,
		    uint32_t pdim, uint32_t bits)
{
	block_hdr h;
	uint32_t len[VF_NCOL];
	size_t off = up(sizeof h), total = vf_block_size(codes, n, pdim, bits);
	uint32_t nb = (n + VF_BATCH - 1) / VF_BATCH, np = nb * VF_BATCH;

	memset(buf, 0, total);
	memset(&h, 0, sizeof h);
	h.magic = BLOCK_MAGIC;
	h.n = n;
	h.nbatch = nb;
	h.pdim = pdim;
	h.bits = bits;
	h.dim = dim;
	col_lens(n, pdim, bits, keys_len(codes, n), len);
	for (int c = 0; c < VF_NCOL; c++) {
		h.col[c].off = (uint32_t)off;
		h.col[c].len = len[c];
		off = up(off + len[c]);
	}
	pack_signs(buf + h.col[VF_COL_SIGN].off, codes, n, pdim, bits);
	uint8_t *pass2 = buf + h.col[VF_COL_PASS2].off;
	size_t stride = vf_pass2_stride(pdim, bits), pb1 = pdim / 8;
	float *f1 = (float *)(buf + h.col[VF_COL_F1].off);
	uint8_t *ids = buf + h.col[VF_COL_IDS].off;
	uint8_t *keys = buf + h.col[VF_COL_KEYS].off;
	uint32_t koff = 4 * (n + 1);
	for (uint32_t i = 0; i < n; i++) {
		memcpy(keys + 4 * i, &koff, 4);
		memcpy(keys + koff, codes[i].key, codes[i].keylen);
		koff += codes[i].keylen;
	}
	memcpy(keys + 4 * n, &koff, 4);
	for (uint32_t i = 0; i < np; i++) {
		float *fb = f1 + (size_t)(i / VF_BATCH) * VF_BATCH * 3 + i % VF_BATCH;
		if (i < n) {
			const vf_code *c = &codes[i];
			uint8_t *rec = pass2 + i * stride;
			const float f2[3] = {c->rb, c->eb, c->cdot};
			memcpy(rec, c->planes + pb1, (bits - 1) * pb1);
			memcpy(rec + (bits - 1) * pb1, f2, sizeof f2);
			fb[0] = c->add;
			fb[VF_BATCH] = c->r1;
			fb[2 * VF_BATCH] = c->e1;
			uint64_t sq = c->seq | (c->has_payload ? VF_SEQ_PAYLOAD : 0);
			memcpy(ids + 16 * i, &c->id, 8);
			memcpy(ids + 16 * i + 8, &sq, 8);
		} else {
			fb[0] = INFINITY; /* padding never survives */
			fb[VF_BATCH] = 0;
			fb[2 * VF_BATCH] = 0;
		}
	}
	for (int c = 0; c < VF_NCOL; c++)
		h.col[c].sum = vf_checksum(buf + h.col[c].off, h.col[c].len);
	h.hdr_sum = vf_checksum(&h, offsetof(block_hdr, hdr_sum));
	memcpy(buf, &h, sizeof h);
}

static int block_open(const void *p, size_t len, int sum, vf_block *out)
{
	block_hdr h;
	uint32_t want[VF_NCOL];
	uint32_t klen;
	if (len < sizeof h)
		return -EIO;
	memcpy(&h, p, sizeof h);
	if (h.magic != BLOCK_MAGIC ||
	    (sum && h.hdr_sum != vf_checksum(&h, offsetof(block_hdr, hdr_sum))))
		return -EIO;
	if (h.n == 0 || h.n > VF_BLOCK_MAX || h.pdim % 64 || h.bits < 1 || h.bits > 8 ||
	    h.nbatch != (h.n + VF_BATCH - 1) / VF_BATCH || h.dim == 0 || h.dim > h.pdim)
		return -EIO;
	klen = h.col[VF_COL_KEYS].len;
	if (klen < 4 * (h.n + 1))
		return -EIO;
	/* the columns a header describes must fit the value, counted in 64
	 * bits: a huge pdim would wrap their lengths in 32 */
	if (len > UINT32_MAX || (uint64_t)h.nbatch * (h.pdim / 4) * 16 > len ||
	    (uint64_t)h.n * vf_pass2_stride(h.pdim, h.bits) > len)
		return -EIO;
	col_lens(h.n, h.pdim, h.bits, klen, want);
	out->base = p;
	out->len = len;
	out->n = h.n;
	out->nbatch = h.nbatch;
	out->pdim = h.pdim;
	out->bits = h.bits;
	out->dim = h.dim;
	out->stride = vf_pass2_stride(h.pdim, h.bits);
	for (int c = 0; c < VF_NCOL; c++) {
		if (h.col[c].len != want[c] || (size_t)h.col[c].off + h.col[c].len > len)
			return -EIO;
		out->col[c] = (const uint8_t *)p + h.col[c].off;
		out->col_len[c] = h.col[c].len;
		out->col_sum[c] = h.col[c].sum;
	}
	return 0;
}

int vf_block_open(const void *p, size_t len, vf_block *out)
{
	return block_open(p, len, 1, out);
}

int vf_block_open_known(const void *p, size_t len, vf_block *out)
{
	return block_open(p, len, 0, out);
}

int vf_block_check(vf_vcache *cache, const vf_block *b, int col)
{
	return vf_verify(cache, b->col[col], b->col_len[col], b->col_sum[col]);
}

void vf_block_prefetch_checks(const vf_vcache *cache, const vf_block *b)
{
	for (int c = VF_COL_SIGN; c <= VF_COL_IDS; c++) /* those a scan checks */
		vf_verify_prefetch(cache, b->col[c], b->col_len[c], b->col_sum[c]);
}

uint64_t vf_block_id(const vf_block *b, uint32_t i)
{
	uint64_t v;
	memcpy(&v, vf_block_id_at(b, i), 8);
	return v;
}

uint64_t vf_block_seq(const vf_block *b, uint32_t i)
{
	uint64_t v;
	memcpy(&v, b->col[VF_COL_IDS] + 16 * (size_t)i + 8, 8);
	return v & ~VF_SEQ_PAYLOAD;
}

int vf_block_has_payload(const vf_block *b, uint32_t i)
{
	uint64_t v;
	memcpy(&v, b->col[VF_COL_IDS] + 16 * (size_t)i + 8, 8);
	return (v & VF_SEQ_PAYLOAD) != 0;
}

const char *vf_block_key(const vf_block *b, uint32_t i, uint32_t *len)
{
	const uint8_t *k = b->col[VF_COL_KEYS];
	uint32_t a, e;
	memcpy(&a, k + 4 * (size_t)i, 4);
	memcpy(&e, k + 4 * (size_t)i + 4, 4);
	if (a > e || e > b->col_len[VF_COL_KEYS] || a < 4 * (b->n + 1))
		return NULL;
	*len = e - a;
	return (const char *)k + a;
}

void vf_sign_gather(const uint8_t *batch, uint32_t groups, uint32_t j, uint8_t *out)
{
	uint32_t sh = j >= 16 ? 4 : 0;
	batch += j & 15;
	for (uint32_t g = 0; g < groups; g += 2)
		out[g / 2] = (uint8_t)(((batch[g * 16] >> sh) & 15) |
				       (((batch[(g + 1) * 16] >> sh) & 15) << 4));
}

void vf_block_sign_with(const vf_block *b, uint32_t i, uint8_t *out, vf_sign_gather_fn sign)
{
	uint32_t groups = b->pdim / 4;
	sign(b->col[VF_COL_SIGN] + (size_t)(i / VF_BATCH) * groups * 16, groups, i % VF_BATCH, out);
}

void vf_block_planes(const vf_block *b, uint32_t i, uint8_t *out)
{
	size_t pb1 = vf_plane_bytes(b->pdim);
	vf_block_sign_with(b, i, out, vf_sign_gather);
	/* planes 1..bits-1: pb1 is a multiple of 8 (pdim % 64 == 0), so 8-byte
	 * moves the compiler keeps inline rather than a library call */
	const uint8_t *src = vf_block_pass2_at(b, i);
	for (size_t o = 0, e = (b->bits - 1) * pb1; o < e; o += 8)
		memcpy(out + pb1 + o, src + o, 8);
}

float vf_block_f1(const vf_block *b, int which, uint32_t i)
{
	return vf_ldf(vf_block_f1_batch(b, i / VF_BATCH), (size_t)which * VF_BATCH + i % VF_BATCH);
}

float vf_block_f2(const vf_block *b, int which, uint32_t i)
{
	return vf_ldf(vf_block_f2_at(b, i), (size_t)which);
}

/* delta: magic u32 | pdim u16 | bits u16 | id u64 | seq u64 (payload flag) |
 * 6 floats | dim u32 | keylen u32 | planes | key | xxh3 u64 of all before
 * it.  The vector itself is the record's. */
#define DELTA_HDR 56

size_t vf_delta_size(uint32_t pdim, uint32_t bits, uint32_t keylen)
{
	return DELTA_HDR + (size_t)bits * (pdim / 8) + keylen + 8;
}

void vf_delta_write(uint8_t *buf, const vf_code *c, uint32_t dim, uint32_t pdim,
		    uint32_t bits)
{
	uint32_t magic = DELTA_MAGIC;
	uint16_t pd = (uint16_t)pdim, bt = (uint16_t)bits;
	float f[6] = {c->add, c->r1, c->e1, c->rb, c->eb, c->cdot};
	size_t pb = (size_t)bits * (pdim / 8), body;
	uint64_t sq = c->seq | (c->has_payload ? VF_SEQ_PAYLOAD : 0);
	memcpy(buf, &magic, 4);
	memcpy(buf + 4, &pd, 2);
	memcpy(buf + 6, &bt, 2);
	memcpy(buf + 8, &c->id, 8);
	memcpy(buf + 16, &sq, 8);
	memcpy(buf + 24, f, 24);
	memcpy(buf + 48, &dim, 4);
	memcpy(buf + 52, &c->keylen, 4);
	memcpy(buf + DELTA_HDR, c->planes, pb);
	memcpy(buf + DELTA_HDR + pb, c->key, c->keylen);
	body = DELTA_HDR + pb + c->keylen;
	uint64_t sum = vf_checksum(buf, body);
	memcpy(buf + body, &sum, 8);
}

int vf_delta_open(const void *p, size_t len, uint32_t dim, uint32_t pdim,
		  uint32_t bits, vf_code *out)
{
	return vf_delta_open_cached(NULL, p, len, dim, pdim, bits, out);
}

int vf_delta_open_cached(vf_vcache *cache, const void *p, size_t len, uint32_t dim,
			 uint32_t pdim, uint32_t bits, vf_code *out)
{
	const uint8_t *b = p;
	uint32_t magic, d, kl;
	uint16_t pd, bt;
	uint64_t sum, sq;
	float f[6];
	size_t pb = (size_t)bits * (pdim / 8);
	if (len < DELTA_HDR + 8)
		return -EIO;
	memcpy(&magic, b, 4);
	memcpy(&pd, b + 4, 2);
	memcpy(&bt, b + 6, 2);
	memcpy(&d, b + 48, 4);
	memcpy(&kl, b + 52, 4);
	if (magic != DELTA_MAGIC || pd != pdim || bt != bits || d != dim ||
	    len != vf_delta_size(pdim, bits, kl))
		return -EIO;
	memcpy(&sum, b + len - 8, 8);
	if (vf_verify(cache, b, len - 8, sum))
		return -EIO;
	memcpy(&out->id, vf_delta_id_at(b), 8);
	memcpy(&sq, b + 16, 8);
	out->seq = sq & ~VF_SEQ_PAYLOAD;
	out->has_payload = (sq & VF_SEQ_PAYLOAD) != 0;
	memcpy(f, b + 24, 24);
	out->add = f[0];
	out->r1 = f[1];
	out->e1 = f[2];
	out->rb = f[3];
	out->eb = f[4];
	out->cdot = f[5];
	out->planes = b + DELTA_HDR;
	out->key = (const char *)b + DELTA_HDR + pb;
	out->keylen = kl;
	return 0;
}
