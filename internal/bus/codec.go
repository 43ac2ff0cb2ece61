package bus

import (
	"encoding/json"
	"fmt"
	"mime"
	"regexp"
	"strings"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
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
		return "", fmt.Errorf("type %q is not agentq.<domain>.<event>.v<N>", eventType)
	}
	if !ValidTenant(tenant) {
		return "", fmt.Errorf("tenant %q does not match [a-z0-9_-]{1,64}", tenant)
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
		return ev, fmt.Errorf("invalid event: %w", err)
	}
	return ev, nil
}

// SchemaURL is the dataschema of an agentq event type.
func SchemaURL(eventType string) string {
	return "https://agentq.dev/schemas/" + strings.TrimPrefix(eventType, "agentq.") + ".json"
}

// Encode turns ev into a NATS message in binary content mode: every
// attribute becomes a "ce-" header, datacontenttype becomes content-type, the
// payload is the data, and Nats-Msg-Id is the event id.
func Encode(ev event.Event) (*nats.Msg, error) {
	if err := ev.Validate(); err != nil {
		return nil, fmt.Errorf("invalid event: %w", err)
	}
	subject, err := Subject(ev)
	if err != nil {
		return nil, err
	}
	m := nats.NewMsg(subject)
	h := m.Header
	h.Set(headerPrefix+"specversion", ev.SpecVersion())
	h.Set(headerPrefix+"id", ev.ID())
	h.Set(headerPrefix+"source", ev.Source())
	h.Set(headerPrefix+"type", ev.Type())
	if s := ev.Subject(); s != "" {
		h.Set(headerPrefix+"subject", s)
	}
	if !ev.Time().IsZero() {
		h.Set(headerPrefix+"time", ev.Time().UTC().Format(time.RFC3339Nano))
	}
	if s := ev.DataSchema(); s != "" {
		h.Set(headerPrefix+"dataschema", s)
	}
	if ct := ev.DataContentType(); ct != "" {
		h.Set(headerContentType, ct)
	}
	for name, v := range ev.Extensions() {
		h.Set(headerPrefix+name, fmt.Sprint(v))
	}
	h.Set(headerMsgID, ev.ID())
	m.Data = ev.Data()
	return m, nil
}

// Decode reads a CloudEvent from a NATS message in either content mode,
// detected as the NATS binding says: a content-type of
// application/cloudevents(+json) means structured, a ce-specversion header
// means binary. A message with neither is tried as structured JSON, the
// binding's original (header-less) mode.
func Decode(h nats.Header, data []byte) (event.Event, error) {
	ct := headerValue(h, headerContentType)
	mt, _, _ := mime.ParseMediaType(ct)
	switch {
	case strings.HasPrefix(mt, "application/cloudevents"):
		return decodeStructured(data)
	case headerValue(h, headerPrefix+"specversion") != "":
		return decodeBinary(h, ct, data)
	default:
		return decodeStructured(data)
	}
}

func decodeStructured(data []byte) (event.Event, error) {
	var ev event.Event
	if err := json.Unmarshal(data, &ev); err != nil {
		return ev, fmt.Errorf("structured cloudevent: %w", err)
	}
	if err := ev.Validate(); err != nil {
		return ev, fmt.Errorf("structured cloudevent: %w", err)
	}
	return ev, nil
}

func decodeBinary(h nats.Header, ct string, data []byte) (event.Event, error) {
	ev := event.New(headerValue(h, headerPrefix+"specversion"))
	for key, vals := range h {
		k := strings.ToLower(key)
		if !strings.HasPrefix(k, headerPrefix) || len(vals) == 0 {
			continue
		}
		name, v := strings.TrimPrefix(k, headerPrefix), vals[0]
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
			if ct == "" {
				ct = v
			}
		case "time":
			t, err := time.Parse(time.RFC3339Nano, v)
			if err != nil {
				return ev, fmt.Errorf("binary cloudevent: ce-time %q: %w", v, err)
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
	if err := ev.Validate(); err != nil {
		return ev, fmt.Errorf("binary cloudevent: %w", err)
	}
	return ev, nil
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
