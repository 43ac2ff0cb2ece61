package cli_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/agentq/agentq/internal/bus"
	"github.com/agentq/agentq/internal/testenv"
	"github.com/agentq/agentq/schemas"
)

// The operator docs' degrader walk-through: a tool that starts failing is
// degraded, then quarantined, as agentq alerts shows; it vanishes from
// agentq tool search; agentq tool health says why; agentq tool release
// puts it on probation and back into search.
func TestDegraderWalkthrough(t *testing.T) {
	ctx, env, natsURL, client := devOnTestDatabase(t)
	tenant := testenv.Tenant(t)
	client["AGENTQ_DATABASE_URL"] = env["AGENTQ_DATABASE_URL"]

	code, _, errOut := run(ctx, client, "", "tool", "register", "--tenant", tenant, "--name", "geo_lookup", "--description", "look up the coordinates of a place")
	require.Equal(t, 0, code, errOut)
	code, _, errOut = run(ctx, client, "", "tool", "register", "--tenant", tenant, "--name", "weather", "--description", "the weather at some coordinates")
	require.Equal(t, 0, code, errOut)

	nc, err := nats.Connect(natsURL)
	require.NoError(t, err)
	defer nc.Close()
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	reg, err := schemas.Load()
	require.NoError(t, err)
	pub := bus.NewPublisher(js, reg)
	publish := func(ok bool, n int) {
		for range n {
			ev, err := bus.NewEvent("agentq.tool.executed.v1", tenant, "walkthrough", map[string]any{"tool_name": "geo_lookup", "success": ok, "latency_ms": 80})
			require.NoError(t, err)
			_, err = pub.Publish(ctx, ev)
			require.NoError(t, err)
		}
	}
	publish(true, 30)
	publish(false, 12)

	// --count waits for the alerts, as a script does.
	code, out, errOut := run(ctx, client, "", "alerts", "--tenant", tenant, "--count", "2", "--timeout", "1m")
	require.Equal(t, 0, code, errOut)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 2, out)
	require.Contains(t, lines[0], tenant+" geo_lookup warning → degraded")
	require.Contains(t, lines[1], "offence=1")

	code, out, errOut = run(ctx, client, "", "alerts", "--tenant", tenant, "--json")
	require.Equal(t, 0, code, errOut)
	code, _, errOut = run(ctx, client, "", "alerts", "--tenant", tenant, "--count", "3", "--timeout", "1s")
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "2 of 3 alerts within 1s")
	code, out, errOut = run(ctx, client, "", "alerts", "--tenant", tenant, "--json")
	require.Equal(t, 0, code, errOut)
	var first map[string]any
	require.NoError(t, json.Unmarshal([]byte(strings.SplitN(out, "\n", 2)[0]), &first))
	require.Equal(t, "agentq.tool.degraded.v1", first["type"])

	code, out, errOut = run(ctx, client, "", "tool", "search", "--tenant", tenant, "coordinates of a place", "--json")
	require.Equal(t, 0, code, errOut)
	require.NotContains(t, out, `"geo_lookup"`, "a quarantined tool is not searchable")
	require.Contains(t, out, `"weather"`)

	code, out, errOut = run(ctx, client, "", "tool", "health", "--tenant", tenant)
	require.Equal(t, 0, code, errOut)
	require.Regexp(t, `geo_lookup\s+quarantined`, out)
	require.Regexp(t, `weather\s+healthy`, out)

	code, out, errOut = run(ctx, client, "", "tool", "release", "geo_lookup", "--tenant", tenant, "--reason", "geocoder back up", "--by", "ops")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "geo_lookup is on probation for tenant "+tenant)
	testenv.Eventually(t, 30*time.Second, func() bool {
		code, out, _ = run(ctx, client, "", "tool", "search", "--tenant", tenant, "coordinates of a place", "--json")
		return code == 0 && strings.Contains(out, `"geo_lookup"`)
	}, "on probation the tool is searchable again; got %s", out)

	code, _, errOut = run(ctx, client, "", "tool", "release", "weather", "--tenant", tenant)
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "not quarantined")
}
