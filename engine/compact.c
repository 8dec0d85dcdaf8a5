/*
 * engine/compact.c - maintenance of a generation: compaction folds a
 * cluster's delta postings into packed posting blocks and drops the
 * postings that tombstones or newer versions made dead; rebalancing
 * splits overgrown clusters and merges tiny ones into a new generation
 * that copies the posting blocks of the clusters it leaves alone; a
 * background worker compacts when deltas pile up (and rebalances when
 * clusters grew lopsided); old generations are retired.
 */
#include "internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "changes.h"
#include "keys.h"
#include "record.h"

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
	if (f->n == f->cap) {
		size_t nc = f->cap ? f->cap * 2 : 256;
		vf_code *n = realloc(f->codes, nc * sizeof *n);
		if (!n)
			return -ENOMEM;
		f->codes = n;
		f->cap = nc;
	}
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

static int cmp_code(const void *a, const void *b)
{
	const vf_code *x = a, *y = b;
	return x->id < y->id ? -1 : x->id > y->id;
}

/* Posting i of an opened block whose columns were checked, as a code
 * pointing into the block, its planes copied to `planes`: 0, or -EIO when
 * its key is damaged. */
static int block_code(const vf_block *b, uint32_t i, vf_code *code, uint8_t *planes)
{
	code->id = vf_block_id(b, i);
	code->seq = vf_block_seq(b, i);
	code->has_payload = vf_block_has_payload(b, i);
	code->add = vf_block_f1(b, 0, i);
	code->r1 = vf_block_f1(b, 1, i);
	code->e1 = vf_block_f1(b, 2, i);
	code->rb = vf_block_f2(b, 0, i);
	code->eb = vf_block_f2(b, 1, i);
	code->cdot = vf_block_f2(b, 2, i);
	vf_block_planes(b, i, planes);
	code->planes = planes;
	if (!(code->key = vf_block_key(b, i, &code->keylen)))
		return -EIO;
	return 0;
}

/* Open a posting block and check every column. */
static int block_open_checked(const MDB_val *d, vf_block *b)
{
	int rc = vf_block_open(d->mv_data, d->mv_size, b);
	for (int col = 0; col < VF_NCOL && rc == 0; col++)
		rc = vf_block_check(NULL, b, col);
	return rc;
}

/* Pack codes[0..n) (in that order) into evenly filled posting blocks
 * 0, 1, ... of cluster c of generation m and save its manifest, which
 * counts `deltas` delta postings left beside them. */
