package bus_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/agentq/agentq/internal/bus"
	"github.com/agentq/agentq/internal/testenv"
	"github.com/agentq/agentq/schemas"
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
	ev.SetSubject("run 7 / step 2")
	m, err := bus.Encode(ev)
	require.NoError(t, err)
	require.Equal(t, "tool.executed.acme", m.Subject)
	require.Equal(t, nats.Header{
		"ce-specversion": {"1.0"},
		"ce-id":          {ev.ID()},
		"ce-source":      {"test"},
		"ce-type":        {"agentq.tool.executed.v1"},
		"ce-subject":     {"run 7 / step 2"},
		"ce-time":        {ev.Time().UTC().Format("2006-01-02T15:04:05.999999999Z07:00")},
		"ce-dataschema":  {"https://agentq.dev/schemas/tool.executed.v1.json"},
		"ce-tenantid":    {"acme"},
		"ce-causationid": {"cause-1"},
		"content-type":   {"application/json"},
		"Nats-Msg-Id":    {"acme:" + ev.ID()},
	}, m.Header)

	got, err := bus.Decode(m.Header, m.Data)
	require.NoError(t, err)
	require.Equal(t, "1.0", got.SpecVersion())
	require.Equal(t, ev.ID(), got.ID())
	require.Equal(t, ev.Type(), got.Type())
	require.Equal(t, ev.Source(), got.Source())
	require.Equal(t, ev.Subject(), got.Subject())
	require.Equal(t, ev.DataSchema(), got.DataSchema())
	require.Equal(t, "acme", bus.Tenant(got))
	require.Equal(t, "cause-1", bus.Causation(got))
	require.True(t, ev.Time().Equal(got.Time()))
	require.JSONEq(t, string(ev.Data()), string(got.Data()))

	// The structured rendering decodes to the same event.
	b, err := bus.EncodeStructured(ev)
	require.NoError(t, err)
	sgot, err := bus.Decode(nats.Header{"content-type": {"application/cloudevents+json"}}, b)
	require.NoError(t, err)
	require.Equal(t, ev.ID(), sgot.ID())
	require.Equal(t, "acme", bus.Tenant(sgot))
	require.JSONEq(t, string(ev.Data()), string(sgot.Data()))
}

