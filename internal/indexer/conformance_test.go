package indexer_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
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
	"github.com/agentq/agentq/internal/library"
	"github.com/agentq/agentq/internal/registry"
	"github.com/agentq/agentq/internal/replay"
	"github.com/agentq/agentq/internal/testenv"
)

// The indexer passes the conformance suite every consumer passes. Its
// reference follows the decisions published in its results (which create
// took the next free version, which of two conflicting creates won), as a
// rebuild does: the workload has both, on a few ids, so two copies decide
// them in different orders. Its expected results follow the same
// decisions (see indexerResults): what they check is that every input has
// exactly one result, under its derived id, naming what the input named
// with the content hash its content gives.
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
		ExpectedResults:       indexerResults,
		ReadResult:            readIndexerResult,
		Rebuild: func(pool *pgxpool.Pool) replay.Target {
			lex := embed.Lexical{}
			return indexer.RebuildTarget(pool, indexer.Embedders{Prompts: lex, Tools: lex}, indexer.Options{}, testenv.Logger(t))
		},
	})
}

// indexerResults are the results the history calls for: one for every
// prompt.created, prompt.activated and tool.registered, of the type and
// with the decision (outcome, version, reason code) its result in the
// stream carries — the decisions the reference follows too — and the
// rest derived from the input: its id, what it names, the content hash
// of its content at the decided version (an activation's, of the version
// in the reference state).
func indexerResults(ds []*bus.Delivery) []conformance.Result {
	state := indexer.Compute("indexer", ds)
	hashOf := map[string]string{}
	for _, p := range state.Prompts {
		hashOf[fmt.Sprintf("%s@%d", p.ID, p.Version)] = p.Hash
	}
	// The decision each input's results carry: the last revision, else
	// its one result (a revision may precede a delayed original).
	decided := map[string]event.Event{}
	revised := map[string]bool{}
	for _, d := range ds {
		if d.Event.Source() != "agentq/indexer" {
			continue
		}
		var r struct {
			Revised bool `json:"revised"`
		}
		_ = json.Unmarshal(d.Event.Data(), &r)
		c := bus.Causation(d.Event)
		if r.Revised || !revised[c] {
			decided[c], revised[c] = d.Event, revised[c] || r.Revised
		}
	}
	var out []conformance.Result
	for _, d := range ds {
		typ := d.Event.Type()
		if typ != indexer.TypePromptCreated && typ != indexer.TypePromptActivated && typ != indexer.TypeToolRegistered {
			continue
		}
		id := d.Event.ID()
		r, ok := decided[id]
		if !ok {
			out = append(out, conformance.Result{Key: id, Type: "a result", Data: "none published"})
			continue
		}
		var got struct {
			Outcome    string  `json:"outcome"`
			Version    float64 `json:"version"`
			ReasonCode string  `json:"reason_code"`
		}
		_ = json.Unmarshal(r.Data(), &got)
		var in struct {
			ID, Type, Content string
			PromptID          string  `json:"prompt_id"`
			Version           float64 `json:"version"`
			Name, Description string
			Server            string          `json:"server"`
			InputSchema       json.RawMessage `json:"input_schema"`
			Tags              []string        `json:"tags"`
		}
		_ = json.Unmarshal(d.Event.Data(), &in)
		var data map[string]any
		switch {
		case r.Type() == indexer.TypeRejected:
			data = map[string]any{"reason_code": got.ReasonCode, "event_id": id, "event_type": typ}
		case typ == indexer.TypePromptCreated:
			data = map[string]any{"prompt_id": in.ID, "version": got.Version, "outcome": got.Outcome,
				"content_hash": library.Hash(in.ID, int(got.Version), in.Content, in.Type)}
		case typ == indexer.TypePromptActivated:
			data = map[string]any{"prompt_id": in.PromptID, "version": in.Version, "outcome": indexer.OutcomeUnchanged,
				"content_hash": hashOf[fmt.Sprintf("%s@%d", in.PromptID, int(in.Version))]}
		default:
			hash, err := registry.Hash(in.Name, in.Description, in.InputSchema, in.Server, in.Tags)
			if err != nil {
				hash = err.Error()
			}
			data = map[string]any{"tool_name": in.Name, "version": got.Version, "outcome": got.Outcome, "content_hash": hash}
		}
		out = append(out, conformance.Result{Key: id, ID: bus.DeriveID("indexer", d.Tenant, r.Type(), "event:"+id), Type: r.Type(), Data: data})
	}
	return out
}

// readIndexerResult renders a result as indexerResults does.
func readIndexerResult(ev event.Event) conformance.Result {
	var d map[string]any
	_ = json.Unmarshal(ev.Data(), &d)
	keep := []string{"prompt_id", "version", "outcome", "content_hash"}
	switch ev.Type() {
	case indexer.TypeRejected:
		keep = []string{"reason_code", "event_id", "event_type"}
	case indexer.TypeToolIndexed:
		keep = []string{"tool_name", "version", "outcome", "content_hash"}
	}
	data := map[string]any{}
	for _, k := range keep {
		data[k] = d[k]
	}
	revised, _ := d["revised"].(bool)
	return conformance.Result{Key: bus.Causation(ev), ID: ev.ID(), Type: ev.Type(), Revised: revised, Data: data}
}

