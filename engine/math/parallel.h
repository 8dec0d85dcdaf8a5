/*
 * engine/math/parallel.h - running one function over a few jobs on every CPU.
 */
#ifndef VF_PARALLEL_H
#define VF_PARALLEL_H

#include <pthread.h>
#include <stddef.h>

#include "thread.h" /* vf_thread_start() */

#define VF_PARALLEL_MAX 16 /* most jobs at once */

/* Run fn on each of n jobs (n <= VF_PARALLEL_MAX), an array of job_size
 * bytes each: jobs 1..n-1 on threads of their own, job 0 on the caller's,
 * and a job whose thread cannot start on the caller's too.  Returns when
 * every job is done. */
void vf_parallel(void *(*fn)(void *), void *jobs, size_t job_size, int n);


#endif
