/*
 * test_layout.c - the storage layer: posting block and delta posting
 * formats and their checksums, key encodings, the record codec, LMDB map
 * growth and exclusive opening, and the assignment map.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <pthread.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "assign.h"
#include "block.h"
#include "checksum.h"
#include "io.h"
#include "keys.h"
#include "meta.h"
#include "record.h"
#include "store.h"
#include "testutil.h"

/* ------------------------------------------------------------ codes */

typedef struct codeset {
	uint32_t n, dim, pdim, bits;
	vf_code *c;
	uint8_t *planes; /* n * bits * pdim/8 */
	char *keys;      /* n * VF_TEST_KEYMAX */
} codeset;

#define VF_TEST_KEYMAX 255

static float rnd_factor(rng *r)
{
	return (float)(rng_unif(r) * 200.0 - 100.0);
}

/* n random codes of vectors of dim floats (dim <= pdim): random planes,
 * factors, ids, sequence numbers (below the payload flag), payload flags,
 * vectors and keys of 0..24 bytes, some of 255. */
static void codes_make(codeset *cs, rng *r, uint32_t n, uint32_t dim,
		       uint32_t pdim, uint32_t bits)
{
	size_t pb = (size_t)bits * vf_plane_bytes(pdim);
	cs->n = n;
	cs->dim = dim;
	cs->pdim = pdim;
	cs->bits = bits;
	cs->c = calloc(n, sizeof *cs->c);
	cs->planes = malloc(n * pb);
	cs->keys = malloc((size_t)n * VF_TEST_KEYMAX);
	assert_non_null(cs->c);
	assert_non_null(cs->planes);
	assert_non_null(cs->keys);
	for (size_t i = 0; i < n * pb; i++)
		cs->planes[i] = (uint8_t)rng_next(r);
	for (size_t i = 0; i < (size_t)n * VF_TEST_KEYMAX; i++)
		cs->keys[i] = (char)(' ' + rng_next(r) % 95);
	for (uint32_t i = 0; i < n; i++) {
		vf_code *c = &cs->c[i];
		c->id = rng_next(r);
		c->seq = rng_next(r) >> 1;
		c->has_payload = (int)(rng_next(r) & 1);
		c->add = rnd_factor(r);
		c->r1 = rnd_factor(r);
		c->e1 = rnd_factor(r);
		c->rb = rnd_factor(r);
		c->eb = rnd_factor(r);
		c->cdot = rnd_factor(r);
		c->planes = cs->planes + i * pb;
		c->key = cs->keys + (size_t)i * VF_TEST_KEYMAX;
		c->keylen = rng_next(r) % 16 == 0 ? VF_TEST_KEYMAX
						   : (uint32_t)(rng_next(r) % 25);
	}
}

static void codes_free(codeset *cs)
{
	free(cs->c);
	free(cs->planes);
	free(cs->keys);
	memset(cs, 0, sizeof *cs);
}

/* A block of the codes in a fresh buffer; *len gets its size. */
static uint8_t *block_make(const codeset *cs, size_t *len)
{
	*len = vf_block_size(cs->c, cs->n, cs->pdim, cs->bits);
	uint8_t *buf = malloc(*len);
	assert_non_null(buf);
	vf_block_write(buf, cs->c, cs->n, cs->dim, cs->pdim, cs->bits);
	return buf;
}

static int same_float(float a, float b)
{
	return memcmp(&a, &b, sizeof a) == 0;
}

/* Every column of b holds what the codes say. */
static void check_block(const vf_block *b, const codeset *cs)
{
	uint32_t n = cs->n, pdim = cs->pdim, bits = cs->bits;
	uint32_t nb = (n + VF_BATCH - 1) / VF_BATCH, groups = pdim / 4;
	size_t pb = (size_t)bits * vf_plane_bytes(pdim);

	assert_int_equal(b->n, n);
	assert_int_equal(b->nbatch, nb);
	assert_int_equal(b->pdim, pdim);
	assert_int_equal(b->bits, bits);
	assert_int_equal(b->dim, cs->dim);
	/* the two columns whose shape the scan kernels rely on */
	assert_int_equal(b->col_len[VF_COL_SIGN], nb * groups * 16);
	assert_int_equal(b->col_len[VF_COL_PASS2], n * vf_pass2_stride(pdim, bits));
	for (int c = 0; c < VF_NCOL; c++) {
		/* inside the value, and no two columns overlap */
		assert_true(b->col[c] >= b->base);
		assert_true((size_t)(b->col[c] - b->base) + b->col_len[c] <= b->len);
		for (int o = 0; o < c; o++)
			assert_true(b->col[o] + b->col_len[o] <= b->col[c] ||
				    b->col[c] + b->col_len[c] <= b->col[o]);
		assert_int_equal(vf_block_check(NULL, b, c), 0);
	}
	/* what the accessors read lies inside the checksummed columns */
	const uint8_t *f1end = b->col[VF_COL_F1] + b->col_len[VF_COL_F1];
	const uint8_t *p2end = b->col[VF_COL_PASS2] + b->col_len[VF_COL_PASS2];
	for (uint32_t bt = 0; bt < nb; bt++)
		assert_true(vf_block_f1_batch(b, bt) >= b->col[VF_COL_F1] &&
			    vf_block_f1_batch(b, bt) + 3 * VF_BATCH * 4 <= f1end);
	assert_true(vf_block_pass2_at(b, 0) == b->col[VF_COL_PASS2] &&
		    vf_block_f2_at(b, n - 1) + 3 * 4 <= p2end);
	/* a record fits its stride and no record straddles more cache lines
	 * than its size needs */
	assert_true((bits - 1) * (pdim / 8) + 12 <= b->stride);
	assert_true(b->stride % 64 == 0 || 64 % b->stride == 0);
	uint8_t *planes = malloc(pb);
	assert_non_null(planes);

	for (uint32_t i = 0; i < n; i++) {
		const vf_code *c = &cs->c[i];
		if (vf_block_id(b, i) != c->id || vf_block_seq(b, i) != c->seq ||
		    vf_block_has_payload(b, i) != c->has_payload) {
			print_message("n %u pdim %u bits %u: vector %u id/seq/payload flag differ\n",
				      n, pdim, bits, i);
			fail();
		}
		uint32_t kl = 0xFFFFFFFFu;
		const char *key = vf_block_key(b, i, &kl);
		if (!key || kl != c->keylen || (kl && memcmp(key, c->key, kl) != 0)) {
			print_message("n %u dim %u: vector %u: key (%u bytes) differs\n",
				      n, cs->dim, i, c->keylen);
			fail();
		}
		vf_block_planes(b, i, planes);
		if (memcmp(planes, c->planes, pb) != 0) {
			print_message("n %u pdim %u bits %u: vector %u planes differ\n",
				      n, pdim, bits, i);
			fail();
		}
		/* the factors, through the per-vector accessors and through
		 * the batch / vector layouts the kernels read */
		const uint8_t *fb = vf_block_f1_batch(b, i / VF_BATCH);
		const uint8_t *f2 = vf_block_f2_at(b, i);
		const float f1want[3] = { c->add, c->r1, c->e1 };
		const float f2want[3] = { c->rb, c->eb, c->cdot };
		for (int w = 0; w < 3; w++)
			if (!same_float(vf_block_f1(b, w, i), f1want[w]) ||
			    !same_float(vf_ldf(fb, (size_t)w * VF_BATCH + i % VF_BATCH), f1want[w]) ||
			    !same_float(vf_block_f2(b, w, i), f2want[w]) ||
			    !same_float(vf_ldf(f2, (size_t)w), f2want[w])) {
				print_message("n %u pdim %u bits %u: vector %u factor %d differs\n",
					      n, pdim, bits, i, w);
				fail();
			}
	}
	free(planes);
	/* padding slots of the last batch never pass a first-pass bound */
	for (uint32_t i = n; i < nb * VF_BATCH; i++) {
		const uint8_t *fb = vf_block_f1_batch(b, i / VF_BATCH);
		float add = vf_ldf(fb, i % VF_BATCH);
		float r1 = vf_ldf(fb, VF_BATCH + i % VF_BATCH);
		float e1 = vf_ldf(fb, 2 * VF_BATCH + i % VF_BATCH);
		if (!(isinf(add) && add > 0) || !isfinite(r1) || !isfinite(e1) ||
		    !same_float(vf_block_f1(b, 0, i), add)) {
			print_message("n %u: padding slot %u: add %g r1 %g e1 %g\n", n, i,
				      add, r1, e1);
			fail();
		}
	}
	/* sign column: per batch, per group of 4 dimensions, 16 bytes; vector j
	 * of the batch in the low (j < 16) or high nibble of byte j & 15; the
	 * nibble's bit k is plane 0's bit for dimension 4g + k */
	const uint8_t *sign = b->col[VF_COL_SIGN];
	for (uint32_t i = 0; i < n; i++) {
		uint32_t bt = i / VF_BATCH, j = i % VF_BATCH;
		const uint8_t *p0 = cs->c[i].planes;
		for (uint32_t g = 0; g < groups; g++) {
			uint8_t byte = sign[(size_t)bt * groups * 16 + g * 16 + (j & 15)];
			uint8_t got = j < 16 ? byte & 15 : byte >> 4;
			uint8_t want = 0;
			for (uint32_t k = 0; k < 4; k++) {
				uint32_t dim = 4 * g + k;
				want |= (uint8_t)(((p0[dim / 8] >> (dim % 8)) & 1) << k);
			}
			if (got != want) {
				print_message("n %u pdim %u bits %u: sign nibble of vector %u "
					      "group %u is %x, want %x\n", n, pdim, bits, i,
					      g, got, want);
				fail();
			}
		}
	}
}

/* ------------------------------------------------------------ 1. blocks */

