package quality_test

import (
	"context"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/agentq/agentq/internal/config"
	"github.com/agentq/agentq/internal/conformance"
	"github.com/agentq/agentq/internal/quality"
	"github.com/agentq/agentq/internal/replay"
	"github.com/agentq/agentq/internal/testenv"
)

// The scorer passes the conformance suite every consumer passes. Its
// reference state and results are computed in reference_test.go from the
// README's definitions, not with the scorer's own fold.
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
		Reference:       scorerState,
		ExpectedResults: scorerResults,
		ReadResult:      readScorerResult,
		StateResults:    true,
		// The scorer has no timers; its timed workload runs the scenario
		// (late processing, a rebuild after it) until a consumer with
		// timers does.
		Timed: func(t *testing.T, tenant string, seed uint64) []conformance.Step {
			evs := newWorkload(t, tenant, 60, seed).events
			var steps []conformance.Step
			for i := 0; i < len(evs); i += 10 {
				steps = append(steps, conformance.Step{After: 300 * time.Millisecond, Events: evs[i : i+10]})
			}
			return steps
		},
		Rebuild: func(pool *pgxpool.Pool) replay.Target {
			return quality.RebuildTarget(pool, quality.Options{}, testenv.Logger(t))
		},
	})
}
