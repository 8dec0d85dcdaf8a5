/*
 * engine/maint/compact.c - compaction: folds a cluster's delta postings into
 * packed posting blocks and drops the postings that tombstones or newer
 * versions made dead, in steps that let writes in between.
 */
#include "handle.h"
#include "maint.h"
#include "io.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gen/gen.h"
#include "keys.h"

/* The live postings of one cluster, copied out of the store (the values
 * they came from are deleted in the same transaction). */
typedef struct fold {
	vf_code *codes;
	uint8_t *data;       /* planes | key of each code */
	size_t n, cap, len, dcap;
} fold;

static int fold_add(fold *f, const vf_code *c, size_t pbytes)
{
	size_t need = pbytes + c->keylen;
	if (VF_GROW(f->codes, f->n, f->cap, 256))
		return -ENOMEM;
	if (vf_bytes_reserve(&f->data, &f->dcap, f->len + need))
		return -ENOMEM;
	vf_code *o = &f->codes[f->n++];
	*o = *c;
	/* store offsets now, pointers once the data stops moving */
	o->planes = (const uint8_t *)(uintptr_t)f->len;
	memcpy(f->data + f->len, c->planes, pbytes);
	memcpy(f->data + f->len + pbytes, c->key, c->keylen);
	f->len += need;
	return 0;
}

/* A compaction runs in steps, each one write transaction of about
 * step_us of folding (at least one cluster), so that writes wait for one
 * step, not for the whole generation.  A generation that lacks changes (a
 * roll-back made it active again) first takes them in, `sync` changes a
 * step.  The first folding step fixes `upto`, the last change it folds: a delta posting written later stays a delta
 * posting, so that when the last step sets the generation's blocks_seq
 * to upto, its blocks hold exactly the changes up to there (what a
 * rebalance relies on: it takes the blocks, then the later changes from
 * the change log).  A step that finds another generation active starts
 * over on that one.  An interrupted compaction (a crash between steps)
 * leaves some clusters folded further than blocks_seq says; the next
 * compaction, which every rebalance runs first, folds the rest. */
#define COMPACT_STEP_US 50000 /* a step folds clusters for this long */
#define COMPACT_SYNC 16384    /* changes a step brings into the generation, at
			       * first (twice as many after a step that did not
			       * shrink the backlog, up to 64 times as many), and
			       * change-log entries a step trims at the end */

typedef struct compact_job {
	vecfs *v;
	uint64_t step_us;
	int (*between)(void *); /* tests: called after each step but the last;
				 * non-zero stops the compaction there */
	void *arg;
	uint64_t gen;         /* the generation being compacted; 0: none yet */
	uint64_t upto;        /* changes folded: those up to here */
	uint64_t pending0;    /* its pending count at the first step */
	uint32_t next;        /* the next cluster to look at */
	uint32_t rewritten;   /* clusters rewritten */
	vf_catchup sync;      /* the changes the next step may bring in */
	uint64_t changes;     /* change-log entries a step trims at most */
	int s_more;           /* the change log has more to trim */
	uint64_t s_behind;    /* changes the generation lacks after the step */
	/* what the step in progress did (a retried step starts over) */
	uint64_t s_gen, s_upto, s_pending0;
	uint32_t s_next, s_rewritten;
	int s_done;
	char *err;
	size_t errlen;
} compact_job;

/* How a cluster is folded: the changes the generation lacks (NULL: none,
 * it was synced just before), ids whose postings all go (NULL: none), and
 * where a refusal is said. */
typedef struct fold_how {
	const vf_dirty *dirty;
	const vf_tombs *drop;
	int blocks_too;         /* check block postings too, not only deltas */
	char *err;
	size_t errlen;
} fold_how;

/* Whether live posting `code` of cluster c may be folded: 1 (kept), 0
 * (dropped: its id is in how->drop), or -EIO (it does not match its record:
 * damage is not folded into the new blocks; salvage repairs it) or a store
 * error.  A posting that a change the generation lacks superseded is kept
 * as it is (queries skip it; catching up tombstones it).  A compaction
 * checks the delta postings it folds, the one way a posting enters blocks
 * (a check of every block posting would double its time: a record look-up
 * each); a rebalance checks the blocks it copies (rb_check()). */
static int fold_keep(vf_txn *txn, vf_store *s, const vf_genmeta *m, uint32_t c,
		     const fold_how *how, const vf_code *code, int block)
{
	if (how->drop && vf_tombs_has(how->drop, code->id, NULL))
		return 0;
	if ((block && !how->blocks_too) || (how->dirty && vf_dirty_find(how->dirty, code->id)))
		return 1;
	int rc = vf_posting_matches(txn, s, code->id, code->seq, code->key, code->keylen);
	if (rc == 0) {
		vf_seterr(how->err, how->errlen, "compact: generation %llu cluster %u: the posting "
			  "of record id %llu does not match the record (salvage repairs it)",
			  (unsigned long long)m->id, c, (unsigned long long)code->id);
		return -EIO;
	}
	return rc;
}

