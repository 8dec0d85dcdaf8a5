/*
 * fs/fuse_compat.c - the daemon's FUSE session from start to end.
 *
 * Unless -f, the daemon forks before it opens the store, and the parent
 * waits until the child has mounted (fs_fc_started()), so the command returns
 * once the mount is usable and fails with a message when it is not (a
 * second daemon on one STORE, a bad mountpoint).  SIGINT, SIGTERM and
 * SIGHUP are taken by a thread that ends the session and unmounts; other
 * signals that would end the daemon for nothing are ignored.  The
 * session is served by loop.c, or with -s or -o clone_fd by libfuse's
 * loops.
 */
#include "fuse_compat_private.h"
#include "log.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

fuse_compat *fs_fc_new(void)
{
	fuse_compat *fc = calloc(1, sizeof *fc);
	if (!fc)
		return NULL;
	if (fs_loop_init(fc) != 0) {
		free(fc);
		return NULL;
	}
	fc->status_fd = -1;
	sigemptyset(&fc->sigs);
	pthread_mutex_init(&fc->stop_mu, NULL);
	fs_pt_init(fc);
	return fc;
}

void fs_fc_free(fuse_compat *fc)
{
	if (!fc)
		return;
	if (fc->se) /* made, never mounted */
		fuse_session_destroy(fc->se);
	fs_loop_fini(fc);
	pthread_mutex_destroy(&fc->stop_mu);
	free(fc);
}

/* ---------------------------------------------------------------- start */

int fs_fc_background(fuse_compat *fc, const fc_options *o)
{
	if (!o->foreground) {
		int pfd[2];
		if (pipe(pfd) != 0)
			return -errno;
		fflush(NULL);
		pid_t pid = fork();
		if (pid < 0) {
			int e = errno;
			close(pfd[0]);
			close(pfd[1]);
			return -e;
		}
		if (pid > 0) {
			unsigned char st = 1;
			ssize_t r;
			close(pfd[1]);
			do
				r = read(pfd[0], &st, 1);
			while (r < 0 && errno == EINTR);
			if (r != 1) {
				int ws;
				st = 1;
				if (waitpid(pid, &ws, 0) == pid && WIFEXITED(ws) && WEXITSTATUS(ws))
					st = (unsigned char)WEXITSTATUS(ws);
			}
			_exit(st);
		}
		close(pfd[0]);
		fc->status_fd = pfd[1];
		setsid();
	}

	/* every thread started from here on leaves these to the signal thread */
	struct sigaction sa;
	sigaddset(&fc->sigs, SIGINT);
	sigaddset(&fc->sigs, SIGTERM);
	/* SIGHUP ends the daemon unless it was started ignoring it (nohup) */
	if (sigaction(SIGHUP, NULL, &sa) == 0 && sa.sa_handler != SIG_IGN)
		sigaddset(&fc->sigs, SIGHUP);
	/* an asynchronous command of a shell starts with SIGINT ignored */
	signal(SIGINT, SIG_DFL);
	signal(SIGTERM, SIG_DFL);
	pthread_sigmask(SIG_BLOCK, &fc->sigs, NULL);
	/* signals whose default ends a process and that mean nothing to the
	 * daemon: ignored, so that a stray one cannot leave a dead mount */
	static const int ignored[] = {SIGPIPE, SIGUSR1, SIGUSR2, SIGALRM, SIGVTALRM,
				      SIGIO, SIGPWR, SIGXFSZ};
	for (size_t i = 0; i < sizeof ignored / sizeof ignored[0]; i++)
		signal(ignored[i], SIG_IGN);
	return 0;
}

void fs_fc_started(fuse_compat *fc, int status)
{
	if (fc->status_fd < 0)
		return;
	unsigned char st = (unsigned char)status;
	ssize_t w;
	do
		w = write(fc->status_fd, &st, 1);
	while (w < 0 && errno == EINTR);
	close(fc->status_fd);
	fc->status_fd = -1;
	if (status)
		return;
	int fd = open("/dev/null", O_RDWR);
	if (fd >= 0) {
		dup2(fd, 0);
		dup2(fd, 1);
		dup2(fd, 2);
		if (fd > 2)
			close(fd);
	}
	if (chdir("/") != 0) {
		/* nothing depends on the current directory */
	}
}

/* ---------------------------------------------------------------- signals */

static void lazy_unmount(const char *where)
{
	if (geteuid() == 0) {
		umount2(where, MNT_DETACH);
		return;
	}
	pid_t pid = fork();
	if (pid == 0) {
		int fd = open("/dev/null", O_RDWR);
		if (fd >= 0) {
			dup2(fd, 0);
			dup2(fd, 1);
			dup2(fd, 2);
		}
		execlp("fusermount3", "fusermount3", "-u", "-z", "-q", where, (char *)NULL);
		_exit(127);
	}
	if (pid > 0)
		while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
			;
}

