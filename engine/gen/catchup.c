/*
 * engine/gen/catchup.c - bringing a generation up to date with the changes
 * written after its snapshot: tombstones for stale postings, delta postings
 * for new versions.
 */
#include "io.h"
#include "prepare.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "changes.h"
#include "record.h"

/* The puts of a chunk of the dirty set, copied out of their records (the
 * writes that follow may move the records' pages). */
typedef struct sync_chunk {
	vecfs_row *rows;
	uint64_t *id, *seq;
	float *vecs;
	size_t *koff;
	char *keys;
	size_t n, klen, kcap;
} sync_chunk;

static void sync_chunk_free(sync_chunk *k)
{
	free(k->rows);
	free(k->id);
	free(k->seq);
	free(k->vecs);
	free(k->koff);
	free(k->keys);
}

/* Copy the record of e into chunk slot k->n.  0 (added, or skipped: with
 * `later`, a change after the step's end deleted or replaced the record)
 * or -errno.
 *
 * The record read is the newest version, which is e's only when no later
 * change touched it.  A later version must not be posted under e's number:
 * that later change (posted to this generation when it was written, or
 * brought in by the next step) puts its own posting and a tombstone into
 * the cluster the assignment map names, so a posting of that vector under
 * an older number would never be superseded (a key found twice), and the
 * map moved to its cluster would leave the later change's own posting
 * where no tombstone reaches it (a posting outliving its record).  Until
 * then the generation holds no posting of e: the change log says the
 * record changed after synced_seq, and queries scan it exactly. */
static int sync_take(sync_chunk *k, vf_txn *txn, vf_store *s, const vf_dirty_entry *e,
		     uint32_t dim, int later)
{
	vf_val rv;
	vf_record r;
	int got = vf_records_get(txn, s, e->ch.id, &rv), rc;
	if (got == -ENOENT && later)
		return 0; /* deleted by a change after the step's end */
	if ((rc = vf_store_err(got)) || (rc = vf_record_decode(rv.data, rv.len, &r)))
		return rc;
	if (r.dim != dim)
		return -EIO;
	if (r.seq != e->seq) {
		if (later && r.seq > e->seq)
			return 0; /* replaced by a change after the step's end */
		return -EIO; /* the newest change of the record is not its version */
	}
	if (vf_bytes_reserve((uint8_t **)&k->keys, &k->kcap, k->klen + r.keylen + 1))
		return -ENOMEM;
	size_t i = k->n++;
	vf_record_floats(&r, k->vecs + i * dim);
	memcpy(k->keys + k->klen, r.key, r.keylen);
	k->koff[i] = k->klen;
	k->klen += r.keylen;
	k->id[i] = e->ch.id;
	k->seq[i] = e->seq;
	k->rows[i] = (vecfs_row){.key = NULL, .keylen = r.keylen, .vec = k->vecs + i * dim,
				 .payload = NULL, .payload_len = r.plen};
	return 0;
}

int vf_sync_generation(vecfs *v, vf_txn *txn, vf_gen *g, vf_genmeta *m, uint64_t to,
		       const vf_counters *cnt)
{
	vf_dirty d;
	vf_posting_writer w;
	sync_chunk k = {0};
	vf_prepared pre = {0};
	uint32_t dim = m->dim;
	int rc;
	if (to == 0 || to > cnt->seq)
		to = cnt->seq;
	if (m->synced_seq >= to)
		return 0;
	vf_dirty_init(&d);
	if ((rc = vf_dirty_load(txn, v->store, m->synced_seq, to, &d)))
		goto out;
	if ((rc = vf_pw_init(&w, v, g)))
		goto out;
	k.rows = vf_malloc(sizeof *k.rows * VF_NEAR_CHUNK);
	k.id = vf_malloc(sizeof *k.id * VF_NEAR_CHUNK);
	k.seq = vf_malloc(sizeof *k.seq * VF_NEAR_CHUNK);
	k.vecs = vf_malloc(sizeof(float) * dim * VF_NEAR_CHUNK);
	k.koff = vf_malloc(sizeof *k.koff * VF_NEAR_CHUNK);
	if (!k.rows || !k.id || !k.seq || !k.vecs || !k.koff) {
		rc = -ENOMEM;
		goto out_w;
	}
	/* deletes as they come; puts a chunk at a time, prepared together on
	 * every CPU (nearest centroid, code) like the rows of a write */
	for (uint64_t i = 0; i <= d.cap && rc == 0; i++) {
		const vf_dirty_entry *e = i < d.cap ? &d.slots[i] : NULL;
		if (e && (!e->id || e->ch.gen == g->id))
			continue; /* posted to g when written: already exact */
		if (e && e->ch.op != VF_OP_PUT) {
			rc = vf_pw_apply(&w, txn, e->ch.id, e->seq, NULL, NULL, 0, 0, NULL, NULL);
			continue;
		}
		if (e && (rc = sync_take(&k, txn, v->store, e, dim, to < cnt->seq)))
			break;
		if (k.n < VF_NEAR_CHUNK && e)
			continue;
		/* the chunk is full, or the dirty set ends */
		if (k.n > 1 && (rc = vf_prepare(v, g, k.rows, k.n, NULL, &pre)))
			break;
		for (size_t j = 0; j < k.n && rc == 0; j++)
			rc = vf_pw_apply(&w, txn, k.id[j], k.seq[j], k.rows[j].vec, k.keys + k.koff[j],
					 (uint32_t)k.rows[j].keylen, k.rows[j].payload_len > 0,
					 k.n > 1 ? vf_prepared_next(&pre) : NULL, NULL);
		k.n = k.klen = 0;
	}
	if (rc == 0)
		rc = vf_pw_flush(&w, txn);
	if (rc == 0) {
		m->synced_seq = to;
		m->pending += w.added;
	}
out_w:
	vf_pw_free(&w);
out:
	sync_chunk_free(&k);
	vf_prepared_free(&pre);
	vf_dirty_free(&d);
	return rc;
}
