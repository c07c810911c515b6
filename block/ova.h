/*
 * block/ova.h: OVA archives (an uncompressed tar holding an OVF descriptor
 * and the disk files it names) -- the tar codec and walk (ova-tar.c), the
 * OVF descriptor's References and DiskSection (ova-ovf.c), and the
 * protocol node that is one tar member, read-only (ova.c).
 */
#ifndef QIMG_BLOCK_OVA_H
#define QIMG_BLOCK_OVA_H

#include "block/block.h"

/* ---- tar (ova-tar.c) ---- */

#define BLK_TAR_BLOCK 512u
/* A member name (long names: GNU 'L' or pax path=) longer than this is
 * refused, as are extended headers larger than BLK_TAR_MAX_EXT. */
#define BLK_TAR_MAX_NAME 4096u
#define BLK_TAR_MAX_EXT (64u * 1024)

/* The typeflags the walk tells apart (POSIX ustar, GNU and pax). */
typedef enum BlkTarType {
    BLK_TAR_REGULAR = '0', /* also '\0' and '7' (contiguous) */
    BLK_TAR_HARDLINK = '1',
    BLK_TAR_SYMLINK = '2',
    BLK_TAR_CHAR = '3',
    BLK_TAR_BLOCKDEV = '4',
    BLK_TAR_DIR = '5',
    BLK_TAR_FIFO = '6',
    BLK_TAR_CONTIG = '7',
    BLK_TAR_PAX = 'x',        /* pax extended header for the next member */
    BLK_TAR_PAX_GLOBAL = 'g', /* pax global header */
    BLK_TAR_GNU_LONGNAME = 'L',
    BLK_TAR_GNU_LONGLINK = 'K',
    BLK_TAR_GNU_SPARSE = 'S',
} BlkTarType;

/* One 512-byte header, decoded (ova-tar.c invariant 1). */
typedef struct BlkTarHeader {
    char name[101];   /* NUL-terminated name field */
    char prefix[156]; /* ustar prefix field ("" for GNU headers) */
    uint64_t size;    /* octal or base-256 size field */
    char type;        /* typeflag, '\0' read as '0' */
    bool ustar;       /* "ustar\0" (POSIX) or "ustar  " (GNU) magic */
} BlkTarHeader;

/* Decode a header block: 1 for a header, 0 for an all-zero block (the
 * end of the archive), or -EINVAL with the message naming the field
 * (a wrong checksum, a size that is not a number). */
int blk_tar_header_decode(const uint8_t b[BLK_TAR_BLOCK], BlkTarHeader *h);

/* A member as the walk reports it: its full name (prefix/name, a GNU long
 * name or a pax path), where its bytes start in the archive and how many
 * there are, its type. */
typedef struct BlkTarMember {
    const char *name;
    uint64_t offset;
    uint64_t size;
    char type;
} BlkTarMember;

/* Called for each member in archive order; return 0 to go on, 1 to stop
 * the walk (blk_tar_walk returns 1), < 0 to fail it. */
typedef int (*BlkTarVisit)(void *opaque, const BlkTarMember *m);

/* Walk the tar in file (ova-tar.c invariants 2-4).  0 at the end of the
 * archive, 1 when visit stopped it, -errno with a message naming 'what'
 * (the archive's name) and the problem. */
int blk_tar_walk(BlkNode *file, const char *what, BlkTarVisit visit, void *opaque);

/* ---- OVF (ova-ovf.c) ---- */

/* The largest OVF descriptor read (ova-ovf.c invariant 1). */
#define BLK_OVF_MAX_BYTES (4u << 20)
#define BLK_OVF_MAX_ITEMS 4096u /* Files, and Disks */

typedef struct BlkOvfFile {
    char *id;          /* ovf:id */
    char *href;        /* ovf:href: the tar member name */
    char *compression; /* ovf:compression, NULL when absent */
    uint64_t size;     /* ovf:size, when has_size */
    bool has_size;
    bool chunked; /* ovf:chunkSize given: the file is split in parts */
} BlkOvfFile;

