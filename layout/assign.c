/*
 * layout/assign.c - the compressed assignment map.
 */
#include "assign.h"
#include "io.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <zstd.h>

#include "keys.h"

static int load_chunk(vf_txn *txn, vf_store *s, uint64_t gen, uint64_t chunk,
		      uint32_t *out)
{
	vf_genkey k = vf_gen_key(gen, VF_GK_ASSIGN, chunk);
	vf_val v;
	int rc = vf_get(txn, s->gens, k.b, sizeof k.b, &v);
	if (rc == -ENOENT) {
		memset(out, 0xFF, VF_ASSIGN_CHUNK * 4);
		return 0;
	}
	if (rc)
		return vf_store_err(rc);
	size_t got = ZSTD_decompress(out, VF_ASSIGN_CHUNK * 4, v.data, v.len);
	if (ZSTD_isError(got) || got != VF_ASSIGN_CHUNK * 4)
		return -EIO;
	return 0;
}

/* Under the write transaction: one writer at a time uses the store's
 * compressor, kept between transactions (made for each chunk, one cost an
 * allocation and a clearing of its tables each time). */
static int store_chunk(vf_txn *txn, vf_store *s, uint64_t gen, uint64_t chunk,
		       const uint32_t *map)
{
	uint8_t buf[ZSTD_COMPRESSBOUND(VF_ASSIGN_CHUNK * 4)];
	if (!s->assign_cc) {
		ZSTD_CCtx *cc = ZSTD_createCCtx();
		if (!cc)
			return -ENOMEM;
		if (ZSTD_isError(ZSTD_CCtx_setParameter(cc, ZSTD_c_compressionLevel, 3)) ||
		    ZSTD_isError(ZSTD_CCtx_setParameter(cc, ZSTD_c_checksumFlag, 1))) {
			ZSTD_freeCCtx(cc);
			return -EIO;
		}
		s->assign_cc = cc;
	}
	size_t n = ZSTD_compress2(s->assign_cc, buf, sizeof buf, map, VF_ASSIGN_CHUNK * 4);
	if (ZSTD_isError(n))
		return -EIO;
	vf_genkey k = vf_gen_key(gen, VF_GK_ASSIGN, chunk);
	return vf_put(txn, s->gens, k.b, sizeof k.b, buf, n, 0);
}

int vf_assign_get(vf_txn *txn, vf_store *s, uint64_t gen, uint64_t id,
		  uint32_t *cluster)
{
	uint32_t map[VF_ASSIGN_CHUNK];
	int rc = load_chunk(txn, s, gen, id / VF_ASSIGN_CHUNK, map);
	if (rc)
		return rc;
	*cluster = map[id % VF_ASSIGN_CHUNK];
	return 0;
}

int vf_assign_set(vf_txn *txn, vf_store *s, uint64_t gen, uint64_t id,
		  uint32_t cluster)
{
	uint32_t map[VF_ASSIGN_CHUNK];
	int rc = load_chunk(txn, s, gen, id / VF_ASSIGN_CHUNK, map);
	if (rc)
		return rc;
	if (map[id % VF_ASSIGN_CHUNK] == cluster)
		return 0;
	map[id % VF_ASSIGN_CHUNK] = cluster;
	return store_chunk(txn, s, gen, id / VF_ASSIGN_CHUNK, map);
}

struct vf_assign_chunk {
	uint64_t chunk; /* UINT64_MAX: empty slot */
	int dirty;
	uint32_t map[VF_ASSIGN_CHUNK];
};

void vf_assign_cache_init(vf_assign_cache *c, uint64_t gen)
{
	memset(c, 0, sizeof *c);
	c->gen = gen;
}

void vf_assign_cache_free(vf_assign_cache *c)
{
	free(c->slots);
	c->slots = NULL;
	c->cap = c->n = 0;
}

