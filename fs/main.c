/*
 * fs/main.c - the vecfs daemon: `vecfs [options] STORE MOUNTPOINT`.
 *
 * Options, --help and --version; then (unless -f) a fork whose parent waits
 * until the child has opened the store and mounted, so the command returns
 * once the mount is usable and fails with a message when it is not (a
 * second daemon on one STORE, a bad mountpoint).  The store is opened after
 * the fork.  SIGINT, SIGTERM and SIGHUP are taken by a thread that ends the
 * session and unmounts.
 */
#include "daemon.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <poll.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ahead.h"
#include "fuse_compat.h"
#include "inode.h"
#include "ops.h"
#include "out_cache.h"

static fs_mount the_mount;

struct options {
	char *store;
	int extra;           /* arguments beyond STORE MOUNTPOINT */
	int no_passthrough;  /* -o no_passthrough */
	unsigned max_sessions;   /* -o max_sessions=N */
	unsigned query_input_mb; /* -o query_input_mb=N */
};

static const struct fuse_opt option_spec[] = {
	{"no_passthrough", offsetof(struct options, no_passthrough), 1},
	{"max_sessions=%u", offsetof(struct options, max_sessions), 0},
	{"query_input_mb=%u", offsetof(struct options, query_input_mb), 0},
	FUSE_OPT_END,
};

static int nonopt_seen;

static int opt_proc(void *data, const char *arg, int key, struct fuse_args *outargs)
{
	(void)outargs;
	struct options *o = data;
	if (key == FUSE_OPT_KEY_NONOPT) {
		nonopt_seen++;
		if (!o->store) {
			o->store = strdup(arg);
			return 0;
		}
		if (nonopt_seen > 2) {
			o->extra = 1;
			return 0;
		}
		return 1; /* the mountpoint, for fuse_parse_cmdline */
	}
	return 1;
}

static void usage(FILE *f, const char *prog, int full)
{
	fprintf(f, "usage: %s [options] STORE MOUNTPOINT\n", prog);
	if (!full) {
		fprintf(f, "(%s --help for the options)\n", prog);
		return;
	}
	fprintf(f,
		"\n"
		"Mount the vecfs vector index kept in directory STORE (created if missing) on\n"
		"MOUNTPOINT.  The command returns once the mount is usable; unmount with\n"
		"`fusermount3 -u MOUNTPOINT`, SIGINT or SIGTERM.  See MOUNTPOINT/README.\n"
		"\n"
		"Options:\n"
		"    -o no_passthrough      serve query/ID/out through the daemon, not from\n"
		"                           a file the kernel reads directly (FUSE\n"
		"                           passthrough, used when the kernel offers it)\n"
		"    -o max_sessions=N      query sessions open at once (default %u);\n"
		"                           mkdir query/ID past it fails with ENOSPC\n"
		"    -o query_input_mb=N    MiB that the `in` files of all sessions may\n"
		"                           hold together (default %u); a write past it\n"
		"                           fails with ENOSPC\n"
		"\n"
		"libfuse's options:\n", SESSIONS_DEFAULT, QUERY_INPUT_MB_DEFAULT);
}

/* ---------------------------------------------------------------- signals */

static struct fuse_session *session;
static const char *mountpoint;
static pthread_mutex_t stop_mu = PTHREAD_MUTEX_INITIALIZER;
static int loop_done, unmounted;

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
	sigset_t *set = arg;
	for (;;) {
		int sig = 0;
		if (sigwait(set, &sig) != 0)
			continue;
		pthread_mutex_lock(&stop_mu);
		if (!loop_done && !unmounted) {
			the_mount.stopping = 1;
			fuse_session_exit(session);
			fs_loop_stop();
			/* unmount without closing the session's descriptor: the loop's
			 * threads see the connection end and return */
			lazy_unmount(mountpoint);
			unmounted = 1;
		}
		pthread_mutex_unlock(&stop_mu);
	}
	return NULL;
}

