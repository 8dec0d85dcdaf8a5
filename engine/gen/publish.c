/*
 * engine/gen/publish.c - the life of a generation being made (a build or a
 * rebalance): its progress and cancellation, its registration, its
 * publication (catching up with the writes made meanwhile, then `ready`
 * and, when asked, `active` in one transaction) or its abandonment.
 */
#include "attrs.h"
#include "handle.h"
#include "gen.h"
#include "io.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "calibrate.h"

/* ------------------------------------------------------------ progress */

void vf_task_init(vf_task *t, vecfs *v, vf_genmeta *m, vecfs_progress_fn progress,
		  void *parg, char *err, size_t errlen)
{
	memset(t, 0, sizeof *t);
	t->v = v;
	t->m = m;
	t->progress = progress;
	t->parg = parg;
	t->err = err;
	t->errlen = errlen;
	t->last_pct = -1;
	if (err && errlen)
		err[0] = 0;
	pthread_mutex_init(&t->mu, NULL);
}

void vf_task_end(vf_task *t)
{
	pthread_mutex_destroy(&t->mu);
}

int vf_task_report(vf_task *t, const char *phase, int pct)
{
	int stop = 0;
	pthread_mutex_lock(&t->mu);
	if (t->cancelled) {
		pthread_mutex_unlock(&t->mu);
		return 1;
	}
	if (phase != t->phase || pct != t->last_pct) {
		t->phase = phase;
		t->last_pct = pct;
		snprintf(t->m->phase, sizeof t->m->phase, "%s", phase);
		t->m->pct = (uint32_t)pct;
		if (t->progress)
			stop = t->progress(t->parg, phase, pct);
		if (!stop && atomic_load_explicit(&t->v->closing, memory_order_relaxed))
			stop = 1;
		if (stop)
			t->cancelled = 1;
	}
	pthread_mutex_unlock(&t->mu);
	return stop;
}

int vf_task_cancelled(vf_task *t)
{
	pthread_mutex_lock(&t->mu);
	int c = t->cancelled;
	pthread_mutex_unlock(&t->mu);
	return c;
}

/* ------------------------------------------------------------ register, publish, abandon */

typedef struct meta_job {
	vecfs *v;
	vf_genmeta *m;
	int alloc;     /* allocate the id */
} meta_job;

static int meta_fn(vf_txn *txn, void *arg)
{
	meta_job *j = arg;
	int rc;
	if (j->alloc) {
		vf_counters cnt;
		if ((rc = vf_load_counters(txn, j->v->store, &cnt)))
			return rc;
		j->m->id = cnt.next_gen++;
		if (j->m->id == 0)
			j->m->id = cnt.next_gen++;
		if ((rc = vf_save_counters(txn, j->v->store, &cnt)))
			return rc;
	}
	return vf_save_genmeta(txn, j->v->store, j->m);
}

/* Publishing a generation.  Writes made while it was built (or rebalanced)
 * become its delta postings and tombstones; the transaction that makes it
 * ready (and active) must take the last of them.  When many piled up, it
 * catches up first in steps of CATCHUP_STEP changes, each its own
 * transaction with waiting writes let in between, while the generation is
 * still building (a crash drops it, as any unfinished build), so that the
 * last transaction has little left to do.  It stops catching up once at
 * most CATCHUP_STEP are left; the steps grow while writes keep pace
 * (vf_catchup), so that it catches up with a steady writer too; after
 * CATCHUP_STEPS steps the last transaction takes what is left. */
#define CATCHUP_STEP 4096
#define CATCHUP_STEPS 64

typedef struct final_job {
	vecfs *v;
	const vf_genmeta *m;
	const float *centroids;
	const uint32_t *idmap;   /* cluster per record id, ids < id_limit */
	uint64_t id_limit;
	vf_gen *g;
	int activate;
	int rebalanced;          /* count it in the store's rebalances */
	uint64_t synced;         /* changes caught up with so far; 0: none */
	vf_catchup cu;           /* the size of the next catch-up step */
	uint64_t s_synced, s_left; /* the catch-up step in progress */
} final_job;

/* The centroids and the assignment map of the generation. */
static int write_routing(vf_txn *txn, final_job *j)
{
	vf_store *s = j->v->store;
	const vf_genmeta *m = j->m;
	int rc = vf_save_centroids(txn, s, m->id, j->centroids, (size_t)m->nlist * m->dim);
	if (rc == 0 && j->g->center)
		rc = vf_save_center(txn, s, m->id, j->g->center, m->dim);
	if (rc == 0 && j->g->cal)
		rc = vf_save_calib(txn, s, m->id, j->g->cal, sizeof(vf_calib));
	if (rc)
		return rc;
	return vf_assign_write(txn, s, m->id, j->idmap, j->id_limit);
}