func TestMsgID(t *testing.T) {
	require.Equal(t, "acme:e1", bus.MsgID("acme", "e1"))
	require.Equal(t, "_global:a:b", bus.MsgID("_global", "a:b"))
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
		{"binary with a +json content type", nats.Header{
			"ce-specversion": {"1.0"}, "ce-id": {"e1"}, "ce-source": {"py-agent"},
			"ce-type": {"agentq.tool.executed.v1"}, "ce-tenantid": {"acme"}, "content-type": {"application/vnd.acme+json"},
		}, []byte(`{"tool_name":"x","success":false}`), ""},
		{"binary missing id", nats.Header{"ce-specversion": {"1.0"}, "ce-source": {"s"}, "ce-type": {"agentq.tool.executed.v1"}}, []byte(`{}`), "id"},
		{"binary bad time", nats.Header{"ce-specversion": {"1.0"}, "ce-id": {"1"}, "ce-source": {"s"}, "ce-type": {"t"}, "ce-time": {"yesterday"}}, []byte(`{}`), "ce-time"},
		{"garbage", nil, []byte("hello"), "structured event is not well-formed JSON"},
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

// binaryHeader is a valid binary-mode header set; with changes each case
// breaks one thing.
func binaryHeader(changes map[string]string) nats.Header {
	h := nats.Header{
		"ce-specversion": {"1.0"}, "ce-id": {"e1"}, "ce-source": {"agent/a"},
		"ce-type": {"agentq.tool.executed.v1"}, "ce-tenantid": {"acme"}, "content-type": {"application/json"},
	}
	for k, v := range changes {
		if v == "<delete>" {
			delete(h, k)
			continue
		}
		h[k] = []string{v}
	}
	return h
}

// structuredEvent is a valid structured event with fields replaced or
// added (raw JSON values).
func structuredEvent(changes map[string]string) []byte {
	fields := map[string]string{
		"specversion": `"1.0"`, "id": `"e1"`, "source": `"agent/a"`, "type": `"agentq.tool.executed.v1"`,
		"tenantid": `"acme"`, "datacontenttype": `"application/json"`, "data": `{"tool_name":"x","success":true}`,
	}
	for k, v := range changes {
		if v == "<delete>" {
			delete(fields, k)
			continue
		}
		fields[k] = v
	}
	var sb strings.Builder
	sb.WriteString("{")
	first := true
	for _, k := range []string{"specversion", "id", "source", "type", "tenantid", "causationid", "subject", "datacontenttype", "data_base64", "data", "big"} {
		v, ok := fields[k]
		if !ok {
			continue
		}
		if !first {
			sb.WriteString(",")
		}
		first = false
		fmt.Fprintf(&sb, "%q:%s", k, v)
	}
	sb.WriteString("}")
	return []byte(sb.String())
}

var validJSON = []byte(`{"tool_name":"x","success":true}`)

// TestDecodeRejects: every malformed message is a decode error whose text
// is one short line that starts with what is wrong.
func TestDecodeRejects(t *testing.T) {
	huge := strings.Repeat("x", 100_000)
	tests := []struct {
		name   string
		header nats.Header
		data   []byte
		want   string // the error's prefix
	}{
		{"binary specversion 2.0", binaryHeader(map[string]string{"ce-specversion": "2.0"}), validJSON, `ce-specversion "2.0" is not supported: agentq accepts CloudEvents 1.0 only`},
		{"binary specversion 0.3", binaryHeader(map[string]string{"ce-specversion": "0.3"}), validJSON, `ce-specversion "0.3" is not supported`},
		{"binary empty specversion", binaryHeader(map[string]string{"ce-specversion": ""}), validJSON, `ce-specversion "" is not supported`},
		{"structured specversion 2.0", nil, structuredEvent(map[string]string{"specversion": `"2.0"`}), `specversion "2.0" is not supported: agentq accepts CloudEvents 1.0 only`},
		{"structured specversion 0.3", nil, structuredEvent(map[string]string{"specversion": `"0.3"`}), `specversion "0.3" is not supported`},
		{"structured specversion a number", nil, structuredEvent(map[string]string{"specversion": `1.0`}), `specversion 1.0 is not supported`},
		{"structured without specversion", nil, structuredEvent(map[string]string{"specversion": "<delete>"}), `structured event has no specversion`},
		{"NUL in binary id", binaryHeader(map[string]string{"ce-id": "e\x001"}), validJSON, `ce-id has a control character (U+0000) at byte 1: "e\x001"`},
		{"NUL in structured id", nil, structuredEvent(map[string]string{"id": `"e\u00001"`}), `id has a control character (U+0000) at byte 1`},
		{"newline in id", binaryHeader(map[string]string{"ce-id": "e1\r\nNats-Msg-Id: x"}), validJSON, `ce-id has a control character (U+000D)`},
		{"id too long", binaryHeader(map[string]string{"ce-id": strings.Repeat("a", 257)}), validJSON, `ce-id is 257 bytes, over the 256-byte limit: "aaaa`},
		{"whitespace-only id", binaryHeader(map[string]string{"ce-id": "   "}), validJSON, `ce-id is only whitespace`},
		{"id with a leading space", binaryHeader(map[string]string{"ce-id": " e1"}), validJSON, `ce-id starts or ends with whitespace`},
		{"structured id with a trailing space", nil, structuredEvent(map[string]string{"id": `"e1 "`}), `id starts or ends with whitespace`},
		{"empty structured id", nil, structuredEvent(map[string]string{"id": `""`}), `invalid event: id: MUST be a non-empty string`},
		{"bidi override in id", binaryHeader(map[string]string{"ce-id": "e\u202e1"}), validJSON, `ce-id has an invisible formatting character (U+202E)`},
		{"noncharacter in type", binaryHeader(map[string]string{"ce-type": "agentq.tool.executed.v1\uFFFF"}), validJSON, `ce-type has a Unicode noncharacter (U+FFFF)`},
		{"invalid UTF-8 in id", binaryHeader(map[string]string{"ce-id": "e\xff1"}), validJSON, `ce-id is not valid UTF-8 (byte 1): "e\xff1"`},
		{"invalid UTF-8 in source", binaryHeader(map[string]string{"ce-source": "agent/\xc3"}), validJSON, `ce-source is not valid UTF-8 (byte 6)`},
		{"invalid UTF-8 in an unknown extension", binaryHeader(map[string]string{"ce-region": "eu\xfe"}), validJSON, `ce-region is not valid UTF-8 (byte 2)`},
		{"control character in an unknown extension", binaryHeader(map[string]string{"ce-region": "eu\n"}), validJSON, `ce-region has a control character (U+000A)`},
		{"tab in tenant", binaryHeader(map[string]string{"ce-tenantid": "ac\tme"}), validJSON, `ce-tenantid has a control character (U+0009)`},
		{"causationid too long", binaryHeader(map[string]string{"ce-causationid": strings.Repeat("c", 300)}), validJSON, `ce-causationid is 300 bytes, over the 256-byte limit`},
		{"subject too long", binaryHeader(map[string]string{"ce-subject": strings.Repeat("s", 1025)}), validJSON, `ce-subject is 1025 bytes, over the 1024-byte limit`},
		{"dataschema with DEL", binaryHeader(map[string]string{"ce-dataschema": "https://x/\x7f"}), validJSON, `ce-dataschema has a control character (U+007F)`},
		{"content-type with C1 control", binaryHeader(map[string]string{"content-type": "application/json\u0085"}), validJSON, `content-type has a control character (U+0085)`},
		{"structured tenantid not a string", nil, structuredEvent(map[string]string{"tenantid": `7`}), `tenantid is not a string`},
		{"structured tenantid with LINE SEPARATOR", nil, structuredEvent(map[string]string{"tenantid": `"ac\u2028me"`}), `tenantid has an invisible formatting character (U+2028)`},
		{"headers over 16 KiB", binaryHeader(map[string]string{"x-padding": strings.Repeat("p", 16<<10)}), validJSON, `headers are 16`},
		{"huge ce- header", binaryHeader(map[string]string{"ce-region": huge}), validJSON, `headers are 100`},
		{"header in two letter cases", func() nats.Header {
			h := binaryHeader(nil)
			h["Ce-Id"] = []string{"e2"}
			return h
		}(), validJSON, `header "ce-id" is given twice, in different letter cases`},
		{"header with two values", func() nats.Header {
			h := binaryHeader(nil)
			h["ce-id"] = []string{"e1", "e2"}
			return h
		}(), validJSON, `header "ce-id" is given 2 times`},
		{"invalid UTF-8 in JSON data", binaryHeader(nil), []byte("{\"tool_name\":\"x\xff\",\"success\":true}"), `data is not valid UTF-8 (byte 15)`},
		{"malformed JSON data", binaryHeader(nil), []byte(`{"tool_name":"x",`), `data is not well-formed JSON: unexpected end of JSON input`},
		{"malformed +json data", binaryHeader(map[string]string{"content-type": "application/vnd.acme+json"}), []byte(`tool_name=x`), `data is not well-formed JSON: invalid character 'o' in literal true (expecting 'r') (byte 2)`},
		{"malformed data without content type", binaryHeader(map[string]string{"content-type": "<delete>"}), []byte(`{"a":1}}`), `data is not well-formed JSON: invalid character '}' after top-level value (byte 8)`},
		{"whitespace data is not JSON", binaryHeader(nil), []byte(" \n"), `data is not well-formed JSON`},
		{"structured invalid UTF-8", nil, structuredEvent(map[string]string{"subject": "\"s\xff\""}), `structured event is not valid UTF-8 (byte`},
		{"structured base64 data that is not JSON", nil, structuredEvent(map[string]string{"data": "<delete>", "data_base64": `"bm90IGpzb24="`}), `data is not well-formed JSON`},
		{"structured attributes over 16 KiB", nil, structuredEvent(map[string]string{"big": `"` + strings.Repeat("b", 17_000) + `"`}), `attributes take 17`},
		{"structured array", nil, []byte(`[` + string(structuredEvent(nil)) + `]`), `structured event is a JSON array, not an object`},
		{"structured huge garbage", nil, []byte(huge), `structured event is not well-formed JSON: invalid character 'x'`},
		{"empty message", nil, nil, `empty message: neither ce- headers nor a structured event`},
		{"blank message", nats.Header{"Nats-Msg-Id": {"acme:e1"}}, []byte("\n"), `empty message`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := bus.Decode(tc.header, tc.data)
			require.Error(t, err)
			msg := err.Error()
			require.True(t, strings.HasPrefix(msg, tc.want), "error %q\nwant prefix %q", msg, tc.want)
			require.NotContains(t, msg, "\n", "one line")
			require.Less(t, len(msg), 400, "bounded: %q", msg)
		})
	}
}

