/*
 * qimg io: the commands that do I/O (read, write, discard, flush, length,
 * truncate, sleep, abort), run by the command loop of io.c.
 *
 * Owns: each command's options and checks, the numbers it parses, the
 * calls into the image and the lines it prints (results, errors, timing
 * reports, hex dumps).  io.c has the command table, line splitting, help,
 * quit and the exit status.
 *
 * Facts learnt from running qemu-io 7.2 (not from its source):
 *  1. Results and per-command errors go to stdout: "read failed: <strerror>",
 *     "Pattern verification failed at offset N, M bytes", "Parsing error:
 *     ...", usage lines "name args -- description" (io_command_usage).
 *  2. The report is "<op> T/C bytes at offset O" then "<size>, 1 ops; <time>
 *     (<size>/sec and <n> ops/sec)"; sizes as "4 KiB", "1.500 KiB",
 *     "17 bytes"; times "%05.2f sec" below one second, else "h:mm:ss.ss".
 *     -C prints "bytes,ops,h:mm:ss.ss,bytes/sec,ops/sec"; -q prints nothing.
 *  3. write's default pattern is 0xcd; a read buffer starts as 0xab.  -b
 *     accesses the vmstate area, -c writes compressed (cluster aligned, or
 *     up to the end of the image), -z writes zeroes (-u may unmap).
 *  4. Buffers are aligned for O_DIRECT; -m ("misalign allocations for
 *     O_DIRECT") puts every one 16 bytes past that, so that the block layer
 *     must bounce them under cache=none; the results are the same.
 *  5. A write -b is done when qemu-io reports it (its vmstate writes are
 *     synchronous): an error of the area's writes is that command's
 *     "write failed: <strerror>", not a later command's or the close's.
 *  6. A blkverify node's verdict (its image under test and raw copy
 *     disagree) ends qemu-io at once: the verdict's line on stderr, no
 *     "read failed" for the request, no later command, exit status 1.
 *     qimg io ends so too (io_end_on_verdict), closing the image first,
 *     quietly (QEMU's exit does not close: qimg keeps what was written).
 */
#include "io.h"
#include "qimg/vmstate.h"

#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- buffers (fact 4) ---- */

static bool misalign;

void io_set_misalign(bool on)
{
    misalign = on;
}

IoBuf *io_buf_alloc(size_t size)
{
    uint8_t *p = tool_alloc_aligned(size + IO_MISALIGN);
    return misalign ? p + IO_MISALIGN : p;
}

void io_buf_free(IoBuf *buf)
{
    if (buf) {
        free(misalign ? buf - IO_MISALIGN : buf);
    }
}

/* ---- numbers and reports (facts 1, 2) ---- */

int64_t io_cvtnum(const char *s)
{
    uint64_t v;
    int ret = tool_strtosz(s, &v);

    if (ret < 0) {
        return ret;
    }
    return v > INT64_MAX ? -ERANGE : (int64_t)v;
}

void io_print_cvtnum_err(int64_t rc, const char *arg)
{
    if (rc == -EINVAL) {
        printf(
            "Parsing error: non-numeric argument, or extraneous/unrecognized suffix -- "
            "%s\n",
            arg);
    } else if (rc == -ERANGE) {
        printf("Parsing error: argument too large -- %s\n", arg);
    } else {
        printf("Parsing error: %s\n", arg);
    }
}

int io_parse_pattern(const char *arg)
{
    char *end = NULL;
    long v = strtol(arg, &end, 0);

    if (v < 0 || v > UCHAR_MAX || *end != '\0') {
        printf("%s is not a valid pattern byte\n", arg);
        return -1;
    }
    return (int)v;
}

void io_cvtstr(double value, char *str, size_t size)
{
    static const char *const units[] = {" EiB", " PiB", " TiB", " GiB", " MiB", " KiB"};
    const char *suffix = " bytes";
    char *trim;
    int i;

    for (i = 0; i < 6; i++) {
        double unit = (double)(UINT64_C(1) << (10 * (6 - i)));
        if (value >= unit) {
            suffix = units[i];
            snprintf(str, size - 4, "%.3f", value / unit);
            break;
        }
    }
    if (i == 6) {
        snprintf(str, size - 6, "%f", value);
    }
    trim = strstr(str, ".000");
    if (trim) {
        strcpy(trim, suffix);
    } else {
        strcat(str, suffix);
    }
}

