/*
 * tests/fuzz/fuzz_record.c - record values as read from the store
 * (layout/record.c): vf_record_decode on any bytes must reject them or
 * return fields within them.  The first input byte is the mode: bit 0 seal:
 * when the header's sizes add up to the value's length, the value is
 * encoded anew from its own fields (so its checksum holds) and must then
 * decode to those fields (its vector as the same floats, in bytes or in
 * float32 as flags bit 0 says).  The rest is the value, copied to a buffer of
 * its exact size.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_read.h"
#include "record.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Decode v[0..len) and read every byte of what it returns. */
static int decode(const uint8_t *v, size_t len, vf_record *r)
{
	int rc = vf_record_decode(v, len, r);
	if (rc == 0) {
		fz_read(r->vec, (size_t)r->dim * (r->kind == VF_VEC_U8 ? 1 : 4));
		fz_read(r->key, r->keylen);
		fz_read(r->payload, r->plen);
	}
	return rc;
}

/* Encode the fields v's header names, from v's own bytes; it must decode
 * to them. */
static void reseal(const uint8_t *v, size_t len)
{
	uint64_t seq;
	uint32_t dim, plen;
	uint16_t kl, flags;
	memcpy(&seq, v, 8);
	memcpy(&dim, v + 8, 4);
	memcpy(&kl, v + 12, 2);
	memcpy(&flags, v + 14, 2);
	memcpy(&plen, v + 16, 4);
	if (flags > VF_VEC_U8 || vf_record_size(dim, flags, kl, plen) != len)
		return;
	size_t vb = (size_t)dim * (flags == VF_VEC_U8 ? 1 : 4);
	float *vec = malloc((size_t)dim * 4 + 1);
	uint8_t *w = malloc(len);
	if (!vec || !w)
		abort();
	vf_record in = {.dim = dim, .kind = flags, .vec = v + VF_RECORD_HDR};
	vf_record_floats(&in, vec);
	const uint8_t *key = v + VF_RECORD_HDR + vb;
	vf_record_encode(w, seq, dim, flags, vec, (const char *)key, kl, key + kl, plen);
	vf_record r;
	if (decode(w, len, &r) || r.seq != seq || r.dim != dim || r.keylen != kl ||
	    r.plen != plen || r.kind != flags || memcmp(r.vec, v + VF_RECORD_HDR, vb) ||
	    memcmp(r.key, key, kl) || memcmp(r.payload, key + kl, plen))
		abort();
	free(w);
	free(vec);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	size_t len = size - 1;
	uint8_t *v = malloc(len ? len : 1);
	if (!v)
		return 0;
	memcpy(v, data + 1, len);
	vf_record r;
	decode(v, len, &r);
	if ((data[0] & 1) && len >= VF_RECORD_HDR)
		reseal(v, len);
	free(v);
	return 0;
}
