package client_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentq/agentq/client"
	"github.com/agentq/agentq/internal/testenv"
)

// TestSubscribeAlerts: a tool that breaks is degraded, then quarantined,
// by the running degrader; the subscriber gets both, with their figures,
// and nothing of another tenant's; a subscriber for every tenant and one
// resuming after a sequence get them too.
func TestSubscribeAlerts(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ten, other := testenv.Tenant(t), testenv.Tenant(t)
	c := connect(t, client.Config{Tenant: ten})
	o := connect(t, client.Config{Tenant: other})
	mine, all := make(chan client.Alert, 10), make(chan client.Alert, 10)
	require.NoError(t, c.SubscribeAlerts(ctx, "", func(a client.Alert) { mine <- a }))
	require.NoError(t, c.SubscribeAlerts(ctx, "*", func(a client.Alert) {
		if a.Tenant == ten || a.Tenant == other {
			all <- a
		}
	}))
	breakTool := func(c *client.Client, tool string) {
		// Three known tools, so the share cap lets one be quarantined.
		for _, name := range []string{tool, "spare_a", "spare_b"} {
			_, err := c.Publish(ctx, client.ToolRegistered{Name: name, Description: "a tool"})
			require.NoError(t, err)
		}
		for i := range 42 {
			_, err := c.Publish(ctx, client.ToolExecuted{ToolName: tool, Success: i < 30, ErrorClass: "timeout"})
			require.NoError(t, err)
		}
		require.NoError(t, c.Flush(ctx))
	}
	breakTool(o, "other_tool")
	breakTool(c, "flaky_tool")

	next := func(ch chan client.Alert) client.Alert {
		t.Helper()
		select {
		case a := <-ch:
			return a
		case <-ctx.Done():
			t.Fatal("no alert")
			return client.Alert{}
		}
	}
	degraded, quarantined := next(mine), next(mine)
	for _, a := range []client.Alert{degraded, quarantined} {
		require.Equal(t, ten, a.Tenant)
		require.Equal(t, "flaky_tool", a.ToolName)
		require.NotEmpty(t, a.ID)
		require.NotEmpty(t, a.Cause)
		require.Positive(t, a.Sequence)
		require.WithinDuration(t, time.Now(), a.Time, time.Minute)
		require.NotEmpty(t, a.Reason)
		require.NotNil(t, a.DegradedSince)
		var data map[string]any
		require.NoError(t, json.Unmarshal(a.Data, &data))
		require.Equal(t, a.State, data["state"])
		require.Equal(t, a.QualityScore, data["quality_score"])
	}
	require.Equal(t, []string{"degraded", "warning", "degraded"}, []string{degraded.Kind, degraded.PreviousState, degraded.State})
	require.GreaterOrEqual(t, degraded.Evidence, 1.0)
	require.Equal(t, []string{"quarantined", "degraded", "quarantined"}, []string{quarantined.Kind, quarantined.PreviousState, quarantined.State})
	require.NotNil(t, quarantined.Quarantine)
	require.Equal(t, 1, quarantined.Quarantine.Offence)
	require.NotNil(t, quarantined.Quarantine.ExpiresAt)
	require.True(t, quarantined.Quarantine.ExpiresAt.After(quarantined.Time))
	select {
	case a := <-mine:
		t.Fatalf("unexpected alert %s %s of tenant %s", a.Kind, a.ToolName, a.Tenant)
	default:
	}

	// Every tenant's: both tools, each degraded then quarantined.
	seen := map[string][]string{}
	for range 4 {
		a := next(all)
		seen[a.Tenant+"/"+a.ToolName] = append(seen[a.Tenant+"/"+a.ToolName], a.Kind)
	}
	require.Equal(t, map[string][]string{ten + "/flaky_tool": {"degraded", "quarantined"}, other + "/other_tool": {"degraded", "quarantined"}}, seen)

	// Resuming after the first: the second again, with the same id.
	again := make(chan client.Alert, 10)
	require.NoError(t, c.SubscribeAlerts(ctx, "", func(a client.Alert) { again <- a }, client.AlertsAfter(degraded.Sequence)))
	a := next(again)
	require.Equal(t, quarantined.ID, a.ID)
	require.Equal(t, quarantined.Sequence, a.Sequence)

	require.Error(t, c.SubscribeAlerts(ctx, "Bad!", func(client.Alert) {}))
}
