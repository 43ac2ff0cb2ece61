package library

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"text/template"
	"text/template/parse"
	"time"
)

// ErrRenderLimit is wrapped by the errors of a rendering stopped at one of
// its Limits. It is neither ErrParams nor ErrTemplate: the same request
// may succeed with smaller values, and a prompt stored before CheckTemplate
// refused its construct is still answered, with this error.
var ErrRenderLimit = errors.New("render limit")

// Defaults of Limits.
const (
	DefaultMaxOutput = 256 << 10
	DefaultMaxSteps  = 100_000
	DefaultTimeout   = 500 * time.Millisecond
)

// Limits bound one rendering. text/template cannot be interrupted from
// outside, so a rendering checks them itself: at every action and every
// loop iteration (a step), at every write, and in every function that
// builds text (print, printf, println, html, js, urlquery), before it
// builds it. Zero fields take the defaults.
type Limits struct {
	// MaxOutput bounds the rendered text, and any text a function builds
	// on the way, in bytes. Default 256 KiB.
	MaxOutput int
	// MaxSteps bounds the actions and loop iterations evaluated, and the
	// KiB of text functions build (a loop repeating them over large
	// values spends no steps otherwise). Default 100,000 (about 10ms).
	MaxSteps int
	// Timeout bounds the rendering's time. Default 500ms.
	Timeout time.Duration
}

func (l Limits) withDefaults() Limits {
	if l.MaxOutput <= 0 {
		l.MaxOutput = DefaultMaxOutput
	}
	if l.MaxSteps <= 0 {
		l.MaxSteps = DefaultMaxSteps
	}
	if l.Timeout <= 0 {
		l.Timeout = DefaultTimeout
	}
	return l
}

// Template is content parsed for rendering, many times and by many
// goroutines at once.
type Template struct {
	trees map[string]*parse.Tree
	// renderings keeps *rendering values between uses: each holds a
	// text/template.Template whose functions are bound to it, which
	// costs more to make than a small prompt costs to render.
	renderings sync.Pool
}

// A parsed template counts its steps with step, an empty text node put
// before every action and at the start of every list (so every loop
// iteration and every template call): text/template writes it, zero
// bytes, and the write counts the step (a call through the io.Writer
// interface costs a fraction of a template function call). Nodes are only
// read while executing, so one node serves every place and template.
var step = &parse.TextNode{NodeType: parse.NodeText, Text: []byte{}}

// enter and leave are the functions called around every template's body,
// so a template calling itself stops at MaxDepth calls deep instead of
// growing its stack until MaxSteps.
const (
	enterFunc = "agentq_render_enter"
	leaveFunc = "agentq_render_leave"
	// MaxDepth bounds {{template}} calls inside one another, in prompts
	// stored before CheckTemplate refused {{template}}.
	MaxDepth = 100
)

var renderFuncs = map[string]any{enterFunc: true, leaveFunc: true}

var enter, leave = action(enterFunc), action(leaveFunc)

func action(name string) parse.Node {
	trees, err := parse.Parse("f", "{{"+name+"}}", "", "", renderFuncs)
	if err != nil {
		panic(err)
	}
	return trees["f"].Root.Nodes[0]
}

// Parse parses content for rendering; the error wraps ErrTemplate. It
// accepts any text/template, also what CheckTemplate refuses, so prompts
// stored before a rule existed still render, within the Limits.
func Parse(content string) (*Template, error) {
	trees, err := parse.Parse("prompt", content, "", "", builtins, renderFuncs)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrTemplate, err)
	}
	for _, t := range trees {
		instrument(t.Root)
		t.Root.Nodes = append(append([]parse.Node{enter}, t.Root.Nodes...), leave)
	}
	return &Template{trees: trees}, nil
}

// instrument puts step before every node of l that is not text, and at
// its start, recursively.
func instrument(l *parse.ListNode) {
	if l == nil {
		return
	}
	nodes := make([]parse.Node, 0, 2*len(l.Nodes)+1)
	nodes = append(nodes, step)
	for _, n := range l.Nodes {
		switch n := n.(type) {
		case *parse.TextNode, *parse.CommentNode:
		case *parse.IfNode:
			instrument(n.List)
			instrument(n.ElseList)
		case *parse.WithNode:
			instrument(n.List)
			instrument(n.ElseList)
		case *parse.RangeNode:
			instrument(n.List)
			instrument(n.ElseList)
		}
		if _, text := n.(*parse.TextNode); !text && nodes[len(nodes)-1] != step {
			nodes = append(nodes, step)
		}
		nodes = append(nodes, n)
	}
	l.Nodes = nodes
}