/* ---------------------------------------------------------------- main */

/* --help, --version and bad arguments: the exit status. */
static int early_exit(const struct fuse_cmdline_opts *co, const struct options *o, const char *prog)
{
	if (co->show_help) {
		usage(stdout, prog, 1);
		fflush(stdout);
		fuse_cmdline_help();
		fuse_lowlevel_help();
		return 0;
	}
	if (co->show_version) {
		printf("vecfs %s\n", VECFS_VERSION);
		fflush(stdout);
		fuse_lowlevel_version();
		return 0;
	}
	fprintf(stderr, "%s: %s\n", prog,
		o->extra ? "too many arguments" : "STORE and MOUNTPOINT are required");
	usage(stderr, prog, 0);
	return 2;
}

static void report(int fd, unsigned char status)
{
	if (fd < 0)
		return;
	ssize_t w;
	do
		w = write(fd, &status, 1);
	while (w < 0 && errno == EINTR);
	close(fd);
}

int main(int argc, char *argv[])
{
	struct fuse_args args = FUSE_ARGS_INIT(argc, argv);
	struct fuse_cmdline_opts co;
	struct options o;
	const char *prog = strrchr(argv[0], '/') ? strrchr(argv[0], '/') + 1 : argv[0];
	int status_fd = -1, ret = -1;

	memset(&o, 0, sizeof o);
	memset(&co, 0, sizeof co);
	if (fuse_opt_parse(&args, &o, option_spec, opt_proc) == -1) {
		fuse_opt_free_args(&args);
		free(o.store);
		return 2;
	}
	if (fuse_parse_cmdline(&args, &co) != 0) {
		usage(stderr, prog, 0);
		fuse_opt_free_args(&args);
		free(o.store);
		return 2;
	}
	if (co.show_help || co.show_version || !o.store || !co.mountpoint || o.extra)
		ret = early_exit(&co, &o, prog);
	if (ret != -1) {
		fuse_opt_free_args(&args);
		free(co.mountpoint);
		free(o.store);
		return ret;
	}
	ret = 1;
	/* STORE as an absolute path: the daemon leaves the current directory */
	char *store_abs;
	if (o.store[0] == '/') {
		store_abs = strdup(o.store);
	} else {
		char cwd[PATH_MAX];
		if (!getcwd(cwd, sizeof cwd)) {
			perror("vecfs: getcwd");
			return 1;
		}
		store_abs = malloc(strlen(cwd) + strlen(o.store) + 2);
		if (store_abs)
			sprintf(store_abs, "%s/%s", cwd, o.store);
	}
	if (!store_abs) {
		fprintf(stderr, "vecfs: out of memory\n");
		return 1;
	}
	the_mount.store_dir = store_abs;
	the_mount.max_sessions = o.max_sessions ? o.max_sessions : SESSIONS_DEFAULT;
	the_mount.query_input.max = (size_t)(o.query_input_mb ? o.query_input_mb :
					     QUERY_INPUT_MB_DEFAULT) << 20;
	pthread_mutex_init(&the_mount.query_input.mu, NULL);
	mountpoint = co.mountpoint;

	if (!co.foreground) {
		int pfd[2];
		if (pipe(pfd) != 0) {
			perror("vecfs: pipe");
			return 1;
		}
		fflush(NULL);
		pid_t pid = fork();
		if (pid < 0) {
			perror("vecfs: fork");
			return 1;
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
		status_fd = pfd[1];
		setsid();
	}

	/* every thread started from here on leaves these to the signal thread */
	static sigset_t sigs;
	struct sigaction sa;
	sigemptyset(&sigs);
	sigaddset(&sigs, SIGINT);
	sigaddset(&sigs, SIGTERM);
	/* SIGHUP ends the daemon unless it was started ignoring it (nohup) */
	if (sigaction(SIGHUP, NULL, &sa) == 0 && sa.sa_handler != SIG_IGN)
		sigaddset(&sigs, SIGHUP);
	/* an asynchronous command of a shell starts with SIGINT ignored */
	signal(SIGINT, SIG_DFL);
	signal(SIGTERM, SIG_DFL);
	pthread_sigmask(SIG_BLOCK, &sigs, NULL);
	signal(SIGPIPE, SIG_IGN);

	char err[512] = "";
	/* descriptors: every query session may hold one (its out), beside
	 * ingest spools and backups; take all that the hard limit allows */
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
	int rc = vecfs_open(store_abs, &the_mount.store, err, sizeof err);
	if (rc) {
		fprintf(stderr, "vecfs: cannot open store %s: %s\n", store_abs, err[0] ? err : strerror(-rc));
		report(status_fd, rc == -EBUSY ? 3 : 1);
		fuse_opt_free_args(&args);
		free(co.mountpoint);
		free(o.store);
		free(store_abs);
		return rc == -EBUSY ? 3 : 1;
	}
	tree_init(&the_mount);
	session = fuse_session_new(&args, &fs_ops, sizeof fs_ops, NULL);
	if (!session) {
		fprintf(stderr, "vecfs: cannot start the FUSE session (bad -o option?)\n");
		goto out_store;
	}
	tree_set_session(session, !co.singlethread, !o.no_passthrough);
	if (fuse_session_mount(session, co.mountpoint) != 0) {
		fprintf(stderr, "vecfs: cannot mount on %s\n", co.mountpoint);
		goto out_session;
	}
	if (pt_install(session, !o.no_passthrough) != 0) {
		fprintf(stderr, "vecfs: cannot set up the FUSE device's I/O\n");
		fuse_session_unmount(session);
		goto out_session;
	}
	pthread_t sth;
	if (pthread_create(&sth, NULL, signal_thread, &sigs) != 0) {
		fprintf(stderr, "vecfs: cannot start the signal thread\n");
		fuse_session_unmount(session);
		goto out_session;
	}
	pthread_detach(sth);

	if (status_fd >= 0) {
		report(status_fd, 0);
		status_fd = -1;
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

	if (co.singlethread) {
		rc = fuse_session_loop(session);
	} else if (co.clone_fd) {
		/* a device descriptor per thread: libfuse's own loop */
		struct fuse_loop_config lc;
		memset(&lc, 0, sizeof lc);
		lc.clone_fd = co.clone_fd;
		lc.max_idle_threads = co.max_idle_threads ? co.max_idle_threads : 10;
		rc = fuse_session_loop_mt(session, &lc);
	} else {
		rc = fs_loop(session, co.max_threads ? co.max_threads : 10);
		if (rc == -ETIMEDOUT) {
			/* requests still run and use the store: no tidying up under
			 * them; every committed write is already durable */
			fprintf(stderr, "vecfs: requests still running a minute after the "
				"stop; exiting without them\n");
			_exit(1);
		}
		if (rc)
			fprintf(stderr, "vecfs: the session loop ended: %s\n", strerror(-rc));
	}
	ret = rc == 0 ? 0 : 1;

	the_mount.stopping = 1;
	pthread_mutex_lock(&stop_mu);
	loop_done = 1;
	int need_unmount = !unmounted;
	pthread_mutex_unlock(&stop_mu);
	if (!need_unmount) {
		/* unmounted by the signal thread: let libfuse tidy up only when the
		 * connection is gone, so it cannot unmount a newer mount there */
		struct pollfd pfd = {fuse_session_fd(session), 0, 0};
		need_unmount = poll(&pfd, 1, 0) == 1 && (pfd.revents & POLLERR);
	}
	if (need_unmount)
		fuse_session_unmount(session);
out_session:
	pt_detach();
	fuse_session_destroy(session);
out_store:
	ahead_stop();
	tree_destroy();
	vecfs_close(the_mount.store);
	if (status_fd >= 0)
		report(status_fd, 1);
	fuse_opt_free_args(&args);
	free(co.mountpoint);
	free(o.store);
	free(store_abs);
	return ret;
}
