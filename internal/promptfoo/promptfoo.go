// Package promptfoo reads a promptfoo configuration (promptfooconfig.yaml)
// into what the lab runs: prompt versions and an experiment's test
// queries and assertions, so a team can bring its promptfoo suite to
// agentq as it is.
//
// It reads the common subset: prompts (inline text, file:// text, Markdown
// or chat files, and {raw|id, label} objects), tests (inline, or a
// file:// YAML or JSON list) with vars (arrays expand into one test per
// value, as promptfoo expands them; file:// values are read), assert
// (type, value, threshold, weight; metric is ignored) and threshold,
// defaultTest (vars, assert, threshold) and evaluateOptions.repeat.
// Anything else that changes what is run or how it is judged — another
// assertion type, transforms, per-test providers or options, scenarios,
// Nunjucks beyond {{var}} — is refused, every instance listed, before
// anything is published. providers are reported as not used: the lab runs
// every version with its own model.
//
// promptfoo sends a text prompt as the user message; the lab sends a
// version as the system message and a test query as the user message. A
// text prompt becomes a version as it is, its {{var}} placeholders
// parameters of the version, and the query of each test is the value of
// its query var (Options.QueryVar, else the first of query, question,
// input, message, prompt that the tests give). A chat prompt must be a
// system message and a user message holding one variable: the system
// message becomes the version, the variable the query var.
package promptfoo

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/agentq/agentq/internal/lab"
	"github.com/agentq/agentq/internal/library"
)

// Suite is a promptfoo configuration as the lab runs it.
type Suite struct {
	// Description is the configuration's description.
	Description string
	// Prompts are the versions to create, in configuration order: the
	// first is the experiment's baseline, the others its candidates.
	Prompts []Prompt
	// Queries are the experiment's test queries, one per test (after
	// expanding array vars).
	Queries []lab.Query
	// Assert and Threshold are defaultTest's: they apply to every query.
	Assert    []lab.Assertion
	Threshold *float64
	// Repetitions is evaluateOptions.repeat; 0 when not set.
	Repetitions int
	// QueryVar is the var whose value is each test's query.
	QueryVar string
	// Notes say what was read but is not used, for the user.
	Notes []string
}

// Prompt is one prompt of the configuration as a version's content.
type Prompt struct {
	// Label is promptfoo's label, else the file it came from, else
	// "prompt N".
	Label string
	// Content is the prompt as a Go template: {{name}} became {{.name}}.
	Content string
	// Params are the version's parameters: every var the tests give and
	// every variable the prompt uses, none required, each defaulting to
	// "" as a missing Nunjucks variable renders.
	Params []library.Param
}

// Options tune the reading.
type Options struct {
	// QueryVar names the var whose value is each test's query; "" picks
	// the first of DefaultQueryVars the tests give.
	QueryVar string
}

// DefaultQueryVars are the var names tried, in order, for the query.
var DefaultQueryVars = []string{"query", "question", "input", "message", "prompt"}

// UnsupportedError lists everything in a configuration the lab cannot
// run, each with where it is.
type UnsupportedError struct {
	File     string
	Problems []string
}

func (e *UnsupportedError) Error() string {
	return fmt.Sprintf("%s uses what the lab cannot run (nothing was published):\n  - %s\nassertion types the lab runs: %s (text checks also as not-<type>)",
		e.File, strings.Join(e.Problems, "\n  - "), strings.Join(lab.AssertionTypes, ", "))
}

// Load reads the configuration at path; file:// paths in it are relative
// to its directory. An *UnsupportedError lists what it cannot run.
func Load(path string, o Options) (*Suite, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return Parse(raw, filepath.Dir(path), filepath.Base(path), o)
}

// Parse reads a configuration's text; dir resolves its file:// paths and
// name names it in messages.
func Parse(raw []byte, dir, name string, o Options) (*Suite, error) {
	var doc map[string]any
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		return nil, fmt.Errorf("%s: not valid YAML: %w", name, err)
	}
	if doc == nil {
		return nil, fmt.Errorf("%s: empty", name)
	}
	r := &reader{dir: dir, s: &Suite{}}
	r.config(doc, o)
	if len(r.problems) > 0 {
		return nil, &UnsupportedError{File: name, Problems: r.problems}
	}
	if r.err != nil {
		return nil, fmt.Errorf("%s: %w", name, r.err)
	}
	return r.s, nil
}

