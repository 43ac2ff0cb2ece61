package lab_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/agentq/agentq/internal/bus"
	"github.com/agentq/agentq/internal/config"
	"github.com/agentq/agentq/internal/indexer"
	"github.com/agentq/agentq/internal/lab"
	"github.com/agentq/agentq/internal/library"
	"github.com/agentq/agentq/internal/provider/providertest"
	"github.com/agentq/agentq/internal/testenv"
)

// genSim plays the model's part in a run from feedback: it answers the
// feedback analysis with one weakness and each candidate generation with a
// version whose answers the judge likes ("great", see modelSim), records
// what both were shown, and can hold the generation of one strategy. Every
// other call goes to modelSim.
type genSim struct {
	mu       sync.Mutex
	analyses int
	gens     map[string]int // generation calls by strategy
	shown    []string       // the user messages of analysis and generation
	held     map[string]chan struct{}
}

func newGenSim(w *world) *genSim {
	g := &genSim{gens: map[string]int{}, held: map[string]chan struct{}{}}
	w.model.SetContextResponder(func(ctx context.Context, req providertest.ChatRequest) string {
		if out, ok := g.respond(ctx, req); ok {
			return out
		}
		return w.sim.respond(ctx, req)
	})
	return g
}

func (g *genSim) respond(ctx context.Context, req providertest.ChatRequest) (string, bool) {
	var system, user string
	for _, m := range req.Messages {
		switch m.Role {
		case "system":
			system = m.Content
		case "user":
			user = m.Content
		}
	}
	switch {
	case strings.Contains(system, "## Feedback Analysis Instructions"):
		g.mu.Lock()
		g.analyses++
		g.shown = append(g.shown, user)
		g.mu.Unlock()
		return `{"weaknesses": [{"category": "short_answer", "description": "Answers are poor and short.", "samples": [1, 2]}]}`, true
	case strings.Contains(system, "## Prompt Improvement Instructions"):
		_, rest, _ := strings.Cut(user, "## Your Strategy\n\n")
		strategy, _, _ := strings.Cut(rest, ":")
		g.mu.Lock()
		g.gens[strategy]++
		g.shown = append(g.shown, user)
		gate := g.held[strategy]
		g.mu.Unlock()
		if gate != nil {
			select {
			case <-gate:
			case <-ctx.Done():
			}
		}
		out, _ := json.Marshal(map[string]string{
			"content":   "A great answer to {q} (" + strategy + ").",
			"changelog": "Answers in full (" + strategy + ").",
		})
		return "Here it is:\n```json\n" + string(out) + "\n```", true
	}
	return "", false
}

func (g *genSim) hold(strategy string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.held[strategy] = make(chan struct{})
}

func (g *genSim) release() {
	g.mu.Lock()
	defer g.mu.Unlock()
	for s, c := range g.held {
		close(c)
		delete(g.held, s)
	}
}

func (g *genSim) counts() (analyses int, gens map[string]int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.analyses, maps(g.gens)
}

func (g *genSim) prompts() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.shown)
}

func maps(m map[string]int) map[string]int {
	out := make(map[string]int, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// autoWorld is a world with the indexer running, so the candidates the lab
// publishes become versions as any would, and a record of the prompt
// events in the stream.
type autoWorld struct {
	*world
	gen    *genSim
	cfg    config.Config
	prompt string // the prompt under test

	mu      sync.Mutex
	created []event.Event // prompt.created published by the lab
	indexed []event.Event
}

const poorAnswer = "A poor answer to {q}."

func newAutoWorld(t *testing.T) *autoWorld {
	w := newWorld(t)
	a := &autoWorld{world: w, gen: newGenSim(w), cfg: w.cfg, prompt: "support"}
	a.cfg.EmbedPrompts = "lexical"
	testenv.StartProcess(t, a.cfg, "indexer", indexer.Consumer)
	for subj, into := range map[string]*[]event.Event{"prompt.created.": &a.created, "prompt.indexed.": &a.indexed} {
		sub, err := w.nats.NC.Subscribe(subj+w.tenant, func(m *nats.Msg) {
			ev, err := bus.Decode(m.Header, m.Data)
			if err != nil || (subj == "prompt.created." && ev.Source() != "agentq/lab") {
				return
			}
			a.mu.Lock()
			*into = append(*into, ev)
			a.mu.Unlock()
		})
		require.NoError(t, err)
		t.Cleanup(func() { _ = sub.Unsubscribe() })
	}
	require.NoError(t, w.nats.NC.Flush())
	return a
}

func (a *autoWorld) opts() lab.Options {
	o := copyOpts()
	o.PromptWait = 20 * time.Second // the real indexer reports the baseline
	return o
}

// baseline publishes version 1 of the prompt and waits until the indexer
// has stored it.
func (a *autoWorld) baseline() {
	a.t.Helper()
	a.publish(bus.Type("prompt", "created"), map[string]any{
		"id": a.prompt, "type": "system", "name": "Support answer", "content": poorAnswer,
		"description": "Answers support questions.", "tags": []string{"support"},
	})
	a.eventually(30*time.Second, func() bool { return len(a.indexedEvents()) == 1 }, func() string { return "the indexer never indexed version 1" })
}

func (a *autoWorld) indexedEvents() []event.Event {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.indexed)
}

func (a *autoWorld) labCreated() []event.Event {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.created)
}

