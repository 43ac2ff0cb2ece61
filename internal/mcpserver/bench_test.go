package mcpserver_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	"github.com/agentq/agentq/internal/mcpserver"
	"github.com/agentq/agentq/internal/service"
	"github.com/agentq/agentq/internal/testenv"
)

// BenchmarkPromptSearch measures what the MCP server adds to a prompt
// search: prompt_search through the SDK's client over the in-memory
// transport against the bare NATS request it stands for (the anchor), on
// the same running indexer, the same 100 prompts and the same queries, in
// the same run. Each round times 100 calls of each, in alternating order;
// the figures are medians over the rounds of each round's median call, and
// of the process's CPU time per call (the indexer, NATS and both ends of
// the MCP session run in the process; Postgres does not), which a shared
// machine disturbs less than wall time.
//
//	AGENTQ_DATABASE_URL=... go test -run '^$' -bench BenchmarkPromptSearch -benchtime 1x ./internal/mcpserver/
func BenchmarkPromptSearch(b *testing.B) {
	st := newStack(b)
	tenant := testenv.Tenant(b)
	cs := st.client(b, mcpserver.Options{Tenant: tenant})
	ctx := context.Background()
	topics := []string{"refund", "invoice", "password reset", "shipping delay", "sql error", "router", "summary", "translation", "escalation", "greeting"}
	for i := range 100 {
		topic := topics[i%len(topics)]
		_, errText := callTool(b, cs, "prompt_create", map[string]any{"id": fmt.Sprintf("p%03d-%s", i, tenant), "type": "task", "name": "Handle " + topic,
			"description": fmt.Sprintf("Answers a customer's question about a %s, variant %d", topic, i),
			"content":     fmt.Sprintf("You are a support agent. The customer writes about a %s. Answer {{.Customer}} politely, variant %d.", topic, i),
			"parameters":  []any{map[string]any{"name": "Customer", "default": "them"}}})
		require.Empty(b, errText)
	}
	queries := make([]map[string]any, len(topics))
	for i, topic := range topics {
		queries[i] = map[string]any{"query": "help a customer with a " + topic}
	}
	subject := "search.prompts." + tenant
	bare := func(q map[string]any) {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		var reply map[string]any
		if err := service.Call(cctx, st.n.NC, subject, q, &reply); err != nil {
			b.Fatal(err)
		}
	}
	viaMCP := func(q map[string]any) {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "prompt_search", Arguments: q})
		if err != nil || res.IsError {
			b.Fatalf("%v %v", err, res)
		}
	}
	// Warm both paths: prepared statements, caches, the SDK's schemas.
	for _, q := range queries {
		bare(q)
		viaMCP(q)
	}
	const rounds, calls = 15, 100
	// timeCalls returns the median call's wall time and the process's CPU
	// time per call.
	timeCalls := func(f func(map[string]any)) (wall, cpu time.Duration) {
		d := make([]time.Duration, calls)
		cpu0 := processCPU()
		for i := range calls {
			start := time.Now()
			f(queries[i%len(queries)])
			d[i] = time.Since(start)
		}
		return median(d), (processCPU() - cpu0) / calls
	}
	var natsWall, mcpWall, addedWall, natsCPU, mcpCPU, addedCPU []time.Duration
	for b.Loop() {
		for r := range rounds {
			var nw, nc, mw, mc time.Duration
			if r%2 == 0 {
				nw, nc = timeCalls(bare)
				mw, mc = timeCalls(viaMCP)
			} else {
				mw, mc = timeCalls(viaMCP)
				nw, nc = timeCalls(bare)
			}
			natsWall, mcpWall, addedWall = append(natsWall, nw), append(mcpWall, mw), append(addedWall, mw-nw)
			natsCPU, mcpCPU, addedCPU = append(natsCPU, nc), append(mcpCPU, mc), append(addedCPU, mc-nc)
		}
	}
	us := func(d []time.Duration) float64 { return float64(median(d)) / float64(time.Microsecond) }
	b.ReportMetric(us(natsWall), "nats-µs")
	b.ReportMetric(us(mcpWall), "mcp-µs")
	b.ReportMetric(us(addedWall), "added-µs")
	b.ReportMetric(float64(median(mcpWall))/float64(median(natsWall)), "mcp/nats")
	b.ReportMetric(us(natsCPU), "nats-cpu-µs")
	b.ReportMetric(us(mcpCPU), "mcp-cpu-µs")
	b.ReportMetric(us(addedCPU), "added-cpu-µs")
	b.Logf("per round, median call: nats %v; mcp %v", natsWall, mcpWall)
	b.Logf("per round, CPU per call: nats %v; mcp %v", natsCPU, mcpCPU)
}

func median(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}
