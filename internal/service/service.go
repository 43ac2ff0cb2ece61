package service

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/agentq/agentq/internal/bus"
)

// Defaults of Options.
const (
	DefaultVersion     = "1.0.0"
	DefaultTimeout     = 2 * time.Second
	DefaultConcurrency = 16
)

// Validator checks a request body against a named JSON Schema.
// *schemas.Registry satisfies it. If it also has a Has(name string) bool
// method, AddEndpoint uses it to refuse an unknown schema at startup.
type Validator interface {
	Validate(name string, data []byte) error
}

// Options configures a Service. Zero values take the documented defaults.
type Options struct {
	// Name is the micro service name, e.g. "search"; letters, digits, "-"
	// and "_". Required.
	Name string
	// Version is the SemVer version micro reports. Default "1.0.0".
	Version string
	// Description is reported by micro's INFO verb.
	Description string
	// QueueGroup is the queue group of every endpoint, shared by all copies
	// so each request is answered by one of them. Default Name.
	QueueGroup string
	// Timeout bounds each request, from taking it off the subscription
	// (before waiting for a Concurrency slot) to the reply: the handler's
	// context ends then, and a timeout error is replied even if the
	// handler has not returned. Default 2s.
	Timeout time.Duration
	// Concurrency bounds the handlers running at once per endpoint. A
	// handler that ignores its context keeps its slot until it returns
	// (its client has had a timeout reply at Timeout). Default 16.
	Concurrency int
	// Queue bounds the requests per endpoint that wait for a slot, each
	// until its Timeout (then it is answered timeout). A request that
	// finds the queue full is answered overloaded at once: taking
	// requests off the subscription never waits, so handlers that
	// overstay never keep other requests from an answer. Default
	// 4 × Concurrency; negative: none wait.
	Queue int
	// Validator validates request bodies against each endpoint's schema.
	// Nil: requests are not validated.
	Validator Validator
	// Log receives one line per failed request and per service fault.
	Log zerolog.Logger
	// Registry receives the request metrics. Nil: metrics are kept but not
	// exported.
	Registry prometheus.Registerer
}

func (o *Options) defaults() error {
	if o.Name == "" {
		return errors.New("service: Name is required")
	}
	if o.Version == "" {
		o.Version = DefaultVersion
	}
	if o.QueueGroup == "" {
		o.QueueGroup = o.Name
	}
	switch {
	case o.Timeout < 0:
		return fmt.Errorf("service %s: Timeout %s is negative", o.Name, o.Timeout)
	case o.Timeout == 0:
		o.Timeout = DefaultTimeout
	}
	switch {
	case o.Concurrency < 0:
		return fmt.Errorf("service %s: Concurrency %d is negative", o.Name, o.Concurrency)
	case o.Concurrency == 0:
		o.Concurrency = DefaultConcurrency
	}
	switch {
	case o.Queue < 0:
		o.Queue = 0
	case o.Queue == 0:
		o.Queue = 4 * o.Concurrency
	}
	return nil
}

// Request is one request as a Handler sees it.
type Request struct {
	// Tenant is the subject's last token, already checked with
	// bus.ValidTenant.
	Tenant string
	// Subject is the full request subject, e.g. "search.prompts.acme".
	Subject string
	// Data is the request body, valid against the endpoint's schema when
	// the service has a Validator.
	Data []byte
	// Header holds the request's NATS headers; it may be nil.
	Header nats.Header
}

// Handler answers a request. Its value is marshalled as the JSON reply
// (return json.RawMessage for a body already encoded). Its error decides
// the error reply: an *Error (possibly wrapped) is replied as it is; an
// error from ctx's deadline becomes code timeout; an error marked
// bus.Unavailable becomes code unavailable; any other error becomes code
// internal with a generic message, and the real error is only logged.
// ctx ends at the service's Timeout; by then a timeout reply has been sent
// and whatever the handler returns later is dropped.
type Handler func(ctx context.Context, r Request) (any, error)

// Service is one instance of a micro service. Its methods are safe for
// concurrent use.
type Service struct {
	nc      *nats.Conn
	micro   micro.Service
	opts    Options
	log     zerolog.Logger
	metrics *metrics

	// mu guards stopped and the Add calls of inflight, so Stop's Wait
	// never races an Add.
	mu       sync.RWMutex
	stopped  bool
	inflight sync.WaitGroup

	// epMu guards endpoints. It is never held while calling micro: micro
	// calls stats with its own lock held.
	epMu      sync.Mutex
	endpoints map[string]*endpoint // by name, for the STATS verb
}

