/*
 * engine/write/salvage.c - repairing a store whose values fail their checksums:
 * damaged records are removed as deletes are (their keys reported lost),
 * key entries are re-made from intact records, a generation with a
 * damaged posting value is dropped (its rows are scanned exactly until the
 * next build), and postings that disagree with their records are posted
 * again from the records.
 */
#include "attrs.h"
#include "handle.h"
#include "write.h"
#include "io.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "gen/gen.h"
#include "keys.h"
#include "query/query.h"
#include "record.h"
#include "maint/maint.h"

/* One key entry to remove: its bytes, and whether its record is lost. */
typedef struct bad_key {
	uint32_t off, len;
	int lost;
} bad_key;

typedef struct salvage_job {
	vecfs *v;
	vecfs_salvage_info info;
	uint64_t *ids;          /* damaged records removed */
	size_t nids, capids;
	bad_key *bad;           /* key entries removed */
	size_t nbad, capbad;
	uint8_t *keybuf;        /* their bytes */
	size_t keylen, keycap;
	uint64_t nkeys;         /* key entries found */
	uint64_t gens[64];      /* generations dropped */
	size_t ngens;
	char *err;
	size_t errlen;
} salvage_job;

/* Does every posting value of generation m pass its checksums? */
static int gen_damaged(vf_txn *txn, vf_store *s, const vf_genmeta *m, int *bad)
{
	vf_cursor *cur;
	vf_val k, d;
	uint8_t p[8];
	vf_be64(p, m->id);
	*bad = 0;
	int rc = vf_cursor_open(txn, s->postings, &cur);
	if (rc)
		return rc;
	for (rc = vf_cursor_prefix(cur, p, 8, &k, &d, VF_SEEK); rc == 0 && !*bad;
	     rc = vf_cursor_prefix(cur, p, 8, &k, &d, VF_NEXT)) {
		uint8_t kind = vf_postkey_kind(k.data);
		if (kind == VF_PK_TOMB) {
			*bad = d.len != 8;
		} else if (kind == VF_PK_BLOCK) {
			vf_block b;
			if (vf_block_open(d.data, d.len, &b)) {
				*bad = 1;
				continue;
			}
			for (int c = 0; c < VF_NCOL && !*bad; c++)
				*bad = vf_block_check(NULL, &b, c) != 0;
			for (uint32_t i = 0; i < b.n && !*bad; i++) {
				uint32_t kl;
				*bad = vf_block_key(&b, i, &kl) == NULL;
			}
		} else if (kind == VF_PK_DELTA) {
			vf_code c;
			*bad = vf_delta_open(d.data, d.len, m->dim, m->pdim, m->bits, &c) != 0;
		} else if (kind == VF_PK_MANIFEST) {
			*bad = d.len != sizeof(vf_manifest);
		}
	}
	vf_cursor_close(cur);
	return rc == -ENOENT ? 0 : rc;
}

/* Drop the generations with a damaged posting value (the active one too:
 * then no generation is active and every row is scanned exactly). */
static int drop_gens(vf_txn *txn, salvage_job *j)
{
	vf_store *s = j->v->store;
	uint64_t ids[1024];
	size_t n;
	int rc = vf_list_gens(txn, s, ids, 1024, &n);
	if (rc)
		return rc;
	uint64_t active = vf_load_active(txn, s);
	for (size_t i = 0; i < n && i < 1024; i++) {
		vf_genmeta m;
		int bad;
		if ((rc = vf_load_genmeta(txn, s, ids[i], &m)))
			return rc;
		if (m.state != VECFS_GEN_READY)
			continue;
		if ((rc = gen_damaged(txn, s, &m, &bad)))
			return rc;
		if (!bad || j->ngens == sizeof j->gens / sizeof j->gens[0])
			continue;
		if (ids[i] == active && (rc = vf_save_active(txn, s, 0)))
			return rc;
		if ((rc = vf_drop_generation_keys(txn, s, ids[i])))
			return rc;
		j->gens[j->ngens++] = ids[i];
	}
	return 0;
}

