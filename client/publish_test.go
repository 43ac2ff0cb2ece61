package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/agentq/agentq/client"
	"github.com/agentq/agentq/internal/bus"
	"github.com/agentq/agentq/internal/testenv"
)

// TestPublishEveryInputType: each input event type, valid, lands in the
// stream on <domain>.<event>.<tenant> as agentq's own publishers send it
// (ce- headers, tenant-scoped Nats-Msg-Id, the data as given); invalid,
// it is refused before it leaves with the field at fault.
func TestPublishEveryInputType(t *testing.T) {
	js, err := jetstream.New(connect(t, client.Config{Tenant: testenv.Tenant(t)}).Conn())
	require.NoError(t, err)
	stream, err := js.Stream(context.Background(), bus.StreamName)
	require.NoError(t, err)
	step, rating := 0, 0.0
	since := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		valid, invalid client.Event
		field          string
	}{
		{client.ToolExecuted{ToolName: "web_search", Success: true, RunID: "run-1", StepIdx: &step, LatencyMS: 120,
			ErrorClass: "none", Input: map[string]any{"query": "weather"}, Output: "sunny", LLMRating: &rating},
			client.ToolExecuted{ToolName: "web search", Success: true}, "/tool_name"},
		{client.ToolRegistered{Name: "web_search", Description: "Search the web", Server: "search-mcp", Tags: []string{"web"},
			InputSchema: map[string]any{"type": "object", "properties": map[string]any{"query": map[string]any{"type": "string"}}}},
			client.ToolRegistered{Name: "web_search"}, "/description"},
		{client.PromptCreated{ID: "greet", Type: "system", Name: "Greeting", Content: "Hello {{.Name}}", Version: 2,
			Parameters: []client.Param{{Name: "Name", Type: "string", Required: true}}, Tags: []string{"x"}, Author: "me",
			Metadata: map[string]any{"owner": "team"}},
			client.PromptCreated{ID: "greet", Type: "poem", Name: "Greeting", Content: "Hello"}, "/type"},
		{client.PromptUsed{PromptID: "greet", Version: 2, Success: false, StepIdx: &step, Input: "hi", Output: "hello"},
			client.PromptUsed{Success: true}, "/prompt_hash or /prompt_id and /version"},
		{client.FeedbackSubmitted{Target: "tool", ToolName: "web_search", Rating: &rating, Thumbs: "down", UserID: "u1", Comment: "wrong city"},
			client.FeedbackSubmitted{Target: "tool", ToolName: "web_search", Thumbs: "sideways"}, "/thumbs"},
		{client.ExperimentRequested{PromptID: "greet", TestQueries: []client.TestQuery{{Query: "say hi", Assert: []client.Assertion{{Type: "contains", Value: "hi"}}}},
			CandidateVersions: []int{2}, Repetitions: 2, Temperature: &rating,
			Evaluation: &client.Evaluation{LLMJudge: new(false), Rubric: []client.Criterion{{Name: "Helpfulness", Weight: 1}}},
			Auto:       &client.AutoExperiment{CandidateCount: 2, Since: &since}},
			client.ExperimentRequested{PromptID: "greet", TestQueries: []client.TestQuery{{Query: "say hi"}}, Repetitions: 99}, "/repetitions"},
		{client.ExperimentCancelled{ExperimentID: "exp-1", Reason: "wrong model", CancelledBy: "ops"},
			client.ExperimentCancelled{}, "/experiment_id"},
		{client.PromptActivated{PromptID: "greet", Version: 2, Label: "production", ActivatedBy: "ops", Reason: "better"},
			client.PromptActivated{PromptID: "greet", Version: 2, Label: "Prod"}, "/label"},
		{client.ToolReleased{ToolName: "web_search", Reason: "fixed", ReleasedBy: "ops"},
			client.ToolReleased{ToolName: ""}, "/tool_name"},
		{client.RawEvent{Type: "agentq.tool.released.v1", Data: json.RawMessage(`{"tool_name":"raw_tool"}`)},
			client.RawEvent{Type: "agentq.tool.released.v1", Data: json.RawMessage(`{"tool_name":7}`)}, "/tool_name"},
	} {
		t.Run(tc.valid.EventType(), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			ten := testenv.Tenant(t) // a subject of the case's own
			c := connect(t, client.Config{Tenant: ten, Source: "agent/test"})
			subject, err := bus.SubjectFor(tc.valid.EventType(), ten)
			require.NoError(t, err)

			_, err = c.Publish(ctx, tc.invalid)
			var ve *client.ValidationError
			require.True(t, errors.As(err, &ve), "want a *ValidationError, got %v", err)
			require.Equal(t, tc.valid.EventType(), ve.Type)
			require.Equal(t, tc.field, ve.Field(), "%v", err)
			_, err = stream.GetLastMsgForSubject(ctx, subject)
			require.ErrorIs(t, err, jetstream.ErrMsgNotFound, "nothing of the invalid event was sent")

			p, err := c.Publish(ctx, tc.valid)
			require.NoError(t, err)
			ack, err := p.Wait(ctx)
			require.NoError(t, err)
			require.Equal(t, client.Ack{ID: p.ID, Stream: bus.StreamName, Sequence: ack.Sequence}, ack)
			m, err := stream.GetLastMsgForSubject(ctx, subject)
			require.NoError(t, err)
			require.Equal(t, ack.Sequence, m.Sequence)
			require.Equal(t, ten+":"+p.ID, m.Header.Get("Nats-Msg-Id"))
			ev, err := bus.Decode(m.Header, m.Data)
			require.NoError(t, err)
			require.Equal(t, p.ID, ev.ID())
			require.Equal(t, tc.valid.EventType(), ev.Type())
			require.Equal(t, ten, bus.Tenant(ev))
			require.Equal(t, "agent/test", ev.Source())
			require.Equal(t, bus.SchemaURL(tc.valid.EventType()), ev.DataSchema())
			require.Equal(t, "application/json", ev.DataContentType())
			require.WithinDuration(t, time.Now(), ev.Time(), time.Minute)
			want, err := json.Marshal(tc.valid)
			require.NoError(t, err)
			require.JSONEq(t, string(want), string(ev.Data()))
		})
	}
}