static int write_blocks(MDB_txn *txn, vf_store *s, const vf_genmeta *m, uint32_t c,
			const vf_code *codes, size_t n, uint64_t deltas, uint8_t **buf,
			size_t *bufcap)
{
	vf_manifest mf = {.deltas = deltas};
	uint32_t nblocks = (uint32_t)((n + VF_BLOCK_TARGET - 1) / VF_BLOCK_TARGET);
	int rc;
	for (uint32_t bi = 0; bi < nblocks; bi++) {
		size_t a = n * bi / nblocks, e = n * (bi + 1) / nblocks;
		size_t sz = vf_block_size(codes + a, (uint32_t)(e - a), m->pdim, m->bits);
		if (sz > *bufcap) {
			uint8_t *nb = realloc(*buf, sz);
			if (!nb)
				return -ENOMEM;
			*buf = nb;
			*bufcap = sz;
		}
		vf_block_write(*buf, codes + a, (uint32_t)(e - a), m->dim, m->pdim, m->bits);
		vf_postkey bk = vf_post_key(m->id, c, VF_PK_BLOCK, bi);
		if ((rc = vf_put(txn, s->postings, bk.b, sizeof bk.b, *buf, sz, 0)))
			return vf_mdb_err(rc);
		mf.vectors += e - a;
	}
	mf.blocks = nblocks;
	return vf_save_manifest(txn, s, m->id, c, &mf);
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

/* Rewrite cluster c of g from its live postings: its blocks and its delta
 * postings up to change `upto`; later delta postings stay.  Every
 * tombstone is applied and goes (what it hides goes with it). */
static int compact_cluster(MDB_txn *txn, vf_store *s, const vf_genmeta *m, uint32_t c,
			   uint64_t upto, fold *f, uint8_t **buf, size_t *bufcap)
{
	uint64_t kept = 0;
	vf_postkey start = vf_post_key(m->id, c, VF_PK_TOMB, 0);
	MDB_val k = {sizeof start.b, start.b}, d;
	MDB_cursor *cur;
	vf_tombs tombs = {0};
	vf_dirty none;
	size_t pbytes = (size_t)m->bits * (m->pdim / 8);
	uint8_t *planes = malloc(pbytes); /* one block posting's, until copied */
	int rc;
	vf_dirty_init(&none); /* the generation was synced just before */
	f->n = f->len = 0;
	if (!planes)
		return -ENOMEM;
	if ((rc = mdb_cursor_open(txn, s->postings, &cur))) {
		free(planes);
		return vf_mdb_err(rc);
	}
	/* collect live postings, deleting every tombstone, block and delta */
	for (rc = mdb_cursor_get(cur, &k, &d, MDB_SET_RANGE); rc == 0;
	     rc = mdb_cursor_get(cur, &k, &d, MDB_GET_CURRENT)) {
		const uint8_t *kb = k.mv_data;
		if (k.mv_size != sizeof start.b || memcmp(kb, start.b, 12))
			break;
		uint8_t kind = vf_postkey_kind(kb);
		if (kind == VF_PK_TOMB) {
			uint64_t ks;
			if (d.mv_size != 8) {
				rc = -EIO;
				break;
			}
			memcpy(&ks, d.mv_data, 8);
			if ((rc = vf_tombs_add(&tombs, vf_postkey_sub(kb), ks)))
				break;
		} else if (kind == VF_PK_BLOCK) {
			vf_block b;
			if ((rc = block_open_checked(&d, &b)))
				break;
			for (uint32_t i = 0; i < b.n && rc == 0; i++) {
				vf_code code;
				if (vf_posting_stale(&tombs, &none, vf_block_id(&b, i), vf_block_seq(&b, i)))
					continue;
				if ((rc = block_code(&b, i, &code, planes)) == 0)
					rc = fold_add(f, &code, pbytes);
			}
			if (rc)
				break;
		} else if (kind == VF_PK_DELTA) {
			vf_code code;
			if ((rc = vf_delta_open(d.mv_data, d.mv_size, m->dim, m->pdim, m->bits, &code)))
				break;
			if (!vf_posting_stale(&tombs, &none, code.id, code.seq)) {
				if (code.seq > upto) {
					kept++; /* newer than this compaction */
					if ((rc = mdb_cursor_get(cur, &k, &d, MDB_NEXT)))
						break;
					continue;
				}
				if ((rc = fold_add(f, &code, pbytes)))
					break;
			}
		}
		if (kind != VF_PK_MANIFEST && (rc = mdb_cursor_del(cur, 0)))
			break;
		if (kind == VF_PK_MANIFEST && (rc = mdb_cursor_get(cur, &k, &d, MDB_NEXT)))
			break;
	}
	mdb_cursor_close(cur);
	vf_tombs_free(&tombs);
	free(planes);
	if (rc == MDB_NOTFOUND || rc == EINVAL)
		rc = 0;
	if (rc)
		return vf_mdb_err(rc);
	/* pointers into the copied data, in id order */
	for (size_t i = 0; i < f->n; i++) {
		vf_code *o = &f->codes[i];
		uint8_t *p = f->data + (uintptr_t)o->planes;
		o->planes = p;
		o->key = (const char *)p + pbytes;
	}
	if (f->n > 1)
		qsort(f->codes, f->n, sizeof *f->codes, cmp_code);
	return write_blocks(txn, s, m, c, f->codes, f->n, kept, buf, bufcap);
}

/* Drop change-log entries no generation needs any more: those at or below
 * every generation's sync and block points. */
static int trim_changes(MDB_txn *txn, vf_store *s, uint64_t max, int *more)
{
	MDB_cursor *cur;
	MDB_val k, d;
	uint64_t keep_after = UINT64_MAX;
	int rc = mdb_cursor_open(txn, s->gens, &cur);
	if (rc)
		return rc;
	for (rc = mdb_cursor_get(cur, &k, &d, MDB_FIRST); rc == 0;
	     rc = mdb_cursor_get(cur, &k, &d, MDB_NEXT)) {
		vf_genmeta m;
		if (k.mv_size != 17 || ((uint8_t *)k.mv_data)[8] != VF_GK_META ||
		    d.mv_size != sizeof m)
			continue;
		memcpy(&m, d.mv_data, sizeof m);
		if (m.state == VECFS_GEN_FAILED)
			continue;
		uint64_t need = m.synced_seq < m.blocks_seq ? m.synced_seq : m.blocks_seq;
		if (m.state == VECFS_GEN_BUILDING)
			need = m.snap_seq;
		if (need < keep_after)
			keep_after = need;
	}
	mdb_cursor_close(cur);
	if (rc != MDB_NOTFOUND)
		return rc;
	if ((rc = mdb_cursor_open(txn, s->changes, &cur)))
		return rc;
	*more = 0;
	uint64_t n = 0;
	for (rc = mdb_cursor_get(cur, &k, &d, MDB_FIRST);
	     rc == 0 && vf_rd_be64(k.mv_data) <= keep_after;
	     rc = mdb_cursor_get(cur, &k, &d, MDB_GET_CURRENT)) {
		if (n++ == max) {
			*more = 1; /* the next step goes on */
			break;
		}
		if ((rc = mdb_cursor_del(cur, 0)))
			break;
	}
	mdb_cursor_close(cur);
	return rc == MDB_NOTFOUND || rc == EINVAL || rc == 0 ? 0 : rc;
}

/* A step that only trims the change log (after the last folding step). */
static int trim_step(MDB_txn *txn, void *arg)
{
	compact_job *j = arg;
	return trim_changes(txn, j->v->store, j->changes, &j->s_more);
}

/* Microseconds since t (CLOCK_MONOTONIC). */
static int64_t us_since(const struct timespec *t)
{
	struct timespec now;
	clock_gettime(CLOCK_MONOTONIC, &now);
	return (int64_t)(now.tv_sec - t->tv_sec) * 1000000 + (now.tv_nsec - t->tv_nsec) / 1000;
}

/* One step (see compact_job). */
static int compact_step(MDB_txn *txn, void *arg)
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
		if (done && (uint64_t)us_since(&t0) >= j->step_us)
			break; /* at least one cluster a step */
		vf_manifest mf;
		uint32_t c = j->s_next;
		if ((rc = vf_load_manifest(txn, s, m.id, c, &mf)))
			break;
		if (mf.deltas == 0 && mf.tombstones == 0)
			continue;
		rc = compact_cluster(txn, s, &m, c, j->s_upto, &f, &buf, &bufcap);
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
static int compact_locked(vecfs *v, uint32_t *clusters, char *err, size_t errlen)
{
	return vf_compact_steps(v, clusters, COMPACT_STEP_US, COMPACT_SYNC, NULL, NULL, err,
				errlen);
}

int vecfs_compact(vecfs *v, uint32_t *clusters, char *err, size_t errlen)
{
	pthread_mutex_lock(&v->build_mu);
	int rc = compact_locked(v, clusters, err, errlen);
	pthread_mutex_unlock(&v->build_mu);
	return rc;
}

/* ------------------------------------------------------------ rebalance */

/*
 * A local rebalance works from a snapshot of the compacted active
 * generation.  A cluster with more than RB_SPLIT_FACTOR times the mean
 * number of vectors (and at least RB_SPLIT_MIN) is split in two by a
 * 2-means on its exact vectors; a cluster with fewer than RB_MERGE_FACTOR
 * times the mean is merged: each of its vectors goes to the nearest
 * remaining centroid.  Around each split, the vectors of its RB_NEIGHBOURS
 * nearest clusters that are now nearer one of the new centroids move there.
 *
 * The result is a new generation with the parent's rotation, bits, dim and
 * metric, so a code stays valid as long as its cluster keeps its centroid.
 * A cluster whose members did not change has its posting blocks copied byte
 * for byte (under a new id when it moves into the hole a merge left); one
 * that kept its centroid but lost or gained vectors keeps the codes of the
 * vectors it keeps and encodes only the arrivals; both halves of a split
 * are encoded afresh.  A split keeps its id for one half; the other half
 * takes the id of a merged cluster, or a new id at the end.
 */

#define RB_SPLIT_FACTOR 2.0
#define RB_SPLIT_MIN 64
#define RB_MERGE_FACTOR 0.25
#define RB_NEIGHBOURS 8
#define RB_TRAIN_MAX 20000   /* vectors a split's 2-means trains on */
#define RB_NEW UINT32_MAX    /* a final cluster with a new centroid */

enum { RB_KEEP, RB_SPLIT, RB_MERGE };

/* One cluster of the parent. */
typedef struct rb_src {
	int role;
	uint32_t fin, fin2;     /* final ids: of its centroid (a split: first
				   half) and of a split's second half */
	uint32_t split;         /* a split: its index in rebal.splits */
	uint64_t b0, nb;        /* its blocks: rebal.bvals[b0 .. b0 + nb) */
	uint64_t n;             /* postings in them */
	uint32_t *near;         /* splits that count it among their neighbours */
	uint32_t nnear, cnear;
	int loaded;
	vf_code *codes;         /* its postings, pointing into the snapshot */
	uint8_t *planes;        /* their codes' planes */
	uint32_t *dest;         /* final cluster of each */
} rb_src;

/* One cluster of the new generation. */
typedef struct rb_dst {
	uint32_t src;           /* parent cluster whose centroid it keeps, or RB_NEW */
	int changed;            /* its members differ from src's */
	uint64_t e0, ne;        /* changed: its postings, rebal.codes[e0 .. e0 + ne) */
} rb_dst;

typedef struct rebal {
	vecfs *v;
	vf_task t;
	int force;              /* publish even when nothing is split or merged */
	MDB_txn *txn;           /* the snapshot */
	vf_genmeta pm, m;       /* the parent, the new generation */
	vf_gen *pg;             /* the parent's centroids */
	uint32_t nlist;         /* the parent's */
	size_t pb;              /* plane bytes of a code */
	rb_src *src;            /* nlist */
	MDB_val *bvals;         /* the parent's blocks, cluster by cluster */
	uint64_t nbvals, cbvals;
	uint64_t total;         /* postings in them */
	uint32_t *splits;       /* parent clusters split, ascending */
	float *halves;          /* their new centroids: 2 * dim each */
	uint32_t nsplit, nmerge;
	float *cent;            /* the new generation's centroids */
	rb_dst *dst;            /* m.nlist */
	vf_gen g;               /* its routing state */
	int have_g;
	vf_code *codes;         /* postings of changed clusters, by cluster */
	uint8_t *planes;        /* codes encoded afresh */
	uint32_t *idmap;
	uint64_t id_limit;
	float *x;               /* dim scratch */
} rebal;

/* A posting of parent cluster o: its record's vector in index space, in
 * r->x.  A posting whose record changed or went since the snapshot's
 * parent was compacted is stale (queries skip it, the change log holds the
 * newer version): the cluster's centroid stands in for it. */
static const float *rb_vec(rebal *r, const vf_code *c, uint32_t o)
{
	vf_key64 k = vf_key_u64(c->id);
	MDB_val d;
	vf_record rec;
	uint32_t dim = r->pm.dim;
	if (vf_get(r->txn, r->v->store->records, k.b, 8, &d) == 0 &&
	    vf_record_decode(d.mv_data, d.mv_size, &rec) == 0 && rec.dim == dim &&
	    rec.seq == c->seq) {
		memcpy(r->x, rec.vec, sizeof(float) * dim);
		if (r->pm.metric == VECFS_COSINE)
			vf_to_index_space(VECFS_COSINE, r->x, r->x, dim);
	} else {
		memcpy(r->x, r->pg->centroids + (size_t)o * dim, sizeof(float) * dim);
	}
	return r->x;
}

static float rb_dist(const rebal *r, const float *x, const float *c)
{
	return vf_kernels_get()->l2sq(x, c, r->pm.dim);
}

/* The parent's posting blocks: where each cluster's are, how many postings
 * each cluster has.  Its tombstones and delta postings (writes after its
 * last compaction) are left out: the new generation starts at the parent's
 * blocks_seq and takes every later change from the change log. */
static int rb_scan(rebal *r)
{
	uint8_t p[8];
	MDB_val k = {8, p}, d;
	MDB_cursor *cur;
	vf_be64(p, r->pm.id);
	int rc = mdb_cursor_open(r->txn, r->v->store->postings, &cur);
	if (rc)
		return vf_mdb_err(rc);
	for (rc = mdb_cursor_get(cur, &k, &d, MDB_SET_RANGE);
	     rc == 0 && k.mv_size == sizeof(vf_postkey) && !memcmp(k.mv_data, p, 8);
	     rc = mdb_cursor_get(cur, &k, &d, MDB_NEXT)) {
		const uint8_t *kb = k.mv_data;
		if (vf_postkey_kind(kb) != VF_PK_BLOCK)
			continue;
		uint32_t c = vf_postkey_cluster(kb);
		vf_block b;
		if (c >= r->nlist || vf_block_open(d.mv_data, d.mv_size, &b)) {
			rc = -EIO;
			break;
		}
		if (r->nbvals == r->cbvals) {
			uint64_t nc = r->cbvals ? r->cbvals * 2 : 256;
			MDB_val *nv = realloc(r->bvals, sizeof *nv * nc);
			if (!nv) {
				rc = -ENOMEM;
				break;
			}
			r->bvals = nv;
			r->cbvals = nc;
		}
		rb_src *sc = &r->src[c];
		if (sc->nb == 0)
			sc->b0 = r->nbvals;
		r->bvals[r->nbvals++] = d;
		sc->nb++;
		sc->n += b.n;
		r->total += b.n;
	}
	mdb_cursor_close(cur);
	if (rc == MDB_NOTFOUND)
		rc = 0;
	return rc > 0 ? vf_mdb_err(rc) : rc;
}

/* Decode the postings of parent cluster o (every column checked); each
 * stays in o's final cluster until moved. */
static int rb_load(rebal *r, uint32_t o)
{
	rb_src *sc = &r->src[o];
	if (sc->loaded)
		return 0;
	sc->codes = malloc(sizeof(vf_code) * (sc->n ? sc->n : 1));
	sc->dest = malloc(sizeof(uint32_t) * (sc->n ? sc->n : 1));
	sc->planes = malloc(r->pb * (sc->n ? sc->n : 1));
	if (!sc->codes || !sc->dest || !sc->planes)
		return -ENOMEM;
	uint64_t k = 0;
	for (uint64_t bi = 0; bi < sc->nb; bi++) {
		vf_block b;
		int rc = block_open_checked(&r->bvals[sc->b0 + bi], &b);
		if (rc)
			return rc;
		if (b.dim != r->pm.dim || b.pdim != r->pm.pdim || b.bits != r->pm.bits ||
		    k + b.n > sc->n)
			return -EIO;
		for (uint32_t i = 0; i < b.n; i++, k++) {
			if ((rc = block_code(&b, i, &sc->codes[k], sc->planes + k * r->pb)))
				return rc;
			sc->dest[k] = sc->fin;
		}
	}
	if (k != sc->n)
		return -EIO;
	sc->loaded = 1;
	return 0;
}

/* 2-means on the exact vectors of parent cluster o.  A split that leaves
 * one side empty (duplicates) is not made. */
static int rb_split(rebal *r, uint32_t o)
{
	rb_src *sc = &r->src[o];
	uint32_t dim = r->pm.dim;
	int rc = rb_load(r, o);
	if (rc)
		return rc;
	uint64_t ns = sc->n < RB_TRAIN_MAX ? sc->n : RB_TRAIN_MAX;
	float *pts = malloc(sizeof(float) * ns * dim);
	float *h = r->halves + (size_t)r->nsplit * 2 * dim;
	if (!pts)
		return -ENOMEM;
	for (uint64_t i = 0; i < ns; i++)
		memcpy(pts + i * dim, rb_vec(r, &sc->codes[i * sc->n / ns], o), sizeof(float) * dim);
	rc = vf_kmeans(pts, ns, dim, 2, 10, r->pm.seed ^ ((o + 1) * 0x9e3779b97f4a7c15ULL),
		       r->v->threads, h, NULL, NULL);
	free(pts);
	if (rc)
		return rc;
	/* dest: 0 or 1, the half, until the final ids are known */
	uint64_t n1 = 0;
	for (uint64_t k = 0; k < sc->n; k++) {
		const float *x = rb_vec(r, &sc->codes[k], o);
		sc->dest[k] = rb_dist(r, x, h + dim) < rb_dist(r, x, h);
		n1 += sc->dest[k];
	}
	if (n1 == 0 || n1 == sc->n)
		return 0;
	sc->role = RB_SPLIT;
	sc->split = r->nsplit;
	r->splits[r->nsplit++] = o;
	return 0;
}

/* Final cluster ids and centroids.  A split keeps its id for its first
 * half; the second half takes a merged cluster's id while there is one,
 * else the next new id.  Ids merges leave free below the new nlist are
 * filled by moving the last clusters down. */
static int rb_assign_ids(rebal *r)
{
	uint32_t nl = r->nlist, dim = r->pm.dim;
	uint32_t *merged = malloc(sizeof(uint32_t) * (r->nmerge ? r->nmerge : 1));
	uint32_t ntent = nl + (r->nsplit > r->nmerge ? r->nsplit - r->nmerge : 0);
	uint32_t *tmap = malloc(sizeof(uint32_t) * ntent);
	uint8_t *hole = calloc(ntent, 1);
	int rc = -ENOMEM;
	if (!merged || !tmap || !hole)
		goto out;
	uint32_t nm = 0, next = nl, mi = 0;
	for (uint32_t c = 0; c < nl; c++) {
		r->src[c].fin = c;
		if (r->src[c].role == RB_MERGE)
			merged[nm++] = c;
	}
	for (uint32_t j = 0; j < r->nsplit; j++)
		r->src[r->splits[j]].fin2 = mi < nm ? merged[mi++] : next++;
	uint32_t nlist2 = nl + r->nsplit - r->nmerge;
	for (uint32_t c = 0; c < ntent; c++)
		tmap[c] = c;
	for (uint32_t k = mi; k < nm; k++)
		hole[merged[k]] = 1;
	uint32_t last = ntent;
	for (uint32_t k = mi; k < nm && merged[k] < nlist2; k++) {
		do
			last--;
		while (hole[last]);
		tmap[last] = merged[k];
	}
	r->m.nlist = nlist2;
	r->cent = malloc(sizeof(float) * nlist2 * dim);
	r->dst = calloc(nlist2, sizeof *r->dst);
	if (!r->cent || !r->dst)
		goto out;
	for (uint32_t f = 0; f < nlist2; f++)
		r->dst[f].src = UINT32_MAX - 1; /* unfilled */
	rc = -EIO;
	for (uint32_t c = 0; c < nl; c++) {
		rb_src *sc = &r->src[c];
		if (sc->role == RB_MERGE)
			continue;
		sc->fin = tmap[sc->fin];
		if (sc->fin >= nlist2 || r->dst[sc->fin].src != UINT32_MAX - 1)
			goto out;
		if (sc->role == RB_KEEP) {
			r->dst[sc->fin].src = c;
			memcpy(r->cent + (size_t)sc->fin * dim, r->pg->centroids + (size_t)c * dim,
			       sizeof(float) * dim);
			continue;
		}
		sc->fin2 = tmap[sc->fin2];
		if (sc->fin2 >= nlist2 || r->dst[sc->fin2].src != UINT32_MAX - 1)
			goto out;
		const float *h = r->halves + (size_t)sc->split * 2 * dim;
		r->dst[sc->fin].src = r->dst[sc->fin2].src = RB_NEW;
		r->dst[sc->fin].changed = r->dst[sc->fin2].changed = 1;
		memcpy(r->cent + (size_t)sc->fin * dim, h, sizeof(float) * dim);
		memcpy(r->cent + (size_t)sc->fin2 * dim, h + dim, sizeof(float) * dim);
	}
	for (uint32_t f = 0; f < nlist2; f++)
		if (r->dst[f].src == UINT32_MAX - 1)
			goto out;
	/* postings loaded so far now name final clusters */
	for (uint32_t c = 0; c < nl; c++) {
		rb_src *sc = &r->src[c];
		if (sc->loaded)
			for (uint64_t k = 0; k < sc->n; k++)
				sc->dest[k] = sc->role == RB_SPLIT && sc->dest[k] ? sc->fin2 : sc->fin;
	}
	rc = 0;
out:
	free(merged);
	free(tmap);
	free(hole);
	return rc;
}

static int rb_add_near(rb_src *sc, uint32_t split)
{
	if (sc->nnear == sc->cnear) {
		uint32_t nc = sc->cnear ? sc->cnear * 2 : 4;
		uint32_t *n = realloc(sc->near, sizeof *n * nc);
		if (!n)
			return -ENOMEM;
		sc->near = n;
		sc->cnear = nc;
	}
	sc->near[sc->nnear++] = split;
	return 0;
}

/* The RB_NEIGHBOURS clusters nearest each split (by the parent's
 * centroids; merged clusters aside: all their vectors move anyway). */
static int rb_neighbours(rebal *r)
{
	uint32_t dim = r->pm.dim;
	const float *pc = r->pg->centroids;
	for (uint32_t j = 0; j < r->nsplit; j++) {
		uint32_t s = r->splits[j], best[RB_NEIGHBOURS], nb = 0;
		float bd[RB_NEIGHBOURS];
		for (uint32_t o = 0; o < r->nlist; o++) {
			if (o == s || r->src[o].role == RB_MERGE)
				continue;
			float d = rb_dist(r, pc + (size_t)s * dim, pc + (size_t)o * dim);
			if (nb == RB_NEIGHBOURS && !(d < bd[nb - 1]))
				continue;
			uint32_t i = nb < RB_NEIGHBOURS ? nb++ : nb - 1;
			for (; i > 0 && d < bd[i - 1]; i--) {
				bd[i] = bd[i - 1];
				best[i] = best[i - 1];
			}
			bd[i] = d;
			best[i] = o;
		}
		for (uint32_t i = 0; i < nb; i++) {
			int rc = rb_add_near(&r->src[best[i]], j);
			if (rc)
				return rc;
		}
	}
	return 0;
}

/* Where every posting of the affected clusters goes. */
static int rb_reassign(rebal *r)
{
	uint32_t dim = r->pm.dim;
	int rc;
	for (uint32_t o = 0; o < r->nlist; o++) {
		rb_src *sc = &r->src[o];
		if (sc->role == RB_MERGE) {
			/* to the nearest remaining centroid */
			if ((rc = rb_load(r, o)))
				return rc;
			for (uint64_t k = 0; k < sc->n; k++)
				sc->dest[k] = vf_gen_nearest(&r->g, rb_vec(r, &sc->codes[k], o));
		} else if (sc->nnear) {
			/* boundary vectors: to a new centroid that is nearer */
			if ((rc = rb_load(r, o)))
				return rc;
			for (uint64_t k = 0; k < sc->n; k++) {
				const float *x = rb_vec(r, &sc->codes[k], o);
				uint32_t best = sc->dest[k];
				float bd = rb_dist(r, x, r->cent + (size_t)best * dim);
				for (uint32_t i = 0; i < sc->nnear; i++) {
					const rb_src *sp = &r->src[r->splits[sc->near[i]]];
					uint32_t h[2] = {sp->fin, sp->fin2};
					for (int t = 0; t < 2; t++) {
						float d = rb_dist(r, x, r->cent + (size_t)h[t] * dim);
						if (d < bd) {
							bd = d;
							best = h[t];
						}
					}
				}
				sc->dest[k] = best;
			}
		} else {
			continue;
		}
		if (vf_task_report(&r->t, "assign", (int)((uint64_t)o * 100 / r->nlist)))
			return -ECANCELED;
	}
	/* which final clusters lose or gain postings */
	for (uint32_t o = 0; o < r->nlist; o++) {
		rb_src *sc = &r->src[o];
		if (!sc->loaded)
			continue;
		for (uint64_t k = 0; k < sc->n; k++)
			if (sc->role == RB_MERGE || sc->dest[k] != sc->fin) {
				r->dst[sc->dest[k]].changed = 1;
				if (sc->role != RB_MERGE)
					r->dst[sc->fin].changed = 1;
			}
	}
	/* a changed cluster keeps the codes of the postings it keeps */
	for (uint32_t f = 0; f < r->m.nlist; f++)
		if (r->dst[f].changed && r->dst[f].src != RB_NEW &&
		    (rc = rb_load(r, r->dst[f].src)))
			return rc;
	return 0;
}

/* Gather the postings of changed clusters by final cluster, encode those
 * whose centroid changed, order each cluster's by id. */
static int rb_encode(rebal *r)
{
	uint32_t nl2 = r->m.nlist;
	uint64_t total = 0, fresh = 0;
	for (uint32_t o = 0; o < r->nlist; o++) {
		rb_src *sc = &r->src[o];
		if (!sc->loaded)
			continue;
		for (uint64_t k = 0; k < sc->n; k++) {
			rb_dst *d = &r->dst[sc->dest[k]];
			if (!d->changed)
				continue;
			d->ne++;
			total++;
			fresh += d->src != o;
		}
	}
	uint64_t at = 0;
	for (uint32_t f = 0; f < nl2; f++) {
		r->dst[f].e0 = at;
		at += r->dst[f].ne;
		r->dst[f].ne = 0;
	}
	r->codes = malloc(sizeof(vf_code) * (total ? total : 1));
	r->planes = malloc(r->pb * (fresh ? fresh : 1));
	if (!r->codes || !r->planes)
		return -ENOMEM;
	vf_encoder enc;
	int rc = vf_encoder_init(&enc, &r->g.rot, r->m.bits, r->m.metric == VECFS_DOT);
	if (rc)
		return rc;
	uint64_t done = 0;
	for (uint32_t o = 0; o < r->nlist && rc == 0; o++) {
		rb_src *sc = &r->src[o];
		if (!sc->loaded)
			continue;
		for (uint64_t k = 0; k < sc->n; k++) {
			uint32_t f = sc->dest[k];
			rb_dst *d = &r->dst[f];
			if (!d->changed)
				continue;
			vf_code *c = &r->codes[d->e0 + d->ne++];
			*c = sc->codes[k];
			if (d->src == o)
				continue; /* same centroid: the code stands */
			vf_code e;
			vf_encode(&enc, rb_vec(r, c, o), r->cent + (size_t)f * r->m.dim,
				  r->g.rc + (size_t)f * r->m.pdim, r->planes + done * r->pb, &e);
			e.id = c->id;
			e.seq = c->seq;
			e.has_payload = c->has_payload;
			e.key = c->key;
			e.keylen = c->keylen;
			*c = e;
			if (++done % 4096 == 0 && vf_task_report(&r->t, "encode", (int)(done * 100 / fresh)))
				rc = -ECANCELED;
		}
	}
	vf_encoder_free(&enc);
	if (rc)
		return rc;
	for (uint32_t f = 0; f < nl2; f++)
		if (r->dst[f].ne > 1)
			qsort(r->codes + r->dst[f].e0, r->dst[f].ne, sizeof(vf_code), cmp_code);
	return vf_task_report(&r->t, "encode", 100) ? -ECANCELED : 0;
}

/* The new generation's assignment map: the final cluster of every id in
 * the parent's blocks. */
static int rb_idmap(rebal *r)
{
	r->idmap = malloc(sizeof(uint32_t) * (r->id_limit ? r->id_limit : 1));
	if (!r->idmap)
		return -ENOMEM;
	memset(r->idmap, 0xFF, sizeof(uint32_t) * (r->id_limit ? r->id_limit : 1));
	for (uint32_t o = 0; o < r->nlist; o++) {
		rb_src *sc = &r->src[o];
		if (sc->loaded) {
			for (uint64_t k = 0; k < sc->n; k++) {
				if (sc->codes[k].id >= r->id_limit)
					return -EIO;
				r->idmap[sc->codes[k].id] = sc->dest[k];
			}
			continue;
		}
		for (uint64_t bi = 0; bi < sc->nb; bi++) {
			vf_block b;
			const MDB_val *d = &r->bvals[sc->b0 + bi];
			if (vf_block_open(d->mv_data, d->mv_size, &b) ||
			    vf_block_check(NULL, &b, VF_COL_IDS))
				return -EIO;
			for (uint32_t i = 0; i < b.n; i++) {
				uint64_t id = vf_block_id(&b, i);
				if (id >= r->id_limit)
					return -EIO;
				r->idmap[id] = sc->fin;
			}
		}
	}
	return 0;
}

typedef struct rb_blocks_job {
	rebal *r;
	uint32_t f_lo, f_hi;    /* final clusters written by this transaction */
	uint8_t *buf;
	size_t bufcap;
} rb_blocks_job;

static int rb_blocks_fn(MDB_txn *txn, void *arg)
{
	rb_blocks_job *j = arg;
	rebal *r = j->r;
	vf_store *s = r->v->store;
	int rc;
	for (uint32_t f = j->f_lo; f < j->f_hi; f++) {
		const rb_dst *d = &r->dst[f];
		if (d->changed) {
			if ((rc = write_blocks(txn, s, &r->m, f, r->codes + d->e0, d->ne, 0, &j->buf,
					       &j->bufcap)))
				return rc;
			continue;
		}
		/* untouched: the parent's blocks as they are */
		const rb_src *sc = &r->src[d->src];
		for (uint64_t bi = 0; bi < sc->nb; bi++) {
			const MDB_val *v = &r->bvals[sc->b0 + bi];
			vf_postkey k = vf_post_key(r->m.id, f, VF_PK_BLOCK, bi);
			if ((rc = vf_put(txn, s->postings, k.b, sizeof k.b, v->mv_data, v->mv_size, 0)))
				return rc;
		}
		vf_manifest mf = {0};
		mf.vectors = sc->n;
		mf.blocks = (uint32_t)sc->nb;
		if ((rc = vf_save_manifest(txn, s, r->m.id, f, &mf)))
			return rc;
	}
	return 0;
}

static int rb_write(rebal *r)
{
	rb_blocks_job j = {r, 0, 0, NULL, 0};
	size_t per_vec = r->pb + 64; /* code, factors, id, key */
	uint32_t nl2 = r->m.nlist;
	int rc = 0;
	if (vf_task_report(&r->t, "publish", 0))
		return -ECANCELED;
	while (j.f_hi < nl2) {
		j.f_lo = j.f_hi;
		uint64_t bytes = 0;
		while (j.f_hi < nl2 && bytes < VF_PUBLISH_TXN_BYTES) {
			const rb_dst *d = &r->dst[j.f_hi];
			if (d->changed) {
				bytes += d->ne * per_vec + 256;
			} else {
				const rb_src *sc = &r->src[d->src];
				for (uint64_t bi = 0; bi < sc->nb; bi++)
					bytes += r->bvals[sc->b0 + bi].mv_size + 64;
				bytes += 256;
			}
			j.f_hi++;
		}
		if ((rc = vf_write(r->v->store, rb_blocks_fn, &j)))
			break;
		if (vf_task_report(&r->t, "publish", (int)((uint64_t)j.f_hi * 99 / nl2))) {
			rc = -ECANCELED;
			break;
		}
	}
	free(j.buf);
	return rc;
}

/* Snapshot, plan, write, publish.  With build_mu held.  -EALREADY when
 * nothing needs splitting or merging and !r->force (nothing published). */
static int rebalance_locked(rebal *r, int activate, uint64_t *gen_out)
{
	vecfs *v = r->v;
	vf_counters cnt;
	int rc, registered = 0;
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);

	/* every live posting into packed blocks first */
	if ((rc = compact_locked(v, NULL, r->t.err, r->t.errlen))) {
		if (rc == -ENOENT)
			vf_seterr(r->t.err, r->t.errlen, "rebalance: there is no active generation");
		return rc;
	}
	if ((rc = vf_store_reserve(v->store, VF_GEN_RESERVE(v->store))))
		return rc;
	if ((rc = vf_read_begin(v->store, &r->txn)))
		return rc;
	uint64_t active = vf_load_active(r->txn, v->store);
	if (!active) {
		vf_seterr(r->t.err, r->t.errlen, "rebalance: there is no active generation");
		rc = -ENOENT;
		goto out;
	}
	if ((rc = vf_load_counters(r->txn, v->store, &cnt)) ||
	    (rc = vf_load_genmeta(r->txn, v->store, active, &r->pm)) ||
	    (rc = vf_gen_get(v, r->txn, active, &r->pg)))
		goto out;
	r->nlist = r->pm.nlist;
	r->pb = (size_t)r->pm.bits * r->pm.pdim / 8;
	r->id_limit = cnt.next_id;
	r->src = calloc(r->nlist, sizeof *r->src);
	r->x = malloc(sizeof(float) * r->pm.dim);
	if (!r->src || !r->x) {
		rc = -ENOMEM;
		goto out;
	}
	for (uint32_t c = 0; c < r->nlist; c++)
		r->src[c].fin = c;
	if ((rc = rb_scan(r)))
		goto out;

	/* what to split and what to merge, against the mean cluster size or,
	 * when nlist is chosen automatically, the size a fresh build would
	 * give (vf_auto_nlist), whichever asks for more clusters: a growing
	 * store keeps the cluster sizes of a fresh build */
	double mean = (double)r->total / r->nlist;
	vecfs_config cfg;
	if (vecfs_config_get(r->v, &cfg) == 0 && cfg.nlist == 0 && r->total > 0) {
		double ideal = (double)r->total / vf_auto_nlist(r->total);
		if (ideal < mean)
			mean = ideal;
	}
	for (uint32_t c = 0; c < r->nlist; c++)
		if (r->nlist > 1 && (double)r->src[c].n < RB_MERGE_FACTOR * mean) {
			r->src[c].role = RB_MERGE;
			r->nmerge++;
		}
	uint32_t ncand = 0, tried = 0;
	for (uint32_t c = 0; c < r->nlist; c++)
		ncand += (double)r->src[c].n > RB_SPLIT_FACTOR * mean && r->src[c].n >= RB_SPLIT_MIN;
	r->splits = malloc(sizeof(uint32_t) * (ncand ? ncand : 1));
	r->halves = malloc(sizeof(float) * 2 * r->pm.dim * (ncand ? ncand : 1));
	if (!r->splits || !r->halves) {
		rc = -ENOMEM;
		goto out;
	}
	for (uint32_t c = 0; c < r->nlist; c++) {
		if (!((double)r->src[c].n > RB_SPLIT_FACTOR * mean && r->src[c].n >= RB_SPLIT_MIN))
			continue;
		if (vf_task_report(&r->t, "train", (int)(tried++ * 100 / ncand))) {
			rc = -ECANCELED;
			goto out;
		}
		if ((rc = rb_split(r, c)))
			goto out;
	}
	if (!r->force && r->nsplit == 0 && r->nmerge == 0) {
		rc = -EALREADY;
		goto out;
	}

	/* the new generation: the parent's codes stay valid in it */
	r->m.state = VECFS_GEN_BUILDING;
	r->m.metric = r->pm.metric;
	r->m.created = (uint64_t)time(NULL);
	r->m.snap_seq = r->pm.blocks_seq;
	r->m.covered = r->total;
	r->m.parent = active;
	r->m.seed = r->pm.seed;
	r->m.nlist = r->nlist;
	r->m.bits = r->pm.bits;
	r->m.dim = r->pm.dim;
	r->m.pdim = r->pm.pdim;
	r->m.id_limit = r->id_limit;
	snprintf(r->m.phase, sizeof r->m.phase, "assign");
	if ((rc = vf_gen_register(v, &r->m)))
		goto out;
	registered = 1;
	if ((rc = rb_assign_ids(r)) ||
	    (rc = vf_gen_routing(&r->g, &r->m, r->cent)))
		goto out;
	r->have_g = 1;
	if ((rc = rb_neighbours(r)) || (rc = rb_reassign(r)) || (rc = rb_encode(r)) ||
	    (rc = rb_idmap(r)) || (rc = rb_write(r)))
		goto out;
	vf_read_end(v->store, r->txn);
	r->txn = NULL;

	clock_gettime(CLOCK_MONOTONIC, &t1);
	r->m.build_seconds = (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) * 1e-9;
	if ((rc = vf_gen_publish(v, &r->m, r->cent, r->idmap, r->id_limit, &r->g, activate)))
		goto out;
	*gen_out = r->m.id;
out:
	if (r->txn)
		vf_read_end(v->store, r->txn);
	r->txn = NULL;
	if (rc == -ECANCELED)
		vf_seterr(r->t.err, r->t.errlen, "rebalance: cancelled");
	else if (rc && rc != -EALREADY && r->t.err && !r->t.err[0])
		vf_seterr(r->t.err, r->t.errlen, "rebalance: %s", strerror(-rc));
	if (rc && registered)
		vf_gen_abandon(v, &r->m);
	return rc;
}

