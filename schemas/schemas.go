// Package schemas holds agentq's public contract: one JSON Schema (draft
// 2020-12) per CloudEvents type, describing the event's data, one per
// request and reply of the request/reply services (search, prompt get), and
// a Registry that validates data against them.
//
// The schema files are embedded in the package and compiled once by Load;
// nothing is fetched from the network. Validate accepts conforming data in
// one pass over its bytes (fast.go) and leaves everything else to the
// jsonschema library, which gives the verdict and words the problems. A CloudEvents type
// agentq.<domain>.<event>.v<N> is described by the file
// <domain>.<event>.v<N>.json, whose $id (returned by URL) is
// https://agentq.dev/schemas/<domain>.<event>.v<N>.json. A request/reply
// message agentq.<service>.<call>.request.v<N> (or .response.v<N>) is
// described by <service>.<call>.request.v<N>.json in the same way. Message
// names have one token more than event types, so no message name can be a
// stream event type (bus.SubjectFor refuses it), and Types lists event
// types only; Messages lists the others. See README.md in this directory
// for the contract agents rely on.
package schemas

import (
	"bytes"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"math/big"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
)

//go:embed *.json
var files embed.FS

const (
	// baseURL prefixes every schema's $id.
	baseURL = "https://agentq.dev/schemas/"
	// typePrefix prefixes every agentq CloudEvents type.
	typePrefix = "agentq."
	// draft2020 is the only $schema the contract uses.
	draft2020 = "https://json-schema.org/draft/2020-12/schema"

	// maxListed bounds how many problems ValidationError.Error lists.
	maxListed = 5
	// maxProblemLen bounds one problem line, in runes.
	maxProblemLen = 200
	// maxValueLen bounds a quoted instance value inside a problem line, in runes.
	maxValueLen = 40

	// maxNumberLen bounds one JSON number in data, in bytes, and
	// maxExponent its written exponent. The validator compares numbers as
	// exact fractions (math/big), whose cost grows with the square of the
	// digits, and which it cannot build at all for exponents beyond a
	// million: it then panics. No real number comes near these bounds.
	maxNumberLen = 1000
	maxExponent  = 1000
	// maxNumberProblems bounds the number problems one Validate collects.
	maxNumberProblems = 20
)

// eventNameRE matches the name of an event schema (file name without
// .json), which is also the CloudEvents type without its "agentq." prefix.
var eventNameRE = regexp.MustCompile(`^[a-z][a-z_]*\.[a-z][a-z_]*\.v[1-9][0-9]*$`)

// messageNameRE matches the name of a request/reply message schema.
var messageNameRE = regexp.MustCompile(`^[a-z][a-z_]*\.[a-z][a-z_]*\.(?:request|response)\.v[1-9][0-9]*$`)

// ErrUnknownType is returned, wrapped, by Registry.Validate for a
// CloudEvents type (or message name) that has no schema. It is not a
// ValidationError: the data was never checked. A consumer dead-letters
// such an event as unknown_type, not as a schema violation.
var ErrUnknownType = errors.New("schemas: unknown event type")

// printer renders the validator's messages.
var printer = message.NewPrinter(language.English)

// Registry validates event data against the schema of its CloudEvents type,
// and request/reply messages against theirs. Safe for concurrent use.
type Registry struct {
	schemas  map[string]compiled // by CloudEvents type or message name
	types    []string            // sorted event types
	messages []string            // sorted message names
}

// compiled is one schema: the library's, which decides every verdict it is
// asked for and words every error, and the fast path read from it, which
// accepts conforming data without decoding it (fast.go).
type compiled struct {
	schema *jsonschema.Schema
	fast   *fastNode // nil: the library checks every input
}

// Load compiles every embedded schema. Its error names the file at fault.
// Compile once at start-up and share the Registry: Load is slow compared
// with Validate.
func Load() (*Registry, error) {
	return load(files)
}

