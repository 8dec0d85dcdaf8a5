/*
 * engine/maint/verify.c - checking a store: every record, key, posting block,
 * delta posting and assignment against each other and their checksums.
 */
#include "handle.h"
#include "maint.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "gen/gen.h"
#include "keys.h"
#include "query/query.h"
#include "record.h"

typedef struct verify_state {
	uint64_t blocks, deltas, live, stale, uncovered, bad;
	char first[256];
	char where[80]; /* what the walk reads: said when LMDB fails it */
	int own_rc;     /* LMDB's own code of that failure */
} verify_state;

/* An LMDB failure of the walk: kept as LMDB says it, returned as -errno. */
static int vfail(verify_state *st, int rc)
{
	if (vf_store_own_code(rc) && !st->own_rc)
		st->own_rc = rc;
	return vf_store_err(rc);
}

static void vbad(verify_state *st, const char *fmt, unsigned long long a,
		 unsigned long long b)
{
	if (!st->bad++)
		snprintf(st->first, sizeof st->first, fmt, a, b);
}

/* Record `id` into r: *ok is 1 when it is there and intact, 0 when it is
 * missing, -1 when it fails its checksum (damaged).  Returns LMDB's code
 * when the tree is damaged (st->where then names the record), else 0. */
static int verify_record(vf_txn *txn, vf_store *s, verify_state *st, uint64_t id,
			 vf_record *r, int *ok)
{
	vf_val rv;
	int rc = vf_records_get(txn, s, id, &rv);
	if (rc && rc != -ENOENT) { /* not a missing record: a damaged tree */
		snprintf(st->where, sizeof st->where, "record id %llu", (unsigned long long)id);
		return rc;
	}
	*ok = rc ? 0 : vf_record_decode(rv.data, rv.len, r) == 0 ? 1 : -1;
	return 0;
}

int vf_posting_matches(vf_txn *txn, vf_store *s, uint64_t id, uint64_t seq, const char *key,
		       uint32_t keylen)
{
	vf_val rv;
	vf_record r;
	int rc = vf_records_get(txn, s, id, &rv);
	if (rc == -ENOENT)
		return 0;
	if (rc)
		return vf_store_err(rc);
	/* the fields first (no checksum: the common case is a match), then
	 * whether a record that disagrees is damaged */
	if (vf_record_fields(rv.data, rv.len, &r) == 0 && r.seq == seq && r.keylen == keylen &&
	    !memcmp(r.key, key, keylen))
		return 1;
	return vf_record_decode(rv.data, rv.len, &r) != 0; /* damaged: nothing to compare */
}

/* A live posting must match its record: same version and key (the record's
 * own checksum covers its vector). */
static int verify_posting(vf_txn *txn, vf_store *s, verify_state *st, uint64_t gen,
			  uint64_t id, uint64_t seq, const char *key, uint32_t keylen,
			  uint32_t dim)
{
	vf_record r;
	int ok;
	st->live++;
	int rc = verify_record(txn, s, st, id, &r, &ok);
	if (rc)
		return rc;
	if (ok != 1) {
		vbad(st, ok ? "generation %llu: a live posting names record id %llu, which is "
			      "damaged (fails its checksum; salvage removes it)"
			    : "generation %llu: a live posting names record id %llu, which is missing",
		     gen, id);
		return 0;
	}
	if (r.seq != seq || r.keylen != keylen || memcmp(r.key, key, keylen) || r.dim != dim)
		vbad(st, "generation %llu: the posting of record id %llu does not match the record",
		     gen, id);
	return 0;
}