// TestDecodeAccepts: what the rules leave alone.
func TestDecodeAccepts(t *testing.T) {
	tests := []struct {
		name   string
		header nats.Header
		data   []byte
		id     string
		want   string // data; "" means data itself
	}{
		{"binary data in a non-JSON content type", binaryHeader(map[string]string{"content-type": "application/octet-stream"}), []byte("\x00\xff\xfe"), "e1", ""},
		{"no data", binaryHeader(nil), nil, "e1", ""},
		{"id with inner spaces and non-Latin letters", binaryHeader(map[string]string{"ce-id": "Lauf 7 — Schritt ü/日本"}), validJSON, "Lauf 7 — Schritt ü/日本", ""},
		{"id of 256 bytes", binaryHeader(map[string]string{"ce-id": strings.Repeat("é", 128)}), validJSON, strings.Repeat("é", 128), ""},
		{"U+FFFD itself is a character", binaryHeader(map[string]string{"ce-id": "e\uFFFD"}), validJSON, "e\uFFFD", ""},
		{"structured without data", nil, structuredEvent(map[string]string{"data": "<delete>"}), "e1", "<none>"},
		{"structured text data", nil, structuredEvent(map[string]string{"datacontenttype": `"text/plain"`, "data": `"hello"`}), "e1", "hello"},
		{"headers just under the limit", binaryHeader(map[string]string{"x-padding": strings.Repeat("p", bus.MaxHeaderBytes-300)}), validJSON, "e1", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ev, err := bus.Decode(tc.header, tc.data)
			require.NoError(t, err)
			require.Equal(t, tc.id, ev.ID())
			require.Equal(t, "1.0", ev.SpecVersion())
			require.Equal(t, "acme", bus.Tenant(ev))
			switch tc.want {
			case "":
				require.Equal(t, string(tc.data), string(ev.Data()))
			case "<none>":
				require.Empty(t, ev.Data())
			default:
				require.Equal(t, tc.want, string(ev.Data()))
			}
		})
	}
}