static void rebal_free(rebal *r)
{
	if (r->src)
		for (uint32_t c = 0; c < r->nlist; c++) {
			free(r->src[c].near);
			free(r->src[c].codes);
			free(r->src[c].planes);
			free(r->src[c].dest);
		}
	if (r->have_g)
		vf_gen_routing_free(&r->g);
	vf_gen_put(r->v, r->pg);
	free(r->src);
	free(r->bvals);
	free(r->splits);
	free(r->halves);
	free(r->cent);
	free(r->dst);
	free(r->codes);
	free(r->planes);
	free(r->idmap);
	free(r->x);
}

static int count_rebalance_fn(MDB_txn *txn, void *arg)
{
	vecfs *v = arg;
	vf_counters cnt;
	int rc = vf_load_counters(txn, v->store, &cnt);
	if (rc)
		return rc;
	cnt.rebalances++;
	return vf_save_counters(txn, v->store, &cnt);
}

static int rebalance(vecfs *v, int activate, int force, uint64_t *gen_out,
		     vecfs_progress_fn progress, void *parg, char *err, size_t errlen)
{
	rebal r;
	uint64_t gen = 0;
	memset(&r, 0, sizeof r);
	r.v = v;
	r.force = force;
	vf_task_init(&r.t, v, &r.m, progress, parg, err, errlen);
	pthread_mutex_lock(&v->build_mu);
	int rc = rebalance_locked(&r, activate, &gen);
	pthread_mutex_unlock(&v->build_mu);
	rebal_free(&r);
	vf_task_end(&r.t);
	if (rc)
		return rc;
	vf_write(v->store, count_rebalance_fn, v);
	vf_retire_generations(v, gen);
	if (gen_out)
		*gen_out = gen;
	return 0;
}

