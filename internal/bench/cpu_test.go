package bench

import (
	"os"
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestProcessCPU: benchcpu reads a process's CPU from /proc on Linux, and
// says it did not measure otherwise.
func TestProcessCPU(t *testing.T) {
	if runtime.GOOS != "linux" {
		assert.Equal(t, -1.0, processCPU(os.Getpid()))
		return
	}
	assert.GreaterOrEqual(t, processCPU(os.Getpid()), 0.0)
	assert.Equal(t, -1.0, processCPU(-1), "no such process")
}
