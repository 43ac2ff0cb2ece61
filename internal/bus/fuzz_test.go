package bus

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/nats-io/nats.go"
)

// Modes of FuzzDecode: how the fuzzed values become a message.
const (
	fuzzBinary       uint8 = iota // ce- headers from the fields, payload as data
	fuzzStructured                // payload is the message, ct its content-type
	fuzzHeaderless                // payload is the message, no headers at all
	fuzzStructuredOf              // a structured event built from the fields
	fuzzModes
)

// decodeSeed is one seed of FuzzDecode.
type decodeSeed struct {
	mode                                     uint8
	specversion, id, typ, source, tenant, ct string
	payload                                  []byte
}

func (s decodeSeed) args() []any {
	return []any{s.mode, s.specversion, s.id, s.typ, s.source, s.tenant, s.ct, s.payload}
}

const (
	seedType = "agentq.tool.executed.v1"
	seedData = `{"tool_name":"web_search","success":true}`
)

var seedStructured = []byte(`{"specversion":"1.0","id":"e1","source":"py-agent","type":"agentq.tool.executed.v1",` +
	`"tenantid":"acme","datacontenttype":"application/json","data":{"tool_name":"web_search","success":true}}`)

// decodeCorpus is written to testdata/fuzz/FuzzDecode by
// `go test ./internal/bus/ -run TestFuzzCorpus -update-corpus`; TestFuzzCorpus checks that
// the committed files match it.
var decodeCorpus = map[string]decodeSeed{
	"valid-binary":           {fuzzBinary, "1.0", "e1", seedType, "agent/a", "acme", "application/json", []byte(seedData)},
	"valid-structured":       {fuzzStructured, "", "", "", "", "", "application/cloudevents+json", seedStructured},
	"valid-structured-of":    {fuzzStructuredOf, "1.0", "e1", seedType, "agent/a", "acme", "application/json", []byte(seedData)},
	"specversion-2.0":        {fuzzBinary, "2.0", "e1", seedType, "agent/a", "acme", "application/json", []byte(seedData)},
	"specversion-0.3":        {fuzzBinary, "0.3", "e1", seedType, "agent/a", "acme", "application/json", []byte(seedData)},
	"structured-0.3":         {fuzzHeaderless, "", "", "", "", "", "", bytes.Replace(seedStructured, []byte(`"1.0"`), []byte(`"0.3"`), 1)},
	"nul-in-id":              {fuzzBinary, "1.0", "e\x001", seedType, "agent/a", "acme", "application/json", []byte(seedData)},
	"invalid-utf8-data":      {fuzzBinary, "1.0", "e1", seedType, "agent/a", "acme", "application/json", []byte("{\"tool_name\":\"\xff\xfe\",\"success\":true}")},
	"huge-header":            {fuzzBinary, "1.0", "e1", seedType, strings.Repeat("s", MaxHeaderBytes), "acme", "application/json", []byte(seedData)},
	"headerless-json":        {fuzzHeaderless, "", "", "", "", "", "", seedStructured},
	"headerless-data-only":   {fuzzHeaderless, "", "", "", "", "", "", []byte(seedData)},
	"malformed-json-data":    {fuzzBinary, "1.0", "e1", seedType, "agent/a", "acme", "", []byte(`{"tool_name":`)},
	"base64-data":            {fuzzStructured, "", "", "", "", "", "application/cloudevents+json", []byte(`{"specversion":"1.0","id":"e1","source":"s","type":"agentq.tool.executed.v1","tenantid":"acme","data_base64":"eyJ0b29sX25hbWUiOiJ4Iiwic3VjY2VzcyI6dHJ1ZX0="}`)},
	"text-data":              {fuzzBinary, "1.0", "e1", seedType, "agent/a", "acme", "text/plain; charset=utf-8", []byte("\x00 not json \xff")},
	"source-to-canonicalize": {fuzzBinary, "1.0", "e1", seedType, "a b/%41?x#y", "acme", "application/json", []byte(seedData)},
	"empty":                  {fuzzBinary, "", "", "", "", "", "", nil},
}

var updateCorpus = flag.Bool("update-corpus", false, "rewrite testdata/fuzz/FuzzDecode from decodeCorpus")

