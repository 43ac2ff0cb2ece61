package bus_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/agentq/agentq/internal/bus"
	"github.com/agentq/agentq/internal/testenv"
	"github.com/agentq/agentq/schemas"
)

// A dead letter that refers to its original instead of copying it (the
// original is too large to copy) expires no later than the original: with a
// max age on the streams, a reference never outlives what it refers to,
// even when the event waited in the stream before it was dead-lettered.
func TestRunnerByReferenceDeadLetterDoesNotOutliveItsOriginal(t *testing.T) {
	n := testenv.StartNATS(t)
	ctx := context.Background()
	require.NoError(t, bus.EnsureStreams(ctx, n.JS, bus.StreamOptions{MaxAge: 4 * time.Second, Duplicates: time.Second}))
	limit := int(n.NC.MaxPayload())
	m := nats.NewMsg("tool.executed.acme")
	m.Header.Set("ce-specversion", "1.0")
	m.Header.Set("ce-id", "huge-1")
	m.Header.Set("ce-source", "js-agent")
	m.Header.Set("ce-type", "agentq.tool.executed.v1")
	m.Header.Set("ce-tenantid", "acme")
	m.Data = []byte(`{"tool_name":"x","success":true,"output":"` + strings.Repeat("a", limit-300) + `"}`)
	ack, err := n.JS.PublishMsg(ctx, m)
	require.NoError(t, err)
	// The scenario, not a condition: the event waits two seconds in the
	// stream before a copy reads it, so its dead letter is younger than it.
	time.Sleep(2 * time.Second)
	launch(t, n, bus.Each(func(context.Context, *bus.Delivery) error { return nil }), bus.RunnerOptions{Consumer: "refs"})

	dlq, err := n.JS.Stream(ctx, bus.DLQName)
	require.NoError(t, err)
	var dl bus.DeadLetter
	testenv.Eventually(t, 10*time.Second, func() bool {
		raw, err := dlq.GetLastMsgForSubject(ctx, bus.DLQSubject("refs", "tool.executed.acme"))
		if err != nil {
			return false
		}
		dl = bus.ParseDeadLetter(raw.Header, raw.Data)
		return true
	}, "the event is dead-lettered")
	require.True(t, dl.ByReference)
	require.Equal(t, ack.Sequence, dl.StreamSeq)

	facts, err := n.JS.Stream(ctx, bus.StreamName)
	require.NoError(t, err)
	testenv.Eventually(t, 15*time.Second, func() bool {
		_, err := facts.GetMsg(ctx, ack.Sequence)
		return err != nil
	}, "the original expires with the stream's max age")
	info, err := dlq.Info(ctx)
	require.NoError(t, err)
	require.Zero(t, info.State.Msgs, "the dead letter is gone no later than its original")
}

// bus.Read, which a rebuild uses, gives the verdict a runner gives: a
// Nats-Msg-Id that is not "<tenant>:<id>" of the event is tenant_mismatch.
func TestReadChecksTheMessageID(t *testing.T) {
	n := testenv.StartNATS(t)
	ctx := context.Background()
	reg, err := schemas.Load()
	require.NoError(t, err)
	good := toolMsg(t, "acme", "good")
	other := toolMsg(t, "acme", "other")
	other.Header.Set("Nats-Msg-Id", "rival:"+other.Header.Get("ce-id"))
	wrong := toolMsg(t, "acme", "wrong")
	wrong.Header.Set("Nats-Msg-Id", "acme:"+good.Header.Get("ce-id")+"-x")
	bare := toolMsg(t, "acme", "bare")
	bare.Header.Del("Nats-Msg-Id")
	for _, m := range []*nats.Msg{good, other, wrong, bare} {
		publish(t, n.JS, m)
	}
	cons, err := n.JS.CreateOrUpdateConsumer(ctx, bus.StreamName, jetstream.ConsumerConfig{AckPolicy: jetstream.AckNonePolicy})
	require.NoError(t, err)
	mb, err := cons.Fetch(4, jetstream.FetchMaxWait(5*time.Second))
	require.NoError(t, err)
	var verdicts []string
	for m := range mb.Messages() {
		_, err := bus.Read(m, reg, 0)
		switch {
		case err == nil:
			verdicts = append(verdicts, "ok")
		default:
			verdicts = append(verdicts, bus.ReasonOf(err)+": "+err.Error())
		}
	}
	require.Len(t, verdicts, 4)
	require.Equal(t, "ok", verdicts[0])
	require.Equal(t, bus.ReasonTenantMismatch+`: Nats-Msg-Id "rival:`+other.Header.Get("ce-id")+`" is not "acme:`+other.Header.Get("ce-id")+`", the tenant and id of the event`, verdicts[1])
	require.True(t, strings.HasPrefix(verdicts[2], bus.ReasonTenantMismatch+": Nats-Msg-Id "), verdicts[2])
	require.Equal(t, "ok", verdicts[3], "no Nats-Msg-Id at all is accepted: not every publisher sets it")
}
