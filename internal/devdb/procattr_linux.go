package devdb

import "syscall"

// sysProcAttr puts the child in its own process group, so a terminal's
// Ctrl-C reaches only the parent (which then shuts the child down in order),
// and asks the kernel to SIGKILL the child when the thread that started it
// dies. Start keeps that thread locked for the child's whole life (see
// startLocked), because Pdeathsig follows the thread, not the process.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
