package lab_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentq/agentq/internal/lab"
	"github.com/agentq/agentq/internal/service"
	"github.com/agentq/agentq/schemas"
)

// call asks the lab's service and checks the reply against its schema.
func (w *world) call(subject string, req any, resp any) error {
	w.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var raw json.RawMessage
	err := service.Call(ctx, w.nats.NC, subject+"."+w.tenant, req, &raw)
	var serr *service.Error
	if errors.As(err, &serr) {
		return err
	}
	require.NoError(w.t, err)
	reg, err := schemas.Load()
	require.NoError(w.t, err)
	require.NoError(w.t, reg.Validate("agentq."+subject+".response.v1", raw), "%s", raw)
	require.NoError(w.t, json.Unmarshal(raw, resp))
	return nil
}

// TestStateService: experiments.get, .list and .trials answer from the
// lab's state, tenant by subject: a running experiment's progress and the
// report of its trials so far, then the final report; the trials page by
// page, filtered; unknown ids and bad requests are error replies.
func TestStateService(t *testing.T) {
	w := newWorld(t)
	w.start(w.cfg)
	w.version("svc", 1, shortAnswer, "production")
	w.version("svc", 2, longAnswer)
	w.sim.holdQuery("q1")
	req := w.request(map[string]any{
		"prompt_id": "svc", "experiment_id": "exp-svc", "name": "longer", "candidate_versions": []int{2},
		"test_queries": queries(2, "search"), "repetitions": 2, "judge_model": "judge-b",
	})
	w.result(lab.TypeStarted, req, 30*time.Second)

	// Running: query 0's four trials are stored, query 1's are held.
	var got struct {
		Experiment lab.Experiment `json:"experiment"`
	}
	w.eventually(30*time.Second, func() bool {
		got.Experiment = lab.Experiment{}
		require.NoError(t, w.call(lab.GetSubject, lab.GetRequest{ID: "exp-svc"}, &got))
		return got.Experiment.CompletedTrials == 4 && w.sim.held() == 4
	}, func() string { return "query 0's trials were never all stored" })
	x := got.Experiment
	require.Equal(t, "running", x.Status)
	require.Equal(t, "svc", x.PromptID)
	require.Equal(t, "longer", x.Name)
	require.Equal(t, req.ID(), x.RequestEventID)
	require.Equal(t, 1, x.BaselineVersion)
	require.Equal(t, []int{2}, x.CandidateVersions)
	require.Equal(t, 8, x.TotalTrials)
	require.Equal(t, []string{"q0", "q1"}, x.Queries)
	require.True(t, x.Partial)
	require.NotNil(t, x.Recommendation)
	var partial struct {
		Versions []struct {
			Version, Trials int
		} `json:"versions"`
	}
	require.NoError(t, json.Unmarshal(x.Report, &partial))
	require.Len(t, partial.Versions, 2)
	require.Equal(t, 2, partial.Versions[0].Trials, "the report of the stored trials: query 0, twice")

	w.sim.release()
	end := w.ending(req, time.Minute)
	require.Equal(t, lab.TypeCompleted, end.Type(), string(end.Data()))
	got.Experiment = lab.Experiment{}
	require.NoError(t, w.call(lab.GetSubject, lab.GetRequest{ID: "exp-svc"}, &got))
	x = got.Experiment
	require.Equal(t, "completed", x.Status)
	require.Equal(t, 8, x.CompletedTrials)
	require.False(t, x.Partial)
	require.NotNil(t, x.StartedAt)
	require.NotNil(t, x.FinishedAt)
	require.Equal(t, &lab.Pick{Version: 2, Confidence: "LOW"}, x.Recommendation)
	var final struct {
		Report json.RawMessage `json:"report"`
		Judge  json.RawMessage `json:"judge"`
		Summ   string          `json:"summary"`
	}
	require.NoError(t, json.Unmarshal(end.Data(), &final))
	require.JSONEq(t, string(final.Report), string(x.Report), "the report experiment.completed carried")
	require.JSONEq(t, string(final.Judge), string(x.Judge))
	require.Equal(t, final.Summ, x.Summary)

	// A second experiment, then the list, newest first, and filtered.
	req2 := w.request(map[string]any{
		"prompt_id": "svc", "experiment_id": "exp-svc-2", "baseline_version": 2,
		"test_queries": queries(1, ""), "evaluation": map[string]any{"llm_judge": false, "summary": false},
	})
	require.Equal(t, lab.TypeCompleted, w.ending(req2, time.Minute).Type())
	var list struct {
		Experiments []lab.Experiment `json:"experiments"`
	}
	require.NoError(t, w.call(lab.ListSubject, lab.ListRequest{}, &list))
	require.Len(t, list.Experiments, 2)
	require.Equal(t, "exp-svc-2", list.Experiments[0].ID)
	require.Equal(t, "exp-svc", list.Experiments[1].ID)
	require.Equal(t, 8, list.Experiments[1].CompletedTrials)
	require.Nil(t, list.Experiments[1].Report, "a list carries no reports")
	require.NoError(t, w.call(lab.ListSubject, lab.ListRequest{Limit: 1}, &list))
	require.Len(t, list.Experiments, 1)
	require.NoError(t, w.call(lab.ListSubject, lab.ListRequest{Status: "running"}, &list))
	require.Empty(t, list.Experiments)
	require.NoError(t, w.call(lab.ListSubject, lab.ListRequest{PromptID: "other"}, &list))
	require.Empty(t, list.Experiments)

	// Trials: all in order, a page, one version's failures, one query.
	var tr lab.TrialsReply
	require.NoError(t, w.call(lab.TrialsSubject, lab.TrialsRequest{ID: "exp-svc"}, &tr))
	require.Equal(t, 8, tr.Total)
	require.Len(t, tr.Trials, 8)
	first := tr.Trials[0]
	require.Equal(t, []int{1, 0, 0}, []int{first.Version, first.Query, first.Repetition})
	require.Equal(t, "q0", first.QueryText)
	require.Equal(t, `{"type": "answer", "message": "A poor reply to q0."}`, first.Response)
	require.False(t, first.Pass)
	require.NoError(t, w.call(lab.TrialsSubject, lab.TrialsRequest{ID: "exp-svc", Limit: 3, Offset: 6}, &tr))
	require.Equal(t, 8, tr.Total)
	require.Len(t, tr.Trials, 2)
	require.Equal(t, []int{2, 1, 0}, []int{tr.Trials[0].Version, tr.Trials[0].Query, tr.Trials[0].Repetition})
	require.NoError(t, w.call(lab.TrialsSubject, lab.TrialsRequest{ID: "exp-svc", Failed: true}, &tr))
	require.Equal(t, 4, tr.Total, "version 1's four short answers fail")
	for _, v := range tr.Trials {
		require.Equal(t, 1, v.Version)
	}
	q := 1
	require.NoError(t, w.call(lab.TrialsSubject, lab.TrialsRequest{ID: "exp-svc", Version: 2, Query: &q, MaxResponseBytes: 10}, &tr))
	require.Equal(t, 2, tr.Total)
	require.Equal(t, `{"type": "`, tr.Trials[0].Response)
	require.True(t, tr.Trials[0].Truncated)

	// Errors are replies.
	var serr *service.Error
	err := w.call(lab.GetSubject, lab.GetRequest{ID: "nope"}, &got)
	require.ErrorAs(t, err, &serr)
	require.Equal(t, service.CodeNotFound, serr.Code)
	err = w.call(lab.TrialsSubject, lab.TrialsRequest{ID: "nope"}, &tr)
	require.ErrorAs(t, err, &serr)
	require.Equal(t, service.CodeNotFound, serr.Code)
	err = w.call(lab.ListSubject, map[string]any{"limit": 500}, &list)
	require.ErrorAs(t, err, &serr)
	require.Equal(t, service.CodeBadRequest, serr.Code)
	err = w.call(lab.GetSubject, map[string]any{}, &got)
	require.ErrorAs(t, err, &serr)
	require.Equal(t, service.CodeBadRequest, serr.Code)
}
