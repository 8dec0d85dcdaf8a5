/*
 * layout/meta.c - the small values of a store, loaded and saved: the meta
 * family (configuration, counters, active generation), the change log,
 * generation metadata and centroids, cluster manifests; and dropping a
 * generation's keys.
 */
#include "io.h"
#include "meta.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "checksum.h"
#include "keys.h"

/* A value of exactly len bytes: -ENOENT when missing, -EIO when of
 * another size. */
static int load_fixed(vf_txn *txn, vf_dbi dbi, const void *k, size_t kl, void *out,
		      size_t len)
{
	vf_val v;
	int rc = vf_get(txn, dbi, k, kl, &v);
	if (rc)
		return vf_store_err(rc);
	if (v.len != len)
		return -EIO;
	memcpy(out, v.data, len);
	return 0;
}

int vf_load_meta(vf_txn *txn, vf_store *s, const char *key, void *out, size_t len)
{
	return load_fixed(txn, s->meta, key, strlen(key), out, len);
}

int vf_save_config(vf_txn *txn, vf_store *s, const void *data, size_t len)
{
	return vf_put(txn, s->meta, VF_META_CONFIG, strlen(VF_META_CONFIG), data, len, 0);
}

int vf_load_config_bytes(vf_txn *txn, vf_store *s, void *buf, size_t cap, size_t *len)
{
	vf_val v;
	int rc = vf_get(txn, s->meta, VF_META_CONFIG, strlen(VF_META_CONFIG), &v);
	if (rc)
		return vf_store_err(rc);
	if (v.len > cap)
		return -EIO;
	memcpy(buf, v.data, v.len);
	*len = v.len;
	return 0;
}

int vf_load_counters(vf_txn *txn, vf_store *s, vf_counters *c)
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
	vf_txn *txn;
	int rc = vf_read_begin(s, &txn);
	if (rc)
		return rc;
	rc = vf_load_counters(txn, s, c);
	vf_read_end(s, txn);
	return rc;
}

int vf_save_counters(vf_txn *txn, vf_store *s, const vf_counters *c)
{
	return vf_put(txn, s->meta, VF_META_COUNTERS, strlen(VF_META_COUNTERS), c,
		      sizeof *c, 0);
}

uint64_t vf_load_active(vf_txn *txn, vf_store *s)
{
	uint64_t g = 0;
	if (vf_load_meta(txn, s, VF_META_ACTIVE, &g, sizeof g))
		return 0;
	return g;
}

int vf_save_active(vf_txn *txn, vf_store *s, uint64_t gen)
{
	return vf_put(txn, s->meta, VF_META_ACTIVE, strlen(VF_META_ACTIVE), &gen,
		      sizeof gen, 0);
}

/* A generation's meta value, as written now or before `flags` existed. */
static int genmeta_decode(const vf_val *v, vf_genmeta *m)
{
	if (v->len != sizeof *m && v->len != VF_GENMETA_V1_SIZE)
		return -EIO;
	memset(m, 0, sizeof *m);
	memcpy(m, v->data, v->len);
	return 0;
}

int vf_load_genmeta(vf_txn *txn, vf_store *s, uint64_t gen, vf_genmeta *m)
{
	vf_genkey k = vf_gen_key(gen, VF_GK_META, 0);
	vf_val v;
	int rc = vf_get(txn, s->gens, k.b, sizeof k.b, &v);
	if (rc)
		return vf_store_err(rc);
	return genmeta_decode(&v, m);
}

int vf_save_genmeta(vf_txn *txn, vf_store *s, const vf_genmeta *m)
{
	vf_genkey k = vf_gen_key(m->id, VF_GK_META, 0);
	return vf_put(txn, s->gens, k.b, sizeof k.b, m, sizeof *m, 0);
}

