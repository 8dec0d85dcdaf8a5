/*
 * fs/loop.c - the session loop: the threads that read requests from the
 * FUSE device and run their handlers.
 *
 * One worker is pinned to each CPU the daemon may run on (up to PINNED_MAX)
 * and waits in poll() on the device, which is non-blocking.  A request wakes
 * every waiting worker; the one on the caller's CPU is already there when
 * the caller goes to sleep, so it usually reads the request first, and its
 * reply wakes the caller on that same CPU.  A round trip then costs two
 * context switches and no cross-CPU wakeup, which on a virtual machine is
 * the larger part of the time (measured: 15-22 us a round trip against
 * 21-45 us with libfuse's loop on the same 2-CPU machine).  The others find
 * nothing to read (EAGAIN) and wait again.
 *
 * When every worker is busy (a long ingest commit, a backup read) another,
 * unpinned, one starts, up to max_threads; such extra workers leave once
 * as many others as there are pinned ones wait again.  A worker counts as
 * waiting again from the moment its reply goes out (fs_loop_replied()), not
 * from when it is back in poll(): the reply wakes the caller, which on the
 * same CPU may run, and send its next request, before the worker that
 * answered gets the CPU back.  Counted as busy meanwhile, that worker would
 * make the next request look like one that nobody waits for, and start a
 * thread for it (measured: hundreds of threads started and gone in a run
 * of the bench, on one client).
 *
 * fs_loop_stop() (SIGINT, SIGTERM) wakes every worker; requests in progress
 * get STOP_GRACE_S to finish.  One that is still running then may wait on
 * the kernel for a request nobody reads any more: the daemon exits without
 * it (a commit is one LMDB transaction: nothing acknowledged is lost).
 */
#include "fs.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define PINNED_MAX 8
#define EXTRA_IDLE_MS 1000   /* an extra worker waits this long, then may leave */
#define STOP_GRACE_S 60      /* after a stop, requests in progress get this long */

typedef struct loop {
	struct fuse_session *se;
	int fd;
	int wake[2];           /* a pipe: readable once the loop must end */
	pthread_mutex_t mu;
	pthread_cond_t done;
	unsigned workers;      /* running */
	unsigned idle;         /* waiting for a request */
	unsigned pinned;       /* workers pinned to a CPU */
	unsigned max_threads;
	uint64_t extra_started; /* extra workers started since the loop began */
	int err;               /* the first error that ended the loop */
	int stopping;          /* the loop is ending */
	struct timespec stop_at; /* since when (CLOCK_MONOTONIC) */
} loop;

typedef struct worker {
	loop *l;
	int cpu;               /* -1: not pinned */
} worker;

/* The request this thread handles, while it is counted as busy. */
static __thread loop *busy_in;

static loop the_loop = {
	.fd = -1, .wake = {-1, -1},
	.mu = PTHREAD_MUTEX_INITIALIZER, .done = PTHREAD_COND_INITIALIZER,
};

static int start_worker(loop *l, int cpu);

/* The calling worker counts as waiting again (it is about to). */
void fs_loop_replied(void)
{
	loop *l = busy_in;
	if (!l)
		return;
	busy_in = NULL;
	pthread_mutex_lock(&l->mu);
	l->idle++;
	pthread_mutex_unlock(&l->mu);
}

/* An extra worker leaves while as many others wait as there are pinned
 * ones.  1: it leaves (the counts no longer include it). */
static int leave_if_spare(loop *l)
{
	pthread_mutex_lock(&l->mu);
	int leave = l->idle > l->pinned;
	if (leave) {
		l->idle--;
		l->workers--;
	}
	pthread_mutex_unlock(&l->mu);
	return leave;
}

/* With l->mu held. */
static void end_loop_locked(loop *l, int err)
{
	if (err && !l->err)
		l->err = err;
	if (!l->stopping) {
		l->stopping = 1;
		clock_gettime(CLOCK_MONOTONIC, &l->stop_at);
	}
	if (l->wake[1] >= 0) {
		char c = 1;
		if (write(l->wake[1], &c, 1) < 0) {
			/* the pipe holds a byte already */
		}
	}
}

static void *worker_main(void *arg)
{
	worker *w = arg;
	loop *l = w->l;
	struct fuse_buf buf;
	struct pollfd pfd[2] = {{l->fd, POLLIN, 0}, {l->wake[0], POLLIN, 0}};
	int cpu = w->cpu;
	int left = 0;          /* 1: a spare extra worker, leaving */

	free(w);
	memset(&buf, 0, sizeof buf);
	if (cpu >= 0) {
		cpu_set_t set;
		CPU_ZERO(&set);
		CPU_SET(cpu, &set);
		/* a CPU gone since the start: run anywhere */
		pthread_setaffinity_np(pthread_self(), sizeof set, &set);
	}
	for (;;) {
		if (fuse_session_exited(l->se))
			break;
		int res = fuse_session_receive_buf(l->se, &buf);
		if (res == -EAGAIN) { /* another worker took it, or nothing yet */
			int n = poll(pfd, 2, cpu < 0 ? EXTRA_IDLE_MS : -1);
			if (n < 0 && errno != EINTR) {
				pthread_mutex_lock(&l->mu);
				end_loop_locked(l, -errno);
				pthread_mutex_unlock(&l->mu);
				break;
			}
			if (n > 0 && pfd[1].revents)
				break;
			if (n == 0 && (left = leave_if_spare(l)))
				break;
			continue;
		}
		if (res == -EINTR)
			continue;
		if (res <= 0) { /* 0: the connection ended (unmounted) */
			pthread_mutex_lock(&l->mu);
			end_loop_locked(l, res);
			pthread_mutex_unlock(&l->mu);
			break;
		}
		pthread_mutex_lock(&l->mu);
		l->idle--;
		if (l->idle == 0 && l->workers < l->max_threads && start_worker(l, -1) == 0)
			l->extra_started++; /* nobody left waiting: one more */
		pthread_mutex_unlock(&l->mu);

		busy_in = l;
		fuse_session_process_buf(l->se, &buf);
		fs_loop_replied(); /* when no reply went out (FORGET) */
		if (cpu < 0 && (left = leave_if_spare(l)))
			break;
	}
	free(buf.mem);
	pthread_mutex_lock(&l->mu);
	if (!left) { /* the loop ends: make every other worker see it too */
		l->idle--;
		l->workers--;
		end_loop_locked(l, 0);
	}
	pthread_cond_broadcast(&l->done);
	pthread_mutex_unlock(&l->mu);
	return NULL;
}

