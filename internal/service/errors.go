package service

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// Error codes of error replies. Clients branch on these; the message is for
// people.
const (
	CodeBadRequest  = "bad_request"  // the request is malformed: tenant, schema, or arguments
	CodeNotFound    = "not_found"    // what the request names does not exist
	CodeUnavailable = "unavailable"  // a dependency is down; retrying later may succeed
	CodeTimeout     = "timeout"      // the handler did not finish within the service's timeout
	CodeInternal    = "internal"     // a bug or unexpected failure; details are in the service log
	CodeRendering   = "rendering"    // a prompt could not be rendered with the given parameters
	CodeRenderLimit = "render_limit" // a prompt's rendering reached a limit: too long, too many steps, too slow
	CodeOverloaded  = "overloaded"   // every slot and queue place of the endpoint is taken; retry later
	CodeTooLarge    = "too_large"    // the reply would exceed the NATS max payload

	codeOK = "ok" // metric label of successful replies
)

// Error is an error reply: the value of the "error" member of the reply
// body. A Handler returns one (possibly wrapped) to choose the code and the
// message the client sees; Call returns one when the service replied with
// an error.
type Error struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// Error returns "code: message".
func (e *Error) Error() string { return e.Code + ": " + e.Message }

// Errorf returns an *Error with the given code and a formatted message.
func Errorf(code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// BadRequest returns an *Error with code bad_request.
func BadRequest(format string, args ...any) *Error { return Errorf(CodeBadRequest, format, args...) }

// NotFound returns an *Error with code not_found.
func NotFound(format string, args ...any) *Error { return Errorf(CodeNotFound, format, args...) }

// Unavailable returns an *Error with code unavailable.
func Unavailable(format string, args ...any) *Error {
	return Errorf(CodeUnavailable, format, args...)
}

// httpStatus maps a code to the number put in the Nats-Service-Error-Code
// header: micro clients (the nats CLI, nats.net's NatsSvcStatus) expect an
// HTTP-like integer there, while the JSON body carries agentq's code.
func httpStatus(code string) string {
	switch code {
	case CodeBadRequest:
		return "400"
	case CodeNotFound:
		return "404"
	case CodeRendering, CodeRenderLimit:
		return "422"
	case CodeTooLarge:
		return "413"
	case CodeUnavailable, CodeOverloaded:
		return "503"
	case CodeTimeout:
		return "504"
	default:
		return "500"
	}
}

// maxMessage bounds messages the service writes itself from other errors
// (validation), so a reply stays small and a header stays one line.
const maxMessage = 512

// oneLine collapses all whitespace runs, newlines included, to single
// spaces and truncates s to at most n bytes on a rune boundary, ending
// with "…" when cut.
func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) <= n {
		return s
	}
	const ellipsis = "…"
	cut := n - len(ellipsis)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + ellipsis
}
