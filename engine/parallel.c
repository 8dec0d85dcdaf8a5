/*
 * engine/parallel.c - running one function over a few jobs on every CPU.
 */
#include "parallel.h"

#include <pthread.h>
#include <sched.h>

/* The CPUs the program started with (its first thread's, before anyone
 * pinned a thread): where jobs run. */
static cpu_set_t start_cpus;
static int have_start_cpus;

__attribute__((constructor)) static void note_start_cpus(void)
{
	have_start_cpus = sched_getaffinity(0, sizeof start_cpus, &start_cpus) == 0;
}

/* attr set to the program's CPUs; NULL when they are unknown. */
static pthread_attr_t *start_attr(pthread_attr_t *attr)
{
	if (!have_start_cpus || pthread_attr_init(attr) != 0)
		return NULL;
	pthread_attr_setaffinity_np(attr, sizeof start_cpus, &start_cpus);
	return attr;
}

int vf_thread_start(pthread_t *t, void *(*fn)(void *), void *arg)
{
	pthread_attr_t attr, *ap = start_attr(&attr);
	int rc = pthread_create(t, ap, fn, arg);
	if (ap)
		pthread_attr_destroy(ap);
	return rc;
}

void vf_parallel(void *(*fn)(void *), void *jobs, size_t job_size, int n)
{
	pthread_t tid[VF_PARALLEL_MAX];
	int started[VF_PARALLEL_MAX] = {0};
	char *job = jobs;
	if (n > VF_PARALLEL_MAX)
		n = VF_PARALLEL_MAX;
	/* on the program's CPUs: a thread starts with the CPUs of the one that
	 * starts it, and a caller may be pinned to one (the daemon's workers
	 * are), which would put every job on that one */
	pthread_attr_t attr, *ap = n > 1 ? start_attr(&attr) : NULL;
	for (int t = 1; t < n; t++)
		started[t] = pthread_create(&tid[t], ap, fn, job + (size_t)t * job_size) == 0;
	if (ap)
		pthread_attr_destroy(ap);
	if (n > 0)
		fn(job);
	for (int t = 1; t < n; t++) {
		if (started[t])
			pthread_join(tid[t], NULL);
		else
			fn(job + (size_t)t * job_size);
	}
}
