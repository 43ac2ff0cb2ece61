package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/google/uuid"
	"github.com/mattn/go-isatty"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"go.yaml.in/yaml/v3"

	"github.com/agentq/agentq/internal/bus"
	"github.com/agentq/agentq/internal/config"
	"github.com/agentq/agentq/internal/indexer"
	"github.com/agentq/agentq/internal/service"
	"github.com/agentq/agentq/schemas"
)

// This file holds agentq prompt (seed, get, search, activate) and what
// agentq tool (tool.go) shares with it: subcommand dispatch, reading
// catalog entries from YAML and JSON files, their event ids, and waiting
// for the indexer's answers.

// Defaults of the catalog commands' --timeout.
const (
	answerTimeout  = 60 * time.Second // seed, register, activate: waiting for the indexer
	requestTimeout = 10 * time.Second // get, search: one request/reply call
)

func init() {
	register("prompt", "the prompt library: seed prompts from files, get (rendered), search, activate a version", runPrompt)
	describe("prompt", "seed|get|search|activate [args] [flags]", `Works with the prompt library the indexer keeps. Prompts are added as
prompt.created events and labels moved with prompt.activated events, like
any agent would; get and search are the request/reply calls agents make
(prompts.get.<tenant>, search.prompts.<tenant>).

The tenant is --tenant, else AGENTQ_TENANT, else "default".`)
	describe("prompt seed", "FILE|DIR [--tenant T] [--timeout D] [--json]", `Publishes every prompt of FILE (YAML or JSON; "-" reads stdin) or of every
*.yaml, *.yml and *.json file in DIR (sorted by name) as a prompt.created
event, waits for the indexer's answer to each and prints a summary:
created, unchanged (the same version was already stored), rejected (with
the indexer's reason), or no answer within --timeout. Exits 1 if any prompt
was rejected or unanswered.

A file holds one prompt (a mapping) or a list of them; YAML files may hold
several documents. A prompt has the fields of prompt.created: id, type,
name, content (a Go text/template using {{.Param}}), and optionally version
(omitted: the next free version), description, parameters ({name, type,
required, default, description}), tags, author, metadata. Every prompt is
checked against the prompt.created schema before anything is published.

Event ids derive from tenant, content and the stream's duplicate window, so
seeding the same file twice within the window publishes nothing new (the
earlier answers are reported), and seeding it again later is answered
"unchanged".`)
	describe("prompt get", "ID [--version N | --label L] [--param K=V ...] [--params-json JSON] [--json]", `Asks the indexer for one prompt version (prompts.get.<tenant>) and prints
its metadata and content; with parameters, also the content rendered with
them. Without --version or --label the version labelled production is
returned, else the latest.

--param Name=value gives a string; --param Name:=JSON gives any JSON value
(--param Count:=3, --param Strict:=true). --params-json gives them all as
one JSON object; --param values override it.`)
	describe("prompt search", "QUERY [--type T] [--tag X ...] [--limit N] [--json]", `Searches the prompt library (search.prompts.<tenant>): the tenant's prompts
and the _global ones, by meaning and by words, re-ranked by quality,
recency and usage. Prints a table, best first, with each result's score and
the components it is made of, and how the candidates were retrieved: when
search fell back to words alone (the embedding provider is down) it says
it is degraded, and why.`)
	describe("prompt activate", "ID VERSION [--label production] [--reason TEXT] [--by WHO] [--json]", `Moves a label (default production) to a prompt version by publishing
prompt.activated, waits for the indexer's answer and prints it: the labels
now on the version, or why it was rejected (unknown_version). Agents that
get the prompt by label receive that version from then on. Exits 1 when
rejected or unanswered.`)
}

// subcommand is one verb of a command group such as agentq prompt.
type subcommand struct {
	name    string
	summary string
	run     func(ctx context.Context, e Env, cfg config.Config, args []string) error
}

var promptSubcommands = []subcommand{
	{"seed", "publish prompts from YAML or JSON files and report what the indexer made of each", runPromptSeed},
	{"get", "print one prompt version, rendered with parameters when given", runPromptGet},
	{"search", "search prompts by meaning and words; a ranked table with score components", runPromptSearch},
	{"activate", "move a label (default production) to a version and wait for the indexer's answer", runPromptActivate},
}

func runPrompt(ctx context.Context, e Env, cfg config.Config, _ zerolog.Logger, args []string) error {
	return runGroup(ctx, e, cfg, "prompt", promptSubcommands, args)
}

// runGroup runs the subcommand named by args[0]. Errors are prefixed with
// the subcommand's name, since Run prefixes them with the group's.
func runGroup(ctx context.Context, e Env, cfg config.Config, group string, subs []subcommand, args []string) error {
	names := make([]string, len(subs))
	for i, s := range subs {
		names[i] = s.name
	}
	if len(args) == 0 {
		fmt.Fprintf(e.Stderr, "agentq %s: a subcommand is required (%s)\n", group, strings.Join(names, ", "))
		groupUsage(e.Stderr, group, subs)
		return errUsage
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		groupUsage(e.Stderr, group, subs)
		return flag.ErrHelp
	}
	for _, s := range subs {
		if s.name == args[0] {
			if err := s.run(ctx, e, cfg, args[1:]); err != nil {
				if errors.Is(err, errUsage) || errors.Is(err, flag.ErrHelp) {
					return err
				}
				return fmt.Errorf("%s: %w", s.name, err)
			}
			return nil
		}
	}
	fmt.Fprintf(e.Stderr, "agentq %s: unknown subcommand %q (%s)\n", group, args[0], strings.Join(names, ", "))
	groupUsage(e.Stderr, group, subs)
	return errUsage
}

func groupUsage(w io.Writer, group string, subs []subcommand) {
	h := helps[group]
	fmt.Fprintf(w, "usage: agentq %s %s\n\n%s\n\nsubcommands:\n", group, h.synopsis, h.text)
	for _, s := range subs {
		fmt.Fprintf(w, "  %-10s %s\n", s.name, s.summary)
	}
	fmt.Fprintf(w, "\nRun `agentq %s <subcommand> -h` for its arguments and flags.\n", group)
}