static void test_block_roundtrip(void **state)
{
	(void)state;
	static const uint32_t ns[] = { 1, 31, 32, 33, 1000 };
	static const uint32_t pdims[] = { 64, 128, 1024 };
	static const uint32_t bitss[] = { 1, 4, 8 };
	rng r = { .s = 11 };
	size_t combos = 0;
	for (size_t a = 0; a < sizeof ns / sizeof *ns; a++)
		for (size_t p = 0; p < sizeof pdims / sizeof *pdims; p++)
			for (size_t q = 0; q < sizeof bitss / sizeof *bitss; q++) {
				codeset cs;
				/* dim: a little below pdim, or all of it */
				uint32_t dim = q == 1 ? pdims[p] : pdims[p] - pdims[p] / 8 - 3;
				codes_make(&cs, &r, ns[a], dim, pdims[p], bitss[q]);
				size_t len;
				uint8_t *buf = block_make(&cs, &len);
				vf_block b;
				memset(&b, 0, sizeof b);
				assert_int_equal(vf_block_open(buf, len, &b), 0);
				assert_ptr_equal(b.base, buf);
				assert_int_equal(b.len, len);
				check_block(&b, &cs);

				/* the writer sets every byte: a buffer full of other
				 * garbage gives the same value */
				uint8_t *buf2 = malloc(len);
				assert_non_null(buf2);
				memset(buf2, 0xA5, len);
				vf_block_write(buf2, cs.c, cs.n, cs.dim, cs.pdim, cs.bits);
				assert_memory_equal(buf, buf2, len);

				/* a copy at an odd address reads the same (LMDB values
				 * carry no alignment) */
				uint8_t *odd = malloc(len + 3);
				assert_non_null(odd);
				memcpy(odd + 3, buf, len);
				assert_int_equal(vf_block_open(odd + 3, len, &b), 0);
				check_block(&b, &cs);

				free(odd);
				free(buf2);
				free(buf);
				codes_free(&cs);
				combos++;
			}
	/* and the largest block */
	codeset cs;
	codes_make(&cs, &r, VF_BLOCK_MAX, 10, 64, 2);
	size_t len;
	uint8_t *buf = block_make(&cs, &len);
	vf_block b;
	assert_int_equal(vf_block_open(buf, len, &b), 0);
	check_block(&b, &cs);
	free(buf);
	codes_free(&cs);
	print_message("%zu block shapes round-tripped\n", combos + 1);
}

/* Malformed headers and short values are refused. */
static void test_block_bad_lengths(void **state)
{
	(void)state;
	rng r = { .s = 12 };
	codeset cs;
	codes_make(&cs, &r, 33, 100, 128, 3);
	size_t len;
	uint8_t *buf = block_make(&cs, &len);
	vf_block b;
	assert_int_equal(vf_block_open(buf, len, &b), 0);
	size_t end = 0;
	for (int c = 0; c < VF_NCOL; c++) {
		size_t e = (size_t)(b.col[c] - buf) + b.col_len[c];
		if (e > end)
			end = e;
	}
	assert_true(end <= len);
	/* a value cut inside a column, or inside the header */
	assert_int_equal(vf_block_open(buf, end - 1, &b), -EIO);
	assert_int_equal(vf_block_open(buf, 16, &b), -EIO);
	assert_int_equal(vf_block_open(buf, 0, &b), -EIO);
	free(buf);
	codes_free(&cs);
}

/* vf_block_open_known() (a header accepted before at the same place in the
 * same snapshot) skips only the header's checksum: the same block as
 * vf_block_open() gives, and a malformed header is still refused. */
static void test_block_open_known(void **state)
{
	(void)state;
	rng r = { .s = 14 };
	codeset cs;
	codes_make(&cs, &r, 70, 100, 128, 4);
	size_t len;
	uint8_t *buf = block_make(&cs, &len);
	vf_block a, b;
	assert_int_equal(vf_block_open(buf, len, &a), 0);
	assert_int_equal(vf_block_open_known(buf, len, &b), 0);
	assert_true(a.base == b.base && a.len == b.len && a.n == b.n && a.nbatch == b.nbatch &&
		    a.pdim == b.pdim && a.bits == b.bits && a.dim == b.dim && a.stride == b.stride);
	for (int c = 0; c < VF_NCOL; c++)
		assert_true(a.col[c] == b.col[c] && a.col_len[c] == b.col_len[c] &&
			    a.col_sum[c] == b.col_sum[c]);
	check_block(&b, &cs);
	/* a flipped bit of the header's checksum: only the full open sees it */
	size_t sum_at = 24 + (size_t)VF_NCOL * 16;
	buf[sum_at] ^= 1;
	assert_int_equal(vf_block_open(buf, len, &a), -EIO);
	assert_int_equal(vf_block_open_known(buf, len, &b), 0);
	buf[sum_at] ^= 1;
	/* what the structure says is still checked */
	size_t end = (size_t)(a.col[VF_COL_KEYS] - buf) + a.col_len[VF_COL_KEYS];
	assert_int_equal(vf_block_open_known(buf, end - 1, &b), -EIO);
	assert_int_equal(vf_block_open_known(buf, 16, &b), -EIO);
	buf[0] ^= 1; /* the magic */
	assert_int_equal(vf_block_open_known(buf, len, &b), -EIO);
	free(buf);
	codes_free(&cs);
}

/* A header whose own checksum holds but whose pdim is so large that the
 * sign column's length wraps to 0 in 32 bits (2 batches x 2^29/4 x 16 =
 * 2^32): opening it must fail, not hand out columns past the value.  The
 * header is laid out here as layout/block.c writes it. */
static void test_block_huge_pdim(void **state)
{
	(void)state;
	struct {
		uint32_t magic;
		uint32_t n, nbatch, pdim, bits, dim;
		struct { uint32_t off, len; uint64_t sum; } col[VF_NCOL];
		uint64_t hdr_sum;
	} h;
	rng r = { .s = 13 };
	codeset cs;
	codes_make(&cs, &r, 40, 100, 128, 1);
	size_t len;
	uint8_t *buf = block_make(&cs, &len);
	assert_true(len >= sizeof h);
	memcpy(&h, buf, sizeof h);
	h.pdim = 1u << 29;
	h.col[VF_COL_SIGN].len = (uint32_t)((uint64_t)h.nbatch * (h.pdim / 4) * 16); /* wraps to 0 */
	assert_int_equal(h.col[VF_COL_SIGN].len, 0);
	h.col[VF_COL_PASS2].len = h.n * vf_pass2_stride(h.pdim, h.bits);
	h.hdr_sum = vf_checksum(&h, offsetof(__typeof__(h), hdr_sum));
	memcpy(buf, &h, sizeof h);
	vf_block b;
	assert_int_equal(vf_block_open(buf, len, &b), -EIO);
	free(buf);
	codes_free(&cs);
}

/* ------------------------------------------------------------ 2. bit flips */

static void flip(uint8_t *p, size_t bit)
{
	p[bit / 8] ^= (uint8_t)(1u << (bit % 8));
}

static void check_flips(uint32_t n, uint32_t pdim, uint32_t bits, uint64_t seed)
{
	rng r = { .s = seed };
	codeset cs;
	codes_make(&cs, &r, n, pdim - 7, pdim, bits);
	size_t len;
	uint8_t *buf = block_make(&cs, &len);
	vf_block b;
	assert_int_equal(vf_block_open(buf, len, &b), 0);

	vf_vcache *cache = calloc(1, sizeof *cache);
	assert_non_null(cache);
	/* the original's columns verified (and remembered) first */
	for (int c = 0; c < VF_NCOL; c++) {
		assert_int_equal(vf_block_check(cache, &b, c), 0);
		assert_int_equal(vf_block_check(cache, &b, c), 0);
	}

	/* the header: every bit before the first column is either detected
	 * or alignment padding after the header, zero and ignored (the block
	 * reads the same) */
	size_t hdr = len;
	for (int c = 0; c < VF_NCOL; c++)
		if ((size_t)(b.col[c] - buf) < hdr)
			hdr = (size_t)(b.col[c] - buf);
	assert_true(hdr > 0);
	size_t missed = 0, first_pad = hdr * 8;
	for (size_t bit = 0; bit < hdr * 8; bit++) {
		flip(buf, bit);
		vf_block x;
		memset(&x, 0, sizeof x);
		int rc = vf_block_open(buf, len, &x);
		flip(buf, bit);
		if (rc == -EIO) {
			if (bit > first_pad && missed++ < 5)
				print_message("header bit %zu detected after padding from bit %zu\n",
					      bit, first_pad);
			continue;
		}
		if (first_pad == hdr * 8)
			first_pad = bit;
		int same = rc == 0 && buf[bit / 8] == 0 && x.n == b.n && x.pdim == b.pdim &&
			   x.bits == b.bits && x.nbatch == b.nbatch && x.dim == b.dim;
		for (int c = 0; c < VF_NCOL && same; c++)
			same = x.col[c] == b.col[c] && x.col_len[c] == b.col_len[c] &&
			       x.col_sum[c] == b.col_sum[c];
		if (!same && missed++ < 5)
			print_message("header bit %zu flipped: open %d, not detected\n", bit, rc);
	}
	print_message("n %u pdim %u bits %u: %zu header bits all detected, %zu bits of padding\n",
		      n, pdim, bits, first_pad, hdr * 8 - first_pad);
	assert_int_equal(missed, 0);
	/* at least an offset, a length and a checksum per column */
	assert_true(first_pad >= (size_t)VF_NCOL * 16 * 8);
	assert_int_equal(vf_block_open(buf, len, &b), 0);

	/* each column: bits at both ends and spread over it, in a copy at
	 * another address */
	uint8_t *copy = malloc(len + 8);
	assert_non_null(copy);
	uint8_t *cp = copy + 8;
	memcpy(cp, buf, len);
	for (int c = 0; c < VF_NCOL; c++) {
		size_t off = (size_t)(b.col[c] - buf), nbits = (size_t)b.col_len[c] * 8;
		size_t picks[40];
		size_t np = 0;
		for (size_t k = 0; k < 8; k++) {
			picks[np++] = k;
			picks[np++] = nbits - 1 - k;
		}
		/* the key column: half of the random bits in its offset table */
		size_t table = c == VF_COL_KEYS ? (size_t)(n + 1) * 4 * 8 : nbits;
		for (; np < sizeof picks / sizeof *picks; np++)
			picks[np] = rng_next(&r) % (np % 2 ? table : nbits);
		for (size_t k = 0; k < np; k++) {
			size_t bit = off * 8 + picks[k];
			flip(cp, bit);
			vf_block x;
			assert_int_equal(vf_block_open(cp, len, &x), 0);
			for (int o = 0; o < VF_NCOL; o++) {
				int want = o == c ? -EIO : 0;
				int got = vf_block_check(NULL, &x, o);
				if (got != want)
					print_message("column %d bit %zu flipped: column %d check %d, want %d\n",
						      c, picks[k], o, got, want);
				assert_int_equal(got, want);
			}
			/* a damaged key offset table never sends a reader
			 * outside the key column */
			for (uint32_t i = 0; i < x.n; i++) {
				uint32_t kl = 0;
				const char *key = vf_block_key(&x, i, &kl);
				if (key)
					assert_true((const uint8_t *)key >= x.col[VF_COL_KEYS] &&
						    (const uint8_t *)key + kl <=
							    x.col[VF_COL_KEYS] + x.col_len[VF_COL_KEYS]);
			}
			/* the cache knows the original: it must not vouch for
			 * different bytes at another address */
			int got = vf_block_check(cache, &x, c);
			if (got != -EIO)
				print_message("column %d bit %zu flipped: cached check %d\n", c,
					      picks[k], got);
			assert_int_equal(got, -EIO);
			flip(cp, bit);
		}
		/* the original still verifies, with and without the cache */
		assert_int_equal(vf_block_check(cache, &b, c), 0);
		assert_int_equal(vf_block_check(NULL, &b, c), 0);
	}
	assert_memory_equal(cp, buf, len);
	free(copy);
	free(cache);
	free(buf);
	codes_free(&cs);
}

