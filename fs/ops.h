/*
 * fs/ops.h - the FUSE low-level operations, by file:
 *   ops.c            init, statfs and the table of operations
 *   ops_lookup.c     lookup, forget, getattr (entries and attributes)
 *   ops_file.c       create, open, read, write, flush, release, fsync, setattr
 *   ops_namespace.c  mknod, mkdir, rmdir, unlink, symlink, rename, readlink;
 *                    the directory operations of each kind (kind_dir_ops)
 *   ops_dir.c        opendir, readdir, releasedir, fsyncdir
 *   ops_xattr.c      getxattr, listxattr, setxattr, removexattr
 */
#ifndef VECFS_FS_OPS_H
#define VECFS_FS_OPS_H

#include <sys/stat.h>

#include "fuse_compat.h"
#include "inode.h"

extern const struct fuse_lowlevel_ops fs_ops;

/* ---------------------------------------------------------------- ops_lookup.c */

/* The attributes of n, computed now. */
int fs_node_attr(fs_daemon *dm, node *n, struct stat *st);
/* How long the kernel may keep n's attributes. */
double fs_attr_timeout(fs_daemon *dm, const node *n);
/* Take a lookup reference on n (dm->tree.mu held, and released) and answer
 * with its attributes. */
void fs_answer_entry_locked(fuse_req_t req, node *n);
/* Take dm->tree.mu and find directory node `parent`: NULL (unlocked, ENOENT
 * answered) when there is none. */
node *fs_lock_parent(fuse_req_t req, fuse_ino_t parent);
/* Node ino, looked up under dm->tree.mu. */
node *fs_get_locked(fs_daemon *dm, fuse_ino_t ino);

void fs_op_lookup(fuse_req_t req, fuse_ino_t parent, const char *name);
void fs_op_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup);
void fs_op_forget_multi(fuse_req_t req, size_t count, struct fuse_forget_data *forgets);
void fs_op_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);

/* ---------------------------------------------------------------- ops_file.c */

void fs_op_create(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
	       struct fuse_file_info *fi);
void fs_op_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);
void fs_op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi);
void fs_op_write(fuse_req_t req, fuse_ino_t ino, const char *buf, size_t size, off_t off,
	      struct fuse_file_info *fi);
void fs_op_flush(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);
void fs_op_ioctl(fuse_req_t req, fuse_ino_t ino, unsigned int cmd, void *arg,
		 struct fuse_file_info *fi, unsigned flags, const void *in_buf, size_t in_bufsz,
		 size_t out_bufsz);
void fs_op_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);
void fs_op_fsync(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi);
void fs_op_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr, int to_set,
		struct fuse_file_info *fi);
/* A second writer of ingest file `name`: -EBUSY, with an errors line. */
int fs_ingest_busy(fs_daemon *dm, const char *name);

/* ---------------------------------------------------------------- ops_namespace.c */

/* What a directory does of its own when a name in it is made, removed or
 * renamed: a directory's row names them (kinds.h, .dops).  Each is called
 * with dm->tree.mu held and p the directory (its node), releases the lock
 * and answers req, but create, which returns what fs_op_create() opens.  A
 * NULL member, or a row without any, refuses the operation as op_*()
 * say: EPERM and an errors line (rmdir: ENOTDIR and no line). */
struct kind_dir_ops {
	/* create(2) of name with open flags `flags`: the node to open, with
	 * dm->tree.mu still held; or NULL with it released, the errno in *err
	 * and its errors line written. */
	node *(*create)(fuse_req_t req, node *p, const char *name, int flags, int *err);
	void (*mknod)(fuse_req_t req, node *p, const char *name);
	void (*mkdir)(fuse_req_t req, node *p, const char *name);
	void (*rmdir)(fuse_req_t req, node *p, const char *name);
	void (*unlink)(fuse_req_t req, node *p, const char *name);
	/* ln -s link p/name */
	void (*symlink)(fuse_req_t req, node *p, const char *link, const char *name);
	/* mv p/name np/newname, np a directory of p's kind (a directory of a
	 * fixed kind: p itself); flags: RENAME_NOREPLACE, or 0. */
	void (*rename)(fuse_req_t req, node *p, const char *name, node *np, const char *newname,
		       unsigned flags);
};

/* The handler `op` of directory p's row, or NULL. */
#define DIR_OP(p, op) (kind_of(p)->dops ? kind_of(p)->dops->op : NULL)

/* Refuse `verb` (the command's name, or "") of name in directory p
 * (dm->tree.mu held, released here): an errors line "VERB PATH: why",
 * PATH naming the entry as p's path and name (in the root: root and
 * name); returns err. */
int fs_dir_refuse(fuse_req_t req, node *p, const char *verb, const char *root, const char *name, int err,
	       const char *why);

void fs_op_readlink(fuse_req_t req, fuse_ino_t ino);
void fs_op_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode);
void fs_op_mknod(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode, dev_t rdev);
void fs_op_rmdir(fuse_req_t req, fuse_ino_t parent, const char *name);
void fs_op_unlink(fuse_req_t req, fuse_ino_t parent, const char *name);
void fs_op_symlink(fuse_req_t req, const char *link, fuse_ino_t parent, const char *name);
void fs_op_rename(fuse_req_t req, fuse_ino_t parent, const char *name, fuse_ino_t newparent,
	       const char *newname, unsigned int flags);

/* ---------------------------------------------------------------- ops_dir.c */

void fs_op_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);
void fs_op_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi);
void fs_op_releasedir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);
void fs_op_fsyncdir(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi);

/* ---------------------------------------------------------------- ops_xattr.c */

void fs_op_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name, size_t size);
void fs_op_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size);
void fs_op_setxattr(fuse_req_t req, fuse_ino_t ino, const char *name, const char *value, size_t size,
		 int flags);
void fs_op_removexattr(fuse_req_t req, fuse_ino_t ino, const char *name);

#endif