/* With l->mu held (or before any worker runs).  Returns 0 or -errno. */
static int start_worker(loop *l, int cpu)
{
	pthread_attr_t attr;
	pthread_t th;
	worker *w = malloc(sizeof *w);
	if (!w)
		return -ENOMEM;
	w->l = l;
	w->cpu = cpu;
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	int rc = pthread_create(&th, &attr, worker_main, w);
	pthread_attr_destroy(&attr);
	if (rc) {
		free(w);
		return -rc;
	}
	l->workers++;
	l->idle++;
	return 0;
}

int fs_loop_counts(unsigned *workers, uint64_t *extra_started)
{
	loop *l = &the_loop;
	pthread_mutex_lock(&l->mu);
	int running = l->se != NULL;
	if (running) {
		*workers = l->workers;
		*extra_started = l->extra_started;
	}
	pthread_mutex_unlock(&l->mu);
	return running;
}

void fs_loop_stop(void)
{
	loop *l = &the_loop;
	pthread_mutex_lock(&l->mu);
	end_loop_locked(l, 0);
	pthread_mutex_unlock(&l->mu);
}

/* Wait, with l->mu held, until every worker has left: 0, or -ETIMEDOUT
 * when some are still in a request STOP_GRACE_S after the loop began to end
 * (a request can wait on the kernel, e.g. an invalidation on a page that
 * a read holds, and no worker answers that read any more). */
static int wait_workers_locked(loop *l)
{
	while (l->workers > 0) {
		struct timespec now, deadline;
		clock_gettime(CLOCK_MONOTONIC, &now);
		if (l->stopping && now.tv_sec - l->stop_at.tv_sec >= STOP_GRACE_S)
			return -ETIMEDOUT;
		clock_gettime(CLOCK_REALTIME, &deadline); /* the condition's clock */
		deadline.tv_sec += 1;
		pthread_cond_timedwait(&l->done, &l->mu, &deadline);
	}
	return 0;
}

int fs_loop(struct fuse_session *se, unsigned max_threads)
{
	loop *l = &the_loop;
	cpu_set_t cpus;
	int wake[2], rc = 0;

	if (pipe2(wake, O_CLOEXEC | O_NONBLOCK) != 0)
		return -errno;
	pthread_mutex_lock(&l->mu);
	l->se = se;
	l->fd = fuse_session_fd(se);
	l->wake[0] = wake[0];
	l->wake[1] = wake[1];
	if (l->stopping) /* stopped before it began */
		end_loop_locked(l, 0);
	pthread_mutex_unlock(&l->mu);
	int fl = fcntl(l->fd, F_GETFL);
	if (fl < 0 || fcntl(l->fd, F_SETFL, fl | O_NONBLOCK) < 0) {
		rc = -errno;
		goto out;
	}

	pthread_mutex_lock(&l->mu);
	if (sched_getaffinity(0, sizeof cpus, &cpus) == 0 && CPU_COUNT(&cpus) > 1) {
		for (int c = 0; c < CPU_SETSIZE && l->pinned < PINNED_MAX; c++) {
			if (!CPU_ISSET(c, &cpus))
				continue;
			if ((rc = start_worker(l, c)) != 0)
				break;
			l->pinned++;
		}
	} else {
		/* one CPU (or an unknown set): two workers, neither pinned */
		if ((rc = start_worker(l, -1)) == 0)
			rc = start_worker(l, -1);
		l->pinned = l->workers;
	}
	l->max_threads = max_threads > l->workers ? max_threads : l->workers + 1;
	if (rc)
		end_loop_locked(l, rc);
	int w = wait_workers_locked(l);
	if (!rc)
		rc = w ? w : l->err < 0 ? l->err : 0;
	pthread_mutex_unlock(&l->mu);
	if (w) /* workers still run: leave the descriptors to them */
		return rc;
	fcntl(l->fd, F_SETFL, fl);
out:
	pthread_mutex_lock(&l->mu); /* fs_loop_stop() may write to wake[1] */
	l->wake[0] = l->wake[1] = -1;
	pthread_mutex_unlock(&l->mu);
	close(wake[0]);
	close(wake[1]);
	return rc;
}
