package health_test

import (
	"context"
	"encoding/json"
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
	"github.com/agentq/agentq/internal/health"
	"github.com/agentq/agentq/internal/outbox"
	"github.com/agentq/agentq/internal/replay"
	"github.com/agentq/agentq/internal/testenv"
)

// longParams: no deadline falls due during a scenario, which checks that
// nothing changes while nothing is sent. shortParams: the timers
// scenario's, whose deadlines fall due within seconds, with no traffic.
func longParams() health.Params {
	p := health.DefaultParams()
	p.QuarantineBase, p.QuarantineMax, p.Probation = time.Hour, 2*time.Hour, time.Hour
	return p
}

func shortParams() health.Params {
	p := health.DefaultParams()
	p.QuarantineBase, p.QuarantineMax, p.Probation = 2*time.Second, 8*time.Second, 2*time.Second
	return p
}

// timed: a tool quarantined, its quarantine and probation falling due
// with no traffic, then a relapse, in steps apart in time.
func timed(t *testing.T, tenant string, seed uint64) []conformance.Step {
	calls := func(tool string, ok bool, n int) []event.Event {
		var evs []event.Event
		for range n {
			ev, err := bus.NewEvent(health.TypeToolExecuted, tenant, "conformance", map[string]any{"tool_name": tool, "success": ok})
			require.NoError(t, err)
			evs = append(evs, ev)
		}
		return evs
	}
	reg := func(names ...string) []event.Event {
		var evs []event.Event
		for _, n := range names {
			ev, err := bus.NewEvent(health.TypeToolRegistered, tenant, "conformance", map[string]any{"name": n, "description": "a tool"})
			require.NoError(t, err)
			evs = append(evs, ev)
		}
		return evs
	}
	return []conformance.Step{
		{Events: append(reg("a", "b", "c"), calls("flaky", true, 30)...)},
		{After: 200 * time.Millisecond, Events: calls("flaky", false, 12)},
		{After: 5 * time.Second, Events: calls("a", true, 3)}, // quarantine and probation fell due meanwhile
		{After: time.Second, Events: calls("flaky", false, 12)},
		{After: 3 * time.Second, Events: calls("b", true, 3)},
		{After: 12 * time.Second, Events: calls("flaky", true, 5)},
	}
}

// workload: calls and ratings of a few tools, some of which break for a
// while, registrations and operator releases, deterministic in seed.
func workload(t *testing.T, tenant string, n int, seed uint64) []event.Event {
	rng := rand.New(rand.NewPCG(seed, 7))
	tools := []string{"search", "fetch", "sql", "mail", "calc"}
	fail := map[string]float64{"search": 0.02, "fetch": 0.1, "sql": 0.05, "mail": 0.02, "calc": 0.2}
	var evs []event.Event
	add := func(typ string, data map[string]any) {
		ev, err := bus.NewEvent(typ, tenant, "conformance", data)
		require.NoError(t, err)
		evs = append(evs, ev)
	}
	for i := 0; len(evs) < n; i++ {
		tool := tools[rng.IntN(len(tools))]
		p := fail[tool]
		// Tools break in bursts: sql from a third of the way, mail for a while later.
		if tool == "sql" && i > n/3 {
			p = 0.9
		}
		if tool == "mail" && i > n/2 && i < 3*n/4 {
			p = 1
		}
		switch r := rng.IntN(100); {
		case r < 70:
			add(health.TypeToolExecuted, map[string]any{"tool_name": tool, "success": rng.Float64() >= p})
		case r < 90:
			rating := 0.6 + 0.4*rng.Float64()
			if rng.Float64() < p {
				rating = 0.3 * rng.Float64()
			}
			add(health.TypeToolRated, map[string]any{"tool_name": tool, "rating": rating, "rater_kind": "rules", "rater": "rules:v1"})
		case r < 97:
			add(health.TypeToolRegistered, map[string]any{"name": fmt.Sprintf("extra-%d", rng.IntN(20)), "description": "a tool"})
		default:
			add(health.TypeToolReleased, map[string]any{"tool_name": tool, "released_by": "ops"})
		}
	}
	return evs[:n]
}