// TestPublishOptionsAndDuplicates: options set the attributes; the same
// event id again is acked as a duplicate and stored once.
func TestPublishOptionsAndDuplicates(t *testing.T) {
	ctx := context.Background()
	ten := testenv.Tenant(t)
	c := connect(t, client.Config{Tenant: ten})
	at := time.Date(2026, 11, 2, 3, 4, 5, 0, time.UTC)
	ev := client.ToolExecuted{ToolName: "dup_tool", Success: true}
	traceparent := "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	opts := []client.PublishOption{client.WithEventID("call-42"), client.WithSource("agent/x"), client.WithTime(at), client.WithSubject("step 3"),
		client.WithTrace(traceparent, "vendor=x")}
	first, err := c.Publish(ctx, ev, opts...)
	require.NoError(t, err)
	a1, err := first.Wait(ctx)
	require.NoError(t, err)
	require.False(t, a1.Duplicate)
	again, err := c.Publish(ctx, ev, opts...)
	require.NoError(t, err)
	a2, err := again.Wait(ctx)
	require.NoError(t, err)
	require.Equal(t, client.Ack{ID: "call-42", Stream: bus.StreamName, Sequence: a1.Sequence, Duplicate: true}, a2)

	js, err := jetstream.New(c.Conn())
	require.NoError(t, err)
	stream, err := js.Stream(ctx, bus.StreamName)
	require.NoError(t, err)
	m, err := stream.GetLastMsgForSubject(ctx, "tool.executed."+ten)
	require.NoError(t, err)
	e, err := bus.Decode(m.Header, m.Data)
	require.NoError(t, err)
	require.Equal(t, "call-42", e.ID())
	require.Equal(t, "agent/x", e.Source())
	require.Equal(t, at, e.Time())
	require.Equal(t, "step 3", e.Subject())
	require.Equal(t, bus.TraceContext{Parent: traceparent, State: "vendor=x"}, bus.Trace(e))

	// An id the consumers could not decode is refused here, and so is a
	// traceparent agentq would ignore.
	_, err = c.Publish(ctx, ev, client.WithEventID(strings.Repeat("x", 257)))
	var ve *client.ValidationError
	require.ErrorAs(t, err, &ve)
	require.Equal(t, "id", ve.Field(), "%v", err)
	_, err = c.Publish(ctx, ev, client.WithTrace("00-trace", ""))
	require.ErrorAs(t, err, &ve)
	require.Equal(t, "traceparent", ve.Field(), "%v", err)
	// No trace (an OpenTelemetry carrier without a span): nothing is set.
	untraced, err := c.Publish(ctx, ev, client.WithEventID("call-43"), client.WithTrace("", ""))
	require.NoError(t, err)
	_, err = untraced.Wait(ctx)
	require.NoError(t, err)
	m, err = stream.GetLastMsgForSubject(ctx, "tool.executed."+ten)
	require.NoError(t, err)
	e, err = bus.Decode(m.Header, m.Data)
	require.NoError(t, err)
	require.Equal(t, "call-43", e.ID())
	require.NotContains(t, e.Extensions(), bus.ExtTraceParent)
}

