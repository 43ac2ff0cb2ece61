package embed

import "syscall"

// sentenceProcAttr puts the child in its own process group, so a
// terminal's Ctrl-C reaches only the parent, and asks the kernel to
// SIGKILL the child when the thread that started it dies (see
// startLocked, which keeps that thread for the child's whole life).
func sentenceProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
