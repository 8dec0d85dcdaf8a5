/*
 * engine/math/parallel.h - running one function over a few jobs on every
 * CPU, on threads started for the call or kept in a pool.
 */
#ifndef VF_PARALLEL_H
#define VF_PARALLEL_H

#include <pthread.h>
#include <stddef.h>

#include "thread.h" /* vf_thread_start() */

#define VF_PARALLEL_MAX 16 /* most jobs at once */

/* Threads kept one to a CPU the program started with, each started when a
 * job first needs it, for the jobs of vf_parallel_on() from threads
 * running on other CPUs.  Starting a thread for a job cost its starter
 * 0.05-0.3 ms here (setting its CPUs moves it: a call to the other CPU),
 * more than a batch of 16 queries takes to search; a kept thread is
 * woken in tens of microseconds. */
typedef struct vf_pool vf_pool;
/* The kept threads' name (/proc/PID/task/TID/comm) */
#define VF_KEPT_THREAD_NAME "vecfs-kept"

/* A pool, or NULL (out of memory, or one CPU: there is nothing to keep). */
vf_pool *vf_pool_new(void);
/* End the kept threads (no call may be running on the pool) and free it. */
void vf_pool_free(vf_pool *p);

/* Run fn on each of n jobs (n <= VF_PARALLEL_MAX), an array of job_size
 * bytes each: jobs 1..n-1 on threads of their own, job 0 on the caller's,
 * and a job whose thread cannot start on the caller's too.  Returns when
 * every job is done. */
void vf_parallel(void *(*fn)(void *), void *jobs, size_t job_size, int n);
/* The same, jobs 1..n-1 first on p's idle kept threads of other CPUs than
 * the caller's, the rest on threads started for them (p NULL: all; in a
 * process forked from the one that made p too). */
void vf_parallel_on(vf_pool *p, void *(*fn)(void *), void *jobs, size_t job_size, int n);

#endif
