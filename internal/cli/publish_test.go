package cli_test

import (
	"context"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentq/agentq/internal/bus"
	"github.com/agentq/agentq/internal/testenv"
)

// publish --traceparent/--tracestate put the W3C trace context on every
// event it publishes, as the CloudEvents distributed-tracing extension;
// a malformed traceparent, or a tracestate alone, is a usage error.
func TestPublishTrace(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n := testenv.StartNATS(t)
	env := map[string]string{"AGENTQ_NATS_URL": n.URL}
	tenant := testenv.Tenant(t)
	const (
		parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
		state  = "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7"
	)
	stream, err := n.JS.Stream(ctx, bus.StreamName)
	require.NoError(t, err)
	traceAt := func(seq uint64) bus.TraceContext {
		t.Helper()
		m, err := stream.GetMsg(ctx, seq)
		require.NoError(t, err)
		ev, err := bus.Decode(m.Header, m.Data)
		require.NoError(t, err)
		return bus.Trace(ev)
	}
	seqOf := func(out string) uint64 {
		t.Helper()
		m := regexp.MustCompile(`seq=(\d+)`).FindStringSubmatch(out)
		require.NotNil(t, m, out)
		seq, err := strconv.ParseUint(m[1], 10, 64)
		require.NoError(t, err)
		return seq
	}
	data := `{"tool_name":"web_search","success":true}`

	tests := []struct {
		name  string
		flags []string
		want  bus.TraceContext
	}{
		{"both", []string{"--traceparent", parent, "--tracestate", state}, bus.TraceContext{Parent: parent, State: state}},
		{"traceparent only", []string{"--traceparent", parent}, bus.TraceContext{Parent: parent}},
		{"none", nil, bus.TraceContext{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"publish", "--tenant", tenant, "--type", "tool.executed", "--data", data, "--repeat", "2"}, tc.flags...)
			code, out, errOut := run(ctx, env, "", args...)
			require.Equal(t, 0, code, errOut)
			last := seqOf(out)
			require.Equal(t, tc.want, traceAt(last), "the last event")
			require.Equal(t, tc.want, traceAt(last-1), "the first of --repeat 2")
		})
	}

	usage := []struct {
		flags []string
		first string
	}{
		{[]string{"--traceparent", "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01"},
			`agentq publish: --traceparent "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01" is not a W3C traceparent: version-traceid-parentid-flags in lower-case hex, e.g. 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01`},
		{[]string{"--traceparent", "00-00000000000000000000000000000000-00f067aa0ba902b7-01"},
			`agentq publish: --traceparent "00-00000000000000000000000000000000-00f067aa0ba902b7-01" is not a W3C traceparent: version-traceid-parentid-flags in lower-case hex, e.g. 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01`},
		{[]string{"--tracestate", state}, "agentq publish: --tracestate goes with --traceparent"},
	}
	before, err := stream.Info(ctx)
	require.NoError(t, err)
	for _, tc := range usage {
		args := append([]string{"publish", "--tenant", tenant, "--type", "tool.executed", "--data", data}, tc.flags...)
		code, out, errOut := run(ctx, env, "", args...)
		require.Equal(t, 2, code, errOut)
		require.Empty(t, out)
		first, rest, _ := strings.Cut(errOut, "\n")
		require.Equal(t, tc.first, first)
		require.Contains(t, rest, "-traceparent")
	}
	after, err := stream.Info(ctx)
	require.NoError(t, err)
	require.Equal(t, before.State.Msgs, after.State.Msgs, "nothing published on a usage error")
}
