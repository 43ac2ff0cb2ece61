package bus

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

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

// ValidTenant reports whether t is a well-formed tenant id:
// ^[a-z0-9_-]{1,64}$. Checked byte by byte, not by a regular expression:
// it runs several times per event (TestValidTenantAndTypeMatchTheirPatterns
// holds it to the pattern).
func ValidTenant(t string) bool {
	if len(t) == 0 || len(t) > 64 {
		return false
	}
	for i := 0; i < len(t); i++ {
		if c := t[i]; !(isLowerAlnum(c) || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

func isLowerAlnum(c byte) bool { return 'a' <= c && c <= 'z' || '0' <= c && c <= '9' }

// splitType returns the domain and event of a type
// ^agentq\.([a-z][a-z0-9_]*)\.([a-z][a-z0-9_]*)\.v([0-9]+)$, byte by byte
// like ValidTenant.
func splitType(t string) (domain, name string, ok bool) {
	rest, ok := strings.CutPrefix(t, "agentq.")
	if !ok {
		return "", "", false
	}
	word := func() (string, bool) {
		i := 0
		for i < len(rest) && (isLowerAlnum(rest[i]) || rest[i] == '_') {
			i++
		}
		w := rest[:i]
		if i == 0 || !('a' <= w[0] && w[0] <= 'z') || i == len(rest) || rest[i] != '.' {
			return "", false
		}
		rest = rest[i+1:]
		return w, true
	}
	if domain, ok = word(); !ok {
		return "", "", false
	}
	if name, ok = word(); !ok {
		return "", "", false
	}
	v, ok := strings.CutPrefix(rest, "v")
	if !ok || v == "" {
		return "", "", false
	}
	for i := 0; i < len(v); i++ {
		if v[i] < '0' || v[i] > '9' {
			return "", "", false
		}
	}
	return domain, name, true
}

// Type is agentq's CloudEvents type for an event, e.g. Type("tool",
// "executed") is "agentq.tool.executed.v1".
func Type(domain, name string) string { return "agentq." + domain + "." + name + ".v1" }

// SubjectFor derives the NATS subject <domain>.<event>.<tenant> of an event
// of type agentq.<domain>.<event>.v<N>.
func SubjectFor(eventType, tenant string) (string, error) {
	domain, name, ok := splitType(eventType)
	if !ok {
		return "", fmt.Errorf("type %s is not agentq.<domain>.<event>.v<N>", quote(eventType))
	}
	if !ValidTenant(tenant) {
		return "", fmt.Errorf("tenant %s does not match [a-z0-9_-]{1,64}", quote(tenant))
	}
	return domain + "." + name + "." + tenant, nil
}

// Subject returns the subject an event is published on.
func Subject(ev event.Event) (string, error) {
	return SubjectFor(ev.Type(), Tenant(ev))
}

// Tenant returns the tenantid extension of ev, or "" when it is unset.
func Tenant(ev event.Event) string {
	s, _ := extensions(ev)[ExtTenant].(string)
	return s
}

// Causation returns the causationid extension of ev, or "".
func Causation(ev event.Event) string {
	s, _ := extensions(ev)[ExtCausation].(string)
	return s
}

// extensions returns the extension attributes of ev, to read only: unlike
// Event.Extensions, which copies them on every call, it returns the
// event's own map when it can.
func extensions(ev event.Event) map[string]any {
	switch c := ev.Context.(type) {
	case nil:
		return nil
	case *event.EventContextV1:
		return c.Extensions
	}
	return ev.Extensions()
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
	hs := make([][2]string, 0, 10+len(extensions(ev)))
	err := eachAttributeHeader(ev, func(k, v string) { hs = append(hs, [2]string{k, v}) })
	if err != nil {
		return nil, err
	}
	return hs, nil
}

// eachAttributeHeader makes the checks of attributeHeaders, passing each
// header to add when add is not nil: Decode checks that an event could be
// sent on without building its headers.
func eachAttributeHeader(ev event.Event, add func(k, v string)) error {
	n := 0
	put := func(k, v string) {
		n += len(k) + len(v)
		if add != nil {
			add(k, v)
		}
	}
	put(headerPrefix+"specversion", ev.SpecVersion())
	put(headerPrefix+"id", ev.ID())
	put(headerPrefix+"source", ev.Source())
	put(headerPrefix+"type", ev.Type())
	if s := ev.Subject(); s != "" {
		put(headerPrefix+"subject", s)
	}
	if !ev.Time().IsZero() {
		put(headerPrefix+"time", types.FormatTime(ev.Time()))
	}
	if s := ev.DataSchema(); s != "" {
		put(headerPrefix+"dataschema", s)
	}
	if ct := ev.DataContentType(); ct != "" {
		put(headerContentType, ct)
	}
	exts := extensions(ev)
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
		put(headerPrefix+name, v)
	}
	if first.err != nil {
		return first.err
	}
	tenant, _ := exts[ExtTenant].(string)
	put(headerMsgID, MsgID(tenant, ev.ID()))
	if n > MaxHeaderBytes {
		return fmt.Errorf("attributes take %d bytes as headers, over the %d-byte limit", n, MaxHeaderBytes)
	}
	return nil
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
