package lab

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/agentq/agentq/internal/job"
	"github.com/agentq/agentq/internal/service"
)

// The lab answers what `agentq experiment status|list|trials|report` ask
// over NATS request/reply, as the indexer answers search: a client reads
// the lab's state through the lab, never from its tables. The tenant is
// the subject's last token.
const (
	GetSubject    = "experiments.get"
	ListSubject   = "experiments.list"
	TrialsSubject = "experiments.trials"
)

// Experiment is an experiment as experiments.get and experiments.list
// return it. List leaves out Queries, Report, Judge and Summary.
type Experiment struct {
	ID                string     `json:"id"`
	PromptID          string     `json:"prompt_id"`
	Name              string     `json:"name,omitempty"`
	Status            string     `json:"status"` // queued, running, completed, failed or cancelled
	RequestEventID    string     `json:"request_event_id"`
	BaselineVersion   int        `json:"baseline_version"`
	CandidateVersions []int      `json:"candidate_versions"`
	TotalTrials       int        `json:"total_trials"`
	CompletedTrials   int        `json:"completed_trials"`
	Model             string     `json:"model"`
	JudgeModel        string     `json:"judge_model"`
	CancelRequested   bool       `json:"cancel_requested,omitempty"`
	ReasonCode        string     `json:"reason_code,omitempty"`
	Reason            string     `json:"reason,omitempty"`
	CreatedAt         time.Time  `json:"created_at"`
	StartedAt         *time.Time `json:"started_at,omitempty"`
	FinishedAt        *time.Time `json:"finished_at,omitempty"`
	// Recommendation is the report's, once there is a report.
	Recommendation *Pick `json:"recommendation,omitempty"`

	// Queries are the test queries' texts, by index (get only).
	Queries []string `json:"queries,omitempty"`
	// Report is experiment.completed's or experiment.failed's report;
	// while the experiment runs, the report of the trials stored so far,
	// with Partial set (get only).
	Report  json.RawMessage `json:"report,omitempty"`
	Partial bool            `json:"partial,omitempty"`
	Judge   json.RawMessage `json:"judge,omitempty"`
	Summary string          `json:"summary,omitempty"`
}

// Pick is a report's recommendation in brief.
type Pick struct {
	Version    int    `json:"version"`
	Confidence string `json:"confidence"`
}

// GetRequest is experiments.get's request.
type GetRequest struct {
	ID string `json:"id"`
}

// ListRequest is experiments.list's request: newest first, at most Limit
// (default 50, at most 200), of one status or prompt when given.
type ListRequest struct {
	Status   string `json:"status,omitempty"`
	PromptID string `json:"prompt_id,omitempty"`
	Limit    int    `json:"limit,omitempty"`
}

// TrialsRequest is experiments.trials's request: the stored trials of an
// experiment, ordered by version, query and repetition, optionally of one
// version or query, or only those that did not pass; Limit (default 100,
// at most 1000) from Offset. Responses are cut at MaxResponseBytes
// (default 2048, at most MaxStoredResponse) so a page fits in a message.
type TrialsRequest struct {
	ID               string `json:"id"`
	Version          int    `json:"version,omitempty"`
	Query            *int   `json:"query,omitempty"`
	Failed           bool   `json:"failed,omitempty"`
	Limit            int    `json:"limit,omitempty"`
	Offset           int    `json:"offset,omitempty"`
	MaxResponseBytes int    `json:"max_response_bytes,omitempty"`
}

// TrialsReply is experiments.trials's reply: Total trials match, Trials
// are the page asked for.
type TrialsReply struct {
	ExperimentID string      `json:"experiment_id"`
	Total        int         `json:"total"`
	Trials       []TrialView `json:"trials"`
}

// TrialView is a stored trial with its query's text.
type TrialView struct {
	Trial
	QueryText string `json:"query_text"`
	// Truncated: the response was cut at the request's max_response_bytes.
	Truncated bool `json:"truncated,omitempty"`
}

// ServeOptions configures the lab's request/reply service.
type ServeOptions struct {
	// Validator checks requests against their schemas; nil checks none.
	Validator service.Validator
	Log       zerolog.Logger
	Registry  prometheus.Registerer
	// Timeout bounds each request; default 5s.
	Timeout time.Duration
}

// Serve answers experiments.get, experiments.list and experiments.trials
// on nc until the returned stop is called. Every copy serves, in one queue
// group: each request is answered by one of them.
func (l *Lab) Serve(nc *nats.Conn, o ServeOptions) (stop func(), err error) {
	if o.Timeout <= 0 {
		o.Timeout = 5 * time.Second
	}
	svc, err := service.New(nc, service.Options{
		Name: "agentq-lab", Description: "agentq lab: experiments, their trials and reports",
		QueueGroup: "agentq-lab", Timeout: o.Timeout, Concurrency: 8,
		Validator: o.Validator, Log: o.Log, Registry: o.Registry,
	})
	if err != nil {
		return nil, fmt.Errorf("lab service: %w", err)
	}
	for _, ep := range []struct {
		name, subject, schema string
		h                     service.Handler
	}{
		{"experiments-get", GetSubject, "agentq.experiments.get.request.v1", handle(l.getExperiment)},
		{"experiments-list", ListSubject, "agentq.experiments.list.request.v1", handle(l.listExperiments)},
		{"experiments-trials", TrialsSubject, "agentq.experiments.trials.request.v1", handle(l.listTrials)},
	} {
		if err := svc.AddEndpoint(ep.name, ep.subject, ep.schema, ep.h); err != nil {
			_ = svc.Stop()
			return nil, fmt.Errorf("lab service: %w", err)
		}
	}
	return func() { _ = svc.Stop() }, nil
}