// parseInterleaved parses flags that may come before, between or after the
// positional arguments (`agentq prompt get ID --version 2`), which the flag
// package alone stops at, and returns the positional arguments. After
// "--" everything is positional.
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, parseError(err)
		}
		rest := fs.Args()
		if consumed := len(args) - len(rest); consumed > 0 && args[consumed-1] == "--" {
			return append(pos, rest...), nil
		}
		if len(rest) == 0 {
			return pos, nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// listFlag is a repeatable string flag.
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }

func (l *listFlag) Set(v string) error {
	*l = append(*l, v)
	return nil
}

// tenantFlag adds --tenant, defaulting to AGENTQ_TENANT, else "default".
func tenantFlag(fs *flag.FlagSet, e Env) *string {
	def := e.Getenv("AGENTQ_TENANT")
	if def == "" {
		def = "default"
	}
	return fs.String("tenant", def, "tenant id ([a-z0-9_-]{1,64}); AGENTQ_TENANT sets the default")
}

// checkTenant returns a usage error when tenant is malformed.
func checkTenant(e Env, fs *flag.FlagSet, name, tenant string) error {
	if !bus.ValidTenant(tenant) {
		return usageError(e, fs, name, "tenant %q does not match [a-z0-9_-]{1,64}", tenant)
	}
	return nil
}

// --- entries: prompts and tools read from files ---

// entry is one prompt or tool definition read from a file.
type entry struct {
	source string         // file name as given, or "stdin"
	index  int            // 1-based position in its source
	line   int            // line in a YAML source; 0 when unknown
	data   map[string]any // JSON-compatible values
	raw    []byte         // data as canonical JSON: keys sorted
}

// where names the entry in messages: "prompts.yaml entry 3 (line 41)".
func (en entry) where() string {
	if en.line > 0 {
		return fmt.Sprintf("%s entry %d (line %d)", en.source, en.index, en.line)
	}
	return fmt.Sprintf("%s entry %d", en.source, en.index)
}

// str returns the string field key, or "".
func (en entry) str(key string) string {
	s, _ := en.data[key].(string)
	return s
}

// loadEntries reads the entries of path: a file, a directory (its *.yaml,
// *.yml and *.json files, sorted by name, not recursing) or "-" for stdin.
func loadEntries(e Env, path string) ([]entry, error) {
	if path == "-" {
		raw, err := io.ReadAll(e.Stdin)
		if err != nil {
			return nil, fmt.Errorf("read stdin: %w", err)
		}
		return parseEntries("stdin", raw, false)
	}
	info, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	files := []string{path}
	if info.IsDir() {
		des, err := os.ReadDir(path)
		if err != nil {
			return nil, err
		}
		files = files[:0]
		for _, de := range des { // sorted by name
			switch strings.ToLower(filepath.Ext(de.Name())) {
			case ".yaml", ".yml", ".json":
				if !de.IsDir() {
					files = append(files, filepath.Join(path, de.Name()))
				}
			}
		}
		if len(files) == 0 {
			return nil, fmt.Errorf("%s: no *.yaml, *.yml or *.json files in the directory", path)
		}
	}
	var all []entry
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		ens, err := parseEntries(f, raw, strings.EqualFold(filepath.Ext(f), ".json"))
		if err != nil {
			return nil, err
		}
		all = append(all, ens...)
	}
	return all, nil
}

// parseEntries reads one source: a JSON or YAML value that is one entry (a
// mapping) or a list of them; a YAML source may hold several documents.
func parseEntries(source string, raw []byte, isJSON bool) ([]entry, error) {
	var ens []entry
	add := func(v any, line int) error {
		items := []any{v}
		lines := []int{line}
		if l, ok := v.(listWithLines); ok {
			items, lines = l.items, l.lines
		} else if l, ok := v.([]any); ok {
			items = l
			lines = make([]int, len(l))
		}
		for i, it := range items {
			en := entry{source: source, index: len(ens) + 1, line: lines[i]}
			m, ok := it.(map[string]any)
			if !ok {
				return fmt.Errorf("%s: want a mapping (an object) with the fields of the definition, got %s", en.where(), kindOf(it))
			}
			b, err := json.Marshal(m) // encoding/json sorts map keys: a canonical form
			if err != nil {
				return fmt.Errorf("%s: %w", en.where(), err)
			}
			en.data, en.raw = m, b
			ens = append(ens, en)
		}
		return nil
	}
	if isJSON {
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.UseNumber()
		var v any
		if err := dec.Decode(&v); err != nil {
			if errors.Is(err, io.EOF) {
				return nil, fmt.Errorf("%s: empty file", source)
			}
			return nil, fmt.Errorf("%s: not valid JSON: %w", source, err)
		}
		if _, err := dec.Token(); !errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("%s: not valid JSON: more data after the first value (a list is written [ ... ])", source)
		}
		if err := add(v, 0); err != nil {
			return nil, err
		}
		return ens, nil
	}
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	docs := 0
	for {
		var doc yaml.Node
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%s: not valid YAML: %w", source, err)
		}
		docs++
		if len(doc.Content) == 0 {
			continue // an empty document
		}
		root := doc.Content[0]
		v, err := yamlValue(root)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", source, err)
		}
		if root.Kind == yaml.SequenceNode {
			lines := make([]int, len(root.Content))
			for i, c := range root.Content {
				lines[i] = c.Line
			}
			v = listWithLines{v.([]any), lines}
		}
		if v == nil {
			continue // a document holding only null
		}
		if err := add(v, root.Line); err != nil {
			return nil, err
		}
	}
	if len(ens) == 0 {
		return nil, fmt.Errorf("%s: no definitions in the file", source)
	}
	return ens, nil
}

// listWithLines is a YAML list with the line of each item.
type listWithLines struct {
	items []any
	lines []int
}

func kindOf(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case []any, listWithLines:
		return "a list"
	case string:
		return "a string"
	case bool:
		return "a boolean"
	default:
		return "a number"
	}
}

