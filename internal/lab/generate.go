package lab

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/jackc/pgx/v5"

	"github.com/agentq/agentq/internal/bus"
	"github.com/agentq/agentq/internal/chat"
	"github.com/agentq/agentq/internal/database"
	"github.com/agentq/agentq/internal/job"
	"github.com/agentq/agentq/internal/library"
	"github.com/agentq/agentq/internal/outbox"
)

// Steps of a run from feedback, before its trials. Each is recorded as it
// finishes, so an attempt after a crash calls the model only for what no
// attempt stored, and publishes the same candidates under the same ids.
const (
	stepAnalysis  = "auto/analysis"   // the weaknesses
	stepCandidate = "auto/candidate/" // + index: one generated candidate
	stepPublished = "auto/published"  // their prompt.created event ids
	stepAutoSpec  = "auto/spec"       // the experiment with its candidates indexed
	stepLeftOut   = "auto/left_out"   // the candidates, none usable: why each was left out
)

// ReasonCandidateRejected fails a run from feedback none of whose
// candidates is usable, the indexer having rejected at least one.
const ReasonCandidateRejected = "candidate_rejected"

// labAuthor is the author of the versions the lab generates.
const labAuthor = "lab"

// maxPromptContent is prompt.created's limit on content.
const maxPromptContent = 65536

// Sampling of the generation calls: the analysis is a classification (0),
// the candidates are writing (some variety, the strategies do the rest).
const (
	analysisTemperature  = 0
	candidateTemperature = 0.7
	analysisMaxTokens    = 2000
	candidateMaxTokens   = 4096
)

// candidateOut is one generated candidate as stored: its content, or why
// it is left out (a model answer that is not a usable prompt is a fact of
// the run, not worth a second call).
type candidateOut struct {
	Strategy  string `json:"strategy"`
	Content   string `json:"content,omitempty"`
	Changelog string `json:"changelog,omitempty"`
	Error     string `json:"error,omitempty"`
}

// prepare makes the candidates of a run from feedback and returns the
// experiment with them; any other experiment is returned as it is.
func (l *Lab) prepare(ctx context.Context, j *job.Job, s Spec) (Spec, error) {
	if s.Auto == nil {
		return s, nil
	}
	full, err := job.StepJSON(ctx, j, stepAutoSpec, func(ctx context.Context) (Spec, error) { return l.candidates(ctx, j, s) })
	if err != nil {
		return s, err
	}
	// Idempotent: a resumed run writes the same again.
	if _, err := l.pool.Exec(ctx, `
		UPDATE lab_experiments SET candidate_versions = $3, total_trials = $4 WHERE tenant_id = $1 AND experiment_id = $2`,
		j.Tenant, j.ID, full.Candidates(), full.Trials()); err != nil {
		return s, fmt.Errorf("store the candidates of %s: %w", j.ID, database.Classify(err))
	}
	return full, nil
}

