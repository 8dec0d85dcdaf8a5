/*
 * engine/codec/codec.h - what the codecs offer the rest of the engine
 * beyond the public header (numbers, settings, query input and ingest rows
 * are reached through vecfs.h): the JSON scanner, which payload filters
 * (query/filter.c) read JSON through.
 */
#ifndef VECFS_CODEC_H
#define VECFS_CODEC_H

#include "json.h"

#endif