// yamlValue turns a YAML node into the values encoding/json produces, so a
// YAML file and its JSON equivalent give the same data. Scalars keep their
// text unless they resolve to null, a boolean or a number: an unquoted
// date stays the string it is written as.
func yamlValue(n *yaml.Node) (any, error) {
	switch n.Kind {
	case yaml.DocumentNode:
		if len(n.Content) == 0 {
			return nil, nil
		}
		return yamlValue(n.Content[0])
	case yaml.AliasNode:
		return yamlValue(n.Alias)
	case yaml.SequenceNode:
		out := make([]any, 0, len(n.Content))
		for _, c := range n.Content {
			v, err := yamlValue(c)
			if err != nil {
				return nil, err
			}
			out = append(out, v)
		}
		return out, nil
	case yaml.MappingNode:
		out := make(map[string]any, len(n.Content)/2)
		var merged []map[string]any
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, vn := n.Content[i], n.Content[i+1]
			if k.Kind == yaml.ScalarNode && k.ShortTag() == "!!merge" {
				m, err := mergeSources(vn)
				if err != nil {
					return nil, err
				}
				merged = append(merged, m...)
				continue
			}
			if k.Kind != yaml.ScalarNode {
				return nil, fmt.Errorf("line %d: a mapping key must be a string", k.Line)
			}
			if _, dup := out[k.Value]; dup {
				return nil, fmt.Errorf("line %d: key %q appears twice", k.Line, k.Value)
			}
			v, err := yamlValue(vn)
			if err != nil {
				return nil, err
			}
			out[k.Value] = v
		}
		// Keys written in the mapping win over merged ones, and earlier
		// merge sources over later ones, as YAML's merge key specifies.
		for _, m := range merged {
			for k, v := range m {
				if _, ok := out[k]; !ok {
					out[k] = v
				}
			}
		}
		return out, nil
	case yaml.ScalarNode:
		switch n.ShortTag() {
		case "!!null":
			return nil, nil
		case "!!bool":
			var b bool
			if err := n.Decode(&b); err != nil {
				return nil, fmt.Errorf("line %d: %w", n.Line, err)
			}
			return b, nil
		case "!!int":
			var i int64
			if err := n.Decode(&i); err == nil {
				return i, nil
			}
			fallthrough
		case "!!float":
			var f float64
			if err := n.Decode(&f); err != nil {
				return nil, fmt.Errorf("line %d: %w", n.Line, err)
			}
			if math.IsInf(f, 0) || math.IsNaN(f) {
				return nil, fmt.Errorf("line %d: %s is not a JSON number", n.Line, n.Value)
			}
			return f, nil
		default: // !!str, !!timestamp, !!binary, custom tags: the text
			return n.Value, nil
		}
	}
	return nil, fmt.Errorf("line %d: unsupported YAML node", n.Line)
}

// mergeSources returns the mappings a merge key (<<) refers to.
func mergeSources(n *yaml.Node) ([]map[string]any, error) {
	v, err := yamlValue(n)
	if err != nil {
		return nil, err
	}
	switch v := v.(type) {
	case map[string]any:
		return []map[string]any{v}, nil
	case []any:
		out := make([]map[string]any, 0, len(v))
		for _, it := range v {
			m, ok := it.(map[string]any)
			if !ok {
				return nil, fmt.Errorf("line %d: a merge key (<<) takes mappings", n.Line)
			}
			out = append(out, m)
		}
		return out, nil
	}
	return nil, fmt.Errorf("line %d: a merge key (<<) takes a mapping or a list of mappings", n.Line)
}

// validateEntries checks every entry against eventType's schema and
// returns one error listing every invalid entry by file and position.
func validateEntries(reg *schemas.Registry, eventType string, ens []entry, label func(entry) string) error {
	var bad []string
	for _, en := range ens {
		if err := reg.Validate(eventType, en.raw); err != nil {
			what := en.where()
			if l := label(en); l != "" {
				what += " " + l
			}
			bad = append(bad, fmt.Sprintf("  %s: %v", what, err))
		}
	}
	if len(bad) == 0 {
		return nil
	}
	noun := "entries are"
	if len(bad) == 1 {
		noun = "entry is"
	}
	return fmt.Errorf("%d %s invalid; nothing was published:\n%s", len(bad), noun, strings.Join(bad, "\n"))
}

// --- event ids ---

// catalogNamespace seeds the ids of the events seed and register publish.
var catalogNamespace = uuid.MustParse("c3a5f0d2-41e8-4f7b-9c52-6d0b8e1a7f94")

// catalogEventID is the id of the event that publishes one entry: a UUIDv5
// of the tenant, the event type, the entry's canonical JSON and the
// duplicate window it is published in (window number bucket). Within one
// window the same entry always gets the same id, so a repeated or retried
// seed is dropped by JetStream's duplicate detection (whose window is as
// long, so two publishes in one bucket are always within it). In a later
// window the id is new: the indexer receives the event again and answers
// "unchanged", instead of recognising an event id it applied before and
// answering nothing.
func catalogEventID(tenant, eventType string, bucket int64, canonical []byte) string {
	return uuid.NewSHA1(catalogNamespace, []byte(tenant+"\x00"+eventType+"\x00"+strconv.FormatInt(bucket, 10)+"\x00"+string(canonical))).String()
}

// duplicateWindow returns stream AGENTQ's duplicate window.
func duplicateWindow(ctx context.Context, js jetstream.JetStream) (time.Duration, error) {
	s, err := js.Stream(ctx, bus.StreamName)
	if err != nil {
		return 0, fmt.Errorf("stream %s: %w", bus.StreamName, err)
	}
	w := s.CachedInfo().Config.Duplicates
	if w <= 0 {
		w = 2 * time.Minute // JetStream's default
	}
	return w, nil
}

// --- answers: the indexer's results, matched by causationid ---

// answer is the indexer's result for one event.
type answer struct {
	typ  string          // agentq.prompt.indexed.v1, agentq.tool.indexed.v1 or agentq.indexer.rejected.v1
	data json.RawMessage // the result's data
}

// indexed is the data of prompt.indexed and tool.indexed that the commands
// show.
type indexed struct {
	PromptID    string   `json:"prompt_id"`
	ToolName    string   `json:"tool_name"`
	Version     int      `json:"version"`
	ContentHash string   `json:"content_hash"`
	Labels      []string `json:"labels"`
	Outcome     string   `json:"outcome"` // created (also when absent) or unchanged
}

// rejected is the data of indexer.rejected.
type rejected struct {
	ReasonCode string `json:"reason_code"`
	Reason     string `json:"reason"`
}

