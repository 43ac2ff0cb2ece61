//go:build !linux

package devdb

import "syscall"

// sysProcAttr has no parent-death signal outside Linux; there the child
// relies on the stdin-EOF rule alone to die with its parent.
func sysProcAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{} }
