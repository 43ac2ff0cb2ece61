package library_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentq/agentq/internal/library"
)

// defineChain is 40 templates each calling the one below twice: 2^40
// calls from about 2 KB.
func defineChain() string {
	var b strings.Builder
	b.WriteString(`{{define "t0"}}{{end}}`)
	for i := 1; i <= 40; i++ {
		fmt.Fprintf(&b, `{{define "t%d"}}{{template "t%d"}}{{template "t%d"}}{{end}}`, i, i-1, i-1)
	}
	b.WriteString(`{{template "t40"}}`)
	return b.String()
}

// renderBound is how long past its Timeout a rendering may take to stop:
// one step's work, and a loaded machine (a rendering that does not stop
// takes hours).
const renderBound = 2 * time.Second

// Each hostile template is refused at creation, and a prompt stored before
// the rule still renders within its limits: stopped with ErrRenderLimit,
// nothing returned.
func TestHostileTemplates(t *testing.T) {
	items := make([]any, 2000)
	for i := range items {
		items[i] = strings.Repeat("\\<", 50)
	}
	params := []library.Param{{Name: "Items", Type: "array"}, {Name: "S", Type: "string"}, {Name: "F", Type: "string"}}
	values := map[string]any{"Items": items, "S": strings.Repeat(`\`, 1000), "F": "%999999v"}
	for _, c := range []struct {
		name, content, refusal string
	}{
		{"nested integer ranges (issue)", `Hi{{range 1000000}}{{range 1000000}}{{end}}{{end}}`, "range over 1000000; at most 1000"},
		{"nested integer ranges under the bound", `{{range 1000}}{{range 1000}}{{range 1000}}{{end}}{{end}}{{end}}`, "nested in another range"},
		{"printf width (issue)", `{{range 100}}{{printf "%999999d" 1}}{{end}}`, `width or precision of 999999; at most 256`},
		{"printf width from an argument", `{{range 100}}{{printf "%*d" 999999 1}}{{end}}`, "from an argument (*)"},
		{"define chain (issue)", defineChain(), "{{define}} and {{block}} are not supported"},
		{"recursion", `{{define "r"}}{{template "r"}}{{end}}{{template "r"}}`, "not supported in prompts"},
		{"integer through a variable", `{{$n := 1000000000}}{{range $n}}{{end}}`, "range over 1000000000"},
		{"integer through with", `{{with 1000000000}}{{range .}}{{end}}{{end}}`, "range over 1000000000"},
		{"computed integer", `{{range len .Items}}{{range len $.Items}}{{end}}{{end}}`, "computed integer"},
		{"independent nested ranges", `{{range .Items}}{{range $.Items}}{{range $.Items}}{{end}}{{end}}{{end}}`, "would multiply"},
		{"js doubling", `{{.S | js | js | js | js | js | js | js | js | js | js | js | js | js | js | js | js | js | js | js | js | js | js | js | js | js | js | js | js | js | js}}`, ""},
		{"format from a parameter", `{{printf .F .Items}}`, ""},
		{"heavy steps writing nothing", `{{range .Items}}{{$x := printf "%v%v%v%v" $.Items $.Items $.Items $.Items}}{{end}}`, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := library.CheckTemplate(c.content, params)
			if c.refusal != "" {
				require.ErrorIs(t, err, library.ErrTemplate)
				require.Contains(t, err.Error(), c.refusal)
			}
			lim := library.Limits{Timeout: 100 * time.Millisecond}
			start := time.Now()
			out, err := library.Render(context.Background(), c.content, params, values, lim)
			took := time.Since(start)
			require.ErrorIs(t, err, library.ErrRenderLimit, "after %s", took)
			require.False(t, errors.Is(err, library.ErrTemplate), "%v", err)
			require.Empty(t, out)
			require.Less(t, took, lim.Timeout+renderBound)
			t.Logf("%s: %v", took, err)
		})
	}
}

func TestRenderLimits(t *testing.T) {
	ctx := context.Background()
	params := []library.Param{{Name: "S", Type: "string", Required: true}}
	t.Run("output", func(t *testing.T) {
		lim := library.Limits{MaxOutput: 10}
		out, err := library.Render(ctx, `{{.S}}!`, params, map[string]any{"S": "123456789"}, lim)
		require.NoError(t, err)
		require.Equal(t, "123456789!", out, "exactly MaxOutput")
		_, err = library.Render(ctx, `{{.S}}!`, params, map[string]any{"S": "1234567890"}, lim)
		require.ErrorIs(t, err, library.ErrRenderLimit)
		require.EqualError(t, err, "render limit: the rendering is longer than 10 bytes")
		_, err = library.Render(ctx, `{{$x := print .S .S}}`, params, map[string]any{"S": "1234567890"}, lim)
		require.ErrorIs(t, err, library.ErrRenderLimit, "text a function builds counts too")

		// Escaping a large value is judged by what it makes, not by the
		// most it could make.
		big := strings.Repeat("<", 60<<10)
		out, err = library.Render(ctx, `{{html .S}}`, params, map[string]any{"S": big}, library.Limits{})
		require.NoError(t, err)
		require.Equal(t, strings.Repeat("&lt;", 60<<10), out)
		_, err = library.Render(ctx, `{{html .S}}`, params, map[string]any{"S": big + big}, library.Limits{})
		require.ErrorIs(t, err, library.ErrRenderLimit)
	})
	t.Run("steps", func(t *testing.T) {
		items := []library.Param{{Name: "Items", Type: "array", Required: true}}
		lim := library.Limits{MaxSteps: 100}
		// A step per iteration and one per action.
		_, err := library.Render(ctx, `{{range .Items}}x{{end}}`, items, map[string]any{"Items": make([]any, 90)}, lim)
		require.NoError(t, err)
		_, err = library.Render(ctx, `{{range .Items}}{{end}}`, items, map[string]any{"Items": make([]any, 101)}, lim)
		require.ErrorIs(t, err, library.ErrRenderLimit)
		require.EqualError(t, err, "render limit: the template takes more than 100 steps (actions, loop iterations, KiB built by functions)")
	})
	t.Run("time", func(t *testing.T) {
		lim := library.Limits{Timeout: 50 * time.Millisecond, MaxSteps: 1 << 40}
		start := time.Now()
		_, err := library.Render(ctx, `{{range 1000000000}}{{end}}`, nil, nil, lim)
		require.EqualError(t, err, "render limit: the rendering takes longer than 50ms")
		require.Less(t, time.Since(start), lim.Timeout+renderBound)
	})
	t.Run("context", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		defer cancel()
		_, err := library.Render(ctx, `{{range 1000000000}}{{end}}`, nil, nil, library.Limits{Timeout: time.Hour, MaxSteps: 1 << 40})
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.False(t, errors.Is(err, library.ErrRenderLimit))
	})
	t.Run("a parsed template is reused", func(t *testing.T) {
		tmpl, err := library.Parse(`{{range 50}}ab{{end}}`)
		require.NoError(t, err)
		_, err = tmpl.Render(ctx, nil, nil, library.Limits{MaxOutput: 99})
		require.ErrorIs(t, err, library.ErrRenderLimit)
		out, err := tmpl.Render(ctx, nil, nil, library.Limits{MaxOutput: 100})
		require.NoError(t, err)
		require.Equal(t, strings.Repeat("ab", 50), out)
	})
}

// The subset prompts may use: what it accepts renders as text/template
// does, what it refuses says why.
func TestTemplateSubset(t *testing.T) {
	params := []library.Param{
		{Name: "Sections", Type: "array", Default: []any{map[string]any{"Title": "A", "Items": []any{"x", "y"}}}},
		{Name: "Name", Type: "string", Default: "Ada"},
		{Name: "N", Type: "number", Default: 2.5},
	}
	accepted := []struct{ content, want string }{
		{`{{range .Sections}}{{.Title}}:{{range .Items}} {{.}}{{end}};{{end}}`, "A: x y;"},
		{`{{range $s := .Sections}}{{range $i, $x := $s.Items}}{{$i}}{{$x}}{{end}}{{end}}`, "0x1y"},
		{`{{range $s := .Sections}}{{with $s.Items}}{{range .}}{{.}}{{end}}{{end}}{{end}}`, "xy"},
		{`{{range 3}}-{{end}}{{range .Sections}}{{end}}`, "---"},
		{`{{printf "%-8s|%.2f|%256d" .Name .N 1}}`, fmt.Sprintf("%-8s|%.2f|%256d", "Ada", 2.5, 1)},
		{`{{printf "%%d %s" .Name}}`, "%d Ada"},
		{`{{$p := .}}{{with .Sections}}{{$p.Name}}{{end}}`, "Ada"},
		{`{{with $}}{{.Name}}{{end}}{{index . "Name"}}`, "AdaAda"},
		{`{{.Name | js | html | urlquery | print | len}}`, "3"},
	}
	for _, c := range accepted {
		require.NoError(t, library.CheckTemplate(c.content, params), c.content)
		out, err := library.Render(context.Background(), c.content, params, nil, library.Limits{})
		require.NoError(t, err, c.content)
		require.Equal(t, c.want, out, c.content)
	}
	refused := []struct{ content, why string }{
		{`{{range 1001}}{{end}}`, "range over 1001; at most 1000"},
		{`{{range .Sections}}{{range 2}}{{end}}{{end}}`, "nested in another range"},
		{`{{range $i, $s := .Sections}}{{range $i}}{{end}}{{end}}`, "computed integer"},
		{`{{range $s := .Sections}}{{range .Items}}{{range $s.Items}}{{end}}{{end}}{{end}}`, "would multiply"},
		{`{{range .Sections}}{{with $}}{{range .Sections}}{{end}}{{end}}{{end}}`, "would multiply"},
		{`{{printf "%.257f" .N}}`, "width or precision of 257"},
		{`{{printf "%[1]*d" 5 .N}}`, "(*)"},
		{`{{block "b" .}}x{{end}}`, "not supported in prompts"},
	}
	for _, c := range refused {
		err := library.CheckTemplate(c.content, params)
		require.ErrorIs(t, err, library.ErrTemplate, c.content)
		require.Contains(t, err.Error(), c.why, c.content)
	}
}

// A parameter reached through a variable or a dot holding the parameters
// is a parameter: undeclared, the creation refuses it, instead of every
// rendering failing.
func TestParametersThroughAliases(t *testing.T) {
	for _, content := range []string{
		`{{$p := .}}{{$p.X}}`,
		`{{$p := $}}{{range .Items}}{{$p.X}}{{end}}`,
		`{{$p := .Items}}{{$p = .}}{{$p.X}}`,
		`{{with $}}{{.X}}{{end}}`,
		`{{with .}}{{with .}}{{.X}}{{end}}{{end}}`,
		`{{range .Items}}{{with $}}{{.X}}{{end}}{{end}}`,
		`{{(.).X}}`,
		`{{index . "X"}}`,
		`{{or . .Items}}{{(or . .Items).X}}`,
	} {
		params := []library.Param{{Name: "Items", Type: "array"}}
		err := library.CheckTemplate(content, params)
		require.ErrorIs(t, err, library.ErrTemplate, content)
		require.Contains(t, err.Error(), "undeclared parameter(s) X", content)

		params = append(params, library.Param{Name: "X", Type: "string", Default: "x"})
		require.NoError(t, library.CheckTemplate(content, params), content)
		out, err := library.Render(context.Background(), content, params, map[string]any{"Items": []any{1.0}}, library.Limits{})
		require.NoError(t, err, content)
		require.Contains(t, out, "x", content)
	}
	// Fields of other variables are not parameters.
	require.NoError(t, library.CheckTemplate(`{{$u := .User}}{{$u.Name}}{{range $e := .Items}}{{$e.Title}}{{end}}`,
		[]library.Param{{Name: "User", Type: "object"}, {Name: "Items", Type: "array"}}))
}

// FuzzRenderCost searches for templates that render slowly or large:
// whatever the content, accepted by CheckTemplate or not (prompts stored
// before a rule), a rendering ends within its limits, with its output or
// an error, never a panic; and what CheckTemplate accepts does not count
// past MaxRangeCount.
func FuzzRenderCost(f *testing.F) {
	for _, s := range []string{
		`Hi{{range 1000000}}{{range 1000000}}{{end}}{{end}}`,
		`{{range 100}}{{printf "%999999d" 1}}{{end}}`,
		defineChain(),
		`{{range 1000}}{{range $.Items}}{{$.S}}{{end}}{{end}}`,
		`{{range .Items}}{{range .}}{{printf "%256v" $}}{{end}}{{end}}`,
		`{{.S | js | js | js | js | js | js | js | js | js | js}}`,
		`{{$x := 1000}}{{range $x}}{{range $.Items}}{{end}}{{end}}`,
		`{{with $}}{{range .Items}}{{.}}{{end}}{{end}}`,
		`{{printf .F .Items .S}}`,
		`{{range $i, $e := .Items}}{{range $e}}{{$i}}{{end}}{{end}}`,
	} {
		f.Add(s, `\<"%`)
	}
	lim := library.Limits{MaxOutput: 64 << 10, MaxSteps: 20_000, Timeout: 50 * time.Millisecond}
	f.Fuzz(func(t *testing.T, content, value string) {
		params := []library.Param{{Name: "Items", Type: "array"}, {Name: "S", Type: "string"}, {Name: "F", Type: "string"}}
		items := []any{value, 1.0, []any{value, value}, map[string]any{"k": value}}
		for len(items) < 200 {
			items = append(items, items...)
		}
		values := map[string]any{"Items": items, "S": strings.Repeat(value, 100), "F": value}
		accepted := library.CheckTemplate(content, params) == nil
		start := time.Now()
		out, err := library.Render(context.Background(), content, params, values, lim)
		took := time.Since(start)
		require.LessOrEqual(t, len(out), lim.MaxOutput)
		if took > lim.Timeout+renderBound {
			t.Fatalf("rendering took %s (accepted %v): %v", took, accepted, err)
		}
		if err != nil && !errors.Is(err, library.ErrRenderLimit) {
			require.ErrorIs(t, err, library.ErrTemplate)
		}
	})
}

// One parsed template renders in many goroutines at once, each with its
// own values and limits.
func TestTemplateRendersConcurrently(t *testing.T) {
	tmpl, err := library.Parse(`{{range .Items}}{{.}},{{end}}{{printf "%s" .S}}`)
	require.NoError(t, err)
	params := []library.Param{{Name: "Items", Type: "array"}, {Name: "S", Type: "string"}}
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				s := fmt.Sprint(g, "-", i)
				// Odd goroutines fit, even ones do not. The time limit is
				// far away: a goroutine descheduled on a loaded machine
				// (16 of them, under the race detector) must not be
				// stopped at it; only MaxOutput differs between them.
				lim := library.Limits{MaxOutput: 1 + g%2*100, Timeout: time.Minute}
				out, err := tmpl.Render(context.Background(), params, map[string]any{"Items": []any{s, s}, "S": s}, lim)
				switch {
				case g%2 == 0 && !errors.Is(err, library.ErrRenderLimit):
					errs <- fmt.Errorf("goroutine %d: %q, %v", g, out, err)
					return
				case g%2 == 1 && (err != nil || out != s+","+s+","+s):
					errs <- fmt.Errorf("goroutine %d: %q, %v", g, out, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