// handle decodes the request body into Req and calls f.
func handle[Req, Resp any](f func(context.Context, string, Req) (Resp, error)) service.Handler {
	return func(ctx context.Context, r service.Request) (any, error) {
		var req Req
		if err := json.Unmarshal(r.Data, &req); err != nil {
			return nil, service.BadRequest("request is not the expected JSON object: %s", truncate(err.Error(), 300))
		}
		return f(ctx, r.Tenant, req)
	}
}

// experimentColumns are what experimentRow scans, from lab_experiments e
// and the job j.
const experimentColumns = `
	e.experiment_id, e.prompt_id, coalesce(e.name, ''), e.status, e.request_event_id, e.baseline_version,
	e.candidate_versions, e.total_trials, e.model, e.judge_model, coalesce(e.reason_code, ''), coalesce(e.reason, ''),
	e.created_at, e.started_at, e.finished_at, coalesce(j.cancel_requested, false),
	(SELECT count(*) FROM job_steps s WHERE s.tenant_id = e.tenant_id AND s.consumer = $1 AND s.job_id = e.experiment_id AND s.step LIKE 'trial/%'),
	(e.result->'report'->'recommendation'->>'version')::int, coalesce(e.result->'report'->'recommendation'->>'confidence', '')`

func scanExperiment(row pgx.Row, extra ...any) (Experiment, error) {
	var x Experiment
	var pick *int
	var confidence string
	err := row.Scan(append([]any{&x.ID, &x.PromptID, &x.Name, &x.Status, &x.RequestEventID, &x.BaselineVersion,
		&x.CandidateVersions, &x.TotalTrials, &x.Model, &x.JudgeModel, &x.ReasonCode, &x.Reason,
		&x.CreatedAt, &x.StartedAt, &x.FinishedAt, &x.CancelRequested, &x.CompletedTrials, &pick, &confidence}, extra...)...)
	if pick != nil && confidence != "" {
		x.Recommendation = &Pick{Version: *pick, Confidence: confidence}
	}
	if x.CandidateVersions == nil {
		x.CandidateVersions = []int{}
	}
	return x, err
}

func (l *Lab) getExperiment(ctx context.Context, tenant string, req GetRequest) (map[string]any, error) {
	if !experimentIDRE.MatchString(req.ID) {
		return nil, service.BadRequest("id %q is not an experiment id", req.ID)
	}
	x, err := l.Experiment(ctx, tenant, req.ID)
	if errors.Is(err, job.ErrNotFound) {
		return nil, service.NotFound("no experiment %s in tenant %s", req.ID, tenant)
	}
	if err != nil {
		return nil, err
	}
	return map[string]any{"experiment": x}, nil
}

// Experiment reads experiment id of tenant with its report: the final one,
// or, while it runs, the report of the trials stored so far. It returns an
// error wrapping job.ErrNotFound when there is none.
func (l *Lab) Experiment(ctx context.Context, tenant, id string) (Experiment, error) {
	var result, payload []byte
	x, err := scanExperiment(l.pool.QueryRow(ctx, `SELECT `+experimentColumns+`, e.result, j.payload
		FROM lab_experiments e LEFT JOIN jobs j ON j.tenant_id = e.tenant_id AND j.consumer = $1 AND j.id = e.experiment_id
		WHERE e.tenant_id = $2 AND e.experiment_id = $3`, l.opts.Consumer, tenant, id), &result, &payload)
	if errors.Is(err, pgx.ErrNoRows) {
		return x, fmt.Errorf("experiment %s: %w", id, job.ErrNotFound)
	}
	if err != nil {
		return x, fmt.Errorf("experiment %s: %w", id, err)
	}
	var s Spec
	if len(payload) > 0 {
		if err := json.Unmarshal(payload, &s); err != nil {
			return x, fmt.Errorf("experiment %s payload: %w", id, err)
		}
		for _, q := range s.Queries {
			x.Queries = append(x.Queries, q.Query)
		}
	}
	if len(result) > 0 {
		var r struct {
			Report  json.RawMessage `json:"report"`
			Judge   json.RawMessage `json:"judge"`
			Summary string          `json:"summary"`
		}
		if err := json.Unmarshal(result, &r); err != nil {
			return x, fmt.Errorf("experiment %s result: %w", id, err)
		}
		x.Report, x.Judge, x.Summary = r.Report, r.Judge, r.Summary
		return x, nil
	}
	if x.CompletedTrials == 0 || len(s.Versions) == 0 {
		return x, nil
	}
	trials, err := Trials(ctx, l.pool, l.opts.Consumer, tenant, id)
	if err != nil {
		return x, err
	}
	rep, judge, err := buildReport(s, trials)
	if err != nil {
		return x, nil // a partial report is a convenience: none rather than a failed status
	}
	if x.Report, err = json.Marshal(rep); err != nil {
		return x, err
	}
	if s.Eval.Judge {
		if x.Judge, err = json.Marshal(judge); err != nil {
			return x, err
		}
	}
	x.Partial = true
	x.Recommendation = &Pick{Version: rep.Recommendation.Version, Confidence: string(rep.Recommendation.Confidence)}
	return x, nil
}