static int verify_gen(vf_txn *txn, vf_store *s, const vf_genmeta *m,
		      const vf_counters *cnt, verify_state *st)
{
	vf_cursor *cur;
	uint8_t p[8];
	vf_val k, d;
	vf_dirty dirty;
	vf_tombs tombs = {0};
	uint32_t cluster = UINT32_MAX;
	vf_be64(p, m->id);
	vf_dirty_init(&dirty);
	snprintf(st->where, sizeof st->where, "the change log");
	int rc = vf_dirty_load(txn, s, m->synced_seq, cnt->seq, &dirty);
	if (rc)
		return rc;
	for (uint64_t i = 0; i < dirty.cap; i++)
		if (dirty.slots[i].id && dirty.slots[i].ch.op == VF_OP_PUT &&
		    dirty.slots[i].ch.gen != m->id)
			st->uncovered++;
	snprintf(st->where, sizeof st->where, "the postings of generation %llu",
		 (unsigned long long)m->id);
	if ((rc = vf_cursor_open(txn, s->postings, &cur))) {
		vf_dirty_free(&dirty);
		return vfail(st, rc);
	}
	for (rc = vf_cursor_prefix(cur, p, 8, &k, &d, VF_SEEK); rc == 0;
	     rc = vf_cursor_prefix(cur, p, 8, &k, &d, VF_NEXT)) {
		const uint8_t *kb = k.data;
		uint32_t cl = vf_postkey_cluster(kb);
		if (cl != cluster) {
			vf_tombs_clear(&tombs);
			cluster = cl;
		}
		uint8_t kind = vf_postkey_kind(kb);
		if (kind == VF_PK_TOMB) {
			uint64_t ks;
			if (d.len != 8) {
				vbad(st, "generation %llu cluster %llu: damaged tombstone", m->id, cl);
				continue;
			}
			memcpy(&ks, d.data, 8);
			if ((rc = vf_tombs_add(&tombs, vf_postkey_sub(kb), ks)))
				break;
		} else if (kind == VF_PK_BLOCK) {
			vf_block b;
			st->blocks++;
			if (vf_block_open(d.data, d.len, &b)) {
				vbad(st, "generation %llu cluster %llu: block header damaged", m->id, cl);
				continue;
			}
			int ok = 1;
			for (int c = 0; c < VF_NCOL && ok; c++)
				if (vf_block_check(NULL, &b, c)) {
					vbad(st, "generation %llu cluster %llu: block checksum mismatch",
					     m->id, cl);
					ok = 0;
				}
			for (uint32_t i = 0; i < b.n && ok; i++) {
				uint64_t id = vf_block_id(&b, i), seq = vf_block_seq(&b, i);
				uint32_t kl;
				const char *key = vf_block_key(&b, i, &kl);
				if (!key) {
					vbad(st, "generation %llu cluster %llu: posting damaged", m->id, cl);
					break;
				}
				if (vf_posting_stale(&tombs, &dirty, id, seq))
					st->stale++;
				else if ((rc = verify_posting(txn, s, st, m->id, id, seq, key, kl,
							      b.dim)))
					break;
			}
			if (rc)
				break;
		} else if (kind == VF_PK_DELTA) {
			vf_code c;
			st->deltas++;
			if (vf_delta_open(d.data, d.len, m->dim, m->pdim, m->bits, &c))
				vbad(st, "generation %llu cluster %llu: delta posting checksum mismatch",
				     m->id, cl);
			else if (vf_posting_stale(&tombs, &dirty, c.id, c.seq))
				st->stale++;
			else if ((rc = verify_posting(txn, s, st, m->id, c.id, c.seq, c.key,
						      c.keylen, m->dim)))
				break;
		}
	}
	vf_cursor_close(cur);
	vf_tombs_free(&tombs);
	vf_dirty_free(&dirty);
	return rc == -ENOENT || rc == 0 ? 0 : vfail(st, rc);
}

