package schemas

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"
)

// validateCorpus is written to testdata/fuzz/FuzzValidate by
// `go test ./schemas/ -run TestFuzzCorpus -update-corpus`; TestFuzzCorpus
// checks that the committed files match it.
var validateCorpus = map[string]string{
	"tool-executed":       `{"tool_name":"web_search","success":true,"latency_ms":12,"llm_rating":0.5,"input":{"q":"x"}}`,
	"wrong-types":         `{"tool_name":1,"success":"yes","step_idx":-1}`,
	"prompt-used-by-hash": `{"prompt_hash":"9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08","success":true}`,
	"search-request":      `{"query":"refunds","limit":5,"params":{"Topic":"x"}}`,
	"search-response":     `{"results":[],"retrieval":{"mode":"lexical","degraded":true,"reason":"embedder down"}}`,
	"get-both":            `{"id":"p","version":1,"label":"production"}`,
	"huge-exponent":       `{"tool_name":"x","success":true,"llm_rating":1e-9999999}`,
	"long-number":         `{"llm_rating":0.` + strings.Repeat("1", 1200) + `}`,
	"invalid-utf8":        "{\"tool_name\":\"\xff\",\"success\":true}",
	"lone-surrogate":      `{"tool_name":"\ud800","success":true}`,
	"deep":                strings.Repeat(`{"input":`, 100) + `{}` + strings.Repeat(`}`, 100),
	"not-json":            `tool_name=x`,
	"array":               `[1,2,3]`,
	"empty":               ``,
}

var updateCorpus = flag.Bool("update-corpus", false, "rewrite testdata/fuzz/FuzzValidate from validateCorpus")

// FuzzValidate validates fuzzed bytes as the data of every registered
// event type and message and checks that Validate never panics, that the
// same input always gets the same verdict and message, that its errors
// are one line of bounded, valid UTF-8 text, and that the fast path agrees
// with the jsonschema library (FuzzFastPath does that alone, from every
// fixture).
func FuzzValidate(f *testing.F) {
	r := loadRegistry(f)
	names := append(r.Types(), r.Messages()...)
	for _, data := range validateCorpus {
		f.Add([]byte(data))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, name := range names {
			agree(t, r, name, data)
			err := r.Validate(name, data)
			again := r.Validate(name, bytes.Clone(data))
			if (err == nil) != (again == nil) || (err != nil && err.Error() != again.Error()) {
				t.Fatalf("%s: not deterministic: %v, then %v", name, err, again)
			}
			if err == nil {
				continue
			}
			var verr *ValidationError
			if !errors.As(err, &verr) {
				t.Fatalf("%s: error is not a *ValidationError: %v", name, err)
			}
			msg := err.Error()
			if strings.ContainsAny(msg, "\r\n") || !utf8.ValidString(msg) || len(msg) > 2048 {
				t.Fatalf("%s: bad error text (%d bytes): %.300q", name, len(msg), msg)
			}
		}
	})
}

// TestFuzzCorpus keeps testdata/fuzz/FuzzValidate equal to
// validateCorpus; -update-corpus rewrites it.
func TestFuzzCorpus(t *testing.T) {
	dir := filepath.Join("testdata", "fuzz", "FuzzValidate")
	if *updateCorpus {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for name, data := range validateCorpus {
		want := []byte(fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", data))
		path := filepath.Join(dir, name)
		if *updateCorpus {
			if err := os.WriteFile(path, want, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		got, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%v (run go test ./schemas/ -run TestFuzzCorpus -update-corpus)", err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s is stale: run go test ./schemas/ -run TestFuzzCorpus -update-corpus", path)
		}
	}
}
