/*
 * tools/optlist-hyperv.c: the create options of the Hyper-V, Azure and
 * VirtualBox formats (vpc, vhdx, vdi) and of qed, as qemu-img 7.2 lists
 * them: help text, the defaults its "Formatting ..." line prints, and that
 * line's order (optlist.c's facts apply).
 *
 * Facts learnt from running qemu-img 7.2:
 *  1. "Formatting" orders: vpc size subformat force_size; vhdx size
 *     log_size block_size subformat block_state_zero (log_size=1048576
 *     and block_size=0 always printed); vdi size static (static=off
 *     printed); qed size backing_file backing_fmt cluster_size table_size
 *     (cluster_size=65536 printed).
 */
#include "qimg-tool.h"

#include <string.h>

static const ToolOptDesc vpc_opts[] = {
    {"size", TOOL_OPT_SIZE, "Virtual disk size", NULL, false},
    {"subformat", TOOL_OPT_STRING,
     "Type of virtual hard disk format. Supported formats are {dynamic (default) | "
     "fixed} ",
     NULL, false},
    {"force_size", TOOL_OPT_BOOL,
     "Force disk size calculation to use the actual size specified, rather than using "
     "the nearest CHS-based calculation",
     NULL, false},
    {NULL, 0, NULL, NULL, false},
};

static const ToolOptDesc vhdx_opts[] = {
    {"size", TOOL_OPT_SIZE, "Virtual disk size; max of 64TB.", NULL, false},
    {"log_size", TOOL_OPT_SIZE, "Log size; min 1MB.", "1048576", false},
    {"block_size", TOOL_OPT_SIZE,
     "Block Size; min 1MB, max 256MB. 0 means auto-calculate based on image size.", "0",
     false},
    {"subformat", TOOL_OPT_STRING,
     "VHDX format type, can be either 'dynamic' or 'fixed'. Default is 'dynamic'.", NULL,
     false},
    {"block_state_zero", TOOL_OPT_BOOL,
     "Force use of payload blocks of type 'ZERO'. Non-standard, but default.  Do not set "
     "to 'off' when using 'qemu-img convert' with subformat=dynamic.",
     NULL, false},
    {NULL, 0, NULL, NULL, false},
};

static const ToolOptDesc vdi_opts[] = {
    {"size", TOOL_OPT_SIZE, "Virtual disk size", NULL, false},
    {"static", TOOL_OPT_BOOL, "VDI static (pre-allocated) image", "off", false},
    {NULL, 0, NULL, NULL, false},
};

static const ToolOptDesc qed_opts[] = {
    {"size", TOOL_OPT_SIZE, "Virtual disk size", NULL, false},
    {"backing_file", TOOL_OPT_STRING, "File name of a base image", NULL, false},
    {"backing_fmt", TOOL_OPT_STRING, "Image format of the base image", NULL, false},
    {"cluster_size", TOOL_OPT_SIZE, "Cluster size (in bytes)", "65536", false},
    {"table_size", TOOL_OPT_SIZE, "L1/L2 table size (in clusters)", NULL, false},
    {NULL, 0, NULL, NULL, false},
};

const ToolOptDesc *tool_hyperv_create_opts(const char *format)
{
    if (strcmp(format, "vpc") == 0) {
        return vpc_opts;
    }
    if (strcmp(format, "vhdx") == 0) {
        return vhdx_opts;
    }
    if (strcmp(format, "vdi") == 0) {
        return vdi_opts;
    }
    if (strcmp(format, "qed") == 0) {
        return qed_opts;
    }
    return NULL;
}
