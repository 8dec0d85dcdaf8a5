/*
 * fs/kinds.h - the kinds of file under the mount.  Each kind is one row of
 * kinds.c (struct fs_kind): its name where fixed, its directory, its mode,
 * what it does (KF_ flags) and the functions that give its content, size
 * and time, find names in it and list it (a directory), handle its
 * opens, make, remove and rename names in it (a directory) and give its
 * target (a symlink).  The
 * operations look a node's row up (kind_of()) instead of testing kinds.
 */
#ifndef VECFS_FS_KINDS_H
#define VECFS_FS_KINDS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "fuse_compat.h"
#include "sbuf.h"
#include "vecfs.h"

typedef struct fs_daemon fs_daemon;
struct node;

/* Every kind, in the order of enum kind: the fixed entries first (inodes
 * 1..FIXED_MAX, each the inode of its kind), then the kinds of the nodes
 * made as they are looked up; in each directory, in the order ls lists
 * them.  Each has its row kind_NAME in kinds.c: the compiler tells a kind
 * without one. */
#define FS_KINDS(X)                                                                       \
	X(ROOT) X(README) X(CONFIG) X(STATS) X(ERRORS) X(CTL) X(BACKUP) X(DELETE) X(EXPORT) \
	X(INGEST) X(RECORDS) X(QUERY) X(GENS) X(ACTIVE)                                    \
	X(INGEST_FILE) X(RECORD) X(SESSION) X(QIN) X(QOUT) X(QJSON) X(QSTATS)              \
	X(GEN) X(GMETA) X(GCENT) X(GCLUST) X(GPROG) X(TMPLINK)

#define FS_KIND_ENUM(k) K_##k,
enum kind { K_NONE, FS_KINDS(FS_KIND_ENUM) K_COUNT };
#undef FS_KIND_ENUM
#define FIXED_MAX K_ACTIVE

enum {
	KF_READ = 1 << 0,        /* opens for reading */
	KF_WRITE = 1 << 1,       /* opens for writing */
	KF_STORE_ATTRS = 1 << 2, /* its size or time is read from the store's
				  * attributes (vecfs_attrs_get()) */
	KF_ATTRS_KEPT = 1 << 3,  /* its attributes never change: the kernel
				  * keeps them (60 s) */
	KF_ENTRY_KEPT = 1 << 4,  /* its name goes only with the mount or by
				  * rmdir of its session: the kernel keeps it */
	KF_LINKED = 1 << 5,      /* made by a write of the tree, and there
				  * while linked in its directory (which lists
				  * it): ingest files, sessions, transient
				  * symlinks */
};

/* A directory's listing: add(d, name, ino, type) for each entry; 0 or
 * -ENOMEM. */
typedef int (*fs_dir_add)(void *d, const char *name, fuse_ino_t ino, mode_t type);

/* The handling of opens a kind has of its own, where ops_file.c defines
 * it. */
typedef struct kind_file_ops kind_file_ops;
extern const kind_file_ops fs_config_file_ops, fs_ctl_file_ops, fs_errors_file_ops, fs_backup_file_ops,
	fs_export_file_ops, fs_delete_file_ops, fs_ingest_file_ops, fs_query_in_file_ops, fs_results_file_ops;

/* What a directory does when a name in it is made, removed or renamed,
 * where ops_namespace.c defines it (struct in ops.h). */
typedef struct kind_dir_ops kind_dir_ops;
extern const kind_dir_ops fs_root_dir_ops, fs_ingest_dir_ops, fs_records_dir_ops, fs_query_dir_ops,
	fs_session_dir_ops, fs_gens_dir_ops, fs_gen_dir_ops;

typedef struct fs_kind {
	const char *name; /* where fixed; NULL: each node's own */
	int parent;       /* the kind of its directory (K_NONE: the root's) */
	mode_t mode;      /* type and permissions, which the kernel enforces
			   * (default_permissions) */
	unsigned flags;   /* KF_ */
	/* Its whole content (a readable file): 0 or -errno. */
	int (*render)(fs_daemon *dm, struct node *n, sbuf *b);
	/* The version of its content now, rendered once for the handles that
	 * open that version (render.h); NULL or 0: none, rendered for each
	 * handle. */
	uint64_t (*version)(fs_daemon *dm, struct node *n);
	/* Its size (sa: the store's attributes, with KF_STORE_ATTRS): 0, or
	 * -errno (-ENOENT: not there now).  NULL: a directory's 0, else the
	 * exact size of what it renders (fs_render_size()). */
	int (*size)(fs_daemon *dm, struct node *n, const vecfs_attrs *sa, uint64_t *size);
	/* When it last changed, in ns (sa as for size).  NULL: the last change
	 * the daemon saw since the mount (fs_content_time()). */
	uint64_t (*time)(fs_daemon *dm, struct node *n, const vecfs_attrs *sa);
	/* A directory's entry `name` that is not one of its fixed entries
	 * (dm->tree.mu held): the node, or NULL with *err set (ENOENT: none).
	 * NULL: only its fixed entries. */
	struct node *(*lookup)(fs_daemon *dm, struct node *p, const char *name, int *err);
	/* A directory's entries but . and ..: 0 or -errno.  NULL: records/,
	 * listed from the store a reply at a time (ops_dir.c). */
	int (*list)(fs_daemon *dm, struct node *n, fs_dir_add add, void *d);
	/* Its opens, reads, writes, closes and truncations where they are its
	 * own (NULL: a readable file is rendered at the open, and none of the
	 * rest is its own). */
	const kind_file_ops *fops;
	/* A directory's create, mknod, mkdir, rmdir, unlink, symlink and
	 * rename (NULL: each refused, with EPERM and an errors line; rmdir
	 * with ENOTDIR). */
	const kind_dir_ops *dops;
	/* A symlink's target, malloc()ed into *target: 0 or -errno. */
	int (*readlink)(fs_daemon *dm, struct node *n, char **target);
} fs_kind;

/* The row of a kind (K_NONE's for a kind out of range). */
const fs_kind *fs_kind_row(int kind);
#define kind_of(n) fs_kind_row((n)->kind)

/* The kind of the fixed entry `name` of a directory of kind dirkind, or 0. */
int fs_entry_kind(int dirkind, const char *name);

/* 0 when the rows fit the tree: the fixed entries (a fixed name in a
 * fixed directory) are the kinds up to FIXED_MAX, every directory but
 * records/ has a list, only directories have directory operations and
 * every symlink has a readlink; else the first kind that does not. */
int fs_kinds_check(void);

#endif
