package provider_test

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentq/agentq/internal/bus"
	"github.com/agentq/agentq/internal/chat"
	"github.com/agentq/agentq/internal/provider"
	"github.com/agentq/agentq/internal/provider/providertest"
)

// newChat starts a server and a Chat pointed at it; edit adjusts the
// options.
func newChat(t *testing.T, edit func(*provider.Options)) (*provider.Chat, *providertest.Server) {
	t.Helper()
	srv := providertest.New(t)
	opts := provider.Options{BaseURL: srv.URL, Model: "rater-model"}
	if edit != nil {
		edit(&opts)
	}
	c, err := provider.NewChat(opts)
	require.NoError(t, err)
	return c, srv
}

// ratingRequest is what the rater sends: chat's rating prompt at
// temperature 0 with a token ceiling.
func ratingRequest(t testing.TB, jsonMode bool) provider.ChatRequest {
	t.Helper()
	msgs, err := chat.NewBuilder().RatingMessages(chat.RatingInput{
		ToolName: "web_search", Input: `{"q":"go"}`, Output: "Go is a programming language.",
	})
	require.NoError(t, err)
	conv := chat.New("").WithTemperature(0).WithMaxTokens(200).Append(msgs...)
	return provider.ChatRequest{OpenAIRequest: conv.OpenAIRequest(), JSON: jsonMode}
}

func TestCompleteCopiesAnswerAndUsage(t *testing.T) {
	c, srv := newChat(t, func(o *provider.Options) { o.APIKey = "sk-test" })
	srv.SetAPIKey("sk-test")
	srv.SetUsage(17, 5)
	srv.SetResponder(providertest.Fixed(`{"relevance": 0.9, "correctness": 0.8, "reason": "fine"}`))

	resp, err := c.Complete(context.Background(), ratingRequest(t, true))
	require.NoError(t, err)
	require.Equal(t, `{"relevance": 0.9, "correctness": 0.8, "reason": "fine"}`, resp.Content)
	require.JSONEq(t, resp.Content, string(resp.JSON))
	require.Equal(t, "rater-model", resp.Model)
	require.Equal(t, "stop", resp.FinishReason)
	require.Equal(t, provider.Usage{PromptTokens: 17, CompletionTokens: 5, TotalTokens: 22}, resp.Usage)
	require.Equal(t, 1, resp.Attempts)
	require.True(t, resp.Formatted)
	require.Positive(t, resp.Latency)

	rating, err := chat.ParseRating(resp.Content)
	require.NoError(t, err)
	require.InDelta(t, 0.85, rating.Score(), 1e-9)

	// What went over the wire: the conversation as chat rendered it, with
	// the client's model, a temperature of 0 that is really sent, and the
	// credentials.
	var body map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(srv.LastBody(), &body))
	require.JSONEq(t, `"rater-model"`, string(body["model"]))
	require.JSONEq(t, `0`, string(body["temperature"]))
	require.JSONEq(t, `200`, string(body["max_completion_tokens"]))
	require.JSONEq(t, `{"type":"json_object"}`, string(body["response_format"]))
	got := srv.LastChat()
	require.Len(t, got.Messages, 2)
	require.Equal(t, "system", got.Messages[0].Role)
	require.Equal(t, "user", got.Messages[1].Role)
	require.Contains(t, got.Messages[1].Content, "Go is a programming language.")
	require.Equal(t, "Bearer sk-test", srv.LastHeader().Get("Authorization"))
	require.Equal(t, "/v1/chat/completions", srv.LastURL())
}

