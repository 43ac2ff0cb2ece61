package quality_test

import (
	"context"
	"testing"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/agentq/agentq/internal/bus"
	"github.com/agentq/agentq/internal/config"
	"github.com/agentq/agentq/internal/conformance"
	"github.com/agentq/agentq/internal/quality"
	"github.com/agentq/agentq/internal/replay"
	"github.com/agentq/agentq/internal/testenv"
)

// The scorer passes the conformance suite every consumer passes.
func TestScorerConformance(t *testing.T) {
	if testing.Short() {
		t.Skip("conformance suite: slow")
	}
	conformance.Run(t, conformance.Adapter{
		Consumer:       "scorer",
		Subjects:       quality.Subjects,
		ResultSubjects: []string{"quality.changed.*"},
		Start: func(t *testing.T, cfg config.Config) conformance.Copy {
			return testenv.StartProcess(t, cfg, "scorer", quality.Consumer)
		},
		Workload: func(t *testing.T, tenant string, n int, seed uint64) []event.Event {
			return newWorkload(t, tenant, n, seed).events
		},
		State: func(t *testing.T, pool *pgxpool.Pool, tenant string) any {
			ms, err := quality.List(context.Background(), pool, tenant, "", "")
			require.NoError(t, err)
			return ms
		},
		Reference: func(ds []*bus.Delivery) any { return quality.Compute(ds) },
		Rebuild: func(pool *pgxpool.Pool) replay.Target {
			return quality.RebuildTarget(pool, quality.Options{}, testenv.Logger(t))
		},
	})
}