// negative publishes thumbs-down feedback on version 1 of the prompt.
func (a *autoWorld) negative(query string) {
	a.t.Helper()
	a.publish(bus.Type("feedback", "submitted"), map[string]any{
		"target": "prompt", "prompt_id": a.prompt, "version": 1, "thumbs": "down",
		"query": query, "response": "A poor answer to " + query + ".", "comment": "Useless for " + query,
	})
}

// spec reads an experiment's accepted spec (its job's payload).
func (a *autoWorld) spec(id string) lab.Spec {
	a.t.Helper()
	var s lab.Spec
	require.NoError(a.t, json.Unmarshal(a.status(id).Payload, &s))
	return s
}

// autoData is what an auto experiment.completed adds.
type autoData struct {
	CandidateVersions []int `json:"candidate_versions"`
	Auto              struct {
		NegativeFeedback int                   `json:"negative_feedback"`
		FeedbackSamples  int                   `json:"feedback_samples"`
		WithoutQuery     int                   `json:"without_query"`
		Incremental      bool                  `json:"incremental"`
		Weaknesses       []lab.WeaknessReport  `json:"weaknesses"`
		Candidates       []lab.CandidateReport `json:"candidates"`
		HeldOutQueries   []int                 `json:"held_out_queries"`
		Splits           struct {
			HeldOut *lab.SplitResult `json:"held_out"`
			Shown   *lab.SplitResult `json:"shown"`
		} `json:"splits"`
	} `json:"auto"`
}