int vf_load_manifest(vf_txn *txn, vf_store *s, uint64_t gen, uint32_t cluster,
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

int vf_save_manifest(vf_txn *txn, vf_store *s, uint64_t gen, uint32_t cluster,
		     const vf_manifest *m)
{
	vf_postkey k = vf_post_key(gen, cluster, VF_PK_MANIFEST, 0);
	return vf_put(txn, s->postings, k.b, sizeof k.b, m, sizeof *m, 0);
}

int vf_drop_generation_keys(vf_txn *txn, vf_store *s, uint64_t gen)
{
	uint8_t p[8];
	int rc;
	vf_be64(p, gen);
	if ((rc = vf_drop_prefix(txn, s->postings, p, 8)))
		return rc;
	return vf_drop_prefix(txn, s->gens, p, 8);
}


/* A value of generation gen's family `kind` followed by its checksum. */
static int save_checked(vf_txn *txn, vf_store *s, uint64_t gen, uint8_t kind, const void *p,
			size_t len)
{
	uint8_t *buf = vf_malloc(len + 8);
	if (!buf)
		return -ENOMEM;
	memcpy(buf, p, len);
	uint64_t sum = vf_checksum(buf, len);
	memcpy(buf + len, &sum, 8);
	vf_genkey k = vf_gen_key(gen, kind, 0);
	int rc = vf_put(txn, s->gens, k.b, sizeof k.b, buf, len + 8, 0);
	free(buf);
	return rc;
}

static int load_checked(vf_txn *txn, vf_store *s, uint64_t gen, uint8_t kind, void *p,
			size_t len)
{
	vf_genkey k = vf_gen_key(gen, kind, 0);
	vf_val v;
	uint64_t sum;
	int rc = vf_get(txn, s->gens, k.b, sizeof k.b, &v);
	if (rc)
		return rc;
	if (v.len != len + 8)
		return -EIO;
	memcpy(&sum, (uint8_t *)v.data + len, 8);
	if (vf_checksum(v.data, len) != sum)
		return -EIO;
	memcpy(p, v.data, len);
	return 0;
}

int vf_save_centroids(vf_txn *txn, vf_store *s, uint64_t gen, const float *c, size_t n)
{
	return save_checked(txn, s, gen, VF_GK_CENTROIDS, c, n * sizeof *c);
}

int vf_load_centroids(vf_txn *txn, vf_store *s, uint64_t gen, float *c, size_t n)
{
	return load_checked(txn, s, gen, VF_GK_CENTROIDS, c, n * sizeof *c);
}

int vf_save_center(vf_txn *txn, vf_store *s, uint64_t gen, const float *c, size_t dim)
{
	return save_checked(txn, s, gen, VF_GK_CENTER, c, dim * sizeof *c);
}

int vf_load_center(vf_txn *txn, vf_store *s, uint64_t gen, float *c, size_t dim)
{
	return load_checked(txn, s, gen, VF_GK_CENTER, c, dim * sizeof *c);
}

int vf_save_calib(vf_txn *txn, vf_store *s, uint64_t gen, const void *c, size_t len)
{
	return save_checked(txn, s, gen, VF_GK_CALIB, c, len);
}

int vf_load_calib(vf_txn *txn, vf_store *s, uint64_t gen, void *c, size_t len)
{
	return load_checked(txn, s, gen, VF_GK_CALIB, c, len);
}

int vf_change_put(vf_txn *txn, vf_store *s, uint64_t seq, const vf_change *c)
{
	vf_key64 k = vf_key_u64(seq);
	return vf_put(txn, s->changes, k.b, sizeof k.b, c, sizeof *c, VF_APPEND);
}

int vf_changes_walk(vf_cursor *cur, int op, uint64_t from, uint64_t *seq, vf_change *c)
{
	vf_key64 k = vf_key_u64(from);
	vf_val key = {sizeof k.b, k.b}, val;
	int rc = vf_cursor_get(cur, &key, &val, op);
	if (rc)
		return rc;
	if (key.len != sizeof k.b || val.len != sizeof *c)
		return -EIO;
	*seq = vf_rd_be64(key.data);
	memcpy(c, val.data, sizeof *c);
	return 0;
}

int vf_genmeta_walk(vf_cursor *cur, int op, vf_genmeta *m)
{
	vf_val k = {0, NULL}, d;
	int rc;
	for (rc = vf_cursor_get(cur, &k, &d, op); rc == 0;
	     rc = vf_cursor_get(cur, &k, &d, VF_NEXT)) {
		if (k.len == sizeof(vf_genkey) && ((uint8_t *)k.data)[8] == VF_GK_META &&
		    genmeta_decode(&d, m) == 0)
			return 0;
	}
	return rc;
}

int vf_list_gens(vf_txn *txn, vf_store *s, uint64_t *ids, size_t cap, size_t *n)
{
	vf_cursor *cur;
	vf_genmeta m;
	size_t cnt = 0;
	int rc = vf_cursor_open(txn, s->gens, &cur);
	if (rc)
		return vf_store_err(rc);
	for (rc = vf_genmeta_walk(cur, VF_FIRST, &m); rc == 0;
	     rc = vf_genmeta_walk(cur, VF_NEXT, &m)) {
		if (cnt < cap)
			ids[cnt] = m.id;
		cnt++;
	}
	vf_cursor_close(cur);
	*n = cnt;
	return rc == -ENOENT ? 0 : vf_store_err(rc);
}