int vecfs_verify(vecfs *v, char *msg, size_t msglen)
{
	vf_txn *txn;
	verify_state st;
	uint64_t ids[1024];
	size_t n, nready = 0;
	vf_counters cnt;
	memset(&st, 0, sizeof st);
	int rc = vf_read_begin(v->store, &txn);
	if (rc)
		return rc;
	snprintf(st.where, sizeof st.where, "the list of generations");
	if ((rc = vf_list_gens(txn, v->store, ids, 1024, &n)) ||
	    (rc = vf_load_counters(txn, v->store, &cnt)))
		goto out;
	for (size_t i = 0; i < n && i < 1024; i++) {
		vf_genmeta m;
		if ((rc = vf_load_genmeta(txn, v->store, ids[i], &m)))
			goto out;
		if (m.state != VECFS_GEN_READY)
			continue;
		nready++;
		uint64_t live0 = st.live, unc0 = st.uncovered;
		if ((rc = verify_gen(txn, v->store, &m, &cnt, &st)))
			goto out;
		/* every live record is either posted once or scanned exactly */
		if (st.live - live0 + st.uncovered - unc0 != cnt.live) {
			char fmt[96]; /* vbad() takes two numbers: the third goes in here */
			snprintf(fmt, sizeof fmt, "generation %%llu covers %%llu records, the store has "
				 "%llu live", (unsigned long long)cnt.live);
			vbad(&st, fmt, m.id, (st.live - live0) + (st.uncovered - unc0));
		}
	}
	/* every key maps to a record whose key matches */
	vf_cursor *cur;
	vf_val k, d;
	uint64_t nkeys = 0;
	snprintf(st.where, sizeof st.where, "the keys");
	if ((rc = vf_cursor_open(txn, v->store->keys, &cur))) {
		rc = vfail(&st, rc);
		goto out;
	}
	for (rc = vf_cursor_get(cur, &k, &d, VF_FIRST); rc == 0;
	     rc = vf_cursor_get(cur, &k, &d, VF_NEXT)) {
		uint64_t id;
		vf_record r;
		int ok;
		nkeys++;
		memcpy(&id, d.data, 8);
		if ((rc = verify_record(txn, v->store, &st, id, &r, &ok)))
			break; /* a damaged tree */
		if (ok == -1)
			vbad(&st, "record id %llu (key #%llu) is damaged (fails its checksum; "
				  "salvage removes it)", id, nkeys);
		else if (!ok || r.keylen != k.len || memcmp(r.key, k.data, r.keylen))
			vbad(&st, "record id %llu (key #%llu) is missing or does not match its key",
			     id, nkeys);
	}
	vf_cursor_close(cur);
	if (rc != -ENOENT) {
		rc = vfail(&st, rc);
		goto out;
	}
	if (nkeys != cnt.live)
		vbad(&st, "record counter says %llu live records, keys hold %llu",
		     cnt.live, nkeys);
	/* the payload index holds each record's terms and nothing else */
	char perr[200];
	snprintf(st.where, sizeof st.where, "the payload index");
	rc = vf_pidx_check(txn, v->store, perr, sizeof perr);
	if (rc == -EIO && !st.bad++)
		snprintf(st.first, sizeof st.first, "%s (salvage makes it anew)", perr);
	rc = rc == -EIO ? 0 : rc ? vfail(&st, rc) : 0;
out:
	vf_read_end(v->store, txn);
	if (rc) {
		if (st.own_rc) /* one of LMDB's own: a damaged B-tree page */
			snprintf(msg, msglen,
				 "verify: failed reading %s: %s (the store's file is damaged; "
				 "restore it from a backup)", st.where, vf_store_strerror(st.own_rc));
		else
			snprintf(msg, msglen, "verify: failed reading %s: %s", st.where,
				 strerror(-rc));
		return rc;
	}
	if (st.bad) {
		snprintf(msg, msglen, "verify: %llu problem(s); first: %s",
			 (unsigned long long)st.bad, st.first);
		return -EIO;
	}
	snprintf(msg, msglen,
		 "verify: ok: %llu records, %zu ready generation(s), %llu posting blocks, "
		 "%llu delta postings, %llu live postings checked against records, "
		 "%llu superseded",
		 (unsigned long long)cnt.live, nready, (unsigned long long)st.blocks,
		 (unsigned long long)st.deltas, (unsigned long long)st.live,
		 (unsigned long long)st.stale);
	return 0;
}