static void timestr(const struct timespec *t, char *ts, size_t size, bool fixed)
{
    double frac = t->tv_nsec / 1e9;
    unsigned h = (unsigned)(t->tv_sec / 3600), m = (unsigned)(t->tv_sec % 3600 / 60);

    if (fixed || t->tv_sec) {
        snprintf(ts, size, "%u:%02u:%05.2f", h, m, (double)(t->tv_sec % 60) + frac);
    } else {
        snprintf(ts, size, "%05.2f sec", frac);
    }
}

struct timespec io_tsub(struct timespec a, struct timespec b)
{
    a.tv_sec -= b.tv_sec;
    a.tv_nsec -= b.tv_nsec;
    if (a.tv_nsec < 0) {
        a.tv_sec--;
        a.tv_nsec += 1000000000;
    }
    return a;
}

static double tdiv(double value, struct timespec t)
{
    return value / ((double)t.tv_sec + t.tv_nsec / 1e9);
}

void io_print_report(const char *op, struct timespec t, int64_t offset, int64_t count,
                     int64_t total, int cnt, bool cflag)
{
    char s1[64], s2[64], ts[64];

    timestr(&t, ts, sizeof(ts), cflag);
    if (!cflag) {
        io_cvtstr((double)total, s1, sizeof(s1));
        io_cvtstr(tdiv((double)total, t), s2, sizeof(s2));
        printf("%s %" PRId64 "/%" PRId64 " bytes at offset %" PRId64 "\n", op, total,
               count, offset);
        printf("%s, %d ops; %s (%s/sec and %.4f ops/sec)\n", s1, cnt, ts, s2,
               tdiv((double)cnt, t));
    } else {
        printf("%" PRId64 ",%d,%s,%.3f,%.3f\n", total, cnt, ts, tdiv((double)total, t),
               tdiv((double)cnt, t));
    }
}

void io_dump_buffer(const uint8_t *buf, int64_t offset, int64_t len)
{
    for (int64_t i = 0; i < len; i += 16) {
        int j;

        printf("%08" PRIx64 ":  ", (uint64_t)(offset + i));
        for (j = 0; j < 16 && i + j < len; j++) {
            printf("%02x ", buf[i + j]);
        }
        printf(" ");
        for (j = 0; j < 16 && i + j < len; j++) {
            printf("%c", isalnum(buf[i + j]) ? buf[i + j] : '.');
        }
        printf("\n");
    }
}

void io_end_on_verdict(IoCtx *io)
{
    g_autofree char *verdict = io->img ? qimg_image_verify_verdict(io->img) : NULL;

    if (!verdict) {
        return;
    }
    fflush(stdout); /* fact 6 */
    fprintf(stderr, "%s\n", verdict);
    /* the verdict is the last word: a failure of the close (the child
     * that failed fails its flush too) is not reported */
    g_clear_pointer(&io->img, qimg_image_free);
    exit(1);
}

/* The errno of a failed call (QIMG_ERROR codes are errno values). */
int io_take_errno(IoCtx *io, GError *err)
{
    io_end_on_verdict(io); /* fact 6 */
    int e = (err && err->domain == QIMG_ERROR && err->code > 0) ? err->code : EIO;

    g_clear_error(&err);
    return -e;
}

/* Parse "off len" (optind points at off); prints the error. */
static int parse_off_len(char **argv, int64_t *offset, int64_t *count)
{
    *offset = io_cvtnum(argv[optind]);
    if (*offset < 0) {
        io_print_cvtnum_err(*offset, argv[optind]);
        return (int)*offset;
    }
    optind++;
    *count = io_cvtnum(argv[optind]);
    if (*count < 0) {
        io_print_cvtnum_err(*count, argv[optind]);
        return (int)*count;
    }
    return 0;
}

static int check_sector_aligned(int64_t offset, int64_t count)
{
    if (offset % 512) {
        printf("%" PRId64 " is not a sector-aligned value for 'offset'\n", offset);
        return -EINVAL;
    }
    if (count % 512) {
        printf("%" PRId64 " is not a sector-aligned value for 'count'\n", count);
        return -EINVAL;
    }
    return 0;
}

/* ---- read ---- */

