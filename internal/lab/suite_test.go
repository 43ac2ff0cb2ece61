package lab_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"sort"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/agentq/agentq/internal/bus"
	"github.com/agentq/agentq/internal/config"
	"github.com/agentq/agentq/internal/conformance"
	"github.com/agentq/agentq/internal/job"
	"github.com/agentq/agentq/internal/lab"
	"github.com/agentq/agentq/internal/provider"
	"github.com/agentq/agentq/internal/provider/providertest"
	"github.com/agentq/agentq/internal/replay"
	"github.com/agentq/agentq/internal/testenv"
)

var (
	typeCreated = bus.Type("prompt", "created")
	typeIndexed = bus.Type("prompt", "indexed")
)

// TestLabConformance runs the suite every consumer passes against the lab.
// Its workload is what the lab consumes: prompt versions (prompt.created
// and the indexer's prompt.indexed, labels moving; creates revised to
// another version or to indexer.rejected, creates answered unchanged), requests naming
// versions indexed before them (with explicit baselines: the decision
// depends only on what is known), requests over a limit or invalid, and
// cancellations of unknown experiments. Accepted experiments are small
// (two versions, one or two queries, every tier off) and run against a
// model server of each copy's own.
//
// The state is the read model (versions with content and tools, labels by
// stream order, each cause's newest result superseding its earlier ones)
// and the experiments; the reference computes the read model
// from the history and follows the lab's decisions on requests (accepted
// or not: a version still on its way through another copy's batch may
// defer, then refuse, a request), as the indexer's follows its own. The
// expected results: for a request, experiment.started with what the input
// says (id, prompt, candidates, trials planned) — or lab.rejected with the
// code the input calls for, over_limit or invalid_request, and only
// unknown_prompt or unknown_version for a valid one — and then
// experiment.completed with every trial done; for an unknown experiment's
// cancellation, lab.rejected unknown_experiment.
func TestLabConformance(t *testing.T) {
	if testing.Short() {
		t.Skip("conformance suite: slow")
	}
	conformance.Run(t, conformance.Adapter{
		Consumer:       "lab",
		Subjects:       lab.Subjects,
		ResultSubjects: lab.ResultSubjects,
		Start: func(t *testing.T, cfg config.Config) conformance.Copy {
			model := providertest.New(t)
			cfg.LLM.BaseURL, cfg.LLM.Model = model.URL, "m"
			return testenv.StartProcess(t, cfg, "lab", lab.NewConsumer(lab.Options{
				PromptWait: 3 * time.Second,
				Job: job.Options{
					Lease: 2 * time.Second, Heartbeat: 200 * time.Millisecond, Poll: 100 * time.Millisecond,
					Backoff: []time.Duration{100 * time.Millisecond},
				},
			}))
		},
		Workload:              labWorkload,
		State:                 labState,
		Reference:             labReference,
		ReferenceReadsResults: true,
		ExpectedResults:       labResults,
		ReadResult:            readLabResult,
		Rebuild: func(pool *pgxpool.Pool) replay.Target {
			// Never called: a rebuild decides requests, it runs none.
			llm, err := provider.NewChat(provider.Options{BaseURL: "http://127.0.0.1:9/v1", Model: "m"})
			require.NoError(t, err)
			target, err := lab.RebuildTarget(pool, lab.Options{LLM: llm, Model: "m"}, testenv.Logger(t))
			require.NoError(t, err)
			return target
		},
	})
}

