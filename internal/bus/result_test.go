package bus_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentq/agentq/internal/bus"
)

func TestDeriveIDIsDeterministicAndScoped(t *testing.T) {
	typ := bus.Type("quality", "changed")
	a := bus.DeriveID("scorer", "acme", typ, "event:e1")
	require.Equal(t, a, bus.DeriveID("scorer", "acme", typ, "event:e1"))
	for name, other := range map[string]string{
		"another cause":    bus.DeriveID("scorer", "acme", typ, "event:e2"),
		"another consumer": bus.DeriveID("rater", "acme", typ, "event:e1"),
		"another type":     bus.DeriveID("scorer", "acme", bus.Type("tool", "rated"), "event:e1"),
		"another tenant":   bus.DeriveID("scorer", "globex", typ, "event:e1"),
	} {
		require.NotEqual(t, a, other, name)
	}
}

func TestResultsOfTwoTenantsWithTheSameEventIDDiffer(t *testing.T) {
	causeA := newToolEvent(t, "acme", map[string]any{"tool_name": "x", "success": true})
	causeB := newToolEvent(t, "globex", map[string]any{"tool_name": "x", "success": true})
	causeB.SetID(causeA.ID())
	typ := bus.Type("quality", "changed")
	data := map[string]any{"target": "tool", "tool_name": "x", "quality_score": 0.5, "success_rate": 1, "total_calls": 1}
	ra, err := bus.NewResult("scorer", typ, causeA, data)
	require.NoError(t, err)
	rb, err := bus.NewResult("scorer", typ, causeB, data)
	require.NoError(t, err)
	require.NotEqual(t, ra.ID(), rb.ID())
	require.Equal(t, causeA.ID(), bus.Causation(ra))
	require.Equal(t, "globex", bus.Tenant(rb))

	sa, err := bus.NewStateResult("scorer", typ, "acme", "tool/x", 7, causeA, data)
	require.NoError(t, err)
	sa2, err := bus.NewStateResult("scorer", typ, "acme", "tool/x", 7, causeB, data)
	require.NoError(t, err)
	require.Equal(t, sa.ID(), sa2.ID(), "the state's id depends on target and version, not on the cause")
	sb, err := bus.NewStateResult("scorer", typ, "acme", "tool/x", 8, causeA, data)
	require.NoError(t, err)
	require.NotEqual(t, sa.ID(), sb.ID())
}