// answers follows a tenant's result subjects on stream AGENTQ and keeps
// the results caused by the awaited events. It reads the stream, not a
// core NATS subscription: the answer to an event whose publish JetStream
// dropped as a duplicate was published before the command started.
type answers struct {
	mu      sync.Mutex
	await   map[string]bool
	got     map[string]answer
	changed chan struct{} // a token after every new answer
	cc      jetstream.ConsumeContext
}

// followAnswers starts reading subjects from the stream at start (an
// ordered consumer: no state left on the server) and keeps the results
// whose causationid is one of await.
func followAnswers(ctx context.Context, js jetstream.JetStream, subjects []string, start jetstream.OrderedConsumerConfig, await []string) (*answers, error) {
	a := &answers{await: map[string]bool{}, got: map[string]answer{}, changed: make(chan struct{}, 1)}
	for _, id := range await {
		a.await[id] = true
	}
	start.FilterSubjects = subjects
	cons, err := js.OrderedConsumer(ctx, bus.StreamName, start)
	if err != nil {
		return nil, fmt.Errorf("follow %s: %w", strings.Join(subjects, " "), err)
	}
	cc, err := cons.Consume(func(m jetstream.Msg) {
		ev, err := bus.Decode(m.Headers(), m.Data())
		if err != nil {
			return // not agentq's: nothing we wait for
		}
		cause := bus.Causation(ev)
		a.mu.Lock()
		defer a.mu.Unlock()
		if !a.await[cause] {
			return
		}
		if _, seen := a.got[cause]; seen {
			return // a republished result: the first one counts
		}
		a.got[cause] = answer{typ: ev.Type(), data: ev.Data()}
		select {
		case a.changed <- struct{}{}:
		default:
		}
	})
	if err != nil {
		return nil, fmt.Errorf("follow %s: %w", strings.Join(subjects, " "), err)
	}
	a.cc = cc
	return a, nil
}

// stop ends the reading.
func (a *answers) stop() { a.cc.Stop() }

// count returns how many awaited events have an answer.
func (a *answers) count() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.got)
}

// get returns the answer to event id, if any.
func (a *answers) get(id string) (answer, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	ans, ok := a.got[id]
	return ans, ok
}

// wait returns when every awaited event has an answer, timeout has passed
// or ctx ends; progress is called after every new answer.
func (a *answers) wait(ctx context.Context, timeout time.Duration, progress func(answered int)) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	for {
		n := a.count()
		if progress != nil {
			progress(n)
		}
		if n == len(a.await) {
			return
		}
		select {
		case <-a.changed:
		case <-t.C:
			return
		case <-ctx.Done():
			return
		}
	}
}

// --- publishing a catalog: prompt seed and tool register ---

// catalog describes what seed and register publish and how the indexer
// answers.
type catalog struct {
	noun      string // "prompt" or "tool"
	eventType string // prompt.created or tool.registered
	okType    string // prompt.indexed or tool.indexed
	label     func(entry) string
}

// catalogItem is one entry and what became of it, as --json prints it.
type catalogItem struct {
	Source      string   `json:"source"`
	Index       int      `json:"index"`
	Line        int      `json:"line,omitempty"`
	PromptID    string   `json:"prompt_id,omitempty"`
	ToolName    string   `json:"tool_name,omitempty"`
	Version     int      `json:"version,omitempty"` // as stored (the indexer assigns omitted ones)
	EventID     string   `json:"event_id"`
	Duplicate   bool     `json:"duplicate_publish"` // JetStream had the event already: the answer is the earlier one
	Outcome     string   `json:"outcome"`           // created, unchanged, rejected or no_answer
	ContentHash string   `json:"content_hash,omitempty"`
	Labels      []string `json:"labels,omitempty"`
	ReasonCode  string   `json:"reason_code,omitempty"`
	Reason      string   `json:"reason,omitempty"`
}

// catalogReport is what seed and register print with --json.
type catalogReport struct {
	Tenant     string        `json:"tenant"`
	Created    int           `json:"created"`
	Unchanged  int           `json:"unchanged"`
	Rejected   int           `json:"rejected"`
	NoAnswer   int           `json:"no_answer"`
	Items      []catalogItem `json:"items"`
	TimedOutIn string        `json:"timeout,omitempty"`
}

// Outcomes of a catalog item.
const (
	outcomeCreated   = "created"
	outcomeUnchanged = "unchanged"
	outcomeRejected  = "rejected"
	outcomeNoAnswer  = "no_answer"
)