int io_cmd_read(IoCtx *io, int argc, char **argv)
{
    bool cflag = false, qflag = false, vflag = false, pflag = false, sflag = false;
    bool lflag = false, bflag = false;
    int64_t offset, count, pattern_offset = 0, pattern_count = 0;
    int pattern = 0, c, ret;
    struct timespec t1, t2;
    g_autoptr(IoBuf) buf = NULL;
    GError *err = NULL;
    gboolean ok;

    while ((c = getopt(argc, argv, "bCl:pP:qs:vr")) != -1) {
        switch (c) {
        case 'b':
            bflag = true;
            break;
        case 'C':
            cflag = true;
            break;
        case 'l':
            lflag = true;
            pattern_count = io_cvtnum(optarg);
            if (pattern_count < 0) {
                io_print_cvtnum_err(pattern_count, optarg);
                return (int)pattern_count;
            }
            break;
        case 'p': /* ignored, as by qemu-io */
        case 'r':
            break;
        case 'P':
            pflag = true;
            pattern = io_parse_pattern(optarg);
            if (pattern < 0) {
                return -EINVAL;
            }
            break;
        case 'q':
            qflag = true;
            break;
        case 's':
            sflag = true;
            pattern_offset = io_cvtnum(optarg);
            if (pattern_offset < 0) {
                io_print_cvtnum_err(pattern_offset, optarg);
                return (int)pattern_offset;
            }
            break;
        case 'v':
            vflag = true;
            break;
        default:
            io_command_usage("read");
            return -EINVAL;
        }
    }
    if (optind != argc - 2) {
        io_command_usage("read");
        return -EINVAL;
    }
    ret = parse_off_len(argv, &offset, &count);
    if (ret < 0) {
        return ret;
    }
    if (count > IO_MAX_REQUEST) {
        printf("length cannot exceed %" PRId64 ", given %s\n", IO_MAX_REQUEST,
               argv[optind]);
        return -EINVAL;
    }
    if (!pflag && (lflag || sflag)) {
        io_command_usage("read");
        return -EINVAL;
    }
    if (!lflag) {
        pattern_count = count - pattern_offset;
    }
    if (pattern_count < 0 || pattern_count + pattern_offset > count) {
        printf("pattern verification range exceeds end of read data\n");
        return -EINVAL;
    }
    if (bflag && (ret = check_sector_aligned(offset, count)) < 0) {
        return ret;
    }

    buf = io_buf_alloc((size_t)count);
    memset(buf, 0xab, (size_t)count);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (bflag) {
        ok = qimg_vmstate_pread(io->img, (uint64_t)offset, buf, (size_t)count, &err);
    } else {
        ok = qimg_image_pread(io->img, (uint64_t)offset, buf, (size_t)count, &err);
    }
    clock_gettime(CLOCK_MONOTONIC, &t2);
    if (!ok) {
        printf("read failed: %s\n", strerror(-io_take_errno(io, err)));
        return -EIO;
    }

    ret = 0;
    if (pflag) {
        for (int64_t i = 0; i < pattern_count; i++) {
            if (buf[pattern_offset + i] != pattern) {
                printf("Pattern verification failed at offset %" PRId64 ", %" PRId64
                       " bytes\n",
                       offset + pattern_offset, pattern_count);
                ret = -EINVAL;
                break;
            }
        }
    }
    if (qflag) {
        return ret;
    }
    if (vflag) {
        io_dump_buffer(buf, offset, count);
    }
    io_print_report("read", io_tsub(t2, t1), offset, count, count, 1, cflag);
    return ret;
}

/* ---- write ---- */

int io_read_source(const char *source, uint8_t *buf, int64_t count)
{
    FILE *f = fopen(source, "r");
    size_t n;

    if (!f) {
        printf("'%s': %s\n", source, strerror(errno));
        return -EINVAL;
    }
    n = fread(buf, 1, (size_t)count, f);
    if (ferror(f)) {
        printf("'%s': %s\n", source, strerror(errno));
        fclose(f);
        return -EINVAL;
    }
    fclose(f);
    if (n < (size_t)count) {
        printf("'%s': file is too short (%zu bytes, %" PRId64 " needed)\n", source, n,
               count);
        return -EINVAL;
    }
    return 0;
}

/* qemu-io's compressed write: cluster-aligned, whole clusters unless the
 * request ends at the end of the image; split into single clusters. */
