/*
 * fs/fuse_compat_private.h - between fuse_compat.c, loop.c and
 * passthrough.c; the rest of fs/ uses fuse_compat.h.
 */
#ifndef VECFS_FS_FUSE_COMPAT_PRIVATE_H
#define VECFS_FS_FUSE_COMPAT_PRIVATE_H

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>

#include "fuse_compat.h"

typedef struct loop loop;

/* passthrough.c's */
typedef struct pt_state {
	int dev_fd;                  /* the session's device, -1: none */
	int wanted;                  /* fs_pt_install() was asked to */
	atomic_int asked;            /* the INIT reply asked for passthrough */
	atomic_int refused;          /* registering a backing file failed for good */
	_Atomic uint64_t init_unique; /* the INIT request, while its reply is due */
} pt_state;

struct fuse_compat {
	struct fuse_session *se;
	const char *mountpoint;
	int status_fd;          /* to the waiting parent, until fs_fc_started() */
	sigset_t sigs;          /* taken by the signal thread */
	void (*on_stop)(void *);
	void *userdata;
	pthread_mutex_t stop_mu;
	int loop_done, unmounted;
	pthread_t sig_thread;    /* the signal thread, joined by fs_fc_unmount() */
	int sig_started, sig_quit; /* sig_quit: under stop_mu */
	loop *loop;             /* loop.c's */
	pt_state pt;
};

/* loop.c */
int fs_loop_init(fuse_compat *fc);
void fs_loop_fini(fuse_compat *fc);
/* Serve the session with worker threads, one pinned to each CPU (and more,
 * up to max_threads, while all are busy), until it ends.  0 or -errno. */
int fs_loop(fuse_compat *fc, unsigned max_threads);
/* Make fs_loop() return once the requests being handled are answered. */
void fs_loop_stop(fuse_compat *fc);
/* A reply is about to go out from the calling thread: a worker of the loop
 * counts as waiting from now on (a no-op on other threads). */
void fs_loop_replied(fuse_compat *fc);

/* passthrough.c: route the session's device I/O through it (replies tell
 * the loop; with `passthrough` and FC_OWN_PASSTHROUGH, the INIT reply asks
 * for passthrough).  After fuse_session_mount(), before the loop.  0 or
 * -errno. */
void fs_pt_init(fuse_compat *fc);
int fs_pt_install(fuse_compat *fc, int passthrough);
/* The session's device is going away: backing files go with it. */
void fs_pt_detach(fuse_compat *fc);

#endif