// reader collects what it reads and every problem on the way.
type reader struct {
	dir      string
	s        *Suite
	problems []string
	err      error // the configuration is broken (not merely unsupported)
}

func (r *reader) unsupported(format string, args ...any) {
	r.problems = append(r.problems, fmt.Sprintf(format, args...))
}

func (r *reader) broken(format string, args ...any) {
	if r.err == nil {
		r.err = fmt.Errorf(format, args...)
	}
}

func (r *reader) note(format string, args ...any) {
	r.s.Notes = append(r.s.Notes, fmt.Sprintf(format, args...))
}

// Top-level keys: read, ignored (with a note when they matter), or refused.
var (
	ignoredKeys = []string{"outputPath", "sharing", "tags", "metadata", "writeLatestResults", "commandLineOptions", "env", "derivedMetrics", "tracing", "$schema"}
	refusedKeys = map[string]string{
		"scenarios":       "scenarios (run each scenario as its own configuration)",
		"extensions":      "extensions (hooks run JavaScript or Python)",
		"redteam":         "redteam (red-teaming is not a prompt experiment)",
		"nunjucksFilters": "nunjucksFilters (custom template filters)",
	}
)

func (r *reader) config(doc map[string]any, o Options) {
	for _, k := range sortedKeys(doc) {
		switch k {
		case "description", "prompts", "providers", "tests", "defaultTest", "evaluateOptions":
		default:
			if why, ok := refusedKeys[k]; ok {
				r.unsupported("%s", why)
			} else if !slices.Contains(ignoredKeys, k) {
				r.unsupported("the top-level key %q", k)
			}
		}
	}
	if d, ok := doc["description"].(string); ok {
		r.s.Description = strings.TrimSpace(d)
	}
	if p, ok := doc["providers"]; ok && p != nil {
		r.note("providers are not used: the lab runs every version with its own model (AGENTQ_LLM_MODEL, or --model)")
	}
	if eo, ok := doc["evaluateOptions"].(map[string]any); ok {
		for _, k := range sortedKeys(eo) {
			switch k {
			case "repeat":
				n, ok := eo[k].(int)
				if !ok || n < 1 {
					r.broken("evaluateOptions.repeat must be a whole number of at least 1")
				}
				r.s.Repetitions = n
			case "cache":
				r.note("evaluateOptions.cache is not used: the lab never caches, every repetition is a real call")
			default:
				r.note("evaluateOptions.%s is not used (AGENTQ_LAB_CONCURRENCY sets how many calls run at once)", k)
			}
		}
	}

	defaults := r.defaultTest(doc["defaultTest"])
	tests := r.tests(doc["tests"], defaults)
	queryVar := r.queryVar(tests, o)
	r.prompts(doc["prompts"], tests, &queryVar)
	if queryVar == "" {
		return
	}
	r.s.QueryVar = queryVar
	if err := lab.CheckAssertions(r.s.Assert, nil, "defaultTest"); err != nil {
		r.unsupported("%v", err)
	}
	for _, t := range tests {
		if err := lab.CheckAssertions(t.assert, nil, t.where); err != nil {
			r.unsupported("%v", err)
		}
		q, ok := t.vars[queryVar].(string)
		if !ok || strings.TrimSpace(q) == "" {
			r.unsupported("%s: var %s, the query the lab sends as the user message, is missing or not text", t.where, queryVar)
			continue
		}
		r.s.Queries = append(r.s.Queries, lab.Query{Query: q, Vars: t.vars, Assert: t.assert, Threshold: t.threshold})
	}
}

// test is one test case after defaultTest is applied and vars expanded.
type test struct {
	where     string
	vars      map[string]any
	assert    []lab.Assertion
	threshold *float64
}

// defaults are defaultTest's vars.
type defaults struct {
	vars map[string]any
}

