/*
 * fs/loop.c - the session loop: the threads that read requests from the
 * FUSE device and run their handlers.
 *
 * One worker is pinned to each CPU the daemon may run on (up to PINNED_MAX).
 * A worker waits in epoll_wait() on an epoll instance of its own; the
 * device, which is non-blocking, is in that instance only while the worker
 * listens.  The worker that reads a request on the caller's CPU runs as
 * soon as the caller sleeps, and its reply wakes the caller on that same
 * CPU: a round trip then costs two context switches and no cross-CPU wakeup
 * (measured: 15-22 us a round trip against 21-45 us with libfuse's loop on
 * the same 2-CPU machine).
 *
 * Who listens.  Every listening worker is woken by each request, and waking
 * a worker on an idle CPU costs the caller an interrupt to that CPU (on a
 * virtual machine: 10-15 us in the caller's write(), measured with the
 * kernel's scheduler trace).  So not every worker listens:
 *  - a worker listens from its reply on: one client's next request most
 *    likely comes from the CPU it just woke;
 *  - while a worker handles a request that may take long and no other
 *    waiting worker listens, it makes one listen ("standby"), so that
 *    another client is not left waiting; the standby stops at the next
 *    reply of another worker.  A synchronous write of in that runs one
 *    query through the index makes none (quick_request()): it answers in
 *    microseconds, and the standby's two epoll_ctl() calls would cost it
 *    more than another client could wait for it (on a 2-CPU virtual
 *    machine they cost a request 5-6 us); its handler asks for one when
 *    the query may be long (fs_fc_request_long());
 *  - every ROUND_REPLIES replies, a round: a pinned worker that read no
 *    request since the last round stops listening, and one that does not
 *    listen becomes a standby, to find out whether a client now runs on its
 *    CPU (a client the scheduler moved would otherwise be served from the
 *    other CPU until the next round).  With two clients on two CPUs, both
 *    workers read requests in every round and both keep listening.
 * Each of these is an epoll_ctl(), which wakes nobody.  A worker whose own
 * epoll_ctl() fails (no memory) polls the device with poll() instead, for
 * 10 ms at a time, trying to listen again in between.
 *
 * When every worker is busy (a long ingest commit, a backup read) another,
 * unpinned, one starts, listening, up to max_threads.  An extra worker
 * leaves when it has heard no request for EXTRA_IDLE_MS (rounds stop it
 * listening: from then on it answers only as a standby) while as many
 * others as there are pinned ones wait: leaving at once would start and
 * end threads by the hundred under a few steady clients (measured: 800 in
 * a second).  A worker
 * counts as waiting again from the moment its reply goes out
 * (fs_loop_replied()), not from when it is back in epoll_wait(): the reply
 * wakes the caller, which on the same CPU may run, and send its next
 * request, before the worker that answered gets the CPU back.  Counted as
 * busy meanwhile, that worker would make the next request look like one
 * that nobody waits for, and start a thread for it (measured: hundreds of
 * threads started and gone in a run of the bench, on one client).
 *
 * fs_loop_stop() (SIGINT, SIGTERM) wakes every worker; requests in progress
 * get STOP_GRACE_S to finish.  One that is still running then may wait on
 * the kernel for a request nobody reads any more: the daemon exits without
 * it (a commit is one LMDB transaction: nothing acknowledged is lost).
 */
#include "fuse_compat_private.h"
#include "held.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/fuse.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <time.h>
#include <unistd.h>

#define PINNED_MAX 8
#define EXTRA_IDLE_MS 1000   /* an extra worker waits this long, then may leave */
#define STOP_GRACE_S 60      /* after a stop, requests in progress get this long */
#define ROUND_REPLIES 16     /* replies between two rounds (see above) */

typedef struct worker worker;

struct loop {
	struct fuse_session *se;
	int fd;
	int wake[2];           /* a pipe: readable once the loop must end */
	pthread_mutex_t mu;
	pthread_cond_t done;
	unsigned workers;      /* running */
	unsigned pinned;       /* workers pinned to a CPU */
	unsigned max_threads;
	uint64_t extra_started; /* extra workers started since the loop began */
	uint64_t replies;      /* requests answered: every ROUND_REPLIES, a round */
	worker *all;           /* every running worker */
	int err;               /* the first error that ended the loop */
	int stopping;          /* the loop is ending */
	struct timespec stop_at; /* since when (CLOCK_MONOTONIC) */
	int fault_listen;      /* set (from the environment, at the start) by
				* the tests only: a worker may not listen again
				* after a reply, as if epoll_ctl() had no memory */
};