// publishCatalog validates ens, publishes them to tenant, waits up to
// timeout for the indexer's answers and reports. It fails when an entry is
// invalid (before publishing anything), rejected or unanswered.
func publishCatalog(ctx context.Context, e Env, cfg config.Config, c catalog, tenant string, ens []entry, timeout time.Duration, asJSON bool) error {
	reg, err := schemas.Load()
	if err != nil {
		return err
	}
	if err := validateEntries(reg, c.eventType, ens, c.label); err != nil {
		return err
	}
	cfg.NATSURL = natsURL(e, cfg)
	nc, js, err := connect(cfg)
	if err != nil {
		return err
	}
	defer nc.Close()
	window, err := duplicateWindow(ctx, js)
	if err != nil {
		return err
	}
	now := time.Now()
	bucket := now.UnixNano() / int64(window)
	ids := make([]string, len(ens))
	for i, en := range ens {
		ids[i] = catalogEventID(tenant, c.eventType, bucket, en.raw)
	}
	okSubject, _ := bus.SubjectFor(c.okType, tenant)
	rejSubject, _ := bus.SubjectFor(indexer.TypeRejected, tenant)
	// From one window before this one: a duplicate's answer was published
	// after its original, which is at most one window old; the extra
	// window absorbs clock skew between this machine and the server.
	since := time.Unix(0, (bucket-1)*int64(window)).Add(-time.Minute)
	ans, err := followAnswers(ctx, js, []string{okSubject, rejSubject},
		jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverByStartTimePolicy, OptStartTime: &since}, ids)
	if err != nil {
		return err
	}
	defer ans.stop()
	warnIfNoIndexer(ctx, e, js)

	prog := newProgress(e.Stderr, len(ens), c.noun)
	pub := bus.NewPublisher(js, reg)
	dup := make(map[string]bool, len(ens))
	published := map[string]bool{}
	for i, en := range ens {
		if published[ids[i]] {
			prog.published(i + 1)
			continue // the same definition twice in the input: one event
		}
		ev, err := bus.NewEvent(c.eventType, tenant, "agentq-cli", json.RawMessage(en.raw))
		if err != nil {
			return fmt.Errorf("%s: %w", en.where(), err)
		}
		ev.SetID(ids[i])
		ack, err := pub.Publish(ctx, ev)
		if err != nil {
			return fmt.Errorf("%s: %w (%d of %d published before it)", en.where(), err, i, len(ens))
		}
		published[ids[i]] = true
		dup[ids[i]] = ack.Duplicate
		prog.published(i + 1)
	}
	prog.waiting(timeout)
	ans.wait(ctx, timeout, prog.answered)
	prog.done()

	rep := catalogReport{Tenant: tenant}
	for i, en := range ens {
		it := catalogItem{Source: en.source, Index: en.index, Line: en.line, EventID: ids[i], Duplicate: dup[ids[i]], Outcome: outcomeNoAnswer}
		if c.noun == "prompt" {
			it.PromptID = en.str("id")
			if v, ok := asInt(en.data["version"]); ok {
				it.Version = v
			}
		} else {
			it.ToolName = en.str("name")
		}
		if a, ok := ans.get(ids[i]); ok {
			applyAnswer(&it, a)
		}
		switch it.Outcome {
		case outcomeCreated:
			rep.Created++
		case outcomeUnchanged:
			rep.Unchanged++
		case outcomeRejected:
			rep.Rejected++
		default:
			rep.NoAnswer++
		}
		rep.Items = append(rep.Items, it)
	}
	if rep.NoAnswer > 0 {
		rep.TimedOutIn = timeout.String()
	}
	if asJSON {
		if err := writeJSON(e.Stdout, rep); err != nil {
			return err
		}
	} else {
		printCatalogReport(e.Stdout, c, rep, timeout)
	}
	if rep.Rejected > 0 || rep.NoAnswer > 0 {
		return fmt.Errorf("%d of %d %ss rejected, %d without an answer within %s", rep.Rejected, len(ens), c.noun, rep.NoAnswer, timeout)
	}
	return nil
}

// applyAnswer fills it from the indexer's answer.
func applyAnswer(it *catalogItem, a answer) {
	if a.typ == indexer.TypeRejected {
		var r rejected
		_ = json.Unmarshal(a.data, &r)
		it.Outcome, it.ReasonCode, it.Reason = outcomeRejected, r.ReasonCode, r.Reason
		return
	}
	var d indexed
	_ = json.Unmarshal(a.data, &d)
	it.Outcome = outcomeCreated
	if d.Outcome == outcomeUnchanged {
		it.Outcome = outcomeUnchanged
	}
	if d.Version > 0 {
		it.Version = d.Version
	}
	it.ContentHash, it.Labels = d.ContentHash, d.Labels
}

func printCatalogReport(w io.Writer, c catalog, rep catalogReport, timeout time.Duration) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, it := range rep.Items {
		name := it.ToolName
		if c.noun == "prompt" {
			name = it.PromptID
			if it.Version > 0 {
				name += "@" + strconv.Itoa(it.Version)
			}
		} else if it.Version > 0 {
			name += " v" + strconv.Itoa(it.Version)
		}
		where := fmt.Sprintf("%s#%d", it.Source, it.Index)
		detail := ""
		switch it.Outcome {
		case outcomeCreated, outcomeUnchanged:
			if it.ContentHash != "" {
				detail = "hash " + shortHash(it.ContentHash)
			}
		case outcomeRejected:
			detail = it.ReasonCode + ": " + oneLineText(it.Reason)
		case outcomeNoAnswer:
			detail = "event " + it.EventID
		}
		if it.Duplicate {
			detail += " (published earlier in the duplicate window: its answer)"
		}
		outcome := it.Outcome
		if outcome == outcomeNoAnswer {
			outcome = "no answer"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", outcome, name, where, strings.TrimSpace(detail))
	}
	_ = tw.Flush()
	fmt.Fprintf(w, "%d %ss for tenant %s: %d created, %d unchanged, %d rejected, %d without an answer\n",
		len(rep.Items), c.noun, rep.Tenant, rep.Created, rep.Unchanged, rep.Rejected, rep.NoAnswer)
	if rep.NoAnswer > 0 {
		fmt.Fprintf(w, "no answer within %s: is the indexer running (`make dev` runs it)? `agentq dlq --consumer indexer` lists what it could not process; --timeout waits longer\n", timeout)
	}
}

func shortHash(h string) string {
	if len(h) > 12 {
		return h[:12]
	}
	return h
}

func oneLineText(s string) string { return strings.Join(strings.Fields(s), " ") }

// asInt returns v as an int when it is a whole number.
func asInt(v any) (int, bool) {
	switch n := v.(type) {
	case int64:
		return int(n), true
	case int:
		return n, true
	case float64:
		if n == math.Trunc(n) {
			return int(n), true
		}
	case json.Number:
		if i, err := n.Int64(); err == nil {
			return int(i), true
		}
	}
	return 0, false
}

// warnIfNoIndexer notes on stderr when stream AGENTQ has no indexer
// consumer: the events wait in the stream, and nothing answers them now.
func warnIfNoIndexer(ctx context.Context, e Env, js jetstream.JetStream) {
	if _, err := js.Consumer(ctx, bus.StreamName, "indexer"); errors.Is(err, jetstream.ErrConsumerNotFound) {
		fmt.Fprintln(e.Stderr, "note: stream AGENTQ has no indexer consumer yet: the events are stored, but only a running indexer answers them")
	}
}

// progress reports publishing and answers on stderr: one line updated in
// place on a terminal, else a line every step items.
type progress struct {
	w        io.Writer
	tty      bool
	total    int
	noun     string
	step     int
	pub, ans int
	last     time.Time
}

func newProgress(w io.Writer, total int, noun string) *progress {
	p := &progress{w: w, total: total, noun: noun, step: max(100, total/10)}
	if f, ok := w.(*os.File); ok && isatty.IsTerminal(f.Fd()) {
		p.tty = true
	}
	fmt.Fprintf(w, "publishing %d %ss ...\n", total, noun)
	return p
}