/* The generation's meta as caught up so far; its routing written first. */
static int catch_up_from(vf_txn *txn, final_job *j, vf_genmeta *m, vf_counters *cnt)
{
	int rc;
	*m = *j->m;
	if (!j->synced && (rc = write_routing(txn, j)))
		return rc;
	/* its blocks hold the snapshot; later writes become delta postings */
	m->synced_seq = j->synced ? j->synced : m->snap_seq;
	m->blocks_seq = m->snap_seq;
	return vf_load_counters(txn, j->v->store, cnt);
}

static int catch_up_fn(vf_txn *txn, void *arg)
{
	final_job *j = arg;
	vf_genmeta m;
	vf_counters cnt;
	int rc;
	if ((rc = catch_up_from(txn, j, &m, &cnt)) ||
	    (rc = vf_sync_generation(j->v, txn, j->g, &m, m.synced_seq + j->cu.step, &cnt)))
		return rc;
	snprintf(m.phase, sizeof m.phase, "catch-up");
	j->s_synced = m.synced_seq;
	j->s_left = cnt.seq - m.synced_seq;
	return vf_save_genmeta(txn, j->v->store, &m);
}

static int final_fn(vf_txn *txn, void *arg)
{
	final_job *j = arg;
	vf_store *s = j->v->store;
	vf_genmeta m;
	vf_counters cnt;
	int rc;
	if ((rc = catch_up_from(txn, j, &m, &cnt)) ||
	    (rc = vf_sync_generation(j->v, txn, j->g, &m, 0, &cnt)))
		return rc;
	m.state = VECFS_GEN_READY;
	m.pct = 100;
	snprintf(m.phase, sizeof m.phase, "done");
	if ((rc = vf_save_genmeta(txn, s, &m)))
		return rc;
	if (j->activate && (rc = vf_save_active(txn, s, m.id)))
		return rc;
	if ((rc = vf_attrs_touch(txn, s, VF_TIME_GENS)))
		return rc;
	if (j->rebalanced) { /* counted in the transaction that publishes it */
		if ((rc = vf_load_counters(txn, s, &cnt)))
			return rc;
		cnt.rebalances++;
		if ((rc = vf_save_counters(txn, s, &cnt)))
			return rc;
	}
	return 0;
}

/* Changes after the snapshot the generation has not caught up with. */
static int backlog(vecfs *v, const final_job *j, uint64_t *left)
{
	vf_counters cnt;
	int rc = vf_read_counters(v->store, &cnt);
	uint64_t from = j->synced ? j->synced : j->m->snap_seq;
	*left = rc == 0 && cnt.seq > from ? cnt.seq - from : 0;
	return rc;
}

int vf_gen_publish(vecfs *v, const vf_genmeta *m, const float *centroids,
		   const uint32_t *idmap, uint64_t id_limit, vf_gen *g, int activate,
		   int rebalanced)
{
	final_job fj = {.v = v, .m = m, .centroids = centroids, .idmap = idmap,
			.id_limit = id_limit, .g = g, .activate = activate,
			.rebalanced = rebalanced};
	uint64_t left;
	int rc;
	if ((rc = backlog(v, &fj, &left)))
		return rc;
	vf_catchup_init(&fj.cu, CATCHUP_STEP, left);
	for (int steps = 0; left > CATCHUP_STEP && steps < CATCHUP_STEPS; steps++) {
		if ((rc = vf_write(v->store, catch_up_fn, &fj)))
			return rc;
		fj.synced = fj.s_synced;
		left = fj.s_left;
		vf_catchup_after(&fj.cu, left);
		vf_write_yield(v->store);
	}
	return vf_write(v->store, final_fn, &fj);
}

static int fail_fn(vf_txn *txn, void *arg)
{
	meta_job *j = arg;
	int rc = vf_drop_generation_keys(txn, j->v->store, j->m->id);
	if (rc)
		return rc;
	j->m->state = VECFS_GEN_FAILED;
	snprintf(j->m->phase, sizeof j->m->phase, "failed");
	return vf_save_genmeta(txn, j->v->store, j->m);
}

void vf_gen_abandon(vecfs *v, vf_genmeta *m)
{
	meta_job mj = {v, m, 0};
	vf_write(v->store, fail_fn, &mj);
}

int vf_gen_register(vecfs *v, vf_genmeta *m)
{
	meta_job mj = {v, m, 1};
	return vf_write(v->store, meta_fn, &mj);
}