// TestPublishWindowAndFlush: at most MaxPending events await their ack;
// Publish waits for room (here until its context ends, as the acks are
// held back); Flush waits for every ack, and reports one that never came
// as a *TimeoutError.
func TestPublishWindowAndFlush(t *testing.T) {
	g := startGate(t)
	c := connect(t, client.Config{URL: g.URL(), Tenant: testenv.Tenant(t), MaxPending: 3})
	ctx := context.Background()

	// Many events through a small window: each acked, Flush clean.
	var pending []*client.Pending
	for i := range 50 {
		p, err := c.Publish(ctx, client.ToolExecuted{ToolName: "window_tool", Success: true, LatencyMS: int64(i + 1)})
		require.NoError(t, err)
		pending = append(pending, p)
	}
	require.NoError(t, c.Flush(ctx))
	seqs := map[uint64]bool{}
	for _, p := range pending {
		select {
		case <-p.Done():
		default:
			t.Fatalf("%s not done after Flush", p.ID)
		}
		ack, err := p.Result()
		require.NoError(t, err)
		require.False(t, ack.Duplicate)
		seqs[ack.Sequence] = true
	}
	require.Len(t, seqs, 50, "50 events stored")

	// Acks held back: three events fill the window, the fourth waits
	// for room until its context ends, as does Flush.
	g.Shut()
	var held []*client.Pending
	for range 3 {
		p, err := c.Publish(ctx, client.ToolExecuted{ToolName: "window_tool", Success: false})
		require.NoError(t, err)
		held = append(held, p)
	}
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	_, err := c.Publish(short, client.ToolExecuted{ToolName: "window_tool", Success: false})
	cancel()
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Contains(t, err.Error(), "3 events awaiting their ack, no room")
	short, cancel = context.WithTimeout(ctx, 200*time.Millisecond)
	err = c.Flush(short)
	cancel()
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Contains(t, err.Error(), "3 events still awaiting their ack")

	// The acks arrive: the window empties.
	g.Open()
	require.NoError(t, c.Flush(ctx))
	for _, p := range held {
		_, err := p.Result()
		require.NoError(t, err)
	}
	p, err := c.Publish(ctx, client.ToolExecuted{ToolName: "window_tool", Success: true})
	require.NoError(t, err)
	_, err = p.Wait(ctx)
	require.NoError(t, err)
}