/* Rewrite cluster c of g from its live postings: its blocks and its delta
 * postings up to change `upto`; later delta postings stay.  Every
 * tombstone is applied and goes (what it hides goes with it).  Each
 * posting folded is checked against its record (fold_keep()). */
static int compact_cluster(vf_txn *txn, vf_store *s, const vf_genmeta *m, uint32_t c,
			   uint64_t upto, const fold_how *how, fold *f, uint8_t **buf,
			   size_t *bufcap)
{
	uint64_t kept = 0;
	vf_postkey start = vf_post_key(m->id, c, VF_PK_TOMB, 0);
	vf_val k = {sizeof start.b, start.b}, d;
	vf_cursor *cur;
	vf_tombs tombs = {0};
	vf_dirty none;
	size_t pbytes = (size_t)m->bits * (m->pdim / 8);
	uint8_t *planes = vf_malloc(pbytes); /* one block posting's, until copied */
	int rc;
	vf_dirty_init(&none); /* tombstones alone say what is dead here */
	f->n = f->len = 0;
	if (!planes)
		return -ENOMEM;
	if ((rc = vf_cursor_open(txn, s->postings, &cur))) {
		free(planes);
		return vf_store_err(rc);
	}
	/* collect live postings, deleting every tombstone, block and delta */
	for (rc = vf_cursor_get(cur, &k, &d, VF_SEEK); rc == 0;
	     rc = vf_cursor_get(cur, &k, &d, VF_CURRENT)) {
		const uint8_t *kb = k.data;
		if (k.len != sizeof start.b || memcmp(kb, start.b, 12))
			break;
		uint8_t kind = vf_postkey_kind(kb);
		if (kind == VF_PK_TOMB) {
			uint64_t ks;
			if (d.len != 8) {
				rc = -EIO;
				break;
			}
			memcpy(&ks, d.data, 8);
			if ((rc = vf_tombs_add(&tombs, vf_postkey_sub(kb), ks)))
				break;
		} else if (kind == VF_PK_BLOCK) {
			vf_block b;
			if ((rc = vf_block_open_checked(&d, &b)))
				break;
			for (uint32_t i = 0; i < b.n && rc == 0; i++) {
				vf_code code;
				if (vf_posting_stale(&tombs, &none, vf_block_id(&b, i), vf_block_seq(&b, i)))
					continue;
				if ((rc = vf_block_code(&b, i, &code, planes)) == 0 &&
				    (rc = fold_keep(txn, s, m, c, how, &code, 1)) == 1)
					rc = fold_add(f, &code, pbytes);
			}
			if (rc)
				break;
		} else if (kind == VF_PK_DELTA) {
			vf_code code;
			if ((rc = vf_delta_open(d.data, d.len, m->dim, m->pdim, m->bits, &code)))
				break;
			if (!vf_posting_stale(&tombs, &none, code.id, code.seq) &&
			    !(how->drop && vf_tombs_has(how->drop, code.id, NULL))) {
				if (code.seq > upto) {
					kept++; /* newer than this compaction */
					if ((rc = vf_cursor_get(cur, &k, &d, VF_NEXT)))
						break;
					continue;
				}
				if ((rc = fold_keep(txn, s, m, c, how, &code, 0)) < 0 ||
				    (rc == 1 && (rc = fold_add(f, &code, pbytes))))
					break;
				rc = 0;
			}
		}
		if (kind != VF_PK_MANIFEST && (rc = vf_cursor_del(cur)))
			break;
		if (kind == VF_PK_MANIFEST && (rc = vf_cursor_get(cur, &k, &d, VF_NEXT)))
			break;
	}
	vf_cursor_close(cur);
	vf_tombs_free(&tombs);
	free(planes);
	if (rc == -ENOENT || rc == -EINVAL)
		rc = 0;
	if (rc)
		return vf_store_err(rc);
	/* pointers into the copied data, in id order */
	for (size_t i = 0; i < f->n; i++) {
		vf_code *o = &f->codes[i];
		uint8_t *p = f->data + (uintptr_t)o->planes;
		o->planes = p;
		o->key = (const char *)p + pbytes;
	}
	if (f->n > 1)
		qsort(f->codes, f->n, sizeof *f->codes, vf_cmp_code);
	for (size_t i = 1; i < f->n; i++)
		if (f->codes[i].id == f->codes[i - 1].id &&
		    !(how->dirty && vf_dirty_find(how->dirty, f->codes[i].id))) {
			vf_seterr(how->err, how->errlen, "compact: generation %llu cluster %u: record id "
				  "%llu has two live postings (salvage repairs it)",
				  (unsigned long long)m->id, c, (unsigned long long)f->codes[i].id);
			return -EIO;
		}
	return vf_write_blocks(txn, s, m, c, f->codes, f->n, kept, buf, bufcap);
}

