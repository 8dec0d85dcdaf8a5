/*
 * fs/main.c - the vecfs daemon: `vecfs [options] STORE MOUNTPOINT`.
 *
 * Options, --help and --version; then the daemon starts in the background
 * (fuse_compat.c), opens the store, mounts and serves until unmounted or
 * signalled.  It also takes the arguments mount.fuse3 passes for an fstab
 * entry of type fuse.vecfs (`STORE MNT -o OPTS`, with OPTS holding
 * `defaults` and `x-` options, which mean nothing here and are dropped).
 */
#include "daemon.h"

#include <errno.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "fuse_compat.h"
#include "log.h"
#include "ops.h"

/* exit statuses, as --help lists them */
enum {
	EXIT_OK = 0,
	EXIT_MOUNT = 1, /* the mount failed, or the session ended on an error */
	EXIT_USAGE = 2, /* bad options or arguments, or --log FILE cannot be opened */
	EXIT_BUSY = 3,  /* another vecfs process holds STORE */
	EXIT_STORE = 4, /* STORE cannot be created or opened */
};

struct options {
	char *store;
	int extra;           /* arguments beyond STORE MOUNTPOINT */
	int nonopt_seen;     /* arguments that are not options, so far */
	int no_passthrough;  /* -o no_passthrough */
	unsigned max_sessions;   /* -o max_sessions=N */
	unsigned query_input_mb; /* -o query_input_mb=N */
	unsigned ingest_buffer_mb; /* -o ingest_buffer_mb=N */
	unsigned query_results;  /* -o query_results=N */
	unsigned query_output_mb; /* -o query_output_mb=N */
	unsigned read_buffer_mb; /* -o read_buffer_mb=N */
	char *log;           /* --log FILE, -o log=FILE */
	int fsname;          /* -o fsname= given */
	int subtype;         /* -o subtype= given */
	int mnt_missing;     /* MOUNTPOINT does not resolve */
};

static const struct fuse_opt option_spec[] = {
	{"no_passthrough", offsetof(struct options, no_passthrough), 1},
	{"max_sessions=%u", offsetof(struct options, max_sessions), 0},
	{"query_input_mb=%u", offsetof(struct options, query_input_mb), 0},
	{"ingest_buffer_mb=%u", offsetof(struct options, ingest_buffer_mb), 0},
	{"query_results=%u", offsetof(struct options, query_results), 0},
	{"query_output_mb=%u", offsetof(struct options, query_output_mb), 0},
	{"read_buffer_mb=%u", offsetof(struct options, read_buffer_mb), 0},
	{"log=%s", offsetof(struct options, log), 0},
	{"--log %s", offsetof(struct options, log), 0},
	{"--log=%s", offsetof(struct options, log), 0},
	FUSE_OPT_END,
};

static int opt_proc(void *data, const char *arg, int key, struct fuse_args *outargs)
{
	(void)outargs;
	struct options *o = data;
	if (key == FUSE_OPT_KEY_NONOPT) {
		o->nonopt_seen++;
		if (!o->store) {
			o->store = strdup(arg);
			return 0;
		}
		if (o->nonopt_seen > 2) {
			o->extra = 1;
			return 0;
		}
		char real[PATH_MAX];
		o->mnt_missing = !realpath(arg, real);
		return 1; /* the mountpoint, for fuse_parse_cmdline */
	}
	if (key == FUSE_OPT_KEY_OPT) {
		/* what mount(8) and fstab may hand over that is no mount option */
		if (!strcmp(arg, "defaults") || !strncmp(arg, "x-", 2) ||
		    !strcmp(arg, "auto") || !strcmp(arg, "noauto") || !strcmp(arg, "nofail") ||
		    !strcmp(arg, "_netdev"))
			return 0;
		if (!strncmp(arg, "fsname=", 7))
			o->fsname = 1;
		if (!strncmp(arg, "subtype=", 8))
			o->subtype = 1;
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
		"`fusermount3 -u MOUNTPOINT`, SIGINT, SIGTERM or SIGHUP (a hangup ends a\n"
		"daemon as it ends any program of the terminal; under nohup it is ignored).\n"
		"SIGUSR1, SIGUSR2, SIGALRM and other signals that mean nothing to vecfs are\n"
		"ignored: a stray one cannot leave a dead mount.  A MOUNTPOINT that already\n"
		"has a mount, or a stale one, is refused.  See MOUNTPOINT/README.\n"
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
		"    -o ingest_buffer_mb=N  MiB that the buffers of all files being\n"
		"                           ingested may hold together (default %u); a\n"
		"                           write past it fails with ENOMEM\n"
		"    -o query_results=N     results (query vectors x k) that the queries of\n"
		"                           all sessions may ask for and hold together\n"
		"                           (default %u); the close of an in past it\n"
		"                           fails with E2BIG\n"
		"    -o query_output_mb=N   MiB of rendered out, out.json and stats that all\n"
		"                           sessions may hold together (default %u); past\n"
		"                           it the close of in, or the read, fails with E2BIG\n"
		"    -o read_buffer_mb=N    MiB of contents that all files open for reading\n"
		"                           may hold together (default %u); an open past it\n"
		"                           fails with ENOMEM\n"
		"    --log FILE, -o log=FILE\n"
		"                           append the daemon's messages (start, stop,\n"
		"                           signals, failures) and every errors line to\n"
		"                           FILE, each with its UTC time; rotate it with\n"
		"                           logrotate's copytruncate\n"
		"    -o fsname=NAME         the source that mount and df show (default:\n"
		"                           STORE's absolute path)\n"
		"\n"
		"As a mount helper (fstab type fuse.vecfs, run by mount.fuse3 as\n"
		"`vecfs STORE MNT -o OPTS`), the options defaults, auto, noauto, nofail,\n"
		"_netdev and x-* are taken and ignored.\n"
		"\n"
		"Exit status:\n"
		"    0  mounted (in the foreground: unmounted cleanly)\n"
		"    1  the mount failed (a bad, busy or stale MOUNTPOINT), or the\n"
		"       session ended on an error\n"
		"    2  bad usage: unknown option or bad value, missing or extra\n"
		"       arguments, or --log FILE cannot be opened\n"
		"    3  STORE is in use by another vecfs process\n"
		"    4  STORE cannot be created or opened\n"
		"\n"
		"libfuse's options:\n", SESSIONS_DEFAULT, QUERY_INPUT_MB_DEFAULT, INGEST_BUFFER_MB_DEFAULT,
		QUERY_RESULTS_DEFAULT,
		QUERY_OUTPUT_MB_DEFAULT, READ_BUFFER_MB_DEFAULT);
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
	return EXIT_USAGE;
}