// labWorkload makes n events for tenant, deterministic in seed.
func labWorkload(t *testing.T, tenant string, n int, seed uint64) []event.Event {
	rng := rand.New(rand.NewPCG(seed, 27))
	var evs []event.Event
	add := func(ev event.Event) event.Event {
		ev.SetID(fmt.Sprintf("lab-%d-%d", seed, len(evs)))
		evs = append(evs, ev)
		return ev
	}
	newEvent := func(typ string, data any) event.Event {
		ev, err := bus.NewEvent(typ, tenant, "conformance", data)
		require.NoError(t, err)
		return ev
	}
	indexed := func(cause event.Event, data map[string]any) {
		ev, err := bus.NewResult("indexer", typeIndexed, cause, data)
		require.NoError(t, err)
		add(ev)
	}
	request := func(data map[string]any) {
		data["experiment_id"] = fmt.Sprintf("x-%d-%d", seed, len(evs))
		data["evaluation"] = map[string]any{"structural": false, "rules": false, "llm_judge": false, "summary": false}
		add(newEvent(lab.TypeRequested, data))
	}
	queries := func(k int) []any {
		out := make([]any, k)
		for i := range out {
			out[i] = map[string]any{"query": fmt.Sprintf("question %d", i)}
		}
		return out
	}
	latest := map[string]int{}             // prompt -> its latest version indexed so far
	lastCreate := map[string]event.Event{} // prompt -> the create its latest version is, if one of the workload's
	labels := []string{"production", "staging"}
	content := func(p string, v int) string {
		return fmt.Sprintf("Version %d of %s: answer in %d sentences.", v, p, 1+rng.IntN(3))
	}
	create := func(p string, v int, text string) event.Event {
		data := map[string]any{"id": p, "type": "system", "name": "Prompt " + p, "version": v, "content": text}
		if rng.IntN(5) == 0 {
			data["metadata"] = map[string]any{"tools": []any{toolDef(fmt.Sprintf("tool_%d", rng.IntN(3)))}}
		}
		return add(newEvent(typeCreated, data))
	}
	for len(evs) < n {
		p := fmt.Sprintf("p%d", rng.IntN(4))
		switch k := rng.IntN(100); {
		case k < 52 && len(evs)+2 <= n: // a new version
			v := latest[p] + 1
			created := create(p, v, content(p, v))
			ix := map[string]any{"prompt_id": p, "version": v, "content_hash": fmt.Sprintf("h-%s-%d", p, v), "outcome": "created"}
			if rng.IntN(4) == 0 {
				ix["labels"] = []string{labels[rng.IntN(2)]}
			}
			indexed(created, ix)
			latest[p], lastCreate[p] = v, created
		case k < 54 && lastCreate[p].ID() != "" && len(evs)+3 <= n: // a create arrives late and takes the latest version: it moves up
			v := latest[p]
			late := create(p, v, content(p, v))
			indexed(late, map[string]any{"prompt_id": p, "version": v, "content_hash": fmt.Sprintf("h-%s-%d-late", p, v), "outcome": "created"})
			indexed(lastCreate[p], map[string]any{"prompt_id": p, "version": v + 1, "content_hash": fmt.Sprintf("h-%s-%d", p, v+1),
				"outcome": "created", "revised": true})
			latest[p] = v + 1
		case k < 55 && lastCreate[p].ID() != "": // the latest version's create is rejected after all
			cause := lastCreate[p]
			ev, err := bus.NewResult("indexer", bus.Type("indexer", "rejected"), cause, map[string]any{"reason_code": "version_conflict",
				"reason": "the version is taken", "event_type": typeCreated, "event_id": cause.ID(), "revised": true})
			require.NoError(t, err)
			add(ev)
			latest[p], lastCreate[p] = latest[p]-1, event.Event{}
		case k < 57 && latest[p] > 0 && len(evs)+2 <= n: // the same content again: unchanged
			v := latest[p]
			again := create(p, v, "unchanged content") // the version's content is not this create's
			indexed(again, map[string]any{"prompt_id": p, "version": v, "content_hash": fmt.Sprintf("h-%s-%d", p, v), "outcome": "unchanged"})
		case k < 70 && latest[p] > 0: // a label moves, as an activation's result says
			cause := event.New()
			cause.SetID(fmt.Sprintf("act-%d-%d", seed, len(evs)))
			cause.SetExtension(bus.ExtTenant, tenant)
			indexed(cause, map[string]any{"prompt_id": p, "version": 1 + rng.IntN(latest[p]), "content_hash": "h",
				"outcome": "unchanged", "labels": []string{labels[rng.IntN(2)]}})
		case k < 76 && latest[p] >= 2: // an experiment of two versions known
			base := 1 + rng.IntN(latest[p])
			cand := 1 + rng.IntN(latest[p]-1)
			if cand >= base {
				cand++
			}
			request(map[string]any{"prompt_id": p, "baseline_version": base, "candidate_versions": []int{cand}, "test_queries": queries(1 + rng.IntN(2))})
		case k < 79: // over a limit
			request(map[string]any{"prompt_id": p, "test_queries": queries(1), "repetitions": 9})
		case k < 81: // a candidate twice
			request(map[string]any{"prompt_id": p, "candidate_versions": []int{1, 1}, "test_queries": queries(1)})
		case k < 83: // no such experiment
			add(newEvent(lab.TypeCancelled, map[string]any{"experiment_id": fmt.Sprintf("nope-%d-%d", seed, len(evs)), "reason": "test"}))
		}
	}
	return evs
}

