package provider

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/hashicorp/go-retryablehttp"
)

// Backoff between attempts when the server gives no Retry-After: 250 ms,
// 500 ms, 1 s, ... up to 4 s, each with up to half of it taken off at
// random so copies of a consumer do not retry in step.
const (
	backoffBase = 250 * time.Millisecond
	backoffMax  = 4 * time.Second
)

// call is the state of one call across its attempts. It is the transport
// of a per-call retryablehttp client, so it sees every attempt: it waits
// for the rate limiter, counts, and times each one.
type call struct {
	c        *client
	attempts int           // attempts sent, over every post of the call
	sent     int           // attempts sent by the current post
	lastDur  time.Duration // how long the last attempt took, to judge whether another fits
	wait     time.Duration // the wait checkRetry chose, for backoff to return
}

// RoundTrip sends one attempt after the rate limiter admits it.
func (k *call) RoundTrip(req *http.Request) (*http.Response, error) {
	if k.c.limiter != nil {
		if err := k.c.limiter.Wait(req.Context()); err != nil {
			if ctxErr := req.Context().Err(); ctxErr != nil {
				return nil, ctxErr
			}
			// The limiter refuses at once when the turn would come after
			// the deadline: waiting would only end in a timeout.
			return nil, &throttleError{maxRPS: k.c.maxRPS, err: err}
		}
	}
	k.attempts++
	k.sent++
	start := time.Now()
	resp, err := k.c.http.Do(req)
	k.lastDur = time.Since(start)
	var ue *url.Error
	if errors.As(err, &ue) {
		// The per-call http.Client wraps it again; one "Post URL:" is enough.
		err = ue.Err
	}
	return resp, err
}

// post sends body to the client's endpoint with retries and returns the
// body of a 2xx answer. Any other final answer is an *APIError; a call
// stopped early returns *retryWaitError or *throttleError; otherwise the
// transport's or the context's error.
func (c *client) post(ctx context.Context, k *call, body []byte) ([]byte, error) {
	k.sent = 0
	rc := &retryablehttp.Client{
		HTTPClient: &http.Client{Transport: k},
		RetryMax:   c.maxRetries,
		CheckRetry: k.checkRetry,
		Backoff:    k.backoff,
		// Without it a final 429 or 503 becomes a bare "giving up" error
		// and its status and message are lost.
		ErrorHandler: retryablehttp.PassthroughErrorHandler,
		// Logger nil: the caller logs the outcome, once.
	}
	req, err := retryablehttp.NewRequestWithContext(ctx, http.MethodPost, c.endpoint, body)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	if c.apiKey != "" {
		if c.azure {
			req.Header.Set("api-key", c.apiKey)
		} else {
			req.Header.Set("Authorization", "Bearer "+c.apiKey)
		}
	}
	resp, err := rc.Do(req)
	if err != nil {
		if resp != nil {
			resp.Body.Close()
		}
		return nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, c.maxBody+1))
	if err != nil {
		return nil, fmt.Errorf("read answer: %w", err)
	}
	if int64(len(data)) > c.maxBody {
		return nil, badOutput("answer larger than %d bytes", c.maxBody)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return nil, newAPIError(resp, data)
	}
	return data, nil
}

// checkRetry decides after each attempt. It retries 408, 429, 5xx but 501
// and dropped connections, while retries remain and the wait plus another
// attempt as long as the last one fits before the deadline; when they do
// not fit it stops at once with a *retryWaitError rather than sleep into a
// timeout.
func (k *call) checkRetry(ctx context.Context, resp *http.Response, err error) (bool, error) {
	if ctx.Err() != nil {
		return false, ctx.Err()
	}
	if err != nil {
		if !retryableError(err) {
			return false, err
		}
	} else if !retryableStatus(resp.StatusCode) {
		return false, nil
	}
	if k.sent > k.c.maxRetries {
		// No retry left: the last answer is the result.
		return false, nil
	}
	wait, ok := time.Duration(0), false
	if resp != nil {
		wait, ok = retryAfter(resp.Header, time.Now())
	}
	if !ok {
		wait = backoff(k.sent)
	}
	if deadline, has := ctx.Deadline(); has {
		if remaining := time.Until(deadline); wait+k.lastDur >= remaining {
			cause := err
			if resp != nil {
				data, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
				cause = newAPIError(resp, data)
			}
			return false, &retryWaitError{wait: wait, remaining: remaining, cause: cause}
		}
	}
	k.wait = wait
	return true, nil
}

// backoff returns the wait checkRetry chose. retryablehttp's own backoff
// would sleep as long as Retry-After says, however far past the deadline.
func (k *call) backoff(_, _ time.Duration, _ int, _ *http.Response) time.Duration {
	return k.wait
}