/* STORE as an absolute path (the daemon leaves the current directory);
 * NULL with a message on failure. */
static char *absolute(const char *store)
{
	char *p;
	if (store[0] == '/') {
		p = strdup(store);
	} else {
		char cwd[PATH_MAX];
		if (!getcwd(cwd, sizeof cwd)) {
			fs_log_msg("getcwd: %s", strerror(errno));
			return NULL;
		}
		p = malloc(strlen(cwd) + strlen(store) + 2);
		if (p)
			sprintf(p, "%s/%s", cwd, store);
	}
	if (!p)
		fs_log_msg("out of memory");
	return p;
}

/* The mount on path `real` in /proc/self/mountinfo: 1 with its device
 * (MAJ:MIN) and file system type, or 0. */
static int mountinfo_find(const char *real, char *dev, size_t devlen, char *type, size_t typelen)
{
	FILE *f = fopen("/proc/self/mountinfo", "r");
	if (!f)
		return 0;
	char line[8192];
	int found = 0;
	while (!found && fgets(line, sizeof line, f)) {
		/* ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS ... - FSTYPE ... */
		char point[PATH_MAX], d[32];
		if (sscanf(line, "%*s %*s %31s %*s %4095s", d, point) != 2)
			continue;
		size_t o = 0; /* undo the octal escapes of blanks and backslashes */
		for (size_t i = 0; point[i]; i++) {
			if (point[i] == '\\' && point[i + 1] >= '0' && point[i + 1] <= '3' &&
			    point[i + 2] >= '0' && point[i + 2] <= '7' && point[i + 3] >= '0' && point[i + 3] <= '7') {
				point[o++] = (char)((point[i + 1] - '0') * 64 + (point[i + 2] - '0') * 8 + point[i + 3] - '0');
				i += 3;
			} else {
				point[o++] = point[i];
			}
		}
		point[o] = 0;
		if (strcmp(point, real))
			continue;
		snprintf(dev, devlen, "%s", d);
		const char *dash = strstr(line, " - ");
		snprintf(type, typelen, "?");
		if (dash)
			sscanf(dash + 3, "%63s", type);
		found = 1;
	}
	fclose(f);
	return found;
}

/* Refuse a mountpoint that is stale (its daemon died) or already has a
 * mount on it (a second mount would hide the first): 0, or 1 with a
 * message. */
static int check_mountpoint(const char *mnt)
{
	struct statfs sf;
	char real[PATH_MAX], dev[32], type[64];
	/* statfs always asks the filesystem (a stat may be answered from the
	 * kernel's cache of the root's attributes) */
	if (statfs(mnt, &sf) != 0 && errno == ENOTCONN) {
		fs_log_msg("the mount point is stale: run fusermount3 -u %s", mnt);
		return 1;
	}
	if (!realpath(mnt, real))
		return 0; /* libfuse reports a missing mountpoint */
	if (!mountinfo_find(real, dev, sizeof dev, type, sizeof type))
		return 0;
	fs_log_msg("%s is already a mount point (%s): unmount it first (fusermount3 -u %s)",
		mnt, type, mnt);
	return 1;
}

