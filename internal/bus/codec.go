package bus

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"mime"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/cloudevents/sdk-go/v2/types"
	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
)

// CloudEvents extension attributes agentq uses.
const (
	ExtTenant    = "tenantid"    // tenant of the event; equals the subject's last token
	ExtCausation = "causationid" // id of the event that caused this result
)

// Header names of the CloudEvents NATS binding and of JetStream.
const (
	headerPrefix      = "ce-"
	headerContentType = "content-type"
	headerMsgID       = "Nats-Msg-Id"
	structuredCT      = "application/cloudevents+json"
	jsonCT            = "application/json"
)

// Limits of what Decode accepts and Encode produces.
const (
	// MaxEventIDLen bounds an event id, in bytes.
	MaxEventIDLen = 256
	// MaxHeaderBytes bounds the headers of a message: the sum of the bytes
	// of every header key and value. A structured event's attributes must
	// fit in it too, as headers, so every decodable event can be re-sent in
	// binary mode.
	MaxHeaderBytes = 16 << 10

	// maxShortAttr bounds type, tenantid and causationid, in bytes.
	maxShortAttr = 256
	// maxLongAttr bounds source, subject, dataschema and the content type.
	maxLongAttr = 1024
	// maxQuoted bounds an untrusted value quoted in an error, in bytes.
	maxQuoted = 64
	// maxForeign bounds an error text taken from a library, in bytes.
	maxForeign = 300
)

// specVersion is the only CloudEvents version agentq speaks.
const specVersion = event.CloudEventsVersionV1

// attrLimits holds the length limit of every attribute the runner or a
// handler reads; these values must also be printable (see ValidID).
var attrLimits = map[string]int{
	"id":              MaxEventIDLen,
	"type":            maxShortAttr,
	ExtTenant:         maxShortAttr,
	ExtCausation:      maxShortAttr,
	"source":          maxLongAttr,
	"subject":         maxLongAttr,
	"dataschema":      maxLongAttr,
	"datacontenttype": maxLongAttr,
}

// GlobalTenant is the tenant whose prompts and tools every tenant can see.
const GlobalTenant = "_global"

var tenantRE = regexp.MustCompile(`^[a-z0-9_-]{1,64}$`)

// ValidTenant reports whether t is a well-formed tenant id.
func ValidTenant(t string) bool { return tenantRE.MatchString(t) }

var typeRE = regexp.MustCompile(`^agentq\.([a-z][a-z0-9_]*)\.([a-z][a-z0-9_]*)\.v([0-9]+)$`)

// Type is agentq's CloudEvents type for an event, e.g. Type("tool",
// "executed") is "agentq.tool.executed.v1".
func Type(domain, name string) string { return "agentq." + domain + "." + name + ".v1" }

// SubjectFor derives the NATS subject <domain>.<event>.<tenant> of an event
// of type agentq.<domain>.<event>.v<N>.
func SubjectFor(eventType, tenant string) (string, error) {
	m := typeRE.FindStringSubmatch(eventType)
	if m == nil {
		return "", fmt.Errorf("type %s is not agentq.<domain>.<event>.v<N>", quote(eventType))
	}
	if !ValidTenant(tenant) {
		return "", fmt.Errorf("tenant %s does not match [a-z0-9_-]{1,64}", quote(tenant))
	}
	return m[1] + "." + m[2] + "." + tenant, nil
}

// Subject returns the subject an event is published on.
func Subject(ev event.Event) (string, error) {
	return SubjectFor(ev.Type(), Tenant(ev))
}

// Tenant returns the tenantid extension of ev, or "" when it is unset.
func Tenant(ev event.Event) string {
	s, _ := ev.Extensions()[ExtTenant].(string)
	return s
}

// Causation returns the causationid extension of ev, or "".
func Causation(ev event.Event) string {
	s, _ := ev.Extensions()[ExtCausation].(string)
	return s
}

// MsgID is the Nats-Msg-Id of an event: "<tenant>:<event id>". JetStream's
// duplicate window is stream-wide, so a bare event id would let one tenant
// suppress another tenant's event with the same id. A tenant id has no
// colon, so the pair is unambiguous.
func MsgID(tenant, eventID string) string { return tenant + ":" + eventID }