func TestCompleteResponseFormat(t *testing.T) {
	schema := json.RawMessage(`{"type":"object","properties":{"relevance":{"type":"number"}},"required":["relevance"],"additionalProperties":false}`)
	tests := []struct {
		name     string
		req      func(provider.ChatRequest) provider.ChatRequest
		wantRF   string // expected response_format, "" for none
		wantJSON bool
	}{
		{
			name:   "text mode sends none",
			req:    func(r provider.ChatRequest) provider.ChatRequest { r.JSON = false; return r },
			wantRF: "",
		},
		{
			name:     "JSON mode sends json_object",
			req:      func(r provider.ChatRequest) provider.ChatRequest { r.JSON = true; return r },
			wantRF:   `{"type":"json_object"}`,
			wantJSON: true,
		},
		{
			name: "a schema sends json_schema",
			req: func(r provider.ChatRequest) provider.ChatRequest {
				r.Schema = &provider.Schema{Name: "rating", Description: "a rating", Schema: schema, Strict: true}
				return r
			},
			wantRF:   `{"type":"json_schema","json_schema":{"name":"rating","description":"a rating","schema":` + string(schema) + `,"strict":true}}`,
			wantJSON: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, srv := newChat(t, nil)
			srv.SetResponder(providertest.Fixed(`{"relevance": 1}`))
			resp, err := c.Complete(context.Background(), tt.req(ratingRequest(t, false)))
			require.NoError(t, err)
			var body map[string]json.RawMessage
			require.NoError(t, json.Unmarshal(srv.LastBody(), &body))
			if tt.wantRF == "" {
				require.NotContains(t, body, "response_format")
				require.Nil(t, resp.JSON)
				require.False(t, resp.Formatted)
				return
			}
			require.JSONEq(t, tt.wantRF, string(body["response_format"]))
			require.JSONEq(t, `{"relevance": 1}`, string(resp.JSON))
			require.True(t, resp.Formatted)
		})
	}
}

func TestCompleteFindsJSONAroundProse(t *testing.T) {
	tests := []struct {
		name, content, want string
	}{
		{"fenced", "```json\n{\"relevance\": 0.7}\n```", `{"relevance": 0.7}`},
		{"prose before and after", "Let me think.\n{\"relevance\": 0.7, \"nested\": {\"a\": 1}}\nDone.", `{"relevance": 0.7, "nested": {"a": 1}}`},
		{"the last of several", `Example: {"relevance": 0.1}. My answer: {"relevance": 0.9}`, `{"relevance": 0.9}`},
		{"braces in prose", `I use {curly} braces. {"relevance": 0.4}`, `{"relevance": 0.4}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, srv := newChat(t, nil)
			srv.SetResponder(providertest.Fixed(tt.content))
			resp, err := c.Complete(context.Background(), ratingRequest(t, true))
			require.NoError(t, err)
			require.Equal(t, tt.content, resp.Content)
			require.JSONEq(t, tt.want, string(resp.JSON))
		})
	}
}

func TestCompleteFallsBackWithoutResponseFormat(t *testing.T) {
	c, srv := newChat(t, nil)
	srv.SetRejectResponseFormat(true)
	srv.SetResponder(providertest.Fixed("Here you go:\n```json\n{\"relevance\": 0.6, \"correctness\": 0.6}\n```"))

	resp, err := c.Complete(context.Background(), ratingRequest(t, true))
	require.NoError(t, err)
	require.Equal(t, 2, resp.Attempts, "one refused with response_format, one without")
	require.False(t, resp.Formatted)
	require.JSONEq(t, `{"relevance": 0.6, "correctness": 0.6}`, string(resp.JSON))
	require.Equal(t, 1, srv.Answered(http.StatusBadRequest))
	require.Nil(t, srv.LastChat().ResponseFormat)

	// Remembered: the next call does not try response_format again.
	resp, err = c.Complete(context.Background(), ratingRequest(t, true))
	require.NoError(t, err)
	require.Equal(t, 1, resp.Attempts)
	require.Equal(t, 1, srv.Answered(http.StatusBadRequest))
	require.Equal(t, 3, srv.ChatRequests())
}

func TestCompleteJSONModeWithoutJSONInPromptIsRejected(t *testing.T) {
	c, srv := newChat(t, nil)
	req := provider.ChatRequest{OpenAIRequest: chat.New("").Append(chat.User("Rate this output.")).OpenAIRequest(), JSON: true}
	resp, err := c.Complete(context.Background(), req)
	require.ErrorIs(t, err, provider.ErrRejected)
	require.ErrorContains(t, err, "must contain the word 'json'")
	require.Equal(t, 1, resp.Attempts, "the prompt's fault: not retried without response_format")

	// And response_format is not given up on.
	resp, err = c.Complete(context.Background(), ratingRequest(t, true))
	require.NoError(t, err)
	require.True(t, resp.Formatted)
	require.NotNil(t, srv.LastChat().ResponseFormat)
}

func TestCompleteHonoursRetryAfter(t *testing.T) {
	tests := []struct {
		name       string
		status     int
		retryAfter func() string
		atLeast    time.Duration
	}{
		{"429 seconds", http.StatusTooManyRequests, func() string { return "1" }, time.Second},
		{"503 seconds", http.StatusServiceUnavailable, func() string { return "1" }, time.Second},
		// An HTTP date has whole seconds: two seconds ahead is at least one.
		{"429 HTTP date", http.StatusTooManyRequests, func() string {
			return time.Now().Add(2 * time.Second).UTC().Format(http.TimeFormat)
		}, time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c, srv := newChat(t, nil)
			srv.FailNext(1, tt.status, tt.retryAfter())
			start := time.Now()
			resp, err := c.Complete(context.Background(), ratingRequest(t, true))
			elapsed := time.Since(start)
			require.NoError(t, err)
			require.Equal(t, 2, resp.Attempts)
			require.GreaterOrEqual(t, elapsed, tt.atLeast)
			require.GreaterOrEqual(t, resp.Latency, tt.atLeast)
			times := srv.RequestTimes()
			require.Len(t, times, 2)
			require.GreaterOrEqual(t, times[1].Sub(times[0]), tt.atLeast, "the retry came before the Retry-After")
		})
	}
}

