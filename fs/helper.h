/*
 * fs/helper.h - threads kept one to a CPU, for the part of a long piece
 * of work that a FUSE worker hands to the other CPUs while it does its
 * own part itself.
 */
#ifndef VECFS_FS_HELPER_H
#define VECFS_FS_HELPER_H

typedef struct fs_helpers fs_helpers;

/* Helpers for the process's CPUs (each thread starts with its first job),
 * or NULL: out of memory, or the process has one CPU. */
fs_helpers *fs_helpers_new(void);
/* End the threads (no job may be running) and free h (NULL: nothing). */
void fs_helpers_free(fs_helpers *h);
/* The CPUs h has helpers for (the caller's among them); 1 for NULL. */
int fs_helpers_cpus(const fs_helpers *h);
/* Run fn(arg) on an idle helper of another CPU than the caller's: a
 * ticket (>= 0) for fs_helpers_wait(), or -1 when h is NULL or none is
 * free or can start (then the caller runs fn itself). */
int fs_helpers_start(fs_helpers *h, void (*fn)(void *), void *arg);
/* Wait for the job of a ticket fs_helpers_start() gave. */
void fs_helpers_wait(fs_helpers *h, int ticket);

#endif