// backoff is the wait before retry number n (1 for the first retry)
// without a Retry-After.
func backoff(n int) time.Duration {
	d := backoffMax
	if n < 5 {
		d = min(backoffBase<<(n-1), backoffMax)
	}
	return d/2 + rand.N(d/2+1)
}

func retryableStatus(code int) bool {
	return code == http.StatusRequestTimeout || code == http.StatusTooManyRequests ||
		(code >= 500 && code != http.StatusNotImplemented)
}

// retryableError reports whether a transport error is worth another
// attempt: a connection that dropped (the server restarted, a keep-alive
// connection was closed under us) or an attempt that timed out. A refused
// connection or an unknown host is not: the server is down, and the
// consumer's runner backs off from an outage better than a 5 s call can.
func retryableError(err error) bool {
	if errors.Is(err, syscall.ECONNREFUSED) {
		return false
	}
	if errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.ECONNABORTED) || errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout() && !errors.Is(err, context.DeadlineExceeded)
}

// retryAfter reads how long the server asked to wait: retry-after-ms
// (OpenAI's, in milliseconds) or Retry-After in seconds or as an HTTP date.
// A date in the past means now.
func retryAfter(h http.Header, now time.Time) (time.Duration, bool) {
	if v := strings.TrimSpace(h.Get("Retry-After-Ms")); v != "" {
		if ms, err := strconv.ParseFloat(v, 64); err == nil && ms >= 0 && ms < 1e12 {
			return time.Duration(ms * float64(time.Millisecond)), true
		}
	}
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0, false
	}
	if s, err := strconv.ParseFloat(v, 64); err == nil {
		if s < 0 || s > 1e9 {
			return 0, false
		}
		return time.Duration(s * float64(time.Second)), true
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(t.Sub(now), 0), true
	}
	return 0, false
}

// newAPIError decodes a non-2xx answer.
func newAPIError(resp *http.Response, body []byte) *APIError {
	e := &APIError{StatusCode: resp.StatusCode}
	e.RetryAfter, _ = retryAfter(resp.Header, time.Now())
	var wire struct {
		Error json.RawMessage `json:"error"`
	}
	if json.Unmarshal(body, &wire) == nil && len(wire.Error) > 0 {
		var obj struct {
			Message json.RawMessage `json:"message"`
			Type    string          `json:"type"`
			Param   json.RawMessage `json:"param"`
			Code    json.RawMessage `json:"code"`
		}
		var s string
		switch {
		case json.Unmarshal(wire.Error, &obj) == nil:
			e.Message, e.Type, e.Param, e.Code = looseString(obj.Message), obj.Type, looseString(obj.Param), looseString(obj.Code)
		case json.Unmarshal(wire.Error, &s) == nil:
			// Some servers (older llama.cpp, proxies) send "error": "text".
			e.Message = s
		}
	}
	if e.Message == "" {
		e.Message = snippet(body)
	}
	if e.Message == "" {
		e.Message = http.StatusText(resp.StatusCode)
	}
	return e
}

// looseString renders a JSON string, number or list as plain text: error
// codes come as either, and validation messages sometimes as a list.
func looseString(raw json.RawMessage) string {
	if len(raw) == 0 || string(raw) == "null" {
		return ""
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var list []string
	if json.Unmarshal(raw, &list) == nil {
		return strings.Join(list, "; ")
	}
	return string(raw)
}

// snippet is the start of a body for an error message, on one line.
func snippet(body []byte) string {
	s := strings.Join(strings.Fields(string(body)), " ")
	if len(s) > 200 {
		s = s[:200] + "..."
	}
	return s
}

// fail classifies err, the failure of a call whose context is callCtx,
// derived from the caller's ctx. A caller that cancelled gets its own
// context error back, unclassified.
func (c *client) fail(ctx, callCtx context.Context, err error) error {
	if ctxErr := ctx.Err(); ctxErr != nil {
		return ctxErr
	}
	var (
		wait *retryWaitError
		thr  *throttleError
		api  *APIError
	)
	switch {
	case errors.Is(err, ErrBadOutput), errors.Is(err, ErrRejected), errors.Is(err, ErrDimensionChanged):
		return err
	case errors.As(err, &wait), errors.As(err, &thr):
		return unavailable(err)
	case errors.As(err, &api):
		if retryableStatus(api.StatusCode) {
			return unavailable(err)
		}
		return rejected(err)
	case callCtx.Err() != nil:
		return unavailable(fmt.Errorf("no answer within %s: %w", c.timeout, err))
	default:
		// Refused, reset, unknown host, TLS: the provider cannot be reached.
		return unavailable(err)
	}
}
