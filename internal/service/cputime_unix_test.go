//go:build unix

package service_test

import (
	"syscall"
	"time"
)

// processCPU is the CPU time (user and system) the test process has used:
// server, client and service together, since all run in it.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
