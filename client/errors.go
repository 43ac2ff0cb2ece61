package client

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// ErrNotFound is matched (errors.Is) by a *ServiceError with code
// not_found: no such prompt, version or label.
var ErrNotFound = errors.New("not found")

// ErrClosed is returned by calls on a closed Client.
var ErrClosed = errors.New("agentq client closed")

// ValidationError says why data was refused before it left: it does not
// match the schema of its type (schemas/ in the agentq repository), or the
// event around it cannot be carried (an event id that is not printable).
type ValidationError struct {
	// Type is the CloudEvents type or request checked, e.g.
	// agentq.tool.executed.v1 or agentq.search.tools.request.v1.
	Type string
	// Problems lists what is wrong, one entry per field, sorted by field.
	Problems []Problem
}

// Problem is one thing wrong with one field.
type Problem struct {
	// Field is the JSON pointer of the offending value, e.g. /tool_name
	// or /test_queries/0/query; "/" is the data object itself. Several
	// fields can share one problem: "/prompt_hash or /prompt_id and
	// /version". A CloudEvents attribute is named without a slash: id.
	Field string
	// Message says what is wrong, e.g. "missing" or "got 2, want <= 1".
	Message string
}

// Field is the first problem's field, or "" when there is none.
func (e *ValidationError) Field() string {
	if len(e.Problems) == 0 {
		return ""
	}
	return e.Problems[0].Field
}

func (e *ValidationError) Error() string {
	parts := make([]string, 0, len(e.Problems))
	for _, p := range e.Problems {
		if p.Field == "" {
			parts = append(parts, p.Message)
			continue
		}
		parts = append(parts, p.Field+": "+p.Message)
	}
	return "invalid " + e.Type + ": " + strings.Join(parts, "; ")
}

// RefusedError is JetStream's refusal of a published event: the server
// answered, and did not store it (a message over the stream's size limit,
// a stream that does not take the subject, ...). Publishing it again
// unchanged fails again.
type RefusedError struct {
	Type, ID string
	// Code is the HTTP-like status JetStream gave, ErrCode its own code
	// (e.g. 10054: message size exceeds maximum allowed).
	Code        int
	ErrCode     uint16
	Description string
	err         error
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("publish %s %s: refused by JetStream: %s (code %d, err_code %d)", e.Type, e.ID, e.Description, e.Code, e.ErrCode)
}

func (e *RefusedError) Unwrap() error { return e.err }

// TimeoutError is a call that got no answer in time: an event whose
// JetStream ack did not come within Config.AckTimeout, or whose ack was
// lost with the connection (it may have been stored: publishing it again
// with the same id is safe, JetStream drops the duplicate), or a request
// whose reply did not come before its deadline.
type TimeoutError struct {
	// Op is what timed out: "publish <type> <id>", "search.prompts",
	// "prompts.get <id>", ...
	Op    string
	After time.Duration
	err   error
}

func (e *TimeoutError) Error() string {
	if e.After == 0 {
		return fmt.Sprintf("%s: no answer: %v", e.Op, e.err)
	}
	return fmt.Sprintf("%s: no answer within %s: %v", e.Op, e.After, e.err)
}

func (e *TimeoutError) Unwrap() error { return e.err }

// UnavailableError is a call that could not be made: the NATS connection
// is down (the client reconnects by itself), nothing serves the request
// (no indexer running), or no stream takes the event. For GetPrompt it
// means the prompt was never fetched, so there is no last-known version
// to serve.
type UnavailableError struct {
	Op  string
	err error
}

func (e *UnavailableError) Error() string { return e.Op + ": unavailable: " + e.err.Error() }

func (e *UnavailableError) Unwrap() error { return e.err }

// ServiceError is an error reply of agentq's request/reply services, or of
// the client's own rendering of a cached prompt (the same codes).
type ServiceError struct {
	Op string
	// Code is one of bad_request, not_found, unavailable, timeout,
	// internal, rendering, render_limit, overloaded, too_large.
	Code    string
	Message string
}

func (e *ServiceError) Error() string { return e.Op + ": " + e.Code + ": " + e.Message }

// Is makes errors.Is(err, ErrNotFound) hold for code not_found.
func (e *ServiceError) Is(target error) bool { return target == ErrNotFound && e.Code == "not_found" }

// transient reports whether a service error is the service's trouble,
// not the request's: a cached prompt is served instead.
func (e *ServiceError) transient() bool {
	switch e.Code {
	case "unavailable", "timeout", "internal", "overloaded":
		return true
	}
	return false
}
