package bus

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"strings"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/cloudevents/sdk-go/v2/types"
	"github.com/nats-io/nats.go"
)

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
	mt := ct
	if ct != jsonCT { // what agentq sends is its own media type: spare the parse
		mt, _, _ = mime.ParseMediaType(ct)
	}
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
	if err := eachAttributeHeader(ev, nil); err != nil {
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
			setSource(&ev, v)
		case "type":
			ev.SetType(v)
		case "subject":
			ev.SetSubject(v)
		case "dataschema":
			setDataSchema(&ev, v)
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