func TestValidID(t *testing.T) {
	tests := []struct {
		id, err string
	}{
		{"0193a4c2-7d5e-7c1a-9f3b-2a1e5d6c7b8a", ""},
		{"scorer:quality.changed:e1", ""},
		{"run 7 step 2", ""},
		{"日本語", ""},
		{strings.Repeat("a", bus.MaxEventIDLen), ""},
		{"", "event id is empty"},
		{strings.Repeat("a", bus.MaxEventIDLen+1), "event id is 257 bytes, over the 256-byte limit"},
		{"a\x00b", "event id has a control character (U+0000) at byte 1"},
		{"a\x1bb", "event id has a control character (U+001B)"},
		{"a\xc3", "event id is not valid UTF-8 (byte 1)"},
		{"\t", "event id has a control character (U+0009)"},
		{" ", "event id is only whitespace"},
		{"\u00a0\u3000", "event id is only whitespace"},
		{"e1 ", "event id starts or ends with whitespace"},
		{"e\u200b1", "event id has an invisible formatting character (U+200B)"},
		{"\ufeffe1", "event id has an invisible formatting character (U+FEFF)"},
		{"e\U0010FFFE", "event id has a Unicode noncharacter (U+10FFFE)"},
	}
	// agentq's own ids are valid: time-ordered UUIDs and derived result ids.
	tests = append(tests, struct{ id, err string }{bus.DeriveID("scorer", "acme", "agentq.quality.changed.v1", "event:e1"), ""})
	for _, tc := range tests {
		t.Run(fmt.Sprintf("%q", tc.id), func(t *testing.T) {
			err := bus.ValidID(tc.id)
			if tc.err == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tc.err)
			require.True(t, strings.HasPrefix(err.Error(), "event id "), err.Error())
			require.NotContains(t, err.Error(), "\n")
		})
	}
}

