/*
 * layout/record.c - the record value codec, and the records and keys
 * families.
 */
#include "record.h"

#include <errno.h>
#include <string.h>

#include "checksum.h"
#include "keys.h"

/* XXH3 of the value with the sum field (bytes 20..24) left out, low 32 bits. */
static uint32_t record_sum(const uint8_t *p, size_t len)
{
	uint64_t a = vf_checksum(p, 20), b = vf_checksum(p + VF_RECORD_HDR, len - VF_RECORD_HDR);
	return (uint32_t)(a ^ (b * 0x9E3779B97F4A7C15ULL >> 17));
}

static size_t vec_bytes(uint32_t dim, int kind)
{
	return (size_t)dim * (kind == VF_VEC_U8 ? 1 : 4);
}

int vf_record_kind(const float *vec, uint32_t dim)
{
	/* by the bits: an integer 0..255 is +0 or 2^e * m with e <= 7 and m's
	 * bits below the point zero (so -0, NaN and fractions stay float32) */
	for (uint32_t i = 0; i < dim; i++) {
		uint32_t b;
		memcpy(&b, &vec[i], 4);
		if (b == 0)
			continue;
		uint32_t e = b >> 23; /* sign and biased exponent */
		if (e < 127 || e > 134 || (b & ((1u << (23 - (e - 127))) - 1)))
			return VF_VEC_F32;
	}
	return VF_VEC_U8;
}

size_t vf_record_size(uint32_t dim, int kind, size_t keylen, size_t plen)
{
	return VF_RECORD_HDR + vec_bytes(dim, kind) + keylen + plen;
}

void vf_record_encode(uint8_t *buf, uint64_t seq, uint32_t dim, int kind, const float *vec,
		      const char *key, size_t keylen, const void *payload,
		      size_t plen)
{
	uint16_t kl = (uint16_t)keylen, flags = kind == VF_VEC_U8 ? VF_VEC_U8 : 0;
	uint32_t pl = (uint32_t)plen, sum;
	size_t vb = vec_bytes(dim, flags);
	memcpy(buf, &seq, 8);
	memcpy(buf + 8, &dim, 4);
	memcpy(buf + 12, &kl, 2);
	memcpy(buf + 14, &flags, 2);
	memcpy(buf + 16, &pl, 4);
	if (flags == VF_VEC_U8)
		for (uint32_t i = 0; i < dim; i++)
			buf[VF_RECORD_HDR + i] = (uint8_t)vec[i];
	else
		memcpy(buf + VF_RECORD_HDR, vec, vb);
	if (keylen)
		memcpy(buf + VF_RECORD_HDR + vb, key, keylen);
	if (plen)
		memcpy(buf + VF_RECORD_HDR + vb + keylen, payload, plen);
	sum = record_sum(buf, vf_record_size(dim, flags, keylen, plen));
	memcpy(buf + 20, &sum, 4);
}

void vf_record_floats(const vf_record *r, float *out)
{
	if (r->kind != VF_VEC_U8) {
		memcpy(out, r->vec, sizeof(float) * r->dim);
		return;
	}
	/* (the search's hot paths use the l2sq_u8 and u8_floats kernels instead) */
	const uint8_t *v = r->vec;
	for (uint32_t i = 0; i < r->dim; i++)
		out[i] = v[i];
}

int vf_record_fields(const void *data, size_t len, vf_record *out)
{
	const uint8_t *p = data;
	uint16_t kl, flags;
	if (len < VF_RECORD_HDR)
		return -EIO;
	memcpy(&out->seq, p, 8);
	memcpy(&out->dim, p + 8, 4);
	memcpy(&kl, p + 12, 2);
	memcpy(&flags, p + 14, 2);
	memcpy(&out->plen, p + 16, 4);
	out->keylen = kl;
	out->key = NULL;
	out->kind = flags & VF_VEC_U8;
	if (flags & ~VF_VEC_U8 || vf_record_size(out->dim, out->kind, kl, out->plen) != len)
		return -EIO;
	out->vec = p + VF_RECORD_HDR;
	out->key = (const char *)p + VF_RECORD_HDR + vec_bytes(out->dim, out->kind);
	out->payload = out->key + kl;
	return 0;
}

int vf_record_decode(const void *data, size_t len, vf_record *out)
{
	uint32_t sum;
	int rc = vf_record_fields(data, len, out);
	if (rc)
		return rc;
	memcpy(&sum, (const uint8_t *)data + 20, 4);
	return record_sum(data, len) == sum ? 0 : -EIO;
}

int vf_records_get(vf_txn *txn, vf_store *s, uint64_t id, vf_val *out)
{
	vf_key64 k = vf_key_u64(id);
	return vf_get(txn, s->records, k.b, sizeof k.b, out);
}

int vf_records_put(vf_txn *txn, vf_store *s, uint64_t id, const void *data, size_t len)
{
	vf_key64 k = vf_key_u64(id);
	vf_records_writing(s, txn);
	return vf_put(txn, s->records, k.b, sizeof k.b, data, len, 0);
}

int vf_records_add(vf_txn *txn, vf_store *s, uint64_t id, const void *data, size_t len)
{
	vf_key64 k = vf_key_u64(id);
	vf_records_writing(s, txn);
	int rc = vf_put(txn, s->records, k.b, sizeof k.b, data, len, VF_APPEND);
	if (rc && vf_store_err(rc) == -EEXIST) /* not after the last: in place */
		rc = vf_put(txn, s->records, k.b, sizeof k.b, data, len, 0);
	return rc;
}

int vf_records_del(vf_txn *txn, vf_store *s, uint64_t id)
{
	vf_key64 k = vf_key_u64(id);
	vf_records_writing(s, txn);
	return vf_del(txn, s->records, k.b, sizeof k.b);
}

int vf_keys_get(vf_txn *txn, vf_store *s, const void *key, size_t keylen, uint64_t *id)
{
	vf_val v;
	int rc = vf_get(txn, s->keys, key, keylen, &v);
	if (rc)
		return rc;
	if (v.len != sizeof *id)
		return -EIO;
	memcpy(id, v.data, sizeof *id);
	return 0;
}

int vf_keys_put(vf_txn *txn, vf_store *s, const void *key, size_t keylen, uint64_t id)
{
	return vf_put(txn, s->keys, key, keylen, &id, sizeof id, 0);
}

int vf_keys_claim(vf_txn *txn, vf_store *s, const void *key, size_t keylen, uint64_t *id)
{
	vf_val old;
	int rc = vf_put_new(txn, s->keys, key, keylen, id, sizeof *id, &old);
	if (rc != -EEXIST)
		return rc;
	if (old.len != sizeof *id)
		return -EIO;
	memcpy(id, old.data, sizeof *id);
	return -EEXIST;
}

int vf_keys_del(vf_txn *txn, vf_store *s, const void *key, size_t keylen)
{
	return vf_del(txn, s->keys, key, keylen);
}