typedef struct BlkOvfDisk {
    char *id;                /* ovf:diskId */
    char *file_ref;          /* ovf:fileRef, NULL: an empty disk */
    char *format;            /* ovf:format URI, NULL when absent */
    char *capacity;          /* ovf:capacity as written */
    char *units;             /* ovf:capacityAllocationUnits, NULL: bytes */
    uint64_t capacity_bytes; /* when capacity_known */
    bool capacity_known;
    int file; /* index in BlkOvf.files, -1: none (or fileRef names no File) */
} BlkOvfDisk;

typedef struct BlkOvf {
    GArray *files; /* BlkOvfFile */
    GArray *disks; /* BlkOvfDisk */
} BlkOvf;

/* Parse an OVF descriptor of len bytes (ova-ovf.c invariants 1-4) into
 * ovf (cleared first; blk_ovf_clear() it even on failure).  'what' names
 * the descriptor in messages. */
int blk_ovf_parse(const char *text, size_t len, const char *what, BlkOvf *ovf);
void blk_ovf_clear(BlkOvf *ovf);
/* "byte * 2^30", "MegaBytes", ... times capacity: 0, or -EINVAL / -ERANGE
 * (no message). */
int blk_ovf_capacity_bytes(const char *capacity, const char *units, uint64_t *bytes);

/* ---- an OVA's listing and its members as nodes (ova.c) ---- */

typedef struct BlkOvaDisk {
    BlkOvfDisk *disk; /* in the listing's ovf */
    BlkOvfFile *file; /* NULL: no File (empty disk, or a dangling fileRef) */
    bool found;       /* the file is a regular member of the tar */
    uint64_t offset;  /* of its bytes in the archive, when found */
    uint64_t size;    /* of the member, when found */
} BlkOvaDisk;

typedef struct BlkOvaListing {
    char *ovf_name; /* the descriptor's member name */
    BlkOvf ovf;
    GArray *disks; /* BlkOvaDisk, in DiskSection order */
} BlkOvaListing;

/* 100 when the first bytes are a ustar header of a member named *.ovf. */
int blk_ova_probe(const uint8_t *buf, size_t len);
/* The same for a GNU tar whose first member, a *.ovf, has a long name (a
 * 'L' header first, the name in the blocks after it: more than the probe's
 * 512 bytes, head: the first block, read already): 100 when the name ends
 * in ".ovf" and a regular member's header follows it; reads nothing unless
 * head is a GNU long name header, then at most 4 KiB and one header. */
int blk_ova_probe_long_name(BlkNode *file, const uint8_t *head, size_t head_len);
/* Read the OVA in file: its OVF, and where each disk's file lies in the
 * tar (ova.c invariant 2).  'what' names the archive in messages. */
int blk_ova_list(BlkNode *file, const char *what, BlkOvaListing *l);
void blk_ova_listing_clear(BlkOvaListing *l);

/* "ova:SELECTOR:NAME" names one disk of the OVA NAME (ova.c invariant 1):
 * the protocol table's entry. */
BlkNode *blk_open_ova(const char *filename, const BlkOpenOptions *opts, unsigned flags);
/* The OVA member node under file (through filter nodes), or NULL. */
BlkNode *blk_ova_member_node(BlkNode *file);
/* The name that opens the member 'name' names relative to the member that
 * member_node is (ova.c invariant 4): refused (-EACCES) when it is
 * absolute, has "..", names a protocol, or is empty. */
int blk_ova_sibling_name(BlkNode *member_node, const char *what, const char *name,
                         char **path);
/* Open the sibling member 'path' (from blk_ova_sibling_name()) of the disk
 * whose file node is 'like', read-only, recorded in the same log when
 * 'like' is a recording node. */
BlkNode *blk_ova_open_sibling(BlkNode *like, const char *path,
                              const BlkOpenOptions *opts);
/* A selector for a member name: "file=" and the name with ':' and '%'
 * percent-escaped. */
char *blk_ova_member_selector(const char *member);

#endif
