/*
 * fs/helper.c - threads kept one to a CPU (helper.h).  Starting a thread
 * for each job cost its starter 0.28 ms here (setting the new thread's
 * CPUs moves it: a call to the other CPU), against the 0.5 ms of work it
 * took over; a kept thread is woken in tens of microseconds.  Each is
 * pinned to its CPU and takes jobs from workers of other CPUs only: the
 * FUSE workers are pinned one to a CPU too, and a thread left where its
 * starter ran took turns with it there while the other CPU idled.
 */
#include "helper.h"

#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <unistd.h>

#define HELPERS_MAX 16

enum { IDLE, QUEUED, RUNNING, DONE, STOP };

typedef struct helper {
	pthread_mutex_t mu;
	pthread_cond_t cv; /* the state changed */
	pthread_t th;
	int cpu;
	int started;       /* the thread runs (-1: it could not start) */
	int state;         /* IDLE .. STOP */
	void (*fn)(void *);
	void *arg;
} helper;

struct fs_helpers {
	int n;
	helper h[HELPERS_MAX];
};

static void *run(void *arg)
{
	helper *h = arg;
	pthread_mutex_lock(&h->mu);
	for (;;) {
		while (h->state != QUEUED && h->state != STOP)
			pthread_cond_wait(&h->cv, &h->mu);
		if (h->state == STOP)
			break;
		h->state = RUNNING;
		pthread_mutex_unlock(&h->mu);
		h->fn(h->arg);
		pthread_mutex_lock(&h->mu);
		h->state = DONE;
		pthread_cond_broadcast(&h->cv);
	}
	pthread_mutex_unlock(&h->mu);
	return NULL;
}

fs_helpers *fs_helpers_new(void)
{
	cpu_set_t cpus;
	if (sched_getaffinity(getpid(), sizeof cpus, &cpus) != 0 || CPU_COUNT(&cpus) < 2)
		return NULL;
	fs_helpers *hs = calloc(1, sizeof *hs);
	if (!hs)
		return NULL;
	for (int c = 0; c < CPU_SETSIZE && hs->n < HELPERS_MAX; c++) {
		if (!CPU_ISSET(c, &cpus))
			continue;
		helper *h = &hs->h[hs->n++];
		h->cpu = c;
		pthread_mutex_init(&h->mu, NULL);
		pthread_cond_init(&h->cv, NULL);
	}
	return hs;
}

void fs_helpers_free(fs_helpers *hs)
{
	if (!hs)
		return;
	for (int i = 0; i < hs->n; i++) {
		helper *h = &hs->h[i];
		pthread_mutex_lock(&h->mu);
		h->state = STOP;
		pthread_cond_broadcast(&h->cv);
		pthread_mutex_unlock(&h->mu);
		if (h->started > 0)
			pthread_join(h->th, NULL);
		pthread_cond_destroy(&h->cv);
		pthread_mutex_destroy(&h->mu);
	}
	free(hs);
}

int fs_helpers_cpus(const fs_helpers *hs)
{
	return hs ? hs->n : 1;
}

/* With h->mu held: start its thread once, pinned to its CPU. */
static int start_thread(helper *h)
{
	if (h->started)
		return h->started > 0;
	cpu_set_t cpus;
	CPU_ZERO(&cpus);
	CPU_SET(h->cpu, &cpus);
	pthread_attr_t attr, *ap = pthread_attr_init(&attr) == 0 ? &attr : NULL;
	if (ap)
		pthread_attr_setaffinity_np(ap, sizeof cpus, &cpus);
	h->started = pthread_create(&h->th, ap, run, h) == 0 ? 1 : -1;
	if (ap)
		pthread_attr_destroy(ap);
	return h->started > 0;
}

int fs_helpers_start(fs_helpers *hs, void (*fn)(void *), void *arg)
{
	if (!hs)
		return -1;
	int here = sched_getcpu();
	for (int i = 0; i < hs->n; i++) {
		helper *h = &hs->h[i];
		if (h->cpu == here || pthread_mutex_trylock(&h->mu) != 0)
			continue;
		int ok = h->state == IDLE && start_thread(h);
		if (ok) {
			h->fn = fn;
			h->arg = arg;
			h->state = QUEUED;
			pthread_cond_broadcast(&h->cv);
		}
		pthread_mutex_unlock(&h->mu);
		if (ok)
			return i;
	}
	return -1;
}

void fs_helpers_wait(fs_helpers *hs, int ticket)
{
	helper *h = &hs->h[ticket];
	pthread_mutex_lock(&h->mu);
	while (h->state != DONE)
		pthread_cond_wait(&h->cv, &h->mu);
	h->state = IDLE;
	pthread_mutex_unlock(&h->mu);
}
