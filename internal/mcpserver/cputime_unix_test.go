//go:build unix

package mcpserver_test

import (
	"syscall"
	"time"
)

// processCPU is the CPU time (user and system) the test process has used:
// the indexer, the NATS server, the MCP server and its client together,
// since all run in it (Postgres does not).
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