struct worker {
	loop *l;
	worker *prev, *next;   /* in l->all */
	pthread_t th;
	int busy;              /* in a request, until its reply goes out; set
				* and cleared by its own thread, with l->mu held */
	int cpu;               /* -1: not pinned */
	int extra;             /* started because every other one was busy */
	int ep;                /* its epoll instance: the stop pipe, and the
				* device while it listens */
	int listens;
	int standby;           /* listens for another's sake, until the next
				* reply of another worker */
	int waiting;           /* for a request */
	int served;            /* read a request since the last round */
	int deaf;              /* its epoll_ctl() failed when it was to listen
				* (out of memory): it polls the device itself */
};

static int start_worker(loop *l, int cpu, int extra);
static void end_loop_locked(loop *l, int err);

/* With l->mu held: the device in, or out of, w's epoll instance.  0, or
 * -errno (the device stays as it was). */
static int set_listening(worker *w, int on)
{
	if (w->listens == on)
		return 0;
	struct epoll_event ev = { .events = EPOLLIN, .data.fd = w->l->fd };
	if (epoll_ctl(w->ep, on ? EPOLL_CTL_ADD : EPOLL_CTL_DEL, w->l->fd, &ev) != 0)
		return -errno;
	w->listens = on;
	if (!on)
		w->standby = 0;
	return 0;
}

/* With l->mu held: w, which answered a request, listens again.  0 or
 * -errno. */
static int listen_again(worker *w)
{
	return w->l->fault_listen ? -ENOMEM : set_listening(w, 1);
}

/* With l->mu held: does a worker other than w wait, listening? */
static int other_listens(const loop *l, const worker *w)
{
	for (const worker *x = l->all; x; x = x->next)
		if (x != w && x->waiting && x->listens)
			return 1;
	return 0;
}

/* With l->mu held: how many workers wait for a request. */
static unsigned waiting_count(const loop *l)
{
	unsigned n = 0;
	for (const worker *x = l->all; x; x = x->next)
		n += x->waiting != 0;
	return n;
}

/* With l->mu held: a waiting worker other than w, a pinned one if any. */
static worker *waiting_other(loop *l, const worker *w)
{
	worker *pick = NULL;
	for (worker *x = l->all; x; x = x->next)
		if (x != w && x->waiting && (!pick || (pick->extra && !x->extra)))
			pick = x;
	return pick;
}

/* With l->mu held: w, busy, may stay so for long.  Unless another waiting
 * worker listens, make one a standby (a pinned one if it can), or, with
 * none waiting, start one more. */
static void need_listener(loop *l, worker *w)
{
	if (waiting_count(l) == 0) {
		if (l->workers < l->max_threads && start_worker(l, -1, 1) == 0)
			l->extra_started++;
		return;
	}
	if (other_listens(l, w))
		return;
	worker *pick = waiting_other(l, w);
	if (pick && set_listening(pick, 1) == 0)
		pick->standby = 1;
}

/* With l->mu held: w begins a request; `quick`: one that calls
 * fs_fc_request_long() if it turns out not to be. */
static void begin_request(loop *l, worker *w, int quick)
{
	w->busy = 1;
	w->waiting = 0;
	w->served = 1;
	if (!quick)
		need_listener(l, w);
}

#define QUICK_WRITE (64u << 10)

/* Requests that make no standby, and whose handlers call
 * fs_fc_request_long() before any long work or any wait on a lock that
 * long work may hold: a release, which comes right after the close() that
 * flushed the file, and the caller's next request with it (a standby for
 * it would take that next request on another CPU); and a write of at most
 * QUICK_WRITE bytes: a synchronous write of in runs one query through the
 * index in microseconds, and fs_op_write() asks for a standby before every
 * other write (kind_file_ops' write_quick in ops_file.c); and an ioctl,
 * whose only handler, the query call of in, asks as that write does. */
static int quick_request(const struct fuse_buf *buf)
{
	if ((buf->flags & FUSE_BUF_IS_FD) || buf->size < sizeof(struct fuse_in_header))
		return 0;
	switch (((const struct fuse_in_header *)buf->mem)->opcode) {
	case FUSE_RELEASE: case FUSE_RELEASEDIR: case FUSE_FORGET: case FUSE_BATCH_FORGET:
		return 1;
	case FUSE_WRITE:
		return buf->size <= QUICK_WRITE;
	case FUSE_IOCTL: /* the query call (fs_qs_call() asks when long) */
		return 1;
	default:
		return 0;
	}
}

/* With l->mu held: the worker the calling thread is, while it handles a
 * request; NULL on other threads. */
static worker *busy_self(loop *l)
{
	pthread_t me = pthread_self();
	for (worker *x = l->all; x; x = x->next)
		if (x->busy && pthread_equal(x->th, me))
			return x;
	return NULL;
}

void fs_fc_request_long(fuse_compat *fc)
{
	loop *l = fc->loop;
	pthread_mutex_lock(&l->mu);
	worker *w = busy_self(l);
	if (w)
		need_listener(l, w);
	pthread_mutex_unlock(&l->mu);
}