// load compiles every *.json schema at the top of fsys.
func load(fsys fs.FS) (*Registry, error) {
	names, err := fs.Glob(fsys, "*.json")
	if err != nil {
		return nil, fmt.Errorf("schemas: list embedded files: %w", err)
	}
	if len(names) == 0 {
		return nil, errors.New("schemas: no schema files")
	}
	slices.Sort(names) // deterministic compile order, hence deterministic errors

	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.AssertFormat() // date-time fields are checked, not just annotated
	c.UseLoader(offlineLoader{})

	ids := make(map[string]string, len(names)) // file -> $id
	for _, file := range names {
		id, doc, err := readSchema(fsys, file)
		if err != nil {
			return nil, err
		}
		if err := c.AddResource(id, doc); err != nil {
			return nil, fmt.Errorf("schemas: %s: %w", file, err)
		}
		ids[file] = id
	}

	r := &Registry{schemas: make(map[string]compiled, len(names))}
	for _, file := range names {
		sch, err := c.Compile(ids[file])
		if err != nil {
			return nil, fmt.Errorf("schemas: compile %s: %w", file, err)
		}
		name := strings.TrimSuffix(file, ".json")
		key := typePrefix + name
		r.schemas[key] = compiled{schema: sch, fast: compileFast(sch)}
		if messageNameRE.MatchString(name) {
			r.messages = append(r.messages, key)
		} else {
			r.types = append(r.types, key)
		}
	}
	slices.Sort(r.types)
	slices.Sort(r.messages)
	return r, nil
}

// readSchema parses one embedded file and checks that its name, $schema and
// $id agree with the contract's naming rules.
func readSchema(fsys fs.FS, file string) (id string, doc any, err error) {
	name := strings.TrimSuffix(file, ".json")
	if !eventNameRE.MatchString(name) && !messageNameRE.MatchString(name) {
		return "", nil, fmt.Errorf("schemas: %s: file name must be <domain>.<event>.v<N>.json or <service>.<call>.request|response.v<N>.json", file)
	}
	b, err := fs.ReadFile(fsys, file)
	if err != nil {
		return "", nil, fmt.Errorf("schemas: read %s: %w", file, err)
	}
	doc, err = jsonschema.UnmarshalJSON(bytes.NewReader(b))
	if err != nil {
		return "", nil, fmt.Errorf("schemas: parse %s: %w", file, err)
	}
	obj, ok := doc.(map[string]any)
	if !ok {
		return "", nil, fmt.Errorf("schemas: %s: not a JSON object", file)
	}
	if got := obj["$schema"]; got != draft2020 {
		return "", nil, fmt.Errorf("schemas: %s: $schema is %v, want %s", file, got, draft2020)
	}
	id = baseURL + file
	if got := obj["$id"]; got != id {
		return "", nil, fmt.Errorf("schemas: %s: $id is %v, want %s", file, got, id)
	}
	return id, doc, nil
}

// offlineLoader refuses every URL, so compiling can never reach the network
// or the file system: all schemas are registered as resources up front, and
// the draft 2020-12 meta-schemas are built into the jsonschema library.
type offlineLoader struct{}

func (offlineLoader) Load(url string) (any, error) {
	return nil, fmt.Errorf("schemas: refusing to load %s: only embedded schemas are available", url)
}

// Validate checks data, the JSON data of a CloudEvent of type eventType (or
// the body of a request/reply message, by message name such as
// agentq.search.prompts.request.v1), against its schema. It returns nil
// when data conforms, an error wrapping ErrUnknownType when eventType has
// no schema, and a *ValidationError when data is not JSON, not valid UTF-8,
// not a JSON object, has a number beyond 1000 characters or an exponent
// beyond ±1000 or the range of a float64, or does not conform. The same
// input always gets the same verdict and the same message.
func (r *Registry) Validate(eventType string, data []byte) error {
	c, ok := r.schemas[eventType]
	if !ok {
		return fmt.Errorf("%w %s", ErrUnknownType, quoteShort(eventType))
	}
	if fastCheck(c.fast, data) == pass {
		return nil
	}
	return validateSlow(eventType, c.schema, data)
}

// validateSlow is Validate by the jsonschema library alone: it decodes
// data and gives the verdict and the problems.
func validateSlow(eventType string, sch *jsonschema.Schema, data []byte) error {
	if len(bytes.TrimSpace(data)) == 0 {
		return &ValidationError{Type: eventType, Problems: []string{"not valid JSON: empty data"}}
	}
	if !utf8.Valid(data) {
		// encoding/json would silently turn bad bytes into U+FFFD.
		return &ValidationError{Type: eventType, Problems: []string{fmt.Sprintf("not valid UTF-8 (byte %d)", invalidUTF8(data))}}
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(data))
	if err != nil {
		return &ValidationError{Type: eventType, Problems: []string{truncate("not valid JSON: "+oneLine(err.Error()), maxProblemLen)}}
	}
	if _, ok := v.(map[string]any); !ok {
		return &ValidationError{Type: eventType, Problems: []string{"/: got " + jsonType(v) + ", want object"}}
	}
	if p := duplicateName(data); p != "" {
		return &ValidationError{Type: eventType, Problems: []string{p}}
	}
	if hasBadNumber(v) {
		var ps []string
		numberProblems(v, nil, &ps)
		return &ValidationError{Type: eventType, Problems: ps}
	}
	if err := sch.Validate(v); err != nil {
		var verr *jsonschema.ValidationError
		if !errors.As(err, &verr) {
			return &ValidationError{Type: eventType, Problems: []string{truncate(err.Error(), maxProblemLen)}}
		}
		return &ValidationError{Type: eventType, Problems: problems(verr)}
	}
	return nil
}

