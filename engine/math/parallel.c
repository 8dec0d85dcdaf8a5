/*
 * engine/math/parallel.c - running one function over a few jobs on every
 * CPU (parallel.h).
 */
#include "parallel.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>

#define POOL_MAX VF_PARALLEL_MAX

enum { IDLE, QUEUED, RUNNING, DONE, STOP };

typedef struct kept {
	pthread_mutex_t mu;
	pthread_cond_t cv; /* its state changed */
	pthread_t th;
	int cpu;
	int started;       /* its thread runs (-1: could not start) */
	int state;         /* IDLE .. STOP */
	void *(*fn)(void *);
	void *arg;
} kept;

/* The fork()s between the process that first made a pool and this one,
 * counted in each child (pthread_atfork()): a pool made before the last
 * has no kept threads here.  Not the maker's pid: a descendant can have
 * that pid (once the maker's is free again, or as pid 1 of a nested PID
 * namespace when the maker was pid 1 of its own), and would wait for kept
 * threads it does not have; and getpid() is a system call. */
static _Atomic unsigned forks;
static int forks_counted; /* the handler is in place (else no pool) */
static pthread_once_t forks_once = PTHREAD_ONCE_INIT;

static void fork_child(void)
{
	atomic_fetch_add_explicit(&forks, 1, memory_order_relaxed);
}

static void count_forks(void)
{
	forks_counted = pthread_atfork(NULL, NULL, fork_child) == 0;
}

struct vf_pool {
	unsigned forks; /* forks when it was made (a fork's child has no kept threads) */
	int n;
	kept k[POOL_MAX];
};

/* p was made in this process, not in one it was forked from */
static int made_here(const vf_pool *p)
{
	/* (changed only in a child, before it returns from fork()) */
	return p->forks == atomic_load_explicit(&forks, memory_order_relaxed);
}

static void *kept_run(void *arg)
{
	kept *k = arg;
	/* named, so that a look at the process's threads (top -H, /proc)
	 * tells the kept ones, which stay until the handle closes */
	pthread_setname_np(pthread_self(), VF_KEPT_THREAD_NAME);
	pthread_mutex_lock(&k->mu);
	for (;;) {
		while (k->state != QUEUED && k->state != STOP)
			pthread_cond_wait(&k->cv, &k->mu);
		if (k->state == STOP)
			break;
		k->state = RUNNING;
		pthread_mutex_unlock(&k->mu);
		k->fn(k->arg);
		pthread_mutex_lock(&k->mu);
		k->state = DONE;
		pthread_cond_broadcast(&k->cv);
	}
	pthread_mutex_unlock(&k->mu);
	return NULL;
}

vf_pool *vf_pool_new(void)
{
	int cpus[POOL_MAX];
	int n = vf_thread_start_cpus(cpus, POOL_MAX);
	pthread_once(&forks_once, count_forks);
	if (n < 2 || !forks_counted)
		return NULL;
	vf_pool *p = calloc(1, sizeof *p);
	if (!p)
		return NULL;
	p->forks = atomic_load_explicit(&forks, memory_order_relaxed);
	p->n = n;
	for (int i = 0; i < n; i++) {
		p->k[i].cpu = cpus[i];
		pthread_mutex_init(&p->k[i].mu, NULL);
		pthread_cond_init(&p->k[i].cv, NULL);
	}
	return p;
}

void vf_pool_free(vf_pool *p)
{
	if (!p)
		return;
	if (!made_here(p)) {
		/* a forked child: the kept threads are not here, and its
		 * copies of their mutexes and condition variables may be held
		 * or waited on by threads it does not have (glibc's
		 * pthread_cond_destroy() waits for those waiters forever) */
		free(p);
		return;
	}
	for (int i = 0; i < p->n; i++) {
		kept *k = &p->k[i];
		pthread_mutex_lock(&k->mu);
		k->state = STOP;
		pthread_cond_broadcast(&k->cv);
		pthread_mutex_unlock(&k->mu);
		if (k->started > 0)
			pthread_join(k->th, NULL);
		pthread_cond_destroy(&k->cv);
		pthread_mutex_destroy(&k->mu);
	}
	free(p);
}

/* Hand fn(arg) to an idle kept thread of p on another CPU than `here`
 * (starting it if it has not run yet): its index, or -1. */
static int pool_take(vf_pool *p, int here, void *(*fn)(void *), void *arg)
{
	for (int i = 0; i < p->n; i++) {
		kept *k = &p->k[i];
		if (k->cpu == here || pthread_mutex_trylock(&k->mu) != 0)
			continue;
		int ok = k->state == IDLE && k->started >= 0;
		if (ok && !k->started) {
			pthread_attr_t attr, *ap = vf_thread_attr_cpu(&attr, k->cpu);
			k->started = pthread_create(&k->th, ap, kept_run, k) == 0 ? 1 : -1;
			if (ap)
				pthread_attr_destroy(ap);
			ok = k->started > 0;
		}
		if (ok) {
			k->fn = fn;
			k->arg = arg;
			k->state = QUEUED;
			pthread_cond_broadcast(&k->cv);
		}
		pthread_mutex_unlock(&k->mu);
		if (ok)
			return i;
	}
	return -1;
}

static void pool_wait(vf_pool *p, int i)
{
	kept *k = &p->k[i];
	pthread_mutex_lock(&k->mu);
	while (k->state != DONE)
		pthread_cond_wait(&k->cv, &k->mu);
	k->state = IDLE;
	pthread_mutex_unlock(&k->mu);
}

void vf_parallel_on(vf_pool *p, void *(*fn)(void *), void *jobs, size_t job_size, int n)
{
	pthread_t tid[VF_PARALLEL_MAX];
	int started[VF_PARALLEL_MAX] = {0}, in_pool[VF_PARALLEL_MAX];
	char *job = jobs;
	if (n > VF_PARALLEL_MAX)
		n = VF_PARALLEL_MAX;
	if (n < 2 || (p && !made_here(p)))
		p = NULL;
	int here = p ? sched_getcpu() : -1, unpooled = 0;
	for (int t = 1; t < n; t++) {
		in_pool[t] = p ? pool_take(p, here, fn, job + (size_t)t * job_size) : -1;
		unpooled += in_pool[t] < 0;
	}
	/* on the program's CPUs but the caller's, which runs the first job: a
	 * thread starts with the CPUs of the one that starts it, and a caller
	 * may be pinned to one (the daemon's workers are), which would put
	 * every job on that one; and on all of them, the kernel put the
	 * second job of a pinned worker's search on the worker's CPU, where
	 * the two took turns while the other CPU idled (sift-128, 1,000
	 * queries an input: the search 14-19 ms in the daemon, 10 ms in a
	 * program) */
	pthread_attr_t attr, *ap = unpooled ? vf_thread_attr_away(&attr) : NULL;
	for (int t = 1; t < n; t++)
		if (in_pool[t] < 0)
			started[t] = pthread_create(&tid[t], ap, fn, job + (size_t)t * job_size) == 0;
	if (ap)
		pthread_attr_destroy(ap);
	if (n > 0)
		fn(job);
	for (int t = 1; t < n; t++) {
		if (in_pool[t] >= 0)
			pool_wait(p, in_pool[t]);
		else if (started[t])
			pthread_join(tid[t], NULL);
		else
			fn(job + (size_t)t * job_size);
	}
}

void vf_parallel(void *(*fn)(void *), void *jobs, size_t job_size, int n)
{
	vf_parallel_on(NULL, fn, jobs, job_size, n);
}