// ValidID returns nil when id can be an event id, else an error saying why.
// An event id is 1 to MaxEventIDLen bytes of valid UTF-8 and printable:
// no control characters (U+0000–U+001F, U+007F–U+009F), no Unicode
// noncharacters, no line or paragraph separators and no invisible
// formatting characters (zero-width and bidirectional controls, U+FEFF),
// and no whitespace at either end (the NATS header format drops leading
// whitespace and the CloudEvents SDK trims it, so such an id would change on
// the way). The set is fixed rather than taken from Unicode tables, so what
// is valid cannot change with the Go version and a replay decides as live
// processing did.
func ValidID(id string) error { return checkText("event id", id, MaxEventIDLen) }

// NewEvent builds an event of the given type for tenant with data marshalled
// as JSON, a fresh time-ordered id, the current time and the data schema.
func NewEvent(eventType, tenant, source string, data any) (event.Event, error) {
	id, err := uuid.NewV7()
	if err != nil {
		return event.Event{}, fmt.Errorf("new event id: %w", err)
	}
	return buildEvent(id.String(), eventType, tenant, source, data)
}

func buildEvent(id, eventType, tenant, source string, data any) (event.Event, error) {
	ev := event.New()
	ev.SetID(id)
	ev.SetType(eventType)
	ev.SetSource(source)
	ev.SetTime(time.Now().UTC())
	ev.SetExtension(ExtTenant, tenant)
	ev.SetDataSchema(SchemaURL(eventType))
	if err := ev.SetData(jsonCT, data); err != nil {
		return ev, fmt.Errorf("encode %s data: %w", eventType, err)
	}
	if err := ev.Validate(); err != nil {
		return ev, fmt.Errorf("invalid event: %s", sdkError(err))
	}
	return ev, nil
}

// SchemaURL is the dataschema of an agentq event type.
func SchemaURL(eventType string) string {
	return "https://agentq.dev/schemas/" + strings.TrimPrefix(eventType, "agentq.") + ".json"
}

// Encode turns ev into a NATS message in binary content mode: every
// attribute becomes a "ce-" header, datacontenttype becomes content-type, the
// payload is the data, and Nats-Msg-Id is MsgID(tenant, id). It refuses an
// event that Decode would refuse, so agentq never publishes what its
// consumers dead-letter as undecodable.
func Encode(ev event.Event) (*nats.Msg, error) {
	if err := checkEvent(ev); err != nil {
		return nil, err
	}
	subject, err := Subject(ev)
	if err != nil {
		return nil, err
	}
	hs, err := attributeHeaders(ev)
	if err != nil {
		return nil, err
	}
	m := nats.NewMsg(subject)
	for _, kv := range hs {
		m.Header.Set(kv[0], kv[1])
	}
	m.Data = ev.Data()
	return m, nil
}

// attributeHeaders returns the headers Encode sends for ev, checking that
// every value is a valid CloudEvents string and that together they fit in
// MaxHeaderBytes.
func attributeHeaders(ev event.Event) ([][2]string, error) {
	exts := ev.Extensions() // a copy each call
	hs := make([][2]string, 0, 9+len(exts))
	add := func(k, v string) { hs = append(hs, [2]string{k, v}) }
	add(headerPrefix+"specversion", ev.SpecVersion())
	add(headerPrefix+"id", ev.ID())
	add(headerPrefix+"source", ev.Source())
	add(headerPrefix+"type", ev.Type())
	if s := ev.Subject(); s != "" {
		add(headerPrefix+"subject", s)
	}
	if !ev.Time().IsZero() {
		add(headerPrefix+"time", types.FormatTime(ev.Time()))
	}
	if s := ev.DataSchema(); s != "" {
		add(headerPrefix+"dataschema", s)
	}
	if ct := ev.DataContentType(); ct != "" {
		add(headerContentType, ct)
	}
	var first firstError // map order must not choose which error is reported
	for name, value := range exts {
		v, err := types.Format(value)
		if err != nil {
			first.keep(name, fmt.Errorf("extension %s cannot be a header: %s", name, foreign(err.Error())))
			continue
		}
		if err := checkString(name, v); err != nil {
			first.keep(name, err)
			continue
		}
		add(headerPrefix+name, v)
	}
	if first.err != nil {
		return nil, first.err
	}
	tenant, _ := exts[ExtTenant].(string)
	add(headerMsgID, MsgID(tenant, ev.ID()))
	n := 0
	for _, kv := range hs {
		n += len(kv[0]) + len(kv[1])
	}
	if n > MaxHeaderBytes {
		return nil, fmt.Errorf("attributes take %d bytes as headers, over the %d-byte limit", n, MaxHeaderBytes)
	}
	return hs, nil
}

