/*
 * engine/maint/maintenance.c - the background worker that compacts when delta
 * postings pile up (and rebalances when clusters grew lopsided).
 */
#include "handle.h"
#include "maint.h"
#include "math/math.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Wait (holding stat_mu) until work is due: now, or a backlog once writes
 * paused for VF_MAINT_IDLE_MS.  0 when closing. */
static int maint_wait(vecfs *v)
{
	VF_ASSERT_HELD(&v->stat_mu);
	for (;;) {
		if (v->closing)
			return 0;
		if (v->maint_due)
			return 1;
		if (!v->maint_idle_due) {
			pthread_cond_wait(&v->maint_cv, &v->stat_mu);
			continue;
		}
		int64_t left = VF_MAINT_IDLE_MS - vf_us_since(&v->last_write) / 1000;
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

/* A failure of background work that the store's owner should hear of:
 * not the ones that only mean "not now" (no active generation, a flip or
 * a close meanwhile, nothing to do). */
static void maint_report(vecfs *v, const char *what, int rc, const char *err)
{
	if (rc == 0 || rc == -ENOENT || rc == -EAGAIN || rc == -ECANCELED || rc == -EBUSY ||
	    !v->notice_fn)
		return;
	char line[400];
	snprintf(line, sizeof line, "%s in the background failed: %s", what,
		 err[0] ? err : strerror(-rc));
	v->notice_fn(v->notice_arg, line);
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
		/* a failure here (no active generation any more, no room, damage)
		 * leaves the deltas in place: queries stay correct, only slower;
		 * the owner hears of what needs its hand */
		char err[256] = "";
		int rc = vecfs_compact(v, NULL, err, sizeof err);
		if (rc == 0) {
			err[0] = 0;
			rc = vf_maybe_rebalance(v, err, sizeof err);
			maint_report(v, "rebalance", rc, err);
		} else {
			maint_report(v, "compaction", rc, err);
		}
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
	v->maint_started = vf_thread_start(&v->maint_thread, maint_run, v) == 0;
}

void vf_maint_stop(vecfs *v)
{
	pthread_mutex_lock(&v->stat_mu);
	atomic_store_explicit(&v->closing, 1, memory_order_relaxed); /* (builds read it unlocked) */
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