// Statuses of an experiment.
var statuses = []string{"queued", "running", "completed", "failed", "cancelled"}

func (l *Lab) listExperiments(ctx context.Context, tenant string, req ListRequest) (map[string]any, error) {
	if req.Limit == 0 {
		req.Limit = 50
	}
	if req.Limit < 1 || req.Limit > 200 {
		return nil, service.BadRequest("limit %d: want 1 to 200", req.Limit)
	}
	if req.Status != "" && !slices.Contains(statuses, req.Status) {
		return nil, service.BadRequest("status %q: want one of %s", req.Status, strings.Join(statuses, ", "))
	}
	rows, err := l.pool.Query(ctx, `SELECT `+experimentColumns+`
		FROM lab_experiments e LEFT JOIN jobs j ON j.tenant_id = e.tenant_id AND j.consumer = $1 AND j.id = e.experiment_id
		WHERE e.tenant_id = $2 AND ($3 = '' OR e.status = $3) AND ($4 = '' OR e.prompt_id = $4)
		ORDER BY e.created_at DESC, e.experiment_id LIMIT $5`, l.opts.Consumer, tenant, req.Status, req.PromptID, req.Limit)
	if err != nil {
		return nil, fmt.Errorf("list experiments: %w", err)
	}
	defer rows.Close()
	out := []Experiment{}
	for rows.Next() {
		x, err := scanExperiment(rows)
		if err != nil {
			return nil, fmt.Errorf("list experiments: %w", err)
		}
		out = append(out, x)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list experiments: %w", err)
	}
	return map[string]any{"experiments": out}, nil
}

func (l *Lab) listTrials(ctx context.Context, tenant string, req TrialsRequest) (TrialsReply, error) {
	switch {
	case !experimentIDRE.MatchString(req.ID):
		return TrialsReply{}, service.BadRequest("id %q is not an experiment id", req.ID)
	case req.Limit == 0:
		req.Limit = 100
	}
	if req.MaxResponseBytes == 0 {
		req.MaxResponseBytes = 2048
	}
	switch {
	case req.Limit < 1 || req.Limit > 1000:
		return TrialsReply{}, service.BadRequest("limit %d: want 1 to 1000", req.Limit)
	case req.Offset < 0:
		return TrialsReply{}, service.BadRequest("offset %d: want 0 or more", req.Offset)
	case req.MaxResponseBytes < 1 || req.MaxResponseBytes > MaxStoredResponse:
		return TrialsReply{}, service.BadRequest("max_response_bytes %d: want 1 to %d", req.MaxResponseBytes, MaxStoredResponse)
	}
	var payload []byte
	err := l.pool.QueryRow(ctx, `SELECT j.payload FROM lab_experiments e
		JOIN jobs j ON j.tenant_id = e.tenant_id AND j.consumer = $1 AND j.id = e.experiment_id
		WHERE e.tenant_id = $2 AND e.experiment_id = $3`, l.opts.Consumer, tenant, req.ID).Scan(&payload)
	if errors.Is(err, pgx.ErrNoRows) {
		return TrialsReply{}, service.NotFound("no experiment %s in tenant %s", req.ID, tenant)
	}
	if err != nil {
		return TrialsReply{}, fmt.Errorf("trials of %s: %w", req.ID, err)
	}
	var s Spec
	if err := json.Unmarshal(payload, &s); err != nil {
		return TrialsReply{}, fmt.Errorf("trials of %s: payload: %w", req.ID, err)
	}
	trials, err := Trials(ctx, l.pool, l.opts.Consumer, tenant, req.ID)
	if err != nil {
		return TrialsReply{}, err
	}
	out := TrialsReply{ExperimentID: req.ID, Trials: []TrialView{}}
	for _, t := range trials {
		if (req.Version != 0 && t.Version != req.Version) || (req.Query != nil && t.Query != *req.Query) ||
			(req.Failed && t.Pass && t.Error == "") {
			continue
		}
		out.Total++
		if out.Total <= req.Offset || len(out.Trials) >= req.Limit {
			continue
		}
		v := TrialView{Trial: t}
		if t.Query < len(s.Queries) {
			v.QueryText = s.Queries[t.Query].Query
		}
		if len(v.Response) > req.MaxResponseBytes {
			v.Response, v.Truncated = cutUTF8(v.Response, req.MaxResponseBytes), true
		}
		out.Trials = append(out.Trials, v)
	}
	return out, nil
}