static void *signal_thread(void *arg)
{
	fuse_compat *fc = arg;
	for (;;) {
		int sig = 0;
		if (sigwait(&fc->sigs, &sig) != 0)
			continue;
		pthread_mutex_lock(&fc->stop_mu);
		if (!fc->loop_done && !fc->unmounted) {
			fs_log_msg("%s: unmounting %s", sig == SIGINT ? "SIGINT" : sig == SIGHUP ? "SIGHUP" : "SIGTERM",
				fc->mountpoint);
			fc->on_stop(fc->userdata);
			fuse_session_exit(fc->se);
			fs_loop_stop(fc);
			/* unmount without closing the session's descriptor: the loop's
			 * threads see the connection end and return */
			lazy_unmount(fc->mountpoint);
			fc->unmounted = 1;
		}
		int quit = fc->sig_quit;
		pthread_mutex_unlock(&fc->stop_mu);
		if (quit)
			break;
	}
	return NULL;
}

/* ---------------------------------------------------------------- session */

int fs_fc_session_make(fuse_compat *fc, struct fuse_args *args, const struct fuse_lowlevel_ops *ops,
		    void *userdata)
{
	fc->userdata = userdata;
	fc->se = fuse_session_new(args, ops, sizeof *ops, userdata);
	if (!fc->se) {
		fs_log_msg("cannot start the FUSE session (bad -o option?)");
		return -EINVAL;
	}
	return 0;
}

/* Why a mount failed, when it is the FUSE device: it is missing, or this
 * process may not open it (libfuse's own line says less). */
static void why_no_mount(const char *mnt)
{
	int fd = open("/dev/fuse", O_RDWR | O_CLOEXEC);
	if (fd >= 0) {
		close(fd);
		fs_log_msg("cannot mount on %s", mnt);
		return;
	}
	fs_log_msg("cannot mount on %s: /dev/fuse: %s (is the fuse module loaded, and may this user use it?)",
		mnt, strerror(errno));
}

int fs_fc_mount(fuse_compat *fc, const fc_options *o, void (*on_stop)(void *))
{
	fc->on_stop = on_stop;
	fc->mountpoint = o->mountpoint;
	if (fuse_session_mount(fc->se, o->mountpoint) != 0) {
		why_no_mount(o->mountpoint);
		goto out_session;
	}
	if (fs_pt_install(fc, o->passthrough) != 0) {
		fs_log_msg("cannot set up the FUSE device's I/O");
		goto out_unmount;
	}
	if (pthread_create(&fc->sig_thread, NULL, signal_thread, fc) != 0) {
		fs_log_msg("cannot start the signal thread");
		goto out_unmount;
	}
	fc->sig_started = 1;
	return 0;
out_unmount:
	fuse_session_unmount(fc->se);
out_session:
	fs_pt_detach(fc);
	fuse_session_destroy(fc->se);
	fc->se = NULL;
	return -1;
}

int fs_fc_serve(fuse_compat *fc, const fc_options *o)
{
	int rc;
	if (o->single) {
		rc = fuse_session_loop(fc->se);
	} else if (o->clone_fd) {
		/* a device descriptor per thread: libfuse's own loop */
		struct fuse_loop_config lc;
		memset(&lc, 0, sizeof lc);
		lc.clone_fd = o->clone_fd;
		lc.max_idle_threads = o->max_idle ? o->max_idle : 10;
		rc = fuse_session_loop_mt(fc->se, &lc);
	} else {
		rc = fs_loop(fc, o->max_threads ? o->max_threads : 10);
		if (rc == -ETIMEDOUT) {
			/* requests still run and use the store: no tidying up under
			 * them; every committed write is already durable */
			fs_log_msg("requests still running a minute after the "
				"stop; exiting without them");
			_exit(1);
		}
		if (rc)
			fs_log_msg("the session loop ended: %s", strerror(-rc));
	}
	return rc == 0 ? 0 : 1;
}

void fs_fc_unmount(fuse_compat *fc)
{
	pthread_mutex_lock(&fc->stop_mu);
	fc->loop_done = 1;
	fc->sig_quit = 1;
	int need_unmount = !fc->unmounted;
	pthread_mutex_unlock(&fc->stop_mu);
	if (fc->sig_started) {
		/* the signal thread reads fc: it ends before fc can be freed */
		pthread_kill(fc->sig_thread, SIGTERM);
		pthread_join(fc->sig_thread, NULL);
		fc->sig_started = 0;
	}
	if (!need_unmount) {
		/* unmounted by the signal thread: let libfuse tidy up only when the
		 * connection is gone, so it cannot unmount a newer mount there */
		struct pollfd pfd = {fuse_session_fd(fc->se), 0, 0};
		need_unmount = poll(&pfd, 1, 0) == 1 && (pfd.revents & POLLERR);
	}
	if (need_unmount)
		fuse_session_unmount(fc->se);
	fs_pt_detach(fc);
	fuse_session_destroy(fc->se);
	fc->se = NULL;
}

struct fuse_session *fs_fc_session(fuse_compat *fc)
{
	return fc->se;
}

const char *fs_fc_mountpoint(fuse_compat *fc)
{
	return fc->mountpoint ? fc->mountpoint : "";
}