int vecfs_rebalance(vecfs *v, int activate, uint64_t *gen_out,
		    vecfs_progress_fn progress, void *parg, char *err, size_t errlen)
{
	return rebalance(v, activate, 1, gen_out, progress, parg, err, errlen);
}

/* After an automatic compaction: rebalance when the largest cluster is over
 * rebalance_ratio times the mean. */
static void maybe_rebalance(vecfs *v)
{
	vecfs_config c;
	vecfs_stats st;
	if (vecfs_config_get(v, &c) || !c.rebalance_ratio || vecfs_stats_get(v, &st) ||
	    !st.active || !(st.cluster_imbalance > c.rebalance_ratio))
		return;
	rebalance(v, 1, 0, NULL, NULL, NULL, NULL, 0);
}

/* ------------------------------------------------------------ background */

/* Wait (holding stat_mu) until work is due: now, or a backlog once writes
 * paused for VF_MAINT_IDLE_MS.  0 when closing. */
static int maint_wait(vecfs *v)
{
	for (;;) {
		if (v->closing)
			return 0;
		if (v->maint_due)
			return 1;
		if (!v->maint_idle_due) {
			pthread_cond_wait(&v->maint_cv, &v->stat_mu);
			continue;
		}
		int64_t left = VF_MAINT_IDLE_MS - us_since(&v->last_write) / 1000;
		if (left <= 0)
			return 1;
		struct timespec until;
		clock_gettime(CLOCK_MONOTONIC, &until);
		until.tv_sec += left / 1000;
		until.tv_nsec += (left % 1000) * 1000000;
		if (until.tv_nsec >= 1000000000) {
			until.tv_sec++;
			until.tv_nsec -= 1000000000;
		}
		pthread_cond_timedwait(&v->maint_cv, &v->stat_mu, &until);
	}
}

