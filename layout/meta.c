/*
 * layout/meta.c - the meta key family (configuration, counters, active
 * generation), generation metadata and cluster manifests: loaded and saved
 * as fixed-size values.
 */
#include "meta.h"

#include <errno.h>
#include <string.h>

#include "keys.h"

/* A value of exactly len bytes: -ENOENT when missing, -EIO when of
 * another size. */
static int load_fixed(MDB_txn *txn, MDB_dbi dbi, const void *k, size_t kl, void *out,
		      size_t len)
{
	MDB_val v;
	int rc = vf_get(txn, dbi, k, kl, &v);
	if (rc)
		return vf_mdb_err(rc);
	if (v.mv_size != len)
		return -EIO;
	memcpy(out, v.mv_data, len);
	return 0;
}

int vf_load_meta(MDB_txn *txn, vf_store *s, const char *key, void *out, size_t len)
{
	return load_fixed(txn, s->meta, key, strlen(key), out, len);
}

int vf_save_config(MDB_txn *txn, vf_store *s, const vf_stored_config *c)
{
	return vf_put(txn, s->meta, VF_META_CONFIG, strlen(VF_META_CONFIG), c, sizeof *c, 0);
}

int vf_load_counters(MDB_txn *txn, vf_store *s, vf_counters *c)
{
	int rc = vf_load_meta(txn, s, VF_META_COUNTERS, c, sizeof *c);
	if (rc == -ENOENT) {
		memset(c, 0, sizeof *c);
		c->next_gen = 1;
		return 0;
	}
	return rc;
}

int vf_read_counters(vf_store *s, vf_counters *c)
{
	MDB_txn *txn;
	int rc = vf_read_begin(s, &txn);
	if (rc)
		return rc;
	rc = vf_load_counters(txn, s, c);
	vf_read_end(s, txn);
	return rc;
}

int vf_save_counters(MDB_txn *txn, vf_store *s, const vf_counters *c)
{
	return vf_put(txn, s->meta, VF_META_COUNTERS, strlen(VF_META_COUNTERS), c,
		      sizeof *c, 0);
}

uint64_t vf_load_active(MDB_txn *txn, vf_store *s)
{
	uint64_t g = 0;
	if (vf_load_meta(txn, s, VF_META_ACTIVE, &g, sizeof g))
		return 0;
	return g;
}

int vf_save_active(MDB_txn *txn, vf_store *s, uint64_t gen)
{
	return vf_put(txn, s->meta, VF_META_ACTIVE, strlen(VF_META_ACTIVE), &gen,
		      sizeof gen, 0);
}

int vf_load_genmeta(MDB_txn *txn, vf_store *s, uint64_t gen, vf_genmeta *m)
{
	vf_genkey k = vf_gen_key(gen, VF_GK_META, 0);
	return load_fixed(txn, s->gens, k.b, sizeof k.b, m, sizeof *m);
}

int vf_save_genmeta(MDB_txn *txn, vf_store *s, const vf_genmeta *m)
{
	vf_genkey k = vf_gen_key(m->id, VF_GK_META, 0);
	return vf_put(txn, s->gens, k.b, sizeof k.b, m, sizeof *m, 0);
}

int vf_load_manifest(MDB_txn *txn, vf_store *s, uint64_t gen, uint32_t cluster,
		     vf_manifest *m)
{
	vf_postkey k = vf_post_key(gen, cluster, VF_PK_MANIFEST, 0);
	int rc = load_fixed(txn, s->postings, k.b, sizeof k.b, m, sizeof *m);
	if (rc == -ENOENT) {
		memset(m, 0, sizeof *m);
		return 0;
	}
	return rc;
}

int vf_save_manifest(MDB_txn *txn, vf_store *s, uint64_t gen, uint32_t cluster,
		     const vf_manifest *m)
{
	vf_postkey k = vf_post_key(gen, cluster, VF_PK_MANIFEST, 0);
	return vf_put(txn, s->postings, k.b, sizeof k.b, m, sizeof *m, 0);
}

static int drop_range(MDB_txn *txn, MDB_dbi dbi, const uint8_t *prefix, size_t plen)
{
	MDB_cursor *cur;
	MDB_val k = {plen, (void *)prefix}, d;
	int rc = mdb_cursor_open(txn, dbi, &cur);
	if (rc)
		return rc;
	rc = mdb_cursor_get(cur, &k, &d, MDB_SET_RANGE);
	while (rc == 0 && k.mv_size >= plen && !memcmp(k.mv_data, prefix, plen)) {
		if ((rc = mdb_cursor_del(cur, 0)))
			break;
		rc = mdb_cursor_get(cur, &k, &d, MDB_GET_CURRENT);
		if (rc == MDB_NOTFOUND || rc == EINVAL)
			rc = mdb_cursor_get(cur, &k, &d, MDB_NEXT);
		/* after a delete the cursor points at the next item */
	}
	mdb_cursor_close(cur);
	return rc == MDB_NOTFOUND ? 0 : rc;
}

int vf_drop_generation_keys(MDB_txn *txn, vf_store *s, uint64_t gen)
{
	uint8_t p[8];
	int rc;
	vf_be64(p, gen);
	if ((rc = drop_range(txn, s->postings, p, 8)))
		return rc;
	return drop_range(txn, s->gens, p, 8);
}

int vf_list_gens(MDB_txn *txn, vf_store *s, uint64_t *ids, size_t cap, size_t *n)
{
	MDB_cursor *cur;
	MDB_val k, d;
	size_t cnt = 0;
	int rc = mdb_cursor_open(txn, s->gens, &cur);
	if (rc)
		return vf_mdb_err(rc);
	for (rc = mdb_cursor_get(cur, &k, &d, MDB_FIRST); rc == 0;
	     rc = mdb_cursor_get(cur, &k, &d, MDB_NEXT)) {
		const uint8_t *kb = k.mv_data;
		if (k.mv_size != 17 || kb[8] != VF_GK_META)
			continue;
		if (cnt < cap)
			ids[cnt] = vf_rd_be64(kb);
		cnt++;
	}
	mdb_cursor_close(cur);
	*n = cnt;
	return rc == MDB_NOTFOUND ? 0 : vf_mdb_err(rc);
}