// New registers a micro service on nc. Set nc's closed and error handlers
// before calling New (micro relies on them). Stop it with Stop.
func New(nc *nats.Conn, opts Options) (*Service, error) {
	if err := opts.defaults(); err != nil {
		return nil, err
	}
	s := &Service{
		nc:        nc,
		opts:      opts,
		log:       opts.Log.With().Str("service", opts.Name).Logger(),
		metrics:   newMetrics(opts.Registry),
		endpoints: map[string]*endpoint{},
	}
	svc, err := micro.AddService(nc, micro.Config{
		Name:         opts.Name,
		Version:      opts.Version,
		Description:  opts.Description,
		QueueGroup:   opts.QueueGroup,
		StatsHandler: s.stats,
		ErrorHandler: func(_ micro.Service, e *micro.NATSError) {
			// Slow consumer, mostly: requests were dropped and their
			// clients will time out.
			s.log.Error().Str("subject", e.Subject).Str("error", e.Description).Msg("service subscription error")
		},
	})
	if err != nil {
		return nil, fmt.Errorf("service %s: %w", opts.Name, err)
	}
	s.micro = svc
	return s, nil
}

// endpoint is one served subject prefix.
type endpoint struct {
	s       *Service
	name    string
	schema  string
	handler Handler
	log     zerolog.Logger // carries service and endpoint
	metrics *endpointMetrics
	slots   chan struct{} // handlers running
	tickets chan struct{} // requests taken: running or waiting for a slot
}

// AddEndpoint serves subjectPrefix.* (e.g. "search.prompts" serves
// "search.prompts.*") under the endpoint name (letters, digits, "-", "_").
// Each request's body is validated against requestSchema when the service
// has a Validator and requestSchema is not empty, then handed to h. When
// AddEndpoint returns, the server routes requests to the endpoint.
func (s *Service) AddEndpoint(name, subjectPrefix, requestSchema string, h Handler) error {
	if h == nil {
		return fmt.Errorf("service %s: endpoint %s: nil handler", s.opts.Name, name)
	}
	if subjectPrefix == "" || strings.ContainsAny(subjectPrefix, "*> \t\r\n") || strings.HasSuffix(subjectPrefix, ".") {
		return fmt.Errorf("service %s: endpoint %s: subject prefix %q must be literal tokens", s.opts.Name, name, subjectPrefix)
	}
	if requestSchema != "" && s.opts.Validator != nil {
		if has, ok := s.opts.Validator.(interface{ Has(string) bool }); ok && !has.Has(requestSchema) {
			return fmt.Errorf("service %s: endpoint %s: no schema %q", s.opts.Name, name, requestSchema)
		}
	}
	ep := &endpoint{
		s:       s,
		name:    name,
		schema:  requestSchema,
		handler: h,
		log:     s.log.With().Str("endpoint", name).Logger(),
		metrics: s.metrics.forEndpoint(s.opts.Name, name),
		slots:   make(chan struct{}, s.opts.Concurrency),
		tickets: make(chan struct{}, s.opts.Concurrency+s.opts.Queue),
	}
	s.mu.RLock()
	stopped := s.stopped
	s.mu.RUnlock()
	if stopped {
		return fmt.Errorf("service %s: endpoint %s: service stopped", s.opts.Name, name)
	}
	s.epMu.Lock()
	if _, dup := s.endpoints[name]; dup {
		s.epMu.Unlock()
		return fmt.Errorf("service %s: endpoint %s added twice", s.opts.Name, name)
	}
	s.endpoints[name] = ep // reserves the name
	s.epMu.Unlock()
	if err := s.micro.AddEndpoint(name, micro.HandlerFunc(ep.dispatch), micro.WithEndpointSubject(subjectPrefix+".*")); err != nil {
		s.epMu.Lock()
		delete(s.endpoints, name)
		s.epMu.Unlock()
		return fmt.Errorf("service %s: endpoint %s: %w", s.opts.Name, name, err)
	}
	// The subscription is sent asynchronously; a round trip makes sure the
	// server routes requests to the endpoint once AddEndpoint returns.
	if err := s.nc.Flush(); err != nil {
		return fmt.Errorf("service %s: endpoint %s: flush subscription: %w", s.opts.Name, name, err)
	}
	return nil
}

// Stop stops taking requests and waits, at most Timeout and a second, for
// the handlers in hand to return; their clients have had a reply by the
// end of Timeout either way. Requests already buffered when Stop is called
// are still served while micro drains the subscriptions; draining the
// connection (nc.Drain) waits for those.
func (s *Service) Stop() error {
	s.mu.Lock()
	if s.stopped {
		s.mu.Unlock()
		return nil
	}
	s.stopped = true
	s.mu.Unlock()

	err := s.micro.Stop()
	done := make(chan struct{})
	go func() { s.inflight.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(s.opts.Timeout + time.Second):
		s.log.Warn().Dur("waited", s.opts.Timeout+time.Second).Msg("handlers still running at stop; they ignore their context")
	}
	if err != nil {
		return fmt.Errorf("service %s: stop: %w", s.opts.Name, err)
	}
	return nil
}