/* descriptors: every query session may hold one (its out), beside ingest
 * spools and backups; take all that the hard limit allows */
static void raise_fd_limit(void)
{
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
}

/* What every mount gets: default_permissions (the kernel enforces the
 * modes getattr shows, see fs_node_attr()), and unless given, fsname=STORE
 * (the source mount and df show) and subtype=vecfs (the type fuse.vecfs,
 * whatever the program's name).  0 or -1. */
static int mount_options(struct fuse_args *args, const struct options *o, const char *store)
{
	char *opts = NULL, *fsname = NULL;
	int rc = fuse_opt_add_opt(&opts, "default_permissions");
	if (rc == 0 && !o->subtype)
		rc = fuse_opt_add_opt(&opts, "subtype=vecfs");
	if (rc == 0 && !o->fsname) {
		fsname = malloc(strlen(store) + 8);
		if (!fsname)
			rc = -1;
		else {
			sprintf(fsname, "fsname=%s", store);
			rc = fuse_opt_add_opt_escaped(&opts, fsname);
		}
	}
	if (rc == 0)
		rc = fuse_opt_add_arg(args, "-o");
	if (rc == 0)
		rc = fuse_opt_add_arg(args, opts);
	free(fsname);
	free(opts);
	return rc ? -1 : 0;
}

/* systemd's Type=notify: "READY=1" (and this process as the main one) in
 * a datagram to the socket $NOTIFY_SOCKET names (a path, or '@' and an
 * abstract name), once the mount is usable; nothing without it.  The
 * variable is taken out, so that no child sends in the daemon's name. */
static void notify_ready(void)
{
	const char *path = getenv("NOTIFY_SOCKET");
	struct sockaddr_un sa;
	size_t n = path ? strlen(path) : 0;
	if (n < 2 || n >= sizeof sa.sun_path || (path[0] != '/' && path[0] != '@'))
		goto out;
	memset(&sa, 0, sizeof sa);
	sa.sun_family = AF_UNIX;
	memcpy(sa.sun_path, path, n);
	if (path[0] == '@')
		sa.sun_path[0] = 0;
	int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		fs_log_msg("NOTIFY_SOCKET: %s", strerror(errno));
		goto out;
	}
	char msg[64];
	int len = snprintf(msg, sizeof msg, "READY=1\nMAINPID=%ld\n", (long)getpid());
	socklen_t alen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n + (path[0] == '/'));
	if (sendto(fd, msg, (size_t)len, MSG_NOSIGNAL, (struct sockaddr *)&sa, alen) != len)
		fs_log_msg("NOTIFY_SOCKET %s: %s", path, strerror(errno));
	close(fd);
out:
	unsetenv("NOTIFY_SOCKET");
}

static void on_stop(void *userdata)
{
	atomic_store(&((fs_daemon *)userdata)->stopping, 1);
}

/* Parse the command line: -1 to go on, else the exit status. */
static int parse_args(struct fuse_args *args, struct options *o, struct fuse_cmdline_opts *co,
		      const char *prog)
{
	memset(o, 0, sizeof *o);
	memset(co, 0, sizeof *co);
	if (fuse_opt_parse(args, o, option_spec, opt_proc) == -1)
		return EXIT_USAGE;
	if (fuse_parse_cmdline(args, co) != 0) {
		if (o->mnt_missing) /* libfuse said "bad mount point" */
			return EXIT_MOUNT;
		usage(stderr, prog, 0);
		return EXIT_USAGE;
	}
	if (co->show_help || co->show_version || !o->store || !co->mountpoint || o->extra)
		return early_exit(co, o, prog);
	if (o->log) {
		int rc = fs_log_open(o->log);
		if (rc) {
			fprintf(stderr, "vecfs: cannot open the log file %s: %s\n", o->log, strerror(-rc));
			return EXIT_USAGE;
		}
	}
	if (check_mountpoint(co->mountpoint))
		return EXIT_MOUNT;
	return -1;
}

/* A one-transaction ingest of a large file dirties hundreds of MB of
 * LMDB pages, each a fresh malloc().  Unless the caller set GLIBC_TUNABLES,
 * the daemon starts again with the heap grown 256 MB at a time in huge
 * pages: a 2 MB page fault instead of 512 small ones.  The variable is
 * taken out again after the restart, so children never see it. */
