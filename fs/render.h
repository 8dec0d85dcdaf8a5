/*
 * fs/render.h - what the readable files of the tree read.
 */
#ifndef VECFS_FS_RENDER_H
#define VECFS_FS_RENDER_H

#include "sbuf.h"
#include "vecfs.h"

typedef struct fs_daemon fs_daemon;
struct node;

void render_readme(sbuf *b);
int render_config(vecfs *v, sbuf *b);
int render_stats(vecfs *v, sbuf *b);
/* The whole content of the readable file n. */
int render_node(fs_daemon *dm, struct node *n, sbuf *b);

#endif
