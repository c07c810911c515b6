/*
 * qimg: command-line front end, dispatch and help.
 *
 * "qimg [-h|--help] [-V|--version] <command> [command options]", the
 * subcommand names and their options are qemu-img's, so operators' scripts
 * keep working when they switch binaries.
 */
#include "qimg-tool.h"

#include <string.h>

#ifndef QIMG_VERSION
#define QIMG_VERSION "unknown"
#endif

typedef struct ToolCommand {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *usage;
    const char *summary;
} ToolCommand;

static const ToolCommand commands[] = {
    {"amend", cmd_amend,
     "amend [--object objectdef] [--image-opts] [-p] [-q] [-f fmt] [-t cache] [--force] "
     "-o options filename",
     "Change the format-specific options of a qcow2 image (compat, refcount_bits,\n"
     "lazy_refcounts, size, data_file_raw, ...); -o help lists them."},
    {"bench", cmd_bench,
     "bench [-c count] [-d depth] [-f fmt] [--flush-interval=flush_interval] [-i aio] "
     "[-n] [--no-drain] [-o offset] [--pattern=pattern] [-q] [-s buffer_size] "
     "[-S step_size] [-t cache] [-w] [-U] filename",
     "Run a simple sequential I/O benchmark on the image (depth requests in\n"
     "flight at once); -w writes."},
    {"bitmap", cmd_bitmap,
     "bitmap [--image-opts] (--merge SOURCE | --add | --remove | --clear | --enable | "
     "--disable)... "
     "[-b source_file [-F source_fmt]] [-g granularity] [--object objectdef] [-f fmt] "
     "filename bitmap",
     "Add, remove, clear, enable or disable a persistent dirty bitmap of a qcow2\n"
     "image, in the order given (--merge is refused: qimg cannot copy bitmap data\n"
     "yet)."},
    {"check", cmd_check,
     "check [--object objectdef] [--image-opts] [-q] [-f fmt] [--output=ofmt] [-r [leaks "
     "| all]] [-T "
     "src_cache] [-U] [-p] "
     "filename",
     "Check the image for consistency (and repair it with -r).\n"
     "Exit status: 0 consistent, 1 check not completed, 2 corruptions, 3 leaks,\n"
     "63 format without checks."},
    {"commit", cmd_commit,
     "commit [--object objectdef] [--image-opts] [-q] [-f fmt] [-t cache] [-b base] [-r "
     "rate_limit] [-d] [-p] "
     "filename",
     "Write what the image holds into its backing file (or into base deeper in\n"
     "the chain), then empty the image unless -d (-b implies -d)."},
    {"compare", cmd_compare,
     "compare [--object objectdef] [--image-opts] [-f fmt] [-F fmt] [-T src_cache] [-p] "
     "[-q] [-s] [-U] "
     "filename1 filename2",
     "Check whether two images have the same contents.\n"
     "Exit status: 0 identical, 1 different, 2 open error, 3 allocation\n"
     "check error, 4 read error."},
    {"convert", cmd_convert,
     "convert [--object objectdef] [--image-opts] [--target-image-opts] [-U] [-p] [-q] "
     "[-n] [-f fmt] [-t "
     "cache] [-T src_cache] [-O output_fmt] "
     "[-B backing_file [-F backing_fmt]] [--target-is-zero] [--bitmaps] [-c] "
     "[-m num_coroutines] "
     "[-W] [-C] [--salvage] "
     "[-o options] [-l snapshot_param] [-S sparse_size] filename [filename2 [...]] "
     "output_filename",
     "Copy an image (or an internal snapshot of it) to a new or existing image."},
    {"create", cmd_create,
     "create [--object objectdef] [-q] [-f fmt] [-b backing_file [-F backing_fmt]] [-u] "
     "[-o options] "
     "filename [size]",
     "Create a new image; -o help lists the format's options."},
    {"dd", cmd_dd,
     "dd [--image-opts] [-U] [-f fmt] [-O output_fmt] [bs=block_size] [count=blocks] "
     "[skip=blocks] "
     "if=input of=output",
     "Copy the input to a new output image, as dd(1) copies a file (bs defaults\n"
     "to 512; count and skip count blocks)."},
    {"info", cmd_info,
     "info [--object objectdef] [--image-opts] [-f fmt] [--output=ofmt] "
     "[--backing-chain] [-U] filename",
     "Show information about an image."},
    {"io", cmd_io, "io [-f fmt] [-t cache] [-n] [-r] [-U] [-c command]... filename",
     "Run qemu-io compatible commands (read, write, discard, flush, ...) on the\n"
     "image; 'qimg io -c help' lists them."},
    {"map", cmd_map,
     "map [--object objectdef] [--image-opts] [-f fmt] [--start-offset=offset] "
     "[--max-length=len] "
     "[--output=ofmt] [-U] "
     "filename",
     "Dump the allocation of an image, layer by layer of its backing chain."},
    {"measure", cmd_measure,
     "measure [--output=ofmt] [-O output_fmt] [-o options] [--size N | [--object "
     "objectdef] [--image-opts] "
     "[-f fmt] [-l snapshot_param] filename]",
     "Measure the file size a new image of output_fmt needs for a virtual size\n"
     "or to hold filename's contents."},
    {"nbd", cmd_nbd,
     "nbd [-k socket | -p port [-b addr]] [-x name] [-r] [-s] [-f fmt] [-l snapshot] "
     "[-e shared] [-t] [-n] [--cache=mode] [--discard=mode] [--detect-zeroes=mode] "
     "[--fork] [--pid-file=file] [--object tls-creds-x509,id=id,dir=dir --tls-creds=id] "
     "[-v] filename",
     "Serve the image over NBD with qemu-nbd's options and defaults (one client,\n"
     "exit when it leaves unless -t; cache writeback), by running nbdkit with\n"
     "nbdkit-qimg-plugin.so."},
    {"rebase", cmd_rebase,
     "rebase [--object objectdef] [--image-opts] [-U] [-q] [-f fmt] [-t cache] [-T "
     "src_cache] [-p] [-u] -b "
     "backing_file "
     "[-F backing_fmt] filename",
     "Change the backing file of an image; without -u the contents stay the same\n"
     "(what differs between the old and the new backing file is copied in)."},
    {"resize", cmd_resize,
     "resize [--object objectdef] [--image-opts] [-f fmt] [--preallocation=prealloc] "
     "[-q] [--shrink] filename "
     "[+ | -]size",
     "Change the virtual size of the image; shrinking needs --shrink."},
    {"snapshot", cmd_snapshot,
     "snapshot [--object objectdef] [--image-opts] [-U] [-q] [-l | -a snapshot | -c "
     "snapshot | -d snapshot] "
     "filename",
     "List (-l), create (-c), apply (-a: revert the disk to it) or delete (-d)\n"
     "internal snapshots of an image."},
    {"vmstate", cmd_vmstate,
     "vmstate save|load [-f fmt] [-t cache] ... filename snapshot [stream]",
     "Save a VM state stream as a new snapshot, or write a snapshot's VM state\n"
     "out (QEMU's savevm/loadvm, offline); 'qimg vmstate --help' for details."},
};

