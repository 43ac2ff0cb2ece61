package mcpserver

import (
	"context"
	"maps"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentq/agentq/internal/auth"
	"github.com/agentq/agentq/internal/bus"
	"github.com/agentq/agentq/internal/health"
	"github.com/agentq/agentq/internal/testenv"
	"github.com/agentq/agentq/schemas"
)

// The health fold keeps at most its bound of tenants, the least recently
// asked about dropped first; a dropped tenant's next call reads its fold
// again from the stream and answers the same.
func TestHealthFoldKeepsTheRecentTenants(t *testing.T) {
	n := testenv.StartNATS(t)
	ctx := context.Background()
	a, b, c := testenv.Tenant(t), testenv.Tenant(t), testenv.Tenant(t)
	for i, tenant := range []string{a, b, c} {
		ev, err := bus.NewEvent(health.TypeToolDegraded, tenant, "agentq/degrader", map[string]any{
			"tool_name": "geo", "state": "degraded", "previous_state": "healthy", "quality_score": 0.2, "threshold": 0.3,
			"version": i + 1, "at": "2026-11-27T10:00:00Z"})
		require.NoError(t, err)
		m, err := bus.Encode(ev)
		require.NoError(t, err)
		_, err = n.JS.PublishMsg(ctx, m)
		require.NoError(t, err)
	}
	f := newHealthFold(n.JS, 2)
	kept := func() []string {
		f.mu.Lock()
		defer f.mu.Unlock()
		var out []string
		for el := f.order.Front(); el != nil; el = el.Next() {
			out = append(out, el.Value.(*tenantHealth).tenant)
		}
		require.Len(t, f.tenants, len(out))
		return out
	}
	ask := func(tenant string) []ToolHealth {
		tools, err := f.tools(ctx, tenant)
		require.NoError(t, err)
		require.Len(t, tools, 1)
		require.Equal(t, "geo", tools[0].ToolName)
		require.Equal(t, "degraded", tools[0].State)
		return tools
	}

	first := ask(a)
	ask(b)
	require.Equal(t, []string{b, a}, kept())
	ask(a)
	require.Equal(t, []string{a, b}, kept())
	ask(c)
	require.Equal(t, []string{c, a}, kept(), "b, the least recently asked, is dropped")
	require.Equal(t, first, ask(a), "a kept its fold")
	// b again: its fold is read from the stream anew, and a goes.
	got := ask(b)
	require.Equal(t, int64(2), got[0].version)
	require.Equal(t, []string{b, a}, kept())
	ask(c)
	require.Equal(t, []string{c, b}, kept())
}

// The MCP server knows no token scopes (every token may call every tool),
// so none of its tools may publish an operator command: those go through
// the ingest endpoint, which refuses them from a token not of scope
// operator. A tool added for one must check the token's scope first.
func TestNoToolSendsAnOperatorCommand(t *testing.T) {
	n := testenv.StartNATS(t)
	reg, err := schemas.Load()
	require.NoError(t, err)
	s, err := New(Options{NC: n.NC, Registry: reg})
	require.NoError(t, err)
	for _, typ := range []string{"agentq.prompt.created.v1", "agentq.tool.executed.v1", "agentq.feedback.submitted.v1"} {
		require.Contains(t, slices.Collect(maps.Values(s.contracts)), typ, "the write tools are seen")
	}
	for tool, typ := range s.contracts {
		require.NotContains(t, auth.OperatorCommands, typ, "tool %s", tool)
	}
}
