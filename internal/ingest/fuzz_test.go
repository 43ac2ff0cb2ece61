package ingest

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentq/agentq/internal/auth"
	"github.com/agentq/agentq/schemas"
)

// Content modes FuzzRead sends its input in.
const (
	fuzzStructured = iota
	fuzzBinary
	fuzzBatch
	fuzzModes
)

var (
	fuzzOnce sync.Once
	fuzzH    *Handler
)

// fuzzHandler is an endpoint that reads and checks, without NATS: read
// never publishes.
func fuzzHandler(t *testing.T) *Handler {
	fuzzOnce.Do(func() {
		reg, err := schemas.Load()
		require.NoError(t, err)
		fuzzH = &Handler{schema: reg, o: Options{MaxPayload: 1 << 20, MaxBody: 16 << 20, MaxBatch: 1000, AckTimeout: time.Second}}
	})
	return fuzzH
}

// good is a batch member that is to be published.
func good(id string) string {
	return `{"specversion":"1.0","id":"` + id + `","source":"fuzz","type":"agentq.tool.executed.v1","data":{"tool_name":"web_search","success":true}}`
}

// FuzzRead sends its input to the endpoint's decoder as a structured
// event, as a binary event's data (with attr as its id), or as the middle
// member of a batch between two valid events. The decoder never panics;
// a refusal has a reason code and a one-line, bounded error; and in a
// batch that is a JSON array, the valid members are never refused
// whatever the member between them is. The seeds run with go test; fuzz
// with go test -run '^$' -fuzz FuzzRead ./internal/ingest/.
func FuzzRead(f *testing.F) {
	for _, seed := range []struct {
		mode uint8
		attr string
		body string
	}{
		{fuzzStructured, "", good("s-1")},
		{fuzzStructured, "", `{}`},
		{fuzzStructured, "", `null`},
		{fuzzStructured, "", `[]`},
		{fuzzStructured, "", `{"specversion":"0.3","id":"1","source":"x","type":"agentq.tool.executed.v1"}`},
		{fuzzStructured, "", `{"specversion":"1.0","id":"1","source":"x","type":"agentq.tool.executed.v1","data_base64":"!!"}`},
		{fuzzStructured, "", `{"specversion":"1.0","id":"1","source":"x","type":"agentq.tool.executed.v1","tenantid":{"a":1},"data":{}}`},
		{fuzzStructured, "", `{"specversion":"1.0","id":"1","source":"x","type":"agentq.tool.executed.v1","time":"yesterday"}`},
		{fuzzStructured, "", `{"specversion":"1.0","id":"1","source":"x","type":"agentq.tool.executed.v1","datacontenttype":"text/plain","data":"x"}`},
		{fuzzStructured, "", `{"specversion":"1.0","id":"1","source":"x","type":"agentq.tool.executed.v1","traceparent":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01","data":{}}`},
		{fuzzStructured, "", `{"specversion":"1.0","id":"1","source":"x","type":"agentq.quality.changed.v1","data":{}}`},
		{fuzzStructured, "", `{"specversion":"1.0","id":"` + strings.Repeat("é", 300) + `","source":"x","type":"agentq.x.v1"}`},
		{fuzzBinary, "call-1", `{"tool_name":"x","success":true}`},
		{fuzzBinary, "", `{"tool_name":"x","success":true}`},
		{fuzzBinary, "a\x00b", `{}`},
		{fuzzBinary, " padded ", `not json`},
		{fuzzBinary, "call-2", ``},
		{fuzzBatch, "", good("m-1")},
		{fuzzBatch, "", `42`},
		{fuzzBatch, "", `"a string"`},
		{fuzzBatch, "", `null`},
		{fuzzBatch, "", `[1,[2,{"x":3}]]`},
		{fuzzBatch, "", `{}`},
		{fuzzBatch, "", `{"specversion":"1.0","id":"m-2","source":"x","type":"agentq.tool.executed.v1","tenantid":"someone-else","data":{}}`},
		{fuzzBatch, "", `{"specversion":"1.0","id":"m-3","source":"x","type":"agentq.tool.executed.v1","data":` + strings.Repeat("[", 20000) + strings.Repeat("]", 20000) + `}`},
		{fuzzBatch, "", `1, 2`},
		{fuzzBatch, "", `]`},
	} {
		f.Add(seed.mode, seed.attr, []byte(seed.body))
	}
	f.Fuzz(func(t *testing.T, mode uint8, attr string, body []byte) {
		h := fuzzHandler(t)
		var req *http.Request
		switch mode % fuzzModes {
		case fuzzStructured:
			req = httptest.NewRequest(http.MethodPost, Path, bytes.NewReader(body))
			req.Header.Set("Content-Type", "application/cloudevents+json")
		case fuzzBinary:
			req = httptest.NewRequest(http.MethodPost, Path, bytes.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("traceparent", attr)
			req.Header.Set("tracestate", attr)
			req.Header.Set("ce-specversion", "1.0")
			req.Header.Set("ce-id", attr)
			req.Header.Set("ce-source", "fuzz")
			req.Header.Set("ce-type", "agentq.tool.executed.v1")
		case fuzzBatch:
			raw := "[" + good("good-first") + "," + string(body) + "," + good("good-last") + "]"
			req = httptest.NewRequest(http.MethodPost, Path, strings.NewReader(raw))
			req.Header.Set("Content-Type", "application/cloudevents-batch+json")
		}
		items, rerr := h.read(httptest.NewRecorder(), req, caller{grant: auth.Grant{Tenant: "fuzz", Scope: auth.Scope(attr)}})
		if rerr != nil {
			require.NotEmpty(t, rerr.name)
			require.NotContains(t, rerr.msg, "\n")
			require.LessOrEqual(t, len(rerr.msg), 1024)
			if mode%fuzzModes == fuzzBatch {
				// Only a body that is not one JSON array of events is
				// refused whole.
				require.False(t, json.Valid(body), "a batch refused whole for a member that is a JSON value: %s", rerr.msg)
			}
			return
		}
		for _, it := range items {
			if it.res.Status == "" {
				continue // to be published
			}
			require.Equal(t, StatusRejected, it.res.Status)
			require.NotEmpty(t, it.res.Reason)
			require.NotEmpty(t, it.res.Error)
			require.NotContains(t, it.res.Error, "\n")
			require.LessOrEqual(t, len(it.res.Error), 1024)
		}
		if mode%fuzzModes != fuzzBatch {
			require.Len(t, items, 1)
			return
		}
		if !json.Valid(body) {
			return // e.g. "1, 2": more members than one
		}
		require.Len(t, items, 3)
		for i, id := range map[int]string{0: "good-first", 2: "good-last"} {
			require.Empty(t, items[i].res.Status, "member %d refused because of the member after or before it: %+v", i, items[i].res)
			require.Equal(t, id, items[i].ev.ID())
			require.Equal(t, "fuzz", items[i].ev.Extensions()["tenantid"])
		}
	})
}
