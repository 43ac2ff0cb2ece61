//go:build !unix

package schemas

import "time"

// cpuTime is not measured here; benchmarks then report wall time only.
func cpuTime() (time.Duration, bool) { return 0, false }
