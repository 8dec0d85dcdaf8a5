/*
 * fs/fuse_compat_private.h - between fuse_compat.c, loop.c and
 * passthrough.c; the rest of fs/ uses fuse_compat.h.
 */
#ifndef VECFS_FS_FUSE_COMPAT_PRIVATE_H
#define VECFS_FS_FUSE_COMPAT_PRIVATE_H

#include "fuse_compat.h"

/* loop.c */
int fs_loop(struct fuse_session *se, unsigned max_threads);
void fs_loop_stop(void);
/* A reply is about to go out from the calling thread: a worker of the loop
 * counts as waiting from now on (a no-op on other threads). */
void fs_loop_replied(void);

/* passthrough.c: route the session's device I/O through it (replies tell
 * the loop; with `passthrough` and FC_OWN_PASSTHROUGH, the INIT reply asks
 * for passthrough).  After fuse_session_mount(), before the loop. */
int pt_install(struct fuse_session *se, int passthrough);
/* The session's device is going away: backing files go with it. */
void pt_detach(void);

#endif