func TestCompleteRetryAfterBeyondDeadlineFailsAtOnce(t *testing.T) {
	c, srv := newChat(t, func(o *provider.Options) { o.Timeout = 2 * time.Second })
	srv.FailNext(1, http.StatusTooManyRequests, "30")

	start := time.Now()
	resp, err := c.Complete(context.Background(), ratingRequest(t, true))
	elapsed := time.Since(start)
	require.ErrorIs(t, err, provider.ErrUnavailable)
	require.True(t, bus.IsUnavailable(err))
	require.Less(t, elapsed, time.Second, "it slept instead of failing at once")
	require.Equal(t, 1, resp.Attempts)
	require.Equal(t, 1, srv.ChatRequests())
	var api *provider.APIError
	require.ErrorAs(t, err, &api)
	require.Equal(t, http.StatusTooManyRequests, api.StatusCode)
	require.Equal(t, 30*time.Second, api.RetryAfter)
	require.Contains(t, api.Message, "Rate limit reached")
}

func TestCompleteOutages(t *testing.T) {
	tests := []struct {
		name      string
		timeout   time.Duration
		setup     func(*providertest.Server)
		within    time.Duration // the call must end by then
		atLeast   time.Duration // and not before
		attempts  int
		errSubstr string
	}{
		{
			name:     "connection refused",
			timeout:  5 * time.Second,
			setup:    func(s *providertest.Server) { s.Down() },
			within:   time.Second, // against a 5 s timeout
			attempts: 1, errSubstr: "connection refused",
		},
		{
			name:     "slow server past the timeout",
			timeout:  500 * time.Millisecond,
			setup:    func(s *providertest.Server) { s.SetLatency(3 * time.Second) },
			atLeast:  500 * time.Millisecond,
			within:   time.Second,
			attempts: 1, errSubstr: "no answer within 500ms",
		},
		{
			name:     "503 after every retry",
			timeout:  5 * time.Second,
			setup:    func(s *providertest.Server) { s.SetFailing(http.StatusServiceUnavailable, "0") },
			within:   time.Second,
			attempts: 4, errSubstr: "status 503",
		},
		{
			name:     "500 after every retry, with backoff",
			timeout:  5 * time.Second,
			setup:    func(s *providertest.Server) { s.SetFailing(http.StatusInternalServerError, "") },
			atLeast:  (250 + 500 + 1000) * time.Millisecond / 2, // the backoff's least, jitter taking half
			within:   3 * time.Second,
			attempts: 4, errSubstr: "status 500",
		},
		{
			name:     "429 after every retry",
			timeout:  5 * time.Second,
			setup:    func(s *providertest.Server) { s.SetFailing(http.StatusTooManyRequests, "0") },
			within:   time.Second,
			attempts: 4, errSubstr: "status 429",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c, srv := newChat(t, func(o *provider.Options) { o.Timeout = tt.timeout })
			tt.setup(srv)
			start := time.Now()
			resp, err := c.Complete(context.Background(), ratingRequest(t, true))
			elapsed := time.Since(start)
			require.ErrorIs(t, err, provider.ErrUnavailable)
			require.True(t, bus.IsUnavailable(err), "the runner must see an outage")
			require.NotErrorIs(t, err, provider.ErrRejected)
			require.NotErrorIs(t, err, provider.ErrBadOutput)
			require.ErrorContains(t, err, tt.errSubstr)
			require.Equal(t, tt.attempts, resp.Attempts)
			require.Less(t, elapsed, tt.within)
			require.GreaterOrEqual(t, elapsed, tt.atLeast)
		})
	}
}