// state is every tool of tenant as the degrader decided it, once its fold
// has caught up with what it stored: the inbox (what the suite counts as
// applied) fills when events are stored, and decisions follow when the ack
// floor has passed them.
func state(t *testing.T, pool *pgxpool.Pool, tenant string) any {
	testenv.Eventually(t, time.Minute, func() bool {
		var behind bool
		err := pool.QueryRow(context.Background(), `SELECT coalesce(bool_or(stored_through > evaluated_through OR refold_from IS NOT NULL), false) FROM health_tenants WHERE tenant_id = $1`, tenant).Scan(&behind)
		return err == nil && !behind
	}, "the degrader's fold of %s caught up", tenant)
	rows, err := pool.Query(context.Background(), `SELECT detail FROM health_tools WHERE tenant_id = $1`, tenant)
	require.NoError(t, err)
	defer rows.Close()
	out := map[string]health.Tool{}
	for rows.Next() {
		var raw []byte
		require.NoError(t, rows.Scan(&raw))
		var tool health.Tool
		require.NoError(t, json.Unmarshal(raw, &tool))
		out[tool.Name] = tool
	}
	require.NoError(t, rows.Err())
	return out
}

// The degrader passes the conformance suite every consumer passes.
func TestDegraderConformance(t *testing.T) {
	if testing.Short() {
		t.Skip("conformance suite: slow")
	}
	a := adapter(t, longParams())
	timers := adapter(t, shortParams())
	timers.Timed = timed
	// Timers are facts the degrader adds to the stream as deadlines fall
	// due: the reference re-reads the history until it settles.
	timers.ReferenceReadsResults = true
	a.Timers = &timers
	conformance.Run(t, a)
}

// adapter is the degrader with parameters p, for the suite.
func adapter(t *testing.T, p health.Params) conformance.Adapter {
	return conformance.Adapter{
		Consumer:       "degrader",
		Subjects:       health.Subjects,
		ResultSubjects: health.ResultSubjects,
		Start: func(t *testing.T, cfg config.Config) conformance.Copy {
			cfg.Degrade.QuarantineBase, cfg.Degrade.QuarantineMax, cfg.Degrade.Probation = p.QuarantineBase, p.QuarantineMax, p.Probation
			cfg.Degrade.TimerEvery = 200 * time.Millisecond
			cfg.Degrade.Poll = 50 * time.Millisecond
			return testenv.StartProcess(t, cfg, "degrader", health.Consumer)
		},
		Workload: workload,
		State:    state,
		Reference: func(ds []*bus.Delivery) any {
			byTenant, _ := health.Fold(ds, p)
			out := map[string]health.Tool{}
			for _, tools := range byTenant {
				for name, tool := range tools {
					// As stored: through JSON, times in UTC.
					raw, err := json.Marshal(tool)
					require.NoError(t, err)
					var back health.Tool
					require.NoError(t, json.Unmarshal(raw, &back))
					out[name] = back
				}
			}
			return out
		},
		ExpectedResults: func(ds []*bus.Delivery) []conformance.Result {
			var out []conformance.Result
			for _, r := range health.Expected(ds, p, "degrader") {
				out = append(out, conformance.Result{Key: r.Key, ID: r.ID, Type: r.Type, Data: r.Data})
			}
			return out
		},
		ReadResult: func(ev event.Event) conformance.Result {
			var d map[string]any
			_ = json.Unmarshal(ev.Data(), &d)
			key := fmt.Sprintf("%v@%v", d["tool_name"], d["version"])
			if ev.Type() == health.TypeRejected {
				key = "rejected:" + bus.Causation(ev)
			}
			return conformance.Result{Key: key, ID: ev.ID(), Type: ev.Type(), Data: d}
		},
		Rebuild: func(pool *pgxpool.Pool) replay.Target {
			return health.RebuildTarget(pool, outbox.New(pool, nil, testenv.Logger(t)), health.Options{Params: p}, testenv.Logger(t))
		},
	}
}