func (r *reader) defaultTest(v any) defaults {
	d := defaults{vars: map[string]any{}}
	if v == nil {
		return d
	}
	if s, ok := v.(string); ok {
		loaded, ok := r.loadData(s, "defaultTest")
		if !ok {
			return d
		}
		v = loaded
	}
	m, ok := v.(map[string]any)
	if !ok {
		r.broken("defaultTest must be a mapping")
		return d
	}
	for _, k := range sortedKeys(m) {
		switch k {
		case "vars":
			vars, ok := m[k].(map[string]any)
			if !ok {
				r.broken("defaultTest.vars must be a mapping")
				continue
			}
			d.vars = r.varValues(vars, "defaultTest")
		case "assert":
			r.s.Assert = r.assertions(m[k], "defaultTest")
		case "threshold":
			r.s.Threshold = r.threshold(m[k], "defaultTest")
		case "description", "metadata":
		default:
			r.unsupported("defaultTest.%s", k)
		}
	}
	return d
}

func (r *reader) tests(v any, d defaults) []test {
	if s, ok := v.(string); ok {
		loaded, ok := r.loadData(s, "tests")
		if !ok {
			return nil
		}
		v = loaded
	}
	list, ok := v.([]any)
	if !ok || len(list) == 0 {
		r.broken("tests must list at least one test (inline, or a file:// YAML or JSON list)")
		return nil
	}
	var out []test
	for i, item := range list {
		where := fmt.Sprintf("tests[%d]", i)
		m, ok := item.(map[string]any)
		if !ok {
			if s, isString := item.(string); isString {
				r.unsupported("%s: %q: tests from files must be the whole tests value (tests: file://tests.yaml)", where, s)
				continue
			}
			r.broken("%s must be a mapping", where)
			continue
		}
		t := test{where: where, vars: map[string]any{}}
		for k, val := range d.vars {
			t.vars[k] = val
		}
		for _, k := range sortedKeys(m) {
			switch k {
			case "vars":
				vars, ok := m[k].(map[string]any)
				if !ok {
					r.unsupported("%s.vars: only a mapping of values (not a file of vars)", where)
					continue
				}
				for name, val := range r.varValues(vars, where) {
					t.vars[name] = val
				}
			case "assert":
				t.assert = r.assertions(m[k], where)
			case "threshold":
				t.threshold = r.threshold(m[k], where)
			case "description", "metadata":
			case "options":
				r.unsupported("%s.options (prefix, suffix, transform, a grading provider)", where)
			case "provider":
				r.unsupported("%s.provider: a test of its own provider (the lab runs one model)", where)
			case "providerOutput":
				r.unsupported("%s.providerOutput: a fixed output (the lab calls the model)", where)
			default:
				r.unsupported("%s.%s", where, k)
			}
		}
		out = append(out, expand(t)...)
	}
	return out
}

// expand makes one test per combination of the values of array vars, as
// promptfoo does.
func expand(t test) []test {
	names := sortedKeys(t.vars)
	out := []test{t}
	for _, name := range names {
		values, ok := t.vars[name].([]any)
		if !ok {
			continue
		}
		var next []test
		for _, base := range out {
			for i, val := range values {
				c := base
				c.vars = map[string]any{}
				for k, v := range base.vars {
					c.vars[k] = v
				}
				c.vars[name] = val
				c.where = fmt.Sprintf("%s (%s #%d)", base.where, name, i+1)
				next = append(next, c)
			}
		}
		out = next
	}
	return out
}

// varValues reads var values; file:// values are read from their files.
func (r *reader) varValues(vars map[string]any, where string) map[string]any {
	out := make(map[string]any, len(vars))
	for _, k := range sortedKeys(vars) {
		if !paramRE.MatchString(k) {
			r.unsupported("%s.vars.%s: a var name the lab can use is a letter or _ followed by letters, digits or _", where, k)
			continue
		}
		v := vars[k]
		if s, ok := v.(string); ok && strings.HasPrefix(s, "file://") {
			loaded, ok := r.loadVar(s, where+".vars."+k)
			if !ok {
				continue
			}
			v = loaded
		}
		out[k] = v
	}
	return out
}

// assertionKeys are the assertion fields read; metric is only a label.
var assertionKeys = []string{"type", "value", "threshold", "weight", "metric"}

