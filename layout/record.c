/*
 * layout/record.c - record value codec.
 */
#include "record.h"

#include <errno.h>
#include <string.h>

size_t vf_record_size(uint32_t dim, size_t keylen, size_t plen)
{
	return VF_RECORD_HDR + (size_t)dim * 4 + keylen + plen;
}

void vf_record_encode(uint8_t *buf, uint64_t seq, uint32_t dim, const float *vec,
		      const char *key, size_t keylen, const void *payload,
		      size_t plen)
{
	uint16_t kl = (uint16_t)keylen, flags = 0;
	uint32_t pl = (uint32_t)plen, pad = 0;
	memcpy(buf, &seq, 8);
	memcpy(buf + 8, &dim, 4);
	memcpy(buf + 12, &kl, 2);
	memcpy(buf + 14, &flags, 2);
	memcpy(buf + 16, &pl, 4);
	memcpy(buf + 20, &pad, 4);
	memcpy(buf + VF_RECORD_HDR, vec, (size_t)dim * 4);
	memcpy(buf + VF_RECORD_HDR + (size_t)dim * 4, key, keylen);
	if (plen)
		memcpy(buf + VF_RECORD_HDR + (size_t)dim * 4 + keylen, payload, plen);
}

int vf_record_decode(const void *data, size_t len, vf_record *out)
{
	const uint8_t *p = data;
	uint16_t kl;
	if (len < VF_RECORD_HDR)
		return -EIO;
	memcpy(&out->seq, p, 8);
	memcpy(&out->dim, p + 8, 4);
	memcpy(&kl, p + 12, 2);
	memcpy(&out->plen, p + 16, 4);
	out->keylen = kl;
	if (vf_record_size(out->dim, kl, out->plen) != len)
		return -EIO;
	out->vec = p + VF_RECORD_HDR;
	out->key = (const char *)p + VF_RECORD_HDR + (size_t)out->dim * 4;
	out->payload = out->key + kl;
	return 0;
}
