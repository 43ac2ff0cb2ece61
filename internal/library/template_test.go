package library_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentq/agentq/internal/library"
)

func TestHashIsSeed000s(t *testing.T) {
	// sha256 of {"id":"greet","version":1,"content":"Hi \u003c{{.Name}}\u003e","type":"system"}
	// as Go's encoding/json writes it.
	require.Equal(t, "facf37b7526705b555844ef063649faa12c2d43c8dcdcc98fc66e3f90ad488e9", library.Hash("greet", 1, "Hi <{{.Name}}>", "system"))
	require.NotEqual(t, library.Hash("greet", 1, "x", "system"), library.Hash("greet", 2, "x", "system"))
	require.NotEqual(t, library.Hash("greet", 1, "x", "system"), library.Hash("greet", 1, "x", "user"))
	require.NotEqual(t, library.Hash("greet", 1, "x", "system"), library.Hash("greet2", 1, "x", "system"))
}

func TestRender(t *testing.T) {
	params := []library.Param{
		{Name: "Name", Type: "string", Required: true},
		{Name: "Count", Type: "integer", Default: 2.0},
		{Name: "Items", Type: "array"},
		{Name: "Polite", Type: "boolean"},
	}
	content := "Hello {{.Name}}{{if .Polite}}, please{{end}}: {{.Count}}{{range .Items}} [{{.}}]{{end}}"
	require.NoError(t, library.CheckTemplate(content, params))
	cases := []struct {
		name   string
		values map[string]any
		want   string
		err    error
		msg    string
	}{
		{"defaults", map[string]any{"Name": "Ada"}, "Hello Ada: 2", nil, ""},
		{"all", map[string]any{"Name": "Ada", "Count": 3.0, "Items": []any{"a", "b"}, "Polite": true}, "Hello Ada, please: 3 [a] [b]", nil, ""},
		{"missing required", map[string]any{}, "", library.ErrParams, "missing required parameter(s) Name"},
		{"extra", map[string]any{"Name": "Ada", "Colour": "red"}, "", library.ErrParams, "unknown parameter(s) Colour"},
		{"not an integer", map[string]any{"Name": "Ada", "Count": 2.5}, "", library.ErrParams, `parameter "Count" must be an integer, got a number`},
		{"not a string", map[string]any{"Name": 5.0}, "", library.ErrParams, `parameter "Name" must be a string, got a number`},
		{"not an array", map[string]any{"Name": "Ada", "Items": "x"}, "", library.ErrParams, `parameter "Items" must be an array, got a string`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := library.Render(context.Background(), content, params, c.values, library.Limits{})
			if c.err != nil {
				require.True(t, errors.Is(err, c.err), "%v", err)
				require.Contains(t, err.Error(), c.msg)
				return
			}
			require.NoError(t, err)
			require.Equal(t, c.want, got)
		})
	}
	// A template that fails on its values (index out of range) is an
	// ErrTemplate, not a panic.
	_, err := library.Render(context.Background(), `{{index .Items 5}}`, []library.Param{{Name: "Items", Type: "array", Required: true}}, map[string]any{"Items": []any{1.0}}, library.Limits{})
	require.ErrorIs(t, err, library.ErrTemplate)
}

// FuzzCheckAndRender: any content and values give a result or an error,
// never a panic; a template parsed once renders as Render does.
func FuzzCheckAndRender(f *testing.F) {
	for _, s := range []string{"Hello {{.Name}}", "{{range .Items}}{{.}}{{end}}", "{{index .Items 3}}", "{{template \"x\"}}", "{{.A.B.C}}", "{{$x := .A}}{{$x}}", "{{printf \"%d\" .A}}", "{{"} {
		f.Add(s, "value")
	}
	f.Fuzz(func(t *testing.T, content, value string) {
		params := []library.Param{{Name: "Name", Type: "string"}, {Name: "Items", Type: "array"}, {Name: "A"}}
		_ = library.CheckTemplate(content, params)
		_, _ = library.UsedParams(content)
		values := map[string]any{"Name": value, "Items": []any{value, 1.0}, "A": map[string]any{"B": value}}
		ctx := context.Background()
		out, err := library.Render(ctx, content, params, values, library.Limits{})
		if tmpl, perr := library.Parse(content); perr == nil {
			for range 2 { // a parsed template is reused
				got, gerr := tmpl.Render(ctx, params, values, library.Limits{})
				require.Equal(t, out, got)
				require.Equal(t, fmt.Sprint(err), fmt.Sprint(gerr))
			}
		} else {
			require.ErrorIs(t, err, library.ErrTemplate)
		}
	})
}