// Decode reads a CloudEvent from a NATS message in either content mode,
// detected as the NATS binding says: a content-type of
// application/cloudevents(+json) means structured, a ce-specversion header
// means binary. A message with neither is tried as structured JSON, the
// binding's original (header-less) mode.
//
// Decode accepts CloudEvents 1.0 only. Besides the CloudEvents rules it
// requires: headers of at most MaxHeaderBytes, each header at most once;
// every ce- header value valid UTF-8 without control characters; an id
// that passes ValidID; type, source, tenantid, causationid, subject,
// dataschema and the content type printable by the same rule and within
// their length limits (256 bytes for type, tenantid and causationid, 1024
// for the others); and, when the content type is JSON (application/json,
// text/json, any +json type, or none), data that is valid UTF-8 and
// well-formed JSON. Empty data is no data, which CloudEvents allows; the
// schema check decides whether the type needs some.
//
// Decode never panics, and its errors are one line that starts with what is
// wrong and quotes at most 64 bytes of any input value.
func Decode(h nats.Header, data []byte) (ev event.Event, err error) {
	defer func() {
		// A safety net: decode is written not to panic (FuzzDecode checks
		// it), but a message must never take a consumer down.
		if p := recover(); p != nil {
			ev, err = event.Event{}, fmt.Errorf("undecodable message: decoder panicked: %s", foreign(fmt.Sprint(p)))
		}
	}()
	return decode(h, data)
}

func decode(h nats.Header, data []byte) (event.Event, error) {
	if n := headerBytes(h); n > MaxHeaderBytes {
		return event.Event{}, fmt.Errorf("headers are %d bytes, over the %d-byte limit", n, MaxHeaderBytes)
	}
	hs, err := cloudHeaders(h)
	if err != nil {
		return event.Event{}, err
	}
	var ev event.Event
	ct, hasCT := hs[headerContentType]
	mt, _, _ := mime.ParseMediaType(ct)
	_, binary := hs[headerPrefix+"specversion"]
	switch {
	case strings.HasPrefix(mt, "application/cloudevents"):
		ev, err = decodeStructured(data)
	case binary:
		ev, err = decodeBinary(hs, ct, hasCT, data)
	default:
		ev, err = decodeStructured(data)
	}
	if err != nil {
		return ev, err
	}
	if err := checkEvent(ev); err != nil {
		return ev, err
	}
	if _, err := attributeHeaders(ev); err != nil {
		return ev, err
	}
	return ev, nil
}

// headerBytes is the size of h as MaxHeaderBytes counts it.
func headerBytes(h nats.Header) int {
	n := 0
	for k, vs := range h {
		n += len(k)
		for i, v := range vs {
			if i > 0 {
				n += len(k)
			}
			n += len(v)
		}
	}
	return n
}

// cloudHeaders returns the ce- headers and content-type of h by lower-case
// name, checking every ce- value against the CloudEvents string rules. A
// header given twice, under two spellings or with two values, is refused:
// which one counts would depend on map order.
func cloudHeaders(h nats.Header) (map[string]string, error) {
	out := make(map[string]string, len(h))
	var first firstError // map order must not choose which error is reported
	for key, vals := range h {
		k := key
		if !isLower(k) {
			k = strings.ToLower(key)
		}
		if !strings.HasPrefix(k, headerPrefix) && k != headerContentType {
			continue
		}
		if len(vals) == 0 {
			continue
		}
		if len(vals) > 1 {
			first.keep(key, fmt.Errorf("header %s is given %d times", quote(key), len(vals)))
			continue
		}
		if _, dup := out[k]; dup {
			first.keep(k, fmt.Errorf("header %s is given twice, in different letter cases", quote(k)))
			continue
		}
		v := vals[0]
		if err := checkString(k, v); err != nil {
			first.keep(key, err)
			continue
		}
		if limit, ok := headerLimit(k); ok {
			if err := checkText(k, v, limit); err != nil {
				first.keep(key, err)
				continue
			}
		}
		out[k] = v
	}
	if first.err != nil {
		return nil, first.err
	}
	return out, nil
}