int vf_refold_cluster(vf_txn *txn, vf_store *s, const vf_genmeta *m, uint32_t c,
		      const vf_dirty *dirty, const vf_tombs *drop)
{
	fold f = {0};
	uint8_t *buf = NULL;
	size_t bufcap = 0;
	fold_how how = {dirty, drop, 1, NULL, 0};
	int rc = compact_cluster(txn, s, m, c, m->blocks_seq, &how, &f, &buf, &bufcap);
	free(f.codes);
	free(f.data);
	free(buf);
	return rc;
}

/* Drop change-log entries no generation needs any more: those at or below
 * every generation's sync and block points. */
static int trim_changes(vf_txn *txn, vf_store *s, uint64_t max, int *more)
{
	vf_cursor *cur;
	vf_val k, d;
	vf_genmeta m;
	uint64_t keep_after = UINT64_MAX;
	int rc = vf_cursor_open(txn, s->gens, &cur);
	if (rc)
		return rc;
	for (rc = vf_genmeta_walk(cur, VF_FIRST, &m); rc == 0;
	     rc = vf_genmeta_walk(cur, VF_NEXT, &m)) {
		if (m.state == VECFS_GEN_FAILED)
			continue;
		uint64_t need = m.synced_seq < m.blocks_seq ? m.synced_seq : m.blocks_seq;
		if (m.state == VECFS_GEN_BUILDING)
			need = m.snap_seq;
		if (need < keep_after)
			keep_after = need;
	}
	vf_cursor_close(cur);
	if (rc != -ENOENT)
		return rc;
	if ((rc = vf_cursor_open(txn, s->changes, &cur)))
		return rc;
	*more = 0;
	uint64_t n = 0;
	for (rc = vf_cursor_get(cur, &k, &d, VF_FIRST);
	     rc == 0 && vf_rd_be64(k.data) <= keep_after;
	     rc = vf_cursor_get(cur, &k, &d, VF_CURRENT)) {
		if (n++ == max) {
			*more = 1; /* the next step goes on */
			break;
		}
		if ((rc = vf_cursor_del(cur)))
			break;
	}
	vf_cursor_close(cur);
	return rc == -ENOENT || rc == -EINVAL || rc == 0 ? 0 : rc;
}

/* A step that only trims the change log (after the last folding step). */
static int trim_step(vf_txn *txn, void *arg)
{
	compact_job *j = arg;
	return trim_changes(txn, j->v->store, j->changes, &j->s_more);
}

/* Microseconds since t (CLOCK_MONOTONIC). */
int64_t vf_us_since(const struct timespec *t)
{
	struct timespec now;
	clock_gettime(CLOCK_MONOTONIC, &now);
	return (int64_t)(now.tv_sec - t->tv_sec) * 1000000 + (now.tv_nsec - t->tv_nsec) / 1000;
}