// modelGraded are promptfoo's assertion types that ask a model or run
// code, named in the refusal.
var modelGraded = map[string]string{
	"llm-rubric":            "model-graded (the lab's LLM judge scores every answer on its rubric: evaluation.rubric)",
	"model-graded-closedqa": "model-graded", "model-graded-factuality": "model-graded", "factuality": "model-graded",
	"answer-relevance": "model-graded", "context-faithfulness": "model-graded", "context-recall": "model-graded",
	"context-relevance": "model-graded", "g-eval": "model-graded", "select-best": "model-graded", "similar": "needs embeddings",
	"moderation": "needs a moderation API", "javascript": "runs JavaScript", "python": "runs Python", "webhook": "calls a webhook",
	"assert-set": "nested assertion sets",
}

func (r *reader) assertions(v any, where string) []lab.Assertion {
	list, ok := v.([]any)
	if !ok {
		r.broken("%s.assert must be a list", where)
		return nil
	}
	var out []lab.Assertion
	for i, item := range list {
		at := fmt.Sprintf("%s.assert[%d]", where, i)
		m, ok := item.(map[string]any)
		if !ok {
			r.broken("%s must be a mapping", at)
			continue
		}
		typ, _ := m["type"].(string)
		if typ == "" {
			r.broken("%s has no type", at)
			continue
		}
		base := strings.TrimPrefix(typ, "not-")
		if !slices.Contains(lab.AssertionTypes, base) {
			why := modelGraded[base]
			if why == "" {
				why = "not among the lab's assertion types"
			}
			r.unsupported("%s: type %s (%s)", at, typ, why)
			continue
		}
		a := lab.Assertion{Type: typ}
		bad := false
		for _, k := range sortedKeys(m) {
			if !slices.Contains(assertionKeys, k) {
				r.unsupported("%s: field %s", at, k)
				bad = true
			}
		}
		if val, ok := m["value"]; ok {
			if s, isString := val.(string); isString && strings.HasPrefix(s, "file://") {
				r.unsupported("%s: a file:// value (write the value in the configuration)", at)
				bad = true
			}
			raw, err := json.Marshal(val)
			if err != nil {
				r.broken("%s.value: %v", at, err)
				continue
			}
			a.Value = raw
		}
		if t, ok := m["threshold"]; ok {
			f, ok := number(t)
			if !ok {
				r.broken("%s.threshold must be a number", at)
				continue
			}
			a.Threshold = &f
		}
		if w, ok := m["weight"]; ok {
			f, ok := number(w)
			if !ok {
				r.broken("%s.weight must be a number", at)
				continue
			}
			a.Weight = &f
		}
		if !bad {
			out = append(out, a)
		}
	}
	return out
}

func (r *reader) threshold(v any, where string) *float64 {
	f, ok := number(v)
	if !ok || f < 0 || f > 1 {
		r.unsupported("%s.threshold %v: the lab takes a threshold from 0 to 1 (the weighted share of assertions that pass)", where, v)
		return nil
	}
	return &f
}

// queryVar picks the var holding each test's query.
func (r *reader) queryVar(tests []test, o Options) string {
	if o.QueryVar != "" {
		return o.QueryVar
	}
	for _, name := range DefaultQueryVars {
		for _, t := range tests {
			if _, ok := t.vars[name]; ok {
				return name
			}
		}
	}
	return ""
}