// Render executes content with values, after filling defaults and
// checking that every value is declared, every required parameter is
// given and every value has its declared type. Errors wrap ErrParams (the
// caller's values), ErrTemplate (the content fails on these values),
// ErrRenderLimit (a limit was reached) or ctx's error.
func Render(ctx context.Context, content string, params []Param, values map[string]any, lim Limits) (string, error) {
	data, err := renderData(params, values)
	if err != nil {
		return "", err
	}
	t, err := Parse(content)
	if err != nil {
		return "", err
	}
	return t.execute(ctx, data, lim)
}

// Render is Render of a parsed template, for callers that render one
// prompt many times (prompts.get's cache): parsing is most of a
// rendering's cost.
func (t *Template) Render(ctx context.Context, params []Param, values map[string]any, lim Limits) (string, error) {
	data, err := renderData(params, values)
	if err != nil {
		return "", err
	}
	return t.execute(ctx, data, lim)
}

func (t *Template) execute(ctx context.Context, data map[string]any, lim Limits) (string, error) {
	r, err := t.rendering()
	if err != nil {
		return "", err
	}
	r.ctx, r.lim, r.steps, r.depth, r.stop = ctx, lim.withDefaults(), 0, 0, nil
	r.deadline = time.Now().Add(r.lim.Timeout)
	err = r.tmpl.Execute(r, data)
	out := string(r.out)
	if cap(r.out) > 64<<10 {
		r.out = nil // do not keep a large buffer for the next small prompt
	}
	r.out, r.ctx = r.out[:0], nil
	switch {
	case r.stop != nil: // the cause, not text/template's wrapping of it
		err = r.stop
		out = ""
	case err != nil:
		err = fmt.Errorf("%w: %w", ErrTemplate, err)
		out = ""
	}
	t.renderings.Put(r)
	return out, err
}

// rendering returns a rendering of t's from the pool, or a new one: a
// text/template.Template of t's trees with functions bound to it (no
// parsing).
func (t *Template) rendering() (*rendering, error) {
	if r, ok := t.renderings.Get().(*rendering); ok {
		return r, nil
	}
	r := &rendering{}
	r.tmpl = template.New("prompt").Option("missingkey=error").Funcs(template.FuncMap{
		enterFunc:  r.enter,
		leaveFunc:  r.leave,
		"print":    r.print,
		"println":  r.println,
		"printf":   r.printf,
		"html":     r.escaper(template.HTMLEscaper),
		"js":       r.escaper(template.JSEscaper),
		"urlquery": r.escaper(template.URLQueryEscaper),
	})
	for name, tree := range t.trees {
		if _, err := r.tmpl.AddParseTree(name, tree); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrTemplate, err)
		}
	}
	return r, nil
}

// rendering is one execution: its output and what it has spent.
type rendering struct {
	tmpl     *template.Template
	ctx      context.Context
	lim      Limits
	deadline time.Time
	steps    int
	depth    int
	out      []byte
	stop     error // why the rendering was stopped, once it was
}

func (r *rendering) halt(err error) error {
	if r.stop == nil {
		r.stop = err
	}
	return r.stop
}

// spend counts n steps and checks the step limit, the time limit and
// ctx. Its error stops the execution.
func (r *rendering) spend(n int) error {
	if r.stop != nil {
		return r.stop
	}
	r.steps += n
	if r.steps > r.lim.MaxSteps {
		return r.halt(fmt.Errorf("%w: the template takes more than %d steps (actions, loop iterations, KiB built by functions)", ErrRenderLimit, r.lim.MaxSteps))
	}
	if err := r.ctx.Err(); err != nil {
		return r.halt(fmt.Errorf("rendering: %w", err))
	}
	if time.Now().After(r.deadline) {
		return r.halt(fmt.Errorf("%w: the rendering takes longer than %s", ErrRenderLimit, r.lim.Timeout))
	}
	return nil
}

func (r *rendering) enter() (string, error) {
	if r.depth++; r.depth > MaxDepth {
		return "", r.halt(fmt.Errorf("%w: templates call one another more than %d deep", ErrRenderLimit, MaxDepth))
	}
	return "", nil
}

// leave is the end of a template's body: an execution stopped inside it
// never gets there, and stops altogether.
func (r *rendering) leave() (string, error) {
	r.depth--
	return "", nil
}