/* One step (see compact_job). */
static int compact_step(vf_txn *txn, void *arg)
{
	compact_job *j = arg;
	vf_store *s = j->v->store;
	vf_counters cnt;
	vf_genmeta m;
	vf_gen *g = NULL;
	fold f = {0};
	uint8_t *buf = NULL;
	size_t bufcap = 0;
	struct timespec t0;
	int rc;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	j->s_gen = j->gen;
	j->s_upto = j->upto;
	j->s_pending0 = j->pending0;
	j->s_next = j->next;
	j->s_rewritten = j->rewritten;
	j->s_done = 0;
	uint64_t active = vf_load_active(txn, s);
	if (!active) {
		vf_seterr(j->err, j->errlen, "compact: there is no active generation");
		return -ENOENT;
	}
	if (active != j->s_gen) { /* the first step, or another generation now */
		j->s_gen = active;
		j->s_upto = 0;
		j->s_next = 0;
		j->s_rewritten = 0;
	}
	if ((rc = vf_load_counters(txn, s, &cnt)) || (rc = vf_load_genmeta(txn, s, active, &m)) ||
	    (rc = vf_gen_get(j->v, txn, active, &g)))
		return rc;
	/* rows the generation does not cover yet become delta postings first
	 * (writes made while another generation was active), COMPACT_SYNC
	 * changes a step: queries meanwhile scan the rest exactly */
	int resync = m.synced_seq < cnt.seq;
	if (resync &&
	    (rc = vf_sync_generation(j->v, txn, g, &m, m.synced_seq + j->sync.step, &cnt)))
		goto out;
	j->s_behind = cnt.seq - m.synced_seq;
	if (j->s_behind) {
		rc = vf_save_genmeta(txn, s, &m); /* a step of syncing only */
		goto out;
	}
	if (j->s_upto == 0) {
		j->s_upto = cnt.seq;
		j->s_pending0 = m.pending;
	}
	for (uint32_t done = 0; j->s_next < m.nlist && rc == 0; j->s_next++) {
		if (done && (uint64_t)vf_us_since(&t0) >= j->step_us)
			break; /* at least one cluster a step */
		vf_manifest mf;
		uint32_t c = j->s_next;
		if ((rc = vf_load_manifest(txn, s, m.id, c, &mf)))
			break;
		if (mf.deltas == 0 && mf.tombstones == 0)
			continue;
		fold_how how = {NULL, NULL, 0, j->err, j->errlen};
		rc = compact_cluster(txn, s, &m, c, j->s_upto, &how, &f, &buf, &bufcap);
		j->s_rewritten++;
		done++;
	}
	if (rc == 0 && j->s_next >= m.nlist) {
		/* the last step */
		if (j->s_upto > m.blocks_seq)
			m.blocks_seq = j->s_upto;
		m.pending -= m.pending < j->s_pending0 ? m.pending : j->s_pending0;
		cnt.compactions++;
		j->s_done = 1;
		if ((rc = vf_save_genmeta(txn, s, &m)) == 0 &&
		    (rc = vf_save_counters(txn, s, &cnt)) == 0)
			rc = trim_changes(txn, s, j->changes, &j->s_more);
	} else if (rc == 0 && resync) {
		rc = vf_save_genmeta(txn, s, &m);
	}
out:
	vf_gen_put(j->v, g);
	free(f.codes);
	free(f.data);
	free(buf);
	return rc;
}

#define COMPACT_RESTARTS 3    /* times a compaction starts over on a new
			       * active generation before giving up */

int vf_compact_steps(vecfs *v, uint32_t *clusters, uint64_t step_us, uint64_t sync,
		     int (*between)(void *), void *arg, char *err, size_t errlen)
{
	compact_job j = {.v = v, .step_us = step_us, .between = between, .arg = arg,
			 .changes = sync ? sync : 1, .err = err, .errlen = errlen};
	int restarts = 0, rc;
	vf_catchup_init(&j.sync, sync, UINT64_MAX);
	for (;;) {
		if ((rc = vf_write(v->store, compact_step, &j)))
			break;
		if (j.gen && j.s_gen != j.gen && ++restarts > COMPACT_RESTARTS) {
			vf_seterr(err, errlen, "compact: the active generation changed %d times "
				  "meanwhile", restarts);
			rc = -EAGAIN;
			break;
		}
		j.gen = j.s_gen;
		j.upto = j.s_upto;
		j.pending0 = j.s_pending0;
		j.next = j.s_next;
		j.rewritten = j.s_rewritten;
		if (j.s_done)
			break;
		vf_catchup_after(&j.sync, j.s_behind);
		if (j.between && j.between(j.arg)) {
			rc = -ECANCELED;
			break;
		}
		vf_write_yield(v->store);
	}
	/* what the change log no longer needs, `changes` entries a step */
	while (rc == 0 && j.s_more) {
		vf_write_yield(v->store);
		rc = vf_write(v->store, trim_step, &j);
	}
	if (rc == 0 && clusters)
		*clusters = j.rewritten;
	if (rc && rc != -ENOENT && err && errlen && !err[0])
		vf_seterr(err, errlen, "compact: %s", strerror(-rc));
	return rc;
}

/* With build_mu held: one maintenance job at a time, like builds. */
int vf_compact_locked(vecfs *v, uint32_t *clusters, char *err, size_t errlen)
{
	VF_ASSERT_HELD(&v->build_mu);
	uint64_t sync = v->sync_step ? v->sync_step : COMPACT_SYNC;
	return vf_compact_steps(v, clusters, COMPACT_STEP_US, sync, NULL, NULL, err, errlen);
}

int vecfs_compact(vecfs *v, uint32_t *clusters, char *err, size_t errlen)
{
	pthread_mutex_lock(&v->build_mu);
	int rc = vf_compact_locked(v, clusters, err, errlen);
	pthread_mutex_unlock(&v->build_mu);
	return rc;
}