/* With l->mu held: w answered its request and listens again; the others
 * that listened for its sake stop, or, every ROUND_REPLIES, a round. */
static void end_request(loop *l, worker *w)
{
	w->waiting = 1;
	w->standby = 0;
	w->deaf = listen_again(w) != 0; /* then it polls: see wait_request() */
	int round = ++l->replies % ROUND_REPLIES == 0;
	for (worker *x = l->all; x; x = x->next) {
		if (x == w || !x->waiting)
			continue;
		if (!round) {
			if (x->standby)
				set_listening(x, 0);
		} else if (x->extra) {
			/* it answers while others are busy, as a standby: a
			 * listening one could win its CPU's requests and never
			 * go idle long enough to leave */
			set_listening(x, 0);
		} else if (!x->served) {
			if (x->listens && !x->standby)
				set_listening(x, 0); /* no client of its CPU */
			else if (set_listening(x, 1) == 0)
				x->standby = 1; /* is there one now? */
		}
	}
	if (round)
		for (worker *x = l->all; x; x = x->next)
			x->served = 0;
}

/* With l->mu held: w, busy, counts as waiting again (it is about to). */
static void replied(loop *l, worker *w)
{
	w->busy = 0;
	end_request(l, w);
}

void fs_loop_replied(fuse_compat *fc)
{
	loop *l = fc->loop;
	pthread_mutex_lock(&l->mu);
	worker *w = busy_self(l);
	if (w)
		replied(l, w);
	pthread_mutex_unlock(&l->mu);
}

static void forget_worker(loop *l, worker *w);

/* An extra worker leaves while as many others wait as there are pinned
 * ones; if it listened, and no other waiting one does, a pinned one takes
 * its place.  1: it left (w is gone). */
