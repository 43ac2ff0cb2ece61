// Package providertest is a local OpenAI-compatible server for tests of
// code that calls an LLM or embeddings provider. It speaks the real HTTP
// protocol, POST /v1/chat/completions and POST /v1/embeddings (and
// Azure's /openai/deployments/NAME/... paths) with OpenAI's JSON shapes (id, object, created, model, choices with message
// and finish_reason, usage; data with embedding and index; errors as
// {"error": {"message", "type", "param", "code"}}), and can be told at any
// time, from any goroutine, to misbehave the ways real providers do:
//
//	srv := providertest.New(t)
//	llm, _ := provider.NewChat(provider.Options{BaseURL: srv.URL, Model: "m"})
//	srv.SetLatency(200 * time.Millisecond)      // slow
//	srv.FailNext(1, 429, "1")                   // rate-limited once, Retry-After: 1
//	srv.SetRateLimit(5, 1)                      // 429 beyond 5 requests/s
//	srv.SetFailing(503, "")                     // overloaded until SetFailing(0, "")
//	srv.Down(); srv.Up()                        // connection refused, then back
//	srv.DropNext(1)                             // connection closed without an answer
//	srv.SetJunk(providertest.JunkContent)       // prose where JSON was asked
//	srv.SetRejectResponseFormat(true)           // 400 on response_format, like older llama.cpp
//	srv.SetResponder(providertest.NaiveRater)   // decide the content from the request
//	srv.SetToolCaller(f)                        // call some of the tools a request offers
//	srv.SetContextResponder(f)                  // ... with the request's context (cut off when the client gives up)
//	srv.SetDimension(16)                        // embeddings' size; change it mid-test
//
// The model is deterministic: the content comes from the Responder
// (DefaultResponder unless set), usage counts whitespace-separated words
// (SetUsage overrides it), and an embedding is Vector(text, dimension), a
// hash of the text, so tests can compute what to expect. Counters
// (Requests, ChatRequests, EmbeddingRequests, Answered, EmbeddingBatches,
// RequestTimes) and the last request (LastBody, LastChat, LastHeader) let
// tests check what reached the server.
//
// Requests are checked like a real server checks them: a chat request
// needs a model and messages, a response_format must be text, json_object
// (with "json" somewhere in the messages, as OpenAI insists) or json_schema
// with a name and a schema, embeddings need a model and non-empty inputs;
// otherwise the answer is a 400.
package providertest

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"golang.org/x/time/rate"
)

// Server is a running OpenAI-compatible test server. Its methods are safe
// for concurrent use, also while requests are in flight.
type Server struct {
	// URL is the API root to configure clients with, ending in /v1, for
	// example http://127.0.0.1:41234/v1. It stays the same across Down and
	// Up.
	URL string

	addr string

	mu        sync.Mutex
	srv       *http.Server // nil while down
	ln        net.Listener // srv's; closed by Down even before srv.Serve has taken it
	serving   sync.WaitGroup
	closed    bool
	latency   time.Duration
	failNext  []failure
	failing   *failure
	dropNext  int
	limiter   *rate.Limiter
	junk      Junk
	responder Responder
	ctxResp   ContextResponder
	tools     ToolCaller
	usage     [2]int
	rejectRF  bool
	apiKey    string
	dimension int
	reverse   bool
	maxBatch  int
	seq       int

	requests, chats, embeds int
	answered                map[int]int
	batches                 []int
	times                   []time.Time
	lastBody                []byte
	lastChat                ChatRequest
	lastHeader              http.Header
	lastURL                 string
}

type failure struct {
	status     int
	retryAfter string
}

// Junk selects a way to answer with rubbish.
type Junk int

const (
	// JunkOff answers properly.
	JunkOff Junk = iota
	// JunkContent answers chat requests with a well-formed completion
	// whose content is prose with no JSON in it.
	JunkContent
	// JunkBody answers every request with 200 and an HTML page, as a
	// misconfigured proxy does.
	JunkBody
	// JunkNoChoices answers chat requests with a completion whose choices
	// are empty.
	JunkNoChoices
)

// DefaultDimension is the size of embeddings until SetDimension.
const DefaultDimension = 8

// New starts a server on a free loopback port and stops it when the test
// ends.
func New(t testing.TB) *Server {
	t.Helper()
	s, err := Listen("127.0.0.1:0")
	if err != nil {
		t.Fatalf("providertest: %v", err)
	}
	t.Cleanup(s.Close)
	return s
}

// Listen starts a server on addr (host:port; port 0 picks a free one)
// outside a test, as `agentq testmodel` does; Close stops it. URL names
// the address it listens on, 127.0.0.1 for an unspecified host.
func Listen(addr string) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", addr, err)
	}
	s := &Server{
		addr:      ln.Addr().String(),
		responder: DefaultResponder,
		dimension: DefaultDimension,
		answered:  map[int]int{},
	}
	host, port, _ := net.SplitHostPort(s.addr)
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	s.URL = "http://" + net.JoinHostPort(host, port) + "/v1"
	s.serve(ln)
	return s, nil
}

// serve starts an http.Server on ln; s.mu must be held or s unshared.
func (s *Server) serve(ln net.Listener) {
	srv := &http.Server{Handler: http.HandlerFunc(s.handle), ReadHeaderTimeout: 10 * time.Second}
	s.srv = srv
	s.ln = ln
	s.serving.Add(1)
	go func() {
		defer s.serving.Done()
		_ = srv.Serve(ln)
	}()
}

// Close stops the server and waits for it. Tests need not call it: New
// registers it with t.Cleanup.
func (s *Server) Close() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.Down()
	s.serving.Wait()
}