func TestCompleteRecoversAfterOutage(t *testing.T) {
	c, srv := newChat(t, nil)
	srv.Down()
	_, err := c.Complete(context.Background(), ratingRequest(t, true))
	require.ErrorIs(t, err, provider.ErrUnavailable)
	require.NoError(t, srv.Up())
	resp, err := c.Complete(context.Background(), ratingRequest(t, true))
	require.NoError(t, err)
	require.Equal(t, 1, resp.Attempts)
}

func TestCompleteRetriesDroppedConnection(t *testing.T) {
	c, srv := newChat(t, nil)
	srv.DropNext(1)
	resp, err := c.Complete(context.Background(), ratingRequest(t, true))
	require.NoError(t, err)
	require.Equal(t, 2, resp.Attempts)
	require.Equal(t, 2, srv.ChatRequests())
}

func TestCompleteBadOutput(t *testing.T) {
	tests := []struct {
		name      string
		junk      providertest.Junk
		responder providertest.Responder
		jsonMode  bool
		errSubstr string
		content   bool // the response still carries the content and usage
	}{
		{name: "prose in JSON mode", junk: providertest.JunkContent, jsonMode: true, errSubstr: "no JSON object", content: true},
		{name: "HTML page", junk: providertest.JunkBody, jsonMode: true, errSubstr: "not a chat completion"},
		{name: "no choices", junk: providertest.JunkNoChoices, jsonMode: true, errSubstr: "no choices"},
		{name: "empty content", responder: providertest.Fixed(""), errSubstr: "empty"},
		{name: "JSON cut at the token ceiling", responder: providertest.Fixed(strings.Repeat("word ", 300) + `{"relevance": 1}`),
			jsonMode: true, errSubstr: "cut at the token ceiling", content: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, srv := newChat(t, nil)
			srv.SetJunk(tt.junk)
			srv.SetResponder(tt.responder)
			resp, err := c.Complete(context.Background(), ratingRequest(t, tt.jsonMode))
			require.ErrorIs(t, err, provider.ErrBadOutput)
			require.False(t, bus.IsUnavailable(err), "bad output is not an outage")
			require.ErrorContains(t, err, tt.errSubstr)
			require.Equal(t, 1, resp.Attempts, "bad output costs tokens: not retried")
			if tt.content {
				require.NotEmpty(t, resp.Content)
				require.Positive(t, resp.Usage.TotalTokens)
			}
		})
	}
}

func TestCompleteTextModeAcceptsProse(t *testing.T) {
	c, srv := newChat(t, nil)
	srv.SetJunk(providertest.JunkContent)
	resp, err := c.Complete(context.Background(), ratingRequest(t, false))
	require.NoError(t, err)
	require.Contains(t, resp.Content, "eight out of ten")
	require.Nil(t, resp.JSON)
}