func (p *progress) published(n int) {
	p.pub = n
	if p.tty {
		p.redraw(n == p.total)
	} else if n%p.step == 0 && n < p.total {
		fmt.Fprintf(p.w, "  %d/%d published\n", n, p.total)
	}
}

func (p *progress) waiting(timeout time.Duration) {
	if p.tty {
		p.redraw(true)
		fmt.Fprintln(p.w)
	}
	fmt.Fprintf(p.w, "waiting for the indexer's answers (up to %s) ...\n", timeout)
}

func (p *progress) answered(n int) {
	prev := p.ans
	p.ans = n
	if p.tty {
		p.redraw(n == p.total)
	} else if n/p.step > prev/p.step && n < p.total {
		fmt.Fprintf(p.w, "  %d/%d answered\n", n, p.total)
	}
}

func (p *progress) done() {
	if p.tty {
		p.redraw(true)
		fmt.Fprintln(p.w)
	}
}

// redraw rewrites the terminal line, at most ten times a second.
func (p *progress) redraw(force bool) {
	if !force && time.Since(p.last) < 100*time.Millisecond {
		return
	}
	p.last = time.Now()
	const width = 30
	done := p.pub
	if p.ans > 0 {
		done = p.ans
	}
	fill := 0
	if p.total > 0 {
		fill = done * width / p.total
	}
	fmt.Fprintf(p.w, "\r[%s%s] %d/%d published, %d answered", strings.Repeat("#", fill), strings.Repeat(".", width-fill), p.pub, p.total, p.ans)
}

// --- agentq prompt seed ---

var promptCatalog = catalog{
	noun: "prompt", eventType: indexer.TypePromptCreated, okType: indexer.TypePromptIndexed,
	label: func(en entry) string {
		id := en.str("id")
		if id == "" {
			return ""
		}
		if v, ok := asInt(en.data["version"]); ok {
			return fmt.Sprintf("(%s@%d)", id, v)
		}
		return "(" + id + ")"
	},
}

func runPromptSeed(ctx context.Context, e Env, cfg config.Config, args []string) error {
	const name = "prompt seed"
	fs := flags(name, e)
	tenant := tenantFlag(fs, e)
	timeout := fs.Duration("timeout", answerTimeout, "how long to wait for the indexer's answers after publishing")
	asJSON := fs.Bool("json", false, "print JSON: counts and every prompt's outcome")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	switch {
	case len(pos) == 0:
		return usageError(e, fs, name, "FILE or DIR is required (- reads stdin)")
	case len(pos) > 1:
		return usageError(e, fs, name, "one FILE or DIR, got %d arguments", len(pos))
	case *timeout <= 0:
		return usageError(e, fs, name, "--timeout must be positive")
	}
	if err := checkTenant(e, fs, name, *tenant); err != nil {
		return err
	}
	ens, err := loadEntries(e, pos[0])
	if err != nil {
		return err
	}
	return publishCatalog(ctx, e, cfg, promptCatalog, *tenant, ens, *timeout, *asJSON)
}

// --- agentq prompt get ---

// promptView is a prompt version as prompts.get and search.prompts return
// it.
type promptView struct {
	ID          string          `json:"id"`
	Version     int             `json:"version"`
	ContentHash string          `json:"content_hash"`
	Type        string          `json:"type"`
	Name        string          `json:"name"`
	Content     string          `json:"content"`
	Description string          `json:"description"`
	Parameters  []paramView     `json:"parameters"`
	Tags        []string        `json:"tags"`
	Labels      []string        `json:"labels"`
	Author      string          `json:"author"`
	Metadata    json.RawMessage `json:"metadata"`
	Tenant      string          `json:"tenant"`
	CreatedAt   string          `json:"created_at"`
}

type paramView struct {
	Name        string          `json:"name"`
	Type        string          `json:"type"`
	Required    bool            `json:"required"`
	Default     json.RawMessage `json:"default"`
	Description string          `json:"description"`
}

// parseParams merges --params-json and the --param flags into one object.
func parseParams(paramsJSON string, params []string) (map[string]any, error) {
	out := map[string]any{}
	if paramsJSON != "" {
		dec := json.NewDecoder(strings.NewReader(paramsJSON))
		dec.UseNumber()
		if err := dec.Decode(&out); err != nil || out == nil {
			return nil, fmt.Errorf("--params-json must be a JSON object: %v", err)
		}
	}
	for _, p := range params {
		if k, v, ok := strings.Cut(p, ":="); ok && !strings.Contains(k, "=") {
			dec := json.NewDecoder(strings.NewReader(v))
			dec.UseNumber()
			var val any
			if err := dec.Decode(&val); err != nil {
				return nil, fmt.Errorf("--param %s: the value after := must be JSON: %v", p, err)
			}
			out[k] = val
			continue
		}
		k, v, ok := strings.Cut(p, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("--param %q: want Name=value or Name:=JSON", p)
		}
		out[k] = v
	}
	return out, nil
}

func runPromptGet(ctx context.Context, e Env, cfg config.Config, args []string) error {
	const name = "prompt get"
	fs := flags(name, e)
	tenant := tenantFlag(fs, e)
	version := fs.Int("version", 0, "version number (default: the version labelled production, else the latest)")
	label := fs.String("label", "", "label whose version to get, e.g. production or staging")
	var params listFlag
	fs.Var(&params, "param", "template parameter Name=value (a string) or Name:=JSON (any JSON value); repeatable")
	paramsJSON := fs.String("params-json", "", "template parameters as one JSON object")
	timeout := fs.Duration("timeout", requestTimeout, "how long to wait for the reply")
	asJSON := fs.Bool("json", false, "print the reply as JSON (prompt and rendered)")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	switch {
	case len(pos) == 0:
		return usageError(e, fs, name, "the prompt ID is required")
	case len(pos) > 1:
		return usageError(e, fs, name, "one prompt ID, got %d arguments", len(pos))
	case *version != 0 && *label != "":
		return usageError(e, fs, name, "--version and --label exclude each other")
	case *version < 0:
		return usageError(e, fs, name, "--version must be at least 1")
	}
	if err := checkTenant(e, fs, name, *tenant); err != nil {
		return err
	}
	values, err := parseParams(*paramsJSON, params)
	if err != nil {
		return usageError(e, fs, name, "%v", err)
	}
	req := map[string]any{"id": pos[0]}
	if *version > 0 {
		req["version"] = *version
	}
	if *label != "" {
		req["label"] = *label
	}
	if len(values) > 0 {
		req["params"] = values
	}
	var reply struct {
		Prompt   promptView `json:"prompt"`
		Rendered string     `json:"rendered"`
	}
	var raw json.RawMessage
	if err := call(ctx, e, cfg, "prompts.get."+*tenant, *timeout, req, &raw); err != nil {
		return err
	}
	if *asJSON {
		return writeJSON(e.Stdout, raw)
	}
	if err := json.Unmarshal(raw, &reply); err != nil {
		return fmt.Errorf("decode reply: %w", err)
	}
	printPrompt(e.Stdout, reply.Prompt)
	fmt.Fprintf(e.Stdout, "\n--- content ---\n%s\n", strings.TrimRight(reply.Prompt.Content, "\n"))
	if len(values) > 0 {
		fmt.Fprintf(e.Stdout, "\n--- rendered ---\n%s\n", strings.TrimRight(reply.Rendered, "\n"))
	}
	return nil
}