static void *maint_run(void *arg)
{
	vecfs *v = arg;
	pthread_mutex_lock(&v->stat_mu);
	while (maint_wait(v)) {
		v->maint_due = 0;
		v->maint_idle_due = 0;
		v->maint_busy = 1;
		pthread_mutex_unlock(&v->stat_mu);
		/* a failure here (no active generation any more, no room) leaves
		 * the deltas in place: queries stay correct, only slower */
		if (vecfs_compact(v, NULL, NULL, 0) == 0)
			maybe_rebalance(v);
		pthread_mutex_lock(&v->stat_mu);
		v->maint_busy = 0;
	}
	pthread_mutex_unlock(&v->stat_mu);
	return NULL;
}

void vf_maint_start(vecfs *v)
{
	pthread_condattr_t a;
	pthread_condattr_init(&a);
	pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
	pthread_cond_init(&v->maint_cv, &a);
	pthread_condattr_destroy(&a);
	v->maint_started = pthread_create(&v->maint_thread, NULL, maint_run, v) == 0;
}

void vf_maint_stop(vecfs *v)
{
	pthread_mutex_lock(&v->stat_mu);
	v->closing = 1;
	pthread_cond_broadcast(&v->maint_cv);
	pthread_mutex_unlock(&v->stat_mu);
	if (v->maint_started)
		pthread_join(v->maint_thread, NULL);
	v->maint_started = 0;
	pthread_cond_destroy(&v->maint_cv);
}