// labVersion is a version in the lab's read model.
type labVersion struct {
	Prompt  string
	Version int
	Content string
	Tools   string // JSON, "" when none
}

// labLabel is where a label is.
type labLabel struct {
	Prompt, Label string
	Version       int
}

// labExperiment is an accepted experiment; Status is "pending" until it
// ends, and Done (trials stored) is counted once it has.
type labExperiment struct {
	ID, Request, Prompt string
	Baseline            int
	Candidates          []int
	Total               int
	Status              string
	Done                int
}

// labStateOf is the lab's whole state of a tenant.
type labStateOf struct {
	Versions    []labVersion
	Labels      []labLabel
	Experiments []labExperiment
}

func labState(t *testing.T, pool *pgxpool.Pool, tenant string) any {
	ctx := context.Background()
	s := labStateOf{Versions: []labVersion{}, Labels: []labLabel{}, Experiments: []labExperiment{}}
	rows, err := pool.Query(ctx, `
		SELECT DISTINCT ON (v.prompt_id, v.version) v.prompt_id, v.version, s.content, coalesce(s.tools::text, '')
		FROM lab_prompt_versions v
		JOIN lab_prompt_sources s ON s.tenant_id = v.tenant_id AND s.event_id = v.source_event_id AND s.prompt_id = v.prompt_id
		WHERE v.tenant_id = $1 ORDER BY v.prompt_id, v.version, NOT v.created, s.event_id`, tenant)
	require.NoError(t, err)
	s.Versions, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (labVersion, error) {
		var v labVersion
		err := r.Scan(&v.Prompt, &v.Version, &v.Content, &v.Tools)
		v.Tools = compactJSON(v.Tools)
		return v, err
	})
	require.NoError(t, err)
	rows, err = pool.Query(ctx, `
		SELECT DISTINCT ON (prompt_id, label) prompt_id, label, version FROM lab_prompt_label_sets l
		WHERE tenant_id = $1 AND NOT EXISTS (
			SELECT 1 FROM lab_prompt_results r JOIN lab_prompt_results n
			  ON n.tenant_id = r.tenant_id AND n.cause_id = r.cause_id AND (n.stream_seq, n.event_id) > (r.stream_seq, r.event_id)
			WHERE r.tenant_id = l.tenant_id AND r.event_id = l.event_id)
		ORDER BY prompt_id, label, stream_seq DESC, event_id DESC`, tenant)
	require.NoError(t, err)
	s.Labels, err = pgx.CollectRows(rows, pgx.RowToStructByPos[labLabel])
	require.NoError(t, err)
	rows, err = pool.Query(ctx, `
		SELECT e.experiment_id, e.request_event_id, e.prompt_id, e.baseline_version, e.candidate_versions, e.total_trials,
		       CASE WHEN e.status IN ('queued', 'running') THEN 'pending' ELSE e.status END,
		       CASE WHEN e.status IN ('queued', 'running') THEN 0 ELSE
		         (SELECT count(*) FROM job_steps j WHERE j.tenant_id = e.tenant_id AND j.consumer = 'lab' AND j.job_id = e.experiment_id AND j.step LIKE 'trial/%') END
		FROM lab_experiments e WHERE e.tenant_id = $1 ORDER BY e.experiment_id`, tenant)
	require.NoError(t, err)
	s.Experiments, err = pgx.CollectRows(rows, pgx.RowToStructByPos[labExperiment])
	require.NoError(t, err)
	return s
}