// TestEncodeRefusesWhatDecodeRefuses: agentq never publishes a message its
// consumers would dead-letter as undecodable.
func TestEncodeRefusesWhatDecodeRefuses(t *testing.T) {
	tests := []struct {
		name   string
		change func(ev *event.Event)
		want   string
	}{
		{"header injection through the id", func(ev *event.Event) { ev.SetID("e1\r\nNats-Msg-Id: other") }, "id has a control character (U+000D)"},
		{"id too long", func(ev *event.Event) { ev.SetID(strings.Repeat("i", 300)) }, "id is 300 bytes"},
		{"specversion 0.3", func(ev *event.Event) { ev.SetSpecVersion("0.3") }, `specversion "0.3" is not supported`},
		{"data not JSON", func(ev *event.Event) { ev.DataEncoded = []byte("{") }, "data is not well-formed JSON"},
		{"data not UTF-8", func(ev *event.Event) { ev.DataEncoded = []byte("\"\xff\"") }, "data is not valid UTF-8"},
		{"attributes too big", func(ev *event.Event) { ev.SetExtension("big", strings.Repeat("b", bus.MaxHeaderBytes)) }, "attributes take"},
		{"extension with a newline", func(ev *event.Event) { ev.SetExtension("note", "a\nb") }, "note has a control character (U+000A)"},
		{"tenant with a space", func(ev *event.Event) { ev.SetExtension(bus.ExtTenant, "ac me") }, `tenant "ac me" does not match`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ev := newToolEvent(t, "acme", map[string]any{"tool_name": "x", "success": true})
			tc.change(&ev)
			_, err := bus.Encode(ev)
			require.ErrorContains(t, err, tc.want)
			require.NotContains(t, err.Error(), "\n")
		})
	}
}