static void test_block_flips_detected(void **state)
{
	(void)state;
	check_flips(1, 64, 1, 21);
	check_flips(33, 128, 4, 22);
	check_flips(1000, 256, 8, 23);
}

static void check_delta(uint32_t dim, uint32_t pdim, uint32_t bits, uint32_t keylen,
			int has_payload, rng *r)
{
	codeset cs;
	codes_make(&cs, r, 1, dim, pdim, bits);
	vf_code *w = &cs.c[0];
	w->keylen = keylen;
	w->has_payload = has_payload;
	size_t len = vf_delta_size(pdim, bits, keylen);
	size_t pb = (size_t)bits * vf_plane_bytes(pdim);
	assert_true(len >= pb + keylen + 6 * 4 + 16);
	uint8_t *buf = malloc(len + 1);
	assert_non_null(buf);
	uint8_t *p = buf + 1; /* no alignment */
	vf_delta_write(p, w, dim, pdim, bits);

	vf_code got;
	memset(&got, 0, sizeof got);
	assert_int_equal(vf_delta_open(p, len, dim, pdim, bits, &got), 0);
	assert_true(got.id == w->id && got.seq == w->seq);
	assert_int_equal(got.has_payload, has_payload);
	assert_true(same_float(got.add, w->add) && same_float(got.r1, w->r1) &&
		    same_float(got.e1, w->e1) && same_float(got.rb, w->rb) &&
		    same_float(got.eb, w->eb) && same_float(got.cdot, w->cdot));
	assert_non_null(got.planes);
	assert_memory_equal(got.planes, w->planes, pb);
	assert_int_equal(got.keylen, keylen);
	assert_non_null(got.key);
	if (keylen)
		assert_memory_equal(got.key, w->key, keylen);
	/* what it points at lies inside the value */
	assert_true(got.planes >= p && got.planes + pb <= p + len);
	assert_true((const uint8_t *)got.key >= p &&
		    (const uint8_t *)got.key + keylen <= p + len);

	/* the wrong shape or length */
	assert_int_equal(vf_delta_open(p, len - 1, dim, pdim, bits, &got), -EIO);
	assert_int_equal(vf_delta_open(p, len + 1, dim, pdim, bits, &got), -EIO);
	assert_int_equal(vf_delta_open(p, 0, dim, pdim, bits, &got), -EIO);
	assert_int_equal(vf_delta_open(p, 20, dim, pdim, bits, &got), -EIO);
	if (bits > 1)
		assert_int_equal(vf_delta_open(p, vf_delta_size(pdim, bits - 1, keylen),
						dim, pdim, bits - 1, &got), -EIO);
	assert_int_equal(vf_delta_open(p, vf_delta_size(pdim * 2, bits, keylen), dim,
					pdim * 2, bits, &got), -EIO);
	assert_int_equal(vf_delta_open(p, vf_delta_size(pdim, bits, keylen),
					dim - 1, pdim, bits, &got), -EIO);

	/* every single flipped bit */
	size_t missed = 0;
	for (size_t bit = 0; bit < len * 8; bit++) {
		flip(p, bit);
		if (vf_delta_open(p, len, dim, pdim, bits, &got) != -EIO && missed++ < 5)
			print_message("delta pdim %u bits %u: bit %zu flipped, not detected\n",
				      pdim, bits, bit);
		flip(p, bit);
	}
	assert_int_equal(missed, 0);
	assert_int_equal(vf_delta_open(p, len, dim, pdim, bits, &got), 0);
	free(buf);
	codes_free(&cs);
}

static void test_delta_roundtrip_and_flips(void **state)
{
	(void)state;
	rng r = { .s = 31 };
	static const uint32_t pdims[] = { 64, 128, 1024 };
	static const uint32_t bitss[] = { 1, 4, 8 };
	static const uint32_t keylens[] = { 0, 7, 255 };
	for (size_t p = 0; p < 3; p++)
		for (size_t q = 0; q < 3; q++) {
			uint32_t dim = q == 1 ? pdims[p] : pdims[p] / 2 + 5;
			check_delta(dim, pdims[p], bitss[q], keylens[(p + q) % 3], (int)(q & 1),
				    &r);
		}
}

/* ------------------------------------------------------------ 3. keys */

static int cmp_u64(uint64_t a, uint64_t b)
{
	return a < b ? -1 : a > b;
}

static int sgn(int x)
{
	return (x > 0) - (x < 0);
}

/* Values that often tie and sit on byte boundaries. */
static uint64_t rnd_u64(rng *r)
{
	switch (rng_next(r) % 6) {
	case 0: return rng_next(r) % 4;
	case 1: return UINT64_MAX - rng_next(r) % 4;
	case 2: return (uint64_t)1 << (rng_next(r) % 64);
	case 3: return ((uint64_t)1 << (rng_next(r) % 64)) - 1;
	case 4: return rng_next(r) >> (rng_next(r) % 64);
	default: return rng_next(r);
	}
}

static uint32_t rnd_u32(rng *r)
{
	uint64_t v = rnd_u64(r);
	return (uint32_t)(v ^ (v >> 32));
}

static void test_key_order(void **state)
{
	(void)state;
	rng r = { .s = 41 };
	const int PAIRS = 200000;
	for (int t = 0; t < PAIRS; t++) {
		uint64_t g[2], s[2];
		uint32_t c[2];
		uint8_t k[2];
		for (int i = 0; i < 2; i++) {
			g[i] = rnd_u64(&r);
			c[i] = rnd_u32(&r);
			k[i] = (uint8_t)(rng_next(&r) % 4 == 0 ? rng_next(&r) : rng_next(&r) % 4);
			s[i] = rnd_u64(&r);
		}
		/* ties on a prefix of the tuple, so later fields decide */
		int same = (int)(rng_next(&r) % 4);
		if (same >= 1)
			g[1] = g[0];
		if (same >= 2)
			c[1] = c[0];
		if (same >= 3)
			k[1] = k[0];

		vf_postkey pk[2] = { vf_post_key(g[0], c[0], k[0], s[0]),
				     vf_post_key(g[1], c[1], k[1], s[1]) };
		int want = cmp_u64(g[0], g[1]);
		if (!want)
			want = cmp_u64(c[0], c[1]);
		if (!want)
			want = cmp_u64(k[0], k[1]);
		if (!want)
			want = cmp_u64(s[0], s[1]);
		int got = sgn(memcmp(pk[0].b, pk[1].b, sizeof pk[0].b));
		if (got != want) {
			print_message("post key (%llu,%u,%u,%llu) vs (%llu,%u,%u,%llu): memcmp %d, want %d\n",
				      (unsigned long long)g[0], c[0], k[0], (unsigned long long)s[0],
				      (unsigned long long)g[1], c[1], k[1], (unsigned long long)s[1],
				      got, want);
			fail();
		}
		for (int i = 0; i < 2; i++) {
			assert_true(vf_postkey_gen(pk[i].b) == g[i]);
			assert_true(vf_postkey_cluster(pk[i].b) == c[i]);
			assert_true(vf_postkey_kind(pk[i].b) == k[i]);
			assert_true(vf_postkey_sub(pk[i].b) == s[i]);
		}

		vf_genkey gk[2] = { vf_gen_key(g[0], k[0], s[0]),
				    vf_gen_key(g[1], k[1], s[1]) };
		want = cmp_u64(g[0], g[1]);
		if (!want)
			want = cmp_u64(k[0], k[1]);
		if (!want)
			want = cmp_u64(s[0], s[1]);
		got = sgn(memcmp(gk[0].b, gk[1].b, sizeof gk[0].b));
		if (got != want) {
			print_message("gen key (%llu,%u,%llu) vs (%llu,%u,%llu): memcmp %d, want %d\n",
				      (unsigned long long)g[0], k[0], (unsigned long long)s[0],
				      (unsigned long long)g[1], k[1], (unsigned long long)s[1],
				      got, want);
			fail();
		}
		for (int i = 0; i < 2; i++) {
			assert_true(vf_rd_be64(gk[i].b) == g[i]);
			assert_int_equal(gk[i].b[8], k[i]);
			assert_true(vf_rd_be64(gk[i].b + 9) == s[i]);
		}

		vf_key64 uk[2] = { vf_key_u64(s[0]), vf_key_u64(s[1]) };
		got = sgn(memcmp(uk[0].b, uk[1].b, sizeof uk[0].b));
		assert_int_equal(got, cmp_u64(s[0], s[1]));
		assert_true(vf_rd_be64(uk[0].b) == s[0]);
		assert_true(vf_rd_be64(uk[1].b) == s[1]);
		uint8_t b32[4];
		vf_be32(b32, c[0]);
		assert_int_equal(vf_rd_be32(b32), c[0]);
	}
	/* the scan order of kinds within one cluster */
	assert_true(VF_PK_MANIFEST < VF_PK_TOMB && VF_PK_TOMB < VF_PK_BLOCK &&
		    VF_PK_BLOCK < VF_PK_DELTA);
	vf_postkey last = vf_post_key(7, 3, VF_PK_DELTA, UINT64_MAX);
	vf_postkey next = vf_post_key(7, 4, VF_PK_MANIFEST, 0);
	assert_true(memcmp(last.b, next.b, sizeof last.b) < 0);
}