func printPrompt(w io.Writer, p promptView) {
	fmt.Fprintf(w, "%s@%d  %s\n", p.ID, p.Version, p.Name)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	row := func(k, v string) {
		if v != "" {
			fmt.Fprintf(tw, "  %s\t%s\n", k, v)
		}
	}
	row("type", p.Type)
	row("tenant", p.Tenant)
	row("hash", p.ContentHash)
	row("labels", strings.Join(p.Labels, ", "))
	row("tags", strings.Join(p.Tags, ", "))
	row("author", p.Author)
	row("created", p.CreatedAt)
	row("description", oneLineText(p.Description))
	if len(p.Metadata) > 0 && string(p.Metadata) != "{}" && string(p.Metadata) != "null" {
		row("metadata", compact(p.Metadata))
	}
	_ = tw.Flush()
	if len(p.Parameters) == 0 {
		return
	}
	fmt.Fprintln(w, "  parameters:")
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, pa := range p.Parameters {
		var attrs []string
		if pa.Type != "" {
			attrs = append(attrs, pa.Type)
		}
		if pa.Required {
			attrs = append(attrs, "required")
		}
		if len(pa.Default) > 0 && string(pa.Default) != "null" {
			attrs = append(attrs, "default "+compact(pa.Default))
		}
		fmt.Fprintf(tw, "    %s\t%s\t%s\n", pa.Name, strings.Join(attrs, ", "), oneLineText(pa.Description))
	}
	_ = tw.Flush()
}

// call sends a request/reply call to subject and decodes the reply into
// resp. A service error reply is returned as "code: message"; a subject
// nobody serves says which service should.
func call(ctx context.Context, e Env, cfg config.Config, subject string, timeout time.Duration, req, resp any) error {
	cfg.NATSURL = natsURL(e, cfg)
	nc, err := nats.Connect(cfg.NATSURL, nats.Name("agentq-cli"))
	if err != nil {
		return fmt.Errorf("connect to NATS at %s (start `make dev`, or set AGENTQ_NATS_URL): %w", cfg.NATSURL, err)
	}
	defer nc.Close()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	err = service.Call(ctx, nc, subject, req, resp)
	var serr *service.Error
	switch {
	case err == nil:
		return nil
	case errors.As(err, &serr):
		return serr
	case errors.Is(err, nats.ErrNoResponders):
		return fmt.Errorf("nothing serves %s: is the indexer running (`make dev` runs it)?", subject)
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("no reply on %s within %s (--timeout)", subject, timeout)
	}
	return err
}

// --- agentq prompt search ---

// components are the parts of a search score.
type components struct {
	Similarity float64 `json:"similarity"`
	Quality    float64 `json:"quality"`
	Recency    float64 `json:"recency"`
	Usage      float64 `json:"usage"`
}

// retrieval says how search found its candidates.
type retrieval struct {
	Mode     string `json:"mode"`
	Degraded bool   `json:"degraded"`
	Reason   string `json:"reason"`
}

// describe is the line the search commands print about retrieval.
func (r *retrieval) describe() string {
	if r == nil || r.Mode == "" {
		return "retrieval: not reported"
	}
	if !r.Degraded {
		return "retrieval: " + r.Mode
	}
	reason := r.Reason
	if reason == "" {
		reason = "no reason given"
	}
	return fmt.Sprintf("retrieval: %s — DEGRADED: %s", r.Mode, oneLineText(reason))
}

func runPromptSearch(ctx context.Context, e Env, cfg config.Config, args []string) error {
	const name = "prompt search"
	fs := flags(name, e)
	tenant := tenantFlag(fs, e)
	typ := fs.String("type", "", "only prompts of this type (system, user, task, repair, routing, tool_description, chain_of_thought, custom)")
	var tags listFlag
	fs.Var(&tags, "tag", "only prompts carrying this tag; repeatable (all must match)")
	limit := fs.Int("limit", 0, "most results, 1 to 50 (default: the service's)")
	timeout := fs.Duration("timeout", requestTimeout, "how long to wait for the reply")
	asJSON := fs.Bool("json", false, "print the reply as JSON")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(pos) == 0 {
		return usageError(e, fs, name, "a QUERY is required")
	}
	if *limit < 0 || *limit > 50 {
		return usageError(e, fs, name, "--limit must be 1 to 50")
	}
	if err := checkTenant(e, fs, name, *tenant); err != nil {
		return err
	}
	req := map[string]any{"query": strings.Join(pos, " ")}
	if *typ != "" {
		req["type"] = *typ
	}
	if len(tags) > 0 {
		req["tags"] = []string(tags)
	}
	if *limit > 0 {
		req["limit"] = *limit
	}
	var raw json.RawMessage
	if err := call(ctx, e, cfg, "search.prompts."+*tenant, *timeout, req, &raw); err != nil {
		return err
	}
	if *asJSON {
		return writeJSON(e.Stdout, raw)
	}
	var reply struct {
		Results []struct {
			Prompt     promptView `json:"prompt"`
			Score      float64    `json:"score"`
			Components components `json:"components"`
		} `json:"results"`
		Retrieval *retrieval `json:"retrieval"`
	}
	if err := json.Unmarshal(raw, &reply); err != nil {
		return fmt.Errorf("decode reply: %w", err)
	}
	fmt.Fprintln(e.Stdout, reply.Retrieval.describe())
	if len(reply.Results) == 0 {
		fmt.Fprintln(e.Stdout, "no prompts match")
		return nil
	}
	tw := tabwriter.NewWriter(e.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "RANK\tPROMPT\tTYPE\tNAME\tSCORE\tSIMILARITY\tQUALITY\tRECENCY\tUSAGE")
	for i, r := range reply.Results {
		id := fmt.Sprintf("%s@%d", r.Prompt.ID, r.Prompt.Version)
		if r.Prompt.Tenant == bus.GlobalTenant {
			id += " (" + bus.GlobalTenant + ")"
		}
		c := r.Components
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%.3f\t%.3f\t%.3f\t%.3f\t%.3f\n", i+1, id, r.Prompt.Type, truncateText(r.Prompt.Name, 40), r.Score, c.Similarity, c.Quality, c.Recency, c.Usage)
	}
	return tw.Flush()
}