/* Key entries whose record is missing, damaged or of another key. */
static int find_bad_keys(vf_txn *txn, salvage_job *j)
{
	vf_store *s = j->v->store;
	vf_cursor *cur;
	vf_val k, d;
	int rc = vf_cursor_open(txn, s->keys, &cur);
	if (rc)
		return rc;
	for (rc = vf_cursor_get(cur, &k, &d, VF_FIRST); rc == 0;
	     rc = vf_cursor_get(cur, &k, &d, VF_NEXT)) {
		uint64_t id;
		vf_val rv;
		vf_record r;
		int lost = 1, ok = 0;
		j->nkeys++;
		if (d.len == 8) {
			memcpy(&id, d.data, 8);
			int got = vf_records_get(txn, s, id, &rv);
			if (got && got != -ENOENT) {
				rc = got;
				break;
			}
			if (!got && vf_record_decode(rv.data, rv.len, &r) == 0) {
				ok = r.keylen == k.len && !memcmp(r.key, k.data, k.len);
				lost = 0; /* an intact record of another key */
			}
		}
		if (ok)
			continue;
		if ((rc = VF_GROW(j->bad, j->nbad, j->capbad, 256)) ||
		    (rc = vf_bytes_reserve(&j->keybuf, &j->keycap, j->keylen + k.len)))
			break;
		j->bad[j->nbad++] = (bad_key){(uint32_t)j->keylen, (uint32_t)k.len, lost};
		memcpy(j->keybuf + j->keylen, k.data, k.len);
		j->keylen += k.len;
	}
	vf_cursor_close(cur);
	return rc == -ENOENT ? 0 : rc;
}

/* Damaged records, removed after the walk; intact ones get their key back
 * when it is gone or names another record. */
static int walk_records(vf_txn *txn, salvage_job *j)
{
	vf_store *s = j->v->store;
	vf_cursor *cur;
	vf_val k, d;
	int rc = vf_cursor_open(txn, s->records, &cur);
	if (rc)
		return rc;
	for (rc = vf_cursor_get(cur, &k, &d, VF_FIRST); rc == 0;
	     rc = vf_cursor_get(cur, &k, &d, VF_NEXT)) {
		uint64_t id = vf_rd_be64(k.data), kid;
		vf_record r;
		if (vf_record_decode(d.data, d.len, &r)) {
			if ((rc = VF_GROW(j->ids, j->nids, j->capids, 256)))
				break;
			j->ids[j->nids++] = id;
			continue;
		}
		int got = vf_keys_get(txn, s, r.key, r.keylen, &kid);
		if (got == 0 && kid == id)
			continue;
		if (got && got != -ENOENT && got != -EIO) {
			rc = got;
			break;
		}
		/* the entry is gone or was removed above as damaged */
		if ((rc = vf_keys_put(txn, s, r.key, r.keylen, id)))
			break;
		j->info.keys_restored++;
	}
	vf_cursor_close(cur);
	return rc == -ENOENT ? 0 : rc;
}

/* The ids of generation m with a live posting that disagrees with its
 * record (a missing record, another version or key) or with two live
 * postings, into bad.  Live: not under a tombstone of its cluster, and of
 * the newest version when the record changed after m's synced_seq. */
