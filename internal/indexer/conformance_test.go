package indexer_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/agentq/agentq/internal/bus"
	"github.com/agentq/agentq/internal/config"
	"github.com/agentq/agentq/internal/conformance"
	"github.com/agentq/agentq/internal/embed"
	"github.com/agentq/agentq/internal/indexer"
	"github.com/agentq/agentq/internal/replay"
	"github.com/agentq/agentq/internal/testenv"
)

// The indexer passes the conformance suite every consumer passes. Its
// reference follows the decisions published in its results (which create
// took the next free version, which of two conflicting creates won), as a
// rebuild does: the workload has both, on a few ids, so two copies decide
// them in different orders.
func TestIndexerConformance(t *testing.T) {
	if testing.Short() {
		t.Skip("conformance suite: slow")
	}
	conformance.Run(t, conformance.Adapter{
		Consumer:       "indexer",
		Subjects:       indexer.Subjects,
		ResultSubjects: indexer.ResultSubjects,
		Start: func(t *testing.T, cfg config.Config) conformance.Copy {
			return testenv.StartProcess(t, cfg, "indexer", indexer.Consumer)
		},
		Workload: workload,
		State: func(t *testing.T, pool *pgxpool.Pool, tenant string) any {
			s, err := indexer.ReadState(context.Background(), pool, tenant)
			require.NoError(t, err)
			return s
		},
		Reference:             func(ds []*bus.Delivery) any { return indexer.Compute("indexer", ds) },
		ReferenceReadsResults: true,
		Rebuild: func(pool *pgxpool.Pool) replay.Target {
			lex := embed.Lexical{}
			return indexer.RebuildTarget(pool, indexer.Embedders{Prompts: lex, Tools: lex}, indexer.Options{}, testenv.Logger(t))
		},
	})
}

// workload makes n valid events of every kind the indexer consumes, over
// few prompt ids and tool names so that versions, conflicts, labels and
// read-model updates collide.
func workload(t *testing.T, tenant string, n int, seed uint64) []event.Event {
	rng := rand.New(rand.NewPCG(seed, 42))
	base := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	evs := make([]event.Event, 0, n)
	add := func(typ string, data map[string]any) {
		ev, err := bus.NewEvent(typ, tenant, "conformance", data)
		require.NoError(t, err)
		ev.SetID(fmt.Sprintf("ix-%d-%d", seed, len(evs)))
		ev.SetTime(base.Add(time.Duration(len(evs)) * time.Second))
		evs = append(evs, ev)
	}
	stateVersion := map[string]int{}
	for len(evs) < n {
		id := fmt.Sprintf("p%d", rng.IntN(12))
		tool := fmt.Sprintf("tool_%d", rng.IntN(8))
		switch k := rng.IntN(100); {
		case k < 30: // next free version
			add(indexer.TypePromptCreated, map[string]any{"id": id, "type": "task", "name": "Prompt " + id,
				"content":    fmt.Sprintf("Do task %d for {{.Who}}.", rng.IntN(6)),
				"parameters": []map[string]any{{"name": "Who", "type": "string", "required": true}}, "tags": []string{"t"}})
		case k < 45: // explicit versions: repeats and conflicts
			add(indexer.TypePromptCreated, map[string]any{"id": id, "version": 1 + rng.IntN(3), "type": "system",
				"name": "Prompt " + id, "content": fmt.Sprintf("System text %d.", rng.IntN(2)), "metadata": map[string]any{"k": rng.IntN(3)}})
		case k < 55:
			add(indexer.TypePromptActivated, map[string]any{"prompt_id": id, "version": 1 + rng.IntN(4),
				"label": []string{"production", "staging"}[rng.IntN(2)]})
		case k < 70:
			add(indexer.TypeToolRegistered, map[string]any{"name": tool, "description": fmt.Sprintf("Tool %s, variant %d", tool, rng.IntN(3)),
				"server": "mcp", "input_schema": map[string]any{"type": "object"}})
		case k < 90:
			stateVersion[tool] += 1 + rng.IntN(2)
			v := stateVersion[tool]
			add(indexer.TypeQualityChanged, map[string]any{"target": "tool", "tool_name": tool, "state_version": v,
				"quality_score": rng.Float64(), "success_rate": rng.Float64(), "total_calls": v, "successes": v / 2})
		default:
			typ := []string{indexer.TypeToolDegraded, indexer.TypeToolQuarantined, indexer.TypeToolRecovered}[rng.IntN(3)]
			state := map[string]string{indexer.TypeToolDegraded: "degraded", indexer.TypeToolQuarantined: "quarantined", indexer.TypeToolRecovered: "healthy"}[typ]
			data := map[string]any{"tool_name": tool, "state": state, "quality_score": 0.2, "threshold": 0.5}
			if state == "quarantined" {
				data["quarantine"] = map[string]any{"expires_at": base.Add(48 * time.Hour).Format(time.RFC3339), "offence": 1, "reason": "quality below threshold"}
			}
			add(typ, data)
		}
	}
	return evs
}