func TestCompleteRejected(t *testing.T) {
	tests := []struct {
		name   string
		setup  func(*providertest.Server, *provider.Options)
		status int
	}{
		{"400", func(s *providertest.Server, _ *provider.Options) { s.FailNext(1, 400, "") }, 400},
		{"wrong API key", func(s *providertest.Server, o *provider.Options) { s.SetAPIKey("right"); o.APIKey = "wrong" }, 401},
		{"wrong path", func(s *providertest.Server, o *provider.Options) {
			o.BaseURL = strings.TrimSuffix(s.URL, "/v1") + "/nope"
		}, 404},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := providertest.New(t)
			opts := provider.Options{BaseURL: srv.URL, Model: "m"}
			tt.setup(srv, &opts)
			c, err := provider.NewChat(opts)
			require.NoError(t, err)
			resp, err := c.Complete(context.Background(), ratingRequest(t, true))
			require.ErrorIs(t, err, provider.ErrRejected)
			require.False(t, bus.IsUnavailable(err))
			var api *provider.APIError
			require.ErrorAs(t, err, &api)
			require.Equal(t, tt.status, api.StatusCode)
			require.Equal(t, 1, resp.Attempts, "a rejected request is not retried")
		})
	}
}

func TestCompleteCallerCancelIsNotAnOutage(t *testing.T) {
	c, srv := newChat(t, nil)
	srv.SetLatency(5 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err := c.Complete(ctx, ratingRequest(t, true))
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.NotErrorIs(t, err, provider.ErrUnavailable)
	require.False(t, bus.IsUnavailable(err))
}

func TestCompleteRateLimit(t *testing.T) {
	const calls, rps = 15, 5
	c, srv := newChat(t, func(o *provider.Options) { o.MaxRPS = rps; o.Timeout = 10 * time.Second })
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, calls)
	for range calls {
		wg.Go(func() {
			_, err := c.Complete(context.Background(), ratingRequest(t, true))
			errs <- err
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	// By the limiter's definition (rate 5/s, burst 1), the 15th request
	// cannot start before 14/5 s.
	require.GreaterOrEqual(t, elapsed, (calls-1)*time.Second/rps)
	// And no one-second window at the server saw more than rps+1.
	times := srv.RequestTimes()
	require.Len(t, times, calls)
	for i := range times {
		n := 0
		for _, u := range times[i:] {
			if u.Sub(times[i]) < time.Second {
				n++
			}
		}
		require.LessOrEqual(t, n, rps+1, "burst at request %d", i)
	}
}

func TestCompleteRateLimitBeyondDeadlineFailsAtOnce(t *testing.T) {
	c, _ := newChat(t, func(o *provider.Options) { o.MaxRPS = 0.5; o.Timeout = time.Second })
	_, err := c.Complete(context.Background(), ratingRequest(t, true))
	require.NoError(t, err)
	start := time.Now()
	_, err = c.Complete(context.Background(), ratingRequest(t, true))
	require.ErrorIs(t, err, provider.ErrUnavailable)
	require.ErrorContains(t, err, "client rate limit")
	require.Less(t, time.Since(start), 500*time.Millisecond, "the limiter's 2 s wait was not refused at once")
}

func TestCompleteConcurrentCallsOverlap(t *testing.T) {
	const calls, latency = 16, 200 * time.Millisecond
	c, srv := newChat(t, nil)
	srv.SetLatency(latency)
	start := time.Now()
	var wg sync.WaitGroup
	for range calls {
		wg.Go(func() {
			_, err := c.Complete(context.Background(), ratingRequest(t, true))
			require.NoError(t, err)
		})
	}
	wg.Wait()
	// Not a speed claim: calls in series would take 16 × 200 ms.
	require.Less(t, time.Since(start), calls*latency/4)
}

func TestCompleteAzureHeaderAndDeploymentURL(t *testing.T) {
	srv := providertest.New(t)
	srv.SetAPIKey("azure-key")
	// Resolve the Azure host name to the test server.
	addr := strings.TrimSuffix(strings.TrimPrefix(srv.URL, "http://"), "/v1")
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.DialContext = func(ctx context.Context, network, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	}
	c, err := provider.NewChat(provider.Options{
		BaseURL:    "http://myres.openai.azure.com/openai/deployments/gpt-4o?api-version=2024-10-21",
		Model:      "gpt-4o",
		APIKey:     "azure-key",
		HTTPClient: &http.Client{Transport: tr},
	})
	require.NoError(t, err)
	_, err = c.Complete(context.Background(), ratingRequest(t, true))
	require.NoError(t, err)
	require.Equal(t, "azure-key", srv.LastHeader().Get("api-key"))
	require.Empty(t, srv.LastHeader().Get("Authorization"))
	require.Equal(t, "/openai/deployments/gpt-4o/chat/completions?api-version=2024-10-21", srv.LastURL())
}

func TestNewChatValidates(t *testing.T) {
	tests := []struct {
		name string
		opts provider.Options
		want string
	}{
		{"no base URL", provider.Options{Model: "m"}, "base URL is required"},
		{"no model", provider.Options{BaseURL: "http://localhost:8000/v1"}, "model is required"},
		{"bad scheme", provider.Options{BaseURL: "ftp://x/v1", Model: "m"}, "want http:// or https://"},
		{"credentials in URL", provider.Options{BaseURL: "https://u:p@x/v1", Model: "m"}, "credentials"},
		{"negative timeout", provider.Options{BaseURL: "http://x/v1", Model: "m", Timeout: -1}, "negative"},
		{"negative rate", provider.Options{BaseURL: "http://x/v1", Model: "m", MaxRPS: -1}, "requests per second"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := provider.NewChat(tt.opts)
			require.ErrorContains(t, err, tt.want)
		})
	}
}

func TestCompleteInvalidSchemaIsRejectedBeforeSending(t *testing.T) {
	c, srv := newChat(t, nil)
	req := ratingRequest(t, true)
	req.Schema = &provider.Schema{Name: "x", Schema: json.RawMessage(`[1]`)}
	_, err := c.Complete(context.Background(), req)
	require.ErrorIs(t, err, provider.ErrRejected)
	require.Zero(t, srv.Requests())
	require.False(t, errors.Is(err, provider.ErrUnavailable))
}

// TestCompleteToolCalls: tools offered go to the server as they are; an
// answer that only calls tools (null content) is an answer, its calls in
// order; without tools offered no call comes back.
func TestCompleteToolCalls(t *testing.T) {
	c, srv := newChat(t, nil)
	srv.SetResponder(providertest.Fixed(""))
	srv.SetToolCaller(func(req providertest.ChatRequest) []providertest.ToolCall {
		var out []providertest.ToolCall
		for _, tl := range req.Tools {
			out = append(out, providertest.ToolCall{Name: tl.Function.Name, Arguments: `{"q":"invoices"}`})
		}
		return out
	})
	tool := func(name string) json.RawMessage {
		return json.RawMessage(`{"type":"function","function":{"name":"` + name + `","parameters":{"type":"object"}}}`)
	}
	conv := chat.New("").Append(chat.System("Use the tools."), chat.User("Find my invoices"))
	resp, err := c.Complete(context.Background(), provider.ChatRequest{OpenAIRequest: conv.OpenAIRequest(), Tools: []json.RawMessage{tool("search_docs"), tool("open_ticket")}})
	require.NoError(t, err)
	require.Empty(t, resp.Content)
	require.Equal(t, "tool_calls", resp.FinishReason)
	require.Equal(t, []provider.ToolCall{
		{ID: "call_000001_0", Name: "search_docs", Arguments: `{"q":"invoices"}`},
		{ID: "call_000001_1", Name: "open_ticket", Arguments: `{"q":"invoices"}`},
	}, resp.ToolCalls)
	require.Len(t, srv.LastChat().Tools, 2)
	require.Equal(t, "search_docs", srv.LastChat().Tools[0].Function.Name)

	// No tools offered: an empty answer is unusable, as before.
	_, err = c.Complete(context.Background(), provider.ChatRequest{OpenAIRequest: conv.OpenAIRequest()})
	require.ErrorIs(t, err, provider.ErrBadOutput)
}
