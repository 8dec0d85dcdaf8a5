/*
 * fs/ahead.c - searching a query ahead of the close that runs it.
 *
 * A program that loops over queries writes `in`, then closes it, and each
 * is a round trip through the kernel to the daemon.  The input is usually
 * complete at the write: its search can start there, on a thread of its
 * own, and run while the reply to the write goes back and the close comes
 * in.  The close then takes the results if they still hold: nothing was
 * written to `in` since (the session's input version), and the store has
 * not changed since the snapshot the search read (vecfs_snapshot(): every
 * committed write, maintenance's too, changes it).  Then they are what a
 * search at the close would find, so the query still sees the store as it
 * is when its close begins.  Otherwise the close searches as before.
 *
 * One search ahead at a time: a complete input that finds the thread busy
 * is not searched ahead.  A search ahead is left out of the store's query
 * counts until a close takes its results (vecfs_search_count()).
 *
 * Waiting awake: after a search the thread polls for the next one for
 * SPIN_NS before it sleeps, and a close polls for a search that runs on
 * another CPU up to SPIN_NS before it sleeps, so that a client's loop does
 * not pay a wakeup across CPUs (dear on virtual machines) at each query.
 * Both polls are bounded and happen only while queries come.
 *
 * With one CPU to run on there is nothing to overlap: the search would
 * only take turns with the client and the worker (measured: 0.40 of the
 * library's QPS against 0.6 without), so nothing is searched ahead.  Nor
 * while several sessions query at once (another session's query less than
 * SHARED_NS before): their clients keep the CPUs busy, the polls would
 * take CPU from them, and one search ahead at a time would mostly be
 * thrown away (measured with two clients: 8.2-9.8k QPS against 12.2-14.1k
 * without searching ahead).  The thread runs on every CPU the daemon may
 * use, not on the one of the worker that starts it.
 */
#include "ahead.h"


#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "daemon.h"

#define SPIN_NS 200000      /* 0.2 ms */
#define SHARED_NS 2000000   /* another session's query this recent: shared */
#define QUIET_NS 100000000  /* then nothing is searched ahead for 0.1 s */

enum { IDLE, QUEUED, RUNNING, DONE };

typedef struct ahead {
	pthread_mutex_t mu;
	pthread_cond_t job, done;
	pthread_t th;
	int started;
	atomic_int stop;
	int off;                /* one CPU: never searched ahead */
	cpu_set_t cpus;         /* the process's */
	uint64_t last_serial, last_ns; /* the latest complete input's session */
	uint64_t shared_until;  /* sessions query at once: none ahead until */
	atomic_int state;
	atomic_int cpu;         /* where the search runs, -1: not known */
	/* the job: whose input, which version of it */
	uint64_t serial, ver;
	vecfs *v;
	vecfs_query_opts o;
	float *vecs;
	size_t nq;
	uint32_t dim;
	/* its outcome */
	vecfs_results *r;
	int rc;
	_Atomic uint64_t taken; /* closes answered by a search ahead */
} ahead;

int fs_ahead_init(fs_daemon *dm)
{
	ahead *a = calloc(1, sizeof *a);
	if (!a)
		return -ENOMEM;
	pthread_mutex_init(&a->mu, NULL);
	pthread_cond_init(&a->job, NULL);
	pthread_cond_init(&a->done, NULL);
	atomic_init(&a->cpu, -1);
	dm->ahead = a;
	return 0;
}

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Poll, up to SPIN_NS, until state is `want` or the thread stops. */
static void spin_for(ahead *a, int want)
{
	uint64_t t0 = now_ns();
	for (unsigned i = 0; atomic_load(&a->state) != want && !atomic_load(&a->stop); i++) {
		if ((i & 63) == 63 && now_ns() - t0 > SPIN_NS)
			return;
#if defined(__x86_64__) || defined(__i386__)
		__builtin_ia32_pause();
#endif
	}
}

static void *run(void *arg)
{
	ahead *a = arg;
	char why[256];
	for (;;) {
		spin_for(a, QUEUED); /* the next query of a loop comes soon */
		pthread_mutex_lock(&a->mu);
		while (atomic_load(&a->state) != QUEUED && !a->stop)
			pthread_cond_wait(&a->job, &a->mu);
		if (a->stop) {
			pthread_mutex_unlock(&a->mu);
			return NULL;
		}
		atomic_store(&a->cpu, sched_getcpu());
		atomic_store(&a->state, RUNNING);
		vecfs *v = a->v;
		vecfs_query_opts o = a->o;
		float *vecs = a->vecs;
		size_t nq = a->nq;
		uint32_t dim = a->dim;
		a->vecs = NULL;
		pthread_mutex_unlock(&a->mu);

		o.uncounted = 1;
		vecfs_results *r = NULL;
		int rc = vecfs_search(v, vecs, nq, dim, &o, &r, why, sizeof why);
		free(vecs);

		pthread_mutex_lock(&a->mu);
		a->r = r;
		a->rc = rc;
		atomic_store(&a->state, DONE);
		pthread_cond_broadcast(&a->done);
		pthread_mutex_unlock(&a->mu);
	}
}

