package cli_test

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentq/agentq/internal/testenv"
)

// benchcpu drains a backlog end to end, reports the CPU per event and
// writes a profile of the drain.
func TestBenchCPUSmoke(t *testing.T) {
	env := map[string]string{"AGENTQ_DATABASE_URL": testenv.DatabaseURL(t)}
	prof := filepath.Join(t.TempDir(), "scorer.prof")
	code, out, errOut := run(context.Background(), env, "", "benchcpu", "--events", "300", "--warmup", "50", "--batch", "100", "--cpuprofile", prof, "--memprofile", prof+".mem")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "the scorer drained 300 events")
	if runtime.GOOS == "linux" {
		require.Regexp(t, `CPU of this process \(scorer \+ embedded NATS server\)\s+[0-9.]+ µs per event`, out)
	}
	require.Regexp(t, `heap allocations of this process\s+[1-9][0-9]* objects, [0-9.]+ kB per event`, out)
	for _, f := range []string{prof, prof + ".mem", prof + ".mem.base"} {
		st, err := os.Stat(f)
		require.NoError(t, err)
		require.Positive(t, st.Size(), f)
	}
}