// firstError keeps, of several errors found in map order, the one of the
// smallest key, so the same message always reports the same error.
type firstError struct {
	key string
	err error
}

func (f *firstError) keep(key string, err error) {
	if f.err == nil || key < f.key {
		f.key, f.err = key, err
	}
}

// isLower reports whether s has no ASCII upper-case letters, sparing a
// copy in strings.ToLower for the usual header names.
func isLower(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; 'A' <= c && c <= 'Z' {
			return false
		}
	}
	return true
}

// headerLimit returns the length limit of a header carrying an attribute the
// runner reads.
func headerLimit(k string) (int, bool) {
	if k == headerContentType {
		return maxLongAttr, true
	}
	limit, ok := attrLimits[strings.TrimPrefix(k, headerPrefix)]
	return limit, ok
}

// decodeStructured reads an application/cloudevents+json message.
func decodeStructured(data []byte) (event.Event, error) {
	var ev event.Event
	trimmed := bytes.TrimSpace(data)
	if len(trimmed) == 0 {
		return ev, errors.New("empty message: neither ce- headers nor a structured event")
	}
	if i := invalidUTF8(data); i >= 0 {
		return ev, fmt.Errorf("structured event is not valid UTF-8 (byte %d)", i)
	}
	if err := jsonSyntax(data); err != nil {
		return ev, fmt.Errorf("structured event is not well-formed JSON: %w", err)
	}
	if trimmed[0] != '{' {
		return ev, fmt.Errorf("structured event is a JSON %s, not an object", jsonKind(trimmed[0]))
	}
	var probe struct {
		SpecVersion json.RawMessage `json:"specversion"`
	}
	if err := json.Unmarshal(data, &probe); err != nil { // cannot fail after the checks above
		return ev, fmt.Errorf("structured event is unreadable: %s", foreign(err.Error()))
	}
	if probe.SpecVersion == nil {
		return ev, errors.New("structured event has no specversion")
	}
	var sv string
	if err := json.Unmarshal(probe.SpecVersion, &sv); err != nil {
		return ev, fmt.Errorf("specversion %s is not supported: agentq accepts CloudEvents %s only", foreign(truncateBytes(string(probe.SpecVersion), maxQuoted)), specVersion)
	}
	if sv != specVersion {
		return ev, fmt.Errorf("specversion %s is not supported: agentq accepts CloudEvents %s only", quote(sv), specVersion)
	}
	if err := ev.UnmarshalJSON(data); err != nil {
		return ev, fmt.Errorf("invalid structured event: %s", sdkError(err))
	}
	return ev, nil // checkEvent validates it
}

// decodeBinary reads a binary-mode message: attributes from the ce-
// headers hs (already checked by cloudHeaders), data from the payload.
func decodeBinary(hs map[string]string, ct string, hasCT bool, data []byte) (event.Event, error) {
	if sv := hs[headerPrefix+"specversion"]; sv != specVersion {
		return event.Event{}, fmt.Errorf("ce-specversion %s is not supported: agentq accepts CloudEvents %s only", quote(sv), specVersion)
	}
	ev := event.New(specVersion)
	for k, v := range hs {
		name, ok := strings.CutPrefix(k, headerPrefix)
		if !ok {
			continue
		}
		switch name {
		case "specversion":
		case "id":
			ev.SetID(v)
		case "source":
			ev.SetSource(v)
		case "type":
			ev.SetType(v)
		case "subject":
			ev.SetSubject(v)
		case "dataschema":
			ev.SetDataSchema(v)
		case "datacontenttype":
			if !hasCT {
				ct = v
			}
		case "time":
			t, err := types.ParseTime(v)
			if err != nil {
				return ev, fmt.Errorf("ce-time %s is not an RFC 3339 time", quote(v))
			}
			ev.SetTime(t)
		default:
			ev.SetExtension(name, v)
		}
	}
	if ct != "" {
		ev.SetDataContentType(ct)
	}
	ev.DataEncoded = data
	return ev, nil // checkEvent validates it
}

