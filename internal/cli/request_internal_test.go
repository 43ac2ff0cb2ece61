package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentq/agentq/internal/bus"
	"github.com/agentq/agentq/internal/config"
	"github.com/agentq/agentq/internal/lab"
	"github.com/agentq/agentq/internal/testenv"
)

// A request follows the answers to itself and to the events it names,
// from the stream's end when it first follows: an earlier answer to the
// same cause, and results caused by other events, are not taken.
func TestRequestFollowsItsAnswers(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n := testenv.StartNATS(t)
	tenant := testenv.Tenant(t)
	e := Env{Getenv: func(k string) string {
		if k == "AGENTQ_NATS_URL" {
			return n.URL
		}
		return ""
	}, Stderr: io.Discard}

	r, err := newRequest(lab.TypeCancelled, tenant, cliSource, map[string]any{"experiment_id": "x-1"})
	require.NoError(t, err)
	require.NoError(t, r.check())
	require.Equal(t, tenant, r.tenant())
	require.Equal(t, cliSource, r.ev.Source())
	require.NoError(t, r.connect(e, config.Config{NATSURL: n.URL}))
	defer r.close()

	// The lab's results, published without a schema check: only their
	// causes and types matter here.
	pub := bus.NewPublisher(n.JS, nil)
	result := func(typ, causeID, reason string) {
		t.Helper()
		cause, err := bus.NewEvent(lab.TypeRequested, tenant, "test", map[string]any{})
		require.NoError(t, err)
		cause.SetID(causeID)
		res, err := bus.NewResult("lab", typ, cause, map[string]any{"reason": reason})
		require.NoError(t, err)
		res.SetID(bus.DeriveID("lab", tenant, typ, reason)) // one id a reason
		_, err = pub.Publish(ctx, res)
		require.NoError(t, err)
	}
	result(lab.TypeFailed, "request-1", "before the follow") // not taken: published before

	ans, err := r.follow(ctx, []string{lab.TypeRejected, lab.TypeCompleted, lab.TypeFailed}, "request-1")
	require.NoError(t, err)
	defer ans.Stop()
	_, err = r.publish(ctx)
	require.NoError(t, err)
	result(lab.TypeCompleted, "someone-else", "another cause")
	result(lab.TypeRejected, r.ev.ID(), "refused")
	result(lab.TypeCompleted, "request-1", "ended")

	ans.Wait(ctx, 20*time.Second, nil)
	require.Equal(t, 2, ans.Count())
	got := map[string]string{}
	for _, id := range []string{r.ev.ID(), "request-1"} {
		a, ok := ans.Get(id)
		require.True(t, ok, id)
		var d struct{ Reason string }
		require.NoError(t, json.Unmarshal(a.Data, &d))
		got[id] = a.Type + " " + d.Reason
	}
	require.Equal(t, map[string]string{
		r.ev.ID():   lab.TypeRejected + " refused",
		"request-1": lab.TypeCompleted + " ended",
	}, got)

	// A later follow reads from the same point: the answers are there.
	again, err := r.follow(ctx, []string{lab.TypeRejected})
	require.NoError(t, err)
	defer again.Stop()
	again.Wait(ctx, 20*time.Second, nil)
	a, ok := again.Get(r.ev.ID())
	require.True(t, ok)
	require.Equal(t, lab.TypeRejected, a.Type)

	// await with nobody to answer: no answer and no error once the
	// timeout has passed.
	r2, err := newRequest(lab.TypeCancelled, tenant, cliSource, map[string]any{"experiment_id": "x-2"})
	require.NoError(t, err)
	require.NoError(t, r2.connect(e, config.Config{NATSURL: n.URL}))
	defer r2.close()
	none, err := r2.await(ctx, lab.TypeCompleted, lab.TypeRejected, 50*time.Millisecond)
	require.NoError(t, err)
	require.Nil(t, none)
}

// A request that does not match its schema fails check.
func TestRequestCheck(t *testing.T) {
	r, err := newRequest(lab.TypeCancelled, "demo", cliSource, map[string]any{"reason": "no id"})
	require.NoError(t, err)
	require.ErrorContains(t, r.check(), "experiment_id")
}

// finish prints the JSON whatever the outcome, the line only on success,
// and returns the failure that sets the exit code.
func TestFinish(t *testing.T) {
	failed := errors.New("rejected: unknown_version")
	out := map[string]string{"outcome": "x"}
	tests := []struct {
		name    string
		asJSON  bool
		failure error
		stdout  string
	}{
		{"line on success", false, nil, "done\n"},
		{"no line on failure", false, failed, ""},
		{"JSON on success", true, nil, "{\n  \"outcome\": \"x\"\n}\n"},
		{"JSON on failure too", true, failed, "{\n  \"outcome\": \"x\"\n}\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var stdout bytes.Buffer
			err := finish(Env{Stdout: &stdout}, tc.asJSON, out, tc.failure, func(w io.Writer) { fmt.Fprintln(w, "done") })
			require.Equal(t, tc.failure, err)
			require.Equal(t, tc.stdout, stdout.String())
		})
	}
}