// workload makes n valid events of every kind the indexer consumes, over
// few prompt ids and tool names so that versions, conflicts, labels and
// read-model updates collide. Prompt quality.changed names a version by
// content hash, by prompt_id + version (kept as <id>@<version>), or by both
// (the hash), as the scorer does, so replay must rebuild both kinds of row.
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
	// created are the explicit-version creates so far, whose hashes a
	// scorer would report (a losing create's too: the read model does not
	// depend on the library).
	type version struct {
		id, hash string
		v        int
	}
	var created []version
	for len(evs) < n {
		id := fmt.Sprintf("p%d", rng.IntN(12))
		tool := fmt.Sprintf("tool_%d", rng.IntN(8))
		switch k := rng.IntN(100); {
		case k < 30: // next free version; the same content with another declaration is one too
			add(indexer.TypePromptCreated, map[string]any{"id": id, "type": "task", "name": "Prompt " + id,
				"content": fmt.Sprintf("Do task %d for {{.Who}}.", rng.IntN(6)),
				"parameters": []map[string]any{{"name": "Who", "type": "string", "required": true,
					"description": []string{"who asks", "the caller"}[rng.IntN(2)]}}, "tags": []string{"t"}})
		case k < 45: // explicit versions: repeats and conflicts, of content or of parameters
			v, content := 1+rng.IntN(3), fmt.Sprintf("System text %d.", rng.IntN(2))
			created = append(created, version{id, library.Hash(id, v, content, "system"), v})
			add(indexer.TypePromptCreated, map[string]any{"id": id, "version": v, "type": "system",
				"name": "Prompt " + id, "content": content, "metadata": map[string]any{"k": rng.IntN(3)},
				"parameters": []map[string]any{{"name": "Lang", "type": "string", "default": []string{"en", "fr"}[rng.IntN(2)]}}})
		case k < 55:
			add(indexer.TypePromptActivated, map[string]any{"prompt_id": id, "version": 1 + rng.IntN(4),
				"label": []string{"production", "staging"}[rng.IntN(2)]})
		case k < 70:
			add(indexer.TypeToolRegistered, map[string]any{"name": tool, "description": fmt.Sprintf("Tool %s, variant %d", tool, rng.IntN(3)),
				"server": "mcp", "input_schema": map[string]any{"type": "object"}})
		case k < 80:
			stateVersion[tool] += 1 + rng.IntN(2)
			v := stateVersion[tool]
			add(indexer.TypeQualityChanged, map[string]any{"target": "tool", "tool_name": tool, "state_version": v,
				"quality_score": rng.Float64(), "success_rate": rng.Float64(), "total_calls": v, "successes": v / 2})
		case k < 90: // prompt quality: by hash, by id@version, by both
			data := map[string]any{"target": "prompt", "quality_score": rng.Float64(), "success_rate": rng.Float64()}
			var ref string
			switch form := rng.IntN(3); {
			case form == 0 || len(created) == 0:
				v := 1 + rng.IntN(4)
				data["prompt_id"], data["version"] = id, v
				ref = fmt.Sprintf("%s@%d", id, v)
			default:
				c := created[rng.IntN(len(created))]
				data["prompt_hash"], ref = c.hash, c.hash
				if form == 2 {
					data["prompt_id"], data["version"] = c.id, c.v
				}
			}
			// Per ref, as the scorer keys it; successes is sometimes
			// left out (the indexer derives it from the rate).
			stateVersion["prompt\x00"+ref] += 1 + rng.IntN(2)
			v := stateVersion["prompt\x00"+ref]
			data["state_version"], data["total_calls"] = v, v
			if rng.IntN(2) == 0 {
				data["successes"] = v / 2
			}
			add(indexer.TypeQualityChanged, data)
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

// The workloads the suite runs put prompt quality rows of both kinds (by
// hash and by id@version) in the state replay must rebuild, and hold
// events naming a version by hash and id + version at once. Checked
// without a database, on the reference.
func TestConformanceWorkloadHasPromptQuality(t *testing.T) {
	for _, w := range []struct {
		n    int
		seed uint64
	}{{200, 1}, {800, 2}, {1500, 4}, {3000, 5}} {
		evs := workload(t, "conf", w.n, w.seed)
		ds := make([]*bus.Delivery, len(evs))
		both := 0
		for i, ev := range evs {
			ds[i] = &bus.Delivery{Event: ev, Tenant: "conf", StreamSeq: uint64(i + 1), Time: ev.Time()}
			var d map[string]any
			require.NoError(t, ev.DataAs(&d))
			if d["prompt_hash"] != nil && d["prompt_id"] != nil {
				both++
			}
		}
		kinds := map[string]int{}
		for _, q := range indexer.Compute("indexer", ds).Quality {
			switch {
			case q.Target == "tool":
				kinds["tool"]++
			case strings.Contains(q.Ref, "@"):
				kinds["prompt id@version"]++
			default:
				kinds["prompt hash"]++
			}
		}
		for _, k := range []string{"tool", "prompt id@version", "prompt hash"} {
			require.Positive(t, kinds[k], "workload %d/%d: no %s quality rows", w.n, w.seed, k)
		}
		require.Positive(t, both, "workload %d/%d: no quality.changed with both hash and id + version", w.n, w.seed)
	}
}
