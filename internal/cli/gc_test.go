package cli

import (
	"runtime/debug"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestTuneGC(t *testing.T) {
	before := debug.SetGCPercent(100)
	defer debug.SetGCPercent(before)
	for _, c := range []struct {
		name string
		gogc string
		want int
	}{
		{"unset: agentq's default", "", defaultGCPercent},
		{"set: the operator's, as the runtime read it", "50", 100},
	} {
		t.Run(c.name, func(t *testing.T) {
			debug.SetGCPercent(100)
			tuneGC(func(k string) string {
				if k == "GOGC" {
					return c.gogc
				}
				return ""
			})
			require.Equal(t, c.want, debug.SetGCPercent(100))
		})
	}
}