// checkEvent applies agentq's rules to a decoded or to-be-encoded event:
// CloudEvents 1.0, printable attributes within their limits, and JSON data
// that is UTF-8 and well-formed.
func checkEvent(ev event.Event) error {
	if ev.Context == nil {
		return errors.New("event has no specversion")
	}
	if sv := ev.SpecVersion(); sv != specVersion {
		return fmt.Errorf("specversion %s is not supported: agentq accepts CloudEvents %s only", quote(sv), specVersion)
	}
	if err := ev.Validate(); err != nil {
		return fmt.Errorf("invalid event: %s", sdkError(err))
	}
	attrs := []struct{ name, value string }{
		{"id", ev.ID()},
		{"type", ev.Type()},
		{"source", ev.Source()},
		{"subject", ev.Subject()},
		{"dataschema", ev.DataSchema()},
		{"datacontenttype", ev.DataContentType()},
	}
	for _, a := range attrs {
		if a.value == "" && a.name != "id" && a.name != "type" && a.name != "source" {
			continue // optional and absent
		}
		if err := checkText(a.name, a.value, attrLimits[a.name]); err != nil {
			return err
		}
	}
	exts := ev.Extensions() // a copy each call
	for _, name := range []string{ExtTenant, ExtCausation} {
		v, ok := exts[name]
		if !ok {
			continue
		}
		s, ok := v.(string)
		if !ok {
			return fmt.Errorf("%s is not a string (got %T)", name, v)
		}
		if err := checkText(name, s, attrLimits[name]); err != nil {
			return err
		}
	}
	return checkData(ev.DataContentType(), ev.Data())
}

// checkData requires JSON data to be valid UTF-8 and well-formed.
func checkData(ct string, data []byte) error {
	if len(data) == 0 || !isJSON(ct) {
		return nil
	}
	if i := invalidUTF8(data); i >= 0 {
		return fmt.Errorf("data is not valid UTF-8 (byte %d)", i)
	}
	if err := jsonSyntax(data); err != nil {
		return fmt.Errorf("data is not well-formed JSON: %w", err)
	}
	return nil
}

// isJSON reports whether a content type announces JSON; no content type
// means JSON, as the CloudEvents JSON format says.
func isJSON(ct string) bool {
	if strings.TrimSpace(ct) == "" {
		return true
	}
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil {
		return false
	}
	return mt == jsonCT || mt == "text/json" || strings.HasSuffix(mt, "+json")
}

// jsonSyntax returns nil when data is one well-formed JSON value, else the
// syntax error with its offset.
func jsonSyntax(data []byte) error {
	if json.Valid(data) {
		return nil
	}
	var v struct{}
	err := json.Unmarshal(data, &v)
	var serr *json.SyntaxError
	if errors.As(err, &serr) {
		return fmt.Errorf("%s (byte %d)", foreign(serr.Error()), serr.Offset)
	}
	if err == nil {
		return errors.New("not a JSON value")
	}
	return errors.New(foreign(err.Error()))
}

func jsonKind(first byte) string {
	switch first {
	case '[':
		return "array"
	case '"':
		return "string"
	case 't', 'f':
		return "boolean"
	case 'n':
		return "null"
	default:
		return "number"
	}
}

// invalidUTF8 returns the offset of the first byte that is not valid
// UTF-8, or -1.
func invalidUTF8(b []byte) int {
	if utf8.Valid(b) {
		return -1
	}
	for i := 0; i < len(b); {
		r, size := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && size == 1 {
			return i
		}
		i += size
	}
	return -1
}

// checkString applies the CloudEvents 1.0 rule for String values: valid
// UTF-8 without control characters or noncharacters.
func checkString(what, s string) error {
	for i, r := range s {
		switch {
		case r == utf8.RuneError && !strings.HasPrefix(s[i:], "\uFFFD"):
			return fmt.Errorf("%s is not valid UTF-8 (byte %d): %s", what, i, quote(s))
		case isControl(r):
			return fmt.Errorf("%s has a control character (%U) at byte %d: %s", what, r, i, quote(s))
		case isNoncharacter(r):
			return fmt.Errorf("%s has a Unicode noncharacter (%U) at byte %d: %s", what, r, i, quote(s))
		}
	}
	return nil
}