func compactJSON(s string) string {
	if s == "" {
		return ""
	}
	var v any
	if json.Unmarshal([]byte(s), &v) != nil {
		return s
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// labReference is the state the history calls for: the read model from
// the prompt events in stream order, the experiments the lab's results
// record.
func labReference(ds []*bus.Delivery) any {
	type source struct{ prompt, content, tools string }
	sources := map[string]source{}
	type key struct {
		prompt  string
		version int
	}
	// The newest result of each cause (stream order: the last) is what its
	// event did; an earlier one is superseded, its labels with it.
	type result struct {
		key     key
		created bool
		labels  []string
		ok      bool // indexed, not rejected
	}
	newest := map[string]result{}
	var results []result
	var causes []string
	exps := map[string]*labExperiment{}
	for _, d := range ds {
		switch d.Event.Type() {
		case typeCreated:
			var c struct {
				ID, Content string
				Metadata    struct {
					Tools json.RawMessage `json:"tools"`
				} `json:"metadata"`
			}
			_ = json.Unmarshal(d.Event.Data(), &c)
			sources[d.Event.ID()] = source{c.ID, c.Content, compactJSON(string(c.Metadata.Tools))}
		case typeIndexed:
			var ix struct {
				PromptID string   `json:"prompt_id"`
				Version  int      `json:"version"`
				Labels   []string `json:"labels"`
				Outcome  string   `json:"outcome"`
			}
			_ = json.Unmarshal(d.Event.Data(), &ix)
			r := result{key: key{ix.PromptID, ix.Version}, created: ix.Outcome != "unchanged", labels: ix.Labels, ok: true}
			newest[bus.Causation(d.Event)] = r
			results, causes = append(results, r), append(causes, bus.Causation(d.Event))
		case bus.Type("indexer", "rejected"):
			newest[bus.Causation(d.Event)] = result{}
			results, causes = append(results, result{}), append(causes, bus.Causation(d.Event))
		case lab.TypeStarted:
			var st struct {
				ID         string `json:"experiment_id"`
				Prompt     string `json:"prompt_id"`
				Baseline   int    `json:"baseline_version"`
				Candidates []int  `json:"candidate_versions"`
				Total      int    `json:"total_trials"`
			}
			_ = json.Unmarshal(d.Event.Data(), &st)
			exps[st.ID] = &labExperiment{ID: st.ID, Request: bus.Causation(d.Event), Prompt: st.Prompt, Baseline: st.Baseline,
				Candidates: st.Candidates, Total: st.Total, Status: "pending"}
		}
	}
	for _, d := range ds { // endings, whatever their order against the starts
		var end struct {
			ID         string `json:"experiment_id"`
			Done       int    `json:"completed_trials"`
			ReasonCode string `json:"reason_code"`
		}
		_ = json.Unmarshal(d.Event.Data(), &end)
		x, ok := exps[end.ID]
		if !ok {
			continue
		}
		switch {
		case d.Event.Type() == lab.TypeCompleted:
			x.Status, x.Done = "completed", end.Done
		case d.Event.Type() == lab.TypeFailed && end.ReasonCode == "cancelled":
			x.Status, x.Done = "cancelled", end.Done
		case d.Event.Type() == lab.TypeFailed:
			x.Status, x.Done = "failed", end.Done
		}
	}
	// A version's content is that of the create its newest result made it
	// (created before unchanged), the lowest event id among several.
	type pick struct {
		cause   string
		created bool
	}
	picked := map[key]pick{}
	for cause, r := range newest {
		src, ok := sources[cause]
		if !r.ok || !ok || src.prompt != r.key.prompt {
			continue
		}
		if prev, seen := picked[r.key]; seen && (prev.created && !r.created || prev.created == r.created && prev.cause < cause) {
			continue
		}
		picked[r.key] = pick{cause, r.created}
	}
	labels := map[[2]string]int{}
	seen := map[string]int{} // results of each cause so far, from the end
	for i := len(results) - 1; i >= 0; i-- {
		c := causes[i]
		seen[c]++
		r := results[i]
		if seen[c] > 1 || !r.ok {
			continue // superseded, or a rejection
		}
		for _, l := range r.labels {
			if _, later := labels[[2]string{r.key.prompt, l}]; !later {
				labels[[2]string{r.key.prompt, l}] = r.key.version
			}
		}
	}
	s := labStateOf{Versions: []labVersion{}, Labels: []labLabel{}, Experiments: []labExperiment{}}
	for k, p := range picked {
		src := sources[p.cause]
		s.Versions = append(s.Versions, labVersion{Prompt: k.prompt, Version: k.version, Content: src.content, Tools: src.tools})
	}
	sort.Slice(s.Versions, func(i, k int) bool {
		a, b := s.Versions[i], s.Versions[k]
		return a.Prompt < b.Prompt || a.Prompt == b.Prompt && a.Version < b.Version
	})
	for k, v := range labels {
		s.Labels = append(s.Labels, labLabel{Prompt: k[0], Label: k[1], Version: v})
	}
	sort.Slice(s.Labels, func(i, k int) bool {
		a, b := s.Labels[i], s.Labels[k]
		return a.Prompt < b.Prompt || a.Prompt == b.Prompt && a.Label < b.Label
	})
	for _, x := range exps {
		s.Experiments = append(s.Experiments, *x)
	}
	sort.Slice(s.Experiments, func(i, k int) bool { return s.Experiments[i].ID < s.Experiments[k].ID })
	return s
}

// normal is v as JSON decodes it into any, so results compare as read.
func normal(v any) any {
	b, _ := json.Marshal(v)
	var out any
	_ = json.Unmarshal(b, &out)
	return out
}

// labResults are the results the history calls for (see
// TestLabConformance).
func labResults(ds []*bus.Delivery) []conformance.Result {
	answered := map[string]event.Event{} // a command's answer: started or rejected
	for _, d := range ds {
		if d.Event.Source() == "agentq/lab" && (d.Event.Type() == lab.TypeStarted || d.Event.Type() == lab.TypeRejected) {
			answered[bus.Causation(d.Event)] = d.Event
		}
	}
	var out []conformance.Result
	for _, d := range ds {
		id := d.Event.ID()
		tenant := d.Tenant
		rejected := func(code string) conformance.Result {
			return conformance.Result{Key: id + "/answer", ID: bus.DeriveID("lab", tenant, lab.TypeRejected, "event:"+id), Type: lab.TypeRejected,
				Data: normal(map[string]any{"reason_code": code, "event_id": id, "event_type": d.Event.Type()})}
		}
		switch d.Event.Type() {
		case lab.TypeCancelled:
			out = append(out, rejected(lab.ReasonUnknownExp))
		case lab.TypeRequested:
			var r struct {
				ExperimentID string `json:"experiment_id"`
				PromptID     string `json:"prompt_id"`
				Candidates   []int  `json:"candidate_versions"`
				Queries      []any  `json:"test_queries"`
				Repetitions  int    `json:"repetitions"`
			}
			_ = json.Unmarshal(d.Event.Data(), &r)
			switch {
			case r.Repetitions > 5:
				out = append(out, rejected(lab.ReasonOverLimit))
				continue
			case len(r.Candidates) == 2 && r.Candidates[0] == r.Candidates[1]:
				out = append(out, rejected(lab.ReasonInvalid))
				continue
			}
			// A valid request: started, unless a version it names was
			// still on its way when its wait ran out.
			if a, ok := answered[id]; ok && a.Type() == lab.TypeRejected {
				var rj struct {
					ReasonCode string `json:"reason_code"`
				}
				_ = json.Unmarshal(a.Data(), &rj)
				if rj.ReasonCode == lab.ReasonUnknownPrompt || rj.ReasonCode == lab.ReasonUnknownVersion {
					out = append(out, rejected(rj.ReasonCode))
					continue
				}
			}
			total := (1 + len(r.Candidates)) * len(r.Queries) * max(1, r.Repetitions)
			out = append(out, conformance.Result{Key: id + "/answer", ID: bus.DeriveID("lab", tenant, lab.TypeStarted, "event:"+id), Type: lab.TypeStarted,
				Data: normal(map[string]any{"experiment_id": r.ExperimentID, "prompt_id": r.PromptID, "candidate_versions": r.Candidates, "total_trials": total})})
			out = append(out, conformance.Result{Key: id + "/end", ID: bus.DeriveID("lab", tenant, lab.TypeCompleted, "event:"+id), Type: lab.TypeCompleted,
				Data: normal(map[string]any{"experiment_id": r.ExperimentID, "total_trials": total, "completed_trials": total})})
		}
	}
	return out
}

// readLabResult renders a result as labResults does.
func readLabResult(ev event.Event) conformance.Result {
	var d map[string]any
	_ = json.Unmarshal(ev.Data(), &d)
	keep := func(keys ...string) map[string]any {
		out := map[string]any{}
		for _, k := range keys {
			out[k] = d[k]
		}
		return out
	}
	key := bus.Causation(ev) + "/answer"
	var data any
	switch ev.Type() {
	case lab.TypeStarted:
		data = keep("experiment_id", "prompt_id", "candidate_versions", "total_trials")
	case lab.TypeRejected:
		data = keep("reason_code", "event_id", "event_type")
	case lab.TypeCompleted:
		key, data = bus.Causation(ev)+"/end", keep("experiment_id", "total_trials", "completed_trials")
	default:
		key, data = bus.Causation(ev)+"/end", keep("experiment_id", "reason_code", "reason")
	}
	return conformance.Result{Key: key, ID: ev.ID(), Type: ev.Type(), Data: data}
}