static gboolean write_compressed(QimgImage *img, uint64_t offset, const uint8_t *buf,
                                 uint64_t count, GError **error)
{
    g_autoptr(QimgInfo) info = qimg_image_get_info(img, error);
    uint64_t cs, size = qimg_image_size(img);

    if (!info) {
        return FALSE;
    }
    cs = info->cluster_size;
    if (cs == 0) {
        g_set_error(error, QIMG_ERROR, ENOTSUP, "Compressed writes are not supported");
        return FALSE;
    }
    if (count == 0) {
        return TRUE;
    }
    if (offset % cs || (count % cs && offset + count != size)) {
        g_set_error(error, QIMG_ERROR, EINVAL, "Unaligned compressed write");
        return FALSE;
    }
    for (uint64_t done = 0; done < count; done += cs) {
        if (!qimg_image_pwrite_compressed(img, offset + done, buf + done,
                                          (size_t)MIN(cs, count - done), error)) {
            return FALSE;
        }
    }
    return TRUE;
}

int io_cmd_write(IoCtx *io, int argc, char **argv)
{
    bool bflag = false, cflag = false, Cflag = false, qflag = false, pflag = false;
    bool zflag = false, sflag = false, fua = false, no_fallback = false, unmap = false;
    int64_t offset, count;
    int pattern = 0xcd, c, ret;
    const char *source = NULL;
    struct timespec t1, t2;
    g_autoptr(IoBuf) buf = NULL;
    GError *err = NULL;
    gboolean ok;

    while ((c = getopt(argc, argv, "bcCfnpP:qrs:uz")) != -1) {
        switch (c) {
        case 'b':
            bflag = true;
            break;
        case 'c':
            cflag = true;
            break;
        case 'C':
            Cflag = true;
            break;
        case 'f':
            fua = true;
            break;
        case 'n':
            no_fallback = true;
            break;
        case 'p':
        case 'r':
            break;
        case 'P':
            pflag = true;
            pattern = io_parse_pattern(optarg);
            if (pattern < 0) {
                return -EINVAL;
            }
            break;
        case 'q':
            qflag = true;
            break;
        case 's':
            sflag = true;
            source = optarg;
            break;
        case 'u':
            unmap = true;
            break;
        case 'z':
            zflag = true;
            break;
        default:
            io_command_usage("write");
            return -EINVAL;
        }
    }
    if (optind != argc - 2) {
        io_command_usage("write");
        return -EINVAL;
    }
    if (bflag && zflag) {
        printf("-b and -z cannot be specified at the same time\n");
        return -EINVAL;
    }
    if (fua && (bflag || cflag)) {
        printf("-f and -b or -c cannot be specified at the same time\n");
        return -EINVAL;
    }
    if (no_fallback && !zflag) {
        printf("-n requires -z to be specified\n");
        return -EINVAL;
    }
    if (unmap && !zflag) {
        printf("-u requires -z to be specified\n");
        return -EINVAL;
    }
    if (zflag + pflag + sflag > 1) {
        printf("Only one of -z, -P, and -s can be specified at the same time\n");
        return -EINVAL;
    }
    ret = parse_off_len(argv, &offset, &count);
    if (ret < 0) {
        return ret;
    }
    if (count > IO_MAX_REQUEST && !no_fallback) {
        printf("length cannot exceed %" PRId64 " without -n, given %s\n", IO_MAX_REQUEST,
               argv[optind]);
        return -EINVAL;
    }
    if ((bflag || cflag) && (ret = check_sector_aligned(offset, count)) < 0) {
        return ret;
    }

    if (!zflag) {
        buf = io_buf_alloc((size_t)count);
        memset(buf, pattern, (size_t)count);
        if (sflag && io_read_source(source, buf, count) < 0) {
            return -EINVAL;
        }
    }

    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (bflag) {
        /* fact 5: as qemu-io's, done when it returns */
        ok = qimg_vmstate_pwrite(io->img, (uint64_t)offset, buf, (size_t)count, &err) &&
             qimg_vmstate_flush(io->img, &err);
    } else if (zflag) {
        unsigned flags =
            (unmap ? QIMG_ZERO_MAY_UNMAP : 0) | (no_fallback ? QIMG_ZERO_NO_FALLBACK : 0);
        ok = qimg_image_pwrite_zeroes(io->img, (uint64_t)offset, (uint64_t)count, flags,
                                      &err);
    } else if (cflag) {
        ok = write_compressed(io->img, (uint64_t)offset, buf, (uint64_t)count, &err);
    } else {
        ok = qimg_image_pwrite(io->img, (uint64_t)offset, buf, (size_t)count, &err);
        if (ok && fua) {
            ok = qimg_image_flush(io->img, &err);
        }
    }
    clock_gettime(CLOCK_MONOTONIC, &t2);
    if (!ok) {
        printf("write failed: %s\n", strerror(-io_take_errno(io, err)));
        return -EIO;
    }
    if (!qflag) {
        io_print_report("wrote", io_tsub(t2, t1), offset, count, count, 1, Cflag);
    }
    return 0;
}

