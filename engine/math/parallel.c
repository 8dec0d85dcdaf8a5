/*
 * engine/math/parallel.c - running one function over a few jobs on every CPU.
 */
#include "parallel.h"

#include <pthread.h>

void vf_parallel(void *(*fn)(void *), void *jobs, size_t job_size, int n)
{
	pthread_t tid[VF_PARALLEL_MAX];
	int started[VF_PARALLEL_MAX] = {0};
	char *job = jobs;
	if (n > VF_PARALLEL_MAX)
		n = VF_PARALLEL_MAX;
	/* on the program's CPUs but the caller's, which runs the first job: a
	 * thread starts with the CPUs of the one that starts it, and a caller
	 * may be pinned to one (the daemon's workers are), which would put
	 * every job on that one; and on all of them, the kernel put the
	 * second job of a pinned worker's search on the worker's CPU, where
	 * the two took turns while the other CPU idled (sift-128, 1,000
	 * queries an input: the search 14-19 ms in the daemon, 10 ms in a
	 * program) */
	pthread_attr_t attr, *ap = n > 1 ? vf_thread_attr_away(&attr) : NULL;
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