// stats is micro's StatsHandler: replies by code, since micro's own error
// count does not see replies sent outside its request.
func (s *Service) stats(e *micro.Endpoint) any {
	s.epMu.Lock()
	ep := s.endpoints[e.Name]
	s.epMu.Unlock()
	if ep == nil {
		return nil
	}
	return map[string]any{"replies": ep.metrics.snapshot()}
}

// dispatch runs on micro's subscription goroutine, which must never wait:
// while it does, no request of the endpoint is answered, not even with an
// error. It hands the request to a goroutine of its own, which waits for
// one of Concurrency slots until the request's deadline; when
// Concurrency+Queue requests are taken already, it answers overloaded at
// once instead.
func (ep *endpoint) dispatch(req micro.Request) {
	// micro.Request hides the *nats.Msg; rebuilding the parts we need
	// lets the reply be sent from another goroutine without touching the
	// request's unsynchronised error field, which micro reads when
	// dispatch returns.
	msg := &nats.Msg{Subject: req.Subject(), Reply: req.Reply(), Data: req.Data(), Header: nats.Header(req.Headers())}
	start := time.Now()

	ep.s.mu.RLock()
	if ep.s.stopped {
		// Draining after Stop: serve in line, so nc.Drain waits for it.
		ep.s.mu.RUnlock()
		ep.serve(msg, start)
		return
	}
	select {
	case ep.tickets <- struct{}{}:
	default:
		ep.s.mu.RUnlock()
		x := ep.exchange(msg, start)
		x.logger(zerolog.WarnLevel).Int("concurrency", ep.s.opts.Concurrency).Int("queue", ep.s.opts.Queue).Msg("overloaded")
		x.replyError(Errorf(CodeOverloaded, "the service is busy: %d requests running and %d waiting; retry later", ep.s.opts.Concurrency, ep.s.opts.Queue))
		return
	}
	ep.s.inflight.Add(1)
	ep.s.mu.RUnlock()

	go func() {
		defer ep.s.inflight.Done()
		defer func() { <-ep.tickets }()
		ep.serve(msg, start)
	}()
}

// exchange is one request being answered; reply sends at most one reply.
type exchange struct {
	ep      *endpoint
	msg     *nats.Msg
	tenant  string
	start   time.Time
	replied atomic.Bool
}

func (ep *endpoint) exchange(msg *nats.Msg, start time.Time) *exchange {
	x := &exchange{ep: ep, msg: msg, start: start}
	x.tenant = msg.Subject[strings.LastIndexByte(msg.Subject, '.')+1:]
	return x
}

func (ep *endpoint) serve(msg *nats.Msg, start time.Time) {
	x := ep.exchange(msg, start)

	if !bus.ValidTenant(x.tenant) {
		x.logger(zerolog.DebugLevel).Msg("bad tenant token")
		x.replyError(BadRequest("tenant %q in subject does not match [a-z0-9_-]{1,64}", oneLine(x.tenant, 80)))
		return
	}
	if v := ep.s.opts.Validator; v != nil && ep.schema != "" {
		if err := v.Validate(ep.schema, msg.Data); err != nil {
			x.logger(zerolog.DebugLevel).Err(err).Msg("request does not match its schema")
			x.replyError(BadRequest("%s", oneLine(err.Error(), maxMessage)))
			return
		}
	}

	// The deadline counts from dispatch, so time spent waiting for a slot
	// comes out of the handler's share, not the client's patience.
	ctx, cancel := context.WithDeadline(context.Background(), start.Add(ep.s.opts.Timeout))
	defer cancel()
	select {
	case ep.slots <- struct{}{}:
		defer func() { <-ep.slots }()
	case <-ctx.Done():
		x.logger(zerolog.WarnLevel).Dur("timeout", ep.s.opts.Timeout).Msg("request timed out waiting for a slot")
		x.replyError(Errorf(CodeTimeout, "no answer within %s: the service is busy", ep.s.opts.Timeout))
		return
	}
	// Answer at the deadline even if the handler ignores ctx.
	stopTimer := context.AfterFunc(ctx, func() {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) &&
			x.replyError(Errorf(CodeTimeout, "no answer within %s", ep.s.opts.Timeout)) {
			x.logger(zerolog.WarnLevel).Dur("timeout", ep.s.opts.Timeout).Msg("request timed out")
		}
	})
	v, err := ep.call(ctx, Request{Tenant: x.tenant, Subject: msg.Subject, Data: msg.Data, Header: msg.Header})
	stopTimer()

	if x.replied.Load() {
		// The timeout reply went out. A handler that gave up on ctx has
		// nothing more to say; one that ignored ctx gets a line.
		if !errors.Is(err, context.DeadlineExceeded) {
			x.logger(zerolog.WarnLevel).Err(err).Dur("took", time.Since(start)).Msg("handler returned after the timeout reply; result dropped")
		}
		return
	}
	if err != nil {
		x.replyError(x.classify(err))
		return
	}
	body, err := json.Marshal(v)
	if err != nil {
		x.replyError(x.classify(fmt.Errorf("marshal reply %T: %w", v, err)))
		return
	}
	x.reply(codeOK, &nats.Msg{Data: body})
}