static int find_bad_postings(vf_txn *txn, vf_store *s, const vf_genmeta *m,
			     const vf_dirty *dirty, vf_tombs *bad)
{
	vf_cursor *cur;
	vf_val k, d;
	vf_tombs tombs = {0}, seen = {0};
	uint32_t cluster = UINT32_MAX;
	uint8_t p[8];
	vf_be64(p, m->id);
	int rc = vf_cursor_open(txn, s->postings, &cur);
	if (rc)
		return rc;
	for (rc = vf_cursor_prefix(cur, p, 8, &k, &d, VF_SEEK); rc == 0;
	     rc = vf_cursor_prefix(cur, p, 8, &k, &d, VF_NEXT)) {
		const uint8_t *kb = k.data;
		uint8_t kind = vf_postkey_kind(kb);
		vf_code codes[1];
		vf_block b;
		uint32_t n = 0;
		if (vf_postkey_cluster(kb) != cluster) {
			vf_tombs_clear(&tombs);
			cluster = vf_postkey_cluster(kb);
		}
		if (kind == VF_PK_TOMB) { /* checked whole by drop_gens() */
			uint64_t ks;
			memcpy(&ks, d.data, 8);
			rc = vf_tombs_add(&tombs, vf_postkey_sub(kb), ks);
		} else if (kind == VF_PK_BLOCK) {
			if ((rc = vf_block_open(d.data, d.len, &b)) == 0)
				n = b.n;
		} else if (kind == VF_PK_DELTA) {
			rc = vf_delta_open(d.data, d.len, m->dim, m->pdim, m->bits, &codes[0]);
			n = 1;
		}
		for (uint32_t i = 0; i < n && rc == 0; i++) {
			vf_code c = codes[0];
			if (kind == VF_PK_BLOCK && !(c.id = vf_block_id(&b, i), c.seq = vf_block_seq(&b, i),
						     c.key = vf_block_key(&b, i, &c.keylen))) {
				rc = -EIO;
				break;
			}
			if (vf_posting_stale(&tombs, dirty, c.id, c.seq))
				continue;
			int ok = vf_posting_matches(txn, s, c.id, c.seq, c.key, c.keylen);
			if (ok < 0)
				rc = ok;
			else if (!ok || vf_tombs_has(&seen, c.id, NULL))
				rc = vf_tombs_add(bad, c.id, 0);
			else
				rc = vf_tombs_add(&seen, c.id, 0);
		}
		if (rc)
			break;
	}
	vf_cursor_close(cur);
	vf_tombs_free(&tombs);
	vf_tombs_free(&seen);
	return rc == -ENOENT ? 0 : rc;
}

/* Post record id again in the generation of w, unless it is missing or a
 * change the generation lacks will bring it (queries scan it meanwhile). */
static int repost(vf_posting_writer *w, vf_txn *txn, const vf_dirty *dirty, uint64_t id,
		  float *vec)
{
	vf_val rv;
	vf_record r;
	const vf_dirty_entry *e = vf_dirty_find(dirty, id);
	if (e && e->ch.gen != w->g->id)
		return 0;
	int rc = vf_records_get(txn, w->v->store, id, &rv);
	if (rc == -ENOENT || (rc == 0 && vf_record_decode(rv.data, rv.len, &r)))
		return 0; /* gone, or damaged (removed as the other damaged ones) */
	if (rc)
		return rc;
	if (r.dim != w->g->meta.dim)
		return -EIO;
	vf_record_floats(&r, vec);
	return vf_pw_apply(w, txn, id, r.seq, vec, r.key, r.keylen, r.plen > 0, NULL, NULL);
}

/* In every ready generation, the ids find_bad_postings() names lose every
 * posting (their clusters rewritten) and are posted again from their
 * records. */
static int repair_postings(vf_txn *txn, salvage_job *j, const vf_counters *cnt)
{
	vf_store *s = j->v->store;
	uint64_t ids[1024];
	size_t n;
	int rc = vf_list_gens(txn, s, ids, 1024, &n);
	for (size_t i = 0; i < n && i < 1024 && rc == 0; i++) {
		vf_genmeta m;
		vf_dirty dirty;
		vf_tombs bad = {0};
		if ((rc = vf_load_genmeta(txn, s, ids[i], &m)) || m.state != VECFS_GEN_READY)
			continue;
		vf_dirty_init(&dirty);
		if ((rc = vf_dirty_load(txn, s, m.synced_seq, cnt->seq, &dirty)) == 0 &&
		    (rc = find_bad_postings(txn, s, &m, &dirty, &bad)) == 0 && bad.n) {
			for (uint32_t c = 0; c < m.nlist && rc == 0; c++)
				rc = vf_refold_cluster(txn, s, &m, c, &dirty, &bad);
			vf_gen *g = NULL;
			vf_posting_writer w;
			float *vec = vf_malloc(sizeof(float) * m.dim);
			if (rc == 0 && !vec)
				rc = -ENOMEM;
			if (rc == 0 && (rc = vf_gen_get(j->v, txn, m.id, &g)) == 0 &&
			    (rc = vf_pw_init(&w, j->v, g)) == 0) {
				for (uint32_t t = 0; t < bad.cap && rc == 0; t++)
					if (bad.id[t] != UINT64_MAX)
						rc = repost(&w, txn, &dirty, bad.id[t], vec);
				if (rc == 0 && (rc = vf_pw_flush(&w, txn)) == 0 &&
				    (rc = vf_load_genmeta(txn, s, m.id, &m)) == 0) {
					m.pending += w.added;
					rc = vf_save_genmeta(txn, s, &m);
				}
				vf_pw_free(&w);
			}
			vf_gen_put(j->v, g);
			free(vec);
			j->info.postings_repaired += bad.n;
		}
		vf_dirty_free(&dirty);
		vf_tombs_free(&bad);
	}
	return rc;
}