// checkText applies agentq's rule for the attributes it reads: 1 to limit
// bytes of printable text (see ValidID).
func checkText(what, s string, limit int) error {
	if s == "" {
		return fmt.Errorf("%s is empty", what)
	}
	if len(s) > limit {
		return fmt.Errorf("%s is %d bytes, over the %d-byte limit: %s", what, len(s), limit, quote(s))
	}
	if err := checkString(what, s); err != nil {
		return err
	}
	for i, r := range s {
		if isInvisible(r) {
			return fmt.Errorf("%s has an invisible formatting character (%U) at byte %d: %s", what, r, i, quote(s))
		}
	}
	if strings.TrimFunc(s, unicode.IsSpace) == "" {
		return fmt.Errorf("%s is only whitespace: %s", what, quote(s))
	}
	first, _ := utf8.DecodeRuneInString(s)
	last, _ := utf8.DecodeLastRuneInString(s)
	if unicode.IsSpace(first) || unicode.IsSpace(last) {
		return fmt.Errorf("%s starts or ends with whitespace: %s", what, quote(s))
	}
	return nil
}

// isControl reports the Unicode control characters (category Cc), which
// CloudEvents forbids in strings.
func isControl(r rune) bool { return r < 0x20 || (r >= 0x7f && r <= 0x9f) }

// isNoncharacter reports Unicode noncharacters, which CloudEvents forbids.
func isNoncharacter(r rune) bool {
	return (r >= 0xfdd0 && r <= 0xfdef) || r&0xfffe == 0xfffe
}

// isInvisible reports characters that change how text is shown or split
// into lines without being seen: line and paragraph separators, zero-width
// characters, bidirectional controls and the byte order mark. They make an
// id that looks like another, or a log line that lies.
func isInvisible(r rune) bool {
	switch {
	case r >= 0x200b && r <= 0x200f, // zero-width space, joiners, LRM, RLM
		r >= 0x2028 && r <= 0x202e, // line and paragraph separators, bidi embeddings and overrides
		r >= 0x2060 && r <= 0x2064, // word joiner, invisible operators
		r >= 0x2066 && r <= 0x2069, // bidi isolates
		r == 0xfeff:                // byte order mark
		return true
	}
	return false
}

// sdkError renders an error of the CloudEvents SDK as one line. Its
// ValidationError lists fields in map order, one per line; this sorts them.
func sdkError(err error) string {
	var verr event.ValidationError
	if errors.As(err, &verr) {
		parts := make([]string, 0, len(verr))
		for _, k := range slices.Sorted(maps.Keys(verr)) {
			parts = append(parts, k+": "+verr[k].Error())
		}
		return foreign(strings.Join(parts, "; "))
	}
	return foreign(err.Error())
}

// foreign makes an error text from a library safe to embed: one line,
// valid UTF-8, at most maxForeign bytes. Library messages may quote input.
func foreign(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	s = strings.Map(func(r rune) rune {
		if isControl(r) || isInvisible(r) {
			return ' '
		}
		return r
	}, s)
	return truncateBytes(strings.TrimSpace(s), maxForeign)
}

// quote renders an untrusted value for an error: Go-quoted, so it stays
// on one line, and cut to maxQuoted bytes.
func quote(s string) string {
	if len(s) <= maxQuoted {
		return strconv.Quote(s)
	}
	return strconv.Quote(truncateBytes(s, maxQuoted))
}

// truncateBytes cuts s to at most n bytes plus an ellipsis, on a rune
// boundary when s is valid UTF-8 there.
func truncateBytes(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for i := 0; i < utf8.UTFMax && cut > 0 && !utf8.RuneStart(s[cut]); i++ {
		cut--
	}
	return s[:cut] + "…"
}

// headerValue looks a header up case-insensitively: NATS headers keep the
// case the publisher used, and SDKs in other languages differ.
func headerValue(h nats.Header, name string) string {
	if v := h.Get(name); v != "" {
		return v
	}
	for k, vals := range h {
		if strings.EqualFold(k, name) && len(vals) > 0 {
			return vals[0]
		}
	}
	return ""
}

// EncodeStructured renders ev in structured content mode, for agents that
// prefer it and for the outbox.
func EncodeStructured(ev event.Event) ([]byte, error) {
	b, err := json.Marshal(ev)
	if err != nil {
		return nil, fmt.Errorf("structured cloudevent: %w", err)
	}
	return b, nil
}