// TestAutoFromFeedbackToReport: negative feedback published on a prompt
// (directly, and through the prompt.used of its run) becomes a run from
// feedback: too little is refused; enough is analysed, two candidates
// with distinct strategies are published as prompt.created by the lab,
// indexed by the indexer, and compared with the baseline on the
// feedback's queries, some of which generation never saw; the report says
// which and how each split went. Nothing is activated. Replaying the
// stream afterwards changes nothing and calls no model.
func TestAutoFromFeedbackToReport(t *testing.T) {
	a := newAutoWorld(t)
	c := a.startWith(a.cfg, a.opts())
	a.baseline()

	// Four negatives with their query, one without, and feedback the lab
	// has no use for: not enough yet.
	for i := range 4 {
		a.negative(fmt.Sprintf("fq%d", i))
	}
	a.publish(bus.Type("feedback", "submitted"), map[string]any{"target": "prompt", "prompt_id": "support", "version": 1, "rating": 0.1})
	a.publish(bus.Type("feedback", "submitted"), map[string]any{"target": "prompt", "prompt_id": "support", "version": 1, "thumbs": "up", "query": "liked"})
	a.publish(bus.Type("feedback", "submitted"), map[string]any{"target": "prompt", "prompt_id": "support", "version": 1, "rating": 0.5, "query": "fine"})
	a.publish(bus.Type("feedback", "submitted"), map[string]any{"target": "tool", "tool_name": "search", "thumbs": "down", "query": "tool"})
	a.publish(bus.Type("feedback", "submitted"), map[string]any{"target": "prompt", "prompt_id": "other", "version": 1, "thumbs": "down", "query": "other"})
	early := a.request(map[string]any{"prompt_id": "support", "experiment_id": "exp-early", "auto": map[string]any{"candidate_count": 2}})
	r := a.refused(early, 20*time.Second)
	require.Equal(t, lab.ReasonNotEnoughFeedback, r.ReasonCode)
	require.Equal(t, "prompt support has 4 negative feedback (thumbs down or a rating under 0.5) with its query; a run from feedback needs at least 5 "+
		"(auto.min_negative_feedback, AGENTQ_LAB_MIN_NEGATIVE_FEEDBACK). 1 more name no query: give query in feedback.submitted, "+
		"or run_id with a prompt.used of the same run that has input", r.Reason)
	require.Equal(t, map[string]any{"prompt_id": "support", "min_negative_feedback": 5.0, "got": 4.0, "without_query": 1.0}, r.Details)
	since := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
	later := a.request(map[string]any{"prompt_id": "support", "auto": map[string]any{"since": since.Format(time.RFC3339), "min_negative_feedback": 1}})
	r = a.refused(later, 20*time.Second)
	require.Equal(t, lab.ReasonNotEnoughFeedback, r.ReasonCode)
	require.Equal(t, map[string]any{"prompt_id": "support", "min_negative_feedback": 1.0, "got": 0.0, "without_query": 0.0,
		"since": since.Format(time.RFC3339)}, r.Details, "none since then")

	// Two more: one direct, one naming the version by its hash and its run,
	// whose query and response the run's prompt.used gives.
	a.negative("fq4")
	a.publish(bus.Type("prompt", "used"), map[string]any{"prompt_id": "support", "version": 1, "success": true, "run_id": "run-7",
		"input": "fq-run", "output": "A poor answer to fq-run."})
	a.publish(bus.Type("feedback", "submitted"), map[string]any{"target": "prompt", "thumbs": "down", "run_id": "run-7",
		"prompt_hash": library.Hash("support", 1, poorAnswer, "system"), "comment": "Not what I asked"})

	req := a.request(map[string]any{"prompt_id": "support", "experiment_id": "exp-auto", "auto": map[string]any{"candidate_count": 2}})
	started := a.result(lab.TypeStarted, req, 20*time.Second)
	var st map[string]any
	require.NoError(t, json.Unmarshal(started.Data(), &st))
	require.Equal(t, true, st["auto"])
	require.Equal(t, 6.0, st["negative_feedback"])
	require.Equal(t, 6.0, st["test_query_count"])
	require.Equal(t, 2.0, st["candidate_count"])
	require.Equal(t, 1.0, st["baseline_version"])
	require.Equal(t, 18.0, st["total_trials"], "3 versions × 6 queries")
	require.Len(t, st["held_out_queries"], 2, "30 % of 6 queries")

	end := a.ending(req, time.Minute)
	require.Equal(t, lab.TypeCompleted, end.Type(), string(end.Data()))
	d := decode(t, end)
	var ad autoData
	require.NoError(t, json.Unmarshal(end.Data(), &ad))

	// The feedback and the queries.
	spec := a.spec("exp-auto")
	var queries []string
	for _, q := range spec.Queries {
		queries = append(queries, q.Query)
	}
	require.ElementsMatch(t, []string{"fq0", "fq1", "fq2", "fq3", "fq4", "fq-run"}, queries)
	require.Equal(t, 6, ad.Auto.NegativeFeedback)
	require.Equal(t, 6, ad.Auto.FeedbackSamples)
	require.Equal(t, 1, ad.Auto.WithoutQuery)
	heldOut := ad.Auto.HeldOutQueries
	require.Len(t, heldOut, 2)
	require.Equal(t, heldOut, spec.Auto.HeldOut)

	// Generation saw the shown feedback and never the held-out queries.
	analyses, gens := a.gen.counts()
	require.Equal(t, 1, analyses)
	require.Equal(t, map[string]int{"targeted_fix": 1, "answer_structure": 1}, gens,
		"two distinct strategies: the targeted fix, then the one suited to short answers")
	for _, p := range a.gen.prompts() {
		for i, q := range queries {
			fenced := "\n" + q + "\n<<<END USER_QUERY"
			if slices.Contains(heldOut, i) {
				require.NotContains(t, p, fenced, "held-out query %q was shown to generation", q)
			} else {
				require.Contains(t, p, fenced, "shown query %q missing", q)
			}
		}
	}

	// The candidates: published by the lab, indexed as versions 2 and 3.
	require.Equal(t, []int{2, 3}, ad.CandidateVersions)
	require.Len(t, ad.Auto.Candidates, 2)
	created := a.labCreated()
	require.Len(t, created, 2)
	for i, c := range ad.Auto.Candidates {
		require.Equal(t, i+2, c.Version)
		require.Empty(t, c.Error)
		require.Equal(t, created[i].ID(), c.EventID)
		require.Equal(t, req.ID(), bus.Causation(created[i]))
		var pc struct {
			ID, Type, Name, Content, Description, Author string
			Tags                                         []string
			Metadata                                     map[string]any
		}
		require.NoError(t, json.Unmarshal(created[i].Data(), &pc))
		require.Equal(t, "support", pc.ID)
		require.Equal(t, "system", pc.Type)
		require.Equal(t, "Support answer", pc.Name)
		require.Equal(t, "Answers support questions.", pc.Description)
		require.Equal(t, []string{"support"}, pc.Tags)
		require.Equal(t, "lab", pc.Author)
		require.Equal(t, "A great answer to {q} ("+c.Strategy+").", pc.Content)
		require.Equal(t, c.Changelog, pc.Metadata["changelog"])
		require.Equal(t, "Answers in full ("+c.Strategy+").", c.Changelog)
		require.Equal(t, c.Strategy, pc.Metadata["strategy"])
		require.Equal(t, "exp-auto", pc.Metadata["experiment_id"])
		require.Equal(t, []any{map[string]any{"category": "short_answer", "frequency": 2.0}}, pc.Metadata["weaknesses"])
	}
	require.Equal(t, []string{"targeted_fix", "answer_structure"}, []string{ad.Auto.Candidates[0].Strategy, ad.Auto.Candidates[1].Strategy})
	require.Len(t, ad.Auto.Weaknesses, 1)
	require.Equal(t, "short_answer", ad.Auto.Weaknesses[0].Category)
	require.Equal(t, 2, ad.Auto.Weaknesses[0].Frequency)
	require.Len(t, ad.Auto.Weaknesses[0].ExampleQueries, 2)

	// The experiment: every version on every query; the candidates pass,
	// the baseline does not, on both splits.
	require.Equal(t, 18, d.CompletedTrials)
	require.Equal(t, 2, d.Report.Recommendation.Version, "the candidates tie; the first wins")
	for _, v := range d.Report.Versions {
		want := 1.0
		if v.Baseline {
			want = 0
		}
		require.Equal(t, 6, v.Trials)
		require.Equal(t, want, v.PassRate, "version %d", v.Version)
	}
	for name, sp := range map[string]*lab.SplitResult{"held_out": ad.Auto.Splits.HeldOut, "shown": ad.Auto.Splits.Shown} {
		require.NotNil(t, sp, name)
		n := 2
		if name == "shown" {
			n = 4
		}
		require.Len(t, sp.Queries, n, name)
		require.Len(t, sp.Versions, 3, name)
		for _, v := range sp.Versions {
			require.Equal(t, n, v.Trials, "%s version %d", name, v.Version)
			require.Equal(t, map[bool]float64{true: 0, false: 1}[v.Baseline], v.PassRate, "%s version %d", name, v.Version)
		}
		require.Len(t, sp.Comparisons, 2, name)
		require.Equal(t, n, sp.Comparisons[0].PairedQueries, name)
		require.Equal(t, 2, sp.Recommendation.Version, name)
	}
	require.Equal(t, heldOut, ad.Auto.Splits.HeldOut.Queries)

	// Nothing activated.
	require.Zero(t, countSubject(t, a.nats.JS, "prompt.activated."+a.tenant))

	// Replay: the lab's consumer and inbox are dropped and the stream
	// delivered again. The read models apply again to the same state; the
	// request finds its experiment; no model is called and no candidate
	// published again.
	calls := a.model.Requests()
	ctx := context.Background()
	var feedbackRows int
	require.NoError(t, a.pool.QueryRow(ctx, `SELECT count(*) FROM lab_feedback WHERE tenant_id = $1`, a.tenant).Scan(&feedbackRows))
	require.Equal(t, 8, feedbackRows, "the negatives on prompts (7 on support, 1 on another)")
	c.p.Stop()
	require.NoError(t, a.nats.JS.DeleteConsumer(ctx, bus.StreamName, "lab"))
	_, err := a.pool.Exec(ctx, `DELETE FROM inbox WHERE consumer = 'lab' AND tenant_id = $1`, a.tenant)
	require.NoError(t, err)
	a.startWith(a.cfg, a.opts())
	a.eventually(30*time.Second, func() bool {
		var n int
		require.NoError(t, a.pool.QueryRow(ctx, `SELECT count(*) FROM inbox WHERE consumer = 'lab' AND tenant_id = $1 AND event_id = $2`,
			a.tenant, req.ID()).Scan(&n))
		return n == 1
	}, func() string { return "the request was not delivered again" })
	var after int
	require.NoError(t, a.pool.QueryRow(ctx, `SELECT count(*) FROM lab_feedback WHERE tenant_id = $1`, a.tenant).Scan(&after))
	require.Equal(t, feedbackRows, after)
	require.Equal(t, calls, a.model.Requests(), "no model call")
	require.Equal(t, uint64(3), countSubject(t, a.nats.JS, "prompt.created."+a.tenant), "the baseline and the two candidates, once")
	require.Equal(t, 1, a.count(lab.TypeStarted, req))
	require.Equal(t, 1, a.count(lab.TypeCompleted, req))
	require.Zero(t, a.count(lab.TypeRejected, req))
}

