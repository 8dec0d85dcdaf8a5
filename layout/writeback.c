/*
 * layout/writeback.c - writeback ahead of a long commit (writeback.h).
 */
#include "writeback.h"
#include "io.h"
#include "thread.h"

#include <time.h>

static uint64_t mono_ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static void wait_until(vf_writeback *w, uint64_t ns)
{
	struct timespec t = {(time_t)(ns / 1000000000u), (long)(ns % 1000000000u)};
	pthread_cond_timedwait(&w->cv, &w->mu, &t);
}

static void *run(void *arg)
{
	vf_writeback *w = arg;
	pthread_mutex_lock(&w->mu);
	while (!w->stop) {
		if (!w->since_ns) {
			w->idle = 1;
			pthread_cond_wait(&w->cv, &w->mu);
			w->idle = 0;
			continue;
		}
		uint64_t now = mono_ns(), due = w->since_ns + (uint64_t)w->after_ms * 1000000u;
		if (now < due) {
			wait_until(w, due);
			continue;
		}
		pthread_mutex_unlock(&w->mu);
		if (vf_io_ops.sync_range(w->fd) == 0)
			__atomic_add_fetch(&w->rounds, 1, __ATOMIC_RELAXED);
		pthread_mutex_lock(&w->mu);
		if (!w->stop && w->since_ns)
			wait_until(w, now + (uint64_t)w->every_ms * 1000000u);
	}
	pthread_mutex_unlock(&w->mu);
	return NULL;
}

void vf_writeback_init(vf_writeback *w, int fd)
{
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&w->cv, &ca);
	pthread_condattr_destroy(&ca);
	pthread_mutex_init(&w->mu, NULL);
	w->fd = fd;
	w->started = w->stop = w->idle = 0;
	w->since_ns = 0;
	w->after_ms = 100;
	w->every_ms = 25;
	w->rounds = 0;
}

void vf_writeback_begin(vf_writeback *w)
{
	pthread_mutex_lock(&w->mu);
	if (!w->started && w->fd >= 0)
		w->started = vf_thread_start(&w->th, run, w) == 0 ? 1 : -1;
	w->since_ns = mono_ns();
	/* a thread already waiting for a time looks at since_ns when it
	 * wakes: only an idle one needs waking (not once a write) */
	if (w->idle)
		pthread_cond_signal(&w->cv);
	pthread_mutex_unlock(&w->mu);
}

void vf_writeback_end(vf_writeback *w)
{
	pthread_mutex_lock(&w->mu);
	w->since_ns = 0;
	pthread_mutex_unlock(&w->mu);
}

void vf_writeback_fini(vf_writeback *w)
{
	pthread_mutex_lock(&w->mu);
	w->stop = 1;
	pthread_cond_signal(&w->cv);
	int started = w->started == 1;
	pthread_mutex_unlock(&w->mu);
	if (started)
		pthread_join(w->th, NULL);
	pthread_cond_destroy(&w->cv);
	pthread_mutex_destroy(&w->mu);
}
