package provider

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/agentq/agentq/internal/bus"
)

// The three ways a call can fail, for errors.Is. Every error Complete and
// Embed return wraps exactly one of them, except a cancellation of the
// caller's own context, which wraps context.Canceled or
// context.DeadlineExceeded and nothing else.
var (
	// ErrUnavailable means the provider could not be reached or did not
	// answer in time: connection refused, a 5xx or 429 after the retries, a
	// Retry-After beyond the call's deadline, no answer within the timeout,
	// or the client-side rate limit could not admit the call before its
	// deadline. The request itself may be fine. Errors wrapping it are also
	// marked bus.Unavailable, so a consumer's runner naks the event and
	// pauses instead of spending its delivery budget.
	ErrUnavailable = errors.New("provider unavailable")
	// ErrRejected means the server refused the request with a 4xx other
	// than 408 and 429 (bad request, authentication, unknown model, ...).
	// Sending it again will not help; the caller falls back (rules, the
	// lexical embedder) or reports a configuration error.
	ErrRejected = errors.New("provider rejected the request")
	// ErrBadOutput means the server answered but the answer cannot be used:
	// not a chat completion or embeddings list at all, no choices, empty
	// content, a refusal, no JSON object where JSON was asked for, or
	// vectors that do not match the input. The caller falls back.
	ErrBadOutput = errors.New("provider returned unusable output")
	// ErrDimensionChanged is wrapped by DimensionError.
	ErrDimensionChanged = errors.New("embedding dimension changed")
)

// APIError is a non-2xx answer from the server, decoded from the OpenAI
// error shape {"error": {"message", "type", "param", "code"}} when the body
// has it. It is wrapped by errors that wrap ErrUnavailable (429, 408, 5xx)
// or ErrRejected (other 4xx); find it with errors.As.
type APIError struct {
	// StatusCode is the HTTP status of the last attempt.
	StatusCode int
	// Message is the server's error message, or the start of the body when
	// it was not in the OpenAI shape.
	Message string
	// Type, Param and Code are the OpenAI error fields, when present.
	Type, Param, Code string
	// RetryAfter is what the server asked for in Retry-After (or
	// retry-after-ms), zero when absent.
	RetryAfter time.Duration
}

func (e *APIError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "status %d", e.StatusCode)
	if e.Message != "" {
		b.WriteString(": ")
		b.WriteString(e.Message)
	}
	if e.Code != "" {
		fmt.Fprintf(&b, " (code %s)", e.Code)
	}
	return b.String()
}

// DimensionError reports that the embedding model returned vectors of a
// different dimension than it did before (or than KnownDimension), which
// means the model behind the name changed: stored vectors and new ones can
// no longer be compared, so the indexer must re-index (replay) or the old
// model must be restored. errors.Is(err, ErrDimensionChanged) holds.
type DimensionError struct {
	Model string
	// Want is the dimension seen before; Got is the one just returned.
	Want, Got int
}

func (e *DimensionError) Error() string {
	return fmt.Sprintf("embedding model %q returned %d-dimensional vectors, but its vectors so far have %d dimensions: "+
		"the model changed; re-index with the new model or restore the old one", e.Model, e.Got, e.Want)
}

// Is makes errors.Is(err, ErrDimensionChanged) true.
func (e *DimensionError) Is(target error) bool { return target == ErrDimensionChanged }

// unavailable marks err as an outage both ways: ErrUnavailable for callers
// that only know this package, bus.Unavailable for the consumer runner.
func unavailable(err error) error {
	return bus.Unavailable(fmt.Errorf("%w: %w", ErrUnavailable, err))
}

func rejected(err error) error {
	return fmt.Errorf("%w: %w", ErrRejected, err)
}

func badOutput(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrBadOutput, fmt.Sprintf(format, args...))
}

// retryWaitError is the reason to stop retrying early: the wait the server
// asked for (or the backoff) would end past the call's deadline, so waiting
// can only end in a timeout.
type retryWaitError struct {
	wait, remaining time.Duration
	cause           error // *APIError of the answer that asked to wait, or the transport error
}

func (e *retryWaitError) Error() string {
	return fmt.Sprintf("retry in %s would pass the call's deadline (%s left) after %v",
		e.wait.Round(time.Millisecond), e.remaining.Round(time.Millisecond), e.cause)
}

func (e *retryWaitError) Unwrap() error { return e.cause }

// throttleError means the client-side rate limit could not admit an attempt
// before the call's deadline.
type throttleError struct {
	maxRPS float64
	err    error
}

func (e *throttleError) Error() string {
	return fmt.Sprintf("client rate limit of %g requests/s: %v", e.maxRPS, e.err)
}

func (e *throttleError) Unwrap() error { return e.err }