/* ---- discard, flush, length, truncate, sleep, abort ---- */

int io_cmd_discard(IoCtx *io, int argc, char **argv)
{
    bool cflag = false, qflag = false;
    int64_t offset, bytes;
    struct timespec t1, t2;
    GError *err = NULL;
    gboolean ok;
    int c, ret;

    while ((c = getopt(argc, argv, "Cq")) != -1) {
        switch (c) {
        case 'C':
            cflag = true;
            break;
        case 'q':
            qflag = true;
            break;
        default:
            io_command_usage("discard");
            return -EINVAL;
        }
    }
    if (optind != argc - 2) {
        io_command_usage("discard");
        return -EINVAL;
    }
    ret = parse_off_len(argv, &offset, &bytes);
    if (ret < 0) {
        return ret;
    }
    if (bytes > IO_MAX_REQUEST) {
        printf("length cannot exceed %" PRId64 ", given %s\n", IO_MAX_REQUEST,
               argv[optind]);
        return -EINVAL;
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    ok = qimg_image_pdiscard(io->img, (uint64_t)offset, (uint64_t)bytes, &err);
    clock_gettime(CLOCK_MONOTONIC, &t2);
    if (!ok) {
        ret = io_take_errno(io, err);
        printf("discard failed: %s\n", strerror(-ret));
        return ret;
    }
    if (!qflag) {
        io_print_report("discard", io_tsub(t2, t1), offset, bytes, bytes, 1, cflag);
    }
    return 0;
}

int io_cmd_flush(IoCtx *io, int argc, char **argv)
{
    GError *err = NULL;

    (void)argc;
    (void)argv;
    return qimg_image_flush(io->img, &err) ? 0 : io_take_errno(io, err);
}

int io_cmd_length(IoCtx *io, int argc, char **argv)
{
    char s[64];

    (void)argc;
    (void)argv;
    io_cvtstr((double)io_length(io), s, sizeof(s)); /* io-map.c fact 1 */
    printf("%s\n", s);
    return 0;
}

int io_cmd_truncate(IoCtx *io, int argc, char **argv)
{
    QimgPrealloc prealloc = QIMG_PREALLOC_OFF;
    int64_t offset;
    GError *err = NULL;
    int c;

    while ((c = getopt(argc, argv, "m:")) != -1) {
        switch (c) {
        case 'm':
            if (!qimg_prealloc_parse(optarg, &prealloc, NULL)) {
                tool_error("Invalid preallocation mode '%s'", optarg);
                return -EINVAL;
            }
            break;
        default:
            io_command_usage("truncate");
            return -EINVAL;
        }
    }
    if (optind != argc - 1) {
        io_command_usage("truncate");
        return -EINVAL;
    }
    offset = io_cvtnum(argv[optind]);
    if (offset < 0) {
        io_print_cvtnum_err(offset, argv[optind]);
        return (int)offset;
    }
    /* qemu-io's truncate may shrink */
    if (!qimg_image_truncate(io->img, (uint64_t)offset, true, prealloc, &err)) {
        tool_error("%s", err->message);
        g_clear_error(&err);
        return -EINVAL;
    }
    return 0;
}

int io_cmd_sleep(IoCtx *io, int argc, char **argv)
{
    char *end;
    long ms = strtol(argv[1], &end, 10);

    (void)io;
    (void)argc;
    if (ms < 0 || *end) {
        printf("%s is not a valid number\n", argv[1]);
        return -EINVAL;
    }
    g_usleep((gulong)ms * 1000);
    return 0;
}

int io_cmd_abort(IoCtx *io, int argc, char **argv)
{
    (void)io;
    (void)argc;
    (void)argv;
    fflush(stdout);
    abort();
}