// truncateText shortens s to n runes, ending with "…" when cut.
func truncateText(s string, n int) string {
	s = oneLineText(s)
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

// --- agentq prompt activate ---

func runPromptActivate(ctx context.Context, e Env, cfg config.Config, args []string) error {
	const name = "prompt activate"
	fs := flags(name, e)
	tenant := tenantFlag(fs, e)
	label := fs.String("label", "production", "label to move to the version")
	reason := fs.String("reason", "", "why the version is activated (kept in the event)")
	by := fs.String("by", e.Getenv("USER"), "who activates it (kept in the event as activated_by)")
	timeout := fs.Duration("timeout", answerTimeout, "how long to wait for the indexer's answer")
	asJSON := fs.Bool("json", false, "print the outcome as JSON")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 2 {
		return usageError(e, fs, name, "ID and VERSION are required, got %d arguments", len(pos))
	}
	version, err := strconv.Atoi(pos[1])
	if err != nil || version < 1 {
		return usageError(e, fs, name, "VERSION must be a whole number of at least 1, got %q", pos[1])
	}
	if *timeout <= 0 {
		return usageError(e, fs, name, "--timeout must be positive")
	}
	if err := checkTenant(e, fs, name, *tenant); err != nil {
		return err
	}
	data := map[string]any{"prompt_id": pos[0], "version": version, "label": *label}
	if *reason != "" {
		data["reason"] = *reason
	}
	if *by != "" {
		data["activated_by"] = *by
	}
	reg, err := schemas.Load()
	if err != nil {
		return err
	}
	ev, err := bus.NewEvent(indexer.TypePromptActivated, *tenant, "agentq-cli", data)
	if err != nil {
		return err
	}
	if err := reg.Validate(ev.Type(), ev.Data()); err != nil {
		return usageError(e, fs, name, "%v", err)
	}
	cfg.NATSURL = natsURL(e, cfg)
	nc, js, err := connect(cfg)
	if err != nil {
		return err
	}
	defer nc.Close()
	a, err := awaitOne(ctx, e, js, reg, ev, indexer.TypePromptIndexed, *timeout)
	if err != nil {
		return err
	}
	out := struct {
		EventID    string   `json:"event_id"`
		PromptID   string   `json:"prompt_id"`
		Version    int      `json:"version"`
		Label      string   `json:"label"`
		Outcome    string   `json:"outcome"` // activated, rejected or no_answer
		Labels     []string `json:"labels,omitempty"`
		ReasonCode string   `json:"reason_code,omitempty"`
		Reason     string   `json:"reason,omitempty"`
	}{EventID: ev.ID(), PromptID: pos[0], Version: version, Label: *label, Outcome: outcomeNoAnswer}
	var failure error
	switch {
	case a == nil:
		failure = fmt.Errorf("no answer from the indexer within %s to prompt.activated %s: is the indexer running (`make dev` runs it)? `agentq dlq --consumer indexer` lists what it could not process", *timeout, ev.ID())
	case a.typ == indexer.TypeRejected:
		var r rejected
		_ = json.Unmarshal(a.data, &r)
		out.Outcome, out.ReasonCode, out.Reason = outcomeRejected, r.ReasonCode, r.Reason
		failure = fmt.Errorf("rejected: %s: %s", r.ReasonCode, oneLineText(r.Reason))
	default:
		var d indexed
		_ = json.Unmarshal(a.data, &d)
		out.Outcome, out.Labels = "activated", d.Labels
	}
	if *asJSON {
		if err := writeJSON(e.Stdout, out); err != nil {
			return err
		}
	} else if failure == nil {
		fmt.Fprintf(e.Stdout, "%s@%d is now %s for tenant %s (labels on this version: %s)\n", pos[0], version, *label, *tenant, strings.Join(out.Labels, ", "))
	}
	return failure
}

// awaitOne publishes ev and waits up to timeout for its answer of type
// okType or indexer.rejected; it returns nil when none came.
func awaitOne(ctx context.Context, e Env, js jetstream.JetStream, reg *schemas.Registry, ev event.Event, okType string, timeout time.Duration) (*answer, error) {
	tenant := bus.Tenant(ev)
	okSubject, _ := bus.SubjectFor(okType, tenant)
	rejSubject, _ := bus.SubjectFor(indexer.TypeRejected, tenant)
	s, err := js.Stream(ctx, bus.StreamName)
	if err != nil {
		return nil, fmt.Errorf("stream %s: %w", bus.StreamName, err)
	}
	// The event is new (a fresh id): its answer comes after the stream's
	// current last message. Starting there needs no clock.
	start := s.CachedInfo().State.LastSeq + 1
	ans, err := followAnswers(ctx, js, []string{okSubject, rejSubject},
		jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: start}, []string{ev.ID()})
	if err != nil {
		return nil, err
	}
	defer ans.stop()
	warnIfNoIndexer(ctx, e, js)
	if _, err := bus.NewPublisher(js, reg).Publish(ctx, ev); err != nil {
		return nil, err
	}
	ans.wait(ctx, timeout, nil)
	if a, ok := ans.get(ev.ID()); ok {
		return &a, nil
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return nil, nil
}
