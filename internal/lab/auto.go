package lab

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// A run from feedback (experiment.requested with auto): the lab takes the
// prompt's negative feedback from its read model when it accepts the
// request, the test queries from that feedback (some of them held out of
// generation), and, as steps of the experiment's job, analyses the
// feedback, generates one candidate per strategy, publishes them as
// prompt.created, waits for the indexer's prompt.indexed, and then runs
// the experiment like any other. Nothing is activated.

// Defaults of auto mode besides the AGENTQ_LAB_* ones.
const (
	defaultMaxSamples     = 50
	defaultCandidateCount = 3
	defaultMinNegative    = 5
)

// ReasonNotEnoughFeedback refuses a run from feedback with too little
// negative feedback.
const ReasonNotEnoughFeedback = "not_enough_feedback"

// autoIn is experiment.requested's auto.
type autoIn struct {
	CandidateCount *int       `json:"candidate_count"`
	Since          *time.Time `json:"since"`
	MaxSamples     *int       `json:"max_samples"`
	MinNegative    *int       `json:"min_negative_feedback"`
	Holdout        *float64   `json:"holdout"`
	Incremental    bool       `json:"incremental"`
	Model          string     `json:"model"`
}

// AutoSpec is how an auto experiment makes its candidates, fixed when it
// is accepted; Weaknesses and Candidates are filled in once its
// candidates are indexed.
type AutoSpec struct {
	CandidateCount int        `json:"candidate_count"`
	Model          string     `json:"model"` // analyses the feedback and writes the candidates
	Since          *time.Time `json:"since,omitempty"`
	Incremental    bool       `json:"incremental,omitempty"`
	// Negatives counts the negative feedback with a query in the window;
	// WithoutQuery the feedback whose query is unknown.
	Negatives    int `json:"negative_feedback"`
	WithoutQuery int `json:"without_query,omitempty"`
	// Samples are the feedback the run uses (at most max_samples, newest
	// first); each names its test query.
	Samples []Sample `json:"samples"`
	// HeldOut are the test queries (indexes) generation never sees.
	HeldOut []int `json:"held_out_queries"`
	// Source is what the baseline's prompt.created said besides its
	// content: candidates are created with the same.
	Source     Source            `json:"source"`
	Weaknesses []WeaknessReport  `json:"weaknesses,omitempty"`
	Candidates []CandidateReport `json:"candidates,omitempty"`

	// window lists every feedback event of the window, for an incremental
	// run to mark as looked at when it is accepted.
	window []string
}

// Sample is one negative feedback a run from feedback uses.
type Sample struct {
	Negative
	QueryIndex int  `json:"query_index"`
	HeldOut    bool `json:"held_out,omitempty"`
}

// Source is the part of a version's prompt.created a candidate copies.
type Source struct {
	Type        string   `json:"type"`
	Name        string   `json:"name"`
	Description string   `json:"description,omitempty"`
	Tags        []string `json:"tags,omitempty"`
}

// WeaknessReport is one weakness the analysis found, with how many of the
// samples shown to generation show it.
type WeaknessReport struct {
	Category       string   `json:"category"`
	Description    string   `json:"description,omitempty"`
	Frequency      int      `json:"frequency"`
	ExampleQueries []string `json:"example_queries,omitempty"`
}

// CandidateReport is one generated candidate: the version it became, or
// why it was left out.
type CandidateReport struct {
	Strategy  string `json:"strategy"`
	Version   int    `json:"version,omitempty"`
	Changelog string `json:"changelog,omitempty"`
	EventID   string `json:"event_id,omitempty"` // its prompt.created
	Error     string `json:"error,omitempty"`
}

// checkAuto applies what auto mode needs of a request and its defaults.
func (l *Lab) checkAuto(r *request) *rejection {
	if len(r.Auto) == 0 || string(r.Auto) == "null" {
		return nil
	}
	var a autoIn
	if err := json.Unmarshal(r.Auto, &a); err != nil {
		return reject(ReasonInvalid, nil, "auto: %v", err)
	}
	if len(r.TestQueries) > 0 {
		return reject(ReasonInvalid, nil, "with auto the test queries come from the feedback: leave out test_queries")
	}
	if len(r.CandidateVersions) > 0 {
		return reject(ReasonInvalid, nil, "with auto the lab generates the candidates: leave out candidate_versions")
	}
	o := l.opts.Lab
	count := cmp(a.CandidateCount, o.CandidateCount, defaultCandidateCount)
	if count < 1 {
		return reject(ReasonInvalid, nil, "auto.candidate_count %d: want at least 1", count)
	}
	if n := 1 + count; n > o.MaxVersions {
		return reject(ReasonOverLimit, map[string]any{"limit": o.MaxVersions, "got": n, "setting": "AGENTQ_LAB_MAX_VERSIONS"},
			"%d versions (the baseline and %d candidates) is over the limit of %d (AGENTQ_LAB_MAX_VERSIONS)", n, count, o.MaxVersions)
	}
	a.CandidateCount = &count
	minNeg := cmp(a.MinNegative, o.MinNegative, defaultMinNegative)
	a.MinNegative = &minNeg
	hold := o.Holdout
	if a.Holdout != nil {
		hold = *a.Holdout
	}
	if hold < 0 || hold > 0.9 {
		return reject(ReasonInvalid, nil, "auto.holdout %v: want 0..0.9", hold)
	}
	a.Holdout = &hold
	samples := cmp(a.MaxSamples, 0, defaultMaxSamples)
	a.MaxSamples = &samples
	r.auto = &a
	return nil
}

