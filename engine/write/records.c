/*
 * engine/write/records.c - reading records: one by key, and the keys in order.
 */
#include "handle.h"

#include <errno.h>
#include <string.h>

#include "record.h"

static int lookup_id(vf_txn *txn, vf_store *s, const char *key, size_t keylen,
		     uint64_t *id)
{
	if (keylen == 0 || keylen > VECFS_KEY_MAX)
		return -ENOENT;
	return vf_store_err(vf_keys_get(txn, s, key, keylen, id));
}

int vecfs_get(vecfs *v, const char *key, size_t keylen, float *vec, uint32_t cap,
	      uint32_t *dim, void *payload, size_t pcap, size_t *plen)
{
	vf_txn *txn;
	uint64_t id = 0;
	int rc = vf_read_begin(v->store, &txn);
	if (rc)
		return rc;
	if ((rc = lookup_id(txn, v->store, key, keylen, &id)) == 0) {
		vf_val d;
		vf_record r;
		rc = vf_store_err(vf_records_get(txn, v->store, id, &d));
		if (rc == -ENOENT)
			rc = -EIO; /* key without record */
		if (rc == 0)
			rc = vf_record_decode(d.data, d.len, &r);
		if (rc == 0) {
			*dim = r.dim;
			if (vec) { /* the first cap of them */
				vf_record part = r;
				part.dim = r.dim < cap ? r.dim : cap;
				vf_record_floats(&part, vec);
			}
			if (plen)
				*plen = r.plen;
			if (payload && pcap)
				memcpy(payload, r.payload, r.plen < pcap ? r.plen : pcap);
		}
	}
	vf_read_end(v->store, txn);
	return rc;
}

int vecfs_keys(vecfs *v, const char *after, size_t afterlen, size_t max,
	       vecfs_key_fn fn, void *arg)
{
	vf_txn *txn;
	vf_cursor *cur;
	vf_val k = {afterlen, (void *)after}, d;
	int rc = vf_read_begin(v->store, &txn);
	if (rc)
		return rc;
	if ((rc = vf_cursor_open(txn, v->store->keys, &cur))) {
		vf_read_end(v->store, txn);
		return vf_store_err(rc);
	}
	if (after && afterlen) {
		rc = vf_cursor_get(cur, &k, &d, VF_SEEK);
		if (rc == 0 && k.len == afterlen && !memcmp(k.data, after, afterlen))
			rc = vf_cursor_get(cur, &k, &d, VF_NEXT);
	} else {
		rc = vf_cursor_get(cur, &k, &d, VF_FIRST);
	}
	size_t n = 0;
	int ret = 0;
	for (; rc == 0 && n < max; rc = vf_cursor_get(cur, &k, &d, VF_NEXT), n++)
		if ((ret = fn(arg, k.data, k.len)))
			break;
	vf_cursor_close(cur);
	vf_read_end(v->store, txn);
	if (ret)
		return ret;
	return rc == -ENOENT || rc == 0 ? 0 : vf_store_err(rc);
}
