package procfs

import "syscall"

// errESRCH is what reads of /proc files of a just-exited process return.
var errESRCH = syscall.ESRCH