// cmp is *v if set, else def if positive, else fallback.
func cmp(v *int, def, fallback int) int {
	switch {
	case v != nil:
		return *v
	case def > 0:
		return def
	}
	return fallback
}

// resolveAuto completes an auto request: the prompt's negative feedback in
// its window, the test queries and which of them are held out, then the
// baseline as for any request.
func (l *Lab) resolveAuto(ctx context.Context, q querier, tenant, eventID string, r *request, e *Evaluation) (*Spec, *rejection, error) {
	a := r.auto
	known, production, err := promptVersions(ctx, q, tenant, r.PromptID)
	if err != nil {
		return nil, nil, err
	}
	if len(known) == 0 {
		return nil, reject(ReasonUnknownPrompt, map[string]any{"prompt_id": r.PromptID},
			"prompt %s has no versions in tenant %s that the lab has seen indexed", r.PromptID, tenant), nil
	}
	if r.BaselineVersion == nil && production == 0 {
		// The feedback is on the version in use: with none labelled
		// production, the latest one not generated by the lab (an earlier
		// run's candidate, never activated, is not in use).
		v, err := latestNotByLab(ctx, q, tenant, r.PromptID)
		if err != nil {
			return nil, nil, err
		}
		if v > 0 {
			r.BaselineVersion = &v
		}
	}
	if a.Incremental {
		// Two copies accepting incremental runs of the prompt at once
		// would both take the feedback no run has looked at: one at a
		// time, the second reading what the first marked.
		if _, err := q.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext('agentq.lab.incremental'), hashtext($1))`,
			tenant+"/"+r.PromptID); err != nil {
			return nil, nil, fmt.Errorf("lock incremental runs of %s: %w", r.PromptID, err)
		}
	}
	// Nothing submitted after the request: so the request, delivered again
	// by a replay, is decided on what it was decided on.
	until := r.at
	negs, noQuery, err := negatives(ctx, q, tenant, r.PromptID, feedbackWindow{since: a.Since, until: &until, fresh: a.Incremental})
	if err != nil {
		return nil, nil, err
	}
	if len(negs) < *a.MinNegative {
		details := map[string]any{"prompt_id": r.PromptID, "min_negative_feedback": *a.MinNegative, "got": len(negs), "without_query": len(noQuery)}
		var where []string
		if a.Since != nil {
			details["since"] = a.Since.UTC().Format(time.RFC3339)
			where = append(where, "since "+a.Since.UTC().Format(time.RFC3339))
		}
		if a.Incremental {
			details["incremental"] = true
			where = append(where, "that no earlier incremental run looked at")
		}
		msg := fmt.Sprintf("prompt %s has %d negative feedback (thumbs down or a rating under 0.5) with its query", r.PromptID, len(negs))
		if len(where) > 0 {
			msg += " " + strings.Join(where, " and ")
		}
		msg += fmt.Sprintf("; a run from feedback needs at least %d (auto.min_negative_feedback, AGENTQ_LAB_MIN_NEGATIVE_FEEDBACK)", *a.MinNegative)
		if len(noQuery) > 0 {
			msg += fmt.Sprintf(". %d more name no query: give query in feedback.submitted, or run_id with a prompt.used of the same run that has input", len(noQuery))
		}
		return nil, &rejection{code: ReasonNotEnoughFeedback, reason: msg, details: details}, nil
	}

	// The newest samples; their distinct queries are the test queries, in
	// the same order, at most AGENTQ_LAB_MAX_QUERIES of them.
	var samples []Sample
	var queries []Query
	index := map[string]int{}
	for _, n := range negs {
		if len(samples) == *a.MaxSamples {
			break
		}
		key := strings.TrimSpace(n.Query)
		qi, ok := index[key]
		if !ok {
			if len(queries) == l.opts.Lab.MaxQueries {
				continue
			}
			qi = len(queries)
			index[key] = qi
			queries = append(queries, Query{Query: n.Query})
		}
		samples = append(samples, Sample{Negative: n, QueryIndex: qi})
	}
	heldOut := holdOut(r.ExperimentID, queries, *a.Holdout)
	for i := range samples {
		samples[i].HeldOut = slices.Contains(heldOut, samples[i].QueryIndex)
	}
	r.TestQueries, r.CandidateVersions = queries, nil
	spec, rej, err := l.resolve(ctx, q, tenant, eventID, r, e)
	if err != nil || rej != nil {
		return nil, rej, err
	}
	src, err := versionSource(ctx, q, tenant, r.PromptID, spec.Baseline)
	if err != nil {
		return nil, nil, err
	}
	model := strings.TrimSpace(a.Model)
	if model == "" {
		model = spec.Model
	}
	window := make([]string, 0, len(negs)+len(noQuery))
	for _, n := range negs {
		window = append(window, n.EventID)
	}
	spec.Auto = &AutoSpec{
		CandidateCount: *a.CandidateCount, Model: model, Since: a.Since, Incremental: a.Incremental,
		Negatives: len(negs), WithoutQuery: len(noQuery), Samples: samples, HeldOut: heldOut, Source: src,
		window: append(window, noQuery...),
	}
	return spec, nil, nil
}

// holdOut picks the test queries kept out of generation: a share of them
// (at least one and never all, when there are two or more), chosen by a
// hash of the experiment id and the query, so the choice is fixed for the
// experiment and owes nothing to the order the feedback came in.
func holdOut(experimentID string, queries []Query, share float64) []int {
	n := len(queries)
	k := int(math.Round(share * float64(n)))
	if share > 0 && n >= 2 {
		k = min(max(k, 1), n-1)
	}
	if n < 2 {
		k = 0
	}
	type ranked struct {
		i   int
		key [32]byte
	}
	rs := make([]ranked, n)
	for i, q := range queries {
		rs[i] = ranked{i, sha256.Sum256([]byte(experimentID + "\x00" + q.Query))}
	}
	sort.Slice(rs, func(a, b int) bool { return string(rs[a].key[:]) < string(rs[b].key[:]) })
	out := []int{}
	for _, r := range rs[:k] {
		out = append(out, r.i)
	}
	slices.Sort(out)
	return out
}

// versionSource reads what a version's prompt.created said besides its
// content; a version created before the lab kept it is a system prompt
// named after its id.
func versionSource(ctx context.Context, q querier, tenant, promptID string, version int) (Source, error) {
	var typ, name, desc *string
	var tags []byte
	err := q.QueryRow(ctx, `
		SELECT s.type, s.name, s.description, s.tags FROM lab_prompt_versions v
		JOIN lab_prompt_sources s ON s.tenant_id = v.tenant_id AND s.event_id = v.source_event_id AND s.prompt_id = v.prompt_id
		WHERE v.tenant_id = $1 AND v.prompt_id = $2 AND v.version = $3
		ORDER BY NOT v.created, s.event_id LIMIT 1`, tenant, promptID, version).Scan(&typ, &name, &desc, &tags)
	if err != nil && err != pgx.ErrNoRows {
		return Source{}, fmt.Errorf("prompt %s version %d: %w", promptID, version, err)
	}
	src := Source{Type: "system", Name: promptID}
	if typ != nil {
		src.Type = *typ
	}
	if name != nil {
		src.Name = *name
	}
	if desc != nil {
		src.Description = *desc
	}
	if len(tags) > 0 {
		_ = json.Unmarshal(tags, &src.Tags)
	}
	return src, nil
}

// latestNotByLab is the latest version of a prompt whose author is not
// the lab, 0 when every one is.
func latestNotByLab(ctx context.Context, q querier, tenant, promptID string) (int, error) {
	var v *int
	err := q.QueryRow(ctx, `
		SELECT max(v.version) FROM lab_prompt_versions v
		JOIN lab_prompt_sources s ON s.tenant_id = v.tenant_id AND s.event_id = v.source_event_id AND s.prompt_id = v.prompt_id
		WHERE v.tenant_id = $1 AND v.prompt_id = $2 AND s.author IS DISTINCT FROM $3`, tenant, promptID, labAuthor).Scan(&v)
	if err != nil {
		return 0, fmt.Errorf("prompt %s versions: %w", promptID, err)
	}
	if v == nil {
		return 0, nil
	}
	return *v, nil
}

// markAnalysed records that an incremental run looked at the feedback of
// its window, in the transaction accepting it: the next incremental run of
// the prompt starts after it.
func markAnalysed(ctx context.Context, q querier, tenant, experimentID string, eventIDs []string) error {
	if len(eventIDs) == 0 {
		return nil
	}
	if _, err := q.Exec(ctx, `
		UPDATE lab_feedback SET analysed_by = $3
		WHERE tenant_id = $1 AND event_id = ANY($2) AND analysed_by IS NULL`, tenant, eventIDs, experimentID); err != nil {
		return fmt.Errorf("mark feedback analysed: %w", err)
	}
	return nil
}

// startedAuto adds an auto experiment's facts to experiment.started.
func startedAuto(data map[string]any, s *Spec) {
	a := s.Auto
	if a == nil {
		return
	}
	data["auto"] = true
	data["candidate_count"] = a.CandidateCount
	data["negative_feedback"] = a.Negatives
	data["feedback_samples"] = len(a.Samples)
	data["held_out_queries"] = a.HeldOut
	data["total_trials"] = s.planned()
}

// planned is the number of trials the experiment plans: with auto, for
// every candidate it asks for, though fewer may come out usable.
func (s Spec) planned() int {
	if s.Auto != nil && len(s.Versions) == 1 {
		return (1 + s.Auto.CandidateCount) * len(s.Queries) * s.Repetitions
	}
	return s.Trials()
}