// FuzzDecode feeds Decode binary, structured and header-less messages and
// checks that it never panics, that its errors are one bounded line and
// deterministic, and that whatever it accepts is a valid CloudEvents 1.0
// event with a valid id that survives Encode and Decode again unchanged.
func FuzzDecode(f *testing.F) {
	for _, s := range decodeCorpus {
		f.Add(s.mode, s.specversion, s.id, s.typ, s.source, s.tenant, s.ct, s.payload)
	}
	f.Fuzz(func(t *testing.T, mode uint8, specversion, id, typ, source, tenant, ct string, payload []byte) {
		h, data := fuzzMessage(mode%fuzzModes, specversion, id, typ, source, tenant, ct, payload)
		ev, err := decode(h, data) // not Decode: its recover would hide a panic
		_, err2 := decode(h, data)
		if (err == nil) != (err2 == nil) || (err != nil && err.Error() != err2.Error()) {
			t.Fatalf("not deterministic: %v, then %v", err, err2)
		}
		if err != nil {
			checkErrorText(t, err)
			return
		}
		if err := ev.Validate(); err != nil {
			t.Fatalf("decoded event is invalid: %v", err)
		}
		if ev.SpecVersion() != specVersion {
			t.Fatalf("decoded specversion %q", ev.SpecVersion())
		}
		if err := ValidID(ev.ID()); err != nil {
			t.Fatalf("decoded id %q: %v", ev.ID(), err)
		}

		// Encode needs an agentq type and tenant to derive the subject;
		// the headers it would send are built for every decoded event.
		hs, err := attributeHeaders(ev)
		if err != nil {
			t.Fatalf("decoded event cannot be encoded: %v", err)
		}
		m := nats.NewMsg("fuzz")
		for _, kv := range hs {
			m.Header.Set(kv[0], kv[1])
		}
		m.Data = ev.Data()
		if _, err := Subject(ev); err == nil {
			em, err := Encode(ev)
			if err != nil {
				t.Fatalf("Encode of a decoded event: %v", err)
			}
			if !equalHeader(em.Header, m.Header) || !bytes.Equal(em.Data, m.Data) {
				t.Fatalf("Encode differs from attributeHeaders: %v vs %v", em.Header, m.Header)
			}
		}
		back, err := decode(m.Header, m.Data)
		if err != nil {
			t.Fatalf("re-decoding the encoded event: %v\nheaders %q", err, m.Header)
		}
		for _, c := range []struct{ what, a, b string }{
			{"id", ev.ID(), back.ID()},
			{"type", ev.Type(), back.Type()},
			{"source", ev.Source(), back.Source()},
			{"tenant", Tenant(ev), Tenant(back)},
			{"causation", Causation(ev), Causation(back)},
			{"subject", ev.Subject(), back.Subject()},
			{"datacontenttype", ev.DataContentType(), back.DataContentType()},
			{"data", string(ev.Data()), string(back.Data())},
		} {
			if c.a != c.b {
				t.Fatalf("%s changed on the round trip: %q -> %q", c.what, c.a, c.b)
			}
		}
		if !ev.Time().Equal(back.Time()) {
			t.Fatalf("time changed on the round trip: %v -> %v", ev.Time(), back.Time())
		}
	})
}

// fuzzMessage builds the message FuzzDecode decodes.
func fuzzMessage(mode uint8, specversion, id, typ, source, tenant, ct string, payload []byte) (nats.Header, []byte) {
	switch mode {
	case fuzzStructured:
		return nats.Header{"content-type": {ct}}, payload
	case fuzzHeaderless:
		return nil, payload
	case fuzzStructuredOf:
		ev := map[string]any{"specversion": specversion, "id": id, "type": typ, "source": source, "tenantid": tenant}
		if ct != "" {
			ev["datacontenttype"] = ct
		}
		if json.Valid(payload) {
			ev["data"] = json.RawMessage(payload)
		} else {
			ev["data_base64"] = payload
		}
		b, err := json.Marshal(ev)
		if err != nil {
			return nil, payload
		}
		return nats.Header{"content-type": {structuredCT}}, b
	default:
		h := nats.Header{}
		for k, v := range map[string]string{"ce-specversion": specversion, "ce-id": id, "ce-type": typ,
			"ce-source": source, "ce-tenantid": tenant, "content-type": ct} {
			if v != "" {
				h.Set(k, v)
			}
		}
		return h, payload
	}
}

// checkErrorText enforces the contract of Decode's errors.
func checkErrorText(t *testing.T, err error) {
	t.Helper()
	msg := err.Error()
	switch {
	case msg == "":
		t.Fatal("empty error text")
	case strings.ContainsAny(msg, "\r\n"):
		t.Fatalf("error text has a line break: %q", msg)
	case !utf8.ValidString(msg):
		t.Fatalf("error text is not UTF-8: %q", msg)
	case len(msg) > 1024:
		t.Fatalf("error text of %d bytes: %.200q", len(msg), msg)
	}
}

func equalHeader(a, b nats.Header) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if len(b[k]) != len(v) || (len(v) > 0 && b[k][0] != v[0]) {
			return false
		}
	}
	return true
}

// TestFuzzCorpus keeps testdata/fuzz/FuzzDecode equal to decodeCorpus;
// -update-corpus rewrites it.
func TestFuzzCorpus(t *testing.T) {
	dir := filepath.Join("testdata", "fuzz", "FuzzDecode")
	if *updateCorpus {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	mustDecode := map[string]bool{"valid-binary": true, "valid-structured": true, "valid-structured-of": true,
		"headerless-json": true, "base64-data": true, "text-data": true, "source-to-canonicalize": true}
	for name, s := range decodeCorpus {
		h, data := fuzzMessage(s.mode, s.specversion, s.id, s.typ, s.source, s.tenant, s.ct, s.payload)
		if _, err := decode(h, data); (err == nil) != mustDecode[name] {
			t.Errorf("seed %s: decode error %v, want one: %v", name, err, !mustDecode[name])
		}
		want := corpusFile(s.args()...)
		path := filepath.Join(dir, name)
		if *updateCorpus {
			if err := os.WriteFile(path, want, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		got, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%v (run go test ./internal/bus/ -run TestFuzzCorpus -update-corpus)", err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s is stale: run go test ./internal/bus/ -run TestFuzzCorpus -update-corpus", path)
		}
	}
}

// corpusFile renders values in the format of Go's fuzzing corpus
// ("go test fuzz v1"), for the types FuzzDecode takes.
func corpusFile(vals ...any) []byte {
	var b bytes.Buffer
	b.WriteString("go test fuzz v1\n")
	for _, v := range vals {
		switch v := v.(type) {
		case uint8:
			fmt.Fprintf(&b, "byte(%q)\n", v)
		case string:
			fmt.Fprintf(&b, "string(%q)\n", v)
		case []byte:
			fmt.Fprintf(&b, "[]byte(%q)\n", v)
		default:
			panic(fmt.Sprintf("corpusFile: unsupported %T", v))
		}
	}
	return b.Bytes()
}