/* Personalities: run as "qemu-img" (a link from make install's qemu-compat
 * folder) qimg is qemu-img to a script -- messages start "qemu-img:",
 * --version's first line is "qemu-img version 7.2.0 (qimg X.Y.Z)", which
 * management stacks parse (Cinder wants >= 2.10 before it passes -U); as
 * "qemu-io" it is "qimg io" with qemu-io's name and prompt. */
#define QEMU_COMPAT_VERSION "7.2.0"

void tool_print_version(void)
{
    if (strcmp(tool_program(), "qimg") == 0) {
        printf("qimg version " QIMG_VERSION "\n"
               "Command line compatible with qemu-img 7.2\n");
    } else {
        printf("%s version " QEMU_COMPAT_VERSION " (qimg " QIMG_VERSION ")\n"
               "qimg, a qcow2 image engine with the command line of QEMU 7.2's %s\n",
               tool_program(), tool_program());
    }
}

/* The drivers qimg opens, as qemu-img's help lists them (QEMU's harness
 * looks for "quorum" there). */
static void print_formats(void)
{
    g_auto(GStrv) names = qimg_format_list();

    for (size_t i = 0; names[i]; i++) {
        printf(" %s", names[i]);
    }
    printf("\n");
}

static void print_help(void)
{
    tool_print_version();
    printf("usage: %s [standard options] command [command options]\n", tool_program());
    printf("qcow2 and raw disk image utility\n"
           "\n"
           "    '-h', '--help'       display this help and exit\n"
           "    '-V', '--version'    output version information and exit\n"
           "\n"
           "Command syntax:\n");
    for (size_t i = 0; i < G_N_ELEMENTS(commands); i++) {
        printf("  %s\n", commands[i].usage);
    }
    printf("\n"
           "Command parameters:\n"
           "  'filename' is a disk image filename\n"
           "  'fmt' is the disk image format (raw or qcow2). It is guessed "
           "automatically\n"
           "    in most cases\n"
           "  'cache' is the cache mode used to write the output disk image, the valid\n"
           "    options are: 'none', 'writeback' (default, except for convert),\n"
           "    'writethrough', 'directsync' and 'unsafe' (default for convert)\n"
           "  'src_cache' is the cache mode used to read input disk images, the valid\n"
           "    options are the same as for the 'cache' option\n"
           "  'size' is the disk image size in bytes. Optional suffixes\n"
           "    'k' or 'K' (kilobyte, 1024), 'M' (megabyte, 1024k), 'G' (gigabyte, "
           "1024M),\n"
           "    'T' (terabyte, 1024G), 'P' (petabyte, 1024T) and 'E' (exabyte, 1024P) "
           "are\n"
           "    supported. 'b' is ignored.\n"
           "  'output_filename' is the destination disk image filename\n"
           "  'output_fmt' is the destination format\n"
           "  'options' is a comma separated list of format specific options in a\n"
           "    name=value format. Use -o help for an overview of the options "
           "supported by\n"
           "    the used format\n"
           "  'snapshot_param' is the ID or name of an internal snapshot, or\n"
           "    'snapshot.id=[ID],snapshot.name=[NAME]'\n"
           "  'sparse_size' is the minimum run of zeros that convert leaves sparse\n"
           "    (multiple of 512, default 4k, 0 writes everything)\n"
           "  '--output' takes 'human' (default) or 'json'\n"
           "  '-U' opens read-only without keeping others from writing (force share)\n"
           "  '-q' suppresses normal output; '-p' shows progress\n"
           "  '--trust-names' (any command) lets the files an image names (VMDK\n"
           "    extents and parents) be absolute, contain '..', name a protocol, lead\n"
           "    out of the image's folder or be devices; without it such images are\n"
           "    refused before anything they name is opened\n"
           "\n"
           "Supported formats:");
    print_formats();
    printf("\n"
           "Run '%s COMMAND --help' for one command's usage.\n",
           tool_program());
}