// Down closes the listener and every open connection: clients get
// "connection refused" until Up. Requests in flight are cut off.
func (s *Server) Down() {
	s.mu.Lock()
	srv, ln := s.srv, s.ln
	s.srv, s.ln = nil, nil
	s.mu.Unlock()
	if srv != nil {
		// Closing the listener first refuses connections at once, even if
		// the serving goroutine has not started accepting yet.
		_ = ln.Close()
		_ = srv.Close()
	}
}

// Up listens again on the same address after Down. It reports an error if
// the port was taken meanwhile.
func (s *Server) Up() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errors.New("providertest: server closed")
	}
	if s.srv != nil {
		return nil
	}
	ln, err := net.Listen("tcp", s.addr)
	if err != nil {
		return err
	}
	s.serve(ln)
	return nil
}

// SetLatency delays every answer by d (failures included), or until the
// client gives up.
func (s *Server) SetLatency(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.latency = d
}

// FailNext answers the next n requests with status and an OpenAI error
// body, with a Retry-After header when retryAfter is not empty (seconds,
// "1", or an HTTP date). Calls queue: FailNext(1, 503, "") then
// FailNext(1, 429, "2") fails the next two requests in that order.
func (s *Server) FailNext(n, status int, retryAfter string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for range n {
		s.failNext = append(s.failNext, failure{status, retryAfter})
	}
}

// SetFailing answers every request with status (and Retry-After, if not
// empty) until SetFailing(0, ""). FailNext takes precedence.
func (s *Server) SetFailing(status int, retryAfter string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if status == 0 {
		s.failing = nil
		return
	}
	s.failing = &failure{status, retryAfter}
}

// DropNext closes the connection of the next n requests without
// answering: the client sees the connection reset or EOF.
func (s *Server) DropNext(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dropNext += n
}

// SetRateLimit answers 429 with a Retry-After of the seconds until the next
// free slot (at least 1) to requests beyond perSecond, with bursts of
// burst. Zero perSecond lifts the limit.
func (s *Server) SetRateLimit(perSecond float64, burst int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if perSecond <= 0 {
		s.limiter = nil
		return
	}
	s.limiter = rate.NewLimiter(rate.Limit(perSecond), max(burst, 1))
}

// SetJunk makes answers rubbish of kind j; JunkOff restores them.
func (s *Server) SetJunk(j Junk) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.junk = j
}

// SetResponder makes r decide the content of chat answers; nil restores
// DefaultResponder. r runs on the server's goroutines, outside its lock.
func (s *Server) SetResponder(r Responder) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r == nil {
		r = DefaultResponder
	}
	s.responder = r
}

// SetContextResponder makes r decide the content of chat answers, with
// the request's context: it is done when the client gives up or the
// connection is cut, as a model's work stops when nobody waits for it. It
// takes precedence over SetResponder; nil removes it.
func (s *Server) SetContextResponder(r ContextResponder) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ctxResp = r
}

// ToolCaller decides the tools a chat answer calls, for requests that
// offer tools; nil or none: the answer calls no tool.
type ToolCaller func(ChatRequest) []ToolCall

// SetToolCaller makes c decide the tool calls of answers to requests that
// offer tools (an answer that calls tools has finish_reason tool_calls,
// and null content when the responder gives none); nil calls none.
func (s *Server) SetToolCaller(c ToolCaller) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tools = c
}

// SetUsage fixes the usage reported by chat answers. Both zero restores
// word counts; a negative prompt count leaves usage out of the answer, as
// some servers do.
func (s *Server) SetUsage(prompt, completion int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.usage = [2]int{prompt, completion}
}

// SetRejectResponseFormat makes chat requests that carry response_format
// fail with 400 "response_format is not supported", as older llama.cpp
// builds and some vLLM models do.
func (s *Server) SetRejectResponseFormat(on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rejectRF = on
}

// SetAPIKey makes the server require the key, as "Authorization: Bearer
// KEY" or an api-key header, answering 401 otherwise. Empty accepts
// anything.
func (s *Server) SetAPIKey(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.apiKey = key
}

// SetDimension sets the size of embeddings (DefaultDimension at first).
// A request's dimensions parameter overrides it for that request.
func (s *Server) SetDimension(d int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dimension = d
}

// SetReverseOrder lists embeddings in reverse order (each still with its
// index), as servers that embed in parallel may.
func (s *Server) SetReverseOrder(on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reverse = on
}

// SetMaxBatch answers 400 to embeddings requests with more than n inputs;
// 0 lifts the limit.
func (s *Server) SetMaxBatch(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.maxBatch = n
}

// Requests is the number of requests received, whatever their path or
// answer.
func (s *Server) Requests() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.requests
}

// ChatRequests is the number of requests received on
// /v1/chat/completions, whatever their answer.
func (s *Server) ChatRequests() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.chats
}

// EmbeddingRequests is the number of requests received on /v1/embeddings,
// whatever their answer.
func (s *Server) EmbeddingRequests() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.embeds
}

// Answered is the number of answers sent with status (dropped connections
// are not answers).
func (s *Server) Answered(status int) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.answered[status]
}

// EmbeddingBatches lists the number of inputs of each embeddings request
// answered with vectors, in order.
func (s *Server) EmbeddingBatches() []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]int(nil), s.batches...)
}

// RequestTimes lists when each request arrived, in order.
func (s *Server) RequestTimes() []time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]time.Time(nil), s.times...)
}

// LastBody is the body of the last request received.
func (s *Server) LastBody() []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]byte(nil), s.lastBody...)
}

// LastChat is the last chat request received, decoded.
func (s *Server) LastChat() ChatRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lastChat
}

// LastURL is the path and query of the last request received.
func (s *Server) LastURL() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lastURL
}

// LastHeader is the header of the last request received.
func (s *Server) LastHeader() http.Header {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lastHeader.Clone()
}