void fs_ahead_submit(ahead *a, uint64_t serial, uint64_t ver, vecfs *v, const vecfs_query_opts *o,
		  float *vecs, size_t nq, uint32_t dim)
{
	uint64_t now = now_ns();
	pthread_mutex_lock(&a->mu);
	if (a->last_serial && a->last_serial != serial && now - a->last_ns < SHARED_NS)
		a->shared_until = now + QUIET_NS;
	a->last_serial = serial;
	a->last_ns = now;
	int st = atomic_load(&a->state);
	if (a->stop || a->off || now < a->shared_until || st == QUEUED || st == RUNNING) {
		pthread_mutex_unlock(&a->mu); /* not this one */
		free(vecs);
		return;
	}
	if (!a->started) {
		/* the process's CPUs (its first thread's), not this worker's:
		 * workers are pinned to one each, and a thread starts with the
		 * CPUs of the one that starts it */
		pthread_attr_t attr;
		int ok = sched_getaffinity(getpid(), sizeof a->cpus, &a->cpus) == 0;
		if (ok && CPU_COUNT(&a->cpus) < 2)
			a->off = 1;
		if (!a->off && pthread_attr_init(&attr) == 0) {
			if (ok)
				pthread_attr_setaffinity_np(&attr, sizeof a->cpus, &a->cpus);
			a->started = pthread_create(&a->th, &attr, run, a) == 0;
			pthread_attr_destroy(&attr);
		}
		if (!a->started) {
			pthread_mutex_unlock(&a->mu);
			free(vecs);
			return;
		}
	}
	vecfs_results_free(a->r); /* a result nobody took */
	a->r = NULL;
	a->serial = serial;
	a->ver = ver;
	a->v = v;
	a->o = *o;
	a->vecs = vecs;
	a->nq = nq;
	a->dim = dim;
	atomic_store(&a->state, QUEUED);
	pthread_cond_signal(&a->job);
	pthread_mutex_unlock(&a->mu);
}

vecfs_results *fs_ahead_take(ahead *a, uint64_t serial, uint64_t ver, vecfs *v)
{
	if (atomic_load(&a->state) == IDLE)
		return NULL;
	int spun = 0;
	pthread_mutex_lock(&a->mu);
	for (;;) {
		/* checked again after every wait: while this close waited
		 * unlocked, its job may have been done, then replaced by another
		 * session's and taken by that one's close */
		int st = atomic_load(&a->state);
		if (st == IDLE || a->serial != serial || a->ver != ver) {
			pthread_mutex_unlock(&a->mu);
			return NULL;
		}
		if (st == DONE)
			break;
		if (st == RUNNING && !spun && atomic_load(&a->cpu) != sched_getcpu()) {
			/* it runs on another CPU: wait awake a while (not for one
			 * that has yet to start: it may need this CPU) */
			spun = 1;
			pthread_mutex_unlock(&a->mu);
			spin_for(a, DONE);
			pthread_mutex_lock(&a->mu);
			continue;
		}
		pthread_cond_wait(&a->done, &a->mu);
	}
	vecfs_results *r = a->r;
	a->r = NULL;
	int ok = a->rc == 0 && r && r->snapshot == vecfs_snapshot(v);
	atomic_store(&a->state, IDLE);
	pthread_mutex_unlock(&a->mu);
	if (!ok) {
		vecfs_results_free(r);
		return NULL;
	}
	vecfs_search_count(v, r);
	atomic_fetch_add(&a->taken, 1);
	return r;
}

uint64_t fs_ahead_taken(ahead *a)
{
	return atomic_load(&a->taken);
}

void fs_ahead_fini(fs_daemon *dm)
{
	ahead *a = dm->ahead;
	if (!a)
		return;
	pthread_mutex_lock(&a->mu);
	atomic_store(&a->stop, 1);
	pthread_cond_broadcast(&a->job);
	if (atomic_load(&a->state) == QUEUED) { /* it will not run: let a close go */
		atomic_store(&a->state, IDLE);
		pthread_cond_broadcast(&a->done);
	}
	int started = a->started;
	pthread_mutex_unlock(&a->mu);
	if (started)
		pthread_join(a->th, NULL);
	vecfs_results_free(a->r);
	free(a->vecs);
	pthread_cond_destroy(&a->job);
	pthread_cond_destroy(&a->done);
	pthread_mutex_destroy(&a->mu);
	free(a);
	dm->ahead = NULL;
}