int tool_command_help(const char *name)
{
    for (size_t i = 0; i < G_N_ELEMENTS(commands); i++) {
        if (strcmp(commands[i].name, name) == 0) {
            printf("usage: %s %s\n\n%s\n", tool_program(), commands[i].usage,
                   commands[i].summary);
            return 0;
        }
    }
    print_help();
    return 0;
}

bool tool_trust_names;

/* --trust-names anywhere before "--" is the command line's, whatever the
 * command (it is taken out of argv before the command parses it). */
static void take_trust_names(int *argc, char **argv)
{
    int out = 1;

    for (int i = 1; i < *argc; i++) {
        if (strcmp(argv[i], "--") == 0) {
            while (i < *argc) {
                argv[out++] = argv[i++];
            }
            break;
        }
        if (strcmp(argv[i], "--trust-names") == 0) {
            tool_trust_names = true;
            continue;
        }
        argv[out++] = argv[i];
    }
    *argc = out;
    argv[out] = NULL;
}

int main(int argc, char **argv)
{
    const char *cmd, *self = strrchr(argv[0], '/');

    take_trust_names(&argc, argv);
    self = self ? self + 1 : argv[0];
    if (strcmp(self, "qemu-io") == 0) {
        tool_set_program("qemu-io");
        return cmd_io(argc, argv);
    }
    if (strcmp(self, "qemu-img") == 0) {
        tool_set_program("qemu-img");
    }
    if (argc < 2) {
        return tool_usage_error("Not enough arguments");
    }
    cmd = argv[1];
    if (strcmp(cmd, "-h") == 0 || strcmp(cmd, "--help") == 0) {
        print_help();
        return 0;
    }
    if (strcmp(cmd, "-V") == 0 || strcmp(cmd, "--version") == 0) {
        tool_print_version();
        return 0;
    }
    if (cmd[0] == '-') {
        return tool_usage_error("unrecognized option '%s'", cmd);
    }
    for (size_t i = 0; i < G_N_ELEMENTS(commands); i++) {
        if (strcmp(commands[i].name, cmd) == 0) {
            /* The subcommand sees argv[0] = its name, like qemu-img. */
            return commands[i].run(argc - 1, argv + 1);
        }
    }
    return tool_usage_error("Command not found: %s", cmd);
}
