"""Runs a command (its arguments) with Landlock's three system calls refused (ENOSYS), as on a
kernel without Landlock or under a container profile older than them: a seccomp filter the
command inherits and cannot lift. Standard library only; x86_64 and aarch64 number the calls
alike (444-446)."""

import ctypes
import os
import struct
import sys

PR_SET_NO_NEW_PRIVS = 38
PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2
LANDLOCK_FIRST, LANDLOCK_LAST = 444, 446
ENOSYS = 38
RET_ERRNO, RET_ALLOW = 0x00050000, 0x7FFF0000
LD_NR, JGE, JGT, RET = 0x20, 0x35, 0x25, 0x06


def instruction(code, jt, jf, k):
    return struct.pack("HBBI", code, jt, jf, k)


PROGRAM = b"".join([
    instruction(LD_NR, 0, 0, 0),                   # the call's number
    instruction(JGE, 0, 2, LANDLOCK_FIRST),        # below Landlock's: allowed
    instruction(JGT, 1, 0, LANDLOCK_LAST),         # above: allowed
    instruction(RET, 0, 0, RET_ERRNO | ENOSYS),    # Landlock's: "no such call"
    instruction(RET, 0, 0, RET_ALLOW),
])


class Program(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_char_p)]


libc = ctypes.CDLL(None, use_errno=True)
if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
    sys.exit(f"no_new_privs: errno {ctypes.get_errno()}")
program = Program(len(PROGRAM) // 8, PROGRAM)
if libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(program), 0, 0) != 0:
    sys.exit(f"seccomp: errno {ctypes.get_errno()}")
os.execv(sys.argv[1], sys.argv[1:])