// duplicateName returns the problem of the first object in data that
// names a member twice, or "". The library keeps the last copy, as
// encoding/json would; agentq's consumers read data by exact names and
// refuse a name given twice (which copy was checked and which is read
// cannot both be known), so validation refuses it first, with the place.
// The fast path never passes such data: it sends it here.
func duplicateName(data []byte) string {
	err := jsontext.NewDecoder(bytes.NewReader(data)).SkipValue()
	var serr *jsontext.SyntacticError
	if !errors.As(err, &serr) || !errors.Is(serr.Err, jsontext.ErrDuplicateName) {
		return "" // any other error was the library's to report
	}
	at := serr.JSONPointer.Parent()
	if at == "" {
		at = "/"
	}
	return truncate(fmt.Sprintf("%s: member %q given twice", at, serr.JSONPointer.LastToken()), maxProblemLen)
}

// Has reports whether name, a CloudEvents type or a message name, has a
// schema.
func (r *Registry) Has(name string) bool {
	_, ok := r.schemas[name]
	return ok
}

// Types returns the CloudEvents types that have a schema, sorted, e.g.
// "agentq.tool.executed.v1": the event types of the stream, and nothing
// else (request/reply messages are listed by Messages). The caller may
// modify the returned slice.
func (r *Registry) Types() []string {
	return slices.Clone(r.types)
}

// Messages returns the names of the request/reply messages that have a
// schema, sorted, e.g. "agentq.search.prompts.request.v1". They are never
// published on the stream. The caller may modify the returned slice.
func (r *Registry) Messages() []string {
	return slices.Clone(r.messages)
}

// URL returns the $id of eventType's schema, to be used as the CloudEvents
// dataschema attribute: for "agentq.tool.executed.v1" it is
// "https://agentq.dev/schemas/tool.executed.v1.json". It returns "" when
// eventType is not of the form agentq.<domain>.<event>.v<N> or a message
// name agentq.<service>.<call>.request|response.v<N>; it does not check
// that a schema exists (see Registry.Has).
func URL(eventType string) string {
	name, ok := strings.CutPrefix(eventType, typePrefix)
	if !ok || (!eventNameRE.MatchString(name) && !messageNameRE.MatchString(name)) {
		return ""
	}
	return baseURL + name + ".json"
}

// Document returns the schema file of eventType (or of a message name such
// as agentq.search.prompts.request.v1) as it is embedded, for those that
// publish the contract, such as the MCP server's tool descriptions. The
// error wraps ErrUnknownType when there is none.
func Document(eventType string) ([]byte, error) {
	u := URL(eventType)
	if u == "" {
		return nil, fmt.Errorf("%w %q", ErrUnknownType, eventType)
	}
	b, err := files.ReadFile(strings.TrimPrefix(u, baseURL))
	if err != nil {
		return nil, fmt.Errorf("%w %q", ErrUnknownType, eventType)
	}
	return b, nil
}

// ValidationError reports why event data does not match its schema.
type ValidationError struct {
	// Type is the CloudEvents type the data was validated against.
	Type string
	// Problems holds one readable line per problem, sorted, each of the form
	// "<JSON pointer>: <what is wrong>", e.g. "/success: got string, want
	// boolean" or "/tool_name: missing"; "/" is the data object itself.
	Problems []string
}

// Error returns one line listing at most 5 problems.
func (e *ValidationError) Error() string {
	var sb strings.Builder
	sb.WriteString("data does not match ")
	sb.WriteString(e.Type)
	sb.WriteString(": ")
	n := min(len(e.Problems), maxListed)
	sb.WriteString(strings.Join(e.Problems[:n], "; "))
	if more := len(e.Problems) - n; more > 0 {
		fmt.Fprintf(&sb, "; and %d more", more)
	}
	return sb.String()
}

// problem is one entry of a ValidationError before rendering.
type problem struct {
	path string               // JSON pointer of the offending value
	msg  string               // what is wrong with it
	kind jsonschema.ErrorKind // the failed keyword; nil for a combined anyOf/oneOf line
}

func (p problem) String() string {
	return truncate(p.path, maxProblemLen) + ": " + p.msg
}