/* ------------------------------------------------------------ 4. records */

static void check_record_as(uint64_t seq, uint32_t dim, size_t keylen, size_t plen,
			    int bytes, rng *r)
{
	float *vec = malloc((dim ? dim : 1) * sizeof(float));
	char *key = malloc(keylen + 1);
	uint8_t *pay = malloc(plen + 1);
	assert_non_null(vec);
	assert_non_null(key);
	assert_non_null(pay);
	for (uint32_t i = 0; i < dim; i++)
		vec[i] = bytes ? (float)(rng_next(r) % 256) : (float)rng_gauss(r);
	for (size_t i = 0; i < keylen; i++)
		key[i] = (char)('a' + rng_next(r) % 26);
	for (size_t i = 0; i < plen; i++)
		pay[i] = (uint8_t)rng_next(r);

	int kind = vf_record_kind(vec, dim);
	assert_int_equal(kind, bytes || !dim ? VF_VEC_U8 : VF_VEC_F32);
	size_t len = vf_record_size(dim, kind, keylen, plen);
	assert_int_equal(len, VF_RECORD_HDR + (size_t)dim * (bytes ? 1 : 4) + keylen + plen);
	uint8_t *buf = malloc(len + 1);
	assert_non_null(buf);
	uint8_t *p = buf + 1; /* values carry no alignment */
	vf_record_encode(p, seq, dim, kind, vec, key, keylen, plen ? pay : NULL, plen);

	vf_record rec;
	memset(&rec, 0, sizeof rec);
	assert_int_equal(vf_record_decode(p, len, &rec), 0);
	assert_true(rec.seq == seq);
	assert_int_equal(rec.dim, dim);
	assert_int_equal(rec.keylen, keylen);
	assert_int_equal(rec.plen, plen);
	assert_int_equal(rec.kind, kind);
	if (dim) { /* the same floats, bit for bit, either way */
		float *back = malloc(sizeof(float) * dim);
		assert_non_null(back);
		vf_record_floats(&rec, back);
		assert_memory_equal(back, vec, (size_t)dim * 4);
		free(back);
	}
	if (keylen)
		assert_memory_equal(rec.key, key, keylen);
	if (plen)
		assert_memory_equal(rec.payload, pay, plen);
	/* the decoded parts lie inside the value */
	assert_true((const uint8_t *)rec.vec >= p &&
		    (const uint8_t *)rec.vec + (size_t)dim * (bytes ? 1 : 4) <= p + len);
	assert_true((const uint8_t *)rec.key >= p &&
		    (const uint8_t *)rec.key + keylen <= p + len);
	assert_true((const uint8_t *)rec.payload >= p &&
		    (const uint8_t *)rec.payload + plen <= p + len);

	/* every single flipped bit (every 61st in the large ones) */
	size_t step = len > 8192 ? 61 : 1;
	for (size_t bit = 0; bit < len * 8; bit += step) {
		p[bit / 8] ^= (uint8_t)(1u << (bit % 8));
		if (vf_record_decode(p, len, &rec) != -EIO) {
			print_message("record dim %u key %zu payload %zu: bit %zu flipped, not detected\n",
				      dim, keylen, plen, bit);
			fail();
		}
		p[bit / 8] ^= (uint8_t)(1u << (bit % 8));
	}
	assert_int_equal(vf_record_decode(p, len, &rec), 0);
	/* any truncation, and a trailing byte, are malformed */
	for (size_t l = 0; l < len; l++)
		if (vf_record_decode(p, l, &rec) != -EIO) {
			print_message("record dim %u key %zu payload %zu: cut to %zu of %zu bytes decoded\n",
				      dim, keylen, plen, l, len);
			fail();
		}
	buf = realloc(buf, len + 2);
	assert_non_null(buf);
	p = buf + 1;
	p[len] = 0;
	assert_int_equal(vf_record_decode(p, len + 1, &rec), -EIO);
	free(buf);
	free(vec);
	free(key);
	free(pay);
}

static void check_record(uint64_t seq, uint32_t dim, size_t keylen, size_t plen, rng *r)
{
	check_record_as(seq, dim, keylen, plen, 0, r);
	check_record_as(seq, dim, keylen, plen, 1, r);
}

/* Which vectors a record holds in bytes: exactly those whose numbers are
 * all integers 0..255, every bit of each float given back. */
static void test_record_kind(void **state)
{
	(void)state;
	static const float in_bytes[] = {0.0f, 1.0f, 2.0f, 3.0f, 7.0f, 100.0f, 127.0f,
					 128.0f, 200.0f, 254.0f, 255.0f};
	for (size_t i = 0; i < sizeof in_bytes / sizeof *in_bytes; i++)
		assert_int_equal(vf_record_kind(&in_bytes[i], 1), VF_VEC_U8);
	assert_int_equal(vf_record_kind(in_bytes, sizeof in_bytes / sizeof *in_bytes),
			 VF_VEC_U8);
	float not[] = {-0.0f, -1.0f, 256.0f, 0.5f, 1.5f, 254.5f, 1e-45f, 1e-30f,
		       65536.0f, 1e30f, 255.00002f, INFINITY, -INFINITY, NAN};
	for (size_t i = 0; i < sizeof not / sizeof *not; i++) {
		float v[3] = {1.0f, not[i], 2.0f};
		if (vf_record_kind(v, 3) != VF_VEC_F32) {
			print_message("%g held in a byte\n", (double)not[i]);
			fail();
		}
	}
	/* every float from 0 to 256 in steps of 1/8: bytes exactly for the
	 * integers, and those give back the same bits */
	for (int i = 0; i <= 256 * 8; i++) {
		float f = (float)i / 8;
		int want = i % 8 == 0 && i < 256 * 8 ? VF_VEC_U8 : VF_VEC_F32;
		assert_int_equal(vf_record_kind(&f, 1), want);
		if (want == VF_VEC_U8) {
			uint8_t buf[VF_RECORD_HDR + 1];
			vf_record rec;
			float back;
			vf_record_encode(buf, 1, 1, VF_VEC_U8, &f, NULL, 0, NULL, 0);
			assert_int_equal(vf_record_decode(buf, sizeof buf, &rec), 0);
			vf_record_floats(&rec, &back);
			assert_memory_equal(&back, &f, 4);
		}
	}
	/* a flag the format does not define is malformed */
	float one = 1.0f;
	uint8_t buf[VF_RECORD_HDR + 4];
	vf_record rec;
	vf_record_encode(buf, 1, 1, VF_VEC_F32, &one, NULL, 0, NULL, 0);
	assert_int_equal(vf_record_decode(buf, sizeof buf, &rec), 0);
	buf[14] |= 2;
	assert_int_equal(vf_record_fields(buf, sizeof buf, &rec), -EIO);
}

static void test_record_codec(void **state)
{
	(void)state;
	rng r = { .s = 51 };
	check_record(0, 1, 1, 0, &r);
	check_record(1, 16, 255, 0, &r);             /* empty payload, longest key */
	check_record(UINT64_MAX, 128, 255, 1000, &r);
	check_record(12345, 4096, 3, 64 << 10, &r);  /* largest dim and payload */
	check_record(7, 0, 0, 0, &r);
	for (int t = 0; t < 30; t++)
		check_record(rng_next(&r), (uint32_t)(rng_next(&r) % 300),
			     (size_t)(rng_next(&r) % 256), (size_t)(rng_next(&r) % 3000), &r);
}

/* ------------------------------------------------------------ 5. map growth */

#define VAL_SIZE (64u << 10)
#define NVALS 320u   /* 20 MiB */
#define PER_TXN 32u

static void fill_value(uint8_t *v, uint32_t i)
{
	rng r = { .s = 0x5eed0000u + i };
	for (size_t j = 0; j < VAL_SIZE; j += 8) {
		uint64_t x = rng_next(&r);
		memcpy(v + j, &x, 8);
	}
}

typedef struct put_batch {
	vf_store *s;
	uint32_t first, n;
	uint8_t *val;
	int calls;
} put_batch;

static int put_values(vf_txn *txn, void *arg)
{
	put_batch *pb = arg;
	pb->calls++;
	for (uint32_t i = pb->first; i < pb->first + pb->n; i++) {
		fill_value(pb->val, i);
		vf_key64 k = vf_key_u64(i);
		int rc = vf_put(txn, pb->s->records, k.b, sizeof k.b, pb->val, VAL_SIZE, 0);
		if (rc)
			return rc;
	}
	return 0;
}

/* Values 0..n-1 that are not as written (asserts nothing: also used in
 * a child process). */