// TestPublishErrors: each way an event can fail after it left, typed.
func TestPublishErrors(t *testing.T) {
	ctx := context.Background()

	t.Run("no ack in time", func(t *testing.T) {
		g := startGate(t)
		c := connect(t, client.Config{URL: g.URL(), Tenant: testenv.Tenant(t), AckTimeout: 300 * time.Millisecond})
		g.Shut()
		p, err := c.Publish(ctx, client.ToolExecuted{ToolName: "slow_tool", Success: true})
		require.NoError(t, err)
		err = c.Flush(ctx)
		var te *client.TimeoutError
		require.ErrorAs(t, err, &te, "%v", err)
		require.Equal(t, "publish agentq.tool.executed.v1 "+p.ID, te.Op)
		require.Equal(t, 300*time.Millisecond, te.After)
		require.ErrorIs(t, err, jetstream.ErrAsyncPublishTimeout)
		_, perr := p.Result()
		require.ErrorAs(t, perr, &te)
		require.NoError(t, c.Flush(ctx), "Flush reports a failure once")
		g.Open()
	})

	// A server of its own, whose stream refuses large messages, then has
	// no stream at all.
	n := testenv.StartNATS(t)
	c := connect(t, client.Config{URL: n.URL, Tenant: testenv.Tenant(t)})
	info, err := n.JS.Stream(ctx, bus.StreamName)
	require.NoError(t, err)
	cfg := info.CachedInfo().Config
	cfg.MaxMsgSize = 512
	_, err = n.JS.UpdateStream(ctx, cfg)
	require.NoError(t, err)

	t.Run("refused by JetStream", func(t *testing.T) {
		p, err := c.Publish(ctx, client.ToolExecuted{ToolName: "big_tool", Success: true, Output: strings.Repeat("x", 2000)})
		require.NoError(t, err)
		_, err = p.Wait(ctx)
		var re *client.RefusedError
		require.ErrorAs(t, err, &re, "%v", err)
		require.Equal(t, "agentq.tool.executed.v1", re.Type)
		require.Equal(t, p.ID, re.ID)
		require.Equal(t, uint16(jetstream.JSErrCodeStreamMessageExceedsMaximum), re.ErrCode, "%v", err)
		require.Contains(t, re.Error(), "message size exceeds maximum allowed")
		var api *jetstream.APIError
		require.ErrorAs(t, err, &api, "the JetStream error is wrapped")
		require.ErrorAs(t, c.Flush(ctx), &re)
	})

	t.Run("no stream", func(t *testing.T) {
		require.NoError(t, n.JS.DeleteStream(ctx, bus.StreamName))
		p, err := c.Publish(ctx, client.ToolReleased{ToolName: "lost_tool"})
		require.NoError(t, err)
		_, err = p.Wait(ctx)
		var ue *client.UnavailableError
		require.ErrorAs(t, err, &ue, "%v", err)
		require.ErrorIs(t, err, jetstream.ErrNoStreamResponse)
		require.ErrorAs(t, c.Flush(ctx), &ue)
	})

	t.Run("closed before the ack", func(t *testing.T) {
		g := startGate(t)
		c := connect(t, client.Config{URL: g.URL(), Tenant: testenv.Tenant(t)})
		g.Shut()
		p, err := c.Publish(ctx, client.ToolExecuted{ToolName: "closing_tool", Success: true})
		require.NoError(t, err)
		c.Close()
		_, err = p.Wait(ctx)
		var te *client.TimeoutError
		require.ErrorAs(t, err, &te, "%v", err)
		require.ErrorIs(t, err, jetstream.ErrJetStreamPublisherClosed)
		g.Open()
	})

	t.Run("closed", func(t *testing.T) {
		c2 := connect(t, client.Config{URL: n.URL, Tenant: testenv.Tenant(t)})
		c2.Close()
		_, err := c2.Publish(ctx, client.ToolReleased{ToolName: "x"})
		require.ErrorIs(t, err, client.ErrClosed)
	})
}