// problems flattens the validator's error tree into sorted, distinct,
// bounded lines.
func problems(verr *jsonschema.ValidationError) []string {
	var ps []problem
	collect(verr, &ps)

	// The contract's patterns repeat their length bounds; when a value breaks
	// a length bound, report that alone, it is the clearer message.
	lengthAt := map[string]bool{}
	for _, p := range ps {
		switch p.kind.(type) {
		case *kind.MinLength, *kind.MaxLength:
			lengthAt[p.path] = true
		}
	}
	out := make([]string, 0, len(ps))
	for _, p := range ps {
		if _, ok := p.kind.(*kind.Pattern); ok && lengthAt[p.path] {
			continue
		}
		out = append(out, truncate(p.String(), maxProblemLen))
	}
	if len(out) == 0 { // never expected; keep the error informative anyway
		out = append(out, truncate(strings.ReplaceAll(verr.Error(), "\n", " "), maxProblemLen))
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// collect appends the problems of one node of the validator's error tree.
func collect(e *jsonschema.ValidationError, out *[]problem) {
	switch k := e.ErrorKind.(type) {
	case *kind.Required:
		for _, name := range k.Missing {
			*out = append(*out, problem{pointer(e.InstanceLocation, name), "missing", k})
		}
		return
	case *kind.AdditionalProperties:
		for _, name := range k.Properties {
			*out = append(*out, problem{pointer(e.InstanceLocation, name), "not allowed", k})
		}
		return
	case *kind.AnyOf, *kind.OneOf:
		if len(e.Causes) > 0 {
			*out = append(*out, alternatives(e))
			return
		}
	}
	if len(e.Causes) == 0 {
		*out = append(*out, problem{pointer(e.InstanceLocation), leafMessage(e.ErrorKind), e.ErrorKind})
		return
	}
	for _, c := range e.Causes {
		collect(c, out)
	}
}

// alternatives renders a failed anyOf/oneOf as one problem. When every
// alternative failed only for missing properties (the contract's "this or
// that is required"), it reads e.g. "/prompt_hash or /prompt_id and
// /version: missing".
func alternatives(e *jsonschema.ValidationError) problem {
	alts := make([][]problem, 0, len(e.Causes))
	onlyMissing := true
	for _, c := range e.Causes {
		var sub []problem
		collect(c, &sub)
		for _, p := range sub {
			if _, ok := p.kind.(*kind.Required); !ok {
				onlyMissing = false
			}
		}
		alts = append(alts, sub)
	}
	parts := make([]string, 0, len(alts))
	for _, sub := range alts {
		var lines []string
		for _, p := range sub {
			if onlyMissing {
				lines = append(lines, p.path)
			} else {
				lines = append(lines, p.String())
			}
		}
		slices.Sort(lines)
		if onlyMissing {
			parts = append(parts, strings.Join(slices.Compact(lines), " and "))
		} else {
			parts = append(parts, strings.Join(slices.Compact(lines), ", "))
		}
	}
	if onlyMissing {
		return problem{strings.Join(parts, " or "), "missing", nil}
	}
	return problem{pointer(e.InstanceLocation), "matches no alternative: " + strings.Join(parts, " | "), nil}
}

// leafMessage describes one failed keyword as "got X, want Y". It keeps
// quoted instance values short, since they come from untrusted data.
func leafMessage(k jsonschema.ErrorKind) string {
	switch k := k.(type) {
	case *kind.Pattern:
		return fmt.Sprintf("%s does not match pattern %s", quoteShort(k.Got), k.Want)
	case *kind.Format:
		return fmt.Sprintf("%s is not a valid %s", quoteShort(fmt.Sprint(k.Got)), k.Want)
	case *kind.Enum:
		return fmt.Sprintf("got %s, want one of %s", display(k.Got), displayList(k.Want))
	case *kind.Const:
		return fmt.Sprintf("got %s, want %s", display(k.Got), display(k.Want))
	case *kind.Minimum:
		return fmt.Sprintf("got %s, want >= %s", ratString(k.Got), ratString(k.Want))
	case *kind.Maximum:
		return fmt.Sprintf("got %s, want <= %s", ratString(k.Got), ratString(k.Want))
	case *kind.ExclusiveMinimum:
		return fmt.Sprintf("got %s, want > %s", ratString(k.Got), ratString(k.Want))
	case *kind.ExclusiveMaximum:
		return fmt.Sprintf("got %s, want < %s", ratString(k.Got), ratString(k.Want))
	case *kind.MinLength:
		return fmt.Sprintf("got %d characters, want at least %d", k.Got, k.Want)
	case *kind.MaxLength:
		return fmt.Sprintf("got %d characters, want at most %d", k.Got, k.Want)
	case *kind.MinItems:
		return fmt.Sprintf("got %d items, want at least %d", k.Got, k.Want)
	case *kind.MaxItems:
		return fmt.Sprintf("got %d items, want at most %d", k.Got, k.Want)
	case *kind.FalseSchema:
		// The contract uses false schemas for fields that exclude each
		// other, e.g. version and label of a prompts.get request.
		return "not allowed here"
	}
	return k.LocalizedString(printer)
}

// display renders an instance or schema value briefly: strings quoted and
// shortened, other scalars as JSON, arrays and objects by type.
func display(v any) string {
	switch v := v.(type) {
	case string:
		return quoteShort(v)
	case []any, map[string]any:
		return jsonType(v)
	default:
		return fmt.Sprint(v)
	}
}

func displayList(vs []any) string {
	parts := make([]string, len(vs))
	for i, v := range vs {
		parts[i] = display(v)
	}
	return strings.Join(parts, ", ")
}

func ratString(r *big.Rat) string {
	if r.IsInt() {
		return r.Num().String()
	}
	f, _ := r.Float64()
	return strconv.FormatFloat(f, 'g', -1, 64)
}

// pointerEscaper escapes one JSON pointer token (RFC 6901).
var pointerEscaper = strings.NewReplacer("~", "~0", "/", "~1")

// pointer renders an instance location, plus optional child tokens, as a
// JSON pointer; the root is "/".
func pointer(loc []string, more ...string) string {
	if len(loc)+len(more) == 0 {
		return "/"
	}
	var sb strings.Builder
	for _, tok := range slices.Concat(loc, more) {
		sb.WriteByte('/')
		sb.WriteString(pointerEscaper.Replace(tok))
	}
	return sb.String()
}

func quoteShort(s string) string {
	return strconv.Quote(truncate(s, maxValueLen))
}

// truncate cuts s to at most n runes, marking the cut with "...".
func truncate(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-3]) + "..."
}