#define TUNED_MARK "VECFS_MALLOC_TUNED"
static void malloc_tune(char *argv[])
{
	if (getenv(TUNED_MARK)) {
		unsetenv(TUNED_MARK);
		unsetenv("GLIBC_TUNABLES");
		/* started again through /proc/self/exe, the process would be
		 * named "exe": it takes its program's name back (pgrep, top) */
		const char *name = strrchr(argv[0], '/') ? strrchr(argv[0], '/') + 1 : argv[0];
		prctl(PR_SET_NAME, name, 0, 0, 0);
		return;
	}
	if (getenv("GLIBC_TUNABLES"))
		return;
	if (setenv("GLIBC_TUNABLES", "glibc.malloc.hugetlb=1:glibc.malloc.top_pad=268435456", 1) ||
	    setenv(TUNED_MARK, "1", 1))
		return;
	execv("/proc/self/exe", argv);
	unsetenv(TUNED_MARK); /* no restart: the default heap */
	unsetenv("GLIBC_TUNABLES");
}

int main(int argc, char *argv[])
{
	struct fuse_args args = FUSE_ARGS_INIT(argc, argv);
	struct fuse_cmdline_opts co;
	struct options o;
	const char *prog = strrchr(argv[0], '/') ? strrchr(argv[0], '/') + 1 : argv[0];
	char *store_abs = NULL, err[512] = "";
	fs_daemon dm;
	malloc_tune(argv);
	int ret = parse_args(&args, &o, &co, prog);
	if (ret != -1)
		goto out;
	ret = EXIT_MOUNT;
	if (!(store_abs = absolute(o.store)))
		goto out;
	if (mount_options(&args, &o, store_abs) != 0) {
		fs_log_msg("out of memory");
		goto out;
	}
	fc_options fo = {
		.mountpoint = co.mountpoint, .foreground = co.foreground, .single = co.singlethread,
		.clone_fd = co.clone_fd, .max_threads = co.max_threads,
		.max_idle = co.max_idle_threads, .passthrough = !o.no_passthrough,
	};
	if (fs_daemon_init(&dm, store_abs, o.max_sessions ? o.max_sessions : SESSIONS_DEFAULT,
			(size_t)(o.query_input_mb ? o.query_input_mb : QUERY_INPUT_MB_DEFAULT) << 20)) {
		fs_log_msg("out of memory");
		goto out;
	}
	if (o.ingest_buffer_mb)
		dm.ingest_max = (size_t)o.ingest_buffer_mb << 20;
	if (o.query_results)
		dm.query_results.max = o.query_results;
	if (o.query_output_mb)
		dm.query_output.max = (size_t)o.query_output_mb << 20;
	if (o.read_buffer_mb)
		dm.reads.max = (size_t)o.read_buffer_mb << 20;
	int rc = fs_fc_background(dm.fuse, &fo);
	if (rc) {
		fs_log_msg("cannot start in the background: %s", strerror(-rc));
		goto out_daemon;
	}
	raise_fd_limit();
	/* the options are checked (libfuse's too) before STORE is made */
	if (fs_fc_session_make(dm.fuse, &args, &fs_ops, &dm) != 0) {
		ret = EXIT_USAGE;
		fs_fc_started(dm.fuse, ret);
		goto out_daemon;
	}
	if ((rc = vecfs_open(store_abs, &dm.store, err, sizeof err)) != 0) {
		fs_log_msg("cannot open store %s: %s", store_abs, err[0] ? err : strerror(-rc));
		ret = rc == -EBUSY ? EXIT_BUSY : EXIT_STORE;
		fs_fc_started(dm.fuse, ret);
		goto out_daemon;
	}
	fs_control_store_opened(&dm);
	rc = fs_fc_mount(dm.fuse, &fo, on_stop);
	if (rc == 0) {
		char type[64];
		/* the writers of a query's in are known by their descriptors'
		 * mount device and inode (a bind mount's path is another) */
		if (!mountinfo_find(co.mountpoint, dm.mount_dev, sizeof dm.mount_dev, type,
				    sizeof type))
			dm.mount_dev[0] = 0;
		fs_out_cache_set_session(&dm, fs_fc_session(dm.fuse), !fo.single, fo.passthrough);
		fs_fc_started(dm.fuse, EXIT_OK);
		notify_ready();
		fs_log_msg("serving %s on %s (pid %ld)", store_abs, co.mountpoint, (long)getpid());
		ret = fs_fc_serve(dm.fuse, &fo) ? EXIT_MOUNT : EXIT_OK;
		atomic_store(&dm.stopping, 1);
		fs_fc_unmount(dm.fuse);
		fs_log_msg("unmounted %s; exiting with status %d", co.mountpoint, ret);
	} else {
		ret = EXIT_MOUNT;
	}
	fs_fc_started(dm.fuse, ret);
	fs_daemon_fini(&dm);
	vecfs_close(dm.store);
	goto out;
out_daemon:
	fs_daemon_fini(&dm);
out:
	fuse_opt_free_args(&args);
	free(co.mountpoint);
	free(o.store);
	free(o.log);
	free(store_abs);
	return ret;
}