// TestDuplicateWindowIsPerTenant: JetStream's duplicate window is
// stream-wide, so two tenants' events with the same id are both stored,
// while the same tenant's id again is a duplicate, on both publish paths.
func TestDuplicateWindowIsPerTenant(t *testing.T) {
	n := testenv.StartNATS(t)
	reg, err := schemas.Load()
	require.NoError(t, err)
	pub := bus.NewPublisher(n.JS, reg)
	ctx := context.Background()
	data := map[string]any{"tool_name": "x", "success": true}
	withID := func(tenant, id string) event.Event {
		ev := newToolEvent(t, tenant, data)
		ev.SetID(id)
		return ev
	}

	a, err := pub.Publish(ctx, withID("tenant-a", "same-id"))
	require.NoError(t, err)
	require.False(t, a.Duplicate)
	b, err := pub.Publish(ctx, withID("tenant-b", "same-id"))
	require.NoError(t, err)
	require.False(t, b.Duplicate, "another tenant's event with the same id must be stored")
	require.NotEqual(t, a.Sequence, b.Sequence)
	again, err := pub.Publish(ctx, withID("tenant-a", "same-id"))
	require.NoError(t, err)
	require.True(t, again.Duplicate, "the same tenant and id again is a duplicate")
	require.Equal(t, a.Sequence, again.Sequence)

	// The async path scopes the same way.
	fc, err := pub.PublishAsync(withID("tenant-c", "same-id"))
	require.NoError(t, err)
	fcDup, err := pub.PublishAsync(withID("tenant-c", "same-id"))
	require.NoError(t, err)
	require.NoError(t, pub.Flush(ctx))
	var c, cDup *jetstream.PubAck
	select {
	case c = <-fc.Ok():
	case err := <-fc.Err():
		t.Fatalf("async publish: %v", err)
	}
	select {
	case cDup = <-fcDup.Ok():
	case err := <-fcDup.Err():
		t.Fatalf("async publish: %v", err)
	}
	require.False(t, c.Duplicate)
	require.True(t, cDup.Duplicate)

	s, err := n.JS.Stream(ctx, bus.StreamName)
	require.NoError(t, err)
	info, err := s.Info(ctx)
	require.NoError(t, err)
	require.Equal(t, uint64(3), info.State.Msgs, "one message per tenant")
	for _, tenant := range []string{"tenant-a", "tenant-b", "tenant-c"} {
		m, err := s.GetLastMsgForSubject(ctx, "tool.executed."+tenant)
		require.NoError(t, err)
		require.Equal(t, tenant+":same-id", m.Header.Get("Nats-Msg-Id"))
		got, err := bus.Decode(m.Header, m.Data)
		require.NoError(t, err)
		require.Equal(t, "same-id", got.ID())
		require.Equal(t, tenant, bus.Tenant(got))
	}
}

func TestErrorClasses(t *testing.T) {
	base := errFixed("boom")
	require.False(t, bus.IsPermanent(base))
	require.True(t, bus.IsPermanent(bus.Permanent(base)))
	require.True(t, bus.IsPermanent(wrap(bus.Permanent(base))))
	require.True(t, bus.IsUnavailable(wrap(bus.Unavailable(base))))
	require.False(t, bus.IsUnavailable(bus.Permanent(base)))
	require.True(t, bus.IsDeferred(wrap(bus.Deferred(base))))
	require.False(t, bus.IsDeferred(bus.Unavailable(base)))
	require.False(t, bus.IsUnavailable(bus.Deferred(base)), "a deferral is not an outage")
	require.Nil(t, bus.Permanent(nil))
	require.Nil(t, bus.Unavailable(nil))
	require.Nil(t, bus.Deferred(nil))
}

type errFixed string

func (e errFixed) Error() string { return string(e) }

func wrap(err error) error { return &wrapped{err} }

type wrapped struct{ err error }

func (w *wrapped) Error() string { return "wrapped: " + w.err.Error() }
func (w *wrapped) Unwrap() error { return w.err }

func BenchmarkDecode(b *testing.B) {
	ev, err := bus.NewEvent(bus.Type("tool", "executed"), "acme", "agent/a", map[string]any{
		"tool_name": "web_search", "success": true, "latency_ms": 120, "output": strings.Repeat("result ", 100)})
	require.NoError(b, err)
	m, err := bus.Encode(ev)
	require.NoError(b, err)
	structured, err := bus.EncodeStructured(ev)
	require.NoError(b, err)
	b.Run("binary", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := bus.Decode(m.Header, m.Data); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("structured", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := bus.Decode(nil, structured); err != nil {
				b.Fatal(err)
			}
		}
	})
}