// countSubject returns how many messages the stream holds on subject.
func countSubject(t *testing.T, js jetstream.JetStream, subject string) uint64 {
	t.Helper()
	s, err := js.Stream(context.Background(), bus.StreamName)
	require.NoError(t, err)
	info, err := s.Info(context.Background(), jetstream.WithSubjectFilter(subject))
	require.NoError(t, err)
	return info.State.Subjects[subject]
}

// TestAutoKillResumesWithoutRegenerating: a lab copy killed while it
// generates candidates (one stored, the other's call in flight) loses the
// run to a second copy, which generates only the missing candidate: the
// analysis and the stored candidate are never asked for again, and the
// indexer stores each candidate once.
func TestAutoKillResumesWithoutRegenerating(t *testing.T) {
	a := newAutoWorld(t)
	first := a.startWith(a.cfg, a.opts())
	a.baseline()
	for i := range 5 {
		a.negative(fmt.Sprintf("kq%d", i))
	}
	a.gen.hold("answer_structure")
	req := a.request(map[string]any{"prompt_id": "support", "experiment_id": "exp-kill-auto",
		"auto": map[string]any{"candidate_count": 2}, "evaluation": map[string]any{"summary": false}})
	a.eventually(30*time.Second, func() bool {
		_, gens := a.gen.counts()
		return gens["answer_structure"] == 1 && a.hasStep("exp-kill-auto", "auto/candidate/0")
	}, func() string { return "the first candidate was never stored" })
	a.startWith(a.cfg, a.opts()) // the second copy, waiting
	first.kill()
	a.gen.release()

	end := a.ending(req, time.Minute)
	require.Equal(t, lab.TypeCompleted, end.Type(), string(end.Data()))
	analyses, gens := a.gen.counts()
	require.Equal(t, 1, analyses, "the stored analysis is not asked for again")
	require.Equal(t, map[string]int{"targeted_fix": 1, "answer_structure": 2}, gens,
		"only the candidate in flight at the kill is generated again")
	require.Equal(t, 2, a.status("exp-kill-auto").Attempts)
	var ad autoData
	require.NoError(t, json.Unmarshal(end.Data(), &ad))
	require.Equal(t, []int{2, 3}, ad.CandidateVersions)
	require.Len(t, a.labCreated(), 2, "each candidate published once")
	require.Len(t, a.indexedEvents(), 3, "the indexer stored the baseline and two candidates")
	require.Equal(t, 1, a.count(lab.TypeCompleted, req))
}

