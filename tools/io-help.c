/*
 * qimg io: the extended help of "help COMMAND".
 *
 * Owns: the text printed after a command's usage line.
 *
 * Facts learnt from running qemu-io 7.2 (not from its source):
 *  1. "help CMD" prints the usage line, then, for the commands that have
 *     one, this text (it begins and ends with an empty line).  abort,
 *     aio_flush, alloc, break, close, flush, help, info, length, map, quit,
 *     remove_break, resume, sleep, truncate and wait_break have none.  The
 *     texts are qemu-io's, so that scripts reading them see the same; where
 *     they name an option qimg refuses (-C, -k, -i), the refusal says so
 *     when the option is used (io-open.c, io-aio.c fact 3).
 */
#include "io.h"

#include <string.h>

static const struct {
    const char *name;
    const char *text;
} io_help[] = {
    {"aio_read",
     "\n"
     " asynchronously reads a range of bytes from the given offset\n"
     "\n"
     " Example:\n"
     " 'aio_read -v 512 1k 1k ' - dumps 2 kilobytes read from 512 bytes into the file\n"
     "\n"
     " Reads a segment of the currently open file, optionally dumping it to the\n"
     " standard output stream (with -v option) for subsequent inspection.\n"
     " The read is performed asynchronously and the aio_flush command must be\n"
     " used to ensure all outstanding aio requests have been completed.\n"
     " Note that due to its asynchronous nature, this command will be\n"
     " considered successful once the request is submitted, independently\n"
     " of potential I/O errors or pattern mismatches.\n"
     " -C, -- report statistics in a machine parsable format\n"
     " -P, -- use a pattern to verify read data\n"
     " -i, -- treat request as invalid, for exercising stats\n"
     " -v, -- dump buffer to standard output\n"
     " -q, -- quiet mode, do not show I/O statistics\n"
     "\n"},
    {"aio_write",
     "\n"
     " asynchronously writes a range of bytes from the given offset source\n"
     " from multiple buffers\n"
     "\n"
     " Example:\n"
     " 'aio_write 512 1k 1k' - writes 2 kilobytes at 512 bytes into the open file\n"
     "\n"
     " Writes into a segment of the currently open file, using a buffer\n"
     " filled with a set pattern (0xcdcdcdcd).\n"
     " The write is performed asynchronously and the aio_flush command must be\n"
     " used to ensure all outstanding aio requests have been completed.\n"
     " Note that due to its asynchronous nature, this command will be\n"
     " considered successful once the request is submitted, independently\n"
     " of potential I/O errors or pattern mismatches.\n"
     " -P, -- use different pattern to fill file\n"
     " -C, -- report statistics in a machine parsable format\n"
     " -f, -- use Force Unit Access semantics\n"
     " -i, -- treat request as invalid, for exercising stats\n"
     " -q, -- quiet mode, do not show I/O statistics\n"
     " -u, -- with -z, allow unmapping\n"
     " -z, -- write zeroes using blk_aio_pwrite_zeroes\n"
     "\n"},
    {"discard", "\n"
                " discards a range of bytes from the given offset\n"
                "\n"
                " Example:\n"
                " 'discard 512 1k' - discards 1 kilobyte from 512 bytes into the file\n"
                "\n"
                " Discards a segment of the currently open file.\n"
                " -C, -- report statistics in a machine parsable format\n"
                " -q, -- quiet mode, do not show I/O statistics\n"
                "\n"},
    {"open",
     "\n"
     " opens a new file in the requested mode\n"
     "\n"
     " Example:\n"
     " 'open -n -o driver=raw /tmp/data' - opens raw data file read-write, uncached\n"
     "\n"
     " Opens a file for subsequent use by all of the other qemu-io commands.\n"
     " -r, -- open file read-only\n"
     " -s, -- use snapshot file\n"
     " -C, -- use copy-on-read\n"
     " -n, -- disable host cache, short for -t none\n"
     " -U, -- force shared permissions\n"
     " -k, -- use kernel AIO implementation (Linux only, prefer use of -i)\n"
     " -i, -- use AIO mode (threads, native or io_uring)\n"
     " -t, -- use the given cache mode for the image\n"
     " -d, -- use the given discard mode for the image\n"
     " -o, -- options to be given to the block driver\n"},
    {"read", "\n"
             " reads a range of bytes from the given offset\n"
             "\n"
             " Example:\n"
             " 'read -v 512 1k' - dumps 1 kilobyte read from 512 bytes into the file\n"
             "\n"
             " Reads a segment of the currently open file, optionally dumping it to the\n"
             " standard output stream (with -v option) for subsequent inspection.\n"
             " -b, -- read from the VM state rather than the virtual disk\n"
             " -C, -- report statistics in a machine parsable format\n"
             " -l, -- length for pattern verification (only with -P)\n"
             " -p, -- ignored for backwards compatibility\n"
             " -P, -- use a pattern to verify read data\n"
             " -q, -- quiet mode, do not show I/O statistics\n"
             " -s, -- start offset for pattern verification (only with -P)\n"
             " -v, -- dump buffer to standard output\n"
             "\n"},
    {"readv",
     "\n"
     " reads a range of bytes from the given offset into multiple buffers\n"
     "\n"
     " Example:\n"
     " 'readv -v 512 1k 1k ' - dumps 2 kilobytes read from 512 bytes into the file\n"
     "\n"
     " Reads a segment of the currently open file, optionally dumping it to the\n"
     " standard output stream (with -v option) for subsequent inspection.\n"
     " Uses multiple iovec buffers if more than one byte range is specified.\n"
     " -C, -- report statistics in a machine parsable format\n"
     " -P, -- use a pattern to verify read data\n"
     " -v, -- dump buffer to standard output\n"
     " -q, -- quiet mode, do not show I/O statistics\n"
     "\n"},
    {"reopen", "\n"
               " Changes the open options of an already opened image\n"
               "\n"
               " Example:\n"
               " 'reopen -o lazy-refcounts=on' - activates lazy refcount writeback on a "
               "qcow2 image\n"
               "\n"
               " -r, -- Reopen the image read-only\n"
               " -w, -- Reopen the image read-write\n"
               " -c, -- Change the cache mode to the given value\n"
               " -o, -- Changes block driver options (cf. 'open' command)\n"
               "\n"},
    {"sigraise",
     "\n"
     " raises the given signal\n"
     "\n"
     " Example:\n"
     " 'sigraise 15' - raises SIGTERM\n"
     "\n"
     " Invokes raise(signal), where \"signal\" is the mandatory integer argument\n"
     " given to sigraise.\n"
     "\n"},
    {"write", "\n"
              " writes a range of bytes from the given offset\n"
              "\n"
              " Example:\n"
              " 'write 512 1k' - writes 1 kilobyte at 512 bytes into the open file\n"
              "\n"
              " Writes into a segment of the currently open file, using a buffer\n"
              " filled with a set pattern (0xcdcdcdcd).\n"
              " -b, -- write to the VM state rather than the virtual disk\n"
              " -c, -- write compressed data with blk_write_compressed\n"
              " -f, -- use Force Unit Access semantics\n"
              " -n, -- with -z, don't allow slow fallback\n"
              " -p, -- ignored for backwards compatibility\n"
              " -P, -- use different pattern to fill file\n"
              " -s, -- use a pattern file to fill the write buffer\n"
              " -C, -- report statistics in a machine parsable format\n"
              " -q, -- quiet mode, do not show I/O statistics\n"
              " -u, -- with -z, allow unmapping\n"
              " -z, -- write zeroes using blk_co_pwrite_zeroes\n"
              "\n"},
    {"writev",
     "\n"
     " writes a range of bytes from the given offset source from multiple buffers\n"
     "\n"
     " Example:\n"
     " 'writev 512 1k 1k' - writes 2 kilobytes at 512 bytes into the open file\n"
     "\n"
     " Writes into a segment of the currently open file, using a buffer\n"
     " filled with a set pattern (0xcdcdcdcd).\n"
     " -P, -- use different pattern to fill file\n"
     " -C, -- report statistics in a machine parsable format\n"
     " -f, -- use Force Unit Access semantics\n"
     " -q, -- quiet mode, do not show I/O statistics\n"
     "\n"},
};

const char *io_command_help(const char *name)
{
    for (size_t i = 0; i < G_N_ELEMENTS(io_help); i++) {
        if (strcmp(io_help[i].name, name) == 0) {
            return io_help[i].text;
        }
    }
    return NULL;
}
