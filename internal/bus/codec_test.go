package bus_test

import (
	"encoding/json"
	"testing"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/agentq/agentq/internal/bus"
)

func TestSubjectFor(t *testing.T) {
	tests := []struct {
		typ, tenant, want, err string
	}{
		{"agentq.tool.executed.v1", "acme", "tool.executed.acme", ""},
		{"agentq.quality.changed.v2", "_global", "quality.changed._global", ""},
		{"agentq.tool.executed.v1", "Acme", "", "tenant"},
		{"agentq.tool.executed.v1", "", "", "tenant"},
		{"agentq.tool.executed.v1", "a.b", "", "tenant"},
		{"agentq.tool.executed", "acme", "", "not agentq"},
		{"com.example.tool.executed.v1", "acme", "", "not agentq"},
		{"agentq.tool.executed.v1", "toolong-toolong-toolong-toolong-toolong-toolong-toolong-toolong-x", "", "tenant"},
	}
	for _, tc := range tests {
		t.Run(tc.typ+"/"+tc.tenant, func(t *testing.T) {
			got, err := bus.SubjectFor(tc.typ, tc.tenant)
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
}

func newToolEvent(t *testing.T, tenant string, data any) event.Event {
	t.Helper()
	ev, err := bus.NewEvent(bus.Type("tool", "executed"), tenant, "test", data)
	require.NoError(t, err)
	return ev
}

func TestEncodeDecodeRoundTrip(t *testing.T) {
	ev := newToolEvent(t, "acme", map[string]any{"tool_name": "search", "success": true})
	ev.SetExtension(bus.ExtCausation, "cause-1")
	m, err := bus.Encode(ev)
	require.NoError(t, err)
	require.Equal(t, "tool.executed.acme", m.Subject)
	require.Equal(t, ev.ID(), m.Header.Get("Nats-Msg-Id"))
	require.Equal(t, "application/json", m.Header.Get("content-type"))

	got, err := bus.Decode(m.Header, m.Data)
	require.NoError(t, err)
	require.Equal(t, ev.ID(), got.ID())
	require.Equal(t, ev.Type(), got.Type())
	require.Equal(t, ev.Source(), got.Source())
	require.Equal(t, "acme", bus.Tenant(got))
	require.Equal(t, "cause-1", bus.Causation(got))
	require.True(t, ev.Time().Equal(got.Time()))
	require.JSONEq(t, string(ev.Data()), string(got.Data()))
}

func TestDecodeContentModes(t *testing.T) {
	structured := []byte(`{"specversion":"1.0","id":"e1","source":"py-agent","type":"agentq.tool.executed.v1",
		"tenantid":"acme","datacontenttype":"application/json","data":{"tool_name":"x","success":false}}`)
	tests := []struct {
		name   string
		header nats.Header
		data   []byte
		err    string
	}{
		{"structured with content-type", nats.Header{"Content-Type": {"application/cloudevents+json; charset=utf-8"}}, structured, ""},
		{"structured without headers (binding 1.0)", nil, structured, ""},
		{"binary from another SDK, mixed-case headers", nats.Header{
			"Ce-Specversion": {"1.0"}, "Ce-Id": {"e1"}, "Ce-Source": {"py-agent"},
			"Ce-Type": {"agentq.tool.executed.v1"}, "Ce-Tenantid": {"acme"}, "Content-Type": {"application/json"},
		}, []byte(`{"tool_name":"x","success":false}`), ""},
		{"binary missing id", nats.Header{"ce-specversion": {"1.0"}, "ce-source": {"s"}, "ce-type": {"agentq.tool.executed.v1"}}, []byte(`{}`), "id"},
		{"binary bad time", nats.Header{"ce-specversion": {"1.0"}, "ce-id": {"1"}, "ce-source": {"s"}, "ce-type": {"t"}, "ce-time": {"yesterday"}}, []byte(`{}`), "ce-time"},
		{"garbage", nil, []byte("hello"), "structured"},
		{"structured missing type", nil, []byte(`{"specversion":"1.0","id":"1","source":"s"}`), "type"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ev, err := bus.Decode(tc.header, tc.data)
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, "e1", ev.ID())
			require.Equal(t, "acme", bus.Tenant(ev))
			var data map[string]any
			require.NoError(t, json.Unmarshal(ev.Data(), &data))
			require.Equal(t, "x", data["tool_name"])
		})
	}
}

func TestDeriveIDIsDeterministic(t *testing.T) {
	a := bus.DeriveID("scorer", "agentq.quality.changed.v1", "e1")
	require.Equal(t, a, bus.DeriveID("scorer", "agentq.quality.changed.v1", "e1"))
	require.NotEqual(t, a, bus.DeriveID("scorer", "agentq.quality.changed.v1", "e2"))
	require.NotEqual(t, a, bus.DeriveID("rater", "agentq.quality.changed.v1", "e1"))
	require.NotEqual(t, a, bus.DeriveID("scorer", "agentq.tool.rated.v1", "e1"))
}

func TestErrorClasses(t *testing.T) {
	base := errFixed("boom")
	require.False(t, bus.IsPermanent(base))
	require.True(t, bus.IsPermanent(bus.Permanent(base)))
	require.True(t, bus.IsPermanent(wrap(bus.Permanent(base))))
	require.True(t, bus.IsUnavailable(wrap(bus.Unavailable(base))))
	require.False(t, bus.IsUnavailable(bus.Permanent(base)))
	require.Nil(t, bus.Permanent(nil))
	require.Nil(t, bus.Unavailable(nil))
}

type errFixed string

func (e errFixed) Error() string { return string(e) }

func wrap(err error) error { return &wrapped{err} }

type wrapped struct{ err error }

func (w *wrapped) Error() string { return "wrapped: " + w.err.Error() }
func (w *wrapped) Unwrap() error { return w.err }