static size_t read_values_n(vf_store *s, uint32_t n)
{
	uint8_t *want = malloc(VAL_SIZE);
	vf_txn *txn = NULL;
	if (!want || vf_read_begin(s, &txn)) {
		free(want);
		return 1;
	}
	size_t bad = 0;
	for (uint32_t i = 0; i < n; i++) {
		vf_key64 k = vf_key_u64(i);
		vf_val v;
		int rc = vf_get(txn, s->records, k.b, sizeof k.b, &v);
		fill_value(want, i);
		if (rc != 0 || v.len != VAL_SIZE || memcmp(v.data, want, VAL_SIZE) != 0) {
			if (bad++ < 5)
				print_message("value %u: rc %d size %zu\n", i, rc,
					      rc ? (size_t)0 : v.len);
		}
	}
	vf_read_end(s, txn);
	free(want);
	return bad;
}

static size_t read_values(vf_store *s)
{
	return read_values_n(s, NVALS);
}

/* Blocks stored in LMDB have every column on a 64-byte line in memory
 * (the PASS2 records of a 4-bit, 128-d block are then one line each). */
typedef struct block_put {
	vf_store *s;
	const uint8_t *buf[3];
	size_t len[3];
} block_put;

static int put_blocks(vf_txn *txn, void *arg)
{
	block_put *bp = arg;
	for (int i = 0; i < 3; i++) {
		vf_key64 k = vf_key_u64((uint64_t)i);
		int rc = vf_put(txn, bp->s->postings, k.b, sizeof k.b, bp->buf[i], bp->len[i], 0);
		if (rc)
			return rc;
	}
	return 0;
}

/* A thread that holds a read transaction until told to end it. */
typedef struct holder {
	vf_store *s;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int state; /* 1: holding, 2: told to end */
} holder;

static void holder_set(holder *h, int st)
{
	pthread_mutex_lock(&h->mu);
	h->state = st;
	pthread_cond_broadcast(&h->cv);
	pthread_mutex_unlock(&h->mu);
}

static void holder_wait(holder *h, int st)
{
	pthread_mutex_lock(&h->mu);
	while (h->state < st)
		pthread_cond_wait(&h->cv, &h->mu);
	pthread_mutex_unlock(&h->mu);
}

static void *hold_read(void *arg)
{
	holder *h = arg;
	vf_txn *txn;
	if (vf_read_begin(h->s, &txn) != 0)
		return NULL;
	holder_set(h, 1);
	holder_wait(h, 2);
	vf_read_end(h->s, txn);
	return NULL;
}

/* The location hint table is sized for the records of today (four slots a
 * record, 4096 at least) and made larger, empty, once records fill more
 * than half of it; never by a thread inside a transaction. */
static void test_hint_table_grows(void **state)
{
	fixture *f = *state;
	char err[256] = "";
	vf_store *s;
	static const char rec[] = "a record";
	size_t len = 0;
	vf_txn *txn;
	assert_int_equal(vf_store_open(f->dir, 0, &s, err, sizeof err), 0);
	assert_int_equal(vf_hint_init(s, 100), 0);
	assert_int_equal(s->hint_mask + 1, 4096);

	assert_int_equal(vf_read_begin(s, &txn), 0);
	for (uint64_t id = 0; id < 1000; id++)
		vf_hint_put(s, txn, id, rec, sizeof rec, 0);
	assert_ptr_equal(vf_hint_get(s, NULL, 7, &len, NULL), rec);
	assert_int_equal(len, sizeof rec);
	/* inside a transaction: left as it is */
	assert_int_equal(vf_hint_reserve(s, 5000), 0);
	assert_int_equal(s->hint_mask + 1, 4096);
	vf_read_end(s, txn);

	/* half full at most: left as it is */
	assert_int_equal(vf_hint_reserve(s, 2048), 0);
	assert_int_equal(s->hint_mask + 1, 4096);
	assert_ptr_equal(vf_hint_get(s, NULL, 7, &len, NULL), rec);
	/* more: four slots a record, empty */
	assert_int_equal(vf_hint_reserve(s, 2049), 0);
	assert_int_equal(s->hint_mask + 1, 16384);
	assert_null(vf_hint_get(s, NULL, 7, &len, NULL));
	assert_int_equal(vf_read_begin(s, &txn), 0);
	for (uint64_t id = 0; id < 8000; id++)
		vf_hint_put(s, txn, id, rec + id % 4, sizeof rec - id % 4, 0);
	size_t found = 0;
	for (uint64_t id = 0; id < 8000; id++) {
		const void *p = vf_hint_get(s, NULL, id, &len, NULL);
		if (p) {
			assert_ptr_equal(p, rec + id % 4);
			assert_int_equal(len, sizeof rec - id % 4);
			found++;
		}
	}
	vf_read_end(s, txn);
	assert_true(found > 7000); /* two ways: few collisions at half load */

	/* while another thread holds a transaction: no wait, no change; the
	 * size wanted is taken when the map next grows */
	holder h = {.s = s, .mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};
	pthread_t th;
	assert_int_equal(pthread_create(&th, NULL, hold_read, &h), 0);
	holder_wait(&h, 1);
	assert_int_equal(vf_hint_reserve(s, 8193), 0);
	assert_int_equal(s->hint_mask + 1, 16384);
	assert_int_equal(s->hint_want, 65536);
	holder_set(&h, 2);
	pthread_join(th, NULL);
	assert_int_equal(vf_store_grow(s, 0), 0);
	assert_int_equal(s->hint_mask + 1, 65536);
	assert_int_equal(s->hint_want, 0);
	/* at most 4M slots */
	assert_int_equal(vf_hint_reserve(s, (uint64_t)1 << 30), 0);
	assert_int_equal(s->hint_mask + 1, (uint64_t)1 << 22);
	vf_store_close(s);
}

static void test_block_columns_aligned(void **state)
{
	fixture *f = *state;
	char err[256] = "";
	vf_store *s;
	assert_int_equal(vf_store_open(f->dir, 0, &s, err, sizeof err), 0);
	static const uint32_t ns[3] = { 40, 500, 4096 }, pdims[3] = { 128, 128, 832 },
			      bitss[3] = { 4, 4, 3 };
	codeset cs[3];
	block_put bp = { .s = s };
	rng r = { .s = 21 };
	for (int i = 0; i < 3; i++) {
		codes_make(&cs[i], &r, ns[i], pdims[i] - 3, pdims[i], bitss[i]);
		bp.buf[i] = block_make(&cs[i], &bp.len[i]);
	}
	assert_int_equal(vf_write(s, put_blocks, &bp), 0);
	vf_txn *txn;
	assert_int_equal(vf_read_begin(s, &txn), 0);
	for (int i = 0; i < 3; i++) {
		vf_key64 k = vf_key_u64((uint64_t)i);
		vf_val v;
		vf_block b;
		assert_int_equal(vf_get(txn, s->postings, k.b, sizeof k.b, &v), 0);
		assert_int_equal(vf_block_open(v.data, v.len, &b), 0);
		check_block(&b, &cs[i]);
		for (int c = 0; c < VF_NCOL; c++)
			if ((uintptr_t)b.col[c] % 64)
				print_message("block %d column %d at %lu mod 64\n", i, c,
					      (unsigned long)((uintptr_t)b.col[c] % 64));
		for (int c = 0; c < VF_NCOL; c++)
			assert_int_equal((uintptr_t)b.col[c] % 64, 0);
	}
	vf_read_end(s, txn);
	for (int i = 0; i < 3; i++) {
		free((void *)bp.buf[i]);
		codes_free(&cs[i]);
	}
	vf_store_close(s);
}

/* Writeback ahead of a long commit (writeback.h): through the io seam, on
 * LMDB's descriptor, only while a write has lasted after_ms, every
 * every_ms until it ends; a failure of it changes nothing. */
static int wb_calls, wb_fd = -2, wb_fail;
static int wb_sync_range(int fd)
{
	__atomic_add_fetch(&wb_calls, 1, __ATOMIC_SEQ_CST);
	__atomic_store_n(&wb_fd, fd, __ATOMIC_SEQ_CST);
	return wb_fail ? -EIO : 0;
}

typedef struct slow_put {
	put_batch pb;
	unsigned sleep_ms;
} slow_put;

static int put_values_slowly(vf_txn *txn, void *arg)
{
	slow_put *sp = arg;
	int rc = put_values(txn, &sp->pb);
	usleep(sp->sleep_ms * 1000);
	return rc;
}

static void wb_set(vf_store *s, uint32_t after_ms, uint32_t every_ms)
{
	pthread_mutex_lock(&s->wb.mu);
	s->wb.after_ms = after_ms;
	s->wb.every_ms = every_ms;
	pthread_cond_signal(&s->wb.cv); /* a thread waiting for the old times */
	pthread_mutex_unlock(&s->wb.mu);
}

