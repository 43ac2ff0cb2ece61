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
