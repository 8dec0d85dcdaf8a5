/*
 * engine/parallel.h - running one function over a few jobs on every CPU.
 */
#ifndef VF_PARALLEL_H
#define VF_PARALLEL_H

#include <pthread.h>
#include <stddef.h>

#define VF_PARALLEL_MAX 16 /* most jobs at once */

/* Run fn on each of n jobs (n <= VF_PARALLEL_MAX), an array of job_size
 * bytes each: jobs 1..n-1 on threads of their own, job 0 on the caller's,
 * and a job whose thread cannot start on the caller's too.  Returns when
 * every job is done. */
void vf_parallel(void *(*fn)(void *), void *jobs, size_t job_size, int n);

/* pthread_create() of a thread that runs on the CPUs the program started
 * with, not on those of the thread that starts it (a daemon's worker may be
 * pinned to one CPU, and a thread inherits its starter's CPUs).  Returns 0
 * or pthread_create()'s error. */
int vf_thread_start(pthread_t *t, void *(*fn)(void *), void *arg);

#endif