// Write appends to the output up to MaxOutput; past it, the error stops
// the execution. An empty write is a step.
func (r *rendering) Write(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, r.spend(1)
	}
	if r.stop != nil {
		return 0, r.stop
	}
	if err := r.fits(len(r.out) + len(p)); err != nil {
		return 0, err
	}
	r.out = append(r.out, p...)
	return len(p), nil
}

func (r *rendering) fits(n int) error {
	if n > r.lim.MaxOutput {
		return r.halt(fmt.Errorf("%w: the rendering is longer than %d bytes", ErrRenderLimit, r.lim.MaxOutput))
	}
	return nil
}

// made checks text a function built, and counts a step per KiB of it:
// building text is the work a loop over large values repeats.
func (r *rendering) made(s string) (string, error) {
	if err := r.fits(len(s)); err != nil {
		return "", err
	}
	if err := r.spend(len(s) >> 10); err != nil {
		return "", err
	}
	return s, nil
}

func (r *rendering) print(args ...any) (string, error) {
	if err := r.fits(r.size(args...) + len(args)); err != nil {
		return "", err
	}
	return r.made(fmt.Sprint(args...))
}

func (r *rendering) println(args ...any) (string, error) {
	if err := r.fits(r.size(args...) + len(args)); err != nil {
		return "", err
	}
	return r.made(fmt.Sprintln(args...))
}

// printf checks the format as CheckTemplate does (it may come from a
// parameter, or from a prompt stored before the rule), and about what the
// arguments make of it before fmt builds it: a width pads every element
// of a list. Verbs that quote or hex-encode write up to 6 bytes per byte
// of the estimate; made checks what they built.
func (r *rendering) printf(format string, args ...any) (string, error) {
	widest, err := checkFormat(format)
	if err != nil {
		return "", r.halt(fmt.Errorf("%w: %w", ErrRenderLimit, err))
	}
	n := len(format)
	for _, a := range args {
		size, leaves := r.measure(reflect.ValueOf(a), r.lim.MaxOutput+1)
		n += size + leaves*widest
		if err := r.fits(n); err != nil {
			return "", err
		}
	}
	return r.made(fmt.Sprintf(format, args...))
}

// escaper wraps one of text/template's escaping functions, which take
// their arguments as fmt.Sprint does and write up to 6 bytes per byte:
// an input within MaxOutput makes at most 6 × MaxOutput, which made
// checks. Chained, they would grow text exponentially.
func (r *rendering) escaper(f func(...any) string) func(...any) (string, error) {
	return func(args ...any) (string, error) {
		if err := r.fits(r.size(args...) + len(args)); err != nil {
			return "", err
		}
		return r.made(f(args...))
	}
}

// size is about what fmt.Sprint(args...) writes, not counting past
// MaxOutput.
func (r *rendering) size(args ...any) int {
	n := 0
	for _, a := range args {
		s, _ := r.measure(reflect.ValueOf(a), r.lim.MaxOutput+1-n)
		n += s
		if n > r.lim.MaxOutput {
			break
		}
	}
	return n
}

// measure returns about the bytes fmt's %v writes for v, and the values
// it formats (leaves), stopping once over budget. Numbers count 24 bytes
// (the longest %v of a float64), which %f of a huge number exceeds: the
// result is checked again once built.
func (r *rendering) measure(v reflect.Value, budget int) (size, leaves int) {
	if budget <= 0 {
		return 0, 0
	}
	switch v.Kind() {
	case reflect.Invalid:
		return 5, 1 // <nil>
	case reflect.Interface, reflect.Pointer:
		if v.IsNil() {
			return 5, 1
		}
		return r.measure(v.Elem(), budget)
	case reflect.String:
		return v.Len(), 1
	case reflect.Slice, reflect.Array:
		size = 2
		for i := 0; i < v.Len() && size <= budget; i++ {
			s, l := r.measure(v.Index(i), budget-size)
			size += s + 1
			leaves += l
		}
		return size, leaves
	case reflect.Map:
		size = 5
		it := v.MapRange()
		for size <= budget && it.Next() {
			ks, kl := r.measure(it.Key(), budget-size)
			vs, vl := r.measure(it.Value(), budget-size-ks)
			size += ks + vs + 2
			leaves += kl + vl
		}
		return size, leaves
	case reflect.Struct:
		size = 2
		for i := 0; i < v.NumField() && size <= budget; i++ {
			s, l := r.measure(v.Field(i), budget-size)
			size += s + 1
			leaves += l
		}
		return size, leaves
	}
	return 24, 1
}
