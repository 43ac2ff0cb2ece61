package library_test

import (
	"bytes"
	"context"
	"testing"
	"text/template"

	"github.com/agentq/agentq/internal/library"
)

const benchContent = "You are {{.Name}}, helping with {{.Topic}}.{{if .Polite}} Be polite.{{end}}\n{{range .Items}}- {{.}}\n{{end}}Answer in {{.Lang}}."

var benchParams = []library.Param{{Name: "Name", Type: "string"}, {Name: "Topic", Type: "string"}, {Name: "Polite", Type: "boolean"},
	{Name: "Items", Type: "array"}, {Name: "Lang", Type: "string"}}

var benchValues = map[string]any{"Name": "Ada", "Topic": "billing", "Polite": true, "Items": []any{"one", "two", "three"}, "Lang": "English"}

// BenchmarkRender is a parsed prompt's rendering as prompts.get does it,
// limits and all; BenchmarkRenderUnbounded is text/template alone.
func BenchmarkRender(b *testing.B) {
	t, err := library.Parse(benchContent)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := t.Render(ctx, benchParams, benchValues, library.Limits{}); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkRenderUnbounded(b *testing.B) {
	t := template.Must(template.New("p").Option("missingkey=error").Parse(benchContent))
	b.ReportAllocs()
	for b.Loop() {
		var buf bytes.Buffer
		if err := t.Execute(&buf, benchValues); err != nil {
			b.Fatal(err)
		}
	}
}