// prompts reads the prompts. queryVar may be set from a chat prompt's
// user message.
func (r *reader) prompts(v any, tests []test, queryVar *string) {
	var items []any
	switch p := v.(type) {
	case string:
		items = []any{p}
	case []any:
		items = p
	case map[string]any:
		r.unsupported("prompts as a mapping of files to labels: list them instead ({id: file://..., label: ...})")
		return
	}
	if len(items) == 0 {
		r.broken("prompts must name at least one prompt")
		return
	}
	var raw []rawPrompt
	for i, item := range items {
		where := fmt.Sprintf("prompts[%d]", i)
		switch p := item.(type) {
		case string:
			raw = append(raw, r.promptText(p, "", where)...)
		case map[string]any:
			label, _ := p["label"].(string)
			for _, k := range sortedKeys(p) {
				if k != "label" && k != "raw" && k != "id" {
					r.unsupported("%s.%s", where, k)
				}
			}
			switch {
			case p["raw"] != nil:
				s, _ := p["raw"].(string)
				raw = append(raw, r.promptText(s, label, where)...)
			case p["id"] != nil:
				s, _ := p["id"].(string)
				raw = append(raw, r.promptText(s, label, where)...)
			default:
				r.broken("%s: a prompt object needs raw or id", where)
			}
		default:
			r.broken("%s must be text or a mapping", where)
		}
	}
	var vars []string
	seen := map[string]bool{}
	for _, t := range tests {
		for k := range t.vars {
			if !seen[k] {
				seen[k] = true
				vars = append(vars, k)
			}
		}
	}
	for i, p := range raw {
		if p.queryVar != "" {
			switch {
			case *queryVar == "":
				*queryVar = p.queryVar
			case *queryVar != p.queryVar:
				r.unsupported("%s: its user message is {{%s}}, but the query var is %s", p.where, p.queryVar, *queryVar)
			}
		}
		content, used, err := goTemplate(p.text)
		if err != nil {
			r.unsupported("%s: %v", p.where, err)
			continue
		}
		label := p.label
		if label == "" {
			label = fmt.Sprintf("prompt %d", i+1)
		}
		names := append([]string(nil), vars...)
		for _, u := range used {
			if !slices.Contains(names, u) {
				names = append(names, u)
			}
		}
		sort.Strings(names)
		params := make([]library.Param, 0, len(names))
		for _, n := range names {
			params = append(params, library.Param{Name: n, Default: ""})
		}
		r.s.Prompts = append(r.s.Prompts, Prompt{Label: label, Content: content, Params: params})
	}
	if *queryVar == "" && r.err == nil {
		r.unsupported("no query var: the lab sends each test's query as the user message; name the var holding it with --query-var (tried %s)",
			strings.Join(DefaultQueryVars, ", "))
	}
}

// rawPrompt is a prompt's text before it becomes a template.
type rawPrompt struct {
	where, label, text string
	// queryVar is set by a chat prompt: the variable of its user message.
	queryVar string
}

// promptText reads one prompt: inline text, or file://path.
func (r *reader) promptText(s, label, where string) []rawPrompt {
	path, ok := strings.CutPrefix(s, "file://")
	if !ok {
		return []rawPrompt{{where: where, label: label, text: s}}
	}
	if strings.ContainsAny(path, "*?[") {
		r.unsupported("%s: %s: globs (list each file)", where, s)
		return nil
	}
	if strings.Contains(filepath.Base(path), ":") {
		r.unsupported("%s: %s: a prompt function", where, s)
		return nil
	}
	if label == "" {
		label = filepath.Base(path)
	}
	where = where + " (" + path + ")"
	ext := strings.ToLower(filepath.Ext(path))
	switch ext {
	case ".txt", ".md", ".markdown", ".j2", "":
	case ".json", ".yaml", ".yml":
	default:
		r.unsupported("%s: %s files (prompts from code or other formats)", where, ext)
		return nil
	}
	raw, err := os.ReadFile(r.resolve(path))
	if err != nil {
		r.broken("%s: %v", where, err)
		return nil
	}
	switch ext {
	case ".json", ".yaml", ".yml":
		p, ok := r.chat(raw, where, label)
		if !ok {
			return nil
		}
		return []rawPrompt{p}
	}
	// promptfoo reads several prompts from one text file separated by
	// lines of ---.
	parts := regexp.MustCompile(`(?m)^---\s*$`).Split(string(raw), -1)
	var out []rawPrompt
	for i, part := range parts {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		l := label
		if len(parts) > 1 {
			l = fmt.Sprintf("%s #%d", label, i+1)
		}
		out = append(out, rawPrompt{where: where, label: l, text: part})
	}
	if len(out) == 0 {
		r.broken("%s: empty", where)
	}
	return out
}

// loneVar matches a user message that is one variable.
var loneVar = regexp.MustCompile(`^\s*\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}\s*$`)