static void test_writeback_ahead(void **state)
{
	fixture *f = *state;
	char err[256] = "";
	vf_store *s = NULL;
	vf_io_ops.sync_range = wb_sync_range;
	wb_calls = 0;
	wb_fail = 0;
	assert_int_equal(vf_store_open(f->dir, 0, &s, err, sizeof err), 0);
	slow_put sp = {{s, 0, 4, malloc(VAL_SIZE), 0}, 0};
	assert_non_null(sp.pb.val);

	/* a write shorter than after_ms: none */
	wb_set(s, 5000, 10);
	assert_int_equal(vf_write(s, put_values_slowly, &sp), 0);
	assert_int_equal(__atomic_load_n(&wb_calls, __ATOMIC_SEQ_CST), 0);

	/* one of 300 ms, after 20 ms every 10 ms: at least a few (a loaded
	 * machine may run the thread late), on LMDB's descriptor */
	wb_set(s, 20, 10);
	sp.pb.first = 4;
	sp.sleep_ms = 300;
	assert_int_equal(vf_write(s, put_values_slowly, &sp), 0);
	int during = __atomic_load_n(&wb_calls, __ATOMIC_SEQ_CST);
	print_message("writebacks started during a write of 300 ms: %d\n", during);
	assert_true(during >= 3);
	struct stat fst, dst; /* the store's data file */
	char path[4200];
	snprintf(path, sizeof path, "%s/data.mdb", f->dir);
	assert_int_equal(fstat(__atomic_load_n(&wb_fd, __ATOMIC_SEQ_CST), &fst), 0);
	assert_int_equal(stat(path, &dst), 0);
	assert_true(fst.st_ino == dst.st_ino && fst.st_dev == dst.st_dev);
	assert_true(__atomic_load_n(&s->wb.rounds, __ATOMIC_SEQ_CST) >= 3);
	/* and none once it has ended */
	usleep(100 * 1000);
	assert_int_equal(__atomic_load_n(&wb_calls, __ATOMIC_SEQ_CST), during);

	/* failing, it is not counted and the write commits all the same */
	wb_fail = 1;
	uint64_t rounds = __atomic_load_n(&s->wb.rounds, __ATOMIC_SEQ_CST);
	sp.pb.first = 8;
	assert_int_equal(vf_write(s, put_values_slowly, &sp), 0);
	assert_true(__atomic_load_n(&wb_calls, __ATOMIC_SEQ_CST) > during);
	assert_int_equal(__atomic_load_n(&s->wb.rounds, __ATOMIC_SEQ_CST), rounds);
	vf_store_close(s);
	vf_io_reset();

	assert_int_equal(vf_store_open(f->dir, 0, &s, err, sizeof err), 0);
	vf_txn *txn = NULL;
	assert_int_equal(vf_read_begin(s, &txn), 0);
	for (uint32_t i = 0; i < 13; i++) {
		vf_key64 k = vf_key_u64(i);
		vf_val v;
		int rc = vf_get(txn, s->records, k.b, sizeof k.b, &v);
		if (i == 12) { /* three writes of four values */
			assert_int_equal(rc, -ENOENT);
			break;
		}
		assert_int_equal(rc, 0);
		fill_value(sp.pb.val, i);
		assert_int_equal(v.len, VAL_SIZE);
		assert_memory_equal(v.data, sp.pb.val, VAL_SIZE);
	}
	vf_read_end(s, txn);
	vf_store_close(s);
	free(sp.pb.val);
}

static void test_map_growth(void **state)
{
	fixture *f = *state;
	char err[256] = "";
	vf_store *s = NULL;
	int rc = vf_store_open(f->dir, (size_t)1 << 20, &s, err, sizeof err);
	if (rc)
		print_message("vf_store_open: %d %s\n", rc, err);
	assert_int_equal(rc, 0);
	assert_non_null(s);
	assert_int_equal(s->mapsize, (size_t)1 << 20);

	/* exclusive while open */
	vf_store *s2 = NULL;
	err[0] = 0;
	rc = vf_store_open(f->dir, 0, &s2, err, sizeof err);
	if (rc == 0)
		vf_store_close(s2);
	assert_int_equal(rc, -EBUSY);
	assert_true(err[0] != '\0');

	put_batch pb = { s, 0, 0, malloc(VAL_SIZE), 0 };
	assert_non_null(pb.val);
	int txns = 0;
	for (uint32_t first = 0; first < NVALS; first += PER_TXN) {
		pb.first = first;
		pb.n = NVALS - first < PER_TXN ? NVALS - first : PER_TXN;
		rc = vf_write(s, put_values, &pb);
		if (rc)
			print_message("vf_write (values %u..): %d, map %zu\n", first, rc,
				      s->mapsize);
		assert_int_equal(rc, 0);
		txns++;
	}
	print_message("%u values of %u KiB in %d transactions (%d runs), map 1 MiB -> %zu MiB\n",
		      NVALS, VAL_SIZE >> 10, txns, pb.calls, s->mapsize >> 20);
	/* the map had to grow, so some transactions were run again, each
	 * counted */
	assert_true(s->mapsize >= (size_t)NVALS * VAL_SIZE);
	assert_true(pb.calls > txns);
	assert_int_equal(vf_store_writes_redone(s), (uint64_t)(pb.calls - txns));
	assert_true(vf_store_bytes(s) >= (uint64_t)NVALS * VAL_SIZE);
	assert_int_equal(read_values(s), 0);
	free(pb.val);
	vf_store_close(s);

	s = NULL;
	rc = vf_store_open(f->dir, 0, &s, err, sizeof err);
	if (rc)
		print_message("reopen: %d %s\n", rc, err);
	assert_int_equal(rc, 0);
	assert_true(s->mapsize >= (size_t)NVALS * VAL_SIZE);
	assert_int_equal(read_values(s), 0);
	s2 = NULL;
	rc = vf_store_open(f->dir, 0, &s2, NULL, 0);
	if (rc == 0)
		vf_store_close(s2);
	assert_int_equal(rc, -EBUSY);
	vf_store_close(s);

	/* a thread holding a read transaction cannot grow the map: -ENOSPC,
	 * and the write goes through once it is released */
	char sub[PATH_MAX];
	snprintf(sub, sizeof sub, "%s/small", f->dir);
	assert_int_equal(vf_store_open(sub, (size_t)1 << 20, &s, err, sizeof err), 0);
	vf_txn *rt = NULL;
	assert_int_equal(vf_read_begin(s, &rt), 0);
	put_batch big = { s, 0, 24, malloc(VAL_SIZE), 0 }; /* 1.5 MiB */
	assert_non_null(big.val);
	assert_int_equal(vf_write(s, put_values, &big), -ENOSPC);
	assert_int_equal(s->mapsize, (size_t)1 << 20);
	/* nor can it ask for room ahead (that would wait for its own read) */
	assert_int_equal(vf_store_reserve(s, (uint64_t)4 << 20), -EDEADLK);
	assert_int_equal(s->mapsize, (size_t)1 << 20);
	vf_read_end(s, rt);
	assert_int_equal(vf_store_reserve(s, (uint64_t)4 << 20), 0);
	assert_true(s->mapsize >= ((size_t)4 << 20));
	assert_int_equal(vf_write(s, put_values, &big), 0);
	assert_true(s->mapsize > ((size_t)1 << 20));
	vf_store_close(s);

	/* a read transaction held on another store does not stop this one's
	 * map from growing */
	vf_store *other = NULL;
	snprintf(sub, sizeof sub, "%s/other", f->dir);
	assert_int_equal(vf_store_open(sub, (size_t)1 << 20, &other, err, sizeof err), 0);
	snprintf(sub, sizeof sub, "%s/small2", f->dir);
	assert_int_equal(vf_store_open(sub, (size_t)1 << 20, &s, err, sizeof err), 0);
	assert_int_equal(vf_read_begin(other, &rt), 0);
	big.s = s;
	assert_int_equal(vf_write(s, put_values, &big), 0);
	assert_true(s->mapsize > ((size_t)1 << 20));
	vf_read_end(other, rt);
	free(big.val);
	vf_store_close(s);
	vf_store_close(other);
}

/* The address space the process has mapped (VmSize), in bytes. */
static size_t vm_size(void)
{
	FILE *f = fopen("/proc/self/status", "r");
	char line[256];
	size_t kb = 0;
	while (f && fgets(line, sizeof line, f))
		if (sscanf(line, "VmSize: %zu kB", &kb) == 1)
			break;
	if (f)
		fclose(f);
	return kb << 10;
}

static int limit_as(size_t more)
{
	struct rlimit rl = { vm_size() + more, vm_size() + more };
	return setrlimit(RLIMIT_AS, &rl);
}

/* In a child process under an address-space limit: the exit status says
 * which step failed (0: all went well). */
static int map_limited_child(const char *dir)
{
	char sub[PATH_MAX], err[256] = "";
	vf_store *s = NULL;
	/* a store opens with a map that fits a limit of 1 GiB above what the
	 * process has mapped */
	if (limit_as((size_t)1 << 30))
		return 1;
	snprintf(sub, sizeof sub, "%s/limited", dir);
	if (vf_store_open(sub, 0, &s, err, sizeof err))
		return 2;
	if (s->mapsize > ((size_t)1 << 30))
		return 3;
	put_batch pb = { s, 0, 8, malloc(VAL_SIZE), 0 };
	if (!pb.val || vf_write(s, put_values, &pb) || read_values_n(s, 8))
		return 4;
	vf_store_close(s);
	s = NULL;
	if (vf_store_open(sub, 0, &s, err, sizeof err) || read_values_n(s, 8))
		return 5;
	vf_store_close(s);

	/* a map of 256 MiB cannot double under 100 MiB more: it grows by
	 * what fits */
	snprintf(sub, sizeof sub, "%s/grow", dir);
	if (vf_store_open(sub, (size_t)256 << 20, &s, err, sizeof err))
		return 6;
	if (limit_as((size_t)100 << 20))
		return 7;
	if (vf_store_grow(s, 0) != 0)
		return 8;
	if (s->mapsize <= ((size_t)256 << 20) || s->mapsize > ((size_t)356 << 20))
		return 9;
	/* with no room at all it fails, and the store still serves; the map
	 * has not moved: the location hints and the map's epoch are kept */
	static const char rec[] = "a record";
	size_t len = 0;
	vf_txn *txn;
	if (vf_hint_init(s, 100) || vf_read_begin(s, &txn))
		return 13;
	vf_hint_put(s, txn, 7, rec, sizeof rec, 0);
	vf_read_end(s, txn);
	uint64_t epoch = s->map_epoch;
	if (limit_as((size_t)8 << 20))
		return 10;
	size_t had = s->mapsize;
	if (vf_store_grow(s, 0) != -ENOMEM || s->mapsize != had)
		return 11;
	if (s->map_epoch != epoch || vf_hint_get(s, NULL, 7, &len, NULL) != rec)
		return 14;
	pb.s = s;
	if (vf_write(s, put_values, &pb) || read_values_n(s, 8))
		return 12;
	vf_store_close(s);
	free(pb.val);
	return 0;
}