// jsonType names the JSON type of a value decoded by jsonschema.UnmarshalJSON.
func jsonType(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "boolean"
	case string:
		return "string"
	case []any:
		return "array"
	case map[string]any:
		return "object"
	default:
		return "number"
	}
}

// oneLine joins a multi-line library message into one line.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// invalidUTF8 returns the offset of the first byte of b that is not valid
// UTF-8, or -1.
func invalidUTF8(b []byte) int {
	for i := 0; i < len(b); {
		r, size := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && size == 1 {
			return i
		}
		i += size
	}
	return -1
}

// hasBadNumber reports whether v holds a number that numberProblem
// refuses. It stops at the first, in any order; numberProblems then lists
// them in a fixed order.
func hasBadNumber(v any) bool {
	switch v := v.(type) {
	case json.Number:
		return numberProblem(v) != ""
	case map[string]any:
		for _, e := range v {
			if hasBadNumber(e) {
				return true
			}
		}
	case []any:
		for _, e := range v {
			if hasBadNumber(e) {
				return true
			}
		}
	}
	return false
}

// numberProblems appends a problem line for each refused number in v, in
// document-independent sorted key order, at most maxNumberProblems.
func numberProblems(v any, loc []string, out *[]string) {
	if len(*out) >= maxNumberProblems {
		return
	}
	switch v := v.(type) {
	case json.Number:
		if p := numberProblem(v); p != "" {
			*out = append(*out, truncate(pointer(loc)+": "+p, maxProblemLen))
		}
	case map[string]any:
		for _, k := range slices.Sorted(maps.Keys(v)) {
			numberProblems(v[k], append(slices.Clip(loc), k), out)
		}
	case []any:
		for i, e := range v {
			numberProblems(e, append(slices.Clip(loc), strconv.Itoa(i)), out)
		}
	}
}

// numberProblem says why a JSON number is refused, or returns "".
func numberProblem(n json.Number) string {
	s := string(n)
	if len(s) > maxNumberLen {
		return fmt.Sprintf("number of %d characters, want at most %d", len(s), maxNumberLen)
	}
	if i := strings.IndexAny(s, "eE"); i >= 0 {
		e, err := strconv.Atoi(s[i+1:])
		if err != nil || e < -maxExponent || e > maxExponent {
			return fmt.Sprintf("number %s has an exponent beyond ±%d", quoteShort(s), maxExponent)
		}
	}
	if _, err := strconv.ParseFloat(s, 64); err != nil {
		return fmt.Sprintf("number %s is beyond the range of a float64", quoteShort(s))
	}
	return ""
}