// chat reads a chat prompt: a system message and a user message that is
// one variable.
func (r *reader) chat(raw []byte, where, label string) (rawPrompt, bool) {
	var msgs []struct {
		Role    string `json:"role" yaml:"role"`
		Content string `json:"content" yaml:"content"`
	}
	if err := yaml.Unmarshal(raw, &msgs); err != nil {
		r.broken("%s: not a list of chat messages: %v", where, err)
		return rawPrompt{}, false
	}
	var system, user string
	var roles []string
	for _, m := range msgs {
		roles = append(roles, m.Role)
		switch m.Role {
		case "system":
			system = m.Content
		case "user":
			user = m.Content
		}
	}
	mv := loneVar.FindStringSubmatch(user)
	if len(msgs) != 2 || roles[0] != "system" || roles[1] != "user" || mv == nil {
		r.unsupported("%s: a chat prompt of %s messages; the lab sends a version as the system message and the test query as the user message, so a chat prompt must be a system message and a user message that is one variable, like {{question}}",
			where, strings.Join(roles, ", "))
		return rawPrompt{}, false
	}
	return rawPrompt{where: where, label: label, text: system, queryVar: mv[1]}, true
}

// loadData reads a file:// YAML or JSON value (tests, defaultTest).
func (r *reader) loadData(s, where string) (any, bool) {
	path, ok := strings.CutPrefix(s, "file://")
	if !ok {
		r.broken("%s: %q: want a list, a mapping or file://path", where, s)
		return nil, false
	}
	switch strings.ToLower(filepath.Ext(path)) {
	case ".yaml", ".yml", ".json":
	default:
		r.unsupported("%s: %s (the lab reads tests from YAML or JSON files)", where, s)
		return nil, false
	}
	raw, err := os.ReadFile(r.resolve(path))
	if err != nil {
		r.broken("%s: %v", where, err)
		return nil, false
	}
	var v any
	if err := yaml.Unmarshal(raw, &v); err != nil {
		r.broken("%s: %s: %v", where, path, err)
		return nil, false
	}
	return v, true
}

// loadVar reads a file:// var value: text, or YAML and JSON data.
func (r *reader) loadVar(s, where string) (any, bool) {
	path := strings.TrimPrefix(s, "file://")
	ext := strings.ToLower(filepath.Ext(path))
	switch ext {
	case ".txt", ".md", ".markdown", "", ".yaml", ".yml", ".json":
	default:
		r.unsupported("%s: %s (the lab reads text, YAML and JSON var files)", where, s)
		return nil, false
	}
	raw, err := os.ReadFile(r.resolve(path))
	if err != nil {
		r.broken("%s: %v", where, err)
		return nil, false
	}
	if ext == ".yaml" || ext == ".yml" || ext == ".json" {
		var v any
		if err := yaml.Unmarshal(raw, &v); err != nil {
			r.broken("%s: %s: %v", where, path, err)
			return nil, false
		}
		return v, true
	}
	return string(bytes.TrimRight(raw, "\n")), true
}

func (r *reader) resolve(path string) string {
	if filepath.IsAbs(path) {
		return path
	}
	return filepath.Join(r.dir, path)
}

// paramRE is a parameter name the library accepts.
var paramRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,63}$`)

// nunjucksVar matches {{ name }}.
var nunjucksVar = regexp.MustCompile(`\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}`)

// goTemplate turns a promptfoo prompt into a Go template: each {{ name }}
// becomes {{.name}}. Anything else Nunjucks would interpret — filters,
// tags, comments, expressions — is an error, since it would not render the
// same.
func goTemplate(text string) (string, []string, error) {
	var used []string
	out := nunjucksVar.ReplaceAllStringFunc(text, func(m string) string {
		name := nunjucksVar.FindStringSubmatch(m)[1]
		if !slices.Contains(used, name) {
			used = append(used, name)
		}
		return "\x00" + name + "\x01"
	})
	for _, tag := range []string{"{{", "}}", "{%", "{#"} {
		if i := strings.Index(out, tag); i >= 0 {
			snippet := strings.NewReplacer("\x00", "{{", "\x01", "}}").Replace(out[max(0, i-20):min(len(out), i+30)])
			return "", nil, fmt.Errorf("Nunjucks beyond {{variable}} (filters, tags, comments, expressions) near %q", snippet)
		}
	}
	out = strings.NewReplacer("\x00", "{{.", "\x01", "}}").Replace(out)
	if _, err := library.Parse(out); err != nil {
		return "", nil, fmt.Errorf("not a template the library accepts: %w", err)
	}
	return out, used, nil
}

func number(v any) (float64, bool) {
	switch n := v.(type) {
	case int:
		return float64(n), true
	case float64:
		return n, true
	}
	return 0, false
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
