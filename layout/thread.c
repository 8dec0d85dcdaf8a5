/*
 * layout/thread.c - threads on the program's CPUs (thread.h).
 */
#include "thread.h"

#include <sched.h>

/* The CPUs the program started with (its first thread's, before anyone
 * pinned a thread). */
static cpu_set_t start_cpus;
static int have_start_cpus;

__attribute__((constructor)) static void note_start_cpus(void)
{
	have_start_cpus = sched_getaffinity(0, sizeof start_cpus, &start_cpus) == 0;
}

/* attr initialized and set to run on cpus, or NULL. */
static pthread_attr_t *attr_on(pthread_attr_t *attr, const cpu_set_t *cpus)
{
	if (pthread_attr_init(attr) != 0)
		return NULL;
	pthread_attr_setaffinity_np(attr, sizeof *cpus, cpus);
	return attr;
}

pthread_attr_t *vf_thread_attr(pthread_attr_t *attr)
{
	return have_start_cpus ? attr_on(attr, &start_cpus) : NULL;
}

pthread_attr_t *vf_thread_attr_away(pthread_attr_t *attr)
{
	if (!have_start_cpus)
		return NULL;
	cpu_set_t cpus = start_cpus;
	int here = sched_getcpu();
	if (here >= 0 && here < CPU_SETSIZE && CPU_ISSET(here, &cpus) && CPU_COUNT(&cpus) > 1)
		CPU_CLR(here, &cpus);
	return attr_on(attr, &cpus);
}

pthread_attr_t *vf_thread_attr_cpu(pthread_attr_t *attr, int cpu)
{
	cpu_set_t cpus;
	if (cpu < 0 || cpu >= CPU_SETSIZE)
		return NULL;
	CPU_ZERO(&cpus);
	CPU_SET(cpu, &cpus);
	return attr_on(attr, &cpus);
}

int vf_thread_start_cpus(int *cpus, int max)
{
	int n = 0;
	for (int c = 0; have_start_cpus && c < CPU_SETSIZE && n < max; c++)
		if (CPU_ISSET(c, &start_cpus))
			cpus[n++] = c;
	return n;
}

/* pthread_create() with attributes ap (NULL: the defaults), destroyed after. */
static int start_with(pthread_attr_t *ap, pthread_t *t, void *(*fn)(void *), void *arg)
{
	int rc = pthread_create(t, ap, fn, arg);
	if (ap)
		pthread_attr_destroy(ap);
	return rc;
}

int vf_thread_start(pthread_t *t, void *(*fn)(void *), void *arg)
{
	pthread_attr_t attr;
	return start_with(vf_thread_attr(&attr), t, fn, arg);
}

int vf_thread_start_away(pthread_t *t, void *(*fn)(void *), void *arg)
{
	pthread_attr_t attr;
	return start_with(vf_thread_attr_away(&attr), t, fn, arg);
}