static struct vf_assign_chunk *cache_slot(struct vf_assign_chunk *slots, size_t cap,
					  uint64_t chunk)
{
	size_t i = (size_t)(chunk * 0x9e3779b97f4a7c15ULL >> 20) & (cap - 1);
	while (slots[i].chunk != UINT64_MAX && slots[i].chunk != chunk)
		i = (i + 1) & (cap - 1);
	return &slots[i];
}

static int cache_chunk(vf_assign_cache *c, vf_txn *txn, vf_store *s, uint64_t chunk,
		       struct vf_assign_chunk **out)
{
	if ((c->n + 1) * 2 > c->cap) {
		size_t cap = c->cap ? c->cap * 2 : 16;
		struct vf_assign_chunk *ns = vf_malloc(cap * sizeof *ns);
		if (!ns)
			return -ENOMEM;
		for (size_t i = 0; i < cap; i++)
			ns[i].chunk = UINT64_MAX;
		for (size_t i = 0; i < c->cap; i++)
			if (c->slots[i].chunk != UINT64_MAX)
				*cache_slot(ns, cap, c->slots[i].chunk) = c->slots[i];
		free(c->slots);
		c->slots = ns;
		c->cap = cap;
	}
	struct vf_assign_chunk *e = cache_slot(c->slots, c->cap, chunk);
	if (e->chunk == UINT64_MAX) {
		int rc = load_chunk(txn, s, c->gen, chunk, e->map);
		if (rc)
			return rc;
		e->chunk = chunk;
		e->dirty = 0;
		c->n++;
	}
	*out = e;
	return 0;
}

int vf_assign_cache_get(vf_assign_cache *c, vf_txn *txn, vf_store *s, uint64_t id,
			uint32_t *cluster)
{
	struct vf_assign_chunk *e;
	int rc = cache_chunk(c, txn, s, id / VF_ASSIGN_CHUNK, &e);
	if (rc == 0)
		*cluster = e->map[id % VF_ASSIGN_CHUNK];
	return rc;
}

int vf_assign_cache_set(vf_assign_cache *c, vf_txn *txn, vf_store *s, uint64_t id,
			uint32_t cluster)
{
	struct vf_assign_chunk *e;
	int rc = cache_chunk(c, txn, s, id / VF_ASSIGN_CHUNK, &e);
	if (rc == 0 && e->map[id % VF_ASSIGN_CHUNK] != cluster) {
		e->map[id % VF_ASSIGN_CHUNK] = cluster;
		e->dirty = 1;
	}
	return rc;
}

int vf_assign_cache_flush(vf_assign_cache *c, vf_txn *txn, vf_store *s)
{
	for (size_t i = 0; i < c->cap; i++) {
		struct vf_assign_chunk *e = &c->slots[i];
		if (e->chunk == UINT64_MAX || !e->dirty)
			continue;
		int rc = store_chunk(txn, s, c->gen, e->chunk, e->map);
		if (rc)
			return rc;
		e->dirty = 0;
	}
	return 0;
}

int vf_assign_write(vf_txn *txn, vf_store *s, uint64_t gen, const uint32_t *map,
		    uint64_t n)
{
	uint32_t chunk[VF_ASSIGN_CHUNK];
	for (uint64_t c = 0; c * VF_ASSIGN_CHUNK < n; c++) {
		uint64_t lo = c * VF_ASSIGN_CHUNK, cnt = n - lo;
		if (cnt > VF_ASSIGN_CHUNK)
			cnt = VF_ASSIGN_CHUNK;
		memset(chunk, 0xFF, sizeof chunk);
		memcpy(chunk, map + lo, cnt * 4);
		int all_none = 1;
		for (uint64_t i = 0; i < cnt && all_none; i++)
			all_none = chunk[i] == VF_ASSIGN_NONE;
		if (all_none)
			continue;
		int rc = store_chunk(txn, s, gen, c, chunk);
		if (rc)
			return rc;
	}
	return 0;
}
