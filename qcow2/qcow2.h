/*
 * qcow2/qcow2.h: the qcow2 driver's shared declarations.  For one commit
 * they all live in qcow2/format.h (renamed so that its history follows the
 * on-disk format part); the next commit moves the driver state back here.
 */
#include "qcow2/format.h"
