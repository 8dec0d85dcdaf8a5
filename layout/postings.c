/*
 * layout/postings.c - writing the postings family.
 */
#include "postings.h"

#include "keys.h"

int vf_posting_put(vf_txn *txn, vf_store *s, uint64_t gen, uint32_t c, uint8_t kind,
		   uint64_t sub, const void *data, size_t len)
{
	vf_postkey k = vf_post_key(gen, c, kind, sub);
	return vf_put(txn, s->postings, k.b, sizeof k.b, data, len, 0);
}