static int leave_if_spare(loop *l, worker *w)
{
	pthread_mutex_lock(&l->mu);
	int leave = waiting_count(l) > l->pinned;
	if (leave && w->listens && !other_listens(l, w)) {
		worker *pick = waiting_other(l, w);
		leave = pick && set_listening(pick, 1) == 0;
	}
	if (leave) {
		forget_worker(l, w);
		pthread_cond_broadcast(&l->done);
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

/* With l->mu held: w, waiting, is no longer counted, listed or kept. */
static void forget_worker(loop *l, worker *w)
{
	l->workers--;
	if (w->prev)
		w->prev->next = w->next;
	else
		l->all = w->next;
	if (w->next)
		w->next->prev = w->prev;
	close(w->ep);
	free(w);
}

#define STOPPED 2

/* Wait until the device may hold a request (1), the loop stops (STOPPED),
 * or, for an extra worker, EXTRA_IDLE_MS pass (0).  -errno on an error. */
static int wait_request(loop *l, worker *w)
{
	if (w->deaf) {
		pthread_mutex_lock(&l->mu);
		if (listen_again(w) == 0)
			w->deaf = 0;
		pthread_mutex_unlock(&l->mu);
	}
	if (w->deaf) { /* a short poll() of its own, then try to listen again */
		struct pollfd pfd[2] = {{l->fd, POLLIN, 0}, {l->wake[0], POLLIN, 0}};
		int n = poll(pfd, 2, 10);
		if (n < 0)
			return errno == EINTR || errno == ENOMEM ? 1 : -errno;
		return pfd[1].revents ? STOPPED : 1;
	}
	struct epoll_event ev[2];
	int n = epoll_wait(w->ep, ev, 2, w->extra ? EXTRA_IDLE_MS : -1);
	if (n < 0)
		return errno == EINTR ? 1 : -errno;
	for (int i = 0; i < n; i++)
		if (ev[i].data.fd != l->fd)
			return STOPPED;
	return n > 0;
}

static void *worker_main(void *arg)
{
	worker *w = arg;
	loop *l = w->l;
	struct fuse_buf buf;

	memset(&buf, 0, sizeof buf);
	if (w->cpu >= 0) {
		cpu_set_t set;
		CPU_ZERO(&set);
		CPU_SET(w->cpu, &set);
		/* a CPU gone since the start: run anywhere */
		pthread_setaffinity_np(pthread_self(), sizeof set, &set);
	}
	for (;;) {
		if (fuse_session_exited(l->se))
			break;
		int res = fuse_session_receive_buf(l->se, &buf);
		if (res == -EAGAIN) { /* another worker took it, or nothing yet */
			int n = wait_request(l, w);
			if (n < 0) {
				pthread_mutex_lock(&l->mu);
				end_loop_locked(l, n);
				pthread_mutex_unlock(&l->mu);
				break;
			}
			if (n == STOPPED)
				break;
			if (n == 0 && w->extra && leave_if_spare(l, w))
				goto left;
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
		int quick = quick_request(&buf);
		pthread_mutex_lock(&l->mu);
		begin_request(l, w, quick);
		pthread_mutex_unlock(&l->mu);

		fuse_session_process_buf(l->se, &buf);
		if (w->busy) { /* no reply went out (FORGET) */
			pthread_mutex_lock(&l->mu);
			replied(l, w);
			pthread_mutex_unlock(&l->mu);
		}
	}
	/* the loop ends: make every other worker see it too */
	pthread_mutex_lock(&l->mu);
	forget_worker(l, w);
	end_loop_locked(l, 0);
	pthread_cond_broadcast(&l->done);
	pthread_mutex_unlock(&l->mu);
left:
	free(buf.mem);
	return NULL;
}

/* With l->mu held (or before any worker runs): a worker pinned to `cpu`
 * (-1: not pinned), listening.  Returns 0 or -errno. */
static int start_worker(loop *l, int cpu, int extra)
{
	pthread_attr_t attr;
	pthread_t th;
	worker *w = calloc(1, sizeof *w);
	if (!w)
		return -ENOMEM;
	w->l = l;
	w->cpu = cpu;
	w->extra = extra;
	w->ep = epoll_create1(EPOLL_CLOEXEC);
	struct epoll_event ev = { .events = EPOLLIN, .data.fd = l->wake[0] };
	int rc = w->ep < 0 ? -errno : 0;
	if (rc == 0 && epoll_ctl(w->ep, EPOLL_CTL_ADD, l->wake[0], &ev) != 0)
		rc = -errno;
	if (rc == 0)
		rc = set_listening(w, 1);
	if (rc) {
		if (w->ep >= 0)
			close(w->ep);
		free(w);
		return rc;
	}
	w->waiting = 1;
	worker **at = &l->all; /* at the end: stats list CPUs in order */
	while (*at) {
		w->prev = *at;
		at = &(*at)->next;
	}
	*at = w;
	l->workers++;
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	rc = pthread_create(&th, &attr, worker_main, w);
	pthread_attr_destroy(&attr);
	if (rc) {
		forget_worker(l, w);
		return -rc;
	}
	w->th = th; /* before it can take l->mu to begin a request */
	return 0;
}

int fs_fc_loop_counts(fuse_compat *fc, fs_loop_stats *st)
{
	loop *l = fc->loop;
	pthread_mutex_lock(&l->mu);
	int running = l->se != NULL;
	if (running) {
		memset(st, 0, sizeof *st);
		st->workers = l->workers;
		st->extra_started = l->extra_started;
		size_t n = 0;
		for (const worker *x = l->all; x; x = x->next) {
			if (!x->listens || x->standby)
				continue;
			st->listening++;
			char one[16];
			if (x->cpu >= 0)
				snprintf(one, sizeof one, "%s%d", n ? "," : "", x->cpu);
			else
				snprintf(one, sizeof one, "%s*", n ? "," : "");
			size_t k = strlen(one);
			if (n + k < sizeof st->listening_cpus) {
				memcpy(st->listening_cpus + n, one, k + 1);
				n += k;
			}
		}
	}
	pthread_mutex_unlock(&l->mu);
	return running;
}

void fs_loop_stop(fuse_compat *fc)
{
	loop *l = fc->loop;
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
	FS_ASSERT_HELD(&l->mu);
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

int fs_loop_init(fuse_compat *fc)
{
	loop *l = calloc(1, sizeof *l);
	if (!l)
		return -ENOMEM;
	l->fd = -1;
	l->wake[0] = l->wake[1] = -1;
	pthread_mutex_init(&l->mu, NULL);
	pthread_cond_init(&l->done, NULL);
	fc->loop = l;
	return 0;
}

void fs_loop_fini(fuse_compat *fc)
{
	loop *l = fc->loop;
	if (!l)
		return;
	pthread_cond_destroy(&l->done);
	pthread_mutex_destroy(&l->mu);
	free(l);
	fc->loop = NULL;
}

int fs_loop(fuse_compat *fc, unsigned max_threads)
{
	loop *l = fc->loop;
	struct fuse_session *se = fc->se;
	cpu_set_t cpus;
	int wake[2], rc = 0;

	if (pipe2(wake, O_CLOEXEC | O_NONBLOCK) != 0)
		return -errno;
	pthread_mutex_lock(&l->mu);
	l->fault_listen = getenv("VECFS_FAULT_LISTEN") != NULL;
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
			if ((rc = start_worker(l, c, 0)) != 0)
				break;
			l->pinned++;
		}
	} else {
		/* one CPU (or an unknown set): two workers, neither pinned */
		if ((rc = start_worker(l, -1, 0)) == 0)
			rc = start_worker(l, -1, 0);
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
