/*
 * layout/thread.h - starting the library's threads on the CPUs the program
 * started with, not on those of the thread that starts them (a daemon's
 * worker may be pinned to one CPU, and a thread inherits its starter's
 * CPUs, which would put the new thread on that one).
 */
#ifndef VF_THREAD_H
#define VF_THREAD_H

#include <pthread.h>

/* pthread_create() of such a thread.  Returns 0 or pthread_create()'s
 * error. */
int vf_thread_start(pthread_t *t, void *(*fn)(void *), void *arg);
/* The same, on the program's CPUs but the one the caller runs on when it
 * has others (vf_thread_attr_away()): for a thread that works beside its
 * starter. */
int vf_thread_start_away(pthread_t *t, void *(*fn)(void *), void *arg);
/* attr initialized and set to the program's CPUs, or NULL when they are
 * unknown (or attr cannot be made); pthread_attr_destroy() it after use. */
pthread_attr_t *vf_thread_attr(pthread_attr_t *attr);
/* The same, less the CPU the calling thread runs on when the program has
 * others: for a helper of a thread that keeps working beside it (a
 * helper the kernel put on its starter's CPU, as it did beside a pinned
 * worker of the daemon, took turns with it there while another CPU
 * idled). */
pthread_attr_t *vf_thread_attr_away(pthread_attr_t *attr);
/* attr initialized and set to CPU cpu alone, or NULL. */
pthread_attr_t *vf_thread_attr_cpu(pthread_attr_t *attr, int cpu);
/* The CPUs the program started with, in order, up to max of them: how
 * many (0: unknown). */
int vf_thread_start_cpus(int *cpus, int max);

#endif
