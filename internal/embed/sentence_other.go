//go:build !linux

package embed

import "syscall"

// sentenceProcAttr has no parent-death signal outside Linux; there the
// child exits when its stdin reaches EOF, which happens when the parent
// dies.
func sentenceProcAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{} }