static void test_map_address_limit(void **state)
{
	fixture *f = *state;
	fflush(NULL);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0)
		_exit(map_limited_child(f->dir));
	int st = 0;
	assert_int_equal(waitpid(pid, &st, 0), pid);
	if (!WIFEXITED(st) || WEXITSTATUS(st))
		print_message("the child under a limited address space: %s %d\n",
			      WIFEXITED(st) ? "exit" : "signal",
			      WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
	assert_true(WIFEXITED(st));
	assert_int_equal(WEXITSTATUS(st), 0);
}

/* ------------------------------------------------------------ 6. assignment */

#define NIDS 5000u
#define GEN 9u

typedef struct assign_job {
	vf_store *s;
	uint64_t gen;
	const uint32_t *map;
	uint64_t n;
	/* checks */
	const uint64_t *ids;
	const uint32_t *want;
	size_t nids;
	size_t bad;
	int rc;
} assign_job;

static int assign_write(vf_txn *txn, void *arg)
{
	assign_job *j = arg;
	return vf_assign_write(txn, j->s, j->gen, j->map, j->n);
}

/* Reads (no assertions inside the transaction): counts mismatches. */
static int assign_read(vf_txn *txn, void *arg)
{
	assign_job *j = arg;
	j->bad = 0;
	j->rc = 0;
	for (size_t i = 0; i < j->nids; i++) {
		uint32_t c = 0x12345678u;
		int rc = vf_assign_get(txn, j->s, j->gen, j->ids[i], &c);
		if (rc) {
			j->rc = rc;
			return 0;
		}
		if (c != j->want[i] && j->bad++ < 5)
			print_message("id %llu: cluster %u, want %u\n",
				      (unsigned long long)j->ids[i], c, j->want[i]);
	}
	return 0;
}

typedef struct assign_sets {
	vf_store *s;
	const uint64_t *ids;
	const uint32_t *cl;
	size_t n;
	uint64_t gen;
} assign_sets;

static int assign_set_all(vf_txn *txn, void *arg)
{
	assign_sets *a = arg;
	for (size_t i = 0; i < a->n; i++) {
		int rc = vf_assign_set(txn, a->s, a->gen, a->ids[i], a->cl[i]);
		if (rc)
			return rc;
	}
	return 0;
}

static void expect_assign(vf_store *s, uint64_t gen, const uint64_t *ids,
			  const uint32_t *want, size_t n)
{
	assign_job j = { .s = s, .gen = gen, .ids = ids, .want = want, .nids = n };
	assert_int_equal(vf_write(s, assign_read, &j), 0);
	assert_int_equal(j.rc, 0);
	assert_int_equal(j.bad, 0);
}

static void test_assignment_map(void **state)
{
	fixture *f = *state;
	char err[256] = "";
	vf_store *s = NULL;
	int rc = vf_store_open(f->dir, 0, &s, err, sizeof err);
	if (rc)
		print_message("vf_store_open: %d %s\n", rc, err);
	assert_int_equal(rc, 0);

	rng r = { .s = 61 };
	uint32_t *map = malloc(NIDS * sizeof *map);
	uint64_t *ids = malloc((NIDS + 100) * sizeof *ids);
	uint32_t *want = malloc((NIDS + 100) * sizeof *want);
	assert_non_null(map);
	assert_non_null(ids);
	assert_non_null(want);
	for (uint32_t i = 0; i < NIDS; i++) {
		uint64_t x = rng_next(&r);
		map[i] = x % 10 == 0 ? VF_ASSIGN_NONE
			: x % 10 == 1 ? (uint32_t)(x >> 32) % 0xFFFFFFFEu /* large */
			: (uint32_t)(x >> 32) % 300;
	}
	/* a whole chunk with no postings */
	for (uint32_t i = 2 * VF_ASSIGN_CHUNK; i < 3 * VF_ASSIGN_CHUNK; i++)
		map[i] = VF_ASSIGN_NONE;
	assign_job j = { .s = s, .gen = GEN, .map = map, .n = NIDS };
	assert_int_equal(vf_write(s, assign_write, &j), 0);

	size_t n = 0;
	for (uint32_t i = 0; i < NIDS; i++) {
		ids[n] = i;
		want[n++] = map[i];
	}
	/* ids never written: past the end, in the last chunk and far away */
	const uint64_t never[] = { NIDS, NIDS + 1, 5 * VF_ASSIGN_CHUNK - 1,
				   5 * VF_ASSIGN_CHUNK, 123456789, UINT64_MAX / 2 };
	for (size_t i = 0; i < sizeof never / sizeof *never; i++) {
		ids[n] = never[i];
		want[n++] = VF_ASSIGN_NONE;
	}
	expect_assign(s, GEN, ids, want, n);

	/* other generations have no map */
	uint32_t *nones = malloc(n * sizeof *nones);
	assert_non_null(nones);
	for (size_t i = 0; i < n; i++)
		nones[i] = VF_ASSIGN_NONE;
	expect_assign(s, GEN + 1, ids, nones, n);
	expect_assign(s, GEN - 1, ids, nones, n);

	/* single updates: existing ids, the empty chunk, past the end */
	const uint64_t set_ids[] = { 0, 1, 1023, 1024, 2 * VF_ASSIGN_CHUNK + 5,
				     NIDS - 1, NIDS, 100000 };
	const uint32_t set_cl[] = { 77, VF_ASSIGN_NONE, 0, 4000000000u, 12, 13, 14, 15 };
	const size_t NSET = sizeof set_ids / sizeof *set_ids;
	assign_sets as = { s, set_ids, set_cl, NSET, GEN };
	assert_int_equal(vf_write(s, assign_set_all, &as), 0);
	for (size_t i = 0; i < NSET; i++)
		for (size_t k = 0; k < n; k++)
			if (ids[k] == set_ids[i])
				want[k] = set_cl[i];
	for (size_t i = 0; i < NSET; i++)
		if (set_ids[i] >= NIDS) {
			ids[n] = set_ids[i];
			want[n++] = set_cl[i];
		}
	/* neighbours of the updated ids are unchanged */
	expect_assign(s, GEN, ids, want, n);

	/* setting a value it already has changes nothing */
	assign_sets again = { s, set_ids, set_cl, 3, GEN };
	assert_int_equal(vf_write(s, assign_set_all, &again), 0);
	expect_assign(s, GEN, ids, want, n);

	/* it persists */
	vf_store_close(s);
	s = NULL;
	assert_int_equal(vf_store_open(f->dir, 0, &s, err, sizeof err), 0);
	expect_assign(s, GEN, ids, want, n);
	expect_assign(s, GEN + 1, ids, nones, NIDS);
	vf_store_close(s);
	free(nones);
	free(map);
	free(ids);
	free(want);
}

/* Records of new ids: appended while each id sorts after the last, put in
 * place when one does not; every one reads back. */
static const uint64_t add_ids[] = { 10, 11, 500, 3, 501, 7, 11 };

static int records_add(vf_txn *txn, void *arg)
{
	vf_store *s = arg;
	for (size_t i = 0; i < sizeof add_ids / sizeof *add_ids; i++) {
		uint64_t v = add_ids[i] * 3 + i;
		int rc = vf_records_add(txn, s, add_ids[i], &v, sizeof v);
		if (rc)
			return rc;
	}
	return 0;
}

typedef struct records_seen {
	vf_store *s;
	uint64_t got[8];
	int rc;
} records_seen;

static int records_read(vf_txn *txn, void *arg)
{
	records_seen *r = arg;
	for (size_t i = 0; i < sizeof add_ids / sizeof *add_ids && !r->rc; i++) {
		vf_val v;
		r->rc = vf_records_get(txn, r->s, add_ids[i], &v);
		if (!r->rc && v.len == 8)
			memcpy(&r->got[i], v.data, 8);
	}
	return 0;
}

static void test_records_add(void **state)
{
	fixture *f = *state;
	char err[256] = "";
	vf_store *s = NULL;
	assert_int_equal(vf_store_open(f->dir, 0, &s, err, sizeof err), 0);
	assert_int_equal(vf_write(s, records_add, s), 0);
	records_seen r = { .s = s };
	vf_txn *txn;
	assert_int_equal(vf_read_begin(s, &txn), 0);
	records_read(txn, &r);
	vf_read_end(s, txn);
	assert_int_equal(r.rc, 0);
	for (size_t i = 0; i < sizeof add_ids / sizeof *add_ids; i++) {
		/* id 11 twice: the second value replaced the first */
		size_t last = add_ids[i] == 11 ? 6 : i;
		assert_int_equal(r.got[i], add_ids[i] * 3 + last);
	}
	vf_store_close(s);
}

/* A walk that waits for pages (a cursor stepping forward, VF_NEXT) asks
 * for the map ahead of itself; it looks at its faults at most every 64
 * steps, whether its values lie in the map in file order or on a write
 * transaction's own pages, anywhere in memory (a look at each of their
 * jumps cost an ingest one getrusage() every four rows).  The faults and
 * the read-ahead go through io.h's table: here every look "waited". */
#define WALK_ROWS 6000
static size_t walk_looks, walk_asked;
static uint64_t walk_faults(void)
{
	return ++walk_looks; /* more than at the last look: it waited */
}
static void walk_willneed(void *addr, size_t len)
{
	(void)addr;
	(void)len;
	walk_asked++;
}

/* Steps of a walk of the records family in txn (VF_FIRST, then VF_NEXT). */
static size_t walk_records(vf_txn *txn, vf_store *s)
{
	vf_cursor *cur;
	vf_val k, d;
	size_t steps = 0;
	assert_int_equal(vf_cursor_open(txn, s->records, &cur), 0);
	for (int rc = vf_cursor_get(cur, &k, &d, VF_FIRST); rc == 0;
	     rc = vf_cursor_get(cur, &k, &d, VF_NEXT))
		steps++;
	vf_cursor_close(cur);
	return steps;
}

static int walk_write(vf_txn *txn, void *arg)
{
	vf_store *s = arg;
	uint8_t val[400];
	for (uint64_t id = 1; id <= WALK_ROWS; id++) {
		memset(val, (int)id, sizeof val);
		int rc = vf_records_add(txn, s, id, val, sizeof val);
		if (rc)
			return rc;
	}
	return 0;
}

