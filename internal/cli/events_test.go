package cli

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentq/agentq/schemas"
)

// What agentq publishes is accepted by tail, wildcards included.
func TestCheckTailSubjectAccepts(t *testing.T) {
	reg, err := schemas.Load()
	require.NoError(t, err)
	for _, ok := range []string{"quality.changed.demo", "tool.>", "tool.*.demo", "*.rated.demo", ">", "*.*.*", "indexer.rejected.*", "prompt.created.t-1_x"} {
		require.NoError(t, checkTailSubject(reg, ok), ok)
	}
}

// The banner's example commands run the agentq that is running: bin/agentq
// after make dev, not go run (which links the binary again at every call).
func TestSelfCommand(t *testing.T) {
	tests := []struct {
		exe, wd, onPath, want string
	}{
		{"/src/agentq/bin/agentq", "/src/agentq", "", "bin/agentq"},
		{"/src/agentq/agentq", "/src/agentq", "", "./agentq"},
		{"/usr/local/bin/agentq", "/home/me", "/usr/local/bin/agentq", "agentq"},
		{"/opt/agentq/agentq", "/home/me", "/usr/local/bin/agentq", "/opt/agentq/agentq"},
		{"/tmp/go-build123/b001/exe/agentq", "/src/agentq", "", "go run ./cmd/agentq"},
		{"/tmp/go-build123/b001/cli.test", "/src/agentq/internal/cli", "", "go run ./cmd/agentq"},
	}
	for _, tc := range tests {
		require.Equal(t, tc.want, selfCommand(tc.exe, tc.wd, tc.onPath), tc.exe)
	}
}