func (a *autoWorld) hasStep(id, step string) bool {
	var n int
	require.NoError(a.t, a.pool.QueryRow(context.Background(), `
		SELECT count(*) FROM job_steps WHERE tenant_id = $1 AND consumer = 'lab' AND job_id = $2 AND step = $3`,
		a.tenant, id, step).Scan(&n))
	return n == 1
}

// TestScheduleRunsEachSlotOnceIncrementally: two lab copies on a schedule
// of every second; each slot with new negative feedback is requested by
// both copies under the same ids and runs once. The second run looks only
// at the feedback that came after the first.
func TestScheduleRunsEachSlotOnceIncrementally(t *testing.T) {
	a := newAutoWorld(t)
	// The schedule covers every tenant of the database: a prompt of this
	// test's own keeps other tests' feedback out of it.
	a.prompt = "sched-" + a.tenant
	cfg := a.cfg
	cfg.Lab.Schedule, cfg.Lab.SchedulePrompts, cfg.Lab.CandidateCount = "* * * * * *", a.prompt, 1
	a.startWith(cfg, a.opts())
	a.startWith(cfg, a.opts())
	a.baseline()
	for i := range 5 {
		a.negative(fmt.Sprintf("old%d", i))
	}
	first := a.scheduledRun(1)
	for i := range 5 {
		a.negative(fmt.Sprintf("new%d", i))
	}
	second := a.scheduledRun(2)

	for i, ev := range []event.Event{first, second} {
		var st map[string]any
		require.NoError(t, json.Unmarshal(ev.Data(), &st))
		id := st["experiment_id"].(string)
		require.True(t, strings.HasPrefix(id, "auto-") && strings.HasSuffix(id, "-"+a.prompt), id)
		end := a.ending(eventWithID(bus.Causation(ev), a.tenant), time.Minute)
		require.Equal(t, lab.TypeCompleted, end.Type(), string(end.Data()))
		var queries []string
		for _, q := range a.spec(id).Queries {
			queries = append(queries, q.Query)
		}
		prefix := []string{"old", "new"}[i]
		require.ElementsMatch(t, []string{prefix + "0", prefix + "1", prefix + "2", prefix + "3", prefix + "4"}, queries,
			"run %d looks only at the feedback after the previous run", i+1)
		require.Equal(t, 1, a.spec(id).Baseline, "an earlier run's candidate, never activated, is not the baseline")
		var ad autoData
		require.NoError(t, json.Unmarshal(end.Data(), &ad))
		require.True(t, ad.Auto.Incremental)
		require.Equal(t, 5, ad.Auto.NegativeFeedback)
	}
	// Each scheduled request was answered once (a slot that met too little
	// feedback is refused once too), and ran at most once.
	answers := map[string]int{}
	for _, ev := range a.published() {
		if ev.Type() == lab.TypeStarted || ev.Type() == lab.TypeRejected {
			answers[bus.Causation(ev)]++
		}
	}
	for cause, n := range answers {
		require.Equal(t, 1, n, "request %s answered %d times", cause, n)
	}
	analyses, gens := a.gen.counts()
	require.Equal(t, 2, analyses, "one analysis per run; the lab published %s", a.describe())
	require.Equal(t, map[string]int{"targeted_fix": 2}, gens)
	var runs int
	require.NoError(t, a.pool.QueryRow(context.Background(), `SELECT count(*) FROM lab_experiments WHERE tenant_id = $1`, a.tenant).Scan(&runs))
	require.Equal(t, 2, runs)
}

// scheduledRun waits for the n-th experiment.started.
func (a *autoWorld) scheduledRun(n int) event.Event {
	a.t.Helper()
	var got event.Event
	a.eventually(30*time.Second, func() bool {
		k := 0
		for _, ev := range a.published() {
			if ev.Type() == lab.TypeStarted {
				if k++; k == n {
					got = ev
					return true
				}
			}
		}
		return false
	}, func() string { return fmt.Sprintf("no scheduled run %d; the lab published %s", n, a.describe()) })
	return got
}

// eventWithID is a stand-in for an event known only by its id, for
// finding its results.
func eventWithID(id, tenant string) event.Event {
	ev := event.New()
	ev.SetID(id)
	ev.SetExtension(bus.ExtTenant, tenant)
	return ev
}
