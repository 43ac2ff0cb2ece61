//go:build unix

package schemas

import (
	"syscall"
	"time"
)

// cpuTime returns the CPU time (user + system) of this process so far: on
// a shared machine it counts what the benchmark spent, not the time other
// processes held the cores.
func cpuTime() (time.Duration, bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}