// candidates runs the steps that make the candidates: analysis, one
// generation per strategy, publication, indexing.
func (l *Lab) candidates(ctx context.Context, j *job.Job, s Spec) (Spec, error) {
	a := s.Auto
	base := s.Versions[0]
	var shown []Sample
	for _, smp := range a.Samples {
		if !smp.HeldOut {
			shown = append(shown, smp)
		}
	}
	samples := make([]chat.FeedbackSample, len(shown))
	for i, smp := range shown {
		samples[i] = chat.FeedbackSample{Query: smp.Query, Response: cutTo(smp.Response, 2000), Comment: cutTo(smp.Comment, 1000), Verdict: smp.Verdict}
	}
	weak, err := job.StepJSON(ctx, j, stepAnalysis, func(ctx context.Context) ([]chat.Weakness, error) {
		msgs, err := l.builder.FeedbackAnalysisMessages(chat.FeedbackAnalysisInput{Prompt: base.Content, Samples: samples})
		if err != nil {
			return nil, bus.Permanent(&failure{code: "analysis_failed", err: err})
		}
		text, err := l.complete(ctx, a.Model, analysisTemperature, analysisMaxTokens, msgs)
		if err != nil {
			return nil, err
		}
		ws, err := chat.ParseWeaknesses(text, len(samples))
		if err != nil {
			return nil, bus.Permanent(&failure{code: "analysis_failed", err: fmt.Errorf("the model's analysis of the feedback could not be read: %w", err)})
		}
		return ws, nil
	})
	if err != nil {
		return s, err
	}
	strategies := pickStrategies(weak, a.CandidateCount)

	outs := make([]candidateOut, len(strategies))
	errs := make([]error, len(strategies))
	var wg sync.WaitGroup
	for i, st := range strategies {
		wg.Add(1)
		go func() {
			defer wg.Done()
			outs[i], errs[i] = job.StepJSON(ctx, j, stepCandidate+strconv.Itoa(i), func(ctx context.Context) (candidateOut, error) {
				return l.generate(ctx, s, weak, samples, st)
			})
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return s, err
	}
	// A candidate that repeats the baseline or an earlier one would be the
	// same version: left out, which the stored outputs decide alike in
	// every attempt.
	for i := range outs {
		if outs[i].Error != "" {
			continue
		}
		if outs[i].Content == strings.TrimSpace(base.Content) {
			outs[i].Error = "the same content as the baseline"
		}
		for k := range i {
			if outs[i].Error == "" && outs[k].Error == "" && outs[k].Content == outs[i].Content {
				outs[i].Error = fmt.Sprintf("the same content as candidate %d (%s)", k+1, outs[k].Strategy)
			}
		}
	}
	reports := make([]WeaknessReport, len(weak))
	for i, w := range weak {
		reports[i] = WeaknessReport{Category: w.Category, Description: w.Description, Frequency: len(w.Samples)}
		for _, k := range w.Samples {
			if len(reports[i].ExampleQueries) < 3 {
				reports[i].ExampleQueries = append(reports[i].ExampleQueries, shown[k].Query)
			}
		}
	}
	sort.SliceStable(reports, func(x, y int) bool { return reports[x].Frequency > reports[y].Frequency })

	ids, err := job.StepJSON(ctx, j, stepPublished, func(ctx context.Context) ([]string, error) {
		return l.publishCandidates(ctx, j, s, reports, outs)
	})
	if err != nil {
		return s, err
	}
	indexed, err := l.awaitIndexed(ctx, j.Tenant, s.PromptID, ids)
	if err != nil {
		return s, err
	}

	full := s
	full.Versions = []VersionSpec{base}
	auto := *a
	auto.Weaknesses = reports
	auto.Candidates = make([]CandidateReport, len(outs))
	rejected := false
	for i, o := range outs {
		c := CandidateReport{Strategy: o.Strategy, Changelog: o.Changelog, EventID: ids[i], Error: o.Error}
		if c.Error == "" && indexed[ids[i]].version == 0 {
			// Left out, as a candidate the model botched: the indexer
			// keeps no version of it, and waiting changes nothing.
			c.Error, rejected = indexed[ids[i]].rejection(ids[i]), true
		}
		if c.Error == "" {
			v := indexed[ids[i]].version
			for _, vs := range full.Versions {
				if vs.Version == v {
					c.Error = fmt.Sprintf("the indexer stored it as version %d, already in the experiment", v)
				}
			}
			if c.Error == "" {
				c.Version = v
				full.Versions = append(full.Versions, VersionSpec{Version: v, Content: o.Content, Params: base.Params, Schema: base.Schema})
			}
		}
		auto.Candidates[i] = c
	}
	full.Auto = &auto
	if len(full.Versions) == 1 {
		var why []string
		for i, c := range auto.Candidates {
			why = append(why, fmt.Sprintf("candidate %d (%s): %s", i+1, c.Strategy, c.Error))
		}
		// The failed run's report says why of each candidate, the
		// indexer's rejections among them.
		if _, err := job.StepJSON(ctx, j, stepLeftOut, func(context.Context) ([]CandidateReport, error) {
			return auto.Candidates, nil
		}); err != nil {
			return s, err
		}
		if rejected {
			return s, bus.Permanent(&failure{code: ReasonCandidateRejected, err: fmt.Errorf("no usable candidate: %s", strings.Join(why, "; "))})
		}
		return s, bus.Permanent(&failure{code: "no_candidates", err: fmt.Errorf("no usable candidate came out of the generation: %s", strings.Join(why, "; "))})
	}
	return full, nil
}

// complete makes one generation call within the lab's model-call bound.
func (l *Lab) complete(ctx context.Context, model string, temperature float64, maxTokens int, msgs []chat.Message) (string, error) {
	conv := chat.New(model).WithTemperature(temperature).WithMaxTokens(maxTokens).Append(msgs...)
	release, err := l.limit.acquire(ctx)
	if err != nil {
		return "", err
	}
	defer release()
	resp, err := l.llm.Complete(ctx, providerRequest(conv))
	if err != nil {
		if ctx.Err() != nil {
			return "", context.Cause(ctx)
		}
		return "", fmt.Errorf("model %s: %w", model, err)
	}
	return resp.Content, nil
}

// generate writes one candidate with one strategy. A model that cannot be
// reached is an error (the attempt is retried); an answer that is not a
// usable prompt is a candidate left out.
func (l *Lab) generate(ctx context.Context, s Spec, weak []chat.Weakness, samples []chat.FeedbackSample, st chat.ImprovementStrategy) (candidateOut, error) {
	base := s.Versions[0]
	out := candidateOut{Strategy: st.Name}
	msgs, err := l.builder.CandidateMessages(chat.CandidateInput{Prompt: base.Content, Weaknesses: weak, Samples: samples, Strategy: st})
	if err != nil {
		return out, bus.Permanent(err)
	}
	text, err := l.complete(ctx, s.Auto.Model, candidateTemperature, candidateMaxTokens, msgs)
	if err != nil {
		return out, err
	}
	c, err := chat.ParseCandidate(text)
	if err != nil {
		out.Error = fmt.Sprintf("the model's answer could not be read: %v", err)
		return out, nil
	}
	if len(c.Content) > maxPromptContent {
		out.Error = fmt.Sprintf("the prompt written is %d bytes, over prompt.created's %d", len(c.Content), maxPromptContent)
		return out, nil
	}
	// The indexer would refuse what does not keep the baseline's parameters.
	if err := library.CheckTemplate(c.Content, base.Params); err != nil {
		out.Error = fmt.Sprintf("not a usable template with the baseline's parameters: %v", err)
		return out, nil
	}
	for i, q := range s.Queries {
		if _, err := library.Render(ctx, c.Content, base.Params, q.Vars, library.Limits{}); err != nil {
			out.Error = fmt.Sprintf("cannot be rendered for test query %d: %v", i+1, err)
			return out, nil
		}
	}
	out.Content, out.Changelog = c.Content, strings.TrimSpace(c.Changelog)
	if out.Changelog == "" {
		out.Changelog = "Generated by the lab from negative feedback with the " + st.Name + " strategy."
	}
	return out, nil
}

// pickStrategies chooses n distinct strategies: the targeted fix first,
// then those suited to the weaknesses found, most frequent first, then the
// rest in their order.
func pickStrategies(weak []chat.Weakness, n int) []chat.ImprovementStrategy {
	suited := map[string]string{
		"short_answer": "answer_structure", "poor_formatting": "answer_structure",
		"missing_sources": "grounding", "no_tool_usage": "grounding", "incorrect_info": "grounding",
		"missing_context": "scope_and_context", "off_topic": "scope_and_context",
		chat.CategoryOther: "explicit_requirements",
	}
	byFreq := slices.Clone(weak)
	sort.SliceStable(byFreq, func(a, b int) bool { return len(byFreq[a].Samples) > len(byFreq[b].Samples) })
	names := []string{"targeted_fix"}
	for _, w := range byFreq {
		if s, ok := suited[w.Category]; ok && !slices.Contains(names, s) {
			names = append(names, s)
		}
	}
	all := chat.ImprovementStrategies()
	for _, s := range all {
		if !slices.Contains(names, s.Name) {
			names = append(names, s.Name)
		}
	}
	out := make([]chat.ImprovementStrategy, 0, n)
	for _, name := range names[:min(n, len(names))] {
		i := slices.IndexFunc(all, func(s chat.ImprovementStrategy) bool { return s.Name == name })
		out = append(out, all[i])
	}
	return out
}

// candidateEventID is the id of candidate i's prompt.created: derived from
// the experiment, so a retry or another copy publishes the same event and
// the indexer stores one version.
func (l *Lab) candidateEventID(tenant, experimentID string, i int) string {
	return bus.DeriveID(l.opts.Consumer, tenant, typePromptCreated, "candidate:"+experimentID+"#"+strconv.Itoa(i))
}

// publishCandidates puts a prompt.created per usable candidate in the
// outbox and sends them; it returns their ids ("" for one left out).
func (l *Lab) publishCandidates(ctx context.Context, j *job.Job, s Spec, weak []WeaknessReport, outs []candidateOut) ([]string, error) {
	a := s.Auto
	ids := make([]string, len(outs))
	var evs []event.Event
	summary := make([]map[string]any, len(weak))
	for i, w := range weak {
		summary[i] = map[string]any{"category": w.Category, "frequency": w.Frequency}
	}
	for i, o := range outs {
		if o.Error != "" {
			continue
		}
		md := map[string]any{
			"changelog": o.Changelog, "strategy": o.Strategy, "weaknesses": summary,
			"experiment_id": s.ExperimentID, "baseline_version": s.Baseline, "generated_by": "lab",
		}
		if len(s.Versions[0].Schema) > 0 {
			md["response_schema"] = s.Versions[0].Schema // the structural tier judges it as it judges the baseline
		}
		data := map[string]any{
			"id": s.PromptID, "type": a.Source.Type, "name": a.Source.Name, "content": o.Content,
			"author": labAuthor, "metadata": md,
		}
		if len(s.Versions[0].Params) > 0 {
			data["parameters"] = s.Versions[0].Params
		}
		if a.Source.Description != "" {
			data["description"] = a.Source.Description
		}
		if len(a.Source.Tags) > 0 {
			data["tags"] = a.Source.Tags
		}
		ev, err := bus.NewEvent(typePromptCreated, j.Tenant, "agentq/"+l.opts.Consumer, data)
		if err != nil {
			return nil, bus.Permanent(err)
		}
		ev.SetID(l.candidateEventID(j.Tenant, s.ExperimentID, i))
		ev.SetExtension(bus.ExtCausation, s.RequestID)
		s.Trace.Set(&ev)
		ids[i] = ev.ID()
		evs = append(evs, ev)
	}
	if len(evs) == 0 {
		return ids, nil
	}
	tx, err := l.pool.Begin(ctx)
	if err != nil {
		return nil, database.Classify(err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if err := outbox.Add(ctx, tx, evs...); err != nil {
		return nil, database.Classify(err)
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, database.Classify(err)
	}
	if err := l.out.Send(ctx, evs); err != nil {
		l.log.Warn().Err(err).Str("tenant", j.Tenant).Str("experiment_id", j.ID).Msg("lab: candidates left to the outbox relay")
	}
	return ids, nil
}

// indexPoll is how often a run waiting for its candidates looks whether
// another copy applied their prompt.indexed; this copy's own wake it at
// once.
const indexPoll = 500 * time.Millisecond

// indexResult is what the indexer did with a candidate's prompt.created,
// by its newest result: the version it became, or (version 0) why it
// rejected it.
type indexResult struct {
	version      int
	code, reason string // indexer.rejected's reason_code and reason
}

// rejection says why the indexer rejected a candidate, for the report.
func (r indexResult) rejection(eventID string) string {
	why := "the indexer rejected its prompt.created " + eventID
	switch {
	case r.code != "" && r.reason != "":
		why += ": " + r.code + ": " + r.reason
	case r.code != "":
		why += ": " + r.code
	}
	return why
}

// awaitIndexed waits until the indexer has reported what it did with
// every published candidate (ids, "" skipped): the version it became, or
// its rejection (a revision of it, rare, would come too late to wait
// for); within the experiment's time.
func (l *Lab) awaitIndexed(ctx context.Context, tenant, promptID string, ids []string) (map[string]indexResult, error) {
	var want []string
	for _, id := range ids {
		if id != "" {
			want = append(want, id)
		}
	}
	tick := time.NewTicker(indexPoll)
	defer tick.Stop()
	for {
		wake := l.indexed.wait()
		got := map[string]indexResult{}
		// One statement, one snapshot: a cause is a version, or its newest
		// result is a rejection, never both.
		rows, err := l.pool.Query(ctx, `
			SELECT source_event_id, min(version), '', '' FROM lab_prompt_versions
			WHERE tenant_id = $1 AND prompt_id = $2 AND source_event_id = ANY($3) GROUP BY source_event_id
			UNION ALL
			SELECT cause_id, 0, coalesce(reason_code, ''), coalesce(reason, '') FROM (
				SELECT DISTINCT ON (cause_id) cause_id, version, reason_code, reason FROM lab_prompt_results
				WHERE tenant_id = $1 AND cause_id = ANY($3) ORDER BY cause_id, stream_seq DESC, event_id DESC) newest
			WHERE version IS NULL`, tenant, promptID, want)
		if err == nil {
			var id string
			var r indexResult
			_, err = pgx.ForEachRow(rows, []any{&id, &r.version, &r.code, &r.reason}, func() error {
				if prev, ok := got[id]; !ok || prev.version == 0 {
					got[id] = r
				}
				return nil
			})
		}
		if err != nil {
			if ctx.Err() == nil {
				return nil, fmt.Errorf("candidates' versions: %w", database.Classify(err))
			}
		} else if len(got) == len(want) {
			return got, nil
		}
		select {
		case <-ctx.Done():
			if errors.Is(context.Cause(ctx), errTimeout) {
				var missing []string
				for _, id := range want {
					if _, ok := got[id]; !ok {
						missing = append(missing, id)
					}
				}
				return nil, bus.Permanent(&failure{code: "timeout", err: fmt.Errorf(
					"the indexer did not report %d of the %d candidates (prompt.created %s) within the experiment's AGENTQ_LAB_TIMEOUT: is the indexer running?",
					len(missing), len(want), strings.Join(missing, ", "))})
			}
			return nil, context.Cause(ctx)
		case <-wake:
		case <-tick.C:
		}
	}
}

// signal wakes every waiter at once; its zero value is ready.
type signal struct {
	mu sync.Mutex
	ch chan struct{}
}

// wait returns a channel closed at the next broadcast.
func (s *signal) wait() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ch == nil {
		s.ch = make(chan struct{})
	}
	return s.ch
}

func (s *signal) broadcast() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ch != nil {
		close(s.ch)
		s.ch = nil
	}
}