int vf_maint_due(const vf_posting_writer *w, const vf_genmeta *m, uint64_t live,
		 uint32_t compact_deltas)
{
	uint64_t floor = 4 * (uint64_t)compact_deltas;
	uint64_t backlog = live / 50 > floor ? live / 50 : floor;
	if (w->max_deltas >= compact_deltas || m->pending >= backlog)
		return VF_MAINT_NOW;
	uint64_t idle = live / 1000 > compact_deltas ? live / 1000 : compact_deltas;
	return m->pending >= idle ? VF_MAINT_WHEN_IDLE : VF_MAINT_NONE;
}

void vf_maint_kick(vecfs *v, int level)
{
	if (level == VF_MAINT_NONE)
		return;
	pthread_mutex_lock(&v->stat_mu);
	clock_gettime(CLOCK_MONOTONIC, &v->last_write);
	if (level == VF_MAINT_NOW)
		v->maint_due = 1;
	else
		v->maint_idle_due = 1;
	pthread_cond_signal(&v->maint_cv);
	pthread_mutex_unlock(&v->stat_mu);
}

int vf_maint_busy(vecfs *v)
{
	pthread_mutex_lock(&v->stat_mu);
	int busy = v->maint_busy || v->maint_due || v->maint_idle_due;
	pthread_mutex_unlock(&v->stat_mu);
	return busy;
}

/* ------------------------------------------------------------ retention */

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

void vf_retire_generations(vecfs *v, uint64_t keep)
{
	vecfs_config c;
	uint64_t ids[1024];
	size_t n = 0;
	if (vecfs_config_get(v, &c) || vecfs_gen_list(v, ids, 1024, &n))
		return;
	if (n > 1024)
		n = 1024;
	uint64_t active = vecfs_active(v);
	qsort(ids, n, sizeof ids[0], cmp_u64);
	size_t others = 0; /* `keep` counts among them, but stays */
	for (size_t i = 0; i < n; i++)
		others += ids[i] != active;
	/* oldest first, until keep_generations others are left */
	for (size_t i = 0; i < n && others > c.keep_generations; i++) {
		if (ids[i] == active || ids[i] == keep)
			continue;
		vecfs_gen_info gi;
		if (vecfs_gen_info_get(v, ids[i], &gi) || gi.state == VECFS_GEN_BUILDING)
			continue;
		if (vecfs_gen_remove(v, ids[i]) == 0)
			others--;
	}
}
