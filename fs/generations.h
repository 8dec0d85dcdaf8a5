/*
 * fs/generations.h - the files of generations/GEN/ and the `active` link.
 */
#ifndef VECFS_FS_GENERATIONS_H
#define VECFS_FS_GENERATIONS_H

#include <stdint.h>

#include "sbuf.h"
#include "vecfs.h"

typedef struct fs_daemon fs_daemon;

enum { GF_META, GF_CENTROIDS, GF_CLUSTERS, GF_PROGRESS };

int fs_gen_exists(vecfs *v, uint64_t gen);
int fs_gen_render(fs_daemon *dm, uint64_t gen, int which, sbuf *b);
int64_t fs_gen_file_size(fs_daemon *dm, uint64_t gen, int which);
/* Generation id named by a symlink target ("7", "./7", ".../generations/7"). */
int fs_gen_parse_target(const char *target, uint64_t *gen);
int fs_gen_parse_name(const char *name, uint64_t *gen);
/* Make the generation named by a symlink target active (errors line on failure). */
int fs_gen_activate_target(fs_daemon *dm, const char *target, const char *how);

#endif