// panicError carries a recovered panic out of the handler.
type panicError struct {
	value any
	stack []byte
}

func (p *panicError) Error() string { return fmt.Sprintf("handler panic: %v", p.value) }

// call runs the handler, turning a panic into an error.
func (ep *endpoint) call(ctx context.Context, r Request) (v any, err error) {
	defer func() {
		if p := recover(); p != nil {
			v, err = nil, &panicError{value: p, stack: debug.Stack()}
		}
	}()
	return ep.handler(ctx, r)
}

// classify maps a handler's error to the reply, logging what the client
// is not told.
func (x *exchange) classify(err error) *Error {
	var se *Error
	var pe *panicError
	switch {
	case errors.As(err, &se):
		lvl := zerolog.DebugLevel
		if se.Code == CodeInternal || se.Code == CodeUnavailable {
			lvl = zerolog.WarnLevel
		}
		x.logger(lvl).Str("code", se.Code).Err(err).Msg("request failed")
		return se
	case errors.Is(err, context.DeadlineExceeded):
		x.logger(zerolog.WarnLevel).Err(err).Msg("request timed out")
		return Errorf(CodeTimeout, "no answer within %s", x.ep.s.opts.Timeout)
	case bus.IsUnavailable(err):
		x.logger(zerolog.WarnLevel).Err(err).Msg("request failed: dependency unavailable")
		return Unavailable("a dependency of the service is unavailable; retry later")
	case errors.As(err, &pe):
		ref := reference()
		x.logger(zerolog.ErrorLevel).Str("ref", ref).Interface("panic", pe.value).Str("stack", string(pe.stack)).Msg("handler panicked")
		return Errorf(CodeInternal, "internal error (ref %s)", ref)
	default:
		ref := reference()
		x.logger(zerolog.ErrorLevel).Str("ref", ref).Err(err).Msg("request failed")
		return Errorf(CodeInternal, "internal error (ref %s)", ref)
	}
}

// reference is a short random id put in an internal error's message and
// its log line, so an operator can find the real error.
func reference() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// replyError sends {"error":{...}} with micro's error headers. It reports
// whether this was the request's reply.
func (x *exchange) replyError(e *Error) bool {
	return x.reply(x.errorMsg(e))
}

// errorMsg is the reply of e, and its code.
func (x *exchange) errorMsg(e *Error) (string, *nats.Msg) {
	body, err := json.Marshal(struct {
		Error *Error `json:"error"`
	}{e})
	if err != nil { // cannot happen: two strings
		body = []byte(`{"error":{"code":"internal","message":"internal error"}}`)
	}
	return e.Code, &nats.Msg{
		Data: body,
		Header: nats.Header{
			micro.ErrorHeader:     {oneLine(e.Code+": "+e.Message, maxMessage)},
			micro.ErrorCodeHeader: {httpStatus(e.Code)},
		},
	}
}

// reply sends out unless a reply was sent already, and counts it.
func (x *exchange) reply(code string, out *nats.Msg) bool {
	if !x.replied.CompareAndSwap(false, true) {
		return false
	}
	if limit := x.ep.s.nc.MaxPayload(); int64(len(out.Data)) > limit-maxHeaders {
		// NATS would refuse it, and the client would wait for its own
		// timeout: say so instead.
		x.logger(zerolog.WarnLevel).Int("bytes", len(out.Data)).Int64("max_payload", limit).Msg("reply too large")
		code, out = x.errorMsg(Errorf(CodeTooLarge, "the reply is %d bytes, over the %d bytes NATS carries", len(out.Data), limit-maxHeaders))
	}
	// Count first, so the count is there by the time the client has its
	// reply.
	x.ep.metrics.observe(code, time.Since(x.start).Seconds())
	if x.msg.Reply != "" {
		out.Subject = x.msg.Reply
		if err := x.ep.s.nc.PublishMsg(out); err != nil {
			x.logger(zerolog.WarnLevel).Err(err).Str("code", code).Msg("reply not sent")
		}
	}
	return true
}

// maxHeaders is room kept for a reply's headers under the max payload:
// error replies carry two, of at most maxMessage bytes.
const maxHeaders = 2 * maxMessage

// logger returns an event at lvl carrying service, endpoint and tenant.
func (x *exchange) logger(lvl zerolog.Level) *zerolog.Event {
	return x.ep.log.WithLevel(lvl).Str("tenant", x.tenant).Str("subject", x.msg.Subject)
}