/* Rewrite every other record (its pages become the transaction's own, in
 * memory), then walk them all inside the write. */
static int walk_in_write(vf_txn *txn, void *arg)
{
	vf_store *s = arg;
	uint8_t val[400] = {7};
	for (uint64_t id = 1; id <= WALK_ROWS; id += 2) {
		int rc = vf_records_put(txn, s, id, val, sizeof val);
		if (rc)
			return rc;
	}
	walk_looks = 0;
	assert_int_equal(walk_records(txn, s), WALK_ROWS);
	assert_true(walk_looks <= WALK_ROWS / 64 + 1);
	return 0;
}

static void test_walk_reads_ahead(void **state)
{
	fixture *f = *state;
	char err[256] = "";
	vf_store *s = NULL;
	assert_int_equal(vf_store_open(f->dir, 0, &s, err, sizeof err), 0);
	assert_int_equal(vf_write(s, walk_write, s), 0);
	vf_io_ops.major_faults = walk_faults;
	vf_io_ops.willneed = walk_willneed;
	vf_txn *txn;
	assert_int_equal(vf_read_begin(s, &txn), 0);
	walk_looks = walk_asked = 0;
	assert_int_equal(walk_records(txn, s), WALK_ROWS);
	vf_read_end(s, txn);
	/* 2.4 MB of values: read ahead more than once, looked at rarely */
	assert_true(walk_asked >= 2);
	assert_true(walk_looks >= 2 && walk_looks <= WALK_ROWS / 64 + 1);
	assert_int_equal(vf_write(s, walk_in_write, s), 0);
	vf_io_reset();
	vf_store_close(s);
}

/* A location hint is stable (inside a reader's snapshot, readable in
 * place) when it was seen in a read transaction and no write of the
 * records family began between that one and the reader's; never when seen
 * inside a write transaction, nor through a read-only handle. */
static int hint_write_record(vf_txn *txn, void *arg)
{
	uint64_t v = 42;
	return vf_records_put(txn, arg, 1, &v, sizeof v);
}

static int hint_write_other(vf_txn *txn, void *arg)
{
	vf_store *s = arg;
	return vf_put(txn, s->meta, "other", 5, "x", 1, 0);
}

typedef struct hint_in_write {
	vf_store *s;
	const void *place;
} hint_in_write;

static int hint_put_in_write(vf_txn *txn, void *arg)
{
	hint_in_write *w = arg;
	vf_hint_put(w->s, txn, 3, w->place, 8, 1);
	return 0;
}

/* What vf_hint_get() says of id's hint in txn's snapshot (it must be at
 * `want`). */
static int hint_state(vf_store *s, vf_txn *txn, uint64_t id, const void *want)
{
	vf_hint_view view;
	size_t len;
	int state = -1;
	vf_hint_view_of(s, txn, &view);
	const void *p = vf_hint_get(s, &view, id, &len, &state);
	assert_ptr_equal(p, want);
	assert_int_equal(len, 8);
	/* checked only with stable */
	assert_true(state == 0 || state == VF_HINT_STABLE ||
		    state == (VF_HINT_STABLE | VF_HINT_CHECKED));
	return state;
}

static void test_hint_stable(void **state)
{
	fixture *f = *state;
	char err[256] = "";
	vf_store *s;
	static const uint64_t place[4];
	vf_txn *r1, *r2, *r3;
	assert_int_equal(vf_store_open(f->dir, 0, &s, err, sizeof err), 0);
	assert_int_equal(vf_hint_init(s, 100), 0);
	assert_int_equal(vf_write(s, hint_write_record, s), 0);

	assert_int_equal(vf_read_begin(s, &r1), 0);
	vf_hint_put(s, r1, 1, &place[0], 8, 0);
	assert_int_equal(hint_state(s, r1, 1, &place[0]), VF_HINT_STABLE);
	/* a write of another family: still the same records */
	assert_int_equal(vf_write(s, hint_write_other, s), 0);
	assert_int_equal(vf_read_begin(s, &r2), 0);
	assert_true(vf_txn_id(r2) > vf_txn_id(r1));
	assert_int_equal(hint_state(s, r2, 1, &place[0]), VF_HINT_STABLE);
	/* checked by its put; not stable for an older reader than that put */
	vf_hint_put(s, r2, 2, &place[1], 8, 1);
	assert_int_equal(hint_state(s, r1, 2, &place[1]), 0);
	assert_int_equal(hint_state(s, r2, 2, &place[1]), VF_HINT_STABLE | VF_HINT_CHECKED);

	/* a write of the records family: hints seen before it are not stable
	 * for a reader after it, nor (conservatively) for those before */
	assert_int_equal(vf_write(s, hint_write_record, s), 0);
	assert_int_equal(vf_read_begin(s, &r3), 0);
	assert_int_equal(hint_state(s, r3, 1, &place[0]), 0);
	assert_int_equal(hint_state(s, r3, 2, &place[1]), 0);
	assert_int_equal(hint_state(s, r2, 2, &place[1]), 0);
	/* seen again after it: stable */
	vf_hint_put(s, r3, 1, &place[2], 8, 1);
	assert_int_equal(hint_state(s, r3, 1, &place[2]), VF_HINT_STABLE | VF_HINT_CHECKED);
	vf_read_end(s, r1);
	vf_read_end(s, r2);

	/* seen inside a write transaction (which could still be aborted):
	 * never stable, checked or not */
	hint_in_write w = {s, &place[3]};
	assert_int_equal(vf_write(s, hint_put_in_write, &w), 0);
	assert_int_equal(hint_state(s, r3, 3, &place[3]), 0);
	vf_read_end(s, r3);
	assert_int_equal(vf_read_begin(s, &r3), 0);
	assert_int_equal(hint_state(s, r3, 3, &place[3]), 0);
	vf_read_end(s, r3);
	vf_store_close(s);

	/* through a read-only handle another process may write: never */
	assert_int_equal(vf_store_open_readonly(f->dir, &s, err, sizeof err), 0);
	assert_int_equal(vf_hint_init(s, 100), 0);
	assert_int_equal(vf_read_begin(s, &r1), 0);
	vf_hint_put(s, r1, 1, &place[0], 8, 1);
	assert_int_equal(hint_state(s, r1, 1, &place[0]), 0);
	vf_read_end(s, r1);
	vf_store_close(s);
}

/* Puts of one id from two snapshots race with gets: a get never pairs the
 * transaction one put saw with the place the other put: a stable hint
 * always has the place seen in the reader's own snapshot. */
typedef struct hint_racer {
	vf_store *s;
	vf_txn *txn;
	const uint64_t *place;
	int *stop; /* accessed atomically */
} hint_racer;

static void *hint_race_put(void *arg)
{
	hint_racer *r = arg;
	while (!__atomic_load_n(r->stop, __ATOMIC_RELAXED))
		for (uint64_t id = 0; id < 2; id++)
			vf_hint_put(r->s, r->txn, id, &r->place[id], 8, 1);
	return NULL;
}

static void test_hint_put_races_get(void **state)
{
	fixture *f = *state;
	char err[256] = "";
	vf_store *s;
	static uint64_t old_place[2], new_place[2];
	vf_txn *old, *cur;
	int stop = 0;
	assert_int_equal(vf_store_open(f->dir, 0, &s, err, sizeof err), 0);
	assert_int_equal(vf_hint_init(s, 100), 0);
	assert_int_equal(vf_write(s, hint_write_record, s), 0);
	assert_int_equal(vf_read_begin(s, &old), 0);
	assert_int_equal(vf_write(s, hint_write_record, s), 0);
	assert_int_equal(vf_read_begin(s, &cur), 0);
	hint_racer a = {s, old, old_place, &stop}, b = {s, cur, new_place, &stop};
	pthread_t ta, tb;
	assert_int_equal(pthread_create(&ta, NULL, hint_race_put, &a), 0);
	assert_int_equal(pthread_create(&tb, NULL, hint_race_put, &b), 0);
	vf_hint_view view;
	vf_hint_view_of(s, cur, &view);
	size_t stable_seen = 0, bad = 0;
	/* two million gets, and on until one was stable (the putters may
	 * hold the CPUs for a while on a loaded machine), for 30 s at most */
	time_t until = time(NULL) + 30;
	for (long round = 0; round < 2000000 || (!stable_seen && (round % 65536 || time(NULL) < until));
	     round++) {
		uint64_t id = (uint64_t)round % 2;
		size_t len;
		int stable;
		const void *p = vf_hint_get(s, &view, id, &len, &stable);
		stable &= VF_HINT_STABLE;
		if (!p)
			continue;
		bad += p != &old_place[id] && p != &new_place[id];
		bad += len != 8;
		if (stable) {
			stable_seen++;
			bad += p != &new_place[id];
		}
	}
	__atomic_store_n(&stop, 1, __ATOMIC_RELAXED);
	pthread_join(ta, NULL);
	pthread_join(tb, NULL);
	print_message("%zu stable gets\n", stable_seen);
	assert_int_equal(bad, 0);
	assert_true(stable_seen > 0);
	vf_read_end(s, old);
	vf_read_end(s, cur);
	vf_store_close(s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_block_roundtrip),
		cmocka_unit_test(test_block_bad_lengths),
		cmocka_unit_test(test_block_huge_pdim),
		cmocka_unit_test(test_block_open_known),
		cmocka_unit_test(test_block_flips_detected),
		cmocka_unit_test(test_delta_roundtrip_and_flips),
		cmocka_unit_test(test_key_order),
		cmocka_unit_test(test_record_codec),
		cmocka_unit_test(test_record_kind),
		cmocka_unit_test_setup_teardown(test_map_growth, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_map_address_limit, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_block_columns_aligned, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_hint_table_grows, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_assignment_map, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_writeback_ahead, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_records_add, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_walk_reads_ahead, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_hint_stable, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_hint_put_races_get, fx_setup, fx_teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