static int salvage_fn(vf_txn *txn, void *arg)
{
	salvage_job *j = arg;
	vf_store *s = j->v->store;
	vf_counters cnt;
	int rc;
	/* run again after the map grew: nothing kept from the last try */
	memset(&j->info, 0, sizeof j->info);
	j->nids = j->nbad = j->keylen = j->ngens = j->nkeys = 0;
	if ((rc = vf_load_counters(txn, s, &cnt)) || (rc = drop_gens(txn, j)) ||
	    (rc = find_bad_keys(txn, j)))
		return rc;
	for (size_t i = 0; i < j->nbad; i++)
		if ((rc = vf_keys_del(txn, s, j->keybuf + j->bad[i].off, j->bad[i].len)))
			return rc;
	if ((rc = walk_records(txn, j)))
		return rc;
	for (size_t i = 0; i < j->nids; i++)
		if ((rc = vf_records_del(txn, s, j->ids[i])))
			return rc;
	for (size_t i = 0; i < j->nbad; i++) { /* a key given back is not lost */
		uint64_t id;
		if (j->bad[i].lost &&
		    vf_keys_get(txn, s, j->keybuf + j->bad[i].off, j->bad[i].len, &id) == 0)
			j->bad[i].lost = 0;
	}
	if ((rc = vf_forget_records(j->v, txn, j->ids, j->nids, &cnt, NULL)) ||
	    (rc = repair_postings(txn, j, &cnt)))
		return rc;
	cnt.live = j->nkeys - j->nbad + j->info.keys_restored;
	j->info.records_dropped = j->nids;
	j->info.generations_dropped = j->ngens;
	for (size_t i = 0; i < j->nbad; i++)
		j->info.keys_lost += j->bad[i].lost;
	uint64_t indexed;
	if ((rc = vf_pidx_rebuild(txn, s, &indexed))) /* made anew: it may be damaged too */
		return rc;
	if ((j->nids || j->ngens) && ((rc = vf_attrs_recount(txn, s)) || (rc = vf_attrs_write(txn, s, 0, 0)) ||
				      (j->ngens && (rc = vf_attrs_touch(txn, s, VF_TIME_GENS)))))
		return rc;
	return vf_save_counters(txn, s, &cnt);
}

int vecfs_salvage(vecfs *v, vecfs_lost_fn lost, void *arg, vecfs_salvage_info *info,
		  char *err, size_t errlen)
{
	salvage_job j = {.v = v, .err = err, .errlen = errlen};
	pthread_mutex_lock(&v->build_mu); /* no build or compaction meanwhile */
	int rc = vf_write(v->store, salvage_fn, &j);
	pthread_mutex_unlock(&v->build_mu);
	if (rc == 0) {
		for (size_t i = 0; i < j.ngens; i++)
			vf_gen_forget(v, j.gens[i]);
		for (size_t i = 0; lost && i < j.nbad; i++)
			if (j.bad[i].lost)
				lost(arg, (const char *)j.keybuf + j.bad[i].off, j.bad[i].len);
		if (info)
			*info = j.info;
	} else {
		vf_seterr(err, errlen, "salvage: %s", strerror(-rc));
	}
	free(j.ids);
	free(j.bad);
	free(j.keybuf);
	return rc;
}

void vecfs_set_lost_fn(vecfs *v, vecfs_lost_fn fn, void *arg)
{
	v->lost_fn = fn;
	v->lost_arg = arg;
}
